//! The real `cordon` binary, spawned.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::process::Command;

/// `cordon ARGS` in the workspace's root.
fn cordon(args: &[&str]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .run(args)
}

#[test]
fn the_example_policies_check_clean() {
    let (code, out, err) = cordon(&["policy", "check", "examples/policies/platform.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("ok    examples/policies/platform.yaml:"),
        "{out}"
    );
    // The second line: the root's bounds, `max_disk` among them (unstated
    // there, so the built-in default).
    assert_eq!(out.lines().count(), 2, "{out}");
    let bounds = out.lines().nth(1).unwrap_or_default();
    assert!(
        bounds.starts_with("      root bounds: ")
            && bounds.contains("max_processes 32")
            && bounds.contains("max_disk 1GiB"),
        "{out}"
    );
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
    // A usage error (2), as at every policy command, with what to do.
    let (code, _, err) = cordon(&["policy", "check", "no/such/policy.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no such file") && err.contains("help:"),
        "{err}"
    );
    for args in [
        &[
            "policy",
            "explain",
            "no/such/policy.yaml",
            "--compute",
            "--command",
            "/bin/true",
        ][..],
        &[
            "policy",
            "test",
            "no/such/policy.yaml",
            "no/such/tests.yaml",
        ][..],
    ] {
        let (code, _, err) = cordon(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("help:"), "{args:?}: {err}");
    }
}

// ---- cordon policy test ----

const DEPLOYMENT: &str = "examples/policies/deployment.yaml";

fn example_tests() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/policies/tests");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            format!(
                "examples/policies/tests/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_example_suites_pass_with_full_coverage() {
    let tests = example_tests();
    let mut args = vec!["policy", "test", "--coverage", DEPLOYMENT];
    args.extend(tests.iter().map(String::as_str));
    let (code, out, err) = cordon(&args);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let last = lines.last().unwrap();
    let n = lines.iter().filter(|l| l.starts_with("ok    ")).count();
    assert_eq!(*last, format!("{n} passed, 0 failed"));
    assert!(n >= 30, "{out}");
    assert!(
        out.contains("coverage: every rule decided at least one case"),
        "{out}"
    );
    // The negatives the design insists on are there, and marked.
    for needle in [
        "team-b is refused partner-a.example.com",
        "an unattested run is refused everything",
        "team-b cannot read team-a's secret",
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle}"));
        assert!(
            line.starts_with("ok    ") && line.ends_with("(negative)"),
            "{line}"
        );
    }
}

