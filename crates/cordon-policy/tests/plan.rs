//! Confinement plans: the storage and compute surfaces as static rules for
//! one identity. The plan is never wider than the policy (a property over
//! random policies, identities and accesses), and it is not needlessly
//! narrower where the kernel can see everything a rule reads.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;
use std::path::Path;

use cordon_policy::plan::{ConfinementPlan, Rights};
use cordon_policy::*;
use proptest::prelude::*;

fn who(ns: &str, attested: bool) -> Identity {
    Identity {
        namespace: ns.into(),
        name: String::new(),
        attested,
        labels: BTreeMap::new(),
    }
}

fn mode_of(r: Rights) -> Mode {
    match r {
        Rights::READ => Mode::Read,
        Rights::WRITE => Mode::Write,
        _ => Mode::Execute,
    }
}

/// What the policy decides for the workload's own access, with what the
/// kernel cannot see unknown (`bytes`; a spawned process's `args`, `cpu`,
/// `memory`). Executing is a storage `execute` and a compute start.
fn policy_allows(p: &Policy, id: &Identity, path: &str, r: Rights) -> bool {
    let req = |facts| Request {
        identity: id.clone(),
        env: Deployment::default(),
        now: 0,
        facts,
    };
    let storage = p
        .decide(&req(SurfaceFacts::Storage(StorageFacts {
            path: path.into(),
            mode: mode_of(r),
            bytes: None,
            work_dir: Some("/workspace".into()),
        })))
        .is_allowed();
    if r != Rights::EXECUTE {
        return storage;
    }
    storage
        && p.decide(&req(SurfaceFacts::Compute(ComputeFacts {
            command: path.into(),
            command_target: path.into(),
            args: None,
            cpu: None,
            memory: None,
            work_dir: Some("/workspace".into()),
        })))
        .is_allowed()
}

fn example() -> Policy {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies/deployment.yaml");
    Policy::load_file(&path).unwrap()
}

fn plan_for(p: &Policy, id: &Identity) -> ConfinementPlan {
    p.plan(id, &Deployment::default(), 0, "/workspace").unwrap()
}

#[test]
fn the_example_plan_holds_what_the_policy_says() {
    let p = example();
    let a = plan_for(&p, &who("team-a", true));
    // Granted.
    assert!(a.may("/workspace/src/main.rs", Rights::READ));
    assert!(a.may("/workspace/out/report.json", Rights::WRITE));
    assert!(a.may("/usr/lib/x86_64-linux-gnu/libc.so.6", Rights::READ));
    assert!(a.may("/usr/bin/python3", Rights::EXECUTE));
    // Refused: the negatives.
    assert!(!a.may("/workspace/src/main.rs", Rights::WRITE));
    assert!(!a.may("/workspace/.ssh/id_ed25519", Rights::READ));
    assert!(!a.may("/workspace/.git/config", Rights::WRITE));
    assert!(
        a.may("/workspace/.git/config", Rights::READ),
        "only writing git internals is denied"
    );
    assert!(!a.may("/workspace/.env", Rights::READ));
    assert!(!a.may("/etc/shadow", Rights::READ));
    assert!(!a.may("/root/.ssh/id_rsa", Rights::READ));
    assert!(!a.may("/usr/bin/sudo", Rights::EXECUTE));
    assert!(!a.may("/usr/bin/su", Rights::EXECUTE));
    assert!(!a.may("/workspace/out/payload", Rights::EXECUTE));
    assert!(!a.may("/usr/lib/x86_64-linux-gnu/libc.so.6", Rights::WRITE));
    // Bounds come from the layers that apply.
    assert_eq!(a.bounds.max_memory, 256 << 20);
}

#[test]
fn a_deny_that_reads_args_refuses_the_executable_to_spawned_processes() {
    let p = example();
    let b = plan_for(&p, &who("team-b", true));
    // team-b's `no-inline-shell` reads `args`, which the kernel does not see
    // for a process the workload starts: the shells are refused outright.
    assert!(!b.may("/usr/bin/sh", Rights::EXECUTE));
    assert!(!b.may("/usr/bin/bash", Rights::EXECUTE));
    assert!(b.may("/usr/bin/python3", Rights::EXECUTE));
    assert!(
        b.notes
            .iter()
            .any(|n| n.message.contains("`no-inline-shell` denies execute")),
        "{:?}",
        b.notes
    );
    // team-a has no such rule.
    assert!(plan_for(&p, &who("team-a", true)).may("/usr/bin/sh", Rights::EXECUTE));
    assert_eq!(plan_for(&p, &who("team-b", true)).bounds.max_processes, 16);
}

