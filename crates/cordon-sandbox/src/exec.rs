//! Exec as a handle: start a command, write its stdin as a stream, take its
//! output as events while it runs, then wait for it — or kill it.
//!
//! [`crate::Sandbox::start_exec`] is what a backend implements;
//! [`crate::Sandbox::exec`] (all output at the end) and
//! [`crate::Sandbox::exec_streaming`] (output handed to a callback as it
//! arrives) are default methods over it.
//!
//! A handle that is dropped before its exec ended kills the exec and
//! everything it started: a client that goes away takes its work with it.
//! A backend that drives its command through pipes builds its handle with
//! [`ExecHandle::from_pipes`], which holds the output caps for it.

use std::fmt;
use std::io::{Read, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

use crate::sandbox_error::SandboxError;

/// Which output stream bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// Killed when it reached a resource bound other than the wall clock
    /// (`max_memory`, `max_cpu_seconds`, `max_processes`).
    Bound {
        bound: &'static str,
    },
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "killed by signal {s}"),
            ExitStatus::TimedOut => f.write_str("timed out"),
            ExitStatus::Bound { bound } => write!(f, "killed at the `{bound}` bound"),
        }
    }
}

/// What a command produced, cut at the request's cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// True when output was cut at the cap.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// A terminal's size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl Default for TtySize {
    fn default() -> TtySize {
        TtySize { rows: 24, cols: 80 }
    }
}

/// How the caller is attached to an exec, beyond the request's own bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attach {
    /// The exec's stdin is a stream the caller writes through
    /// [`ExecHandle::take_stdin`] and closes for end-of-file. Without it the
    /// exec reads [`crate::ExecRequest::stdin`] and then end-of-file.
    pub stdin_stream: bool,
    /// The exec runs on a pseudo-terminal of the sandbox's own (never the
    /// host's terminal) of this size: stdin is written to it, everything
    /// it shows arrives as [`Stream::Stdout`], and
    /// [`ExecHandle::resize`] changes its size. A backend that cannot give
    /// one refuses the exec.
    pub tty: Option<TtySize>,
}

impl Attach {
    /// Stdin is a stream written through the handle.
    pub fn streamed_stdin() -> Attach {
        Attach {
            stdin_stream: true,
            tty: None,
        }
    }

    /// A terminal of `size`, its input streamed through the handle.
    pub fn terminal(size: TtySize) -> Attach {
        Attach {
            stdin_stream: true,
            tty: Some(size),
        }
    }
}

/// Resizes an exec's terminal.
pub type Resizer = Arc<dyn Fn(TtySize) -> std::io::Result<()> + Send + Sync>;

/// What an exec reports while it runs, in order; [`ExecEvent::Exited`] is
/// always last.
#[derive(Debug)]
pub enum ExecEvent {
    /// Bytes the command wrote (only what is within the cap).
    Output(Stream, Vec<u8>),
    /// How it ended, or why it could not be run to the end.
    Exited(Result<ExecEnd, SandboxError>),
}

/// How an exec ended, with what its output streams lost to the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecEnd {
    pub status: ExitStatus,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// Stops an exec from anywhere (another thread, a signal handler's
/// watcher, a server noticing its client left). Cloned freely; killing an
/// exec that already ended does nothing.
#[derive(Clone)]
pub struct Killer(Arc<dyn Fn() + Send + Sync>);

impl Killer {
    pub fn new(kill: impl Fn() + Send + Sync + 'static) -> Killer {
        Killer(Arc::new(kill))
    }

    /// A killer for an exec that cannot be stopped early (it has ended).
    pub fn none() -> Killer {
        Killer::new(|| {})
    }

    pub fn kill(&self) {
        (self.0)()
    }
}

impl fmt::Debug for Killer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Killer")
    }
}

/// The stdin stream of an exec: dropping it (or [`ExecStdin::close`]) is
/// end-of-file for the command.
pub struct ExecStdin(Box<dyn Write + Send>);

impl ExecStdin {
    pub fn new(w: impl Write + Send + 'static) -> ExecStdin {
        ExecStdin(Box::new(w))
    }

