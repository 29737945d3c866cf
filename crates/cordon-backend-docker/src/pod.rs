//! [`Pod`]: a sandbox's warm container, and each exec after the first as
//! one `docker exec` of cordon's helper into it
//! ([`cordon_backend_kit::podexec`]).
//!
//! A sandbox's first exec is a container of its own (a one-shot run never
//! pays for a warm one). At its second, the sandbox starts its pod
//! `ID-pod`: the exec's root, binds, network and bounds, whose process is
//! the helper reaping orphans, and every later exec is `docker exec` of
//! the helper as the workload's uid. The helper makes a user namespace
//! mapping only that uid (no capability on the host's side of it), and
//! in it the exec's own pid, mount and IPC namespaces (a network
//! namespace too where the sandbox shares none), a `/proc` of its own with
//! the masks Docker would have set, and runs the command under the whole
//! syscall table: exec B cannot see, signal or read exec A, and nothing an
//! exec starts outlives it (its PID 1 dies with the helper, and the kernel
//! kills its namespace with its PID 1).
//!
//! What the pod is given beyond an exec's container, and why:
//!
//! - Docker's `/proc` masks are lifted on the pod's own `/proc` (the
//!   kernel refuses a new `/proc` in a user namespace while another is
//!   partly covered); every exec's `/proc` has them again (the helper
//!   masks and makes read-only what Docker does). Nothing in the pod's
//!   own namespaces is root or holds a capability.
//! - its seccomp profile allows `unshare` and `mount` (the helper's; every
//!   command runs under the whole table, which the helper installs).
//!
//! Bounds: the memory bound and the process count are the pod's cgroup's,
//! so concurrent execs share them (stricter, never looser), and each
//! exec's process count is its user namespace's own `RLIMIT_NPROC`. An
//! exec's CPU time is the pod's growth while it runs (concurrent execs
//! count each other's). A kill at the memory bound is reported as that
//! bound when the pod's cgroup counted an OOM kill during the exec.
//!
//! Where the helper cannot work (a kernel without unprivileged user
//! namespaces, a security module refusing its mounts), the pod's probe
//! fails, the pod is removed, and every exec stays a container of its
//! own: as confined, only slower.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig};
use cordon_sandbox::{ExitStatus, SandboxError};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::engine::{call, Engine};
use cordon_backend_kit::exec::{exec_failed, ExecBounds};

/// The helper's file in the sandbox's directory, bound read-only into the
/// pod at [`cordon_backend_kit::podexec::PATH`].
pub(crate) fn install(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("podexec");
    std::fs::write(&path, cordon_backend_kit::podexec::HELPER)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)))
        .map_err(|e| format!("cannot write the exec helper `{}`: {e}", path.display()))?;
    Ok(path)
}

/// A running pod.
pub(crate) struct Pod {
    pub(crate) name: String,
    /// Its full id, which its cgroup's path holds.
    id: String,
    /// Its cgroup's CPU time and OOM kill count, as the host reads them.
    cpu_file: Option<PathBuf>,
    oom_file: Option<PathBuf>,
    /// Set when an exec saw the pod end: the next exec starts another.
    dead: AtomicBool,
}

