//! The router consults the policy: resource bounds and the egress surface.

use cordon_sandbox::{EgressEntry, ResourceAsk, RouterError, SandboxSpec};

use super::doubles::{builder, ctx, spec, team_a, Fake};

fn allow(entries: &[&str]) -> SandboxSpec {
    spec()
        .with_egress_allow(entries.iter().map(|e| EgressEntry::parse(e).unwrap()))
        .unwrap()
}

#[test]
fn an_allowlist_entry_the_policy_certainly_denies_is_refused_naming_the_rule() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let err = router
        .acquire(&ctx(), &allow(&["pypi.org:80"]))
        .unwrap_err();
    assert!(matches!(err, RouterError::EgressDenied { .. }));
    insta::assert_snapshot!("egress_denied_by_rule", err.to_string());
    let err = router
        .acquire(
            &ctx(),
            &allow(&["pypi.org", "metadata.internal.example.com"]),
        )
        .unwrap_err();
    insta::assert_snapshot!("egress_denied_second_entry", err.to_string());
    let err = router
        .acquire(&ctx(), &allow(&["evil.example.net"]))
        .unwrap_err();
    insta::assert_snapshot!("egress_no_allow_matched", err.to_string());
    assert_eq!(vm.acquires(), 0);
}

#[test]
fn allowed_and_undetermined_entries_pass_to_the_egress_proxy() {
    let router = builder().backend(Fake::microvm("vm")).build().unwrap();
    // Allowed for certain.
    assert!(router
        .acquire(&ctx(), &allow(&["pypi.org", "partner-a.example.com"]))
        .is_ok());
    // A wildcard leaves `host` unknown: `no-metadata` stays open, so the
    // proxy decides per connection.
    let id = team_a();
    assert!(router
        .ensure_policy_allows(&id, &allow(&["*.pythonhosted.org"]))
        .is_ok());
    assert!(router
        .ensure_policy_allows(&id, &allow(&["*.example.org"]))
        .is_ok());
    // But a wildcard on a denied port is denied for every host it covers.
    assert!(matches!(
        router.ensure_policy_allows(&id, &allow(&["*.pythonhosted.org:8080"])),
        Err(RouterError::EgressDenied { .. })
    ));
    // The identity matters: another tenant's partner is not allowed.
    let mut b = team_a();
    b.namespace = "team-b".into();
    assert!(router
        .ensure_policy_allows(&b, &allow(&["partner-a.example.com"]))
        .is_err());
}

#[test]
fn a_resource_ask_above_the_policy_is_refused_with_both_numbers() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let big = spec()
        .with_resources(ResourceAsk {
            memory: Some(1 << 30),
            ..ResourceAsk::default()
        })
        .unwrap();
    let err = router.acquire(&ctx(), &big).unwrap_err();
    insta::assert_snapshot!("memory_above_bound", err.to_string());
    let many = spec()
        .with_resources(ResourceAsk {
            processes: Some(33),
            ..ResourceAsk::default()
        })
        .unwrap();
    let err = router.acquire(&ctx(), &many).unwrap_err();
    insta::assert_snapshot!("processes_above_bound", err.to_string());
    for ask in [
        ResourceAsk {
            cpu_seconds: Some(61),
            ..ResourceAsk::default()
        },
        ResourceAsk {
            wall_seconds: Some(601),
            ..ResourceAsk::default()
        },
        // Above the built-in 1GiB `max_disk` (the test policy states none).
        ResourceAsk {
            disk: Some((1 << 30) + 1),
            ..ResourceAsk::default()
        },
    ] {
        let s = spec().with_resources(ask).unwrap();
        assert!(
            matches!(
                router.acquire(&ctx(), &s),
                Err(RouterError::AboveBound { .. })
            ),
            "{ask:?}"
        );
    }
    assert_eq!(vm.acquires(), 0);
}

#[test]
fn asks_at_the_bound_pass_and_unstated_asks_take_the_bound() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let at = spec()
        .with_resources(ResourceAsk {
            memory: Some(512 << 20),
            processes: Some(8),
            cpu_seconds: None,
            wall_seconds: Some(600),
            disk: Some(64 << 20),
        })
        .unwrap();
    let limits = router.ensure_policy_allows(&team_a(), &at).unwrap();
    assert_eq!(limits.memory_bytes, 512 << 20);
    assert_eq!(limits.disk_bytes, 64 << 20);
    assert_eq!(limits.processes, 8);
    assert_eq!(limits.cpu_seconds, 60, "the policy's bound");
    assert_eq!(limits.wall_seconds, 600);
    router.acquire(&ctx(), &at).unwrap();
    let req = vm.requests.lock().unwrap()[0].clone();
    assert!(req.contains("processes: 8"), "{req}");
}

#[test]
fn a_live_egress_change_is_checked_as_at_acquire_and_a_denied_one_closes_egress() {
    let vm = Fake::microvm("vm");
    let router = builder().backend(vm.clone()).build().unwrap();
    let sb = router.acquire(&ctx(), &allow(&["pypi.org"])).unwrap();
    let entries = |l: &[&str]| -> Vec<EgressEntry> {
        l.iter().map(|e| EgressEntry::parse(e).unwrap()).collect()
    };
    // Allowed for this identity: handed to the sandbox as is.
    let g = sb
        .change_egress(
            cordon_sandbox::EgressChange::Replace(entries(&["partner-a.example.com"])),
            "test",
        )
        .unwrap();
    assert_eq!(g, 2);
    // Denied by the policy: refused, saying so, and egress closed rather
    // than the last list left in force.
    let err = sb
        .change_egress(
            cordon_sandbox::EgressChange::Replace(entries(&["evil.example.net"])),
            "test",
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("evil.example.net"), "{text}");
    assert!(text.contains("egress is now closed"), "{text}");
    let fake = vm
        .sandboxes
        .lock()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    let seen = fake.egress.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        matches!(&seen[1], cordon_sandbox::EgressChange::Close(why) if why.contains("evil.example.net")),
        "{seen:?}"
    );
}
