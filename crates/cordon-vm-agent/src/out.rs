//! The channel's writing half, shared by everything that answers the host:
//! [`Out`], and [`clip`] for what an answer quotes.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use cordon_vm_proto::{write_frame, ErrKind, Msg};

use crate::console::say;

/// An error message is cut to this many bytes, so a frame's header stays
/// within `MAX_HEADER` whatever an error quotes.
const MAX_MESSAGE: usize = 4096;

/// The channel's writing half: every frame goes out whole under the lock.
pub(crate) struct Out {
    w: Mutex<Writer>,
    /// Signalled when a park ends.
    unparked: Condvar,
    broken: AtomicBool,
}

struct Writer {
    w: Box<dyn Write + Send>,
    /// Parked (`Msg::Park`): nothing goes out until `unpark`.
    parked: bool,
}

impl Out {
    pub(crate) fn new(w: Box<dyn Write + Send>) -> Out {
        Out {
            w: Mutex::new(Writer { w, parked: false }),
            unparked: Condvar::new(),
            broken: AtomicBool::new(false),
        }
    }

    /// Answers `Park` with `Done` and parks: the `Done` is the last frame
    /// out until [`Self::unpark`]; every sender meanwhile waits.
    pub(crate) fn park(&self, req: u64) -> bool {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        while w.parked {
            w = self.unparked.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        let sent = self.write(&mut w, &Msg::Done { req }, &[]);
        w.parked = sent;
        sent
    }

    /// Ends a park: the senders waiting go on.
    pub(crate) fn unpark(&self) {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        w.parked = false;
        self.unparked.notify_all();
    }

    /// Sends one frame; `false` when it did not go out (the channel is
    /// broken, and the reader will see that too).
    pub(crate) fn send(&self, msg: &Msg, data: &[u8]) -> bool {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        while w.parked {
            w = self.unparked.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        self.write(&mut w, msg, data)
    }

    fn write(&self, w: &mut Writer, msg: &Msg, data: &[u8]) -> bool {
        if self.broken.load(Ordering::SeqCst) {
            return false;
        }
        match write_frame(&mut w.w, msg, data) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                // Ours to fix, not the channel's: say so, keep serving.
                say!("a `{}` frame was not sent: {e}", msg.kind());
                false
            }
            Err(e) => {
                if !self.broken.swap(true, Ordering::SeqCst) {
                    say!("writing to the host failed: {e}");
                }
                false
            }
        }
    }

    /// An `Error` answer to request `req`.
    pub(crate) fn error(&self, req: u64, kind: ErrKind, path: &str, message: &str) {
        self.send(
            &Msg::Error {
                req,
                kind,
                path: clip(path),
                message: clip(message),
            },
            &[],
        );
    }
}

/// `s`, cut at a character boundary to at most [`MAX_MESSAGE`] bytes.
pub(crate) fn clip(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
