//! The owner's side: start the init, hold the bounds, collect the outcome.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

use super::cgroup::{Cgroup, CgroupManager, CgroupRoot};
use super::init::{
    self, ARG_BUILD, ARG_HANDOVER_FD, ARG_PLAN_FD, ARG_REPORT_FD, ARG_STAGE, INIT_BUILD,
    SETUP_FAILED,
};
use super::proto::{self, Control, Report};
use crate::outcome::{Bound, Outcome, Termination};
use crate::plan::{Plan, Rung};

/// How to start the init program: a binary that calls
/// [`crate::init_main`] when given these arguments (plus the launcher's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitProgram {
    pub path: PathBuf,
    /// Arguments before the launcher's, e.g. a hidden subcommand name.
    pub args: Vec<OsString>,
}

impl InitProgram {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        InitProgram {
            path: path.into(),
            args: Vec::new(),
        }
    }
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }
}

/// The workload's stdin, stdout and stderr. Pipes by default: the workload
/// never gets the caller's terminal.
#[derive(Debug)]
pub struct SandboxStdio {
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
}

impl SandboxStdio {
    /// stdin empty, stdout and stderr piped.
    pub fn piped() -> Self {
        SandboxStdio {
            stdin: Stdio::null(),
            stdout: Stdio::piped(),
            stderr: Stdio::piped(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("creating the sandbox cgroup: {0}")]
    Cgroup(io::Error),
    #[error("starting the init program `{path}`: {source}")]
    Spawn { path: PathBuf, source: io::Error },
    #[error("talking to the init program: {0}")]
    Pipe(io::Error),
    #[error("writing the user-namespace id maps: {0}")]
    IdMap(io::Error),
    #[error("sandbox setup failed at `{step}`: {error}")]
    Setup { step: String, error: String },
    #[error("the init program ended during setup ({0})")]
    InitDied(String),
    #[error("the init program did not answer within {0:?} ({1})")]
    Timeout(Duration, &'static str),
    #[error("waiting for the sandbox: {0}")]
    Wait(io::Error),
}

/// A started sandbox. Dropping it kills the whole tree and removes its cgroup.
#[derive(Debug)]
pub struct Running {
    child: Child,
    cgroup: Option<Cgroup>,
    reports: Receiver<Report>,
    cpu_limit: Duration,
    wall_limit: Duration,
    started: Instant,
    done: bool,
    cancel: crate::Cancel,
    /// The sandbox's proxy listener until the caller takes it.
    proxy_listener: Option<std::net::TcpListener>,
}

// Our launches clear close-on-exec on two pipe ends for the instant of
// spawn; serialising them keeps one sandbox's pipes out of another's init.
static SPAWN: Mutex<()> = Mutex::new(());
static SEQ: AtomicU64 = AtomicU64::new(0);

const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How often [`Running::wait`] checks the CPU and wall-clock bounds.
const BOUNDS_TICK: Duration = Duration::from_millis(10);

/// A pidfd of `child`, which must be the caller's own unreaped child (its
/// pid cannot then have been reused); `None` where this kernel has none.
pub(crate) fn pidfd_of(child: &Child) -> Option<std::os::fd::OwnedFd> {
    i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
}

/// Blocks until the process behind `pidfd` exits or `tick` passes (whichever
/// is first); sleeps for `tick` when there is no pidfd.
pub(crate) fn wait_exit(pidfd: Option<&std::os::fd::OwnedFd>, tick: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let Some(fd) = pidfd else {
        std::thread::sleep(tick);
        return;
    };
    let timeout = Timespec {
        tv_sec: i64::try_from(tick.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(tick.subsec_nanos()),
    };
    // An error (EINTR) only means the caller looks again sooner.
    let _ = poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&timeout));
}

pub(crate) fn recv_report(
    rx: &Receiver<Report>,
    child: &mut Child,
    what: &'static str,
) -> Result<Report, LaunchError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => return Ok(r),
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_err(LaunchError::Wait)?;
                return Err(LaunchError::InitDied(status.to_string()));
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(status) = child.try_wait().map_err(LaunchError::Wait)? {
                    // The last report may still be in the pipe.
                    if let Ok(r) = rx.recv_timeout(Duration::from_millis(500)) {
                        return Ok(r);
                    }
                    return Err(LaunchError::InitDied(status.to_string()));
                }
                if Instant::now() > deadline {
                    return Err(LaunchError::Timeout(SETUP_TIMEOUT, what));
                }
            }
        }
    }
}

