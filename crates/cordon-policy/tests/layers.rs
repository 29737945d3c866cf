//! Modules: `extends` expands into layers; the root defines all that can be
//! allowed and every later layer only narrows. Each refusal is shown
//! refusing, with its position; the monotonicity property is checked over
//! random policies, layers and requests.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;
use std::path::Path;

use cordon_policy::resolve::MemoryFiles;
use cordon_policy::*;
use proptest::prelude::*;

fn files(list: &[(&str, &str)]) -> MemoryFiles {
    MemoryFiles(
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn load_top(top: &str, others: &[(&str, &str)]) -> Result<Policy, Diagnostics> {
    Policy::load_with("top.yaml", top, &files(others))
}

fn load_ok(top: &str, others: &[(&str, &str)]) -> Policy {
    match load_top(top, others) {
        Ok(p) => p,
        Err(d) => panic!("did not load:\n{}", d.render()),
    }
}

fn load_err(top: &str, others: &[(&str, &str)]) -> String {
    match load_top(top, others) {
        Ok(_) => panic!("loaded but should have been refused"),
        Err(d) => d.render(),
    }
}

fn who(ns: &str) -> Identity {
    Identity {
        namespace: ns.into(),
        name: String::new(),
        attested: true,
        labels: BTreeMap::new(),
    }
}

fn egress(ns: &str, url: &str) -> Request {
    Request {
        identity: who(ns),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Egress(EgressFacts::from_url(url).unwrap()),
    }
}

fn allowed(p: &Policy, ns: &str, url: &str) -> bool {
    p.decide(&egress(ns, url)).is_allowed()
}

const ROOT: &str = r#"
policy:
  egress:
    allow:
      - name: example-hosts
        when: host.endsWith(".example.com")
    deny:
      - name: tls-only
        when: port != 443
    max_response_bytes: 8MiB
  compute:
    max_memory: 256MiB
"#;

// ---- semantics ----

#[test]
fn a_later_layer_intersects_allows_and_adds_denies() {
    let top = r#"
policy:
  extends: [./root.yaml]
  egress:
    allow:
      - host == "a.example.com" || host == "b.example.com" || host == "outside.test"
    deny:
      - host == "b.example.com"
"#;
    let p = load_ok(top, &[("root.yaml", ROOT)]);
    assert_eq!(p.layers.len(), 2);
    assert!(allowed(&p, "t", "https://a.example.com/"));
    // Denied by the added deny rule.
    assert!(!allowed(&p, "t", "https://b.example.com/"));
    // The later layer names it, but the root never allowed it: no widening.
    assert!(!allowed(&p, "t", "https://outside.test/"));
    // The root allows it, but the later layer does not.
    assert!(!allowed(&p, "t", "https://c.example.com/"));
}

#[test]
fn a_surface_the_root_states_no_allow_rules_for_allows_nothing() {
    let top = r#"
policy:
  extends: [./root.yaml]
  secret:
    allow: [secret.name == "team-a/token"]
"#;
    let p = load_ok(top, &[("root.yaml", ROOT)]);
    let req = Request {
        identity: who("team-a"),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Secret(SecretFacts {
            name: "team-a/token".into(),
            destination: None,
        }),
    };
    let d = p.decide(&req);
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.layer, Some(0));
}

#[test]
fn an_empty_allow_in_a_later_layer_allows_nothing() {
    let top = "policy:\n  extends: [./root.yaml]\n  egress:\n    allow: []\n";
    let p = load_ok(top, &[("root.yaml", ROOT)]);
    assert!(!allowed(&p, "t", "https://a.example.com/"));
    let d = p.decide(&egress("t", "https://a.example.com/"));
    assert_eq!(d.layer, Some(1), "the refusing layer is named");
}

#[test]
fn applies_to_binds_only_its_tenant_and_undecidable_counts_as_applying() {
    let team_a = r#"
policy:
  applies_to: identity.namespace == "team-a"
  egress:
    allow: [host == "a.example.com"]
"#;
    let by_label = r#"
policy:
  applies_to: identity.labels["tier"] == "restricted"
  egress:
    allow: []
"#;
    let top = "policy:\n  extends: [./root.yaml, ./team-a.yaml, ./by-label.yaml]\n";
    let p = load_ok(
        top,
        &[
            ("root.yaml", ROOT),
            ("team-a.yaml", team_a),
            ("by-label.yaml", by_label),
        ],
    );
    // team-a is narrowed to one host... but the label layer's condition
    // is undecidable (no `tier` label): it applies, and allows nothing.
    assert!(!allowed(&p, "team-a", "https://a.example.com/"));
    let mut r = egress("team-a", "https://a.example.com/");
    r.identity.labels.insert("tier".into(), "open".into());
    assert!(p.decide(&r).is_allowed());
    r.facts = SurfaceFacts::Egress(EgressFacts::from_url("https://b.example.com/").unwrap());
    assert!(!p.decide(&r).is_allowed(), "team-a's layer narrows team-a");
    // team-b is held to the root alone.
    let mut r = egress("team-b", "https://b.example.com/");
    r.identity.labels.insert("tier".into(), "open".into());
    assert!(p.decide(&r).is_allowed());
}

#[test]
fn bounds_only_go_down_and_only_for_the_identities_a_layer_binds() {
    let team_a = r#"
policy:
  applies_to: identity.namespace == "team-a"
  compute:
    max_memory: 128MiB
    max_processes: 8
"#;
    let top = "policy:\n  extends: [./root.yaml, ./team-a.yaml]\n";
    let p = load_ok(top, &[("root.yaml", ROOT), ("team-a.yaml", team_a)]);
    let env = Deployment::default();
    let a = p.bounds_for(&who("team-a"), &env);
    let b = p.bounds_for(&who("team-b"), &env);
    assert_eq!(a.max_memory, 128 << 20);
    assert_eq!(a.max_processes, 8);
    assert_eq!(b.max_memory, 256 << 20);
    assert_eq!(b.max_processes, Bounds::DEFAULT.max_processes);
}

#[test]
fn layers_expand_depth_first_parents_before_the_file_that_names_them() {
    let mid =
        "policy:\n  extends: [./root.yaml]\n  egress:\n    deny: [host == \"m.example.com\"]\n";
    let side = "policy:\n  egress:\n    deny: [host == \"s.example.com\"]\n";
    let top = "policy:\n  extends: [./mid.yaml, ./side.yaml]\n";
    let p = load_ok(
        top,
        &[("root.yaml", ROOT), ("mid.yaml", mid), ("side.yaml", side)],
    );
    let order: Vec<&str> = p.layers.iter().map(|l| &*l.origin).collect();
    assert_eq!(order, ["root.yaml", "mid.yaml", "side.yaml", "top.yaml"]);
}

#[test]
fn a_diamond_counts_its_shared_file_once_per_path() {
    let shared = "policy:\n  egress:\n    deny: [host == \"x.example.com\"]\n";
    let left = "policy:\n  extends: [./shared.yaml]\n";
    let right = "policy:\n  extends: [./shared.yaml]\n";
    let top = "policy:\n  extends: [./root.yaml, ./left.yaml, ./right.yaml]\n";
    let p = load_ok(
        top,
        &[
            ("root.yaml", ROOT),
            ("shared.yaml", shared),
            ("left.yaml", left),
            ("right.yaml", right),
        ],
    );
    let shared_layers = p
        .layers
        .iter()
        .filter(|l| &*l.origin == "shared.yaml")
        .count();
    assert_eq!(shared_layers, 2);
    assert_eq!(
        p.rules.iter().filter(|r| &*r.file == "shared.yaml").count(),
        2
    );
}

#[test]
fn the_rule_bound_counts_per_inclusion() {
    // 40 rules, reached along 2^9 paths, is far more than 10,000 rules.
    let mut rules = String::from("policy:\n  egress:\n    deny:\n");
    for i in 0..40 {
        rules.push_str(&format!("      - host == \"h{i}.example.com\"\n"));
    }
    let mut list: Vec<(String, String)> = vec![("l0.yaml".into(), rules)];
    for i in 1..10 {
        list.push((
            format!("l{i}.yaml"),
            format!(
                "policy:\n  extends: [./l{}.yaml, ./l{}.yaml]\n",
                i - 1,
                i - 1
            ),
        ));
    }
    list.push(("root.yaml".into(), ROOT.into()));
    let top = "policy:\n  extends: [./root.yaml, ./l9.yaml]\n";
    let refs: Vec<(&str, &str)> = list.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let err = load_err(top, &refs);
    assert!(
        err.contains("more than 256 layers") || err.contains("more than 10000 rules"),
        "{err}"
    );
}

// ---- refusals at load, with positions ----

#[test]
fn a_bound_higher_than_the_root_is_refused_naming_both_places() {
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_memory: 1GiB\n";
    let err = load_err(top, &[("root.yaml", ROOT)]);
    assert!(err.contains("top.yaml:4:17"), "{err}");
    assert!(
        err.contains("`max_memory` of 1GiB is higher than the root allows"),
        "{err}"
    );
    assert!(
        err.contains("root.yaml:12:17"),
        "names where the root sets it: {err}"
    );
    assert!(err.contains("state at most 256MiB"), "{err}");
}

#[test]
fn a_bound_the_root_does_not_state_is_held_to_the_default() {
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_processes: 65\n";
    let err = load_err(top, &[("root.yaml", ROOT)]);
    assert!(err.contains("top.yaml:4:"), "{err}");
    assert!(err.contains("built-in default of 64"), "{err}");
    // Equal is not higher.
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_processes: 64\n";
    load_ok(top, &[("root.yaml", ROOT)]);
}

#[test]
fn allow_ranges_outside_the_root_are_refused() {
    let top = r#"
policy:
  extends: [./root.yaml]
  egress:
    allow_ranges:
      - {cidr: 10.0.0.0/8, hosts: [git.internal.example.com]}
"#;
    let err = load_err(top, &[("root.yaml", ROOT)]);
    assert!(err.contains("top.yaml:6:"), "{err}");
    assert!(
        err.contains("only the root layer (root.yaml) may state it"),
        "{err}"
    );
}

#[test]
fn applies_to_on_the_root_is_refused() {
    let err = load_err(
        "policy:\n  applies_to: identity.namespace == \"a\"\n  egress:\n    allow: [true]\n",
        &[],
    );
    assert!(err.contains("top.yaml:2:"), "{err}");
    assert!(
        err.contains("the root layer cannot carry `applies_to`"),
        "{err}"
    );
}

#[test]
fn applies_to_reads_only_identity_and_env() {
    let layer = "policy:\n  applies_to: host == \"a\"\n";
    let err = load_err(
        "policy:\n  extends: [./root.yaml, ./l.yaml]\n",
        &[("root.yaml", ROOT), ("l.yaml", layer)],
    );
    assert!(err.contains("l.yaml:2:"), "{err}");
    assert!(
        err.contains(
            "undeclared name `host` in `applies_to`, which reads only `identity` and `env`"
        ),
        "{err}"
    );
    let layer = "policy:\n  applies_to: now > timestamp(\"2026-01-01T00:00:00Z\")\n";
    let err = load_err(
        "policy:\n  extends: [./root.yaml, ./l.yaml]\n",
        &[("root.yaml", ROOT), ("l.yaml", layer)],
    );
    assert!(
        err.contains("may read only `identity` and `env`, not `now`"),
        "{err}"
    );
}

#[test]
fn an_import_cycle_is_refused_naming_the_cycle() {
    let a = "policy:\n  extends: [./b.yaml]\n";
    let b = "policy:\n  extends: [./a.yaml]\n";
    let err = load_err(
        "policy:\n  extends: [./root.yaml, ./a.yaml]\n",
        &[("root.yaml", ROOT), ("a.yaml", a), ("b.yaml", b)],
    );
    assert!(err.contains("b.yaml:2:"), "{err}");
    assert!(
        err.contains("import cycle: a.yaml -> b.yaml -> a.yaml"),
        "{err}"
    );
    // A file extending itself is the smallest cycle.
    let err = load_err(
        "policy:\n  extends: [./top.yaml]\n",
        &[("top.yaml", "policy: {}\n")],
    );
    assert!(err.contains("import cycle"), "{err}");
}

#[test]
fn an_unknown_builtin_is_refused_listing_the_builtins() {
    let err = load_err("policy:\n  extends: [cordon:nothing]\n", &[]);
    assert!(err.contains("top.yaml:2:"), "{err}");
    assert!(err.contains("no built-in layer `cordon:nothing`"), "{err}");
    assert!(err.contains("`cordon:no-privilege`"), "{err}");
}

// ---- files: confined to the top file's directory ----

/// A scratch directory removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tree() -> Scratch {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = Scratch(std::env::temp_dir().join(format!(
        "cordon-layers-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    std::fs::create_dir_all(d.path().join("pol/base")).unwrap();
    std::fs::write(d.path().join("pol/base/root.yaml"), ROOT).unwrap();
    std::fs::write(d.path().join("secret.yaml"), ROOT).unwrap();
    d
}

