//! The proxy's self-confinement (`cordon_linux::confine_self`), run where it
//! cannot confine the test runner: each case re-executes this test binary
//! with only [`helper_entry`] selected and a scenario in the environment;
//! the helper forks a child that has one thread (the helper's other thread
//! is libtest's main thread, blocked waiting for the test), and the child
//! runs the scenario and prints one line per probe. Every probe runs
//! unconfined too (the control), so a refusal is only counted where the
//! same probe worked without the confinement.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_linux::{confine_self, HardenError, Mechanisms, SelfConfinement};

const SCENARIO: &str = "CORDON_HARDEN_SCENARIO";
const DIR: &str = "CORDON_HARDEN_DIR";
const ABSTRACT: &str = "CORDON_HARDEN_ABSTRACT";
const EPERM: &str = "errno 1";
const EACCES: &str = "errno 13";

/// `true` when this machine can hold the self-confinement (root, so the
/// capability drop is shown; Landlock ABI 6; seccomp). Without it: panic
/// in CI, skip loudly elsewhere.
fn available(case: &str) -> bool {
    let m = Mechanisms::detect();
    let mut missing = Vec::new();
    if !m.root {
        missing.push("root (to show a root process keeps no capability)".to_string());
    }
    if m.landlock_abi < 6 {
        missing.push(format!(
            "landlock ABI 6 (found {}): filesystem rules and scoping",
            m.landlock_abi
        ));
    }
    if !m.seccomp {
        missing.push("seccomp".to_string());
    }
    cordon_testkit::runs_here(
        case,
        (!missing.is_empty()).then(|| {
            format!("this machine cannot hold the proxy's self-confinement: missing {missing:?}")
        }),
    )
}

/// Runs `scenario` in a fresh helper process; returns its stdout lines.
fn run_helper(scenario: &str, dir: &Path, abstract_name: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "suite::harden::helper_entry",
            "--test-threads=1",
            "--nocapture",
            "--quiet",
        ])
        .env(SCENARIO, scenario)
        .env(DIR, dir)
        .env(ABSTRACT, abstract_name)
        .output()
        .expect("run the helper");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "helper for {scenario} failed: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout.lines().map(str::to_string).collect()
}

/// The helper process's entry point; a no-op in an ordinary test run.
#[test]
fn helper_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).expect("dir"));
    let abstract_name = std::env::var(ABSTRACT).expect("abstract name");
    // A socket of a process outside the confined child's domain.
    let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("abstract addr");
    let _outside = UnixListener::bind_addr(&addr).expect("abstract listener");
    let code = in_single_threaded_child(|| match scenario.as_str() {
        "control" => probes(&dir, &abstract_name, false),
        "confined" => probes(&dir, &abstract_name, true),
        "refusal" => refusal(&dir),
        other => panic!("unknown scenario {other}"),
    });
    assert_eq!(code, 0, "the child failed");
}

/// Forks; the child (one thread: the caller's) runs `body` and exits with
/// 0, or 101 if it panicked. Returns the child's exit code.
#[allow(unsafe_code)]
fn in_single_threaded_child(body: impl FnOnce()) -> i32 {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: the helper runs only this test (`--exact`, one test thread);
    // its other thread is libtest's main thread, blocked waiting for this
    // test to finish and holding no lock, so the child's copy of the
    // process state is consistent.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            // A hang in the child must not hang the suite.
            nix::unistd::alarm::set(60);
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
            let _ = std::io::stdout().flush();
            std::process::exit(if ok { 0 } else { 101 })
        }
        ForkResult::Parent { child } => match waitpid(child, None).expect("waitpid") {
            WaitStatus::Exited(_, code) => code,
            other => panic!("the child did not exit: {other:?}"),
        },
    }
}

/// Raw `clone(flags | SIGCHLD)` with fork semantics (the filter reads
/// clone's flags, which a library call might route through clone3): the
/// child exits at once. Returns the errno, or 0 when the clone succeeded.
#[allow(unsafe_code)]
fn raw_clone(flags: libc::c_int) -> i32 {
    // SAFETY: a null stack gives the child a copy of this (single-threaded)
    // process; it only calls _exit, which touches no shared state.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags | libc::SIGCHLD, 0, 0, 0, 0) };
    if pid == 0 {
        // SAFETY: the child leaves without running anything of Rust's.
        unsafe { libc::_exit(0) }
    }
    if pid < 0 {
        return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    let _ = nix::sys::wait::waitpid(pid, None);
    0
}

/// Raw `clone3` with no arguments: EINVAL from the kernel, ENOSYS from the
/// filter.
#[allow(unsafe_code)]
fn raw_clone3() -> i32 {
    // SAFETY: a null argument of size 0 is refused before anything is cloned.
    let r = unsafe { libc::syscall(libc::SYS_clone3, 0, 0) };
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

fn errno_text(e: i32) -> String {
    if e == 0 {
        "ok".into()
    } else {
        format!("errno {e}")
    }
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn result<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => match e.raw_os_error() {
            Some(n) => format!("errno {n}"),
            None => format!("error {e}"),
        },
    }
}

fn nix_result<T>(r: nix::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("errno {}", e as i32),
    }
}

