//! The proxy port: a sandbox's only TCP route is `127.0.0.1:proxy_port` of
//! its own network namespace, whose listener the owner holds. Every case
//! asserts the route works in the same run (or sandbox) where it asserts
//! what is refused, so a sandbox that reaches nothing cannot pass.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cordon_linux::{
    ConfineError, Mechanism, Mechanisms, PlanError, Rung, SandboxStdio, Termination, WarmSandbox,
};

use super::warm::{sh, start};
use super::*;

const EACCES: &str = "errno 13";

/// A port nothing on the host listens on right now (any port works inside
/// the sandbox's namespace; this only keeps the tests' ports apart).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("probe port");
    l.local_addr().expect("addr").port()
}

/// Accepts connections on `listener` until `n` arrived or `within` passed;
/// reads what each sent (up to 5 bytes), answers `reply`.
fn serve(listener: TcpListener, n: usize, reply: &'static [u8]) -> JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        listener.set_nonblocking(true).expect("nonblocking");
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            match listener.accept() {
                Ok((s, _)) => got.push(exchange(s, reply)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
        got
    })
}

fn exchange(mut s: TcpStream, reply: &[u8]) -> String {
    s.set_nonblocking(false).expect("blocking");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 5];
    let read = s.read_exact(&mut buf).map(|()| buf.to_vec());
    let _ = s.write_all(reply);
    String::from_utf8_lossy(&read.unwrap_or_default()).into_owned()
}

/// Python: `t(name, f)` prints `name ok` or `name errno N`.
const PRELUDE: &str = "import socket,os\n\
def t(name,f):\n\
\x20   try: f(); print(name,'ok',flush=True)\n\
\x20   except OSError as e: print(name,'errno',e.errno,flush=True)\n\
def hello(port):\n\
\x20   s=socket.create_connection(('127.0.0.1',port),timeout=5)\n\
\x20   s.sendall(b'hello')\n\
\x20   r=s.recv(100)\n\
\x20   if r!=b'world': raise OSError(0,'reply %r'%r)\n";

fn proxy_case(port: Option<u16>, code: &str) -> Case {
    let mut case = python(Rung::Container, &format!("{PRELUDE}{code}"));
    case.spec.proxy_port = port;
    case
}

/// Runs `case`, serving `n` connections on its proxy listener (when it has
/// one); returns the run and what each connection sent.
fn run_serving(enforcer: &LinuxEnforcer, case: &Case, n: usize) -> (Run, Vec<String>) {
    let plan = Plan::new(case.spec.clone()).expect("plan");
    let mut running = enforcer
        .confine(&plan, SandboxStdio::piped())
        .unwrap_or_else(|e| panic!("sandbox failed: {e}"));
    let listener = running.take_proxy_listener();
    assert_eq!(
        listener.is_some(),
        case.spec.proxy_port.is_some(),
        "a listener exactly when the plan names a port"
    );
    assert!(running.take_proxy_listener().is_none(), "taken once");
    let server = listener.map(|l| serve(l, n, b"world"));
    let (outcome, out, err) = running.wait_with_output().expect("wait");
    let got = server
        .map(|s| s.join().expect("server"))
        .unwrap_or_default();
    no_process_left(case.host_uid());
    (
        Run {
            outcome,
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
        },
        got,
    )
}

#[test]
fn the_workload_reaches_the_owner_through_the_proxy_port_and_holds_no_listener() {
    let Some(enforcer) = enforcer_for(Rung::Container, "proxy port") else {
        return;
    };
    let port = free_port();
    let case = proxy_case(
        Some(port),
        &format!(
            "def link(f):\n\
             \x20   try: return os.readlink('/proc/self/fd/'+f)\n\
             \x20   except OSError: return ''\n\
             fds=[link(f) for f in os.listdir('/proc/self/fd')]\n\
             print('sockets-held',len([f for f in fds if f.startswith('socket:')]))\n\
             t('proxy',lambda: hello({port}))\n\
             print('end')"
        ),
    );
    let (run, got) = run_serving(&enforcer, &case, 1);
    assert_eq!(run.outcome.termination, Termination::Exited(0), "{run:?}");
    assert!(run.stdout.contains("proxy ok"), "{run:?}");
    assert_eq!(got, ["hello"], "{run:?}");
    // The listener was the init's and is the owner's: the workload never
    // inherited it (nor any other socket).
    assert!(run.stdout.contains("sockets-held 0"), "{run:?}");
}