fn load_in(d: &Path, top: &str) -> Result<Policy, String> {
    let p = d.join("pol/top.yaml");
    std::fs::write(&p, top).unwrap();
    Policy::load_file(&p).map_err(|d| d.render())
}

#[test]
fn a_layer_beneath_the_top_file_loads() {
    let d = tree();
    let p = load_in(d.path(), "policy:\n  extends: [./base/root.yaml]\n").unwrap();
    assert_eq!(p.layers.len(), 2);
}

#[test]
fn a_path_leaving_the_policy_tree_is_refused() {
    let d = tree();
    let err = load_in(d.path(), "policy:\n  extends: [../secret.yaml]\n").unwrap_err();
    assert!(err.contains("top.yaml:2:"), "{err}");
    assert!(
        err.contains("leads out of the policy's directory tree"),
        "{err}"
    );
    // Through a parent that exists inside the tree, too.
    let err = load_in(d.path(), "policy:\n  extends: [./base/../../secret.yaml]\n").unwrap_err();
    assert!(err.contains("leads out"), "{err}");
}

#[test]
fn an_absolute_path_is_refused() {
    let d = tree();
    let abs = d.path().join("pol/base/root.yaml");
    let err = load_in(
        d.path(),
        &format!("policy:\n  extends: [\"{}\"]\n", abs.display()),
    )
    .unwrap_err();
    assert!(err.contains("is an absolute path"), "{err}");
}

