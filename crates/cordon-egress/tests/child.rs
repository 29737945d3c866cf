//! The proxy in a process of its own, on real loopback sockets. The child
//! is this test binary run again: `child_entry` below becomes the proxy
//! process when its command line carries [`MARK`] (a second `--exact`
//! filter, which names no test). Nothing leaves loopback: names resolve
//! only through the test's hosts file (`nameservers: []`), and only the
//! test policy's `allow_ranges` opens loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_egress::{start_service, Caller, EgressChange, ProxyChild};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{EgressEntry, EgressSetup, SelfCommand};

const MARK: &str = "cordon-egress-child-process";
const CONFINE_FAILS: &str = "cordon-egress-child-confine-fails";

const POLICY: &str = r#"
policy:
  egress:
    allow_ranges:
      - cidr: 127.0.0.0/8
        hosts: [ok.test, no.test]
    allow:
      - name: test-hosts
        when: host.endsWith(".test")
"#;

fn confine_noop(_: &EgressSetup) -> Result<(), String> {
    Ok(())
}

fn confine_fails(_: &EgressSetup) -> Result<(), String> {
    Err("landlock is not available on this kernel; upgrade it".into())
}

/// The proxy process, when run as one; an ordinary (empty) test otherwise.
#[test]
fn child_entry() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == MARK) {
        return;
    }
    let confine = if args.iter().any(|a| a == CONFINE_FAILS) {
        confine_fails
    } else {
        confine_noop
    };
    cordon_egress::child_main(confine);
}

fn self_command(confine_fails: bool) -> SelfCommand {
    let mut args: Vec<String> = [
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads=1",
        MARK,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if confine_fails {
        args.push(CONFINE_FAILS.into());
    }
    SelfCommand {
        path: std::env::current_exe().unwrap(),
        args,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    policy_file: PathBuf,
    audit: PathBuf,
    setup: EgressSetup,
}

fn fixture(confine_fails: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, POLICY).unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 ok.test no.test\n").unwrap();
    let audit = dir.path().join("audit.jsonl");
    let setup = EgressSetup {
        nameservers: Some(vec![]),
        hosts_file: Some(hosts),
        audit: Some(audit.clone()),
        proxy: Some(self_command(confine_fails)),
        policy_file: Some(policy_file.clone()),
        audit_bounds: Default::default(),
    };
    Fixture {
        _dir: dir,
        policy_file,
        audit,
        setup,
    }
}

fn env() -> Deployment {
    Deployment {
        name: "test".into(),
    }
}

/// A loopback upstream answering every request with `hello`; counts
/// connections.
fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            c.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            });
        }
    });
    (addr, conns)
}

fn caller(allow: &[String]) -> Caller {
    Caller {
        sandbox: "tenant/thread/agent".into(),
        identity: Identity {
            namespace: "team-a".into(),
            name: "bot".into(),
            attested: true,
            labels: Default::default(),
        },
        allow: Some(
            allow
                .iter()
                .map(|e| EgressEntry::parse(e).unwrap())
                .collect(),
        ),
        brokered: Vec::new(),
    }
}

/// Sends a GET through the proxy at `proxy`; (status, whole response).
fn get(proxy: SocketAddr, url: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    s.write_all(
        format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn gone_within(pid: u32, limit: Duration) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let t = Instant::now();
    while t.elapsed() < limit {
        if !proc.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !proc.exists()
}

fn audit_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_channel_is_served_by_the_child_until_it_is_stopped() {
    let fx = fixture(false);
    let (up, conns) = upstream();
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let child = ProxyChild::start(&fx.setup, &policy, &env()).unwrap();
    let pid = child.pid();
    assert_ne!(pid, std::process::id());

    // The sandbox's channel, standing in on loopback.
    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = chan.local_addr().unwrap();
    let allow = vec![format!("ok.test:{}", up.port())];
    let serving = child.serve(chan, caller(&allow)).unwrap();

    // Allowed: through to the upstream.
    let (status, text) = get(addr, &format!("http://ok.test:{}/x", up.port()));
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("hello"), "{text}");
    assert_eq!(conns.load(Ordering::SeqCst), 1);

    // Not on the caller's allowlist: refused, nothing dialled.
    let (status, text) = get(addr, &format!("http://no.test:{}/x", up.port()));
    assert_eq!(status, 403, "{text}");
    assert_eq!(conns.load(Ordering::SeqCst), 1);

    // Both decisions are in the child's audit log: the allowed one
    // before it was carried, its answer after.
    let lines = audit_lines(&fx.audit);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].contains("ok.test")
            && lines[0].contains(r#""verdict":"allow""#)
            && lines[1].contains(r#""verdict":"end""#)
            && lines[2].contains("no.test"),
        "{lines:?}"
    );

    // Stopped: the child closed its copy (and this process gave its copy
    // away), so nothing listens on the channel any more.
    drop(serving);
    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}"),
        Ok(mut s) => {
            // Accepted by nobody: at most a reset, never an answer.
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET http://ok.test/ HTTP/1.1\r\n\r\n");
            let mut b = [0u8; 16];
            assert!(
                !matches!(s.read(&mut b), Ok(n) if n > 0),
                "answered after stop"
            );
        }
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1);

    // The child still serves a new channel after one was stopped.
    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr2 = chan.local_addr().unwrap();
    let _serving = child.serve(chan, caller(&allow)).unwrap();
    let (status, _) = get(addr2, &format!("http://ok.test:{}/y", up.port()));
    assert_eq!(status, 200);

    // Dropping the owner's handle ends the process, and its channels: on
    // the hang-up itself (the drop kills only after waiting 1 s).
    let t = Instant::now();
    drop(child);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert!(
        gone_within(pid, Duration::from_secs(2)),
        "pid {pid} still there"
    );
    assert!(TcpStream::connect_timeout(&addr2, Duration::from_secs(2)).is_err());
}

