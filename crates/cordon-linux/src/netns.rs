//! The egress proxy's channel for sandboxes whose network namespace cordon
//! does not make from inside its own init: an engine's container (Docker
//! makes the namespace; cordon joins it from outside) or a runtime that is
//! handed a namespace to run in (runsc). The listener is bound *in* that
//! namespace — a socket belongs to the namespace it was made in — so the
//! workload reaches it at `127.0.0.1:port` while the owner accepts on it
//! from here, exactly as at the container rung (`linux/proxy.rs`).
//!
//! Each function does its namespace work on a thread of its own that ends
//! when it is done: a network namespace is a per-thread attribute, so the
//! caller's threads never change namespace.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sched::CloneFlags;

/// A network namespace cordon made for one sandbox, with `lo` up and
/// nothing else: no other interface, no route. Held open by `ns`; it ends
/// when the last holder (this, a process in it, a socket of it) is gone.
pub struct PrivateNetns {
    pub ns: OwnedFd,
    /// `127.0.0.1:port` in it, listening.
    pub listener: TcpListener,
}

/// On a thread of its own: `work` in the namespace `target` gives, or in a
/// new one (`None`), returning what it made and that namespace.
fn in_namespace<T: Send>(
    target: Option<BorrowedFd<'_>>,
    work: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<(OwnedFd, T)> {
    std::thread::scope(|s| {
        s.spawn(|| {
            match target {
                Some(fd) => nix::sched::setns(fd, CloneFlags::CLONE_NEWNET)
                    .map_err(|e| io::Error::other(format!("joining the network namespace: {e}")))?,
                None => nix::sched::unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(|e| io::Error::other(format!("making a network namespace: {e}")))?,
            }
            let ns = std::fs::File::open("/proc/thread-self/ns/net")
                .map_err(|e| io::Error::new(e.kind(), format!("opening the namespace: {e}")))?;
            let made = work()?;
            Ok((OwnedFd::from(ns), made))
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
    })
}

/// Listens on `127.0.0.1:port` inside the network namespace `netns` (a
/// container's, as `/proc/PID/ns/net` opens it), bringing its `lo` up and
/// reserving `port` from its automatic port choice first. Needs
/// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN` (root).
pub fn listen_in(netns: BorrowedFd<'_>, port: u16) -> io::Result<TcpListener> {
    let (_, fd) = in_namespace(Some(netns), || crate::linux::proxy::listen(port))?;
    Ok(TcpListener::from(fd))
}

/// Connects to `127.0.0.1:port` inside the network namespace `netns` (a
/// sandbox's), bringing its `lo` up first when it is down (a sandbox
/// without a route out has only `lo`, and at the container rung it is
/// left down until something needs it): loopback only, no route out.
pub fn connect_loopback_in(netns: BorrowedFd<'_>, port: u16) -> io::Result<std::net::TcpStream> {
    let (_, stream) = in_namespace(Some(netns), || {
        crate::linux::proxy::loopback_up()?;
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            std::time::Duration::from_secs(5),
        )
    })?;
    Ok(stream)
}

/// Connects to `addr` from inside the network namespace `netns`: the
/// socket stays the namespace's (the microvm backend's egress relay
/// reaches the proxy's listener so, never through the host's loopback).
pub fn connect_in(
    netns: BorrowedFd<'_>,
    addr: std::net::SocketAddr,
) -> io::Result<std::net::TcpStream> {
    let (_, stream) = in_namespace(Some(netns), || {
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))
    })?;
    Ok(stream)
}

