//! An exec in flight: its container (the first exec) or its helper in the pod, its relayed output and the bounds held over it until it ends.

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::{ExitStatus, SandboxError};

use crate::cgroup::MemoryBound;
use crate::pod::Pod;
use crate::runsc::runsc_error;
use cordon_backend_kit::exec::{exec_failed, ExecBounds};

/// One container in its sandbox's count of those not known gone (which
/// lets dispose skip asking runsc when it is zero). Taken off only by
/// [`Unsettled::settle`]: one forgotten stays counted, and dispose asks.
pub(crate) struct Unsettled(Option<Arc<std::sync::atomic::AtomicUsize>>);

impl Unsettled {
    /// Counted in `n` from now.
    pub(crate) fn counted(n: &Arc<std::sync::atomic::AtomicUsize>) -> Unsettled {
        n.fetch_add(1, Ordering::SeqCst);
        Unsettled(Some(n.clone()))
    }

    /// Not counted (no container of its own).
    pub(crate) fn none() -> Unsettled {
        Unsettled(None)
    }

    /// The container is gone (or was never made).
    pub(crate) fn settle(&mut self) {
        if let Some(n) = self.0.take() {
            n.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// What an exec runs as.
pub(crate) enum Target {
    /// A container of its own (`runsc run`), `cid`.
    Container,
    /// The helper in the pod (`runsc exec`, `crate::podexec`), whose pid
    /// in the pod runsc writes to `pid_file`.
    PodExec { pod: String, pid_file: PathBuf },
}

/// One `runsc run` or `runsc exec` under way.
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) cid: String,
    pub(crate) target: Target,
    /// Its state file in runsc's root, as seen while it ran.
    pub(crate) state: crate::stateroot::Seen,
    /// This exec's place in the sandbox's count of containers not known
    /// gone.
    pub(crate) unsettled: Unsettled,
    pub(crate) exec_dir: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) bounds: ExecBounds,
    /// The runsc sandbox's CPU time, kill and refusal counts when the exec
    /// started: the exec is charged the growth.
    pub(crate) cpu_at_start: u64,
    pub(crate) kills_at_start: u64,
    pub(crate) refusals_at_start: u64,
    pub(crate) held: Held,
    /// Ended when the exec's container is gone: the relays then end.
    pub(crate) relay_done: Arc<RelayEnd>,
}

/// The end of an exec's relays: set once its container is gone (or its
/// `runsc exec` has ended), which wakes every relay at once (the write end
/// of a pipe they poll is closed).
pub(crate) struct RelayEnd {
    done: AtomicBool,
    wake: Option<std::os::fd::OwnedFd>,
    wake_w: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
}

