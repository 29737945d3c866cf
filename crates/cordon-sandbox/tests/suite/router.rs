//! Construction, the floor, capabilities, the egress rule, hard stops,
//! selection and get-or-create.

use std::sync::Arc;

use cordon_sandbox::{
    Capability, Egress, EgressEntry, ExecRequest, Isolation, IsolationError, RouterError,
    SandboxSpec,
};

use super::doubles::{builder, ctx, policy, spec, Fake, Request, Silent};

fn allowlisted(spec: SandboxSpec) -> SandboxSpec {
    spec.with_egress_allow([EgressEntry::parse("pypi.org").unwrap()])
        .unwrap()
}

#[test]
fn the_default_floor_is_microvm_and_refuses_a_weaker_backend_at_construction() {
    let weak = Arc::new(Fake::new("docker", Isolation::Container, Egress::Allowlist));
    let err = builder().backend(weak).build().unwrap_err();
    assert!(matches!(err, RouterError::BelowFloor { .. }));
    insta::assert_snapshot!("floor_at_construction", err.to_string());
    // Positive: a microvm backend passes the default floor.
    let router = builder().backend(Fake::microvm("vm")).build().unwrap();
    assert_eq!(router.floor(), Isolation::Microvm);
}

#[test]
fn one_weak_backend_refuses_the_whole_router_rather_than_being_skipped() {
    let weak = Arc::new(Fake::new("process", Isolation::Process, Egress::Closed));
    let err = builder()
        .backend(Fake::microvm("vm"))
        .backend(weak)
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, RouterError::BelowFloor { backend, .. } if backend == "process"),
        "{err}"
    );
}

#[test]
fn an_explicit_lower_floor_admits_the_backend() {
    let c = Arc::new(Fake::new("docker", Isolation::Container, Egress::Allowlist));
    let router = builder()
        .min_isolation(Isolation::Container)
        .backend(c)
        .build()
        .unwrap();
    assert_eq!(router.ensure_can_serve(&spec()).unwrap(), vec![]);
}

#[test]
fn a_backend_that_cannot_name_its_rung_is_refused_at_construction() {
    let mut f = Fake::new("qemu", Isolation::Microvm, Egress::Allowlist);
    f.isolation = Err(IsolationError::Unnamed {
        reason: "`/dev/kvm` is missing, so it would run under emulation".into(),
    });
    let err = builder().backend(Arc::new(f)).build().unwrap_err();
    assert!(matches!(err, RouterError::UnnamedRung { .. }));
    insta::assert_snapshot!("unnamed_rung", err.to_string());
    // A backend that reads its rung from configuration forwards the parse
    // error, and is refused the same way.
    let mut g = Fake::new("cfg", Isolation::Microvm, Egress::Allowlist);
    g.isolation = "micro-vm".parse::<Isolation>();
    let err = builder().backend(Arc::new(g)).build().unwrap_err();
    insta::assert_snapshot!("unknown_declared_rung", err.to_string());
}

#[test]
fn a_router_without_backends_or_with_duplicate_names_is_refused() {
    let err = builder().build().unwrap_err();
    assert_eq!(err, RouterError::NoBackends);
    let err = builder()
        .backend(Fake::microvm("vm"))
        .backend(Fake::microvm("vm"))
        .build()
        .unwrap_err();
    assert!(matches!(err, RouterError::DuplicateBackend { .. }));
}

#[test]
fn a_spec_raises_the_floor_for_itself() {
    let c = Arc::new(Fake::new("docker", Isolation::Container, Egress::Allowlist));
    let router = builder()
        .min_isolation(Isolation::Container)
        .backend(c.clone())
        .build()
        .unwrap();
    let strict = spec().with_min_isolation(Isolation::Microvm);
    assert_eq!(router.effective_floor(&strict), Isolation::Microvm);
    let err = router.ensure_can_serve(&strict).unwrap_err();
    insta::assert_snapshot!("spec_raises_floor", err.to_string());
    // acquire refuses the same way, before the backend is reached.
    assert!(router.acquire(&ctx(), &strict).is_err());
    assert_eq!(c.acquires(), 0);
    // Positive: a spec asking for what the host already demands is served.
    let same = spec().with_min_isolation(Isolation::Container);
    assert!(router.ensure_can_serve(&same).is_ok());
    assert!(router.acquire(&ctx(), &same).is_ok());
}

