//! The cases every backend must pass, written once and run against a
//! backend by naming it: a test binary describes its backend (how cordon
//! lands a sandbox on it, what its sandboxes leave on this machine) in a
//! [`Backend`] and calls [`run_all`], or one case of it.
//!
//! The cases drive the `cordon` binary, so a binary serving an engine of
//! its own (a test double, a private `dockerd`) runs the same suite by
//! pointing its [`Cordon`] at it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Cordon;

/// One backend, as the suite's cases see it.
pub struct Backend<'a> {
    /// Its name, as `cordon --backend NAME` and the messages say it.
    pub name: &'a str,
    /// cordon as this backend's cases run it: their environment (an
    /// engine's address, TMPDIR, a state directory of the case's own).
    pub cordon: Cordon,
    /// The arguments of `sandbox up` (and `run`) that land a sandbox on
    /// it: its floor, `--backend`.
    pub args: Vec<String>,
    /// The image its sandboxes run (`host`: the host's directories; any
    /// other is named in a spec the cases write).
    pub image: &'a str,
    /// The TMPDIR its `cordon` makes sandbox directories in.
    pub scratch: PathBuf,
    /// Whether it delivers secrets; one that does not must refuse a spec
    /// naming any, before anything runs, saying so.
    pub secrets: bool,
    /// Execs per cycle of [`up_exec_down_cycles_leave_nothing`] (gvisor:
    /// 2, the second starts its runsc sandbox, its pod).
    pub execs_per_cycle: usize,
    /// The variable naming how many cycles, and how many without it.
    pub cycles: (&'a str, usize),
    /// How long what a sandbox left may take to go once `down` has
    /// returned (a QEMU reaped by its jail); zero: none of it may be left
    /// by then.
    pub settle: Duration,
    /// What `cordon conformance --backend NAME` says it passed, when the
    /// backend holds a known number of its cases (`None`: any number, none
    /// failed).
    pub conformance_cases: Option<usize>,
    /// Whether it serves ports (`requires: [ports]`): the ports case runs
    /// against it; one that does not is said to be skipped.
    pub ports: bool,
    /// What this backend's sandboxes leave on this machine, one line each.
    /// A sandbox's own directory is a line starting `dir `; while one
    /// sandbox is up, exactly one such line is new (else this check could
    /// not see a leak).
    pub residue: Box<dyn Fn() -> Vec<String> + 'a>,
}

impl Backend<'_> {
    /// `up`/`run` arguments: [`Backend::args`], and a spec in `dir` naming
    /// the image (with `requires`) when it is not `host`.
    pub(crate) fn land(&self, dir: &Path) -> Vec<String> {
        let mut args = self.args.clone();
        if self.image != "host" {
            let spec = dir.join("image-spec.yaml");
            std::fs::write(
                &spec,
                format!(
                    "kind: run\nimage: {}\nrequires: [exec, files_in, files_out]\n",
                    self.image
                ),
            )
            .unwrap();
            args.extend(["--spec".into(), spec.display().to_string()]);
        }
        args
    }

    /// [`Backend::residue`], sorted.
    pub(crate) fn residue(&self) -> Vec<String> {
        let mut r = (self.residue)();
        r.sort();
        r
    }

    fn cycles(&self) -> usize {
        std::env::var(self.cycles.0)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(self.cycles.1)
    }

    /// Waits (at most [`Backend::settle`]) until the residue is `before`
    /// again; what is new then is a leak.
    pub(crate) fn settles_to(&self, before: &[String], what: &str) {
        let until = Instant::now() + self.settle;
        let mut now = self.residue();
        while now != before && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
            now = self.residue();
        }
        let new: Vec<&String> = now.iter().filter(|r| !before.contains(r)).collect();
        assert!(
            new.is_empty(),
            "{}: {what}: left behind: {new:?}",
            self.name
        );
    }
}