#[test]
fn a_link_leading_out_of_the_policy_tree_is_refused() {
    let d = tree();
    std::os::unix::fs::symlink(
        d.path().join("secret.yaml"),
        d.path().join("pol/base/link.yaml"),
    )
    .unwrap();
    let err = load_in(d.path(), "policy:\n  extends: [./base/link.yaml]\n").unwrap_err();
    assert!(err.contains("leads out"), "{err}");
    // The diagnostics never show the outside file's contents.
    assert!(!err.contains("example-hosts"), "{err}");
}

#[test]
fn a_layer_that_is_not_a_file_is_refused() {
    let d = tree();
    let err = load_in(d.path(), "policy:\n  extends: [./base]\n").unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
}

// ---- the property: a layer never widens ----

/// Small egress rule bodies over a handful of hosts, tenants and ports.
fn rule_body() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        (0..4u8).prop_map(|i| format!("host == \"h{i}.example.com\"")),
        (0..3u8).prop_map(|i| format!("host.endsWith(\"{i}.example.com\")")),
        (0..3u8).prop_map(|i| format!("identity.namespace == \"t{i}\"")),
        Just("identity.attested".to_string()),
        Just("port == 443".to_string()),
        Just("method == \"GET\"".to_string()),
        Just("identity.labels[\"tier\"] == \"gold\"".to_string()),
    ];
    atom.prop_recursive(2, 6, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} && {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
}

