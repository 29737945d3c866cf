//! Workspaces through the real `cordon` binary: a project directory a
//! sandbox works in copy-on-write. Its changes show in `diff` and reach
//! the directory only through `apply` (or `run --apply`), which refuses a
//! link out and a path the host changed meanwhile; `max_disk` holds
//! whatever the directory's filesystem.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;

use cordon_testkit::can_sandbox;

fn cordon(state: &Path, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", state)
        .current_dir(cwd)
        .run(args)
}

/// A project directory (root's, on the host's large filesystem) with a
/// script and a file in it.
fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("script.py"),
        "open('result.txt', 'w').write('made in the sandbox\\n')\nopen('notes.md', 'a').write('more\\n')\n",
    )
    .unwrap();
    std::fs::write(d.path().join("notes.md"), "# notes\n").unwrap();
    d
}

/// A state directory of the test's own (0700, as cordon requires).
fn state_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    d
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>"))
}

#[test]
fn run_apply_writes_a_scripts_results_back_under_the_default_policy_and_without_it_nothing_lands() {
    if !can_sandbox("workspace run --apply") {
        return;
    }
    let state = state_dir();
    let p = project();
    // Without --apply: the script ran, its changes went with the sandbox.
    let (code, _, err) = cordon(
        state.path(),
        p.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--workspace",
            ".",
            "--",
            "python3",
            "script.py",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !p.path().join("result.txt").exists(),
        "a change reached the directory without --apply"
    );
    assert_eq!(read(&p.path().join("notes.md")), "# notes\n");
    // With it (the README's words, as a new user types them).
    let (code, _, err) = cordon(
        state.path(),
        p.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--workspace",
            ".",
            "--apply",
            "--",
            "python3",
            "script.py",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&p.path().join("result.txt")), "made in the sandbox\n");
    assert_eq!(read(&p.path().join("notes.md")), "# notes\nmore\n");
    assert!(err.contains("applied 2 changes"), "{err}");
    // A command that fails applies nothing.
    let (code, _, _) = cordon(
        state.path(),
        p.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--workspace",
            ".",
            "--apply",
            "--",
            "sh",
            "-c",
            "echo no > failed.txt; exit 3",
        ],
    );
    assert_eq!(code, 3);
    assert!(!p.path().join("failed.txt").exists());
    // --apply without a workspace is a usage error, before anything runs.
    let (code, _, err) = cordon(
        state.path(),
        p.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--apply",
            "--",
            "true",
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("--workspace"), "{err}");
}

#[test]
fn a_kept_sandboxs_diff_shows_its_changes_and_apply_refuses_a_link_out_and_a_host_change() {
    if !can_sandbox("workspace diff/apply") {
        return;
    }
    let state = state_dir();
    let p = project();
    std::fs::write(p.path().join("theirs.txt"), "host's first\n").unwrap();
    let dir = p.path();
    let (code, out, err) = cordon(
        state.path(),
        dir,
        &[
            "sandbox",
            "up",
            "--scope",
            "ws",
            "--thread",
            "t",
            "--min-isolation",
            "container",
            "--workspace",
            ".",
            "-q",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h = out.trim().to_string();
    // The host changes a file after the sandbox was made…
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(dir.join("theirs.txt"), "host's second\n").unwrap();
    // …and the workload changes it too, among others.
    let (code, _, err) = cordon(
        state.path(),
        dir,
        &[
            "sandbox", "exec", &h, "--", "sh", "-c",
            "python3 script.py && echo mine > theirs.txt && mkdir -p d/e && echo f > d/e/f && rm script.py && ln -s /etc/shadow out && ln -s notes.md in",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cordon(
        state.path(),
        dir,
        &["sandbox", "diff", &h, "--format", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let changes: Vec<(String, String)> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("d", "added"),
        ("d/e", "added"),
        ("d/e/f", "added"),
        ("in", "added"),
        ("notes.md", "modified"),
        ("out", "added"),
        ("result.txt", "added"),
        ("script.py", "removed"),
        ("theirs.txt", "modified"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(changes, want);
    // Nothing has reached the directory.
    assert!(!dir.join("result.txt").exists() && dir.join("script.py").exists());
    assert_eq!(read(&dir.join("notes.md")), "# notes\n");
    // Apply one path first, then the rest.
    let (code, _, err) = cordon(state.path(), dir, &["sandbox", "apply", &h, "d"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&dir.join("d/e/f")), "f\n");
    assert!(!dir.join("result.txt").exists());
    let (code, out, err) = cordon(
        state.path(),
        dir,
        &["sandbox", "apply", &h, "--format", "json"],
    );
    assert_eq!(code, 125, "a refused change fails the apply: {out}{err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let refused: Vec<&str> = doc["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(refused, ["out", "theirs.txt"], "{doc}");
    assert!(doc["refused"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("out of the workspace"));
    assert!(doc["refused"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("changed in the directory"));
    // The rest landed; the host's change is kept; no link out was made.
    assert_eq!(read(&dir.join("result.txt")), "made in the sandbox\n");
    assert_eq!(read(&dir.join("notes.md")), "# notes\nmore\n");
    assert!(!dir.join("script.py").exists());
    assert_eq!(read(&dir.join("theirs.txt")), "host's second\n");
    assert!(std::fs::symlink_metadata(dir.join("out")).is_err());
    assert_eq!(
        std::fs::read_link(dir.join("in")).unwrap(),
        Path::new("notes.md")
    );
    // A sandbox without a workspace says so.
    let (code, out, _) = cordon(
        state.path(),
        dir,
        &[
            "sandbox",
            "up",
            "--scope",
            "ws",
            "--thread",
            "plain",
            "--min-isolation",
            "container",
            "-q",
        ],
    );
    assert_eq!(code, 0);
    let plain = out.trim().to_string();
    let (code, _, err) = cordon(state.path(), dir, &["sandbox", "diff", &plain]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no workspace"), "{err}");
    for h in [&h, &plain] {
        let (code, _, err) = cordon(state.path(), dir, &["sandbox", "down", h]);
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(
        read(&dir.join("theirs.txt")),
        "host's second\n",
        "down left the directory as it was"
    );
}

#[test]
fn max_disk_holds_in_a_workspace_on_a_filesystem_larger_than_it() {
    if !can_sandbox("workspace max_disk") {
        return;
    }
    let state = state_dir();
    let p = project();
    let policy = p
        .path()
        .join("..")
        .join(format!("ws-policy-{}.yaml", std::process::id()));
    std::fs::write(
        &policy,
        "policy:\n  extends: [cordon:default]\n  compute:\n    max_disk: 16MiB\n",
    )
    .unwrap();
    let big = rustix::fs::statvfs(p.path()).unwrap();
    assert!(
        big.f_blocks * big.f_frsize > 1 << 30,
        "the test needs a large filesystem under the project"
    );
    for rung in ["container", "process"] {
        let (code, out, err) = cordon(
            state.path(),
            p.path(),
            &[
                "run",
                "--min-isolation",
                rung,
                "--backend",
                rung,
                "--policy",
                policy.to_str().unwrap(),
                "--workspace",
                ".",
                "--apply",
                "--",
                "/bin/sh",
                "-c",
                "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo end",
            ],
        );
        assert!(
            out.contains("No space left on device"),
            "{rung}: {code} {out}{err}"
        );
        assert!(
            !p.path().join("big").exists()
                || std::fs::metadata(p.path().join("big")).unwrap().len() < 16 << 20,
            "{rung}: more than max_disk reached the directory"
        );
    }
    let _ = std::fs::remove_file(&policy);
}
