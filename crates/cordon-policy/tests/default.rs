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

/// `cordon:spec-egress` is `cordon:default` but for egress, which allows
/// what a spec names (the proxy holds the list and the public-address
/// rule); it loads clean, and a layer narrowing it draws no warning.
#[test]
fn spec_egress_is_the_default_with_egress_open_to_the_spec() {
    use cordon_policy::resolve::MemoryFiles;
    use cordon_policy::{EgressFacts, Request, SurfaceFacts};
    let load = |top: &str| {
        Policy::load_with("top.yaml", top, &MemoryFiles(Default::default())).map_err(|d| d.render())
    };
    let open = load("policy:\n  extends: [\"cordon:spec-egress\"]\n").unwrap();
    assert!(open.warnings.0.is_empty(), "{}", open.warnings.render());
    let closed = default();
    let egress = |p: &Policy, url: &str| {
        p.decide(&Request {
            identity: Identity::default(),
            env: Deployment::default(),
            now: 0,
            facts: SurfaceFacts::Egress(EgressFacts::from_url(url).unwrap()),
        })
        .is_allowed()
    };
    assert!(
        !egress(&closed, "https://pypi.org/"),
        "the default allows no egress"
    );
    assert!(egress(&open, "https://pypi.org/"));
    // Everything else is the default's: the same plan for the workload.
    let plan = |p: &Policy| {
        p.plan(&Identity::default(), &Deployment::default(), 0, "/w")
            .unwrap()
    };
    assert_eq!(plan(&open), plan(&closed));
    assert_eq!(open.bounds, closed.bounds);
    // A layer over it narrows, silently.
    let narrowed = load(
        "policy:\n  extends: [\"cordon:spec-egress\"]\n  egress:\n    allow:\n      - name: pypi\n        when: host == \"pypi.org\"\n",
    )
    .unwrap();
    assert!(
        narrowed.warnings.0.is_empty(),
        "{}",
        narrowed.warnings.render()
    );
    assert!(egress(&narrowed, "https://pypi.org/"));
    assert!(!egress(&narrowed, "https://example.com/"));
}

/// A layer over `cordon:default` that allows egress loads, but is told
/// that its allow can never take effect, and what to extend instead.
#[test]
fn an_allow_the_root_forbids_is_a_warning_that_names_the_fix() {
    use cordon_policy::resolve::MemoryFiles;
    let p = Policy::load_with(
        "mine.yaml",
        "policy:\n  extends: [\"cordon:default\"]\n  egress:\n    allow:\n      - name: pypi\n        when: host == \"pypi.org\"\n",
        &MemoryFiles(Default::default()),
    )
    .unwrap();
    let w = p.warnings.render();
    assert!(
        w.contains("mine.yaml:6:15") && w.contains("this allow can never take effect"),
        "{w}"
    );
    assert!(w.contains("cordon:spec-egress"), "{w}");
}
