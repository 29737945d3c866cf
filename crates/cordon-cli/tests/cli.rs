//! The real `cordon` binary, spawned.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::process::Command;

fn cordon(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run cordon");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_policies_check_clean() {
    let (code, out, err) = cordon(&["policy", "check", "examples/policies/platform.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("ok    examples/policies/platform.yaml:"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1);
}

#[test]
fn a_broken_policy_prints_every_diagnostic_and_fails() {
    let (code, out, err) = cordon(&[
        "policy",
        "check",
        "crates/cordon-cli/tests/fixtures/broken.yaml",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    // Every problem at once, each with a position and a fix.
    for needle in [
        "broken.yaml:5:",
        "undeclared name `idnetity`",
        "did you mean `identity`?",
        "broken.yaml:6:",
        "cannot compare an int with a string",
        "broken.yaml:7:",
        "did you mean `startsWith`?",
        "broken.yaml:9:",
        "a rule must be a bool",
        "broken.yaml:11:",
        "size `512MB` is refused",
        "broken.yaml:12:",
        "did you mean `max_processes`?",
        "6 error(s)",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn json_output_carries_positions() {
    let (code, out, _) = cordon(&[
        "policy",
        "check",
        "--format",
        "json",
        "crates/cordon-cli/tests/fixtures/broken.yaml",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["ok"], false);
    let d = &v["diagnostics"][0];
    assert_eq!(d["line"], 5);
    assert!(d["column"].as_u64().unwrap() > 1);
    assert_eq!(d["rule"], "typo-behind-short-circuit");
    assert!(d["help"].as_str().unwrap().contains("identity"));
}

#[test]
fn a_missing_file_is_an_error_not_a_pass() {
    let (code, _, err) = cordon(&["policy", "check", "no/such/policy.yaml"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read the policy"), "{err}");
}
