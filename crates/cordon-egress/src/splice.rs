//! A tunnel's bytes moved socket to socket inside the kernel (`splice(2)`
//! through a pipe), never copied through the proxy's memory. The response
//! cap is counted here, on the transport: `splice` says how many bytes it
//! moved, and past the cap the tunnel is closed.

use std::io;
use std::os::fd::AsFd;

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The most bytes one splice moves.
const CHUNK: usize = 1 << 20;

/// Why a tunnel ended early.
#[derive(Debug)]
pub enum SpliceEnd {
    /// More than the cap came from upstream.
    CapExceeded,
    Io(io::Error),
}

impl From<io::Error> for SpliceEnd {
    fn from(e: io::Error) -> SpliceEnd {
        SpliceEnd::Io(e)
    }
}

/// The bytes a tunnel delivered each way, counted as they are delivered
/// (so a tunnel that ends in an error still reports what it moved).
#[derive(Debug, Default)]
pub struct Moved {
    /// Client to upstream.
    pub up: std::sync::atomic::AtomicU64,
    /// Upstream to client.
    pub down: std::sync::atomic::AtomicU64,
}

/// Moves bytes both ways until both sides have ended, at most `cap` bytes
/// from `upstream` to `client`, counting them in `moved`. On the cap,
/// returns at once (the caller drops both sockets, closing them).
pub async fn tunnel(
    client: &TcpStream,
    upstream: &TcpStream,
    cap: u64,
    moved: &Moved,
) -> Result<(), SpliceEnd> {
    let up = one_way(client, upstream, None, &moved.up);
    let down = one_way(upstream, client, Some(cap), &moved.down);
    tokio::try_join!(up, down).map(|_| ())
}

/// `from` → `to` until `from` ends; then `to`'s write side is shut down.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    cap: Option<u64>,
    counted: &std::sync::atomic::AtomicU64,
) -> Result<u64, SpliceEnd> {
    let (pipe_r, pipe_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
        .map_err(io::Error::from)?;
    // A larger pipe moves more per call; the default (64 KiB) still works.
    let _ = rustix::pipe::fcntl_setpipe_size(&pipe_w, CHUNK);
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut total: u64 = 0;
    loop {
        let want = match cap {
            // One byte past the cap is the proof it was exceeded.
            Some(c) => usize::try_from((c - total.min(c)).saturating_add(1))
                .unwrap_or(CHUNK)
                .min(CHUNK),
            None => CHUNK,
        };
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                rustix::pipe::splice(from.as_fd(), None, &pipe_w, None, want, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            let _ = rustix::net::shutdown(to.as_fd(), rustix::net::Shutdown::Write);
            return Ok(total);
        }
        // Up to the cap is delivered; what lies past it is not.
        let over = cap.is_some_and(|c| total + n as u64 > c);
        let mut left = match cap {
            Some(c) if over => usize::try_from(c - total).unwrap_or(n).min(n),
            _ => n,
        };
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(&pipe_r, None, to.as_fd(), None, left, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(m) => {
                    left -= m;
                    total += m as u64;
                    counted.fetch_add(m as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if over {
            return Err(SpliceEnd::CapExceeded);
        }
    }
}
