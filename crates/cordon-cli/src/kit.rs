//! What `cordon conformance` and `cordon escape` share when they attack a
//! local backend: a scratch work dir the sandbox's uid owns, a router over
//! that one backend under the kit's policy, and the kit's caller.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use cordon_backend_local::{probe, LocalBackend, LocalConfig, WorkDir, WORK_DIR_ID};
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{CallerContext, Isolation, Router};

/// The init program (this binary) for `rung`, once this machine is known to
/// hold the rung; otherwise why not, naming backend `name`.
pub fn init_for(rung: Rung, name: &str) -> Result<InitProgram, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the cordon binary: {e}"))?;
    let init = InitProgram::new(exe).arg(crate::INIT_ARG);
    let p = probe(rung, init.clone());
    if !p.runnable {
        return Err(format!(
            "backend `{name}` cannot run on this machine: {}; `cordon doctor` shows what is missing",
            p.found.join("; ")
        ));
    }
    Ok(init)
}

/// A directory the sandboxes' uid owns, mode 0700.
pub fn owned_dir(p: &Path) -> std::io::Result<()> {
    std::fs::create_dir(p)?;
    std::os::unix::fs::chown(p, Some(WORK_DIR_ID), Some(WORK_DIR_ID))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))
}

/// A router over the one local backend of `rung`, floor `iso`, under the
/// policy `text` (named `name` in diagnostics), serving `work`.
pub fn router(
    rung: Rung,
    iso: Isolation,
    init: InitProgram,
    name: &str,
    text: &str,
    work: &Path,
) -> Result<Router, String> {
    let policy = Arc::new(Policy::load_str(name, text).map_err(|d| d.render())?);
    let env = Deployment::default();
    let backend = Arc::new(LocalBackend::new(LocalConfig {
        rung,
        policy: policy.clone(),
        env: env.clone(),
        work_dir: WorkDir::Given(work.to_path_buf()),
        init,
    }));
    Router::builder(policy, env)
        .min_isolation(iso)
        .backend(backend)
        .build()
        .map_err(|e| e.to_string())
}

/// The kit's caller: scope `kit`, the thread given, an attested identity in
/// the namespace `kit`.
pub fn caller(kit: &'static str, thread: &'static str) -> CallerContext {
    CallerContext::new(
        move || kit.to_string(),
        move || thread.to_string(),
        || "kit".to_string(),
        move || Identity {
            namespace: kit.into(),
            attested: true,
            ..Identity::default()
        },
    )
}