fn write_id_maps(pid: u32, plan: &Plan) -> io::Result<()> {
    let ids = plan.ids();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    // INVARIANT: the host side of each map is `host_uid`/`host_gid`, never 0
    // (Plan validation refuses 0), and exactly one id is mapped.
    std::fs::write(proc.join("setgroups"), "deny")?;
    std::fs::write(
        proc.join("uid_map"),
        format!("{} {} 1\n", ids.uid, ids.host_uid),
    )?;
    std::fs::write(
        proc.join("gid_map"),
        format!("{} {} 1\n", ids.gid, ids.host_gid),
    )?;
    Ok(())
}

/// Starts `plan` under `init`. Returns once every layer is in place and the
/// workload is starting, or with the reason the sandbox could not be built
/// (then nothing of the workload ran).
///
/// The caller must have checked [`crate::Enforcer::available`];
/// `Enforcer::confine` on a [`crate::LinuxEnforcer`] does.
pub fn launch(
    plan: &Plan,
    init: &InitProgram,
    stdio: SandboxStdio,
) -> Result<Running, LaunchError> {
    let name = format!(
        "cordon-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    launch_named(plan, init, stdio, &name)
}

/// [`launch`] in a cgroup called `name` below the owner's own. A name of
/// the form `cordon-…-PID-N`, with `PID` the owner's, is found by
/// [`crate::orphaned_sandbox_cgroups`] once the owner is gone; any other
/// is reclaimed only from its directories ([`Running::cgroup_dirs`],
/// [`crate::reclaim_cgroups`]).
pub fn launch_named(
    plan: &Plan,
    init: &InitProgram,
    stdio: SandboxStdio,
    name: &str,
) -> Result<Running, LaunchError> {
    if plan.argv().is_empty() {
        return Err(LaunchError::Setup {
            step: "plan".into(),
            error: crate::plan::PlanError::EmptyArgv.to_string(),
        });
    }
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(LaunchError::Cgroup(io::Error::other(format!(
            "`{name}` is not a cgroup name"
        ))));
    }
    let root = CgroupRoot::host().map_err(LaunchError::Cgroup)?;
    let cgroup = Cgroup::create(&root, name, plan.bounds()).map_err(LaunchError::Cgroup)?;
    let (child, mut plan_w, report_r, handover) = match spawn_init(plan, init, stdio) {
        Ok(started) => started,
        Err(e) => {
            let _ = cgroup.remove();
            return Err(e);
        }
    };
    // From here on, dropping `running` kills the tree and removes the cgroup.
    let mut running = Running {
        child,
        cgroup: Some(cgroup),
        reports: reader(report_r),
        cpu_limit: Duration::from_secs(plan.bounds().max_cpu_seconds),
        wall_limit: Duration::from_secs(plan.bounds().max_wall_seconds),
        started: Instant::now(),
        done: false,
        cancel: crate::Cancel::new(),
        proxy_listener: None,
    };
    let pid = running.child.id();
    // The init blocks on the plan pipe, then joins the cgroup before it does
    // anything else (and fails the setup if it cannot).
    //
    // v1: the init writes `0` into each controller's `tasks` file itself.
    // Moving the calling thread alone skips the kernel's global threadgroup
    // lock, whose write side waits for an RCU grace period (6-15 ms here,
    // the largest single cost of a start); the init is single-threaded, so
    // its one thread is the whole process. v2 (no `tasks` file): we write
    // the pid to `cgroup.procs`, as before; `pid` is our unreaped child, so
    // it cannot have been reused.
    let join = match &running.cgroup {
        Some(cg) => match cg.self_join_files() {
            Some(files) => files,
            None => {
                cg.add(pid).map_err(LaunchError::Cgroup)?;
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    proto::send(&mut plan_w, &Control::Plan(Box::new(plan.clone()))).map_err(LaunchError::Pipe)?;
    proto::send(&mut plan_w, &Control::Join(join)).map_err(LaunchError::Pipe)?;
    let unexpected = |r: Report| match r {
        Report::Failed { step, error } => LaunchError::Setup { step, error },
        other => LaunchError::Pipe(io::Error::other(format!("unexpected report {other:?}"))),
    };
    if plan.rung() == Rung::Container {
        match recv_report(&running.reports, &mut running.child, "unshare")? {
            Report::Unshared => {}
            other => return Err(unexpected(other)),
        }
        write_id_maps(pid, plan).map_err(LaunchError::IdMap)?;
        proto::send(&mut plan_w, &Control::Mapped).map_err(LaunchError::Pipe)?;
    }
    match recv_report(&running.reports, &mut running.child, "setup")? {
        Report::Started => {}
        other => return Err(unexpected(other)),
    }
    if let (Some(port), Some(handover)) = (plan.proxy_port(), &handover) {
        // Stage 1 sent it before stage 2 existed: already queued.
        let listener =
            super::proxy::receive(handover, port).map_err(|error| LaunchError::Setup {
                step: "proxy listener".into(),
                error,
            })?;
        running.proxy_listener = Some(listener);
    }
    drop(plan_w);
    Ok(running)
}

/// How a run ended, with what its cgroup counted: CPU time, OOM kills (a
/// SIGKILL with an OOM kill and no other bound is the memory bound) and
/// refused forks.
pub(crate) fn outcome_of(
    cgroup: Option<&Cgroup>,
    termination: Termination,
    mut killed_by: Option<Bound>,
    wall: Duration,
) -> Outcome {
    let mut limits_hit = Vec::new();
    let mut cpu = None;
    if let Some(cg) = cgroup {
        cpu = cg.cpu_usage().ok();
        if let Ok(ev) = cg.events() {
            if ev.oom_kills > 0 {
                limits_hit.push(Bound::Memory);
                if killed_by.is_none() && termination == Termination::Signaled(libc::SIGKILL) {
                    killed_by = Some(Bound::Memory);
                }
            }
            if ev.pids_refused > 0 {
                limits_hit.push(Bound::Processes);
            }
        }
    }
    if let Some(b) = killed_by {
        if !limits_hit.contains(&b) {
            limits_hit.push(b);
        }
    }
    limits_hit.sort();
    Outcome {
        termination,
        killed_by,
        limits_hit,
        cpu,
        wall,
    }
}

/// Starts the init; returns it, the plan pipe, the report pipe and (with a
/// proxy port) the owner's end of the handover socket.
fn spawn_init(
    plan: &Plan,
    init: &InitProgram,
    stdio: SandboxStdio,
) -> Result<(Child, File, File, Option<OwnedFd>), LaunchError> {
    let pipe = |_| nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| LaunchError::Pipe(e.into()));
    let (plan_r, plan_w) = pipe(())?;
    let (report_r, report_w) = pipe(())?;
    let (ours, theirs) = match plan.proxy_port() {
        Some(_) => {
            let (ours, theirs) = crate::fdpass::pair().map_err(LaunchError::Pipe)?;
            (Some(ours), Some(theirs))
        }
        None => (None, None),
    };
    let stage = match plan.rung() {
        Rung::Container => "1",
        Rung::Process => "process",
    };
    let child = {
        let _guard = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        let inherited = [plan_r.as_fd(), report_w.as_fd()]
            .into_iter()
            .chain(theirs.as_ref().map(AsFd::as_fd));
        for fd in inherited {
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))
                .map_err(|e| LaunchError::Pipe(e.into()))?;
        }
        let mut cmd = Command::new(&init.path);
        cmd.args(&init.args)
            .arg(format!("{ARG_PLAN_FD}{}", plan_r.as_raw_fd()))
            .arg(format!("{ARG_REPORT_FD}{}", report_w.as_raw_fd()));
        if let Some(theirs) = &theirs {
            cmd.arg(format!("{ARG_HANDOVER_FD}{}", theirs.as_raw_fd()));
        }
        let spawned = cmd
            .arg(format!("{ARG_STAGE}{stage}"))
            .arg(format!("{ARG_BUILD}{INIT_BUILD}"))
            .env_clear()
            .stdin(stdio.stdin)
            .stdout(stdio.stdout)
            .stderr(stdio.stderr)
            .spawn();
        drop(plan_r);
        drop(report_w);
        drop(theirs);
        spawned.map_err(|source| LaunchError::Spawn {
            path: init.path.clone(),
            source,
        })?
    };
    Ok((child, File::from(plan_w), File::from(report_r), ours))
}

