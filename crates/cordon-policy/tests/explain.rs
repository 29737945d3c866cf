//! `explain` reads its answer off the evaluation that decides, and the test
//! runner decides as the enforcing point does. Checked on every case of the
//! example suites, and on the shapes an explanation takes.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::{Path, PathBuf};

use cordon_policy::cases;
use cordon_policy::decide::Outcome;
use cordon_policy::*;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies")
}

fn example_policy() -> Policy {
    Policy::load_file(&examples().join("deployment.yaml")).unwrap()
}

fn example_cases() -> Vec<cases::Case> {
    let policy = example_policy();
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples().join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "the example suites are missing: {files:?}"
    );
    files
        .iter()
        .flat_map(|f| match cases::load_file(f, &policy) {
            Ok(c) => c,
            Err(d) => panic!("{}", d.render()),
        })
        .collect()
}

#[test]
fn explain_agrees_with_decide_on_every_example_case() {
    let policy = Policy::load_file(&examples().join("deployment.yaml")).unwrap();
    let all = example_cases();
    assert!(all.len() >= 30);
    let mut verdicts = std::collections::BTreeSet::new();
    for c in &all {
        let d = policy.decide(&c.request);
        let e = policy.explain(&c.request);
        assert_eq!(e.decision, d, "case `{}`", c.name);
        verdicts.insert(format!("{:?}", d.verdict));
        // Every deciding rule was evaluated on the decision path, with the
        // outcome the verdict claims for it.
        for id in &d.deciding {
            let o = e
                .evaluated
                .iter()
                .find(|(r, _)| r == id)
                .map(|(_, o)| o.clone())
                .unwrap_or_else(|| {
                    panic!(
                        "case `{}`: rule {id:?} decided but was not recorded",
                        c.name
                    )
                });
            match d.verdict {
                Verdict::Undetermined => assert!(matches!(o, Outcome::Open(_)), "{}", c.name),
                _ => assert_eq!(o, Outcome::True, "{}", c.name),
            }
        }
        // And the runner passes every example case.
        let r = cases::run(&policy, c);
        assert!(
            r.passed,
            "example case `{}` fails: {:?}",
            c.name,
            e.why(&policy, c.request.facts.surface())
        );
    }
    // The suites exercise all three verdicts.
    assert_eq!(verdicts.len(), 3, "{verdicts:?}");
}

const ONE_FILE: &str = r#"
policy:
  egress:
    allow:
      - name: packages
        when: host == "pypi.org"
      - name: team-a-partner
        when: identity.namespace == "team-a" && host == "partner-a.example.com"
    deny:
      - name: tls-only
        when: port != 443
      - name: no-posts
        when: scheme == "http" && method == "POST"
      - name: no-internal-addresses
        when: host == "mirror.example.com" && ip.startsWith("10.")
"#;

fn policy() -> Policy {
    Policy::load_str("egress.yaml", ONE_FILE).unwrap()
}

fn case(text: &str) -> Request {
    match cases::load_one_str("case.yaml", text, &policy()) {
        Ok(r) => r,
        Err(d) => panic!("{}", d.render()),
    }
}

#[test]
fn a_denial_names_the_nearest_rule_and_the_inputs_that_differed() {
    let p = policy();
    let e = p.explain(&case(
        "egress:\n  identity: {namespace: team-b}\n  url: https://partner-a.example.com/v1\n",
    ));
    assert_eq!(e.headline(), "denied");
    let why = e.why(&p, Surface::Egress);
    assert_eq!(why[0], "no allow rule matched");
    // The tenant rule is the nearest although the namespace index never
    // evaluated it for team-b.
    assert_eq!(
        why[1],
        "nearest: egress.yaml:8  identity.namespace == \"team-a\" && host == \"partner-a.example.com\"  (team-a-partner)"
    );
    assert_eq!(why[2].trim(), "identity.namespace was \"team-b\"");
    assert_eq!(why.len(), 3, "only the conjunct that was false: {why:?}");
}

#[test]
fn an_allow_names_the_rules_that_allowed() {
    let p = policy();
    let e = p.explain(&case(
        "egress:\n  identity: {namespace: team-a}\n  url: https://partner-a.example.com/v1\n",
    ));
    assert_eq!(e.headline(), "allowed");
    assert_eq!(
        e.why(&p, Surface::Egress),
        ["allowed by: egress.yaml:8  identity.namespace == \"team-a\" && host == \"partner-a.example.com\"  (team-a-partner)"]
    );
}

#[test]
fn a_deny_rule_that_matched_is_named() {
    let p = policy();
    let e = p.explain(&case(
        "egress:\n  identity: {namespace: team-a}\n  url: https://pypi.org:8443/\n",
    ));
    assert_eq!(e.headline(), "denied");
    assert_eq!(
        e.why(&p, Surface::Egress),
        ["denied by: egress.yaml:11  port != 443  (tls-only)"]
    );
}

