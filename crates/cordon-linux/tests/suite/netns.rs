//! `cordon_linux::netns`: a listener bound inside a network namespace
//! cordon made (or joined) answers there and nowhere else, and the
//! namespace holds nothing but `lo`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use cordon_linux::netns;

fn root_or_skip(case: &str) -> bool {
    cordon_testkit::runs_here(
        case,
        (!cordon_testkit::is_root()).then_some("making a network namespace needs root"),
    )
}

/// A port no test here picks twice, away from the ephemeral range.
fn port(n: u16) -> u16 {
    20_000 + u16::try_from(std::process::id() % 4000).unwrap_or(0) * 4 + n
}

/// On a thread of its own inside `ns`: connects to `127.0.0.1:port` and
/// sends `msg`; also returns the interfaces it sees.
fn from_inside(ns: BorrowedFd<'_>, port: u16, msg: &'static [u8]) -> (Result<(), String>, String) {
    let ns = ns.try_clone_to_owned().expect("dup the namespace");
    std::thread::spawn(move || {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let dev = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
        let sent = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
            .and_then(|mut s| s.write_all(msg))
            .map_err(|e| e.to_string());
        (sent, dev)
    })
    .join()
    .expect("the inside thread")
}

#[test]
fn a_private_namespace_holds_only_lo_and_its_listener() {
    if !root_or_skip("a private network namespace") {
        return;
    }
    let p = port(0);
    let made = netns::private_with_listener(p).expect("make the namespace");
    let host = std::fs::File::open("/proc/self/ns/net").expect("host namespace");
    assert!(
        !netns::same(made.as_fd(), host.as_fd()).expect("compare"),
        "the listener's namespace is the host's"
    );
    let (sent, dev) = from_inside(made.as_fd(), p, b"hello");
    sent.expect("connect from inside");
    let mut conn = made.listener.accept().expect("accept").0;
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("read");
    assert_eq!(got, b"hello");
    let names: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"], "{dev}");
    // From the host's namespace the port is not the listener's: the
    // connection is refused (nothing of ours listens there), never
    // accepted by it.
    made.listener.set_nonblocking(true).expect("nonblocking");
    let _ = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p));
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        made.listener.accept().is_err(),
        "a connection from the host's namespace reached the sandbox's listener"
    );
}

#[test]
fn a_listener_joins_an_existing_namespace() {
    if !root_or_skip("a listener in a joined network namespace") {
        return;
    }
    let (first, second) = (port(1), port(2));
    let made = netns::private_with_listener(first).expect("make the namespace");
    let joined = netns::listen_in(made.as_fd(), second).expect("listen in it");
    let (sent, _) = from_inside(made.as_fd(), second, b"again");
    sent.expect("connect from inside");
    let mut got = Vec::new();
    joined
        .accept()
        .expect("accept")
        .0
        .read_to_end(&mut got)
        .expect("read");
    assert_eq!(got, b"again");
    // Both ports are kept out of the namespace's ephemeral choice.
    let reserved = std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&made.ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports")
                .unwrap_or_default()
        })
        .join()
        .expect("thread")
    });
    for p in [first, second] {
        assert!(reserved.contains(&p.to_string()), "{p}: {reserved}");
    }
}