#[test]
fn a_policy_that_changed_since_it_was_loaded_is_refused() {
    let fx = fixture(false);
    // What the owner loaded: not what the child finds in the file.
    let loaded = Policy::load_str(
        &fx.policy_file.display().to_string(),
        "policy:\n  egress:\n    allow:\n      - name: all\n        when: true\n",
    )
    .unwrap();
    let err = ProxyChild::start(&fx.setup, &loaded, &env()).err().unwrap();
    assert!(
        err.contains("the policy file changed since it was loaded; run the command again"),
        "{err}"
    );
}

#[test]
fn the_confinement_error_is_the_start_error() {
    let fx = fixture(true);
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let err = ProxyChild::start(&fx.setup, &policy, &env()).err().unwrap();
    assert!(err.contains("confining itself"), "{err}");
    assert!(
        err.contains("landlock is not available on this kernel; upgrade it"),
        "{err}"
    );
}

#[test]
fn no_proxy_command_is_refused_and_none_runs_in_process() {
    let mut fx = fixture(false);
    fx.setup.proxy = None;
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let err = ProxyChild::start(&fx.setup, &policy, &env()).err().unwrap();
    assert!(err.contains("names no proxy command"), "{err}");

    // start_service: in this process, through the same trait.
    let (up, conns) = upstream();
    let svc = start_service(&fx.setup, Arc::new(policy), env()).unwrap();
    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = chan.local_addr().unwrap();
    let serving = svc
        .serve(chan, caller(&[format!("ok.test:{}", up.port())]))
        .unwrap();
    let (status, text) = get(addr, &format!("http://ok.test:{}/x", up.port()));
    assert_eq!(status, 200, "{text}");
    assert_eq!(conns.load(Ordering::SeqCst), 1);
    drop(serving);
}

#[test]
fn start_service_with_a_command_runs_a_child() {
    let fx = fixture(false);
    let (up, _) = upstream();
    let policy = Arc::new(Policy::load_file(&fx.policy_file).unwrap());
    let svc = start_service(&fx.setup, policy, env()).unwrap();
    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = chan.local_addr().unwrap();
    let serving = svc
        .serve(chan, caller(&[format!("ok.test:{}", up.port())]))
        .unwrap();
    assert!(serving.handle.is::<cordon_egress::ChildServing>());
    let (status, _) = get(addr, &format!("http://ok.test:{}/x", up.port()));
    assert_eq!(status, 200);
    // The decision (and its answer) was recorded by the child, in the file.
    assert_eq!(audit_lines(&fx.audit).len(), 2);
}

#[test]
fn a_start_that_cannot_run_the_command_is_refused() {
    let mut fx = fixture(false);
    fx.setup.proxy = Some(SelfCommand {
        path: PathBuf::from("/nonexistent/cordon"),
        args: vec![],
    });
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let err = ProxyChild::start(&fx.setup, &policy, &env()).err().unwrap();
    assert!(
        err.contains("starting the egress proxy process /nonexistent/cordon"),
        "{err}"
    );
}

#[test]
fn a_child_that_died_refuses_every_later_serve() {
    let fx = fixture(false);
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let child = ProxyChild::start(&fx.setup, &policy, &env()).unwrap();
    let pid = rustix::process::Pid::from_raw(child.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    assert!(gone_within(child.pid(), Duration::from_secs(2)));

    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = chan.local_addr().unwrap();
    let err = child.serve(chan, caller(&[])).err().unwrap();
    assert!(err.contains("run the command again"), "{err}");
    // Handed over or not, this process no longer holds the channel.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());

    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let err = child.serve(chan, caller(&[])).err().unwrap();
    assert!(err.contains("stopped answering earlier"), "{err}");
}

#[test]
fn a_channel_served_by_the_child_has_its_allowlist_changed_live() {
    let fx = fixture(false);
    let (up, conns) = upstream();
    let policy = Policy::load_file(&fx.policy_file).unwrap();
    let child = ProxyChild::start(&fx.setup, &policy, &env()).unwrap();
    let chan = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = chan.local_addr().unwrap();
    let port = up.port();
    let served =
        cordon_egress::EgressService::serve(&child, chan, caller(&[format!("ok.test:{port}")]))
            .unwrap();
    assert_eq!(get(addr, &format!("http://ok.test:{port}/x")).0, 200);
    assert_eq!(get(addr, &format!("http://no.test:{port}/x")).0, 403);

    // Replaced: the new list decides.
    let g = served
        .control
        .change(
            EgressChange::Replace(vec![EgressEntry::parse(&format!("no.test:{port}")).unwrap()]),
            "uid 0",
        )
        .unwrap();
    assert_eq!(g, 2);
    assert_eq!(get(addr, &format!("http://ok.test:{port}/x")).0, 403);
    assert_eq!(get(addr, &format!("http://no.test:{port}/x")).0, 200);

    // A change that failed closes egress: nothing is carried, and the
    // workload is told why.
    let err = served
        .control
        .change(EgressChange::Close("a bad entry".into()), "uid 0")
        .unwrap_err();
    assert!(err.contains("a bad entry"), "{err}");
    let (status, text) = get(addr, &format!("http://no.test:{port}/x"));
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("egress is closed"), "{text}");
    assert_eq!(conns.load(Ordering::SeqCst), 2);

    let lines = audit_lines(&fx.audit);
    let changes: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("egress_allow"))
        .collect();
    assert_eq!(changes.len(), 2, "{lines:?}");
    assert!(changes[0].contains("uid 0") && changes[0].contains(r#""verdict":"changed""#));
    assert!(changes[1].contains(r#""verdict":"closed""#));
}