    pub fn close(self) {}
}

impl Write for ExecStdin {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl fmt::Debug for ExecStdin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExecStdin")
    }
}

/// A started exec.
pub struct ExecHandle {
    stdin: Option<ExecStdin>,
    events: Receiver<ExecEvent>,
    killer: Killer,
    resizer: Option<Resizer>,
    ended: bool,
}

impl fmt::Debug for ExecHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecHandle")
            .field("ended", &self.ended)
            .field("tty", &self.resizer.is_some())
            .finish()
    }
}

/// How many events wait for a caller that is behind before the sender
/// blocks: output is held back (and with it, through the pipes, the
/// command), never piled up in memory. 64 chunks of at most 8 KiB.
pub const EVENTS_IN_FLIGHT: usize = 64;

/// The sending side a backend feeds a handle through. Bounded
/// ([`EVENTS_IN_FLIGHT`]): a send waits while the caller is behind.
#[derive(Debug, Clone)]
pub struct EventSender(SyncSender<ExecEvent>);

impl EventSender {
    /// Hands `bytes` to the caller, waiting while it is
    /// [`EVENTS_IN_FLIGHT`] events behind; false once nobody listens any
    /// more.
    pub fn output(&self, stream: Stream, bytes: &[u8]) -> bool {
        self.0
            .send(ExecEvent::Output(stream, bytes.to_vec()))
            .is_ok()
    }

    /// The last event.
    pub fn exited(self, end: Result<ExecEnd, SandboxError>) {
        let _ = self.0.send(ExecEvent::Exited(end));
    }
}

impl ExecHandle {
    /// A handle fed through the returned sender; `killer` stops the exec.
    pub fn channel(stdin: Option<ExecStdin>, killer: Killer) -> (ExecHandle, EventSender) {
        let (tx, rx) = mpsc::sync_channel(EVENTS_IN_FLIGHT);
        (
            ExecHandle {
                stdin,
                events: rx,
                killer,
                resizer: None,
                ended: false,
            },
            EventSender(tx),
        )
    }

    /// A handle for an exec that already ran to its end (a backend that can
    /// only run commands whole, or a test double).
    pub fn finished(result: Result<ExecOutput, SandboxError>) -> ExecHandle {
        let (handle, tx) = ExecHandle::channel(None, Killer::none());
        match result {
            Ok(out) => {
                if !out.stdout.is_empty() {
                    tx.output(Stream::Stdout, &out.stdout);
                }
                if !out.stderr.is_empty() {
                    tx.output(Stream::Stderr, &out.stderr);
                }
                tx.exited(Ok(ExecEnd {
                    status: out.status,
                    stdout_truncated: out.stdout_truncated,
                    stderr_truncated: out.stderr_truncated,
                }));
            }
            Err(e) => tx.exited(Err(e)),
        }
        handle
    }

