//! A watch across the keeper's pipe: the keeper's side writes each event
//! as one JSON line and `{"event": "ended", "reason"}` last; the client's
//! side ([`PipeWatch`]) reads them back as a [`WatchSource`]. The pipe's
//! end is the watch's end: the keeper exits with its sandbox.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use cordon_sandbox::{Next, WatchEvent, WatchSource};

/// The last line of a watch.
pub(crate) fn ended_line(reason: &str) -> String {
    serde_json::json!({"event": "ended", "reason": reason}).to_string()
}

/// Whether the reading end of the pipe `out` writes to was closed.
pub(crate) fn reader_gone(out: &impl AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        out,
        rustix::event::PollFlags::OUT,
    )];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(_) => fds[0]
            .revents()
            .intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP),
        Err(_) => true,
    }
}

/// The most a line may hold before the watch is taken for broken.
const MAX_LINE: usize = 64 << 10;

/// A watch read from the keeper's pipe.
pub(crate) struct PipeWatch {
    pipe: OwnedFd,
    buf: Vec<u8>,
    ended: Option<String>,
}

impl PipeWatch {
    pub(crate) fn new(pipe: OwnedFd) -> PipeWatch {
        PipeWatch {
            pipe,
            buf: Vec::new(),
            ended: None,
        }
    }

    /// The first whole line in the buffer, taken out.
    fn line(&mut self) -> Option<Next> {
        let end = self.buf.iter().position(|b| *b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        let line = &line[..end];
        if let Ok(e) = serde_json::from_slice::<WatchEvent>(line) {
            return Some(Next::Event(e));
        }
        let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
        let reason = match v.get("event").and_then(|e| e.as_str()) {
            Some("ended") => v
                .get("reason")
                .and_then(|r| r.as_str())
                .unwrap_or("the watch ended")
                .to_string(),
            _ => format!(
                "the keeper sent a line that is not an event: {}",
                String::from_utf8_lossy(line)
            ),
        };
        self.ended = Some(reason.clone());
        Some(Next::Ended(reason))
    }
}

impl WatchSource for PipeWatch {
    fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(why) = &self.ended {
                return Next::Ended(why.clone());
            }
            if let Some(n) = self.line() {
                return n;
            }
            if self.buf.len() > MAX_LINE {
                self.ended = Some("the keeper sent a line past its bound".into());
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fds = [rustix::event::PollFd::new(
                &self.pipe,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::time::Timespec::try_from(left).unwrap_or(rustix::time::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) if left.is_zero() => return Next::Quiet,
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => {
                    self.ended = Some(format!("the watch's pipe: {e}"));
                    continue;
                }
            }
            let mut chunk = [0u8; 16 << 10];
            match rustix::io::read(&self.pipe, &mut chunk) {
                Ok(0) => {
                    self.ended = Some(
                        "the sandbox's keeper is gone (the sandbox was disposed of, or expired)"
                            .into(),
                    )
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(e) => self.ended = Some(format!("the watch's pipe: {e}")),
            }
        }
    }
}
