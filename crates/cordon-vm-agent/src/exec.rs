//! Execs: each runs in the warm sandbox with threads of its own — one that
//! starts it and waits, one per output stream, one feeding its stdin — so
//! they run concurrently and none holds up the channel's reader.
//!
//! Frame order per exec: `Output`s, then exactly one `Exited` or
//! `ExecFailed`, nothing after it (the output pumps send under the exec's
//! gate, which the waiter closes before the last frame).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_linux::{Bound, Bounds, Cancel, ExecStdio, Outcome, Termination, WarmExec, WarmSandbox};
use cordon_vm_proto::{Msg, Status, Stream, MAX_DATA};

use crate::console::say;
use crate::feed::{Feed, Refused};
use crate::out::{clip, Out};

/// How long an ended exec's output may still drain before `Exited` goes.
const DRAIN: Duration = Duration::from_secs(2);

/// An `Exec` frame's fields.
pub(crate) struct Request {
    pub id: u64,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// A `cordon_linux::Bounds`, still to be read.
    pub bounds: serde_json::Value,
    pub max_output_bytes: u64,
}

struct Slot {
    stdin: Feed,
    /// Set once the exec started.
    cancel: Option<Cancel>,
    /// `Kill` came (maybe before the exec started).
    killed: bool,
}

type Slots = Arc<Mutex<HashMap<u64, Slot>>>;

/// The running execs by the host's ids.
#[derive(Default)]
pub(crate) struct Execs {
    slots: Slots,
}

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, HashMap<u64, Slot>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

impl Execs {
    /// Starts `req`; its frames follow from its threads.
    pub(crate) fn start(&self, out: Arc<Out>, warm: Arc<WarmSandbox>, req: Request) {
        let Request {
            id,
            argv,
            env,
            bounds,
            max_output_bytes,
        } = req;
        let fail = |error: String| {
            out.send(
                &Msg::ExecFailed {
                    id,
                    error: clip(&error),
                },
                &[],
            );
        };
        if lock(&self.slots).contains_key(&id) {
            return fail(format!("exec {id} is already running"));
        }
        let bounds: Bounds = match serde_json::from_value(bounds) {
            Ok(b) => b,
            Err(e) => return fail(format!("the exec's bounds: {e}")),
        };
        if argv.is_empty() {
            return fail("the command is empty".into());
        }
        let pipes = (|| Ok::<_, std::io::Error>((pipe()?, pipe()?, pipe()?)))();
        let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = match pipes {
            Ok(p) => p,
            Err(e) => return fail(format!("making pipes: {e}")),
        };
        let stdin = Feed::spawn(std::fs::File::from(in_w), |_| {});
        lock(&self.slots).insert(
            id,
            Slot {
                stdin,
                cancel: None,
                killed: false,
            },
        );
        let slots = self.slots.clone();
        std::thread::spawn(move || {
            let exec = WarmExec { argv, env, bounds };
            let stdio = ExecStdio {
                stdin: in_r,
                stdout: out_w,
                stderr: err_w,
            };
            let running = match warm.exec(&exec, stdio) {
                Ok(r) => r,
                Err(e) => {
                    lock(&slots).remove(&id);
                    out.send(
                        &Msg::ExecFailed {
                            id,
                            error: clip(&e.to_string()),
                        },
                        &[],
                    );
                    return;
                }
            };
            if let Some(slot) = lock(&slots).get_mut(&id) {
                let cancel = running.canceller();
                if slot.killed {
                    cancel.cancel();
                }
                slot.cancel = Some(cancel);
            }
            let gate = Arc::new(Mutex::new(false));
            let (done_tx, done_rx) = channel();
            for (fd, stream) in [(out_r, Stream::Stdout), (err_r, Stream::Stderr)] {
                let (out, gate, done) = (out.clone(), gate.clone(), done_tx.clone());
                std::thread::spawn(move || {
                    pump(fd, id, stream, max_output_bytes, &out, &gate);
                    let _ = done.send(());
                });
            }
            drop(done_tx);
            let ended = running.wait();
            drain(&done_rx);
            // INVARIANT: nothing for `id` goes out after this frame; the
            // id is free again before the host can see it.
            let mut closed = gate.lock().unwrap_or_else(|p| p.into_inner());
            *closed = true;
            lock(&slots).remove(&id);
            let last = match ended {
                Ok(outcome) => Msg::Exited {
                    id,
                    status: status_of(&outcome),
                },
                Err(e) => Msg::ExecFailed {
                    id,
                    error: clip(&e.to_string()),
                },
            };
            out.send(&last, &[]);
        });
    }

    pub(crate) fn stdin(&self, id: u64, data: Vec<u8>) {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(&id) else {
            return;
        };
        match slot.stdin.push(data) {
            Ok(()) | Err(Refused::Closed) => {}
            Err(Refused::Full) => {
                say!("exec {id}: its stdin is not read; more than the queue holds arrived, so its stdin is cut");
                slot.stdin.close();
            }
        }
    }

    pub(crate) fn stdin_end(&self, id: u64) {
        if let Some(slot) = lock(&self.slots).get_mut(&id) {
            slot.stdin.close();
        }
    }

    pub(crate) fn kill(&self, id: u64) {
        if let Some(slot) = lock(&self.slots).get_mut(&id) {
            slot.killed = true;
            if let Some(c) = &slot.cancel {
                c.cancel();
            }
        }
    }

    pub(crate) fn kill_all(&self) {
        for slot in lock(&self.slots).values_mut() {
            slot.killed = true;
            slot.stdin.close();
            if let Some(c) = &slot.cancel {
                c.cancel();
            }
        }
    }
}

/// Waits for both pumps, at most [`DRAIN`].
fn drain(done: &std::sync::mpsc::Receiver<()>) {
    let deadline = Instant::now() + DRAIN;
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match done.recv_timeout(left) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Reads one output stream to its end, sending at most `max + 1` bytes of
/// it (the one past the cap tells the host it was cut) and draining the
/// rest, so the command never blocks on a full pipe.
fn pump(fd: OwnedFd, id: u64, stream: Stream, max: u64, out: &Out, gate: &Mutex<bool>) {
    let mut f = std::fs::File::from(fd);
    let mut buf = vec![0u8; MAX_DATA as usize];
    let cap = max.saturating_add(1);
    let mut sent: u64 = 0;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if sent >= cap {
            continue;
        }
        let take = usize::try_from((cap - sent).min(n as u64)).unwrap_or(n);
        let closed = gate.lock().unwrap_or_else(|p| p.into_inner());
        if !*closed {
            out.send(&Msg::Output { id, stream }, &buf[..take]);
        }
        sent += take as u64;
    }
}

/// How an exec ended, as the host reports it (the local backend's
/// `status_of`).
pub(crate) fn status_of(outcome: &Outcome) -> Status {
    let bound = |b: &str| Status::Bound {
        bound: b.to_string(),
    };
    match outcome.killed_by {
        Some(Bound::Wall) => Status::TimedOut,
        Some(Bound::Memory) => bound("max_memory"),
        Some(Bound::Cpu) => bound("max_cpu_seconds"),
        Some(Bound::Processes) => bound("max_processes"),
        None => match outcome.termination {
            Termination::Exited(code) => Status::Code { code },
            Termination::Signaled(signal) => Status::Signal { signal },
        },
    }
}
