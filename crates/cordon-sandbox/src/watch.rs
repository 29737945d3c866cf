//! Watch (issue 32): what changed in a sandbox's files, as events a host
//! reads while the sandbox runs — made where the files live (inotify on
//! the work dir's own inodes, or the guest agent's in a microVM), never by
//! polling. A [`WatchSource`] is one watch: events coalesced per path
//! within [`COALESCE`], at most [`MAX_PENDING`] held (past that, one
//! [`WatchKind::Overflow`] instead of more memory), until the sandbox or
//! its watched directory goes ([`Next::Ended`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long changes to one path are gathered into one event.
pub const COALESCE: Duration = Duration::from_millis(10);

/// The most events a watch holds that its reader has not taken; past it
/// they are dropped for one `overflow` event.
pub const MAX_PENDING: usize = 4096;

/// The most directories one recursive watch follows; past it, an
/// `overflow` event says changes beneath the rest are not seen.
pub const MAX_WATCHED_DIRS: usize = 8192;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    Created,
    Modified,
    Removed,
    /// `path` became `to`.
    Renamed,
    /// Events were lost (the reader fell behind, or the kernel's queue or
    /// the watch's bounds were full): look again with a listing.
    Overflow,
}

/// One event. Paths are relative to the work dir.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchEvent {
    pub event: WatchKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Whether it is (or was) a directory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
}

impl WatchEvent {
    pub fn overflow() -> WatchEvent {
        WatchEvent {
            event: WatchKind::Overflow,
            path: String::new(),
            to: None,
            dir: false,
        }
    }
}

/// What waiting on a watch gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Event(WatchEvent),
    /// Nothing within the wait.
    Quiet,
    /// The watch is over (the sandbox went, or the watched directory was
    /// removed): why.
    Ended(String),
}

/// One watch of a sandbox's files. Dropping it stops it.
pub trait WatchSource: Send {
    /// The next event, waiting at most `wait`.
    fn next(&mut self, wait: Duration) -> Next;
}

/// A watch over another, keeping only the events `keep` lets through
/// (an overflow always).
pub struct Filtered<F> {
    pub inner: Box<dyn WatchSource>,
    pub keep: F,
}

impl<F: FnMut(&str) -> bool + Send> WatchSource for Filtered<F> {
    fn next(&mut self, wait: Duration) -> Next {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.inner.next(left) {
                Next::Event(mut e) if e.event != WatchKind::Overflow => {
                    let from = (self.keep)(&e.path);
                    let to = e.to.as_deref().map(|t| (self.keep)(t));
                    match (from, to) {
                        (true, None | Some(true)) => return Next::Event(e),
                        // Half a rename the reader may see: the side it
                        // may read, as a creation or a removal.
                        (true, Some(false)) => {
                            e.event = WatchKind::Removed;
                            e.to = None;
                            return Next::Event(e);
                        }
                        (false, Some(true)) => {
                            e.event = WatchKind::Created;
                            e.path = e.to.take().unwrap_or_default();
                            return Next::Event(e);
                        }
                        (false, _) if left.is_zero() => return Next::Quiet,
                        (false, _) => {}
                    }
                }
                other => return other,
            }
        }
    }
}

/// A port of a sandbox a caller asks to reach from the host: decided by
/// the policy's ingress surface (`port`, `listen`, `caller`) with the
/// sandbox's identity, then opened by the backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRequest {
    pub port: u16,
    /// The host address the port is reached at (`127.0.0.1`, `::1`, or
    /// the server's own listening address).
    pub listen: String,
    /// Who asks.
    pub caller: cordon_policy::Identity,
}
