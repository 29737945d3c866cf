//! Keys come only from the caller context.

use cordon_sandbox::KeyError;

use super::doubles::{builder, spec, Fake, Request};

#[test]
fn an_empty_or_odd_key_part_is_refused_rather_than_shared() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let req = Request::new("", "thread-1");
    let err = router.acquire(&req.context(), &spec()).unwrap_err();
    insta::assert_snapshot!("empty_scope", err.to_string());
    let req = Request::new("tenant-1", "../thread-2");
    assert!(matches!(
        req.context().resolve(),
        Err(KeyError::BadPart {
            part: "thread_id",
            ..
        })
    ));
    let req = Request::new("tenant-1", "thread-1");
    req.identity.lock().unwrap().namespace.clear();
    assert_eq!(req.context().resolve().unwrap_err(), KeyError::NoIdentity);
    assert_eq!(vm.acquires(), 0);
    // Positive.
    let ok = Request::new("tenant-1", "thread-1")
        .context()
        .resolve()
        .unwrap();
    assert_eq!(ok.key.to_string(), "tenant-1/thread-1/agent");
    assert_eq!(ok.identity.namespace, "team-a");
}