impl Pod {
    /// Creates and starts the pod `name` from `body`.
    pub(crate) fn start(
        engine: &Engine,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<Pod, String> {
        crate::containers::create(engine, name, body, true)?;
        let d = engine.docker();
        let n = name.to_string();
        let (pid, id) = call(async move {
            d.inspect_container(
                &n,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map(|c| {
                (
                    c.state.and_then(|s| s.pid).unwrap_or(0),
                    c.id.unwrap_or_default(),
                )
            })
            .map_err(|e| format!("inspecting the pod: {e}"))
        })??;
        if pid <= 0 {
            return Err("the pod ended as it started".into());
        }
        Ok(Pod {
            name: name.to_string(),
            cpu_file: crate::engine::cpu_file_of(pid, &id),
            oom_file: oom_file_of(pid, &id),
            id,
            dead: AtomicBool::new(false),
        })
    }

    /// Whether the pod can take another exec.
    pub(crate) fn usable(&self) -> bool {
        !self.dead.load(Ordering::SeqCst)
    }

    /// Marks the pod ended: the next exec starts another.
    pub(crate) fn end(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn cpu_nanos(&self) -> Option<u64> {
        self.cpu_file
            .as_deref()
            .and_then(crate::engine::cpu_nanos_in)
    }

    fn oom_kills(&self) -> u64 {
        self.oom_file.as_deref().and_then(oom_kills_in).unwrap_or(0)
    }
}

/// The cgroup file that counts OOM kills in the container `id` whose
/// process is `pid` (v1 `memory.oom_control`, v2 `memory.events`).
fn oom_file_of(pid: i64, id: &str) -> Option<PathBuf> {
    crate::engine::cgroup_file_of(pid, id, ("memory", "memory.oom_control"), "memory.events")
}

fn oom_kills_in(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// One exec's helper under way in a pod.
pub(crate) struct PodExec {
    helper: Helper,
    done: Receiver<Result<i64, String>>,
}

/// The helper's host process, as far as the host could tell.
#[derive(Clone)]
enum Helper {
    /// Pinned: a kill reaches it.
    Pinned(std::sync::Arc<OwnedFd>),
    /// It ended before it could be pinned: nothing to kill.
    Ended,
    /// Could not be pinned, though it may run (`/proc` unreadable, a
    /// pidfd refused): a kill cannot reach it, and says so.
    Unreachable,
}

/// Creates and starts one `docker exec` of `config` in `pod`, forwarding
/// its streams into `out`; its end goes to the returned [`PodExec`] once
/// every byte is forwarded.
pub(crate) fn launch(
    engine: &Engine,
    pod: &Pod,
    config: ExecConfig,
    stdin_r: Option<OwnedFd>,
    (out_w, err_w): (OwnedFd, OwnedFd),
) -> Result<PodExec, String> {
    let d = engine.docker();
    let pod_id = pod.id.clone();
    let pod = pod.name.clone();
    let (done_tx, done) = std::sync::mpsc::sync_channel::<Result<i64, String>>(1);
    let pid = call(async move {
        let id = d
            .create_exec(&pod, config)
            .await
            .map_err(|e| format!("creating the exec in the pod: {e}"))?
            .id;
        let started = d
            .start_exec(
                &id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(|e| format!("starting the exec in the pod: {e}"))?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err("the engine started the exec detached".to_string());
        };
        let pid = helper_pid(&d, &id).await?;
        if let Some(r) = stdin_r {
            tokio::spawn(async move {
                let Ok(mut from) = tokio::net::unix::pipe::Receiver::from_owned_fd(r) else {
                    return;
                };
                let mut input = input;
                let _ = tokio::io::copy(&mut from, &mut input).await;
                let _ = input.shutdown().await;
            });
        }
        let w = d.clone();
        let wid = id.clone();
        tokio::spawn(async move {
            if let (Ok(mut out), Ok(mut err)) = (
                tokio::net::unix::pipe::Sender::from_owned_fd(out_w),
                tokio::net::unix::pipe::Sender::from_owned_fd(err_w),
            ) {
                while let Some(Ok(chunk)) = output.next().await {
                    let _ = match chunk {
                        bollard::container::LogOutput::StdErr { message } => {
                            err.write_all(&message).await
                        }
                        bollard::container::LogOutput::StdOut { message }
                        | bollard::container::LogOutput::Console { message } => {
                            out.write_all(&message).await
                        }
                        bollard::container::LogOutput::StdIn { .. } => Ok(()),
                    };
                }
            }
            let _ = done_tx.send(exit_of(&w, &wid).await);
        });
        Ok(pid)
    })??;
    Ok(PodExec {
        helper: pin(pid, &pod_id),
        done,
    })
}

/// The host pid of the started exec `id`'s helper (0: it ended before it
/// was seen). The engine may answer before the process runs; an exec
/// whose process it never names is refused (it could not be killed).
async fn helper_pid(d: &bollard::Docker, id: &str) -> Result<i64, String> {
    for _ in 0..2500 {
        let i = d
            .inspect_exec(id)
            .await
            .map_err(|e| format!("inspecting the exec: {e}"))?;
        match (i.running, i.pid, i.exit_code) {
            (Some(true), Some(pid), _) if pid > 0 => return Ok(pid),
            (Some(false), _, Some(_)) => return Ok(0),
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
    Err("the engine never said which process the exec is".into())
}

/// The exit code of the ended exec `id`: the engine may say the streams
/// ended a moment before it says the process did.
async fn exit_of(d: &bollard::Docker, id: &str) -> Result<i64, String> {
    for _ in 0..1000 {
        let i = d
            .inspect_exec(id)
            .await
            .map_err(|e| format!("inspecting the exec: {e}"))?;
        if i.running != Some(true) {
            return i
                .exit_code
                .ok_or_else(|| "the engine did not say how the exec ended".to_string());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err("the engine still says the exec runs after its streams ended".into())
}

/// The helper's host process `pid`, pinned. The pid is the engine's word
/// from a moment before; the process pinned is taken only if it is in the
/// pod's cgroup (`pod_id` in its path) while the pidfd shows it alive, so
/// a pid reused in between is at worst another process of the same
/// sandbox, never one outside it. Whatever cannot be told apart from a
/// running helper is [`Helper::Unreachable`], never "ended".
fn pin(pid: i64, pod_id: &str) -> Helper {
    use rustix::io::Errno;
    if pid == 0 {
        return Helper::Ended;
    }
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return Helper::Unreachable;
    };
    let fd = match rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Helper::Ended,
        Err(_) => return Helper::Unreachable,
    };
    let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Helper::Unreachable;
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        // Exited (its pidfd readable): nothing of it to kill.
        Ok(n) if n > 0 => Helper::Ended,
        // Alive, and another process than the exec's: the exec's ended.
        Ok(_) if !pod_id.is_empty() && !cgroup.contains(pod_id) => Helper::Ended,
        Ok(_) if !pod_id.is_empty() => Helper::Pinned(std::sync::Arc::new(fd)),
        _ => Helper::Unreachable,
    }
}

impl PodExec {
    /// The exit code, waiting at most `timeout` (the probe's wait).
    pub(crate) fn code_within(self, timeout: Duration) -> Result<i64, String> {
        match self.done.recv_timeout(timeout) {
            Ok(r) => r,
            Err(_) => {
                let _ = (self.killer())();
                Err(format!("it did not end within {}s", timeout.as_secs()))
            }
        }
    }

    /// A kill of the exec: its helper, whose namespace dies with it.
    /// Whether it was sent.
    pub(crate) fn killer(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let helper = self.helper.clone();
        move || match &helper {
            Helper::Pinned(fd) => {
                rustix::process::pidfd_send_signal(&**fd, rustix::process::Signal::KILL).is_ok()
            }
            Helper::Ended => true,
            Helper::Unreachable => false,
        }
    }

    /// Waits for the exec to end, holding the wall clock and the CPU bound
    /// (the pod's CPU time since it began) from the host; stops the whole
    /// pod when a bound's kill cannot reach the helper.
    pub(crate) fn wait(
        self,
        engine: &Engine,
        pod: &Pod,
        mut bounds: ExecBounds,
    ) -> Result<ExitStatus, SandboxError> {
        let cpu_at = pod.cpu_nanos();
        let ooms_at = pod.oom_kills();
        let kill = self.killer();
        let ended = loop {
            let cpu = match (pod.cpu_nanos(), cpu_at) {
                (Some(now), Some(at)) => Some(now.saturating_sub(at)),
                _ => None,
            };
            if let Some(end) = bounds.over(cpu, &pod.name) {
                if !kill() {
                    pod.dead.store(true, Ordering::SeqCst);
                    engine.kill(&pod.name);
                }
                // The helper's end closes the exec's streams; what it
                // reported is not waited for beyond a moment.
                let _ = self.done.recv_timeout(Duration::from_secs(2));
                return end;
            }
            match self.done.recv_timeout(crate::engine::POLL) {
                Ok(r) => break r,
                Err(RecvTimeoutError::Disconnected) => {
                    break Err("the engine's wait for the exec was lost".into())
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        };
        let oom = pod.oom_kills() > ooms_at;
        match ended {
            Ok(137) | Ok(-1) if oom => {
                pod.dead.store(!alive(engine, &pod.name), Ordering::SeqCst);
                Ok(ExitStatus::Bound {
                    bound: "max_memory",
                })
            }
            Ok(152) => Ok(ExitStatus::Bound {
                bound: "max_cpu_seconds",
            }),
            Ok(code) => Ok(ExitStatus::Code(i32::try_from(code).unwrap_or(-1))),
            Err(e) => {
                pod.dead.store(!alive(engine, &pod.name), Ordering::SeqCst);
                Err(exec_failed(e))
            }
        }
    }
}

/// Whether the container `name` is running.
fn alive(engine: &Engine, name: &str) -> bool {
    let d = engine.docker();
    let n = name.to_string();
    call(async move {
        d.inspect_container(
            &n,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| c.state?.running)
        .unwrap_or(false)
    })
    .unwrap_or(false)
}
