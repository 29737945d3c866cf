//! Secrets through the real binary: `cordon run --secrets-dir DIR` hands a
//! secret the spec names and the policy grants to the workload as a
//! read-only file at /run/cordon/secrets/NAME at both local rungs, and the
//! workload cannot change it; a secret the policy does not grant is refused
//! before the workload runs; without `--secrets-dir` the refusal says what
//! to pass; `cordon sandbox up` delivers them too, and both `down` and
//! `gc` (after its keeper was killed) remove the host copy.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cordon_testkit::can_sandbox;

use cordon_testkit::suite::{assert_secret_held, SECRETS_POLICY as POLICY, SECRET_SCRIPT};

/// The test's files: the policy, specs, the secret store, a scratch
/// directory (the binary's TMPDIR: where sandbox directories are made) and
/// a state directory.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::Builder::new()
            .prefix("cordon-test-secrets-cli-")
            .tempdir_in("/tmp")
            .unwrap();
        // Traversable by a sandbox's init, which binds its directories as
        // the workload's uid.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
        let store = dir.path().join("store");
        for (name, value) in [("granted/token", "s3cr3t-token"), ("other/x", "not-yours")] {
            let p = store.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, value).unwrap();
        }
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755)).unwrap();
        Files { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spec(&self, secrets: &[&str]) -> PathBuf {
        let p = self.path(&format!(
            "spec-{}.yaml",
            secrets.join("-").replace('/', "_")
        ));
        std::fs::write(
            &p,
            format!(
                "kind: secrets-test\nimage: host\nrequires: [exec]\nsecrets: [{}]\n",
                secrets.join(", ")
            ),
        )
        .unwrap();
        p
    }

    /// The secrets directories in the scratch directory.
    fn secret_dirs(&self) -> Vec<PathBuf> {
        cordon_testkit::suite::secret_dirs(&self.path("scratch"))
    }

    fn cordon(&self, args: &[&str]) -> (i32, String, String) {
        cordon_testkit::output(
            cordon_testkit::cordon!()
                .command(args)
                .env("TMPDIR", self.path("scratch"))
                .env("CORDON_STATE_DIR", self.path("state"))
                .output()
                .expect("run cordon"),
        )
    }

    /// `cordon run` at `rung` with `spec`, `--secrets-dir` when `store`.
    fn run(&self, rung: &str, spec: &Path, store: bool, script: &str) -> (i32, String, String) {
        let policy = self.path("policy.yaml");
        let store_dir = self.path("store");
        let mut args = vec![
            "run",
            "--min-isolation",
            rung,
            "--backend",
            rung,
            "--policy",
            policy.to_str().unwrap(),
            "--spec",
            spec.to_str().unwrap(),
        ];
        if store {
            args.extend(["--secrets-dir", store_dir.to_str().unwrap()]);
        }
        args.extend(["--", "/bin/sh", "-c", script]);
        self.cordon(&args)
    }
}

const RUNGS: [&str; 2] = ["process", "container"];

#[test]
fn run_hands_a_granted_secret_to_the_workload_read_only_at_both_rungs() {
    if !can_sandbox("run with a secret") {
        return;
    }
    let f = Files::new();
    let spec = f.spec(&["granted/token"]);
    for rung in RUNGS {
        let (code, out, err) = f.run(rung, &spec, true, SECRET_SCRIPT);
        assert_eq!(code, 0, "{rung}: {out}\n{err}");
        assert_secret_held(rung, &out, &err);
        assert!(
            f.secret_dirs().is_empty(),
            "{rung}: the secrets outlived the run: {:?}",
            f.secret_dirs()
        );
    }
}

#[test]
fn a_secret_the_policy_does_not_grant_is_refused_before_the_workload_runs() {
    if !can_sandbox("an ungranted secret") {
        return;
    }
    let f = Files::new();
    let spec = f.spec(&["granted/token", "other/x"]);
    for rung in RUNGS {
        let (code, out, err) = f.run(rung, &spec, true, "echo RAN");
        assert_ne!(code, 0, "{rung}: {out}");
        assert!(!out.contains("RAN"), "{rung}: the workload ran: {out}");
        assert!(
            err.contains("`other/x`") && err.contains("refused by the policy"),
            "{rung}: {err}"
        );
        assert!(f.secret_dirs().is_empty(), "{rung}");
    }
}

