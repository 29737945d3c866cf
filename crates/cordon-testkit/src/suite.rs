//! The cases every backend must pass, written once and run against a
//! backend by naming it: a test binary describes its backend (how cordon
//! lands a sandbox on it, what its sandboxes leave on this machine) in a
//! [`Backend`] and calls [`run_all`], or one case of it.
//!
//! The cases drive the `cordon` binary, so a binary serving an engine of
//! its own (a test double, a private `dockerd`) runs the same suite by
//! pointing its [`Cordon`] at it.

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
    /// it: its floor, `--backend`, a spec naming its image.
    pub args: Vec<String>,
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
    /// What this backend's sandboxes leave on this machine, one line each.
    /// A sandbox's own directory is a line starting `dir `; while one
    /// sandbox is up, exactly one such line is new (else this check could
    /// not see a leak).
    pub residue: Box<dyn Fn() -> Vec<String> + 'a>,
}

impl Backend<'_> {
    /// [`Backend::residue`], sorted.
    fn residue(&self) -> Vec<String> {
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
    fn settles_to(&self, before: &[String], what: &str) {
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
    up_exec_down_cycles_leave_nothing(backend);
    the_conformance_and_escape_kits_pass_with_and_without_a_route(backend);
}

/// A kept sandbox (`sandbox up`) lands on the backend (its handle names
/// it), takes a file in through cordon, keeps what one exec writes in its
/// work dir for the next, runs its workload as a user other than root, is
/// the same sandbox when its key is asked for again, and is listed live;
/// `down` by its key disposes of it and leaves nothing, and an exec on it
/// after that is refused (125).
pub fn a_kept_sandbox_keeps_its_work_dir_and_down_leaves_nothing(b: &Backend) {
    let name = b.name;
    let c = &b.cordon;
    let before = b.residue();
    let scope = format!("{name}-kept");
    let key = ["--scope", &scope, "--thread", "kept"];
    let up = || {
        let mut up = vec!["sandbox", "up"];
        up.extend(key);
        up.extend(b.args.iter().map(String::as_str));
        let (code, h, err) = c.run(&up);
        assert_eq!(code, 0, "{name}: {err}");
        h.trim().to_string()
    };
    let h = up();
    assert!(h.starts_with(&format!("{name}-")), "{name}: {h}");
    // A file in through cordon, made into another by one exec, seen by
    // the next.
    let files = tempfile::tempdir().unwrap();
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
    for i in 0..b.cycles() {
        let thread = format!("t{i}");
        let mut up = vec!["sandbox", "up", "--scope", &scope, "--thread", &thread];
        up.extend(b.args.iter().map(String::as_str));
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