    /// A handle over a command driven through pipes: `stdout` and `stderr`
    /// are read on threads of their own, each cut at `max_output_bytes`
    /// (the rest is drained so the command never blocks on a full pipe);
    /// `stdin` (the write end of the command's stdin) is the stream the
    /// caller writes, or, when `bytes` is given, is fed those bytes and
    /// closed; `wait` blocks until the command ended; `killer` stops it.
    pub fn from_pipes(
        stdin: StdinFeed,
        stdout: impl Read + Send + 'static,
        stderr: impl Read + Send + 'static,
        max_output_bytes: u64,
        wait: impl FnOnce() -> Result<ExitStatus, SandboxError> + Send + 'static,
        killer: Killer,
    ) -> ExecHandle {
        let streamed = match stdin {
            StdinFeed::Stream(w) => Some(ExecStdin(w)),
            StdinFeed::Bytes(w, bytes) => {
                std::thread::spawn(move || {
                    let mut w = w;
                    let _ = w.write_all(&bytes);
                });
                None
            }
            StdinFeed::None => None,
        };
        let (handle, tx) = ExecHandle::channel(streamed, killer);
        std::thread::spawn(move || {
            let out = {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    read_capped(stdout, max_output_bytes, Stream::Stdout, &tx)
                })
            };
            let err = {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    read_capped(stderr, max_output_bytes, Stream::Stderr, &tx)
                })
            };
            let status = wait();
            let stdout_truncated = out.join().unwrap_or(false);
            let stderr_truncated = err.join().unwrap_or(false);
            tx.exited(status.map(|status| ExecEnd {
                status,
                stdout_truncated,
                stderr_truncated,
            }));
        });
        handle
    }

    /// The handle of an exec on a terminal, resized with `resizer`.
    pub fn with_resizer(mut self, resizer: Resizer) -> ExecHandle {
        self.resizer = Some(resizer);
        self
    }

    /// Resizes the exec's terminal (the kernel tells its foreground
    /// process group with `SIGWINCH`); refused for an exec without one.
    pub fn resize(&self, size: TtySize) -> Result<(), SandboxError> {
        match &self.resizer {
            Some(r) => r(size).map_err(|e| SandboxError::Failed {
                operation: "resize",
                reason: e.to_string(),
            }),
            None => Err(SandboxError::Failed {
                operation: "resize",
                reason: "this exec has no terminal; start it with a tty to resize it".into(),
            }),
        }
    }

    /// A resizer that outlives this handle (`None` without a terminal).
    pub fn resizer(&self) -> Option<Resizer> {
        self.resizer.clone()
    }

    /// The stdin stream, once (only with [`Attach::stdin_stream`]).
    pub fn take_stdin(&mut self) -> Option<ExecStdin> {
        self.stdin.take()
    }

    /// A killer that outlives this handle.
    pub fn killer(&self) -> Killer {
        self.killer.clone()
    }

    /// Kills the exec and everything it started.
    pub fn kill(&self) {
        self.killer.kill()
    }

    /// The next event, blocking; `None` after [`ExecEvent::Exited`].
    pub fn next_event(&mut self) -> Option<ExecEvent> {
        if self.ended {
            return None;
        }
        let ev = match self.events.recv() {
            Ok(ev) => ev,
            Err(_) => ExecEvent::Exited(Err(SandboxError::Failed {
                operation: "exec",
                reason: "the backend stopped reporting on the exec without an exit status".into(),
            })),
        };
        if matches!(ev, ExecEvent::Exited(_)) {
            self.ended = true;
        }
        Some(ev)
    }

    /// Waits for the end, collecting the output.
    pub fn wait(self) -> Result<ExecOutput, SandboxError> {
        self.wait_streaming(&|_, _| {})
    }

    /// Waits for the end, handing output to `sink` as it arrives and
    /// collecting it too.
    pub fn wait_streaming(
        mut self,
        sink: &(dyn Fn(Stream, &[u8]) + Sync),
    ) -> Result<ExecOutput, SandboxError> {
        // Streams the caller did not take are closed now: nothing will
        // write them, and the command must not wait for input forever.
        drop(self.stdin.take());
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(ev) = self.next_event() {
            match ev {
                ExecEvent::Output(stream, bytes) => {
                    sink(stream, &bytes);
                    match stream {
                        Stream::Stdout => stdout.extend_from_slice(&bytes),
                        Stream::Stderr => stderr.extend_from_slice(&bytes),
                    }
                }
                ExecEvent::Exited(end) => {
                    let end = end?;
                    return Ok(ExecOutput {
                        status: end.status,
                        stdout,
                        stderr,
                        stdout_truncated: end.stdout_truncated,
                        stderr_truncated: end.stderr_truncated,
                    });
                }
            }
        }
        Err(SandboxError::Failed {
            operation: "exec",
            reason: "the exec's events ended early".into(),
        })
    }
}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        if !self.ended {
            self.killer.kill();
        }
    }
}

/// How a piped command's stdin is fed (see [`ExecHandle::from_pipes`]).
pub enum StdinFeed {
    /// The caller writes it through the handle.
    Stream(Box<dyn Write + Send>),
    /// These bytes are written, then end-of-file.
    Bytes(Box<dyn Write + Send>, Vec<u8>),
    /// The command's stdin is already end-of-file (`/dev/null`).
    None,
}

