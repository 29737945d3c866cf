//! `dispose_scope` from runsc's own listing: a gvisor backend that did
//! not make a sandbox (another process's, or this one restarted) finds it
//! by its pause container's annotations and disposes of it whole. Needs
//! root and `runsc`; skips loudly without, and `CI=true` makes that a
//! failure.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::sync::Arc;
use std::time::Duration;

use cordon_backend_gvisor::{GvisorBackend, GvisorConfig};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, CallerContext, ExecRequest, ExitStatus, Limits, Provenance,
    SandboxSpec,
};

fn runnable() -> Option<cordon_backend_gvisor::runsc::Runsc> {
    let why = match cordon_backend_gvisor::runsc::probe() {
        Ok(r) => return Some(r.clone()),
        Err(u) => u.reason.clone(),
    };
    cordon_testkit::skip("the gvisor listing test", why);
    None
}

fn backend(
    policy: &Arc<Policy>,
    scratch: &std::path::Path,
    runsc: &cordon_backend_gvisor::runsc::Runsc,
) -> GvisorBackend {
    cordon_backend_gvisor::backend(GvisorConfig {
        setup: cordon_backend_kit::EngineSetup {
            policy: policy.clone(),
            env: Deployment {
                name: "default".into(),
            },
            scratch: scratch.to_path_buf(),
            work_dir: None,
            egress: Default::default(),
        },
        runsc: runsc.clone(),
    })
}

fn listed_pods(bin: &std::path::Path, prefix: &str) -> Vec<String> {
    cordon_backend_gvisor::pod::listed(bin)
        .unwrap()
        .into_iter()
        .map(|l| l.id)
        .filter(|id| id.starts_with(prefix))
        .collect()
}

#[test]
fn another_backend_disposes_of_a_scope_from_runscs_listing() {
    let Some(runsc) = runnable() else {
        return;
    };
    let scratch = tempfile::Builder::new()
        .prefix("gvisor-listing-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let policy = Arc::new(Policy::load_default().unwrap());
    let thread = format!("t{}", std::process::id());
    let t = thread.clone();
    let caller = CallerContext::new(
        || "listing-test".to_string(),
        move || t.clone(),
        || "agent".to_string(),
        || Identity {
            namespace: "local".into(),
            name: "operator".into(),
            ..Identity::default()
        },
    )
    .resolve()
    .unwrap();
    let req = AcquireRequest {
        key: caller.key,
        provenance: Provenance {
            spec: SandboxSpec::new("run", "host").unwrap(),
            identity: caller.identity,
            policy_digest: policy.digest.clone(),
            origin: None,
        },
        limits: Limits {
            memory_bytes: 1 << 28,
            processes: 64,
            cpu_seconds: 60,
            wall_seconds: 60,
            disk_bytes: 1 << 26,
        },
        brokered: Vec::new(),
    };
    let maker = backend(&policy, scratch.path(), &runsc);
    let sandbox = maker.acquire(&req).unwrap();
    // Two execs: the second starts the sandbox's runsc sandbox.
    for _ in 0..2 {
        let out = sandbox
            .exec(&ExecRequest {
                argv: vec!["/bin/true".into()],
                env: Default::default(),
                stdin: Vec::new(),
                timeout: Duration::from_secs(30),
                max_output_bytes: 1 << 16,
            })
            .unwrap();
        assert_eq!(out.status, ExitStatus::Code(0));
    }
    let prefix = format!("{}-", sandbox.id());
    assert_eq!(listed_pods(&runsc.bin, &prefix).len(), 1, "no pod listed");
    // Another backend (nothing in its own registry) of another scope
    // finds nothing; of this scope, the maker's sandbox.
    let other = backend(&policy, scratch.path(), &runsc);
    assert_eq!(
        other
            .dispose_scope("listing-test", "no-such-thread")
            .unwrap(),
        0
    );
    assert_eq!(listed_pods(&runsc.bin, &prefix).len(), 1);
    assert_eq!(other.dispose_scope("listing-test", &thread).unwrap(), 1);
    assert_eq!(listed_pods(&runsc.bin, &prefix), Vec::<String>::new());
    let dirs: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(dirs.is_empty(), "the sandbox's directory is left: {dirs:?}");
    // The maker's own dispose then finds nothing left, and fails nothing.
    assert!(maker.dispose(&req.key).unwrap());
}