fn status_field(key: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

fn tcp_round_trip() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (mut server, _) = listener.accept()?;
    client.write_all(b"ping")?;
    let mut buf = [0u8; 4];
    server.read_exact(&mut buf)?;
    if &buf != b"ping" {
        return Err(std::io::Error::other("bytes changed"));
    }
    Ok(())
}

fn exec_true() -> std::io::Result<()> {
    let status = Command::new("/bin/true").status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("/bin/true: {status}")))
    }
}

fn abstract_connect(name: &str) -> std::io::Result<()> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixStream::connect_addr(&addr).map(drop)
}

fn abstract_inside(name: &str) -> std::io::Result<()> {
    let inside = format!("{name}-inside");
    let addr = SocketAddr::from_abstract_name(inside.as_bytes())?;
    let _l = UnixListener::bind_addr(&addr)?;
    abstract_connect(&inside)
}

/// Runs every probe, confined first when `confine`, printing
/// `PROBE name result` lines.
fn probes(dir: &Path, abstract_name: &str, confine: bool) {
    let audit = dir.join("audit.log");
    let other = dir.join("other");
    if confine {
        let applied = confine_self(&SelfConfinement {
            writable_file: Some(audit.clone()),
            without_landlock: false,
            run_as: None,
        })
        .unwrap_or_else(|e| panic!("confine_self: {e}"));
        for line in applied.lines {
            say(format!("APPLIED {line}"));
        }
    }
    let probe = |name: &str, r: String| say(format!("PROBE {name} {r}"));
    let append = || {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&audit)?
            .write_all(b"appended\n")
    };
    probe("append_writable_file", result(append()));
    probe(
        "create_new_file",
        result(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dir.join("new")),
        ),
    );
    probe(
        "write_other_file",
        result(std::fs::OpenOptions::new().write(true).open(&other)),
    );
    probe(
        "truncate_writable_file",
        result(
            std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&audit),
        ),
    );
    probe("mkdir", result(std::fs::create_dir(dir.join("sub"))));
    probe(
        "rename_other_file",
        result(std::fs::rename(&other, dir.join("renamed"))),
    );
    probe("exec_bin_true", result(exec_true()));
    probe(
        "read_etc_hostname",
        result(std::fs::read_to_string("/etc/hostname")),
    );
    probe("tcp_listen_and_connect", result(tcp_round_trip()));
    probe(
        "thread",
        match std::thread::spawn(|| 6 * 7).join() {
            Ok(42) => "ok".into(),
            other => format!("failed {other:?}"),
        },
    );
    let caps = ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:", "CapBnd:"]
        .iter()
        .map(|k| format!("{k}{}", status_field(k)))
        .collect::<Vec<_>>();
    let zero = caps.iter().all(|c| {
        c.split(':')
            .nth(1)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            == Some(0)
    });
    probe(
        "capabilities",
        format!("{} {}", if zero { "zero" } else { "held" }, caps.join(" ")),
    );
    let parent = nix::unistd::getppid();
    probe(
        "signal_outside",
        nix_result(nix::sys::signal::kill(parent, None)),
    );
    probe(
        "signal_self",
        nix_result(nix::sys::signal::kill(nix::unistd::getpid(), None)),
    );
    probe("abstract_outside", result(abstract_connect(abstract_name)));
    probe("abstract_inside", result(abstract_inside(abstract_name)));
    probe("clone_plain", errno_text(raw_clone(0)));
    probe(
        "clone_new_user_namespace",
        errno_text(raw_clone(libc::CLONE_NEWUSER)),
    );
    probe("clone3", errno_text(raw_clone3()));
    // Last: unconfined, it moves the child into a new user namespace.
    probe(
        "unshare_user_namespace",
        nix_result(nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)),
    );
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("task dir")
        .count()
}

/// With a second thread running confine_self refuses and applies nothing;
/// once that thread is gone, the same call confines.
fn refusal(dir: &Path) {
    let confinement = SelfConfinement {
        writable_file: Some(dir.join("audit.log")),
        without_landlock: false,
        run_as: None,
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let second = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    say(format!("THREADS {}", threads_now()));
    match confine_self(&confinement) {
        Err(e @ HardenError::Threads(_)) => say(format!("REFUSED {e}")),
        Err(e) => say(format!("OTHER_ERROR {e}")),
        Ok(_) => say("CONFINED_WITH_TWO_THREADS".into()),
    }
    say(format!(
        "AFTER_REFUSAL nnp={} seccomp={} capeff={}",
        status_field("NoNewPrivs:"),
        status_field("Seccomp:"),
        status_field("CapEff:")
    ));
    let _ = tx.send(());
    second.join().expect("join");
    // The joined thread's task entry goes a moment after join returns.
    let deadline = Instant::now() + Duration::from_secs(5);
    while threads_now() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    match confine_self(&confinement) {
        Ok(applied) => say(format!("CONFINED {} lines applied", applied.lines.len())),
        Err(e) => say(format!("STILL_REFUSED {e}")),
    }
    say(format!(
        "AFTER_CONFINE nnp={} seccomp={} capeff={}",
        status_field("NoNewPrivs:"),
        status_field("Seccomp:"),
        status_field("CapEff:")
    ));
}

/// A directory with the audit log and another file, both writable by
/// mode, so only the confinement can refuse a write.
fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("dir");
    std::fs::write(d.path().join("audit.log"), b"first\n").expect("audit log");
    std::fs::write(d.path().join("other"), b"untouched\n").expect("other");
    d
}

