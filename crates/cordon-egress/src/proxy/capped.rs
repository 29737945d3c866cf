//! The response cap, counted on the upstream transport.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An upstream transport whose reads are counted: past `cap` bytes it
/// fails, which closes the connection. The cap is here, on the socket,
/// so no path through any HTTP library can miss it.
pub struct Capped<S> {
    inner: S,
    left: Arc<AtomicU64>,
    exceeded: Arc<AtomicU64>,
}

impl<S> Capped<S> {
    /// `left` is what may still be read; whoever holds it may reset it
    /// between responses.
    pub fn new(inner: S, left: Arc<AtomicU64>, exceeded: Arc<AtomicU64>) -> Capped<S> {
        Capped {
            inner,
            left,
            exceeded,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let left = self.left.load(Ordering::Relaxed);
        if left == 0 {
            // One byte more than the cap is the proof it was exceeded;
            // read at most one to learn it (or EOF, which is fine).
            let mut one = [0u8; 1];
            let mut probe = ReadBuf::new(&mut one);
            return match Pin::new(&mut self.inner).poll_read(cx, &mut probe) {
                Poll::Ready(Ok(())) if probe.filled().is_empty() => Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    self.exceeded.store(1, Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::other("the response cap was exceeded")))
                }
                other => other,
            };
        }
        let limit = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(buf.remaining());
        let window = buf.initialize_unfilled_to(limit);
        let mut sub = ReadBuf::new(window);
        let res = Pin::new(&mut self.inner).poll_read(cx, &mut sub);
        let n = sub.filled().len();
        buf.advance(n);
        self.left.fetch_sub(n as u64, Ordering::Relaxed);
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
