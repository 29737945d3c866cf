//! Disposing of a sandbox removes what its uid owns in the host's System V
//! IPC: a later sandbox leased the same uid must not find a segment, queue
//! or semaphore set of a disposed one. (The workload has an IPC namespace
//! of its own at both rungs; these objects stand for what an older
//! cordon's process rung left, made here as the sandbox's uid on the host.)
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::process::Command;
use std::sync::Arc;

use cordon_linux::Rung;
use cordon_policy::{Deployment, Identity, Policy};
mod common;

use cordon_sandbox::{Backend, Capability, Isolation, Router, SandboxSpec};

fn rows_of(uid: u32) -> Vec<String> {
    let mut rows = Vec::new();
    for kind in ["shm", "msg", "sem"] {
        let text = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let col = header.iter().position(|h| *h == "uid").unwrap();
        rows.extend(
            lines
                .filter(|l| l.split_whitespace().nth(col) == Some(&uid.to_string()))
                .map(|l| format!("{kind}: {l}")),
        );
    }
    rows
}

#[test]
fn dispose_removes_the_uids_host_ipc_objects() {
    let Some(init) = common::rung_or_skip(Rung::Process, "the IPC sweep") else {
        return;
    };
    let parent = tempfile::tempdir().unwrap();
    let policy = Arc::new(Policy::load_default().unwrap());
    let backend = common::backend(
        Rung::Process,
        policy.clone(),
        parent.path(),
        init,
        Default::default(),
    );
    let router = Router::builder(policy, Deployment::default())
        .min_isolation(Isolation::Process)
        .backend(backend.clone())
        .build()
        .unwrap();
    let caller = cordon_testkit::caller(
        "sysv",
        "t",
        "agent",
        Identity {
            namespace: "sysv".into(),
            attested: true,
            ..Identity::default()
        },
    );
    let key = caller.resolve().unwrap().key;
    let spec = SandboxSpec::new("sysv", "host")
        .unwrap()
        .with_requires([Capability::Exec]);
    let sandbox = router.acquire(&caller, &spec).expect("acquire");
    let uid = sandbox
        .host_work_dir()
        .and_then(|w| w.owner)
        .expect("the sandbox's uid");
    for what in [&["-M", "4096"][..], &["-Q"], &["-S", "1"]] {
        let out = Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "ipcmk".into(),
            ])
            .args(what)
            .output()
            .expect("setpriv and ipcmk (util-linux)");
        assert!(out.status.success(), "ipcmk {what:?} as {uid}: {out:?}");
    }
    assert_eq!(rows_of(uid).len(), 3, "{:?}", rows_of(uid));
    drop(sandbox);
    assert!(backend.dispose(&key).expect("dispose"));
    let left = rows_of(uid);
    // Whatever the assertion says, leave nothing behind.
    let _ = cordon_linux::remove_sysv_ipc_of(uid);
    assert!(left.is_empty(), "left after dispose: {left:?}");
}
