//! Dialling a keeper: its socket, how long an answer may take, one
//! request and its reply. Both the keeper's owner side (`mod.rs`) and a
//! kept sandbox's client (`client.rs`) dial through here.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use cordon_linux::fdpass;

use super::wire::{Reply, Request};

/// How long a keeper may take to answer a ping or a dispose before it is
/// treated as gone (then killed, if it is still that process, and reclaimed).
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// How much longer than the exec's own timeout a client waits for its end.
pub(crate) const EXEC_GRACE: Duration = Duration::from_secs(60);

/// Connects to a keeper; every read on the socket gives up after `within`.
pub(crate) fn connect(path: &Path, within: Duration) -> std::io::Result<OwnedFd> {
    use rustix::net::{
        connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
    };
    let s = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    fdpass::size_buffers(&s)?;
    rustix::net::sockopt::set_socket_timeout(
        &s,
        rustix::net::sockopt::Timeout::Recv,
        Some(within),
    )?;
    connect(&s, &SocketAddrUnix::new(path)?)?;
    Ok(s)
}

pub(super) fn ask(
    path: &Path,
    req: &Request,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<Reply> {
    let s = connect(path, ANSWER_WITHIN)?;
    fdpass::send(&s, req, fds)?;
    match fdpass::recv::<Reply>(&s)? {
        Some((r, _)) => Ok(r),
        None => Err(std::io::Error::other(
            "the keeper closed the connection without answering",
        )),
    }
}
