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
    /// Set when the exec's container is gone: the relays then end.
    pub(crate) relay_done: Arc<AtomicBool>,
}

/// The read end of an output pipe whose write end runsc holds, read
/// without blocking: it ends at the pipe's end, or once the exec's
/// container is gone (`done`) and what was written is read. Everything
/// the container wrote is in the pipe by then: gVisor writes to a host
/// file descriptor synchronously, and the container was deleted.
pub(crate) struct Relayed {
    pub(crate) file: std::fs::File,
    pub(crate) done: Arc<AtomicBool>,
}

impl Relayed {
    pub(crate) fn pipe(done: &Arc<AtomicBool>) -> Result<(Relayed, std::os::fd::OwnedFd), String> {
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
            let done = self.done.load(Ordering::SeqCst);
            match self.file.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if done {
                        return Ok(0);
                    }
                    std::thread::sleep(Duration::from_millis(5));
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

impl Running {
    /// Waits for the container to end, holding the wall clock and the CPU
    /// bound from the host; then removes what the exec made.
    pub(crate) fn wait(mut self) -> Result<ExitStatus, SandboxError> {
        let ended = loop {
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
            std::thread::sleep(Duration::from_millis(10));
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
        // sandbox gone.
        let ended_under = match &self.held {
            Held::Pod(pod) => status.code() == Some(128) || !pod.alive(),
            Held::Own(_) => false,
        };
        let oom = memory.oom_kills().unwrap_or(0) > self.kills_at_start
            || ((status.code() == Some(137) || ended_under)
                && memory.refusals() > self.refusals_at_start);
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
                    // runsc never said the helper's pid: the pod is
                    // beyond reach of this exec's kill, so it goes.
                    if let Held::Pod(p) = &self.held {
                        p.dead.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.clean();
    }

    pub(crate) fn clean(&self) {
        if let Target::Container = self.target {
            let _ = crate::runsc::delete(&self.bin, &self.cid);
            crate::runsc::remove_cgroups(&self.cid);
        }
        let _ = std::fs::remove_dir_all(&self.exec_dir);
        self.relay_done.store(true, Ordering::SeqCst);
    }
}