pub(crate) fn reader(report: File) -> Receiver<Report> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(report);
        while let Ok(Some(msg)) = proto::recv::<Report>(&mut r) {
            if tx.send(msg).is_err() {
                break;
            }
        }
    });
    rx
}

impl Running {
    pub fn stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }
    pub fn stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }
    pub fn stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The host pid of the init (the root of the sandbox's process tree).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every directory of the run's cgroup (one per v1 controller, or the
    /// one v2 directory): what [`crate::reclaim_cgroups`] needs to reclaim
    /// the run from a record when its owner is gone. Empty once cleaned up.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.cgroup.as_ref().map(|c| c.dirs()).unwrap_or_default()
    }

    /// A handle that kills the run's whole tree from another thread while
    /// [`Running::wait`] waits (the run then ends as killed by `SIGKILL`).
    pub fn canceller(&self) -> crate::Cancel {
        self.cancel.clone()
    }

    /// The listener on `127.0.0.1:proxy_port` of the sandbox's network
    /// namespace (the plan's `proxy_port`; `None` without one, or once
    /// taken). The workload's only TCP route: what it connects to there
    /// queues here, for the owner to accept from outside. Made by the init
    /// before anything of the workload ran; nothing in the sandbox holds it.
    pub fn take_proxy_listener(&mut self) -> Option<std::net::TcpListener> {
        self.proxy_listener.take()
    }

    fn kill_tree(&mut self) {
        // Our own unreaped child: its pid cannot have been reused.
        let _ = self.child.kill();
        if let Some(cg) = &self.cgroup {
            let _ = cg.kill_all();
        }
    }

    /// Waits for the workload, enforcing the CPU and wall-clock bounds by
    /// killing the whole tree, and reports how it ended.
    pub fn wait(mut self) -> Result<Outcome, LaunchError> {
        let mut killed_by = None;
        let mut cancelled = false;
        // Our own unreaped child: its pid cannot have been reused. Without
        // pidfds (Linux < 5.3) the loop falls back to sleeping for the tick.
        let pidfd = pidfd_of(&self.child);
        let status = loop {
            if let Some(status) = self.child.try_wait().map_err(LaunchError::Wait)? {
                break status;
            }
            let cpu = self.cgroup.as_ref().and_then(|c| c.cpu_usage().ok());
            if self.cancel.is_cancelled() && !cancelled {
                cancelled = true;
                self.kill_tree();
            }
            if killed_by.is_none() {
                if cpu.is_some_and(|c| c >= self.cpu_limit) {
                    killed_by = Some(Bound::Cpu);
                    self.kill_tree();
                } else if self.started.elapsed() >= self.wall_limit {
                    killed_by = Some(Bound::Wall);
                    self.kill_tree();
                }
            }
            // Wakes the moment the init exits (its pidfd turns readable), or
            // after the tick, when the CPU and wall bounds are checked again.
            wait_exit(pidfd.as_ref(), BOUNDS_TICK);
        };
        let wall = self.started.elapsed();
        // Whatever the first process left behind goes now.
        self.kill_tree();
        let mut termination = init::termination(status);
        let mut setup_error = None;
        {
            // The init (stage 2, or the process rung's reaper) reported the
            // workload's own status before exiting.
            let mut exited = None;
            while let Ok(r) = self.reports.recv_timeout(Duration::from_millis(200)) {
                match r {
                    Report::Exited(t) => exited = Some(t),
                    Report::Failed { step, error } => setup_error = Some((step, error)),
                    _ => {}
                }
            }
            termination = match exited {
                Some(t) => t,
                None if killed_by.is_some() || cancelled => Termination::Signaled(libc::SIGKILL),
                None => termination,
            };
        }
        let outcome = outcome_of(self.cgroup.as_ref(), termination, killed_by, wall);
        self.cleanup();
        if let Some((step, error)) = setup_error {
            if termination == Termination::Exited(SETUP_FAILED) {
                return Err(LaunchError::Setup { step, error });
            }
        }
        Ok(outcome)
    }

    /// Like [`Running::wait`], collecting stdout and stderr (if piped).
    pub fn wait_with_output(mut self) -> Result<(Outcome, Vec<u8>, Vec<u8>), LaunchError> {
        fn collect<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                buf
            })
        }
        drop(self.stdin());
        let out = collect(self.stdout());
        let err = collect(self.stderr());
        let outcome = self.wait()?;
        let out = out.join().unwrap_or_default();
        let err = err.join().unwrap_or_default();
        Ok((outcome, out, err))
    }

    fn cleanup(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.kill_tree();
        let _ = self.child.wait();
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            let _ = cg.remove();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cleanup();
    }
}
