//! The files API through the real binary on a kept sandbox at the
//! container rung (issue 32's first slice): `cordon sandbox ls H`, `cat`,
//! `mkdir`, `mv`, `rm` do what they say in the work dir; the links the
//! workload plants out of it are never followed (read, listed into,
//! renamed through, removed through); and a storage rule of the policy
//! refuses the operation, naming the rule.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;

use cordon_testkit::can_sandbox;

fn cordon_in(dir: &Path) -> cordon_testkit::Cordon {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    cordon_testkit::cordon!().env("CORDON_STATE_DIR", &state)
}

#[test]
fn each_operation_works_in_the_work_dir_follows_no_link_and_the_policy_decides() {
    if !can_sandbox("the files API") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cordon_in(dir.path());
    // cordon:default, and writes and reads under `locked/` denied: a path
    // of the project the sandbox works in (a workspace), which the plan
    // masks for the workload and the guard refuses to the files API.
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("locked")).unwrap();
    std::fs::write(project.join("locked/x"), "no\n").unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "policy:\n  extends: [cordon:default]\n  storage:\n    deny:\n      - name: locked-away\n        when: path.startsWith(work_dir + \"/locked/\")\n",
    )
    .unwrap();
    let (code, h, err) = c.run([
        "sandbox",
        "up",
        "--scope",
        "f",
        "--thread",
        "t",
        "--min-isolation",
        "container",
        "--policy",
        policy.to_str().unwrap(),
        "--workspace",
        project.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let h = h.trim().to_string();
    let ok = |args: &[&str]| {
        let mut all = vec!["sandbox"];
        all.extend_from_slice(args);
        let (code, out, err) = c.run(&all);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let refused = |args: &[&str], says: &str| {
        let mut all = vec!["sandbox"];
        all.extend_from_slice(args);
        let (code, _, err) = c.run(&all);
        assert_ne!(code, 0, "{args:?} was not refused");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    // The workload's own layout: files, and links out of the work dir.
    ok(&[
        "exec",
        &h,
        "--",
        "sh",
        "-c",
        "mkdir -p d/e && echo hello > d/e/f.txt && echo top > a.txt && ln -s /etc/passwd pw && ln -s /etc etc-link",
    ]);

    let listing = ok(&["ls", &h, "--depth", "3", "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let paths: Vec<&str> = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["a.txt", "d", "d/e", "d/e/f.txt", "etc-link", "locked", "pw"],
        "a link was descended, an entry is missing, or one the policy denies reading is listed"
    );
    let pw = &doc["entries"].as_array().unwrap()[6];
    assert_eq!(pw["kind"], "symlink", "{pw}");
    assert_eq!(ok(&["cat", &h, "a.txt"]), "top\n");
    assert_eq!(
        ok(&["cat", &h, "d/e/f.txt", "--offset", "1", "--len", "3"]),
        "ell"
    );

    // Links out: never followed.
    refused(&["cat", &h, "pw"], "symbolic link");
    refused(&["cat", &h, "etc-link/passwd"], "symbolic link");
    refused(&["ls", &h, "etc-link"], "symbolic link");
    refused(&["mv", &h, "a.txt", "etc-link/a.txt"], "symbolic link");
    refused(&["rm", &h, "etc-link/passwd"], "symbolic link");
    ok(&["rm", &h, "pw"]);
    assert!(Path::new("/etc/passwd").exists(), "the link's target went");

    // Changes land where they say, as the workload's own files.
    ok(&["mkdir", &h, "x/y/z"]);
    ok(&["mv", &h, "a.txt", "x/y/z/a.txt"]);
    refused(&["mv", &h, "d/e/f.txt", "x/y/z/a.txt"], "already exists");
    refused(&["rm", &h, "d"], "not empty");
    ok(&["rm", &h, "-r", "d"]);
    let seen = ok(&[
        "exec",
        &h,
        "--",
        "sh",
        "-c",
        "cat x/y/z/a.txt; test -e d && echo d-left || echo d-gone; stat -c %U x/y/z/a.txt x/y/z",
    ]);
    assert_eq!(seen, "top\nd-gone\ncordon\ncordon\n");

    // The policy decides each operation, naming its rule.
    refused(&["cat", &h, "locked/x"], "locked-away");
    // Spelled around the rule: refused before any decision is made.
    refused(&["cat", &h, "/workspace//locked/x"], "not a canonical path");
    refused(&["cat", &h, "x/../locked/x"], "not a canonical path");
    refused(&["rm", &h, "./locked/x"], "not a canonical path");
    refused(&["rm", &h, "locked/x"], "locked-away");
    refused(&["mv", &h, "x/y/z/a.txt", "locked/a.txt"], "locked-away");
    ok(&["down", &h]);
    assert_eq!(
        std::fs::read_to_string(project.join("locked/x")).unwrap(),
        "no\n"
    );
}