/// Every case, against `backend`.
pub fn run_all(backend: &Backend) {
    a_kept_sandbox_keeps_its_work_dir_and_down_leaves_nothing(backend);
    a_watch_sees_the_workloads_changes_and_ends_with_the_sandbox(backend);
    if backend.ports {
        crate::suite_ports::a_port_is_forwarded_as_the_policy_allows_and_ends_with_the_sandbox(
            backend,
        );
    } else {
        eprintln!(
            "SKIPPED: {}: the ports case (this backend does not serve ports)",
            backend.name
        );
    }
    run_hands_a_granted_secret_read_only_and_refuses_the_rest(backend);
    up_exec_down_cycles_leave_nothing(backend);
    the_conformance_and_escape_kits_pass_with_and_without_a_route(backend);
}

/// A kept sandbox (`sandbox up`) lands on the backend (its handle names
/// it), takes a file in through cordon, keeps what one exec writes in its
/// work dir for the next, runs its workload as a user other than root, is
/// the same sandbox when its key is asked for again (a threaded program
/// runs in it), and is listed live;
/// `down` by its key disposes of it and leaves nothing, and an exec on it
/// after that is refused (125).
pub fn a_kept_sandbox_keeps_its_work_dir_and_down_leaves_nothing(b: &Backend) {
    let name = b.name;
    let c = &b.cordon;
    let before = b.residue();
    let scope = format!("{name}-kept");
    let key = ["--scope", &scope, "--thread", "kept"];
    let files = tempfile::tempdir().unwrap();
    let land = b.land(files.path());
    let up = || {
        let mut up = vec!["sandbox", "up"];
        up.extend(key);
        up.extend(land.iter().map(String::as_str));
        let (code, h, err) = c.run(&up);
        assert_eq!(code, 0, "{name}: {err}");
        h.trim().to_string()
    };
    let h = up();
    assert!(h.starts_with(&format!("{name}-")), "{name}: {h}");
    // A file in through cordon, made into another by one exec, seen by
    // the next.
    let local = files.path().join("in.txt");
    std::fs::write(&local, "from the host\n").unwrap();
    let (code, _, err) = c.run(["sandbox", "put", &h, local.to_str().unwrap(), "in.txt"]);
    assert_eq!(code, 0, "{name}: {err}");
    let script = "cat in.txt > made.txt; echo second >> made.txt";
    let (code, _, err) = c.run(["sandbox", "exec", &h, "--", "/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{name}: {err}");
    let (code, out, err) = c.run(["sandbox", "exec", &h, "--", "/bin/cat", "made.txt"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "from the host\nsecond\n"),
        "{name}: {err}"
    );
    // Not root inside.
    let (code, out, err) = c.run(["sandbox", "exec", &h, "--", "/usr/bin/id", "-u"]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(
        !out.trim().is_empty() && out.trim() != "0",
        "{name}: the workload runs as `{out}`"
    );
    // A threaded program runs: a thread starts (a runtime that answers
    // `clone3` with EPERM, not ENOSYS, stops every one).
    let threads = "import threading\nt = threading.Thread(target=print, args=('thread ok',))\nt.start(); t.join()";
    let (code, out, err) = c.run(["sandbox", "exec", &h, "--", "python3", "-c", threads]);
    assert_eq!((code, out.trim()), (0, "thread ok"), "{name}: {err}");
    // The files API is decided by the policy's storage surface, whatever
    // the backend: a denied path is refused, its rule named.
    let (code, out, err) = c.run(["sandbox", "cat", &h, "/etc/shadow"]);
    assert!(
        code != 0 && out.is_empty() && err.contains("host-secrets"),
        "{name}: {code} {out} {err}"
    );
    the_files_api_reaches_tmp(b, &h, files.path());
    // The same key gives the same sandbox, listed live.
    assert_eq!(up(), h, "{name}: the same key");
    let (code, out, err) = c.run(["sandbox", "ls"]);
    assert!(
        code == 0 && out.lines().any(|l| l.contains(&h) && l.contains("live")),
        "{name}: {out}{err}"
    );
    assert_ne!(b.residue(), before, "{name}: a live sandbox shows nothing?");
    let mut down = vec!["sandbox", "down"];
    down.extend(key);
    let (code, out, err) = c.run(&down);
    assert_eq!(
        (code, out.trim()),
        (0, "disposed 1 sandbox"),
        "{name}: {err}"
    );
    b.settles_to(&before, "after down");
    let (code, _, err) = c.run(["sandbox", "exec", &h, "--", "/bin/true"]);
    assert_eq!(code, 125, "{name}: an exec after down is refused: {err}");
}

/// The files API reaches the sandbox's own `/tmp` as it reaches the work
/// dir (`/tmp` as the policy names it; the workload finds it at
/// `$TMPDIR`, else `/tmp`): what the workload made there is listed and
/// read, what is put there the workload reads, a removal goes, a link the
/// workload planted there pointing out is never followed, and a rename
/// from `/tmp` into the work dir is refused, saying why.
pub fn the_files_api_reaches_tmp(b: &Backend, h: &str, scratch: &Path) {
    let (name, c) = (b.name, &b.cordon);
    let tmp = "T=\"${TMPDIR:-/tmp}\"";
    let script = format!(
        "{tmp}; echo made > \"$T/made\" && ln -s /etc/passwd \"$T/out\" && mkdir -p \"$T/d\""
    );
    let (code, _, err) = c.run(["sandbox", "exec", h, "--", "/bin/sh", "-c", &script]);
    assert_eq!(code, 0, "{name}: {err}");
    let (code, out, err) = c.run(["sandbox", "cat", h, "/tmp/made"]);
    assert_eq!((code, out.as_str()), (0, "made\n"), "{name}: {err}");
    let (code, out, err) = c.run(["sandbox", "ls", h, "/tmp"]);
    assert!(
        code == 0 && out.contains("/tmp/made") && out.contains("/tmp/d"),
        "{name}: {out}{err}"
    );
    let local = scratch.join("to-tmp.txt");
    std::fs::write(&local, "put in /tmp\n").unwrap();
    let (code, _, err) = c.run(["sandbox", "put", h, local.to_str().unwrap(), "/tmp/d/put"]);
    assert_eq!(code, 0, "{name}: {err}");
    let read = format!("{tmp}; cat \"$T/d/put\"");
    let (code, out, err) = c.run(["sandbox", "exec", h, "--", "/bin/sh", "-c", &read]);
    assert_eq!((code, out.as_str()), (0, "put in /tmp\n"), "{name}: {err}");
    // The planted link is not followed: not read, not listed through.
    let (code, out, err) = c.run(["sandbox", "cat", h, "/tmp/out"]);
    assert!(
        code != 0 && out.is_empty() && err.contains("link"),
        "{name}: a link in /tmp was followed: {code} {out} {err}"
    );
    let (code, _, err) = c.run(["sandbox", "mv", h, "/tmp/made", "moved"]);
    assert!(
        code != 0 && err.contains("two filesystems"),
        "{name}: {code} {err}"
    );
    let (code, _, err) = c.run(["sandbox", "rm", h, "/tmp/made"]);
    assert_eq!(code, 0, "{name}: {err}");
    let gone = format!("{tmp}; test ! -e \"$T/made\" && test -L \"$T/out\"");
    let (code, _, err) = c.run(["sandbox", "exec", h, "--", "/bin/sh", "-c", &gone]);
    assert_eq!(
        code, 0,
        "{name}: the removal did not reach the workload's /tmp: {err}"
    );
}

/// Up, exec (`execs_per_cycle` times), down, as many times as
/// [`Backend::cycles`] says: each exec's output comes back, each
/// sandbox's keeper disposes of it and answers (the client never reclaims
/// after it), and nothing accumulates — after each `down`, the backend's
/// residue is what it was before the first `up`.
pub fn up_exec_down_cycles_leave_nothing(b: &Backend) {
    let name = b.name;
    // A keeper that does not answer its dispose is a logged note (the
    // client reclaims after it): shown, so the check below sees it.
    let cordon = b.cordon.clone().env("CORDON_LOG", "warn");
    let before = b.residue();
    let scope = format!("{name}-cycles");
    let files = tempfile::tempdir().unwrap();
    let land = b.land(files.path());
    for i in 0..b.cycles() {
        let thread = format!("t{i}");
        let mut up = vec!["sandbox", "up", "--scope", &scope, "--thread", &thread];
        up.extend(land.iter().map(String::as_str));
        let (code, handle, err) = cordon.run(&up);
        assert_eq!(code, 0, "{name} cycle {i}: {err}");
        let handle = handle.trim();
        for n in 0..b.execs_per_cycle {
            let (code, out, err) =
                cordon.run(["sandbox", "exec", handle, "--", "/bin/echo", "cycle"]);
            assert_eq!(
                (code, out.as_str()),
                (0, "cycle\n"),
                "{name} cycle {i} exec {n}: {err}"
            );
        }
        let up_now = b.residue();
        let dirs: Vec<&String> = up_now
            .iter()
            .filter(|r| r.starts_with("dir ") && !before.contains(r))
            .collect();
        assert_eq!(
            dirs.len(),
            1,
            "{name} cycle {i}: one sandbox is up: {up_now:?}"
        );
        let (code, _, err) = cordon.run(["sandbox", "down", handle]);
        assert_eq!(code, 0, "{name} cycle {i}: {err}");
        // The keeper disposes of it and answers; the client never has to
        // reclaim after it.
        assert!(!err.contains("did not dispose"), "{name} cycle {i}: {err}");
        b.settles_to(&before, &format!("cycle {i}"));
    }
}

/// `cordon sandbox watch H -r` streams the workload's changes as they
/// happen — a directory and a file made, the file changed, renamed,
/// removed — with paths relative to the work dir, survives a burst its
/// reader does not keep up with (one `overflow`, then on), and ends (its
/// last line says so) when the sandbox goes. The files API's own cases are the
/// conformance kit's.
pub fn a_watch_sees_the_workloads_changes_and_ends_with_the_sandbox(b: &Backend) {
    use std::io::BufRead;
    let name = b.name;
    let c = &b.cordon;
    let before = b.residue();
    let scope = format!("{name}-watch");
    let files = tempfile::tempdir().unwrap();
    let mut up = vec!["sandbox", "up", "--scope", &scope, "--thread", "watch"];
    let land = b.land(files.path());
    up.extend(land.iter().map(String::as_str));
    let (code, h, err) = c.run(&up);
    assert_eq!(code, 0, "{name}: {err}");
    let h = h.trim().to_string();
    let mut watch = c
        .command(["sandbox", "watch", &h, "--recursive"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let v = serde_json::from_str(&line).unwrap_or(serde_json::json!({"unparsed": line}));
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut wait_for = |want: &dyn Fn(&serde_json::Value) -> bool, within: Duration| {
        let until = Instant::now() + within;
        if seen.iter().any(want) {
            return true;
        }
        while let Ok(v) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let hit = want(&v);
            seen.push(v);
            if hit {
                return true;
            }
        }
        false
    };
    let is = |event: &'static str, path: &str| {
        let path = path.to_string();
        move |v: &serde_json::Value| v["event"] == event && v["path"] == path.as_str()
    };
    // The watch is in place once a change made after its start is seen.
    let mut ready = false;
    for i in 0..40 {
        let mark = format!("ready-{i}");
        let (code, _, err) = c.run([
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            &format!(": > {mark}"),
        ]);
        assert_eq!(code, 0, "{name}: {err}");
        if wait_for(&is("created", &mark), Duration::from_millis(500)) {
            ready = true;
            break;
        }
    }
    assert!(ready, "{name}: the watch never saw a change: {seen:?}");
    let script = "mkdir d && echo a > d/f && sleep 0.2 && echo b >> d/f && sleep 0.2 && mv d/f d/g && sleep 0.2 && rm d/g";
    let (code, _, err) = c.run(["sandbox", "exec", &h, "--", "/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{name}: {err}");
    let within = Duration::from_secs(20);
    assert!(wait_for(&is("created", "d"), within), "{name}: {seen:?}");
    assert!(
        wait_for(
            &|v| v["path"] == "d/f" && (v["event"] == "created" || v["event"] == "modified"),
            within
        ),
        "{name}: {seen:?}"
    );
    assert!(
        wait_for(
            &|v| v["event"] == "renamed" && v["path"] == "d/f" && v["to"] == "d/g",
            within
        ),
        "{name}: {seen:?}"
    );
    assert!(wait_for(&is("removed", "d/g"), within), "{name}: {seen:?}");
    // A burst the reader does not keep up with: held still (SIGSTOP)
    // while the workload makes 12,000 files (24,000 events, past every
    // queue on the way), it then gets an `overflow`, and the watch goes on.
    // Signalled directly: no `kill` program is assumed on CI's machine.
    let watcher = i32::try_from(watch.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .unwrap();
    let stop = |sig: rustix::process::Signal| {
        rustix::process::kill_process(watcher, sig)
            .unwrap_or_else(|e| panic!("{name}: signalling the watch: {e}"));
    };
    stop(rustix::process::Signal::STOP);
    let burst = "import os\nos.mkdir('burst')\nfor i in range(12000):\n    open('burst/f%d' % i, 'w').close()";
    let (code, _, err) = c.run(["sandbox", "exec", &h, "--", "python3", "-c", burst]);
    stop(rustix::process::Signal::CONT);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(
        wait_for(&|v| v["event"] == "overflow", Duration::from_secs(60)),
        "{name}: no overflow after a burst the reader did not read"
    );
    let (code, _, err) = c.run(["sandbox", "exec", &h, "--", "/bin/sh", "-c", ": > after"]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(
        wait_for(&is("created", "after"), Duration::from_secs(60)),
        "{name}: the watch did not go on after its overflow"
    );
    let (code, _, err) = c.run(["sandbox", "down", &h]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(
        wait_for(&|v| v["event"] == "ended", Duration::from_secs(30)),
        "{name}: the watch outlived its sandbox: {seen:?}"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while watch.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = watch.try_wait().unwrap();
    if ended.is_none() {
        let _ = watch.kill();
    }
    assert!(
        ended.is_some_and(|s| s.success()),
        "{name}: `sandbox watch` did not exit 0 after its sandbox went: {ended:?}"
    );
    b.settles_to(&before, "after the watch");
}

/// The conformance kit passes whole against the backend (as many cases
/// as [`Backend::conformance_cases`] says, when it says); the escape kit
/// too, every one of its cases reported and passed, and again with a
/// route out (the egress proxy's listener and the sockets a route needs
/// in place): a route opens nothing the kit closes. Each leaves nothing.
pub fn the_conformance_and_escape_kits_pass_with_and_without_a_route(b: &Backend) {
    let name = b.name;
    let before = b.residue();
    let (code, out, err) = b.cordon.run(["conformance", "--backend", name]);
    assert_eq!(code, 0, "{name}: {out}\n{err}");
    let summary = match b.conformance_cases {
        Some(n) => format!("{n} passed, 0 failed"),
        None => " passed, 0 failed".to_string(),
    };
    assert!(out.trim_end().ends_with(&summary), "{name}: {out}");
    b.settles_to(&before, "after the conformance kit");
    for extra in [None, Some("--with-egress-route")] {
        let mut args = vec!["escape", "--backend", name];
        args.extend(extra);
        let (code, out, err) = b.cordon.run(&args);
        assert_eq!(code, 0, "{name} {args:?}: {out}\n{err}");
        if extra.is_some() {
            assert!(
                out.contains("with a route through the egress proxy"),
                "{name}: {out}"
            );
        }
        for case in cordon_kits::escape::CASES {
            assert!(
                out.lines().any(|l| l.starts_with(&format!("pass {case}:"))),
                "{name} {args:?}: `{case}` did not pass:\n{out}\n{err}"
            );
        }
        let n = cordon_kits::escape::CASES.len();
        assert!(
            out.trim_end().ends_with(&format!("{n} passed, 0 failed")),
            "{name} {args:?}: {out}"
        );
        b.settles_to(&before, &format!("after the escape kit {args:?}"));
    }
}

/// A root policy: `cordon:default` grants no secret and a layer over it
/// could only narrow. System trees, the work dir and `/tmp` (where the
/// process rung's private temporary directory is), and secrets under
/// `granted/` only.
pub const SECRETS_POLICY: &str = r#"policy:
  compute:
    max_memory: 256MiB
    max_wall_seconds: 30
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
  secret:
    allow:
      - name: granted-secrets
        when: secret.name.startsWith("granted/")
"#;

/// The script a secrets case runs: reads its secret, tries to write,
/// remove and re-mode it, reads it again, prints its environment.
pub const SECRET_SCRIPT: &str = "cat /run/cordon/secrets/granted/token; echo; \
     (echo x > /run/cordon/secrets/granted/token) 2>&1 && echo WROTE; \
     rm -f /run/cordon/secrets/granted/token 2>&1 && echo REMOVED; \
     chmod 0666 /run/cordon/secrets/granted/token 2>&1 && echo CHMODDED; \
     cat /run/cordon/secrets/granted/token; echo; env";

/// What `cordon run` with [`SECRET_SCRIPT`] printed, judged: the secret
/// read (`s3cr3t-token`), unchanged, refused every change, and never in
/// the environment (once read, once again).
pub fn assert_secret_held(what: &str, out: &str, err: &str) {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"s3cr3t-token"), "{what}: {out}\n{err}");
    for done in ["WROTE", "REMOVED", "CHMODDED"] {
        assert!(
            !out.contains(done),
            "{what}: the workload changed its secret ({done}): {out}"
        );
    }
    assert!(
        out.contains("Read-only file system") || out.contains("Permission denied"),
        "{what}: {out}"
    );
    assert_eq!(out.matches("s3cr3t-token").count(), 2, "{what}: {out}");
}

/// The `cordon-secrets-*` directories in `scratch`.
pub fn secret_dirs(scratch: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(scratch)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("cordon-secrets-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `cordon run` hands a secret the spec names and the policy grants to the
/// workload read-only at `/run/cordon/secrets/NAME` ([`assert_secret_held`]),
/// and nothing of it outlives the run; a spec naming one the policy does
/// not grant is refused before the workload runs. A backend that delivers
/// no secrets ([`Backend::secrets`]) refuses the granted one too, before
/// the workload runs, and says so.
pub fn run_hands_a_granted_secret_read_only_and_refuses_the_rest(b: &Backend) {
    let name = b.name;
    let before = b.residue();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("policy.yaml"), SECRETS_POLICY).unwrap();
    for (secret, value) in [("granted/token", "s3cr3t-token"), ("other/x", "not-yours")] {
        let f = p.join("store").join(secret);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, value).unwrap();
    }
    let run = |secrets: &str, argv: &[&str]| {
        let spec = p.join("secrets-spec.yaml");
        std::fs::write(
            &spec,
            format!(
                "kind: secrets-test\nimage: {}\nrequires: [exec]\nsecrets: [{secrets}]\n",
                b.image
            ),
        )
        .unwrap();
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(b.args.iter().cloned());
        for (flag, at) in [
            ("--policy", p.join("policy.yaml")),
            ("--spec", spec),
            ("--secrets-dir", p.join("store")),
        ] {
            args.extend([flag.to_string(), at.display().to_string()]);
        }
        args.push("--".into());
        args.extend(argv.iter().map(|a| a.to_string()));
        b.cordon.run(&args)
    };
    let (code, out, err) = run("granted/token", &["/bin/sh", "-c", SECRET_SCRIPT]);
    if b.secrets {
        assert_eq!(code, 0, "{name}: {out}\n{err}");
        // Which rung ran it, unless the backend's cases run quiet (`-q`).
        if !b.args.iter().any(|a| a == "-q") {
            assert!(
                err.contains(&format!("running on the `{name}` backend")),
                "{name}: {err}"
            );
        }
        assert_secret_held(name, &out, &err);
    } else {
        assert_ne!(code, 0, "{name}: {out}");
        assert!(out.is_empty(), "{name}: the workload ran: {out}");
        assert!(
            err.contains(&format!("the {name} backend does not"))
                && err.contains("secrets")
                && err.contains("not retried on another backend"),
            "{name}: {err}"
        );
    }
    assert_eq!(secret_dirs(&b.scratch), Vec::<PathBuf>::new(), "{name}");
    b.settles_to(&before, "after a run with a secret");
    // An ungranted one is refused before anything runs.
    let (code, out, err) = run("granted/token, other/x", &["/bin/echo", "RAN"]);
    assert_ne!(code, 0, "{name}: {out}");
    assert!(!out.contains("RAN"), "{name}: the workload ran: {out}");
    assert!(
        err.contains("`other/x`") && err.contains("refused by the policy"),
        "{name}: {err}"
    );
    assert_eq!(secret_dirs(&b.scratch), Vec::<PathBuf>::new(), "{name}");
    b.settles_to(&before, "after a refused secret");
}