#[test]
fn a_wrong_expectation_fails_with_expected_got_and_matched() {
    let (code, out, err) = cordon(&[
        "policy",
        "test",
        DEPLOYMENT,
        "crates/cordon-cli/tests/fixtures/wrong-expectations.yaml",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let expected = [
        "FAIL  team-b reads team-a's secret",
        "      expected: allow, got: deny",
        "      matched:  no allow rule matched",
        "                nearest: examples/policies/platform.yaml:54  secret.name.startsWith(identity.namespace + \"/\")  (own-tenant-secrets)",
        "                         identity.namespace was \"team-b\"",
        "FAIL  team-a reads its own secret                   (negative)",
        "      expected: deny, got: allow",
        "      matched:  examples/policies/platform.yaml:54  secret.name.startsWith(identity.namespace + \"/\")  (own-tenant-secrets)",
        "FAIL  an unattested read, denied by the wrong rule  (negative)",
        "      expected: deny by rule `no-platform-secrets`, got: deny by other rules",
        "      matched:  examples/policies/platform.yaml:57  !identity.attested  (unattested-secrets)",
        "ok    this one is right                             (negative)",
        "1 passed, 3 failed",
    ];
    let got: Vec<&str> = out.lines().collect();
    for want in expected {
        assert!(got.contains(&want), "missing line {want:?} in:\n{out}");
    }
    assert_eq!(*got.last().unwrap(), "1 passed, 3 failed");
}

#[test]
fn coverage_fails_a_run_that_leaves_a_rule_undecided() {
    let (code, out, err) = cordon(&[
        "policy",
        "test",
        "--coverage",
        DEPLOYMENT,
        "examples/policies/tests/secret.yaml",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("uncovered: examples/policies/tenants/team-b.yaml:"),
        "{out}"
    );
    assert!(out.ends_with("passed, 0 failed\n"), "{out}");
    // Without --coverage the same cases pass.
    let (code, ..) = cordon(&[
        "policy",
        "test",
        DEPLOYMENT,
        "examples/policies/tests/secret.yaml",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn a_test_file_that_does_not_load_exits_2_with_positions() {
    let (code, out, err) = cordon(&[
        "policy",
        "test",
        DEPLOYMENT,
        "crates/cordon-cli/tests/fixtures/one-case.yaml",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("one-case.yaml:1:1: error: unknown key `egress` in a test file"),
        "{err}"
    );
    // A policy that does not load is 2 as well.
    let (code, _, err) = cordon(&[
        "policy",
        "test",
        "crates/cordon-cli/tests/fixtures/broken.yaml",
        "examples/policies/tests/secret.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_case_naming_a_rule_the_policy_lacks_does_not_load() {
    let dir = std::env::temp_dir().join(format!("cordon-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.yaml");
    std::fs::write(
        &f,
        "tests:\n  - name: typo\n    secret:\n      identity: {namespace: a}\n      secret: {name: a/b}\n    expect: deny\n    rule: unatested-secrets\n",
    )
    .unwrap();
    let (code, out, err) = cordon(&["policy", "test", DEPLOYMENT, f.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("names rule `unatested-secrets`, which the policy does not have"),
        "{err}"
    );
}

#[test]
fn a_suite_with_no_cases_is_not_a_pass() {
    let dir = std::env::temp_dir().join(format!("cordon-cli-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.yaml");
    std::fs::write(&f, "tests: []\n").unwrap();
    let (code, out, err) = cordon(&["policy", "test", DEPLOYMENT, f.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("the test files hold no cases"), "{err}");
}

#[test]
fn test_results_in_json() {
    let (code, out, _) = cordon(&[
        "policy",
        "test",
        "--format",
        "json",
        DEPLOYMENT,
        "crates/cordon-cli/tests/fixtures/wrong-expectations.yaml",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 3);
    assert_eq!(v["cases"][1]["got"], "allow");
    assert_eq!(v["cases"][1]["deciding"][0]["name"], "own-tenant-secrets");
}

// ---- cordon policy explain ----

#[test]
fn explain_a_denial_names_the_nearest_rule_and_what_differed() {
    let (code, out, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--egress",
        "--identity",
        "namespace=team-b",
        "--identity",
        "attested=true",
        "--url",
        "https://partner-a.example.com/v1",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "denied");
    assert_eq!(
        lines[1],
        "  no allow rule of layer examples/policies/tenants/team-b.yaml matched (every applying layer that states egress allow rules must allow)"
    );
    assert!(
        lines[2].starts_with("  nearest: examples/policies/tenants/team-b.yaml:"),
        "{out}"
    );
    assert_eq!(lines[3].trim(), "host was \"partner-a.example.com\"");
}

#[test]
fn explain_an_allow_names_the_deciding_rules_of_every_layer() {
    let (code, out, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--egress",
        "--identity",
        "namespace=team-a",
        "--identity",
        "attested=true",
        "--url",
        "https://partner-a.example.com/v1",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().next(), Some("allowed"));
    assert!(out.contains("allowed by: examples/policies/platform.yaml:9  identity.attested && host.endsWith(\".example.com\")  (partner-apis)"), "{out}");
    assert!(out.contains("allowed by: examples/policies/tenants/team-a.yaml:9  host == \"partner-a.example.com\"  (team-a-partner)"), "{out}");
}

#[test]
fn explain_names_the_unknowns_that_decided() {
    let (code, out, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--secret",
        "platform/signing-key",
        "--identity",
        "namespace=team-a",
        "--identity",
        "attested=true",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out.lines().next(), Some("denied"));
    assert!(out.contains("undetermined, so denied"), "{out}");
    assert!(out.contains("(no-platform-secrets)"), "{out}");
    assert!(out.contains("error: no such key"), "{out}");
}

#[test]
fn explain_reads_a_case_from_a_file_and_answers_in_json() {
    let (code, out, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--facts",
        "crates/cordon-cli/tests/fixtures/one-case.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["allowed"], false);
    assert_eq!(v["verdict"], "deny");
    assert_eq!(v["nearest"]["conjuncts"][0]["inputs"][0]["fact"], "host");
    assert_eq!(
        v["nearest"]["conjuncts"][0]["inputs"][0]["value"],
        "\"partner-a.example.com\""
    );
}

#[test]
fn explain_refuses_facts_the_enforcing_point_cannot_see() {
    let (code, _, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--egress",
        "--url",
        "https://pypi.org/",
        "--method",
        "POST",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("travels inside the TLS tunnel"), "{err}");
    let (code, _, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--egress",
        "--identity",
        "team-b",
        "--url",
        "https://x.example.com/",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--identity takes KEY=VALUE"), "{err}");
    let (code, _, err) = cordon(&[
        "policy",
        "explain",
        DEPLOYMENT,
        "--url",
        "https://x.example.com/",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("name the surface to decide"), "{err}");
}

/// A root policy inspecting `api.example.com` (with its own CA roots), with
/// a suite deciding by method and path, in a temporary directory.
fn inspecting_policy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.path().join("ca.pem"), pem).expect("ca");
    std::fs::write(
        dir.path().join("policy.yaml"),
        r#"
policy:
  egress:
    inspect:
      - {host: api.example.com, ca: ./ca.pem}
    allow:
      - name: read-only-api
        when: host == "api.example.com" && method == "GET" && path.startsWith("/v1/")
  secret:
    allow:
      - name: brokered-key
        when: secret.name == "api/key" && destination.host == "api.example.com"
"#,
    )
    .expect("policy");
    std::fs::write(
        dir.path().join("tests.yaml"),
        r#"
tests:
  - name: GET under /v1/
    egress: {url: "https://api.example.com/v1/items"}
    expect: allow
  - name: DELETE under /v1/
    egress: {url: "https://api.example.com/v1/items", method: DELETE}
    expect: deny
  - name: GET elsewhere
    egress: {url: "https://api.example.com/admin", headers: {accept: "*/*"}}
    expect: deny
  - name: the key where it is granted
    secret: {secret: {name: api/key}}
    expect: deny
  - name: the key substituted toward its host
    secret:
      secret: {name: api/key}
      destination: {host: api.example.com, header: authorization}
    expect: allow
"#,
    )
    .expect("tests");
    dir
}

#[test]
fn policy_test_decides_an_inspected_https_host_by_method_and_path() {
    let dir = inspecting_policy();
    let p = dir.path().join("policy.yaml");
    let t = dir.path().join("tests.yaml");
    let (code, out, err) = cordon(&[
        "policy",
        "test",
        "--coverage",
        p.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("5 passed, 0 failed"), "{out}");
    let (code, out, err) = cordon(&["policy", "check", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "inspected (TLS terminated by the proxy): api.example.com (with its own CA roots)"
        ),
        "{out}"
    );
}

#[test]
fn explain_sees_inside_an_inspected_tunnel_and_a_secret_destination() {
    let dir = inspecting_policy();
    let p = dir.path().join("policy.yaml");
    let p = p.to_str().unwrap();
    let egress = |method: &str| {
        cordon(&[
            "policy",
            "explain",
            p,
            "--egress",
            "--url",
            "https://api.example.com/v1/x?q=1",
            "--method",
            method,
            "--header",
            "Accept=*/*",
        ])
    };
    let (code, out, err) = egress("GET");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().next(), Some("allowed"), "{out}");
    let (code, out, err) = egress("POST");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("method was \"POST\""), "{out}");
    // Not inspected: the method stays inside the tunnel.
    let (code, _, err) = cordon(&[
        "policy",
        "explain",
        p,
        "--egress",
        "--url",
        "https://other.example.com/",
        "--method",
        "GET",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("does not inspect `other.example.com`"),
        "{err}"
    );
    let (code, out, _) = cordon(&["policy", "explain", p, "--secret", "api/key"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("destination.host is unknown"), "{out}");
    let (code, out, err) = cordon(&[
        "policy",
        "explain",
        p,
        "--secret",
        "api/key",
        "--destination",
        "host=API.example.com",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

// ---- cordon doctor ----

fn cordon_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .run_env(args, env)
}

#[test]
fn doctor_lists_every_backend_and_fails_when_none_can_serve() {
    let (code, out, err) = cordon_env(&["doctor"], &[]);
    // No backend is built yet, so none can serve under any floor.
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.starts_with("floor: microvm (from the default)"),
        "{out}"
    );
    for name in ["microvm", "gvisor", "container", "docker", "process"] {
        assert!(
            out.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{out}"
        );
    }
    // The microvm row says which accelerator it found and so which rung
    // (or why it cannot run at all).
    assert!(
        out.lines().any(|l| l.starts_with("microvm")
            && (l.contains("accelerator: ") || l.contains("cannot run"))),
        "{out}"
    );
    assert!(err.contains("--min-isolation"), "{err}");
    // And each enforcement mechanism, with what the probe found.
    assert!(out.contains("mechanisms on this machine:"), "{out}");
    for m in [
        "user namespace",
        "landlock",
        "seccomp",
        "cgroup controllers",
        "rlimits",
    ] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(m)),
            "{m} missing:\n{out}"
        );
    }
}

#[test]
fn doctor_refuses_an_unknown_rung_from_any_source() {
    let (code, _, err) = cordon_env(&["doctor", "--min-isolation", "proces"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("`proces` is not an isolation rung"), "{err}");
    // A bad environment value is refused even when a flag overrides it.
    let (code, _, err) = cordon_env(
        &["doctor", "--min-isolation", "vm"],
        &[("CORDON_MIN_ISOLATION", "Container")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`Container` is not an isolation rung"),
        "{err}"
    );
}

// ---- cordon conformance ----

#[test]
fn conformance_runs_the_kit_against_the_host_directory_subject() {
    let (code, out, err) = cordon(&["conformance", "--backend", "host-directory"]);
    assert_eq!(code, 0, "{out}{err}");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "{out}");
    assert!(
        out.lines().filter(|l| l.starts_with("pass ")).count() >= 14,
        "{out}"
    );
}

/// Every backend cordon ships with `files_out` passes the kit in CI.
#[test]
fn conformance_passes_against_the_local_backends() {
    if !can_sandbox("conformance against the local backends") {
        return;
    }
    for backend in ["process", "container"] {
        let (code, out, err) = cordon(&["conformance", "--backend", backend]);
        assert_eq!(code, 0, "{backend}:\n{out}{err}");
        let last = out.lines().last().unwrap_or_default();
        assert!(last.ends_with(" passed, 0 failed"), "{backend}: {out}");
        assert!(
            out.lines().filter(|l| l.starts_with("pass ")).count() >= 13,
            "{backend}: {out}"
        );
    }
}

#[test]
fn conformance_refuses_a_backend_it_cannot_run_or_does_not_know() {
    // An engine that is not there: docker cannot run.
    let (code, out, err) = cordon_env(
        &["conformance", "--backend", "docker"],
        &[("CORDON_DOCKER_HOST", "unix:///nonexistent/docker.sock")],
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("cannot run on this machine"),
        "{out}{err}"
    );
    let (code, _, err) = cordon(&["conformance", "--backend", "nope"]);
    assert_eq!(code, 2, "{err}");
}

// ---- cordon run ----

// The real binary, as CI (root) runs it. Outside CI the sandbox cases skip
// loudly (`cordon_testkit::can_sandbox`); refusals before any launch run
// everywhere.
use cordon_testkit::can_sandbox;

fn run_at(rung: &str, extra: &[&str], cmd: &[&str]) -> (i32, String, String) {
    let mut args = vec!["run", "--min-isolation", rung, "--backend", rung];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    cordon_env(&args, &[])
}

/// A policy the process rung can hold: no deny inside a granted tree.
const PROCESS_POLICY: &str = r#"policy:
  compute:
    max_memory: 128MiB
    max_wall_seconds: 5
    allow:
      - name: system-programs
        when: command.startsWith("/usr/") || command.startsWith("/bin/") || command.startsWith("/lib/") || command.startsWith("/lib64/")
  storage:
    allow:
      - name: system
        when: (path.startsWith("/usr/") || path.startsWith("/lib/") || path.startsWith("/lib64/") || path.startsWith("/bin/")) && mode in ["read", "execute"]
      - name: etc
        when: path.startsWith("/etc/") && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
"#;

fn process_policy() -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("policy");
    std::io::Write::write_all(&mut f, PROCESS_POLICY.as_bytes()).expect("write");
    f
}

/// The policy each rung runs the shared cases under.
fn policy_args(rung: &str, p: &tempfile::NamedTempFile) -> Vec<String> {
    if rung == "process" {
        vec!["--policy".into(), p.path().display().to_string()]
    } else {
        vec![]
    }
}

#[test]
fn run_refuses_below_the_default_floor_with_the_flag_to_opt_down() {
    let (code, _, err) = cordon_env(&["run", "--", "/bin/true"], &[]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("no backend here meets the floor `microvm` (from the default)"),
        "{err}"
    );
    // The strongest rung this machine runs below the floor: gVisor's where
    // runsc runs, else the container rung.
    assert!(
        err.contains("--min-isolation hardened_container")
            || err.contains("--min-isolation container"),
        "{err}"
    );
    // The microvm backend is named with why it does not serve here: below
    // the floor under TCG, or unable to run.
    assert!(err.contains("`microvm`"), "{err}");
}

#[test]
fn run_refuses_a_named_backend_below_the_floor() {
    let (code, _, err) = cordon_env(
        &[
            "run",
            "--min-isolation",
            "container",
            "--backend",
            "process",
            "--",
            "/bin/true",
        ],
        &[],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("`process` (process) is below the floor `container`"),
        "{err}"
    );
}

#[test]
fn run_writes_the_work_dir_and_prints_at_both_rungs() {
    if !can_sandbox("run python3") {
        return;
    }
    let p = process_policy();
    for rung in ["container", "process"] {
        let extra = policy_args(rung, &p);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (code, out, err) = run_at(
            rung,
            &extra,
            &[
                "python3",
                "-c",
                "open('o.txt','w').write('x'); print(open('o.txt').read() + ' from a sandbox')",
            ],
        );
        assert_eq!(code, 0, "{rung}: {err}");
        assert_eq!(out.trim(), "x from a sandbox", "{rung}");
        assert!(
            err.contains("below the default floor `microvm`"),
            "{rung}: {err}"
        );
        assert!(err.contains("`--min-isolation`"), "{rung}: {err}");
    }
}

#[test]
fn run_cannot_read_shadow_write_outside_or_reach_the_network() {
    if !can_sandbox("run escapes") {
        return;
    }
    let p = process_policy();
    let outside = format!("/var/tmp/cordon-run-escape-{}", std::process::id());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    for rung in ["container", "process"] {
        let extra = policy_args(rung, &p);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (code, _, err) = run_at(
            rung,
            &extra,
            &["python3", "-c", "print(open('/etc/shadow').read())"],
        );
        assert_ne!(code, 0, "{rung}: read /etc/shadow");
        assert!(
            err.contains("Permission denied") || err.contains("No such file"),
            "{rung}: {err}"
        );
        let code = run_at(
            rung,
            &extra,
            &[
                "python3",
                "-c",
                &format!("open('{outside}','w').write('x')"),
            ],
        )
        .0;
        assert_ne!(code, 0, "{rung}: wrote outside");
        assert!(
            !std::path::Path::new(&outside).exists(),
            "{rung}: the host file exists"
        );
        let code = run_at(
            rung,
            &extra,
            &[
                "python3",
                "-c",
                &format!("import socket; socket.create_connection(('127.0.0.1', {port}), 2)"),
            ],
        )
        .0;
        assert_ne!(code, 0, "{rung}: connected");
        assert!(listener.accept().is_err(), "{rung}: a connection arrived");
    }
}

#[test]
fn run_refuses_privilege_tools_before_they_start_by_their_canonical_path() {
    if !can_sandbox("run su") {
        return;
    }
    for cmd in ["su", "/bin/su", "/usr/bin/su"] {
        let (code, out, err) = run_at("container", &[], &[cmd, "-c", "id"]);
        assert_eq!(code, 125, "{cmd}: {out}{err}");
        assert!(err.contains("no-privilege-tools"), "{cmd}: {err}");
        assert!(
            err.contains("canonical `/usr/bin/su`")
                || !std::path::Path::new("/usr/bin/su").exists(),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn run_holds_a_denied_path_inside_a_readable_tree_at_both_rungs() {
    if !can_sandbox("run storage deny") {
        return;
    }
    if !std::path::Path::new("/etc/ssl/private").is_dir() {
        eprintln!("SKIP run storage deny: this machine has no /etc/ssl/private");
        return;
    }
    // cordon:default denies /etc/ssl/private/ inside the readable /etc/ssl/.
    let probe = "ls /etc/ssl/private >/dev/null 2>&1 && echo private-listed; \
                 cat /etc/ssl/openssl.cnf >/dev/null && echo ssl-ok";
    let (code, out, err) = run_at("container", &[], &["sh", "-c", probe]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "ssl-ok", "{out}{err}");
    // The process rung has no masks: the denied directory is carved out of
    // the read-only grant on /etc/ssl, and the rest stays readable.
    let (code, out, err) = run_at("process", &[], &["sh", "-c", probe]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "ssl-ok", "{out}{err}");
}

/// Under cordon:default a sandbox sees only what programs read from the
/// host's /etc: not its listing, machine id, name or users; the container
/// rung has its own passwd, group, hostname and hosts.
#[test]
fn run_shows_only_what_programs_need_of_etc() {
    if !can_sandbox("run etc") {
        return;
    }
    let probe = "ls /etc >/dev/null 2>&1 && echo etc-listed; \
                 cat /etc/machine-id >/dev/null 2>&1 && echo machine-id; \
                 cat /etc/fstab >/dev/null 2>&1 && echo fstab; \
                 cat /etc/ld.so.cache >/dev/null && echo loader-ok";
    for rung in ["container", "process"] {
        let (code, out, err) = run_at(rung, &[], &["sh", "-c", probe]);
        assert_eq!(code, 0, "{rung}: {err}");
        assert_eq!(out.trim(), "loader-ok", "{rung}: {out}{err}");
    }
    let host_name = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let (code, out, err) = run_at(
        "container",
        &[],
        &[
            "sh",
            "-c",
            "id -un; id -gn; cat /etc/hostname; grep -c . /etc/passwd; date +%Z",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.get(..4),
        Some(&["cordon", "cordon", "cordon", "3"][..]),
        "{out}{err}"
    );
    let host_name = host_name.trim();
    assert!(host_name == "cordon" || !out.contains(host_name), "{out}");
    // The host's users stay out even where a policy grants all of /etc.
    let whole = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("policy");
    std::fs::write(whole.path(), PROCESS_POLICY).expect("write");
    let (code, out, err) = run_at(
        "container",
        &["--policy", whole.path().to_str().expect("utf-8")],
        &[
            "sh",
            "-c",
            "ls /etc | grep -c . ; id -un; grep -c . /etc/passwd",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].parse::<usize>().unwrap_or(0) > 10,
        "/etc granted whole: {out}"
    );
    assert_eq!(&lines[1..], ["cordon", "3"], "{out}{err}");
}

#[test]
fn run_kills_at_the_memory_and_wall_bounds() {
    if !can_sandbox("run bounds") {
        return;
    }
    let p = process_policy();
    for rung in ["container", "process"] {
        let extra = vec!["--policy", p.path().to_str().expect("utf-8")];
        let (code, _, err) = run_at(
            rung,
            &extra,
            &["python3", "-c", "import time; time.sleep(30)"],
        );
        assert_eq!(code, 124, "{rung}: {err}");
        assert!(err.contains("max_wall_seconds"), "{rung}: {err}");
        let (code, _, err) = run_at(
            rung,
            &extra,
            &["python3", "-c", "b = bytearray(1 << 30); print(len(b))"],
        );
        assert_ne!(code, 0, "{rung}: allocated 1 GiB under a 128 MiB bound");
        assert!(code == 124 || code == 1, "{rung}: {code} {err}");
    }
}

/// A workload that fills its private `/tmp` (a tmpfs charged to the memory
/// bound: pages that belong to no process) is the one the kernel kills,
/// reported as the memory bound with 124 — never the sandbox's init, which
/// ended the run as a cordon failure (125) before.
#[test]
fn filling_tmp_is_the_memory_bound_and_never_kills_the_init() {
    if !can_sandbox("tmp fill") {
        return;
    }
    let p = process_policy();
    let extra = vec!["--policy", p.path().to_str().expect("utf-8")];
    let (code, _, err) = run_at(
        "container",
        &extra,
        &["dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=400"],
    );
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("killed at the `max_memory` bound"), "{err}");
    assert!(!err.contains("init"), "{err}");
    // The score that puts the workload first is its own to keep: /proc is
    // read-only to it, so it cannot hand the kernel's choice back to the
    // init.
    let (code, out, err) = run_at(
        "container",
        &extra,
        &[
            "sh",
            "-c",
            "cat /proc/self/oom_score_adj; echo 0 > /proc/self/oom_score_adj || echo refused",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["1000", "refused"],
        "{out}{err}"
    );
}

/// A spec whose work dir lies in a tree programs run from is refused up
/// front, saying why, rather than started with every program of the tree
/// refused `EACCES` (or, before, with the work dir executable).
#[test]
fn run_refuses_a_work_dir_inside_an_executable_tree() {
    if !can_sandbox("run work dir in /usr") {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "kind: run\nimage: host\nwork_dir: /usr/local/bin\n").expect("spec");
    let (code, _, err) = run_at(
        "container",
        &["--spec", spec.to_str().expect("utf-8")],
        &["/bin/true"],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("the work dir `/usr/local/bin` lies beneath `/usr`"),
        "{err}"
    );
    assert!(err.contains("help: put the work dir outside"), "{err}");
}

#[test]
fn show_default_prints_the_built_in_policy() {
    let (code, out, _) = cordon(&["policy", "show-default"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("# cordon:default"), "{out}");
    assert!(out.contains("/etc/shadow"), "{out}");
}

/// `cordon` starts sandboxes with the `cordon-init` beside it only when that
/// file is as trustworthy as itself: one anybody may write is ignored (the
/// run goes on with `cordon`'s own init).
#[test]
fn run_uses_the_init_beside_it_only_when_nobody_else_can_write_it() {
    use std::os::unix::fs::PermissionsExt;
    if !can_sandbox("run sibling init") {
        return;
    }
    for (mode, used) in [(0o755, true), (0o777, false)] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
        let cordon = dir.path().join("cordon");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_cordon"), &cordon).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_cordon"), &cordon).expect("copy cordon");
        }
        let canary = dir.path().join("init-ran");
        let init = dir.path().join("cordon-init");
        std::fs::write(
            &init,
            format!(
                "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
                canary.display(),
                env!("CARGO_BIN_EXE_cordon-init")
            ),
        )
        .expect("write init");
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let out = Command::new(&cordon)
            .args([
                "run",
                "--min-isolation",
                "container",
                "--",
                "/bin/echo",
                "ran",
            ])
            .env_remove("CORDON_MIN_ISOLATION")
            .output()
            .expect("run cordon");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{mode:o}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran", "{err}");
        assert_eq!(
            canary.exists(),
            used,
            "{mode:o}: sibling init used: {}",
            canary.exists()
        );
    }
}

// ---- exit codes and messages of the workload commands ----

/// `run` and `sandbox exec` pass their workload's status through, so every
/// failure of cordon's own is 125 there, a usage error too; elsewhere a
/// usage error stays 2.
#[test]
fn a_workload_commands_own_failures_are_125_and_say_what_to_do() {
    // A forgotten `--`: 125, with the form that works.
    let (code, _, err) = cordon(&["run", "python3", "-V"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("help: the command goes after `--`")
            && err.contains("`cordon run [OPTIONS] -- python3 ...`"),
        "{err}"
    );
    let (code, _, err) = cordon(&["sandbox", "exec", "h", "python3"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("`cordon sandbox exec [OPTIONS] HANDLE -- python3 ...`"),
        "{err}"
    );
    // An unknown flag, a misspelt rung, an empty handle.
    let (code, _, err) = cordon(&["run", "--no-such-flag", "--", "/bin/true"]);
    assert_eq!(code, 125, "{err}");
    let (code, _, err) = cordon(&["run", "--min-isolation", "contaner", "--", "/bin/true"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("(did you mean `container`?)"), "{err}");
    let (code, _, err) = cordon(&["sandbox", "exec", "", "--", "/bin/true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("error: an empty string is not a sandbox handle\nhelp: "),
        "{err}"
    );
    // A policy that does not load: its diagnostics, then cordon's line on
    // a line of its own.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "policy:\n  compute:\n    allow:\n      - name: x\n        when: command ==\n",
    )
    .unwrap();
    let (code, _, err) = cordon(&["run", "--policy", bad.to_str().unwrap(), "--", "/bin/true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("\nerror: the policy does not load") && !err.contains("`error:"),
        "{err}"
    );
    // Help is not an error.
    let (code, out, _) = cordon(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("125 when cordon refused it or could not run it"),
        "{out}"
    );
    let (code, out, _) = cordon(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Exit codes:") && out.contains("124  a bound"),
        "{out}"
    );
    // The other commands run no workload: usage errors are 2.
    let (code, _, err) = cordon(&["policy", "check", "--no-such-flag"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cordon(&["sandbox", "down", ""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("an empty string is not a sandbox handle"),
        "{err}"
    );
    let (code, _, err) = cordon(&["doctor", "--min-isolation", "contaner"]);
    assert_eq!(code, 2, "{err}");
}

/// The floor notice is said where one command lowered the floor, and not
/// on every run where the environment or the configuration file records
/// the choice, nor under `--quiet`.
#[test]
fn the_floor_notice_is_said_for_the_flag_only_and_not_under_quiet() {
    if !can_sandbox("floor notice") {
        return;
    }
    let p = process_policy();
    let pol = p.path().display().to_string();
    let notice = "below the default floor `microvm`";
    let base = ["--backend", "process", "--policy", &pol];
    let mut flag = vec!["run", "--min-isolation", "process"];
    flag.extend_from_slice(&base);
    flag.extend_from_slice(&["--", "/bin/true"]);
    let (code, _, err) = cordon_env(&flag, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(notice) && err.contains("`--min-isolation`"),
        "{err}"
    );
    let mut quiet = vec!["run", "--quiet", "--min-isolation", "process"];
    quiet.extend_from_slice(&base);
    quiet.extend_from_slice(&["--", "/bin/true"]);
    let (code, _, err) = cordon_env(&quiet, &[]);
    assert_eq!((code, err.as_str()), (0, ""), "--quiet");
    let mut env = vec!["run"];
    env.extend_from_slice(&base);
    env.extend_from_slice(&["--", "/bin/true"]);
    let (code, _, err) = cordon_env(&env, &[("CORDON_MIN_ISOLATION", "process")]);
    assert_eq!((code, err.as_str()), (0, ""), "from the environment");
}

/// The README shows what `cordon policy check` of the flagship example
/// prints, warning included: run here, compared line by line.
#[test]
fn the_readme_shows_what_policy_check_of_the_example_prints() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let prompt = "$ cordon policy check examples/policies/deployment.yaml\n";
    let at = readme.find(prompt).expect("the README shows the check") + prompt.len();
    let shown: Vec<&str> = readme[at..].lines().take_while(|l| !l.is_empty()).collect();
    let (code, out, err) = cordon(&["policy", "check", "examples/policies/deployment.yaml"]);
    assert_eq!(code, 0, "{err}");
    let printed: Vec<&str> = err
        .lines()
        .chain(out.lines())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        shown, printed,
        "README.md and what the command prints differ"
    );
}

/// `run --format json`: NDJSON events, the bound that killed the workload
/// named, and a refusal as an error line with 125.
#[test]
fn run_in_json_names_the_bound_that_killed_it() {
    let (code, out, _) = cordon(&[
        "run",
        "--format",
        "json",
        "--min-isolation",
        "contaner",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, 125);
    let e: serde_json::Value = serde_json::from_str(out.trim()).expect("one error line");
    assert_eq!(
        (e["event"].as_str(), e["exit_code"].as_u64()),
        (Some("error"), Some(125))
    );
    if !can_sandbox("run --format json") {
        return;
    }
    let policy = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(
        policy.path(),
        PROCESS_POLICY.replace("max_wall_seconds: 5", "max_wall_seconds: 1"),
    )
    .unwrap();
    let pol = policy.path().display().to_string();
    let (code, out, err) = run_at(
        "process",
        &["--format", "json", "--policy", &pol],
        &["/bin/sleep", "5"],
    );
    assert_eq!(code, 124, "{out}{err}");
    let ev: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(ev[0]["event"], "sandbox");
    assert_eq!(ev[0]["rung"], "process");
    let last = ev.last().unwrap();
    assert_eq!(last["event"], "exit");
    assert_eq!(last["exit_code"], 124);
    assert_eq!(last["killed_by"], "max_wall_seconds");
}

/// The kits in JSON: one document with every probe or case and the counts;
/// an unknown backend an error document with its code.
#[test]
fn the_kits_report_in_json() {
    let (code, out, err) = cordon(&[
        "conformance",
        "--backend",
        "host-directory",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(out.trim()).expect("one document");
    let results = d["results"].as_array().expect("results");
    assert!(
        d["ok"] == true && d["failed"] == 0 && !results.is_empty(),
        "{out}"
    );
    assert_eq!(d["passed"].as_u64(), Some(results.len() as u64));
    assert!(results
        .iter()
        .all(|r| r["name"].is_string() && r["passed"] == true));
    let (code, out, _) = cordon(&["conformance", "--backend", "nope", "--format", "json"]);
    assert_eq!(code, 2);
    let e: serde_json::Value = serde_json::from_str(out.trim()).expect("one error document");
    assert_eq!(
        (e["ok"].as_bool(), e["exit_code"].as_u64()),
        (Some(false), Some(2))
    );
    if !can_sandbox("escape --format json") {
        return;
    }
    let (code, out, err) = cordon_env(
        &[
            "escape",
            "--backend",
            "process",
            "--case",
            "host-environment",
            "--case",
            "no-such-case",
            "--format",
            "json",
        ],
        &[],
    );
    assert_eq!(code, 1, "an unknown case fails: {err}");
    let d: serde_json::Value = serde_json::from_str(out.trim()).expect("one document");
    assert_eq!(
        (d["ok"].as_bool(), d["rung"].as_str()),
        (Some(false), Some("process"))
    );
    assert_eq!(
        (d["passed"].as_u64(), d["failed"].as_u64()),
        (Some(1), Some(1))
    );
}

/// A usage error whose arguments are not UTF-8 is a usage error (125 for
/// run), not a panic.
#[test]
fn a_non_utf8_argument_in_a_usage_error_is_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .arg("run")
        .arg(std::ffi::OsStr::from_bytes(b"py\xffthon"))
        .output()
        .expect("run cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