#[test]
fn any_other_port_and_any_bind_are_refused_by_landlock() {
    let Some(enforcer) = enforcer_for(Rung::Container, "proxy port: other ports") else {
        return;
    };
    let port = free_port();
    let other = if port < u16::MAX { port + 1 } else { port - 1 };
    let case = proxy_case(
        Some(port),
        &format!(
            "t('other',lambda: socket.create_connection(('127.0.0.1',{other}),timeout=5))\n\
             t('other6',lambda: socket.create_connection(('::1',{other}),timeout=5))\n\
             def b(p):\n\
             \x20   s=socket.socket(); s.bind(('127.0.0.1',p)); s.listen()\n\
             t('bind-any',lambda: b(0))\n\
             t('bind-proxy',lambda: b({port}))\n\
             def l():\n\
             \x20   s=socket.socket(); s.listen(); print('autobound',s.getsockname()[1])\n\
             t('listen-unbound',l)\n\
             print('reserved',open('/proc/sys/net/ipv4/ip_local_reserved_ports').read().strip())\n\
             t('proxy',lambda: hello({port}))\n\
             print('end')"
        ),
    );
    let (run, got) = run_serving(&enforcer, &case, 1);
    assert!(run.stdout.contains("end"), "{run:?}");
    // The route itself works in this same sandbox...
    assert!(run.stdout.contains("proxy ok"), "{run:?}");
    assert_eq!(got, ["hello"]);
    // ...and the other port is refused by Landlock (EACCES), not merely
    // unanswered (ECONNREFUSED would mean the connect was allowed).
    assert!(
        run.stdout.contains(&format!("other {EACCES}")),
        "connect to another port not refused by Landlock: {run:?}"
    );
    assert!(
        run.stdout.contains("other6 errno"),
        "IPv6 loopback connect: {run:?}"
    );
    assert!(!run.stdout.contains("other6 ok"), "{run:?}");
    // No TCP bind, not even to the proxy port.
    for what in ["bind-any", "bind-proxy"] {
        assert!(
            run.stdout.contains(&format!("{what} {EACCES}")),
            "{what} not refused: {run:?}"
        );
    }
    // `listen` on an unbound socket binds an ephemeral port without a
    // `bind` (Landlock does not see it); the proxy port is reserved so that
    // choice can never be it.
    assert!(
        run.stdout.contains(&format!("reserved {port}\n")),
        "the proxy port is not reserved: {run:?}"
    );
    assert!(
        !run.stdout.contains(&format!("autobound {port}\n")),
        "{run:?}"
    );
}

