//! The sandbox's one route out: a TCP listener on `127.0.0.1:proxy_port`
//! of the sandbox's own network namespace, made by the init and handed to
//! the owner, who accepts on it from outside (a socket stays in the
//! namespace it was made in).
//!
//! ```text
//! stage 1 (in the new user + net namespaces, full capabilities there,
//!          before stage 2, Landlock, seccomp or any workload)
//!   lo up → socket → bind 127.0.0.1:port → listen
//!   ── SCM_RIGHTS over a SOCK_SEQPACKET socket ──> owner
//!   closes its copy; nothing started after holds it
//! ```
//!
//! One-shot runs use a socket made for this (`--cordon-handover-fd=`), warm
//! sandboxes their control socket (the listener is its first packet, sent
//! before the init serves anything). The owner takes it once the init
//! reports `Started`, which stage 2 sends only after stage 1 sent the
//! listener, so it is already queued then.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::net::{AddressFamily, SocketFlags, SocketType};

use super::proto::Handover;
use crate::fdpass;

/// Listen backlog: connects queue here until the owner accepts.
const BACKLOG: i32 = 128;

/// `struct ifreq` as `SIOCGIFFLAGS`/`SIOCSIFFLAGS` use it: the name, then
/// the flags (a `short`) at the start of the union, padded to the kernel's
/// 40 bytes. Every byte is initialised.
#[repr(C)]
struct IfFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const _: () = assert!(std::mem::size_of::<IfFlags>() == std::mem::size_of::<libc::ifreq>());

fn if_flags(sock: &OwnedFd, request: libc::c_ulong, req: &mut IfFlags) -> io::Result<()> {
    #[expect(
        unsafe_code,
        reason = "SIOC[GS]IFFLAGS have no wrapper in nix or rustix"
    )]
    // SAFETY: `sock` is an open socket; `req` is a live, fully initialised
    // `ifreq`-sized buffer the kernel reads (and for SIOCGIFFLAGS writes the
    // flags into) only for the duration of the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request, std::ptr::from_mut(req)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Brings this network namespace's loopback interface up if it is not (a
/// new namespace's `lo` is down). Needs `CAP_NET_ADMIN` over the namespace.
pub(crate) fn loopback_up() -> io::Result<()> {
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let mut req = IfFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    if_flags(&sock, libc::SIOCGIFFLAGS, &mut req)?;
    let up = libc::c_short::try_from(libc::IFF_UP).map_err(io::Error::other)?;
    if req.flags & up == 0 {
        req.flags |= up;
        if_flags(&sock, libc::SIOCSIFFLAGS, &mut req)?;
    }
    Ok(())
}

/// Keeps `port` out of this network namespace's automatic port choice.
/// Landlock refuses the workload every TCP `bind`, but `listen` or
/// `connect` on an unbound socket binds an ephemeral port without one; so
/// that can never land on the proxy port (say once the owner has closed the
/// listener), the port is reserved (IPv4 and IPv6, TCP and UDP).
/// Reservations already made in the namespace are kept (a joined one may
/// hold some).
fn reserve(port: u16) -> io::Result<()> {
    const FILE: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
    let held = std::fs::read_to_string(FILE)?;
    let held = held.trim();
    let all = if held.is_empty() {
        port.to_string()
    } else {
        format!("{held},{port}")
    };
    std::fs::write(FILE, all)
}

/// Brings `lo` up, reserves `port` and listens on `127.0.0.1:port`
/// (close-on-exec). Runs in the sandbox's new network namespace with
/// `CAP_NET_ADMIN` over it.
pub(crate) fn listen(port: u16) -> io::Result<OwnedFd> {
    loopback_up().map_err(|e| io::Error::new(e.kind(), format!("bringing `lo` up: {e}")))?;
    reserve(port).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("reserving port {port} (ip_local_reserved_ports): {e}"),
        )
    })?;
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    rustix::net::bind(&sock, &addr)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
    rustix::net::listen(&sock, BACKLOG)?;
    Ok(sock)
}

/// The owner's side: takes the listener for `port` off `sock`, where the
/// init queued it before reporting `Started`; checks that it is a TCP
/// socket listening on `127.0.0.1:port`.
pub(crate) fn receive(sock: &impl AsFd, port: u16) -> Result<TcpListener, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let missing = |why: String| format!("the sandbox's proxy listener did not arrive: {why}");
    // Already queued (see the module docs); the wait only bounds a bug.
    let wait = Timespec {
        tv_sec: 2,
        tv_nsec: 0,
    };
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    match poll(&mut fds, Some(&wait)) {
        Ok(0) => return Err(missing("nothing was sent".into())),
        Ok(_) => {}
        Err(e) => return Err(missing(e.to_string())),
    }
    let fd = match fdpass::recv::<Handover>(sock) {
        Ok(Some((Handover::ProxyListener { port: p }, mut fds))) if p == port && fds.len() == 1 => {
            fds.remove(0)
        }
        Ok(Some((msg, fds))) => {
            return Err(missing(format!(
                "got {msg:?} with {} descriptors for port {port}",
                fds.len()
            )))
        }
        Ok(None) => return Err(missing("the init closed the channel".into())),
        Err(e) => return Err(missing(e.to_string())),
    };
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
    let stream = rustix::net::sockopt::socket_type(&fd).ok() == Some(SocketType::STREAM);
    let listener = TcpListener::from(fd);
    let want = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    match listener.local_addr() {
        Ok(addr) if addr == want && listening && stream => Ok(listener),
        other => Err(missing(format!(
            "the descriptor is not a TCP listener on {want} ({other:?}, listening: {listening})"
        ))),
    }
}