impl RelayEnd {
    /// Without its pipe (none could be made), a relay looks at `done`
    /// every [`STEP`].
    pub(crate) fn new() -> Arc<RelayEnd> {
        let (wake, wake_w) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok((r, w)) => (Some(r), Some(w)),
            Err(_) => (None, None),
        };
        Arc::new(RelayEnd {
            done: AtomicBool::new(false),
            wake,
            wake_w: std::sync::Mutex::new(wake_w),
        })
    }

    pub(crate) fn end(&self) {
        self.done.store(true, Ordering::SeqCst);
        drop(self.wake_w.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

/// The read end of an output pipe whose write end runsc holds, read
/// without blocking: it ends at the pipe's end, or once the exec's
/// container is gone (`done`) and what was written is read. Everything
/// the container wrote is in the pipe by then: gVisor writes to a host
/// file descriptor synchronously, and the container was deleted.
pub(crate) struct Relayed {
    pub(crate) file: std::fs::File,
    pub(crate) done: Arc<RelayEnd>,
}

impl Relayed {
    pub(crate) fn pipe(done: &Arc<RelayEnd>) -> Result<(Relayed, std::os::fd::OwnedFd), String> {
        let (r, w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
        rustix::fs::fcntl_setfl(&r, rustix::fs::OFlags::NONBLOCK).map_err(|e| e.to_string())?;
        Ok((
            Relayed {
                file: std::fs::File::from(r),
                done: done.clone(),
            },
            w,
        ))
    }
}

impl std::io::Read for Relayed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            // Read `done` before trying: a read that finds nothing after
            // it was set has drained the pipe.
            let done = self.done.is_done();
            match self.file.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if done {
                        return Ok(0);
                    }
                    // Woken by what comes, or by the end.
                    let mut fds = vec![rustix::event::PollFd::new(
                        &self.file,
                        rustix::event::PollFlags::IN,
                    )];
                    if let Some(w) = &self.done.wake {
                        fds.push(rustix::event::PollFd::new(w, rustix::event::PollFlags::IN));
                    }
                    poll_within(&mut fds, STEP);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// Where an exec's memory bound and CPU time are held.
pub(crate) enum Held {
    /// A runsc sandbox of its own, under a memory cgroup of its own.
    Own(MemoryBound),
    /// The sandbox's pod (shared with the execs running beside it).
    Pod(Arc<Pod>),
}

impl Held {
    pub(crate) fn memory(&self) -> &MemoryBound {
        match self {
            Held::Own(m) => m,
            Held::Pod(p) => &p.memory,
        }
    }

    /// The cgroup (by name) whose CPU time the exec is charged.
    pub(crate) fn cgroup<'a>(&'a self, cid: &'a str) -> &'a str {
        match self {
            Held::Own(_) => cid,
            Held::Pod(p) => &p.id,
        }
    }
}

/// How often an exec's bounds are looked at while it runs, and a relay's
/// end: a wait is woken at once by what it waits for, else after this.
const STEP: Duration = Duration::from_millis(10);

/// Sleeps until `fd` is readable (or hung up), at most `timeout`.
fn readable_within(fd: &impl std::os::fd::AsFd, timeout: Duration) {
    poll_within(
        &mut [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)],
        timeout,
    );
}

/// Sleeps until one of `fds` is ready, at most `timeout`.
fn poll_within(fds: &mut [rustix::event::PollFd<'_>], timeout: Duration) {
    match rustix::event::Timespec::try_from(timeout) {
        Ok(ts) => {
            let _ = rustix::event::poll(fds, Some(&ts));
        }
        Err(_) => std::thread::sleep(timeout),
    }
}

impl Running {
    /// Waits for the container to end, holding the wall clock and the CPU
    /// bound from the host; then removes what the exec made. Woken the
    /// moment runsc exits (its pidfd), else every [`STEP`].
    pub(crate) fn wait(mut self) -> Result<ExitStatus, SandboxError> {
        // Not reaped before `try_wait` below: the pid is still runsc's.
        let pidfd = rustix::process::Pid::from_raw(self.child.id() as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        let ended = loop {
            if let Target::Container = self.target {
                self.state.look(&self.cid);
            }
            match self.child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) => {}
                Err(e) => break Err(exec_failed(format!("waiting for runsc: {e}"))),
            }
            let cpu = crate::runsc::cpu_nanos(self.held.cgroup(&self.cid))
                .map(|n| n.saturating_sub(self.cpu_at_start));
            if let Some(end) = self.bounds.over(cpu, self.held.cgroup(&self.cid)) {
                self.stop();
                return end;
            }
            match &pidfd {
                Some(fd) => readable_within(fd, STEP),
                None => std::thread::sleep(STEP),
            }
        };
        let status = match ended {
            Ok(s) => s,
            Err(e) => {
                self.stop();
                return Err(e);
            }
        };
        // The bound killed something, or refused memory and gVisor then
        // killed the workload itself (`SIGKILL`'s 137).
        let memory = self.held.memory();
        // An exec whose runsc sandbox ended under it comes back as runsc's
        // own failure (128: its `Wait` lost the sandbox), or finds the
        // sandbox gone (looked at only when memory was refused).
        let ended_under = || match &self.held {
            Held::Pod(pod) => status.code() == Some(128) || !pod.alive(),
            Held::Own(_) => false,
        };
        let oom = memory.oom_kills().unwrap_or(0) > self.kills_at_start
            || (memory.refusals() > self.refusals_at_start
                && (status.code() == Some(137) || ended_under()));
        if let (true, Held::Pod(pod)) = (oom, &self.held) {
            // The kill at the bound ended the whole runsc sandbox.
            pod.dead.store(true, Ordering::SeqCst);
        }
        let error = runsc_error(&self.log);
        self.clean();
        match status.code() {
            _ if oom => Ok(ExitStatus::Bound {
                bound: "max_memory",
            }),
            Some(128) if error.is_some() => {
                Err(exec_failed(format!("runsc: {}", error.unwrap_or_default())))
            }
            Some(c) => Ok(ExitStatus::Code(c)),
            None => Ok(ExitStatus::Signal(
                std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(9),
            )),
        }
    }

    /// Kills the exec (its container, or its helper and with it its
    /// namespace) and runsc, then cleans up.
    pub(crate) fn stop(&mut self) {
        match &self.target {
            Target::Container => crate::runsc::kill(&self.bin, &self.cid),
            Target::PodExec { pod, pid_file } => {
                let child = &mut self.child;
                let mut running = || matches!(child.try_wait(), Ok(None));
                let killed = crate::podexec::kill(
                    &self.bin,
                    pod,
                    pid_file,
                    crate::podexec::PID_PATIENCE,
                    &mut running,
                );
                if !killed && running() {
                    // runsc never said the helper's pid, or would not
                    // kill it: the exec is beyond reach of its own kill,
                    // so the whole pod goes now (every exec in it with
                    // it), not at the next exec — nothing of a killed
                    // exec may go on running.
                    if let Held::Pod(p) = &self.held {
                        let _ = p.stop(&self.bin);
                    }
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.clean();
    }

    pub(crate) fn clean(&mut self) {
        if let Target::Container = self.target {
            // `runsc run` deletes its container as it ends; ask runsc only
            // when its state root does not say so.
            let gone =
                self.state.gone(&self.cid) || crate::runsc::delete(&self.bin, &self.cid).is_ok();
            if gone {
                self.unsettled.settle();
            }
            crate::runsc::remove_cgroups(&self.cid);
        }
        let _ = std::fs::remove_dir_all(&self.exec_dir);
        self.relay_done.end();
    }
}
