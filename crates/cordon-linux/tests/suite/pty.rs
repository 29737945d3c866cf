//! A warm exec with a pseudo-terminal: of a devpts instance of the exec's
//! own, sized by the owner, its slave the command's stdio and controlling
//! terminal; never the host's `/dev/pts`.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_linux::{resize_pty, Rung, Termination, TtySize, WarmExec, WarmRunning, WarmSandbox};

use super::warm::{sh, start};
use super::{enforcer_for, Case};

const WAIT: Duration = Duration::from_secs(10);

/// The owner's end of an exec's terminal: everything read from the master
/// so far (carriage returns dropped), and the master to write and resize.
struct Term {
    master: OwnedFd,
    seen: Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Term {
    fn new(master: OwnedFd) -> Term {
        let seen = Arc::new(Mutex::new(String::new()));
        let mut file = std::fs::File::from(master.try_clone().expect("dup master"));
        let into = seen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once nothing in the sandbox holds the terminal any more.
            while let Ok(n @ 1..) = file.read(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
                into.lock().expect("lock").push_str(&text);
            }
        });
        Term {
            master,
            seen,
            reader,
        }
    }

    fn text(&self) -> String {
        self.seen.lock().expect("lock").clone()
    }

    /// Waits until the terminal has shown `needle`; panics with what it
    /// showed after [`WAIT`].
    fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {needle:?}; it showed:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn write(&self, s: &str) {
        let mut f = std::fs::File::from(self.master.try_clone().expect("dup master"));
        f.write_all(s.as_bytes()).expect("write to the master");
    }

    /// Waits for the exec and the end of its output; returns the output.
    fn finish(self, running: WarmRunning) -> (cordon_linux::Outcome, String) {
        let outcome = running.wait().expect("exec ends");
        drop(self.master);
        self.reader.join().expect("reader");
        let text = self.seen.lock().expect("lock").clone();
        (outcome, text)
    }
}

fn tty_exec(w: &WarmSandbox, case: &Case, script: &str, size: TtySize) -> (WarmRunning, Term) {
    let req = WarmExec {
        argv: ["/bin/sh", "-c", script]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        env: case.spec.env.clone(),
        bounds: case.spec.bounds.clone(),
    };
    let (running, master) = w.exec_tty(&req, size).expect("tty exec starts");
    (running, Term::new(master))
}

fn run_tty(w: &WarmSandbox, case: &Case, script: &str, size: TtySize) -> String {
    let (running, term) = tty_exec(w, case, script, size);
    let (outcome, text) = term.finish(running);
    assert_eq!(outcome.termination, Termination::Exited(0), "{text}");
    text
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim_end).collect()
}

/// Two terminals of the host's own devpts (as `/dev/ptmx` opens them), so
/// the host's instance has entries an exec must not see — at least `0` and
/// `1` when nothing else holds one.
fn host_terminals() -> Vec<OwnedFd> {
    (0..2)
        .map(|_| {
            rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY)
                .expect("open a host terminal")
        })
        .collect()
}

/// The host's `/dev/pts` device number, when there is one.
fn host_devpts_dev() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/dev/pts").ok().map(|m| m.dev())
}

fn sandbox(tag: &str) -> Option<(Case, WarmSandbox)> {
    enforcer_for(Rung::Container, &format!("warm tty: {tag}"))?;
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = start(
        &case,
        &format!("cordon-test-pty-{tag}-{}", std::process::id()),
    );
    Some((case, w))
}

#[test]
fn a_tty_exec_gets_its_own_terminal_of_the_asked_size_as_controlling_terminal() {
    let Some((case, w)) = sandbox("size") else {
        return;
    };
    let _host = host_terminals();
    let text = run_tty(
        &w,
        &case,
        "tty; stty size; test -t 0 && echo is-a-tty; \
         read pid comm st ppid pgrp sess ttynr tpgid rest < /proc/$$/stat; \
         [ \"$sess\" = $$ ] && [ \"$tpgid\" = \"$pgrp\" ] && echo leader-in-foreground",
        TtySize {
            rows: 30,
            cols: 100,
        },
    );
    // `/dev/pts/0`: the first terminal of an instance of its own (the host's
    // instance has 0 and 1 taken by now, so a host terminal would not be 0).
    assert_eq!(
        lines(&text),
        ["/dev/pts/0", "30 100", "is-a-tty", "leader-in-foreground"],
        "{text}"
    );
}

#[test]
fn input_written_to_the_master_reaches_the_command() {
    let Some((case, w)) = sandbox("input") else {
        return;
    };
    let (running, term) = tty_exec(
        &w,
        &case,
        "echo ready; read line; echo \"got:$line\"",
        TtySize { rows: 24, cols: 80 },
    );
    term.wait_for("ready");
    term.write("hello\n");
    let (outcome, text) = term.finish(running);
    assert_eq!(outcome.termination, Termination::Exited(0), "{text}");
    assert!(lines(&text).contains(&"got:hello"), "{text}");
}

