//! What the local backend's integration tests share: the rung probe that
//! skips loudly (and fails under `CI=true`), the work dirs' parent, and
//! the backend over them.
// Each test binary uses part of it.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_backend_local::{LocalBackend, LocalConfig, WorkDir};
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::EgressSetup;

/// The init cargo built beside the tests.
pub fn init_program() -> InitProgram {
    InitProgram::new(PathBuf::from(env!("CARGO_BIN_EXE_cordon-local-init")))
}

/// `Some(init)` when `rung` can be held here. Without it: `case` skips
/// loudly, or fails with `CI=true`.
pub fn rung_or_skip(rung: Rung, case: &str) -> Option<InitProgram> {
    let init = init_program();
    let p = cordon_backend_local::probe(rung, init.clone());
    if p.runnable {
        return Some(init);
    }
    cordon_testkit::skip(
        &format!("{case} at the {rung:?} rung"),
        format!("this machine cannot hold it: {}", p.found.join("; ")),
    );
    None
}

/// A parent for the sandboxes' work dirs: not under /tmp (the container
/// rung's /tmp is its own), traversable by the sandbox's init, which binds
/// the work dir as its own uid.
pub fn work_parent(prefix: &str) -> tempfile::TempDir {
    let parent = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    parent
}

/// The storage rule a policy needs at the process rung, whose private
/// temporary directory is on the work dir's volume under `parent` (which
/// `/tmp/` does not cover).
pub fn process_rung_tmp(parent: &Path) -> String {
    format!(
        "      - name: process-rung-tmp\n        when: path.startsWith(\"{}/cordon-volume-\") && mode in [\"read\", \"write\"]\n",
        parent.display()
    )
}

/// The policy `text`, loaded as `name`.
pub fn policy(name: &str, text: &str) -> Arc<Policy> {
    Arc::new(
        Policy::load_str(name, text)
            .map_err(|d| d.render())
            .unwrap(),
    )
}

/// A local backend at `rung` making fresh work dirs under `parent`.
pub fn backend(
    rung: Rung,
    policy: Arc<Policy>,
    parent: &Path,
    init: InitProgram,
    egress: EgressSetup,
) -> Arc<LocalBackend> {
    Arc::new(LocalBackend::new(LocalConfig {
        rung,
        policy,
        env: Deployment::default(),
        work_dir: WorkDir::Fresh {
            parent: parent.to_path_buf(),
        },
        init,
        egress,
    }))
}
