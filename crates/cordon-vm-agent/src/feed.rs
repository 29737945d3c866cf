//! [`Feed`]: bytes from the channel written to a pipe or a socket by a
//! thread of its own, so a workload that does not read (its stdin, its end
//! of a relayed connection) never stalls the channel's reader, which also
//! carries every other exec's frames and the host's `Kill`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

/// Bytes queued for one feed and not yet written: beyond this the feed is
/// cut (its reader sees the end), never the agent's memory spent.
pub(crate) const FEED_LIMIT: usize = 16 << 20;

pub(crate) struct Feed {
    tx: Option<Sender<Vec<u8>>>,
    queued: Arc<AtomicUsize>,
}

/// Why bytes were not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue is full: the reader is slower than the host's writes.
    Full,
    /// The feed was closed, or its writer is gone (the reader closed).
    Closed,
}

impl Feed {
    /// Starts the thread writing to `w`; `at_end` gets `w` back once the
    /// feed is closed (or a write failed).
    pub(crate) fn spawn<W: Write + Send + 'static>(
        mut w: W,
        at_end: impl FnOnce(W) + Send + 'static,
    ) -> Feed {
        let (tx, rx) = channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        std::thread::spawn(move || {
            for chunk in rx {
                let ok = w.write_all(&chunk).and_then(|()| w.flush()).is_ok();
                q.fetch_sub(chunk.len(), Ordering::SeqCst);
                if !ok {
                    break;
                }
            }
            at_end(w);
        });
        Feed {
            tx: Some(tx),
            queued,
        }
    }

    pub(crate) fn push(&mut self, data: Vec<u8>) -> Result<(), Refused> {
        let Some(tx) = &self.tx else {
            return Err(Refused::Closed);
        };
        if self.queued.load(Ordering::SeqCst) + data.len() > FEED_LIMIT {
            return Err(Refused::Full);
        }
        self.queued.fetch_add(data.len(), Ordering::SeqCst);
        tx.send(data).map_err(|_| Refused::Closed)
    }

    /// No more bytes: the writer finishes what is queued, then ends.
    pub(crate) fn close(&mut self) {
        self.tx = None;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_writes_in_order_and_hands_the_writer_back() {
        let (done_tx, done_rx) = channel();
        let mut f = Feed::spawn(Vec::new(), move |w| done_tx.send(w).unwrap());
        f.push(b"ab".to_vec()).unwrap();
        f.push(b"cd".to_vec()).unwrap();
        f.close();
        assert_eq!(f.push(b"x".to_vec()), Err(Refused::Closed));
        assert_eq!(done_rx.recv().unwrap(), b"abcd");
    }

    #[test]
    fn a_feed_that_is_not_read_is_cut_not_grown() {
        // A pipe nobody reads: the writer blocks once the pipe is full.
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut f = Feed::spawn(std::fs::File::from(w), |_| {});
        let chunk = vec![0u8; 1 << 20];
        let mut refused = None;
        for _ in 0..64 {
            if let Err(e) = f.push(chunk.clone()) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(refused, Some(Refused::Full));
        drop(r);
    }
}
