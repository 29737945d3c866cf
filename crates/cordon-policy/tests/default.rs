//! `cordon:default`: every rule exercised by `default-policy.yaml`
//! (negatives first), every case passing, and the plan it makes for any
//! identity: what it refuses to the workload's own accesses.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_policy::plan::Rights;
use cordon_policy::{cases, Deployment, Identity, Policy};

fn default() -> Policy {
    match Policy::load_default() {
        Ok(p) => p,
        Err(d) => panic!("cordon:default did not load:\n{}", d.render()),
    }
}

#[test]
fn the_default_loads_without_warnings() {
    let p = default();
    assert!(p.warnings.0.is_empty(), "{}", p.warnings.render());
}

#[test]
fn every_case_passes_and_every_rule_is_covered() {
    let p = default();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/default-policy.yaml");
    let cases = match cases::load_file(std::path::Path::new(file), &p) {
        Ok(c) => c,
        Err(d) => panic!("{}", d.render()),
    };
    assert!(cases::unknown_rules(&p, &cases).is_empty());
    let results: Vec<_> = cases.iter().map(|c| cases::run(&p, c)).collect();
    for (c, r) in cases.iter().zip(&results) {
        assert!(r.passed, "case `{}` failed: got {:?}", c.name, r.got);
    }
    let uncovered: Vec<String> = cases::uncovered(&p, &results)
        .into_iter()
        .map(|id| p.rule(id).name.clone())
        .collect();
    assert!(uncovered.is_empty(), "rules no case decided: {uncovered:?}");
}

#[test]
fn the_default_applies_to_every_identity_alike() {
    let p = default();
    let plan = |attested: bool| {
        let id = Identity {
            namespace: "x".into(),
            attested,
            ..Identity::default()
        };
        p.plan(&id, &Deployment::default(), 0, "/w").unwrap()
    };
    assert_eq!(plan(true), plan(false));
    let plan = plan(false);
    // Negatives first: what the workload's own accesses may not do.
    assert!(!plan.may("/etc/shadow", Rights::READ));
    assert!(!plan.may("/etc/ssh/ssh_host_rsa_key", Rights::READ));
    assert!(!plan.may("/usr/bin/su", Rights::EXECUTE));
    assert!(!plan.may("/w/payload", Rights::EXECUTE));
    assert!(!plan.may("/tmp/payload", Rights::EXECUTE));
    assert!(!plan.may("/usr/bin/python3", Rights::WRITE));
    assert!(!plan.may("/root/x", Rights::READ));
    assert!(plan.may("/usr/bin/python3", Rights::EXECUTE));
    assert!(plan.may("/w/out.txt", Rights::WRITE));
    let b = plan.bounds;
    assert_eq!(
        (
            b.max_memory,
            b.max_processes,
            b.max_cpu_seconds,
            b.max_wall_seconds
        ),
        (512 << 20, 64, 60, 300)
    );
}