#[test]
fn an_unattested_identity_gets_a_plan_that_allows_nothing() {
    let p = example();
    let u = plan_for(&p, &who("team-a", false));
    for path in ["/workspace/src/main.rs", "/usr/bin/python3", "/tmp/x"] {
        for r in [Rights::READ, Rights::WRITE, Rights::EXECUTE] {
            assert!(!u.may(path, r), "{path} {r:?}");
        }
    }
}

const UNKNOWNS: &str = r#"
policy:
  storage:
    allow:
      - name: small-writes
        when: path.startsWith("/work/") && bytes < 1024
      - name: reads
        when: path.startsWith("/work/") && mode == "read"
    deny:
      - name: no-big-logs
        when: path.startsWith("/work/logs/") && bytes > 1048576
"#;

#[test]
fn unknown_facts_grant_nothing_in_an_allow_and_deny_in_a_deny() {
    let p = Policy::load_str("u.yaml", UNKNOWNS).unwrap();
    let plan = plan_for(&p, &who("t", true));
    // `small-writes` cannot be held: the workload's own writes are refused.
    assert!(!plan.may("/work/a.txt", Rights::WRITE));
    assert!(plan.may("/work/a.txt", Rights::READ));
    // `no-big-logs` denies the whole directory, whatever the size.
    assert!(!plan.may("/work/logs/x", Rights::READ));
    assert_eq!(plan.notes.len(), 2, "{:?}", plan.notes);
    // And `cordon policy check` says so at each rule.
    let w = p.warnings.render();
    assert!(w.contains("u.yaml:6:15: warning: the kernel cannot hold all of this rule: the kernel does not see `bytes`"), "{w}");
    assert!(w.contains("as an allow it grants nothing"), "{w}");
    assert!(w.contains("u.yaml:11:15: warning"), "{w}");
    assert!(
        w.contains("as a deny it denies the workload's own file accesses as if it held"),
        "{w}"
    );
    assert!(
        !w.contains("u.yaml:8:"),
        "a rule the kernel can hold is not flagged: {w}"
    );
}

#[test]
fn forms_the_kernel_cannot_hold_are_named() {
    let p = Policy::load_str(
        "f.yaml",
        "policy:\n  storage:\n    allow:\n      - path.contains(\"src\")\n      - '!path.startsWith(\"/etc/\")'\n",
    )
    .unwrap();
    let w = p.warnings.render();
    assert!(
        w.contains("`contains(...)` is not a form the kernel can hold"),
        "{w}"
    );
    assert!(
        w.contains("a negated `path.startsWith` cannot be held"),
        "{w}"
    );
    let plan = plan_for(&p, &who("t", true));
    assert!(!plan.may("/work/src/a", Rights::READ));
    assert!(!plan.may("/work/a", Rights::READ));
}

#[test]
fn base_facts_are_bound_before_the_paths_are_read() {
    let p = Policy::load_str(
        "b.yaml",
        "policy:\n  storage:\n    allow:\n      - path.startsWith(\"/data/\" + identity.namespace + \"/\") && mode == \"read\"\n",
    )
    .unwrap();
    assert!(p.warnings.0.is_empty(), "{}", p.warnings.render());
    let a = plan_for(&p, &who("team-a", true));
    assert!(a.may("/data/team-a/x", Rights::READ));
    assert!(!a.may("/data/team-b/x", Rights::READ));
}

// ---- the property: a plan is never wider than the policy ----

const PATHS: &[&str] = &[
    "/workspace/",
    "/workspace/out/",
    "/work/",
    "/work/out/",
    "/work/.ssh/",
    "/usr/bin/",
    "/usr/lib/",
    "/etc/",
    "/tmp/",
];
const LEAVES: &[&str] = &["a", "sh", "python3", "sudo", ".env", "x/y"];

fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(PATHS).prop_map(|p| format!("path.startsWith(\"{p}\")")),
        (
            proptest::sample::select(PATHS),
            proptest::sample::select(LEAVES)
        )
            .prop_map(|(p, l)| format!("path == \"{p}{l}\"")),
        proptest::sample::select(LEAVES).prop_map(|l| format!("path.endsWith(\"{l}\")")),
        proptest::sample::select(&["read", "write", "execute"][..])
            .prop_map(|m| format!("mode == \"{m}\"")),
        proptest::sample::select(&["read", "write", "execute"][..])
            .prop_map(|m| format!("mode != \"{m}\"")),
        Just("bytes > 100".to_string()),
        Just("identity.attested".to_string()),
        Just("identity.namespace == \"t1\"".to_string()),
        Just("identity.labels[\"tier\"] == \"gold\"".to_string()),
        Just("path.contains(\"ss\")".to_string()),
        Just("path.startsWith(work_dir + \"/\")".to_string()),
        Just("path == work_dir + \"/a\"".to_string()),
        Just("mode in [\"read\", \"execute\"]".to_string()),
    ]
}

fn body() -> impl Strategy<Value = String> {
    atom().prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} && {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
}

fn compute_body() -> impl Strategy<Value = String> {
    body().prop_map(|b| {
        b.replace("path", "command")
            .replace("bytes > 100", "args.exists(a, a == \"-c\")")
            .replace("mode == \"read\"", "true")
            .replace("mode != \"read\"", "false")
            .replace("mode == \"write\"", "cpu > 10")
            .replace("mode != \"write\"", "true")
            .replace("mode == \"execute\"", "true")
            .replace("mode != \"execute\"", "false")
            .replace("mode in [\"read\", \"execute\"]", "true")
    })
}

fn rules(key: &str, rs: &[String]) -> String {
    if rs.is_empty() {
        return format!("    {key}: []\n");
    }
    let mut y = format!("    {key}:\n");
    for r in rs {
        y.push_str(&format!("      - '{}'\n", r.replace('\'', "''")));
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CORDON_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_plan_never_allows_what_the_policy_does_not(
        allow in proptest::collection::vec(body(), 0..4),
        deny in proptest::collection::vec(body(), 0..3),
        callow in proptest::collection::vec(compute_body(), 1..3),
        cdeny in proptest::collection::vec(compute_body(), 0..2),
        layer_allow in proptest::option::of(proptest::collection::vec(body(), 0..3)),
        ns in proptest::sample::select(&["t1", "t2"][..]),
        attested in any::<bool>(),
        tier in proptest::option::of(Just("gold")),
        accesses in proptest::collection::vec(
            (proptest::sample::select(PATHS), proptest::sample::select(LEAVES),
             proptest::sample::select(&[Rights::READ, Rights::WRITE, Rights::EXECUTE][..])),
            1..16),
    ) {
        let mut root = String::from("policy:\n  storage:\n");
        root.push_str(&rules("allow", &allow));
        if !deny.is_empty() { root.push_str(&rules("deny", &deny)); }
        root.push_str("  compute:\n");
        root.push_str(&rules("allow", &callow));
        if !cdeny.is_empty() { root.push_str(&rules("deny", &cdeny)); }
        let mut files = BTreeMap::new();
        files.insert("root.yaml".to_string(), root.clone());
        let top = match &layer_allow {
            None => "policy:\n  extends: [./root.yaml]\n".to_string(),
            Some(la) => format!("policy:\n  extends: [./root.yaml]\n  applies_to: identity.namespace == \"t1\"\n  storage:\n{}", rules("allow", la)),
        };
        let p = match Policy::load_with("top.yaml", &top, &resolve::MemoryFiles(files)) {
            Ok(p) => p,
            Err(d) => return Err(TestCaseError::fail(format!("generated policy did not load:\n{}\n{root}", d.render()))),
        };
        let mut id = who(ns, attested);
        if let Some(t) = tier { id.labels.insert("tier".into(), t.into()); }
        let plan = p.plan(&id, &Deployment::default(), 0, "/workspace").unwrap();
        for (dir, leaf, r) in accesses {
            let path = format!("{dir}{leaf}");
            if plan.may(&path, r) {
                prop_assert!(
                    policy_allows(&p, &id, &path, r),
                    "the plan allows {} {:?} but the policy does not\n{}\n{}\nplan: {:#?}",
                    path, r, root, top, plan
                );
            }
        }
    }
}