fn abstract_name(case: &str) -> String {
    format!("cordon-harden-{case}-{}", std::process::id())
}

fn probe_results(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("PROBE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn confined_proxy_writes_its_log_dials_and_threads_and_nothing_else() {
    if !available("the proxy's self-confinement") {
        return;
    }
    let control_dir = setup();
    let control = probe_results(&run_helper(
        "control",
        control_dir.path(),
        &abstract_name("control"),
    ));
    let dir = setup();
    let lines = run_helper("confined", dir.path(), &abstract_name("confined"));
    let confined = probe_results(&lines);
    let all = lines.join("\n");

    // (probe, unconfined, confined): each refusal next to the same call
    // working without the confinement.
    let expect: &[(&str, &str, &str)] = &[
        ("append_writable_file", "ok", "ok"),
        ("create_new_file", "ok", EACCES),
        ("write_other_file", "ok", EACCES),
        ("truncate_writable_file", "ok", EACCES),
        ("mkdir", "ok", EACCES),
        ("rename_other_file", "ok", EACCES),
        ("exec_bin_true", "ok", EPERM),
        ("unshare_user_namespace", "ok", EPERM),
        ("clone_plain", "ok", "ok"),
        ("clone_new_user_namespace", "ok", EPERM),
        ("clone3", "errno 22", "errno 38"),
        ("read_etc_hostname", "ok", "ok"),
        ("tcp_listen_and_connect", "ok", "ok"),
        ("thread", "ok", "ok"),
        ("signal_outside", "ok", EPERM),
        ("signal_self", "ok", "ok"),
        ("abstract_outside", "ok", EPERM),
        ("abstract_inside", "ok", "ok"),
    ];
    for (probe, unconfined, held) in expect {
        assert_eq!(
            control.get(*probe).map(String::as_str),
            Some(*unconfined),
            "control {probe}: {control:?}"
        );
        assert_eq!(
            confined.get(*probe).map(String::as_str),
            Some(*held),
            "confined {probe}:\n{all}"
        );
    }
    let caps = |m: &BTreeMap<String, String>| m.get("capabilities").cloned().unwrap_or_default();
    assert!(caps(&control).starts_with("held"), "{control:?}");
    assert!(caps(&confined).starts_with("zero "), "{all}");

    // The host side: the log got the line, nothing else changed.
    let log = std::fs::read_to_string(dir.path().join("audit.log")).expect("log");
    assert_eq!(log, "first\nappended\n");
    let other = std::fs::read_to_string(dir.path().join("other")).expect("other");
    assert_eq!(other, "untouched\n");
    assert!(!dir.path().join("new").exists() && !dir.path().join("sub").exists());

    for layer in [
        "no_new_privs",
        "capabilities",
        "landlock (ABI",
        "landlock scoping (ABI",
        "seccomp: ",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("APPLIED {layer}"))),
            "no {layer} line in:\n{all}"
        );
    }
    assert!(!all.contains("NOT applied"), "{all}");
}

#[test]
fn confine_self_refuses_with_a_second_thread_and_applies_nothing() {
    if !available("the proxy's self-confinement refusal") {
        return;
    }
    let dir = setup();
    let lines = run_helper("refusal", dir.path(), &abstract_name("refusal"));
    let all = lines.join("\n");
    assert!(lines.iter().any(|l| l == "THREADS 2"), "{all}");
    let refused = lines
        .iter()
        .find(|l| l.starts_with("REFUSED "))
        .unwrap_or_else(|| panic!("not refused:\n{all}"));
    assert!(
        refused.contains("single-threaded") && refused.contains("2 threads"),
        "{refused}"
    );
    // Nothing was applied: no no_new_privs, no filter, capabilities held.
    let after_refusal = lines
        .iter()
        .find(|l| l.starts_with("AFTER_REFUSAL "))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        after_refusal.starts_with("AFTER_REFUSAL nnp=0 seccomp=0 capeff="),
        "{all}"
    );
    assert!(!after_refusal.ends_with("capeff=0000000000000000"), "{all}");
    // Alone again, the same call confines.
    assert!(lines.iter().any(|l| l.starts_with("CONFINED ")), "{all}");
    assert!(
        lines
            .iter()
            .any(|l| l == "AFTER_CONFINE nnp=1 seccomp=2 capeff=0000000000000000"),
        "{all}"
    );
}