#[test]
fn a_raised_floor_selects_the_stronger_backend_among_those_given() {
    let c = Arc::new(Fake::new("docker", Isolation::Container, Egress::Allowlist));
    let vm = Fake::microvm("vm");
    let router = builder()
        .min_isolation(Isolation::Container)
        .backend(c.clone())
        .backend(vm.clone())
        .build()
        .unwrap();
    assert_eq!(router.selected_backend(&spec()).unwrap(), "docker");
    let strict = spec().with_min_isolation(Isolation::Microvm);
    assert_eq!(router.selected_backend(&strict).unwrap(), "vm");
    router.acquire(&ctx(), &strict).unwrap();
    assert_eq!((c.acquires(), vm.acquires()), (0, 1));
}

#[test]
fn a_spec_cannot_lower_the_floor() {
    let router = builder().backend(Fake::microvm("vm")).build().unwrap();
    for lower in [Isolation::None, Isolation::Process, Isolation::Container] {
        let s = spec().with_min_isolation(lower);
        assert_eq!(router.effective_floor(&s), Isolation::Microvm);
    }
    // With a floor below the only backend, a spec's lower floor changes
    // nothing either, and a weaker backend could never have been admitted.
    let c = Arc::new(Fake::new("docker", Isolation::Container, Egress::Allowlist));
    let router = builder()
        .min_isolation(Isolation::Container)
        .backend(c)
        .build()
        .unwrap();
    let s = spec().with_min_isolation(Isolation::None);
    assert_eq!(router.effective_floor(&s), Isolation::Container);
    let yaml =
        SandboxSpec::from_yaml("s.yaml", "kind: k\nimage: i\nmin_isolation: none\n").unwrap();
    assert_eq!(router.effective_floor(&yaml), Isolation::Container);
}

#[test]
fn undeclared_egress_is_read_as_unrestricted_and_refused() {
    let router = builder().backend(Arc::new(Silent)).build().unwrap();
    let err = router.ensure_can_serve(&spec()).unwrap_err();
    insta::assert_snapshot!("undeclared_egress", err.to_string());
    // acquire refuses too, without reaching the backend (which would panic).
    assert!(matches!(
        router.acquire(&ctx(), &spec()).unwrap_err(),
        RouterError::NoBackendQualifies { .. }
    ));
}

#[test]
fn an_unrestricted_backend_is_refused_for_an_allowlist_and_for_no_network() {
    let open = Arc::new(Fake::new("open", Isolation::Microvm, Egress::Unrestricted));
    let router = builder().backend(open.clone()).build().unwrap();
    let err = router.ensure_can_serve(&allowlisted(spec())).unwrap_err();
    insta::assert_snapshot!("allowlist_vs_unrestricted", err.to_string());
    assert!(router.ensure_can_serve(&spec()).is_err());
    assert!(router.acquire(&ctx(), &allowlisted(spec())).is_err());
    assert_eq!(open.acquires(), 0);
    // Positive: an allowlist backend serves the same spec, silently.
    let router = builder().backend(Fake::microvm("vm")).build().unwrap();
    assert_eq!(
        router.ensure_can_serve(&allowlisted(spec())).unwrap(),
        vec![]
    );
}

#[test]
fn a_closed_backend_for_an_allowlist_is_permitted_with_a_warning() {
    let closed = Arc::new(Fake::new("closed", Isolation::Microvm, Egress::Closed));
    let router = builder().backend(closed.clone()).build().unwrap();
    let warnings = router.ensure_can_serve(&allowlisted(spec())).unwrap();
    assert_eq!(warnings.len(), 1);
    insta::assert_snapshot!("closed_vs_allowlist", warnings[0].to_string());
    // The rule a surface reporting on a sandbox made earlier asks (`cordon
    // sandbox exec`) is the very one.
    assert_eq!(
        warnings,
        cordon_sandbox::Warning::of("closed", Egress::Closed, &allowlisted(spec()))
    );
    assert_eq!(
        cordon_sandbox::Warning::of("vm", Egress::Allowlist, &allowlisted(spec())),
        vec![]
    );
    // No allowlist: nothing to warn about.
    assert_eq!(router.ensure_can_serve(&spec()).unwrap(), vec![]);
    // acquire serves it and stays silent.
    let (sb, log) = super::doubles::capture_logs(|| router.acquire(&ctx(), &allowlisted(spec())));
    assert!(sb.is_ok());
    assert!(log.is_empty(), "{log}");
    assert_eq!(closed.acquires(), 1);
}