/// `allow:` absent, empty, or some rules.
fn allow_list() -> impl Strategy<Value = Option<Vec<String>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        4 => proptest::collection::vec(rule_body(), 1..4).prop_map(Some),
    ]
}

#[derive(Debug, Clone)]
struct LayerSpec {
    applies_to: Option<String>,
    allow: Option<Vec<String>>,
    deny: Vec<String>,
    max_memory_mib: Option<u64>,
}

/// `applies_to` conditions: over the base only.
fn guard() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..4u8).prop_map(|i| format!("identity.namespace == \"t{i}\"")),
        (0..4u8).prop_map(|i| format!("identity.namespace != \"t{i}\"")),
        Just("identity.attested".to_string()),
        Just("identity.labels[\"tier\"] == \"gold\"".to_string()),
        (0..4u8).prop_map(|i| format!(
            "identity.namespace == \"t{i}\" && identity.labels[\"tier\"] == \"lead\""
        )),
    ]
}

fn layer_spec() -> impl Strategy<Value = LayerSpec> {
    (
        proptest::option::of(guard()),
        allow_list(),
        proptest::collection::vec(rule_body(), 0..3),
        proptest::option::of(1..1024u64),
    )
        .prop_map(|(applies_to, allow, deny, max_memory_mib)| LayerSpec {
            applies_to,
            allow,
            deny,
            max_memory_mib,
        })
}

