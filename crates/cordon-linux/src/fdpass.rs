//! Messages with descriptors attached, over `SOCK_SEQPACKET` unix sockets:
//! one JSON value per packet, plus up to [`MAX_FDS`] descriptors passed with
//! `SCM_RIGHTS`. Used between the owner and a warm sandbox's init, and
//! between a sandbox's keeper and its clients.
//!
//! Packets keep their boundaries, so a message is never split or merged;
//! one larger than [`MAX_MESSAGE`] is refused on send. Received descriptors
//! are close-on-exec.

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 8;
/// Largest message, in bytes of JSON.
pub const MAX_MESSAGE: usize = 192 * 1024;

/// A connected pair of `SOCK_SEQPACKET` sockets, close-on-exec, with send
/// buffers large enough for [`MAX_MESSAGE`].
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let (a, b) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    for s in [&a, &b] {
        size_buffers(s)?;
    }
    Ok((a, b))
}

/// Raises a socket's buffers so a [`MAX_MESSAGE`] packet fits.
pub fn size_buffers(s: &impl AsFd) -> io::Result<()> {
    let want = MAX_MESSAGE * 2 + 4096;
    rustix::net::sockopt::set_socket_send_buffer_size(s, want)?;
    rustix::net::sockopt::set_socket_recv_buffer_size(s, want)?;
    Ok(())
}

/// Sends `msg` with `fds` attached.
pub fn send<T: Serialize>(sock: impl AsFd, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other(format!(
            "{} descriptors in one message; at most {MAX_FDS}",
            fds.len()
        )));
    }
    let bytes = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a message of {} bytes is over the {MAX_MESSAGE}-byte limit (a command line that long cannot be sent; put large inputs in a file)",
                bytes.len()
            ),
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other(
            "the descriptors do not fit the control buffer",
        ));
    }
    loop {
        match sendmsg(
            &sock,
            &[IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::other(format!(
                    "sent {n} of {} bytes of one packet",
                    bytes.len()
                )))
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message and its descriptors; `Ok(None)` when the peer has
/// closed its end. A message whose bytes or descriptors were cut short is
/// an error (its descriptors are closed).
pub fn recv<T: DeserializeOwned>(sock: impl AsFd) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match recvmsg(
            &sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => break got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if got.flags.contains(ReturnFlags::TRUNC) || got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a message was cut short",
        ));
    }
    let msg = serde_json::from_slice(&buf[..got.bytes])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_message_and_its_descriptors_arrive_together() {
        let (a, b) = pair().unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        send(&a, &serde_json::json!({"hello": [1, 2]}), &[w.as_fd()]).unwrap();
        drop(w);
        let (msg, mut fds): (serde_json::Value, _) = recv(&b).unwrap().unwrap();
        assert_eq!(msg["hello"][1], 2);
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.remove(0));
        w.write_all(b"through").unwrap();
        drop(w);
        let mut s = String::new();
        std::fs::File::from(r).read_to_string(&mut s).unwrap();
        assert_eq!(s, "through");
    }

    #[test]
    fn too_large_or_too_many_is_refused_and_a_closed_peer_is_none() {
        let (a, b) = pair().unwrap();
        let big = "x".repeat(MAX_MESSAGE + 10);
        assert!(send(&a, &big, &[]).is_err());
        let fds: Vec<_> = (0..=MAX_FDS).map(|_| a.as_fd()).collect();
        assert!(send(&a, &1, &fds).is_err());
        drop(a);
        assert!(recv::<i32>(&b).unwrap().is_none());
    }
}