#[test]
fn a_missing_capability_is_refused_naming_it() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let needs = spec().with_requires([Capability::Exec, Capability::Network, Capability::FilesOut]);
    let err = router.ensure_can_serve(&needs).unwrap_err();
    insta::assert_snapshot!("missing_capability", err.to_string());
    assert!(router.acquire(&ctx(), &needs).is_err());
    assert_eq!(vm.acquires(), 0);
    // Positive: the default set serves exec and files in.
    let default = spec().with_requires([Capability::Exec, Capability::FilesIn]);
    assert!(router.ensure_can_serve(&default).is_ok());
    // And a backend declaring more serves more.
    let wide = Arc::new(
        Fake::new("wide", Isolation::Microvm, Egress::Allowlist).with_caps(&[
            Capability::Exec,
            Capability::Network,
            Capability::FilesOut,
        ]),
    );
    let router = builder().backend(wide).build().unwrap();
    assert!(router.ensure_can_serve(&needs).is_ok());
}

#[test]
fn a_denied_capability_is_a_hard_stop() {
    let wide = Arc::new(
        Fake::new("wide", Isolation::Microvm, Egress::Allowlist)
            .with_caps(&[Capability::Exec, Capability::HostTools]),
    );
    let router = builder()
        .deny_capability(Capability::HostTools)
        .backend(wide.clone())
        .build()
        .unwrap();
    let needs = spec().with_requires([Capability::Exec, Capability::HostTools]);
    let err = router.ensure_can_serve(&needs).unwrap_err();
    insta::assert_snapshot!("denied_capability", err.to_string());
    assert!(matches!(
        router.acquire(&ctx(), &needs).unwrap_err(),
        RouterError::DeniedCapability { .. }
    ));
    assert_eq!(wide.acquires(), 0);
    // Positive: without the denied capability the spec is served.
    let ok = spec().with_requires([Capability::Exec]);
    assert!(router.acquire(&ctx(), &ok).is_ok());
}

#[test]
fn with_several_backends_the_error_lists_each_and_why() {
    let closed_weak = Arc::new(Fake::new("docker", Isolation::Container, Egress::Closed));
    let open = Arc::new(Fake::new(
        "open-vm",
        Isolation::Microvm,
        Egress::Unrestricted,
    ));
    let router = builder()
        .min_isolation(Isolation::Container)
        .backend(closed_weak)
        .backend(open)
        .build()
        .unwrap();
    let s = spec()
        .with_min_isolation(Isolation::HardenedContainer)
        .with_requires([Capability::Network]);
    let err = router.ensure_can_serve(&s).unwrap_err();
    insta::assert_snapshot!("none_qualifies", err.to_string());
}

#[test]
fn the_first_qualifying_backend_serves_and_a_failure_is_not_retried() {
    let mut first = Fake::new("first", Isolation::Microvm, Egress::Allowlist);
    first.fail_acquire = true;
    let first = Arc::new(first);
    let second = Fake::microvm("second");
    let router = builder()
        .backend(first.clone())
        .backend(second.clone())
        .build()
        .unwrap();
    let err = router.acquire(&ctx(), &spec()).unwrap_err();
    insta::assert_snapshot!("backend_failure_not_retried", err.to_string());
    assert_eq!((first.acquires(), second.acquires()), (1, 0));
}

#[test]
fn get_or_create_returns_the_same_sandbox_for_the_same_key() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let a = router.acquire(&ctx(), &spec()).unwrap();
    let b = router.acquire(&ctx(), &spec()).unwrap();
    // The same sandbox (each handed out inside the router's compute guard).
    assert_eq!(a.id(), b.id());
    assert_eq!((vm.acquires(), vm.creates()), (2, 1));
    // Another thread gets another sandbox.
    let other = Request::new("tenant-1", "thread-2").context();
    let c = router.acquire(&other, &spec()).unwrap();
    assert_ne!(a.id(), c.id());
}

#[test]
fn the_key_is_read_from_the_request_context_at_call_time() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let req = Request::new("tenant-1", "thread-1");
    let ctx = req.context();
    let a = router.acquire(&ctx, &spec()).unwrap();
    *req.thread.lock().unwrap() = "thread-9".into();
    let b = router.acquire(&ctx, &spec()).unwrap();
    assert_ne!(
        a.id(),
        b.id(),
        "the same context object read the new thread"
    );
}

