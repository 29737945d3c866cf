//! The loaders take hostile text: whatever they are given, they answer with
//! a policy, test cases or diagnostics, and never panic.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_policy::{cases, Policy};
use proptest::prelude::*;

/// Fragments of policy and test files, to be shuffled into near-misses.
const TOKENS: &[&str] = &[
    "policy:",
    "tests:",
    "\n",
    "\n  ",
    "\n    ",
    "\n      - ",
    "egress:",
    "compute:",
    "storage:",
    "secret:",
    "allow:",
    "deny:",
    "name: ",
    "when: ",
    "extends: ",
    "applies_to: ",
    "expect: allow",
    "expect: deny",
    "rule: ",
    "identity:",
    "{namespace: a, attested: true}",
    "url: ",
    "https://a.example.com/",
    "http://[::1]:80/x",
    "command: /usr/bin/python3",
    "args: [\"-c\"]",
    "path: /work/a",
    "mode: read",
    "secret: {name: a/b}",
    "max_memory: 1GiB",
    "max_processes: 0",
    "allow_ranges:",
    "- {cidr: 10.0.0.0/8, hosts: [a]}",
    "host == \"a\"",
    "identity.attested",
    "path.startsWith(\"/work/\")",
    "&&",
    "||",
    "!",
    "(",
    ")",
    "[",
    "]",
    "\"",
    "'",
    "&a",
    "*a",
    "!!str",
    "cordon:no-privilege",
    "./x.yaml",
    "- ",
    ": ",
    "#",
    "\t",
    "\u{0}",
    "é",
    "size(args) > 3",
    "args.exists(a, a == \"-c\")",
    "identity.labels[\"k\"]",
    "1/0",
    "timestamp(\"x\")",
];

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(TOKENS), 0..60).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CORDON_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_policy_loader_never_panics(t in text()) {
        if let Ok(p) = Policy::load_str("f.yaml", &t) {
            let _ = p.summary();
        }
    }

    #[test]
    fn the_test_file_loader_never_panics(t in text()) {
        let p = Policy::load_default().unwrap();
        let _ = cases::load_str("t.yaml", &t, &p);
        let _ = cases::load_one_str("c.yaml", &t, &p);
    }

    #[test]
    fn arbitrary_unicode_never_panics(t in "\\PC{0,200}") {
        let _ = Policy::load_str("f.yaml", &t);
        let _ = cases::load_str("t.yaml", &t, &Policy::load_default().unwrap());
    }
}

/// Found by the `load_policy` fuzz target: a syntax error at a character of
/// more than one byte (`қ` below) was positioned inside that character,
/// and rendering the diagnostic panicked slicing the file there.
#[test]
fn a_syntax_error_at_a_wide_character_is_a_diagnostic() {
    for rule in [
        "identity.attested && hostқndsWith(\".example.com\")",
        "host == \"ққ\" ]",
        "қ",
        "host.endsWith(\"é\") && é",
    ] {
        let text =
            format!("policy:\n  egress:\n    allow:\n      - name: r\n        when: {rule}\n");
        let diags = Policy::load_str("p.yaml", &text).expect_err(rule);
        assert!(diags.has_errors(), "{rule}");
        let shown = diags.render();
        assert!(shown.contains("p.yaml:5:"), "{rule}: {shown}");
    }
}

/// A rule nested deeper than the loader allows is a diagnostic, not a
/// stack overflow (found by the load_policy fuzz target: 138 levels took a
/// debug build's test thread down); string literals do not count.
#[test]
fn a_deeply_nested_rule_is_refused_with_the_limit() {
    let deep = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    let yaml =
        format!("policy:\n  egress:\n    allow:\n      - name: deep\n        when: '{deep}'\n");
    let err = cordon_policy::Policy::load_str("deep.yaml", &yaml)
        .map(|_| ())
        .expect_err("refused")
        .render();
    assert!(err.contains("the limit is 16"), "{err}");
    let quoted = "policy:\n  egress:\n    allow:\n      - name: q\n        when: 'host == \"((((((((((((((((((((((((((((((((((((((((\"'\n";
    assert!(cordon_policy::Policy::load_str("q.yaml", quoted).is_ok());
}

/// YAML flow collections nested past the limit are a positioned
/// diagnostic, not a stack overflow in the YAML parser.
#[test]
fn deeply_nested_yaml_is_refused_with_the_limit() {
    let yaml = format!("policy: {}{}\n", "{a: ".repeat(300), "}".repeat(300));
    let err = cordon_policy::Policy::load_str("deep.yaml", &yaml)
        .map(|_| ())
        .expect_err("refused")
        .render();
    assert!(err.contains("deeper than 64 levels"), "{err}");
}