/// Reads all of `r`, keeping (and handing over) at most `cap` bytes; the
/// rest is drained so the workload never blocks on a full pipe. Returns
/// whether anything was cut.
fn read_capped(mut r: impl Read, cap: u64, stream: Stream, tx: &EventSender) -> bool {
    let mut kept: u64 = 0;
    let mut cut = false;
    let mut chunk = [0u8; 8192];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let room = usize::try_from(cap.saturating_sub(kept)).unwrap_or(usize::MAX);
        let take = n.min(room);
        if take < n {
            cut = true;
        }
        if take > 0 {
            kept += take as u64;
            // A caller that is behind holds this back (and, through the
            // pipe, the command). Nobody listening any more: keep draining,
            // so the command is not stopped by a full pipe before its
            // killer reaches it.
            let _ = tx.output(stream, &chunk[..take]);
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_cap_is_cut_and_flagged() {
        let h = ExecHandle::from_pipes(
            StdinFeed::None,
            std::io::Cursor::new(vec![b'a'; 10_000]),
            std::io::Cursor::new(b"err".to_vec()),
            100,
            || Ok(ExitStatus::Code(0)),
            Killer::none(),
        );
        let out = h.wait().unwrap();
        assert_eq!(out.stdout.len(), 100);
        assert!(out.stdout_truncated);
        assert_eq!(out.stderr, b"err");
        assert!(!out.stderr_truncated);
    }

    #[test]
    fn a_dropped_unfinished_handle_kills_its_exec_and_a_finished_one_does_not() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let kills = Arc::new(AtomicUsize::new(0));
        let k = kills.clone();
        let (h, _tx) = ExecHandle::channel(
            None,
            Killer::new(move || {
                k.fetch_add(1, Ordering::SeqCst);
            }),
        );
        drop(h);
        assert_eq!(kills.load(Ordering::SeqCst), 1);

        let k = kills.clone();
        let (h, tx) = ExecHandle::channel(
            None,
            Killer::new(move || {
                k.fetch_add(1, Ordering::SeqCst);
            }),
        );
        tx.exited(Ok(ExecEnd {
            status: ExitStatus::Code(0),
            stdout_truncated: false,
            stderr_truncated: false,
        }));
        h.wait().unwrap();
        assert_eq!(
            kills.load(Ordering::SeqCst),
            1,
            "a finished exec is not killed"
        );
    }

    #[test]
    fn output_waits_for_a_caller_that_is_behind_instead_of_piling_up() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // A stream far longer than the bound (16 MiB) that counts what was
        // read from it.
        struct Endless(Arc<AtomicUsize>);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.load(Ordering::SeqCst) >= 16 << 20 {
                    return Ok(0);
                }
                self.0.fetch_add(buf.len(), Ordering::SeqCst);
                buf.fill(b'y');
                Ok(buf.len())
            }
        }
        let read = Arc::new(AtomicUsize::new(0));
        let (_never, hold) = mpsc::channel::<()>();
        let h = ExecHandle::from_pipes(
            StdinFeed::None,
            Endless(read.clone()),
            std::io::empty(),
            u64::MAX,
            move || {
                let _ = hold.recv();
                Ok(ExitStatus::Code(0))
            },
            Killer::none(),
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        // Nobody took an event: the reader stopped after the events in
        // flight (and the chunk it holds), not after gigabytes.
        let bound = (EVENTS_IN_FLIGHT + 2) * 8192;
        assert!(
            read.load(Ordering::SeqCst) <= bound,
            "{} bytes read for a caller that read nothing",
            read.load(Ordering::SeqCst)
        );
        drop(h);
    }

    #[test]
    fn a_backend_that_stops_reporting_is_an_error_not_a_success() {
        let (h, tx) = ExecHandle::channel(None, Killer::none());
        drop(tx);
        assert!(h.wait().is_err());
    }
}