/// The network namespace the processes of a sandbox's cgroups (`dirs`)
/// run in, when it is not this process's own: the first member whose
/// namespace differs. `None`: every member shares this process's (the
/// host's) namespace, or none runs.
pub fn of_cgroups(dirs: &[std::path::PathBuf]) -> io::Result<Option<OwnedFd>> {
    let own = std::fs::File::open("/proc/self/ns/net")?;
    // The sandbox's cgroups and theirs beneath (each exec has one), a
    // bounded walk.
    let mut all: Vec<std::path::PathBuf> = dirs.to_vec();
    let mut i = 0;
    while i < all.len() && all.len() < 4096 {
        if let Ok(rd) = std::fs::read_dir(&all[i]) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    all.push(e.path());
                }
            }
        }
        i += 1;
    }
    for d in &all {
        let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) else {
            continue;
        };
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            // A pid read from the list may be another process's by the
            // time it is opened (reused: another sandbox's, whose
            // namespace this would hand out). As `cgroup::kill_by_membership`
            // does: pin it with a pidfd, check it is still a member, open
            // its namespace, and keep that only if the pinned process is
            // still alive (so the pid was not reused in between).
            let Some(p) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            else {
                continue;
            };
            let Ok(pinned) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
            else {
                continue;
            };
            let member = std::fs::read_to_string(d.join("cgroup.procs"))
                .is_ok_and(|l| l.lines().any(|x| x.trim() == pid.to_string()));
            if !member {
                continue;
            }
            // Gone meanwhile, or not ours to open: the next.
            let Ok(ns) = std::fs::File::open(format!("/proc/{pid}/ns/net")) else {
                continue;
            };
            if !alive(&pinned) {
                continue;
            }
            if !same(ns.as_fd(), own.as_fd())? {
                return Ok(Some(OwnedFd::from(ns)));
            }
        }
    }
    Ok(None)
}

/// The network namespace of process `pid`, which `still_it` says (asked
/// after the namespace is opened) is still the process meant — a
/// container's first process as its engine reports it, say. The pid is
/// pinned with a pidfd first, and the namespace kept only if the pinned
/// process is alive after it was opened and `still_it` holds: a pid that
/// ended and was reused in between (another sandbox's process) never
/// hands out its namespace.
pub fn of_pid(pid: i32, still_it: impl FnOnce() -> bool) -> io::Result<OwnedFd> {
    let gone = || io::Error::new(io::ErrorKind::NotFound, format!("process {pid} is gone"));
    let p = rustix::process::Pid::from_raw(pid).ok_or_else(gone)?;
    let pinned =
        rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).map_err(|_| gone())?;
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    if !alive(&pinned) || !still_it() {
        return Err(gone());
    }
    Ok(OwnedFd::from(ns))
}

/// Whether the process a pidfd pins is still running (its pidfd is
/// readable once it has exited).
fn alive(pidfd: &OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
}

/// A new network namespace holding only `lo` (up) and a listener on
/// `127.0.0.1:port`. A runtime started in it (runsc's spec names it)
/// reaches nothing but the listener.
pub fn private_with_listener(port: u16) -> io::Result<PrivateNetns> {
    let (ns, fd) = in_namespace(None, || crate::linux::proxy::listen(port))?;
    Ok(PrivateNetns {
        ns,
        listener: TcpListener::from(fd),
    })
}

/// A new network namespace holding only `lo` (up): a runtime started in it
/// (runsc's spec names it) reaches nothing, and what listens in it is
/// reached only from inside, or through the namespace ([`connect_loopback_in`]).
pub fn private_loopback() -> io::Result<OwnedFd> {
    let (ns, ()) = in_namespace(None, crate::linux::proxy::loopback_up)?;
    Ok(ns)
}

/// A port for a sandbox's proxy listener, inside a network namespace of
/// its own: any port works there; a random one per sandbox means one
/// sandbox's port names nothing a workload could count on in another's.
/// In 20000..=59999, clear of the well-known and the usual ephemeral ports.
pub fn random_port() -> u16 {
    let mut b = [0u8; 2];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        b = (t as u16 ^ std::process::id() as u16).to_le_bytes();
    }
    20_000 + u16::from_le_bytes(b) % 40_000
}

/// Whether `a` and `b` are the same network namespace (for tests and
/// checks: a listener must never be bound in the host's).
pub fn same(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    let (x, y) = (rustix::fs::fstat(a)?, rustix::fs::fstat(b)?);
    Ok(x.st_dev == y.st_dev && x.st_ino == y.st_ino)
}

impl AsFd for PrivateNetns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ns.as_fd()
    }
}