#[test]
fn the_hosts_loopback_is_out_of_reach_even_on_the_proxy_port() {
    let Some(enforcer) = enforcer_for(Rung::Container, "proxy port: host loopback") else {
        return;
    };
    // The host listens on the very port the sandbox may connect to, and
    // takes UDP on a port the sandbox sends to: only the network namespace
    // stands between them.
    let host_tcp = TcpListener::bind("127.0.0.1:0").expect("host tcp");
    host_tcp.set_nonblocking(true).expect("nonblocking");
    let port = host_tcp.local_addr().expect("addr").port();
    let host_udp = UdpSocket::bind("127.0.0.1:0").expect("host udp");
    let uport = host_udp.local_addr().expect("addr").port();
    let case = proxy_case(
        Some(port),
        &format!(
            "t('proxy',lambda: hello({port}))\n\
             def u():\n\
             \x20   mine=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); mine.bind(('127.0.0.1',{uport})); mine.settimeout(5)\n\
             \x20   socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'udp-x',('127.0.0.1',{uport}))\n\
             \x20   if mine.recv(100)!=b'udp-x': raise OSError(0,'wrong datagram')\n\
             t('udp-own-loopback',u)\n\
             t('udp-host',lambda: socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'udp-y',('127.0.0.1',{uport})))\n\
             print('end')"
        ),
    );
    let (run, got) = run_serving(&enforcer, &case, 1);
    assert!(run.stdout.contains("end"), "{run:?}");
    // The connect to `port` reached the sandbox's listener, the owner's...
    assert!(run.stdout.contains("proxy ok"), "{run:?}");
    assert_eq!(got, ["hello"]);
    // ...never the host's on the same port.
    assert_eq!(
        host_tcp.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a connection reached the host's loopback"
    );
    // UDP to 127.0.0.1 stays on the sandbox's own loopback: its own socket
    // got it (so `lo` is up and the datagram went somewhere), the host's
    // got nothing.
    assert!(run.stdout.contains("udp-own-loopback ok"), "{run:?}");
    host_udp
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    assert!(
        host_udp.recv(&mut buf).is_err(),
        "a datagram reached the host: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

#[test]
fn without_a_proxy_port_there_is_no_tcp_at_all() {
    let Some(enforcer) = enforcer_for(Rung::Container, "no proxy port") else {
        return;
    };
    let port = free_port();
    let code = format!("t('proxy',lambda: hello({port}))\nprint('end')");
    // The same script, once without a port and once with it.
    let (without, got) = run_serving(&enforcer, &proxy_case(None, &code), 0);
    assert!(without.stdout.contains("end"), "{without:?}");
    assert!(got.is_empty());
    assert!(
        without.stdout.contains(&format!("proxy {EACCES}")),
        "connect not refused by Landlock without a proxy port: {without:?}"
    );
    let (with, got) = run_serving(&enforcer, &proxy_case(Some(port), &code), 1);
    assert!(with.stdout.contains("proxy ok"), "{with:?}");
    assert_eq!(got, ["hello"]);
}

fn warm_with_port(port: u16, name: &str) -> (Case, WarmSandbox, TcpListener) {
    let mut case = Case::new(Rung::Container, &["/bin/true"]);
    case.spec.proxy_port = Some(port);
    let mut w = start(&case, &format!("{name}-{}", std::process::id()));
    let listener = w
        .take_proxy_listener()
        .expect("the warm sandbox's listener");
    assert!(w.take_proxy_listener().is_none(), "taken once");
    (case, w, listener)
}

fn py_exec(w: &WarmSandbox, case: &Case, code: &str) -> super::warm::Out {
    let script = format!("{PRELUDE}{code}\nprint('end')");
    // Through sh, which the warm helpers run.
    let quoted = script.replace('\'', "'\\''");
    sh(w, case, &format!("/usr/bin/python3 -c '{quoted}'"))
}

#[test]
fn warm_execs_share_their_sandboxs_port_and_no_other() {
    let Some(_) = enforcer_for(Rung::Container, "warm proxy port") else {
        return;
    };
    let p = free_port();
    let q = free_port();
    assert_ne!(p, q);
    let (case_a, a, listener_a) = warm_with_port(p, "cordon-test-proxy-a");
    let (case_b, b, listener_b) = warm_with_port(q, "cordon-test-proxy-b");
    let served_a = serve(listener_a, 2, b"world");
    let served_b = serve(listener_b, 1, b"world");
    for round in 0..2 {
        let out = py_exec(&a, &case_a, &format!("t('proxy',lambda: hello({p}))"));
        assert!(
            out.stdout.contains("proxy ok"),
            "round {round}: {}{}",
            out.stdout,
            out.stderr
        );
    }
    // B may use its own port, and gets Landlock's EACCES on A's.
    let out = py_exec(
        &b,
        &case_b,
        &format!("t('theirs',lambda: hello({p}))\nt('own',lambda: hello({q}))"),
    );
    assert!(
        out.stdout.contains("own ok"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains(&format!("theirs {EACCES}")),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(served_a.join().expect("a"), ["hello", "hello"]);
    assert_eq!(served_b.join().expect("b"), ["hello"]);
    a.stop().expect("stop a");
    b.stop().expect("stop b");
}

#[test]
fn the_process_rung_refuses_a_proxy_port() {
    // Plan validation, before any enforcer: nothing to skip.
    let mut case = Case::new(Rung::Process, &["/bin/true"]);
    case.spec.proxy_port = Some(41_000);
    let err = Plan::new(case.spec.clone()).expect_err("refused");
    assert_eq!(err, PlanError::ProxyPortNeedsContainer);
    assert!(err.to_string().contains("container rung"), "{err}");
    let mut container = Case::new(Rung::Container, &["/bin/true"]);
    container.spec.proxy_port = Some(41_000);
    assert!(Plan::new(container.spec.clone()).is_ok());
    container.spec.proxy_port = Some(0);
    assert_eq!(
        Plan::new(container.spec.clone()),
        Err(PlanError::ProxyPortZero)
    );
}

#[test]
fn without_landlock_tcp_rules_a_proxy_port_is_refused_before_anything_runs() {
    let mut m = Mechanisms::detect();
    m.root = true;
    m.landlock_abi = 3;
    m.seccomp = true;
    m.cgroups = Ok(());
    m.platform = Ok(());
    for ns in &mut m.namespaces {
        ns.1 = true;
    }
    let enforcer = LinuxEnforcer::with_mechanisms(init_program(), m);
    let mut case = shell(Rung::Container, "echo ran > marker");
    case.spec.proxy_port = Some(41_000);
    let plan = Plan::new(case.spec.clone()).expect("plan");
    match enforcer.confine(&plan, SandboxStdio::piped()) {
        Err(ConfineError::Missing(missing)) => {
            assert!(missing.names(Mechanism::LandlockNetwork), "{missing}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("started with a proxy port and no TCP rules"),
    }
    assert!(!case.work_dir().join("marker").exists(), "the workload ran");
}