#[test]
fn without_a_secret_store_the_refusal_says_to_pass_secrets_dir() {
    if !can_sandbox("no secret store") {
        return;
    }
    let f = Files::new();
    let spec = f.spec(&["granted/token"]);
    let (code, out, err) = f.run("process", &spec, false, "echo RAN");
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("RAN"), "{out}");
    assert!(err.contains("--secrets-dir DIR"), "{err}");
    // A directory that is not there is refused up front, saying so.
    let missing = f.path("no-such-store");
    let (code, _, err) = f.cordon(&[
        "run",
        "--min-isolation",
        "process",
        "--secrets-dir",
        missing.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--secrets-dir"), "{err}");
}

#[test]
fn sandbox_up_delivers_secrets_and_down_and_gc_remove_them() {
    if !can_sandbox("sandbox up with a secret") {
        return;
    }
    let f = Files::new();
    let spec = f.spec(&["granted/token"]);
    let policy = f.path("policy.yaml");
    let store = f.path("store");
    let up = |thread: &str| {
        let (code, out, err) = f.cordon(&[
            "sandbox",
            "up",
            "--scope",
            "s-secrets",
            "--thread",
            thread,
            "--min-isolation",
            "container",
            "--policy",
            policy.to_str().unwrap(),
            "--spec",
            spec.to_str().unwrap(),
            "--secrets-dir",
            store.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "up: {out}\n{err}");
        out.trim().to_string()
    };
    let a = up("t1");
    let b = up("t2");
    let dirs = f.secret_dirs();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for h in [&a, &b] {
        let (code, out, err) = f.cordon(&[
            "sandbox",
            "exec",
            h,
            "--",
            "/bin/sh",
            "-c",
            "cat /run/cordon/secrets/granted/token; echo; (echo x > /run/cordon/secrets/granted/token) 2>/dev/null && echo WROTE || echo held",
        ]);
        assert_eq!(
            (code, out.as_str()),
            (0, "s3cr3t-token\nheld\n"),
            "{h}: {err}"
        );
    }
    let (code, _, err) = f.cordon(&["sandbox", "down", &a]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(f.secret_dirs().len(), 1, "down left the secrets of {a}");
    // A keeper killed outright: gc removes its secrets with the rest.
    let rec = cordon_host::state::StateDir::open(&f.path("state"))
        .unwrap()
        .read(&b)
        .unwrap()
        .expect("the record");
    let secrets = rec
        .host_work_dir
        .as_ref()
        .and_then(|d| d.secrets.as_ref())
        .expect("the record names the secrets dir")
        .host
        .clone();
    assert!(secrets.is_dir());
    let pid = nix::unistd::Pid::from_raw(rec.keeper.pid as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rec.keeper.alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (code, out, err) = f.cordon(&["sandbox", "gc"]);
    assert_eq!(code, 0, "gc: {out}\n{err}");
    assert!(
        !secrets.exists(),
        "gc left `{}`: {out}{err}",
        secrets.display()
    );
    assert!(f.secret_dirs().is_empty());
}

#[test]
fn gc_removes_the_secrets_of_a_run_killed_before_it_could_dispose() {
    if !can_sandbox("gc after a killed run with a secret") {
        return;
    }
    let f = Files::new();
    let spec = f.spec(&["granted/token"]);
    let policy = f.path("policy.yaml");
    let store = f.path("store");
    for rung in RUNGS {
        let mut run = cordon_testkit::cordon!()
            .command(["run", "--min-isolation", rung, "--backend", rung])
            .args(["--policy", policy.to_str().unwrap()])
            .args(["--spec", spec.to_str().unwrap()])
            .args(["--secrets-dir", store.to_str().unwrap()])
            .args(["--", "/bin/sleep", "60"])
            .env("TMPDIR", f.path("scratch"))
            .env("CORDON_STATE_DIR", f.path("state"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("cordon run");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while f.secret_dirs().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(
            f.secret_dirs().len(),
            1,
            "{rung}: no secrets dir for the run"
        );
        // Delivered (not just made) before the kill.
        std::thread::sleep(std::time::Duration::from_millis(300));
        run.kill().unwrap();
        run.wait().unwrap();
        assert_eq!(f.secret_dirs().len(), 1, "{rung}: SIGKILL cleaned up?");
        let (code, out, err) = f.cordon(&["sandbox", "gc"]);
        assert_eq!(code, 0, "{rung}: {out}\n{err}");
        assert!(
            f.secret_dirs().is_empty(),
            "{rung}: gc left {:?}: {err}",
            f.secret_dirs()
        );
    }
}
