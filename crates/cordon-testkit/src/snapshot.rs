//! Snapshots' case, written once for every backend that offers them: a
//! file written before `snapshot` is there after `up --from`; a restored
//! sandbox and its source do not see each other's writes; `fork` makes
//! sandboxes that diverge; the sandbox's own temporary directory comes
//! back too where it lives on the host; `--memory` is refused with the
//! reason.

use crate::Cordon;

fn ok(c: &Cordon, args: &[&str]) -> String {
    let (code, out, err) = c.run(args);
    assert_eq!(code, 0, "cordon {args:?}: {out}{err}");
    out.trim().to_string()
}

fn exec(c: &Cordon, h: &str, script: &str) -> String {
    ok(c, &["sandbox", "exec", h, "--", "sh", "-c", script])
}

/// Runs the case; `sel` is `up`'s selection (floor, backend) without the
/// key; `scope` is the scope every sandbox of it is in; `tmp_kept`: the
/// backend's `$TMPDIR` (else `/tmp`) is on the sandbox's volume, so a
/// snapshot keeps it (the container rung's is a tmpfs of its own mount
/// namespace, and a restore starts it empty); `whole_guest`: the backend
/// saves its whole guest with `--memory` (the microVM: with nothing
/// running, files only), where every other refuses it. Every sandbox made is gone
/// at the end; the snapshot is forgotten.
pub fn restore_and_fork(c: &Cordon, scope: &str, sel: &[&str], tmp_kept: bool, whole_guest: bool) {
    let up = |thread: &str, extra: &[&str]| {
        let mut args = vec!["sandbox", "up", "--scope", scope, "--thread", thread, "-q"];
        args.extend_from_slice(sel);
        args.extend_from_slice(extra);
        ok(c, &args)
    };
    let src = up("src", &[]);
    exec(
        c,
        &src,
        "echo before > kept.txt && mkdir -p d && echo deep > d/f && echo scratch > \"${TMPDIR:-/tmp}/t\"",
    );
    let (code, out, err) = c.run(["sandbox", "snapshot", &src, "--memory"]);
    if whole_guest {
        // A backend that saves its whole guest (the microVM), with
        // nothing running in it: the snapshot holds files, and says so.
        assert_eq!(code, 0, "--memory: {err}");
        assert!(err.contains(", 0 processes"), "--memory: {err}");
        ok(c, &["sandbox", "forget", out.trim(), "--scope", scope]);
    } else {
        assert_eq!(code, 125, "--memory: {err}");
        // Refused with the reason: the native rungs' (a restored process
        // would lose its Landlock domain and seccomp filter) or gVisor's
        // (a sandbox made without `requires: [snapshot_memory]`).
        assert!(
            (err.contains("Landlock") || err.contains("snapshot_memory"))
                && err.contains("leave `--memory` out"),
            "{err}"
        );
    }
    let snap = ok(c, &["sandbox", "snapshot", &src, "--name", "base"]);
    assert!(snap.starts_with("snap-"), "{snap}");
    // Taken again unchanged: the same content-addressed snapshot.
    assert_eq!(ok(c, &["sandbox", "snapshot", &src]), snap);
    exec(c, &src, "echo after-snapshot > late.txt");

    let restored = up("restored", &["--from", "base"]);
    assert_eq!(exec(c, &restored, "cat kept.txt d/f"), "before\ndeep");
    assert_eq!(
        exec(
            c,
            &restored,
            "cat \"${TMPDIR:-/tmp}/t\" 2>/dev/null || echo empty"
        ),
        if tmp_kept { "scratch" } else { "empty" },
        "the temporary directory after a restore"
    );
    assert_eq!(
        exec(c, &restored, "test -e late.txt && echo seen || echo absent"),
        "absent",
        "a write after the snapshot reached the restore"
    );
    exec(
        c,
        &restored,
        "echo restored > kept.txt && echo mine > only-restored",
    );
    assert_eq!(
        exec(
            c,
            &src,
            "cat kept.txt; test -e only-restored && echo leak || echo ok"
        ),
        "before\nok"
    );

    let (code, out, err) = c.run(
        [
            "sandbox",
            "fork",
            &src,
            "--count",
            "3",
            "--thread-prefix",
            "f",
            "-q",
        ]
        .iter()
        .copied()
        .chain(sel.iter().copied()),
    );
    assert_eq!(code, 0, "fork: {err}");
    let forks: Vec<String> = out.lines().map(str::to_string).collect();
    assert_eq!(forks.len(), 3, "{out}");
    for (i, f) in forks.iter().enumerate() {
        exec(c, f, &format!("echo {i} > mark && cat late.txt >/dev/null"));
    }
    for (i, f) in forks.iter().enumerate() {
        assert_eq!(
            exec(c, f, "cat mark; ls"),
            format!("{i}\nd\nkept.txt\nlate.txt\nmark"),
            "fork {i} sees another's write"
        );
    }
    assert_eq!(exec(c, &src, "test -e mark && echo leak || echo ok"), "ok");

    for h in forks.iter().chain([&src, &restored]) {
        ok(c, &["sandbox", "down", h]);
    }
    let list = ok(
        c,
        &["sandbox", "snapshots", "--scope", scope, "--format", "json"],
    );
    let doc: serde_json::Value = serde_json::from_str(&list).expect("snapshots' JSON");
    assert!(
        doc["snapshots"].as_array().is_some_and(|a| !a.is_empty()),
        "{doc}"
    );
    let snaps: Vec<String> = doc["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    for s in snaps {
        ok(c, &["sandbox", "forget", &s, "--scope", scope]);
    }
    let (code, _, err) = c.run(["sandbox", "forget", "base", "--scope", scope]);
    assert_eq!(code, 125, "{err}");
}
