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

/// The case every backend with workspaces passes (`cordon_testkit::workspace`).
#[test]
fn the_workspace_case_passes_at_the_container_and_process_rungs() {
    if !can_sandbox("workspace diff/apply") {
        return;
    }
    let state = state_dir();
    let c = cordon_testkit::cordon!().env("CORDON_STATE_DIR", state.path());
    for rung in ["container", "process"] {
        cordon_testkit::workspace::diff_then_apply(
            &c,
            &[
                "--scope",
                "ws",
                "--thread",
                rung,
                "--min-isolation",
                rung,
                "--backend",
                rung,
            ],
        );
    }
}

#[test]
fn a_sandbox_without_a_workspace_says_so_and_a_path_is_applied_alone() {
    if !can_sandbox("workspace refusals") {
        return;
    }
    let state = state_dir();
    let p = project();
    let dir = p.path();
    let up = |thread: &str, ws: bool| {
        let mut args = vec![
            "sandbox",
            "up",
            "--scope",
            "ws2",
            "--thread",
            thread,
            "--min-isolation",
            "container",
            "-q",
        ];
        if ws {
            args.extend_from_slice(&["--workspace", "."]);
        }
        let (code, out, err) = cordon(state.path(), dir, &args);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    };
    let plain = up("plain", false);
    for verb in ["diff", "apply"] {
        let (code, _, err) = cordon(state.path(), dir, &["sandbox", verb, &plain]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no workspace"), "{err}");
    }
    let h = up("ws", true);
    let (code, _, err) = cordon(
        state.path(),
        dir,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "sh",
            "-c",
            "echo a > a.txt && mkdir d && echo b > d/b.txt",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cordon(state.path(), dir, &["sandbox", "apply", &h, "d/b.txt"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&dir.join("d/b.txt")), "b\n");
    assert!(
        !dir.join("a.txt").exists(),
        "only the path named was applied"
    );
    let (code, _, err) = cordon(state.path(), dir, &["sandbox", "apply", &h, "nothing-here"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("changed nothing at or beneath"), "{err}");
    // The floor's own backend, the microVM, has no workspace: refused by
    // routing, naming the capability.
    let (code, _, err) = cordon(
        state.path(),
        dir,
        &[
            "run",
            "--min-isolation",
            "container",
            "--backend",
            "microvm",
            "--workspace",
            ".",
            "--",
            "true",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("workspace"), "{err}");
    for h in [&plain, &h] {
        let (code, _, err) = cordon(state.path(), dir, &["sandbox", "down", h]);
        assert_eq!(code, 0, "{err}");
    }
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