#[test]
fn a_resize_reaches_the_foreground_process_group() {
    let Some((case, w)) = sandbox("resize") else {
        return;
    };
    let (running, term) = tty_exec(
        &w,
        &case,
        "trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done",
        TtySize { rows: 24, cols: 80 },
    );
    term.wait_for("ready");
    resize_pty(
        &term.master,
        TtySize {
            rows: 40,
            cols: 120,
        },
    )
    .expect("resize");
    term.wait_for("40 120");
    let (outcome, text) = term.finish(running);
    assert_eq!(outcome.termination, Termination::Exited(0), "{text}");
    assert!(!text.contains("24 80"), "{text}");
}

#[test]
fn the_hosts_devpts_is_not_reachable_with_or_without_a_tty() {
    let Some((case, w)) = sandbox("host") else {
        return;
    };
    let _host = host_terminals();
    // Inside a tty exec: one devpts, holding only the exec's own terminal,
    // and not the host's instance (another device number).
    let text = run_tty(
        &w,
        &case,
        "ls -1 /dev/pts; grep -c ' - devpts ' /proc/self/mountinfo; stat -c dev=%d /dev/pts",
        TtySize { rows: 24, cols: 80 },
    );
    let got = lines(&text);
    assert_eq!(got[..3], ["0", "ptmx", "1"], "{text}");
    if let Some(host) = host_devpts_dev() {
        assert_ne!(got[3], format!("dev={host}"), "{text}");
    }
    // An exec without a tty has no devpts at all: `/dev/pts` is an empty
    // mount point it may not even list, `/dev/ptmx` leads nowhere, and
    // `/dev/tty` opens nothing (no controlling terminal, no Landlock grant).
    let plain = sh(
        &w,
        &case,
        "grep -c ' - devpts ' /proc/self/mountinfo; \
         for n in 0 1 2 3; do test -e /dev/pts/$n && echo has-pts-$n; done; \
         ls /dev/pts >/dev/null 2>&1 || echo pts-not-listable; \
         test -e /dev/ptmx || echo no-ptmx; \
         echo x 2>/dev/null >/dev/tty || echo no-tty; \
         test -t 0 || echo stdin-not-a-tty",
    );
    assert_eq!(
        lines(&plain.stdout),
        [
            "0",
            "pts-not-listable",
            "no-ptmx",
            "no-tty",
            "stdin-not-a-tty"
        ],
        "{}{}",
        plain.stdout,
        plain.stderr
    );
}

#[test]
fn the_terminal_can_be_reopened_and_tiocsti_stays_refused() {
    let Some((case, w)) = sandbox("reopen") else {
        return;
    };
    let text = run_tty(
        &w,
        &case,
        "stty size </dev/tty; echo via-tty >/dev/tty; echo via-pts >/dev/pts/0; \
         /usr/bin/python3 -c 'import fcntl, termios\n\
try:\n    fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"tiocsti-allowed\")\n\
except OSError as e: print(\"tiocsti-refused\", e.errno)'",
        TtySize { rows: 12, cols: 34 },
    );
    assert_eq!(
        lines(&text),
        ["12 34", "via-tty", "via-pts", "tiocsti-refused 1"],
        "{text}"
    );
}

#[test]
fn concurrent_tty_execs_each_get_an_instance_of_their_own() {
    let Some((case, w)) = sandbox("two") else {
        return;
    };
    let script = "tty; stat -c dev=%d /dev/pts; echo ready; read x";
    let size = TtySize { rows: 24, cols: 80 };
    let (ra, a) = tty_exec(&w, &case, script, size);
    let (rb, b) = tty_exec(&w, &case, script, size);
    // Both alive at once, each with terminal 0 of a different instance.
    a.wait_for("ready");
    b.wait_for("ready");
    a.write("\n");
    b.write("\n");
    let (oa, ta) = a.finish(ra);
    let (ob, tb) = b.finish(rb);
    assert_eq!(oa.termination, Termination::Exited(0), "{ta}");
    assert_eq!(ob.termination, Termination::Exited(0), "{tb}");
    let (la, lb) = (lines(&ta), lines(&tb));
    assert_eq!(la[0], "/dev/pts/0", "{ta}");
    assert_eq!(lb[0], "/dev/pts/0", "{tb}");
    assert!(la[1].starts_with("dev=") && lb[1].starts_with("dev="));
    assert_ne!(la[1], lb[1], "one instance shared: {ta} / {tb}");
}
