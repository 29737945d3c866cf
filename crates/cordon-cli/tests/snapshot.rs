//! Snapshots through the real `cordon` binary: a kept sandbox's files into
//! the store, new sandboxes made from them (`up --from`, `fork`), each
//! independent and sharing the snapshot's bytes; refusals with the reason.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;

use cordon_testkit::can_sandbox;

/// `cordon` with a state directory and a snapshot store of the test's own.
fn cordon_in(dir: &Path) -> cordon_testkit::Cordon {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", &state)
        .env("CORDON_SNAPSHOT_DIR", dir.join("snapshots"))
}

#[test]
fn the_snapshot_case_passes_at_the_container_and_process_rungs() {
    if !can_sandbox("snapshots") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cordon_in(dir.path());
    for rung in ["container", "process"] {
        cordon_testkit::snapshot::restore_and_fork(
            &c,
            &format!("snap-{rung}"),
            &["--min-isolation", rung, "--backend", rung],
            rung == "process",
            false,
        );
    }
}

#[test]
fn a_restore_under_another_spec_or_policy_and_a_snapshot_past_the_quota_are_refused() {
    if !can_sandbox("snapshot refusals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cordon_in(dir.path());
    let run = |args: &[&str]| c.run(args);
    let (code, h, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "t",
        "--min-isolation",
        "container",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let h = h.trim().to_string();
    let (code, _, err) = run(&[
        "sandbox",
        "exec",
        &h,
        "--",
        "sh",
        "-c",
        "head -c 4096 /dev/zero > big",
    ]);
    assert_eq!(code, 0, "{err}");
    // A quota of 1KiB per scope holds a 4 KiB work dir out.
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, "snapshots:\n  quota_per_scope: 1KiB\n").unwrap();
    let (code, _, err) = run(&["sandbox", "snapshot", &h, "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("quota"), "{err}");
    assert!(
        std::fs::read_dir(dir.path().join("snapshots"))
            .unwrap()
            .next()
            .is_none(),
        "a refused snapshot left something in the store"
    );
    let (code, snap, err) = run(&["sandbox", "snapshot", &h]);
    assert_eq!(code, 0, "{err}");
    let snap = snap.trim().to_string();
    // Another spec, another policy: refused, naming what differs.
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "kind: other\nimage: host\n").unwrap();
    let (code, _, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "r1",
        "--min-isolation",
        "container",
        "--from",
        &snap,
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("widens what it was taken with in kind"),
        "{err}"
    );
    // A narrower spec (a bound set where the snapshot left it to the
    // policy) is taken; a wider one (an egress entry it had not) is not.
    let narrower = dir.path().join("narrower.yaml");
    std::fs::write(
        &narrower,
        "kind: run\nimage: host\nresources: {memory: 256MiB}\n",
    )
    .unwrap();
    let wider = dir.path().join("wider.yaml");
    std::fs::write(
        &wider,
        "kind: run\nimage: host\negress_allow: [pypi.org:443]\n",
    )
    .unwrap();
    for (thread, file, ok) in [("n1", &narrower, true), ("w1", &wider, false)] {
        let (code, out, err) = run(&[
            "sandbox",
            "up",
            "--scope",
            "q",
            "--thread",
            thread,
            "--min-isolation",
            "container",
            "--from",
            &snap,
            "--spec",
            file.to_str().unwrap(),
            "-q",
        ]);
        if ok {
            assert_eq!(code, 0, "{err}");
            let (code, _, err) = run(&["sandbox", "down", out.trim()]);
            assert_eq!(code, 0, "{err}");
        } else {
            assert_eq!(code, 125, "{err}");
            assert!(err.contains("in egress_allow"), "{err}");
        }
    }
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "policy:\n  extends: [cordon:default]\n  compute:\n    max_disk: 64MiB\n",
    )
    .unwrap();
    let (code, _, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "r2",
        "--min-isolation",
        "container",
        "--from",
        &snap,
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("another policy"), "{err}");
    // Another scope does not find it.
    let (code, _, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "other",
        "--thread",
        "r3",
        "--min-isolation",
        "container",
        "--from",
        &snap,
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("no snapshot"), "{err}");
    // Forgotten while a sandbox made from it runs: gone from the store at
    // once, its files kept for that sandbox until it goes.
    let (code, r, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "r5",
        "--min-isolation",
        "container",
        "--from",
        &snap,
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let r = r.trim().to_string();
    let (code, _, err) = run(&["sandbox", "forget", &snap, "--scope", "q"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["sandbox", "exec", &r, "--", "wc", "-c", "big"]);
    assert_eq!((code, out.trim()), (0, "4096 big"), "{err}");
    for h in [&h, &r] {
        let (code, _, err) = run(&["sandbox", "down", h]);
        assert_eq!(code, 0, "{err}");
    }
    // The next store operation deletes what no sandbox holds any more.
    let (code, _, _) = run(&["sandbox", "forget", "nothing", "--scope", "q"]);
    assert_eq!(code, 125);
    let (code, _, err) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "t2",
        "--min-isolation",
        "container",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, h2, _) = run(&[
        "sandbox",
        "up",
        "--scope",
        "q",
        "--thread",
        "t2",
        "--min-isolation",
        "container",
        "-q",
    ]);
    assert_eq!(code, 0);
    let (code, _, err) = run(&["sandbox", "snapshot", h2.trim()]);
    assert_eq!(code, 0, "{err}");
    let left: Vec<String> = std::fs::read_dir(dir.path().join("snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".removing"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let (code, _, err) = run(&["sandbox", "down", h2.trim()]);
    assert_eq!(code, 0, "{err}");
}

/// `--on-idle pause`: idle, the sandbox is frozen (not disposed of); idle
/// as long again, its files are kept as a snapshot and it goes; `up
/// --from` brings them back.
#[test]
fn an_idle_sandbox_is_paused_then_kept_as_a_snapshot_and_restorable() {
    if !can_sandbox("on_idle pause") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cordon_in(dir.path());
    let ok = |args: &[&str]| {
        let (code, out, err) = c.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.trim().to_string()
    };
    let h = ok(&[
        "sandbox",
        "up",
        "--scope",
        "idle",
        "--thread",
        "t",
        "--min-isolation",
        "container",
        "-q",
        "--idle-timeout",
        "2",
        "--on-idle",
        "pause",
    ]);
    ok(&["sandbox", "exec", &h, "--", "sh", "-c", "echo kept > f"]);
    let rec = cordon_host::state::StateDir::open(&dir.path().join("state"))
        .unwrap()
        .read(&h)
        .unwrap()
        .expect("a record");
    let freezer = rec.residue["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .find(|c| c.contains("/freezer/"))
        .map(|c| std::path::PathBuf::from(c).join("freezer.state"))
        .expect("a freezer cgroup");
    let state = || {
        std::fs::read_to_string(&freezer)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(state(), "THAWED");
    let wait_for = |what: &dyn Fn() -> bool, secs: u64| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !what() {
            assert!(std::time::Instant::now() < end, "timed out");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for(&|| state() == "FROZEN", 10);
    // Still there, and an exec resumes it.
    assert_eq!(ok(&["sandbox", "exec", &h, "--", "cat", "f"]), "kept");
    assert_eq!(state(), "THAWED");
    // Idle twice over: gone, its files kept.
    wait_for(
        &|| {
            !dir.path()
                .join("state/sandboxes")
                .join(format!("{h}.json"))
                .exists()
        },
        20,
    );
    let list = ok(&[
        "sandbox",
        "snapshots",
        "--scope",
        "idle",
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&list).unwrap();
    let name = doc["snapshots"][0]["name"]
        .as_str()
        .expect("a snapshot")
        .to_string();
    assert_eq!(name, format!("idle-{h}"));
    let back = ok(&[
        "sandbox",
        "up",
        "--scope",
        "idle",
        "--thread",
        "again",
        "--min-isolation",
        "container",
        "-q",
        "--from",
        &name,
    ]);
    assert_eq!(ok(&["sandbox", "exec", &back, "--", "cat", "f"]), "kept");
    ok(&["sandbox", "down", &back]);
}