#[test]
fn a_warm_sandbox_for_another_spec_identity_or_policy_is_refused() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let req = Request::new("tenant-1", "thread-1");
    router.acquire(&req.context(), &spec()).unwrap();

    // A wider spec under the same key.
    let wider = allowlisted(spec());
    let err = router.acquire(&req.context(), &wider).unwrap_err();
    insta::assert_snapshot!("mismatch_spec", err.to_string());

    // The same spec for another identity.
    let mut other = super::doubles::team_a();
    other.name = "reviewer".into();
    *req.identity.lock().unwrap() = other;
    let err = router.acquire(&req.context(), &spec()).unwrap_err();
    insta::assert_snapshot!("mismatch_identity", err.to_string());
    *req.identity.lock().unwrap() = super::doubles::team_a();

    // The same spec and identity under another policy.
    let text = format!("{}\n# amended\n", super::doubles::POLICY);
    let amended = Arc::new(cordon_policy::Policy::load_str("policy.yaml", &text).unwrap());
    assert_ne!(amended.digest, policy().digest);
    let router2 = cordon_sandbox::Router::builder(amended, super::doubles::env())
        .backend(vm.clone())
        .build()
        .unwrap();
    let err = router2.acquire(&req.context(), &spec()).unwrap_err();
    insta::assert_snapshot!("mismatch_policy", err.to_string());

    // Positive: the original still gets it back.
    assert!(router.acquire(&req.context(), &spec()).is_ok());
    assert_eq!(vm.creates(), 1);
}

#[test]
fn a_backend_that_cannot_run_the_spec_image_is_never_selected() {
    // The stronger backend runs only `host`; the spec names another image.
    let host_only = Arc::new(
        Fake::new("host-only", Isolation::Microvm, Egress::Allowlist).with_images(&["host"]),
    );
    let any = Fake::microvm("any-image");
    let router = builder()
        .backend(host_only.clone())
        .backend(any.clone())
        .build()
        .unwrap();
    let spec = SandboxSpec::new("codeact", "python:3.12").unwrap();
    assert_eq!(router.selected_backend(&spec).unwrap(), "any-image");
    router.ensure_can_serve(&spec).unwrap();
    // With only the host-only backend, the spec is refused, naming the image.
    let router = builder().backend(host_only).build().unwrap();
    let err = router.ensure_can_serve(&spec).unwrap_err().to_string();
    assert!(
        err.contains("cannot run the image `python:3.12`") && err.contains("runs only host"),
        "{err}"
    );
    let host_spec = SandboxSpec::new("codeact", "host").unwrap();
    assert_eq!(router.selected_backend(&host_spec).unwrap(), "host-only");
}

#[test]
fn every_exec_is_decided_on_the_compute_surface_before_it_reaches_the_backend() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let sb = router.acquire(&ctx(), &spec()).unwrap();
    let run = |argv: &[&str]| {
        sb.exec(&ExecRequest {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: Default::default(),
            stdin: Vec::new(),
            timeout: std::time::Duration::from_secs(5),
            max_output_bytes: 1 << 16,
        })
    };
    let fake = vm.sandbox("tenant-1").unwrap();
    // Outside the policy's `usr-bin` allow: refused, naming why; the
    // backend never saw it.
    let err = run(&["/bin/sh", "-c", "true"]).unwrap_err();
    assert_eq!(err.kind(), cordon_sandbox::ErrorKind::Refused, "{err}");
    assert!(err.to_string().contains("/bin/sh"), "{err}");
    let err = run(&[]).unwrap_err();
    assert_eq!(err.kind(), cordon_sandbox::ErrorKind::Refused, "{err}");
    assert_eq!(fake.execs.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Allowed: it runs, by the resolved path.
    run(&["true"]).unwrap();
    assert_eq!(fake.execs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A snapshot's saved processes start again only at a backend that
/// declares `snapshot_memory` and is the one that saved them (each saves
/// in its own form): anywhere else the restore is refused, naming why,
/// before the backend is asked.
#[test]
fn saved_processes_go_only_to_the_backend_that_saved_them() {
    let caps = [
        Capability::Exec,
        Capability::Snapshot,
        Capability::SnapshotMemory,
    ];
    let vm = Arc::new(Fake::new("vm", Isolation::Microvm, Egress::Allowlist).with_caps(&caps));
    let router = builder().backend(vm.clone()).build().unwrap();
    let origin = |of: &str| cordon_sandbox::Origin {
        snapshot: "snap-1".into(),
        tree: "/nonexistent/tree".into(),
        memory: Some("/nonexistent/memory".into()),
        memory_of: Some(of.into()),
        tmp: None,
    };
    let err = router
        .acquire_from(&ctx(), &spec(), Some(origin("gvisor")))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("saved by `gvisor`") && err.contains("--backend gvisor"),
        "{err}"
    );
    assert_eq!(vm.acquires(), 0);
    // Its own: served.
    assert!(router
        .acquire_from(&ctx(), &spec(), Some(origin("vm")))
        .is_ok());
    // A backend that saves none: refused, naming the capability.
    let plain = Fake::microvm("plain");
    let router = builder().backend(plain.clone()).build().unwrap();
    let err = router
        .acquire_from(&ctx(), &spec(), Some(origin("plain")))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("snapshot_memory"), "{err}");
    assert_eq!(plain.acquires(), 0);
}