fn yaml(l: &LayerSpec, extends: Option<&str>, root: bool) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut y = String::from("policy:\n");
    if let Some(e) = extends {
        y.push_str(&format!("  extends: [{e}]\n"));
    }
    if let (false, Some(a)) = (root, &l.applies_to) {
        y.push_str(&format!("  applies_to: {}\n", q(a)));
    }
    if l.allow.is_some() || !l.deny.is_empty() {
        y.push_str("  egress:\n");
    }
    match &l.allow {
        None => {}
        Some(v) if v.is_empty() => y.push_str("    allow: []\n"),
        Some(v) => {
            y.push_str("    allow:\n");
            for r in v {
                y.push_str(&format!("      - {}\n", q(r)));
            }
        }
    }
    if !l.deny.is_empty() {
        y.push_str("    deny:\n");
        for r in &l.deny {
            y.push_str(&format!("      - {}\n", q(r)));
        }
    }
    if let Some(m) = l.max_memory_mib {
        y.push_str(&format!("  compute:\n    max_memory: {m}MiB\n"));
    }
    if y == "policy:\n" {
        y = "policy: {}\n".into();
    }
    y
}

fn request() -> impl Strategy<Value = Request> {
    (
        0..4u8,
        0..5u8,
        any::<bool>(),
        prop_oneof![Just(443u16), Just(80u16), Just(8443u16)],
        any::<bool>(),
        proptest::option::of(prop_oneof![Just("gold"), Just("lead")]),
    )
        .prop_map(|(t, h, attested, port, https, tier)| {
            let scheme = if https { "https" } else { "http" };
            let url = format!("{scheme}://h{h}.example.com:{port}/x");
            let mut identity = who(&format!("t{t}"));
            identity.attested = attested;
            if let Some(tier) = tier {
                identity.labels.insert("tier".into(), tier.into());
            }
            Request {
                identity,
                env: Deployment::default(),
                now: 0,
                facts: SurfaceFacts::Egress(EgressFacts::from_url(&url).unwrap()),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CORDON_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    /// For random policies, random extra layers and random requests: adding a
    /// layer never turns a deny (or undetermined) into an allow, and never
    /// raises a bound; a layer that states a higher bound does not load.
    #[test]
    fn adding_a_layer_never_widens(
        root in layer_spec(),
        mid in proptest::collection::vec(layer_spec(), 0..3),
        extra in layer_spec(),
        reqs in proptest::collection::vec(request(), 1..12),
    ) {
        let mut others: Vec<(String, String)> = vec![("l0.yaml".into(), yaml(&root, None, true))];
        for (i, m) in mid.iter().enumerate() {
            others.push((format!("l{}.yaml", i + 1), yaml(m, None, false)));
        }
        let list: Vec<String> = (0..=mid.len()).map(|i| format!("./l{i}.yaml")).collect();
        let base_top = format!("policy:\n  extends: [{}]\n", list.join(", "));
        let refs: Vec<(&str, &str)> = others.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let base = match load_top(&base_top, &refs) {
            Ok(p) => p,
            // A middle layer that raised a bound: nothing to compare.
            Err(d) => {
                prop_assert!(d.render().contains("higher than the root allows"), "{}", d.render());
                return Ok(());
            }
        };
        let narrowed_top = yaml(&extra, Some(&list.join(", ")), false);
        let narrowed = match load_top(&narrowed_top, &refs) {
            Ok(p) => p,
            Err(d) => {
                let root_mem = root.max_memory_mib.map(|m| m << 20).unwrap_or(Bounds::DEFAULT.max_memory);
                let stated = extra.max_memory_mib.map(|m| m << 20);
                prop_assert!(stated.is_some_and(|s| s > root_mem), "refused without a widening bound:\n{}", d.render());
                return Ok(());
            }
        };
        for r in &reqs {
            let before = base.decide(r);
            let after = narrowed.decide(r);
            prop_assert!(
                before.is_allowed() || !after.is_allowed(),
                "a layer turned {:?} into allow for {:?}\nlayer:\n{}",
                before.verdict, r, narrowed_top
            );
            let (b, a) = (base.bounds_for(&r.identity, &r.env), narrowed.bounds_for(&r.identity, &r.env));
            for bound in Bound::ALL {
                prop_assert!(a.get(bound) <= b.get(bound), "{:?} rose", bound);
            }
        }
    }
}

#[test]
fn a_layer_that_is_not_a_regular_file_is_refused_without_waiting() {
    let d = tree();
    let fifo = d.path().join("pol/base/fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        cordon_testkit::skip("a FIFO layer", "mkfifo is not available");
        return;
    }
    std::fs::create_dir(d.path().join("pol/base/dir.yaml")).unwrap();
    let root = d.path().to_path_buf();
    // Opening a FIFO for reading blocks until a writer comes: the load must
    // refuse it before it opens it, so it answers at once.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fifo = load_in(&root, "policy:\n  extends: [./base/fifo.yaml]\n");
        let dir = load_in(&root, "policy:\n  extends: [./base/dir.yaml]\n");
        let _ = tx.send((fifo, dir));
    });
    let (fifo, dir) = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("loading a policy that extends a FIFO hung");
    let fifo = fifo.unwrap_err();
    assert!(fifo.contains("is not a regular file"), "{fifo}");
    assert!(dir.unwrap_err().contains("is not a regular file"));
    // The same file, made regular, loads.
    std::fs::remove_file(fifo_path(d.path())).unwrap();
    std::fs::write(fifo_path(d.path()), ROOT).unwrap();
    assert!(load_in(d.path(), "policy:\n  extends: [./base/fifo.yaml]\n").is_ok());
}

fn fifo_path(d: &Path) -> std::path::PathBuf {
    d.join("pol/base/fifo.yaml")
}