#[test]
fn unknowns_that_decided_are_named_with_why_they_are_unknown() {
    let p = policy();
    // Before the proxy resolves the name, the address is unknown: the
    // deny rule might match.
    let e = p.explain(&case(
        "egress:\n  identity: {namespace: team-a}\n  url: https://mirror.example.com/\n",
    ));
    assert_eq!(e.headline(), "denied");
    assert_eq!(e.decision.verdict, Verdict::Undetermined);
    assert_eq!(e.decision.unknown, vec![Fact::Ip]);
    let why = e.why(&p, Surface::Egress).join("\n");
    assert!(why.contains("deny rule that might match: egress.yaml:15  host == \"mirror.example.com\" && ip.startsWith(\"10.\")  (no-internal-addresses)"), "{why}");
    assert!(
        why.contains("ip is unknown: it is not known until the proxy resolves the name"),
        "{why}"
    );
    // Once it is known, the rule decides.
    let e = p.explain(&case("egress:\n  identity: {namespace: team-a}\n  url: https://mirror.example.com/\n  ip: 10.1.2.3\n"));
    assert_eq!(e.why(&p, Surface::Egress), ["denied by: egress.yaml:15  host == \"mirror.example.com\" && ip.startsWith(\"10.\")  (no-internal-addresses)"]);
    // Over plain http the method is known: a POST is denied outright.
    let e = p.explain(&case(
        "egress:\n  identity: {namespace: team-a}\n  url: http://pypi.org:443/\n  method: post\n",
    ));
    assert_eq!(
        e.why(&p, Surface::Egress),
        ["denied by: egress.yaml:13  scheme == \"http\" && method == \"POST\"  (no-posts)"]
    );
}

#[test]
fn a_case_stating_what_the_proxy_cannot_see_is_refused() {
    let err = cases::load_one_str(
        "case.yaml",
        "egress:\n  identity: {namespace: a}\n  url: https://pypi.org/\n  method: POST\n",
        &policy(),
    )
    .unwrap_err()
    .render();
    assert!(err.contains("case.yaml:4:11"), "{err}");
    assert!(err.contains("travels inside the TLS tunnel"), "{err}");
}

#[test]
fn a_test_file_is_checked_as_strictly_as_a_policy() {
    let bad = r#"
tests:
  - name: typo in a field
    egress:
      identity: {namespace: a, atested: true}
      url: https://pypi.org/
    expect: allow
  - name: two surfaces
    egress: {url: "https://pypi.org/"}
    storage: {path: /work/x, mode: read}
    expect: allow
  - name: an unknown surface
    network: {url: "https://pypi.org/"}
    expect: allow
  - name: a typed field with a YAML guess
    compute:
      command: /usr/bin/python3
      cpu: lots
    expect: deny
  - name: a verdict that is not one
    egress: {url: "https://pypi.org/"}
    expect: undetermined
"#;
    let err = cases::load_str("t.yaml", bad, &policy())
        .unwrap_err()
        .render();
    for needle in [
        "t.yaml:5:32: error: unknown key `atested` in `identity`",
        "did you mean `attested`?",
        "t.yaml:10:5: error: a case names one surface; this one names `egress` and `storage`",
        "t.yaml:13:5: error: unknown key `network` in a case",
        "t.yaml:18:12: error: `lots` is not a whole number",
        "t.yaml:22:13: error: `expect` is `allow` or `deny`, not `undetermined`",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn scalars_are_typed_by_the_vocabulary_not_by_yaml() {
    // `namespace: 123` and `name: true` are strings; `attested: "yes"` is no bool.
    let r = case("secret:\n  identity: {namespace: 123, name: true, attested: true}\n  secret: {name: a/b}\n");
    assert_eq!(r.identity.namespace, "123");
    assert_eq!(r.identity.name, "true");
    let err = cases::load_one_str(
        "c.yaml",
        "secret:\n  identity: {attested: yes}\n  secret: {name: a/b}\n",
        &policy(),
    )
    .unwrap_err()
    .render();
    assert!(
        err.contains("`identity.attested` is a bool, not `yes`"),
        "{err}"
    );
}

#[test]
fn facts_are_canonicalised_as_the_enforcing_layer_does() {
    let r = case("egress:\n  url: HTTPS://Partner-A.Example.COM.:443/v1\n");
    let SurfaceFacts::Egress(e) = &r.facts else {
        panic!()
    };
    assert_eq!(e.host.as_deref(), Some("partner-a.example.com"));
    assert_eq!(e.port, 443);
    assert_eq!(e.method, None);
    assert_eq!(e.path, None);
    let r = case("storage:\n  path: /work/out/../.git/config\n  mode: write\n");
    let SurfaceFacts::Storage(s) = &r.facts else {
        panic!()
    };
    assert_eq!(s.path, "/work/.git/config");
}
