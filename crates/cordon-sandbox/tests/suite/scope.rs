//! Reclaiming a conversation's sandboxes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cordon_sandbox::{Egress, Isolation};

use super::doubles::{builder, capture_logs, spec, Fake, Request};

fn two_sandboxes(router: &cordon_sandbox::Router) {
    let req = Request::new("tenant-1", "thread-1");
    router.acquire(&req.context(), &spec()).unwrap();
    *req.agent_dir.lock().unwrap() = "reviewer".into();
    router.acquire(&req.context(), &spec()).unwrap();
}

#[test]
fn scope_disposes_on_success_and_reports_the_count() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    // A sandbox of another thread survives.
    router
        .acquire(&Request::new("tenant-1", "thread-2").context(), &spec())
        .unwrap();
    let out = router.scope("tenant-1", "thread-1", || {
        two_sandboxes(&router);
        7
    });
    assert_eq!((out.value, out.disposed), (7, 2));
    assert_eq!(vm.sandboxes.lock().unwrap().len(), 1);
}

#[test]
fn scope_disposes_on_error_and_returns_the_error_untouched() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let out = router.scope("tenant-1", "thread-1", || -> Result<(), String> {
        two_sandboxes(&router);
        Err("the turn failed".into())
    });
    assert_eq!(out.value, Err("the turn failed".to_string()));
    assert_eq!(out.disposed, 2);
    assert!(vm.sandboxes.lock().unwrap().is_empty());
}

#[test]
fn scope_disposes_when_the_block_panics() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        router.scope("tenant-1", "thread-1", || {
            two_sandboxes(&router);
            panic!("the turn panicked");
        })
    }));
    assert!(caught.is_err());
    assert!(vm.sandboxes.lock().unwrap().is_empty());
}

#[test]
fn a_failing_dispose_scope_is_logged_not_raised_and_the_others_still_run() {
    let mut broken = Fake::new("broken", Isolation::Microvm, Egress::Allowlist);
    broken.fail_dispose_scope = true;
    let broken = Arc::new(broken);
    let vm = Fake::microvm("vm");
    // `vm` serves (first), `broken` fails its purge.
    let router = builder()
        .backend(vm.clone())
        .backend(broken)
        .build()
        .unwrap();
    let (out, log) = capture_logs(|| {
        router.scope("tenant-1", "thread-1", || {
            two_sandboxes(&router);
            "done"
        })
    });
    assert_eq!((out.value, out.disposed), ("done", 2));
    assert!(log.contains("dispose_scope failed"), "{log}");
    assert!(log.contains("broken"), "{log}");
    assert!(log.contains("the control plane timed out"), "{log}");
    // Direct calls are just as quiet.
    let (n, log) = capture_logs(|| router.dispose_scope("tenant-1", "thread-1"));
    assert_eq!(n, 0);
    assert!(log.contains("dispose_scope failed"), "{log}");
}

#[test]
fn dispose_removes_only_the_callers_sandbox() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let a = Request::new("tenant-1", "thread-1");
    let b = Request::new("tenant-1", "thread-2");
    router.acquire(&a.context(), &spec()).unwrap();
    router.acquire(&b.context(), &spec()).unwrap();
    assert_eq!(router.dispose(&a.context()).unwrap(), 1);
    assert_eq!(router.dispose(&a.context()).unwrap(), 0);
    assert_eq!(vm.sandboxes.lock().unwrap().len(), 1);
}

/// A dispose that did not dispose is an error saying why (issue 28, item
/// 7), never a count beside a log line: the caller (a server answering
/// `{"disposed": N}`) would report a running sandbox gone.
#[test]
fn a_dispose_that_failed_is_an_error_not_a_count() {
    let mut broken = Fake::new("broken", Isolation::Microvm, Egress::Allowlist);
    broken.fail_dispose = true;
    broken.fail_dispose_scope = true;
    let broken = Arc::new(broken);
    let vm = Fake::microvm("vm");
    let router = builder()
        .backend(vm.clone())
        .backend(broken)
        .build()
        .unwrap();
    let a = Request::new("tenant-1", "thread-1");
    router.acquire(&a.context(), &spec()).unwrap();
    let e = router.dispose(&a.context()).unwrap_err();
    assert_eq!(e.kind(), cordon_sandbox::ErrorKind::Failed);
    let shown = e.to_string();
    assert!(
        shown.contains("1 disposed, and not all")
            && shown.contains("broken")
            && shown.contains("the keeper does not answer"),
        "{shown}"
    );
    // Every backend was still asked: `vm`'s went.
    assert!(vm.sandboxes.lock().unwrap().is_empty());
    router.acquire(&a.context(), &spec()).unwrap();
    let e = router
        .try_dispose_scope("tenant-1", "thread-1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("the control plane timed out"), "{e}");
    assert!(vm.sandboxes.lock().unwrap().is_empty());
}
