//! The owner's side of a warm sandbox: start it once, exec many times.
//!
//! ```text
//! owner ── plan pipe / report pipe (setup) ──> stage 1 (warm1) ──> PID 1 (warm2)
//!       <═ control socket (SOCK_SEQPACKET): Exec + stdio + cgroup files ═>
//! ```
//!
//! The sandbox's cgroup `NAME` holds the bounds for everything in it; the
//! init sits in `NAME/init`, each exec in `NAME/exec-N` with the exec's own
//! bounds. When an exec's first process ends, everything in its cgroup is
//! killed and the cgroup removed, so one exec cannot outlive its round.
//! Dropping (or [`WarmSandbox::stop`]) kills the whole tree and removes
//! every cgroup.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

use super::cgroup::{self, Cgroup, CgroupManager, CgroupRoot};
use super::init::{ARG_BUILD, ARG_CONTROL_FD, ARG_PLAN_FD, ARG_REPORT_FD, ARG_STAGE, INIT_BUILD};
use super::launch::{reader, recv_report, InitProgram, LaunchError};
use super::proto::{self, Control, Report, WarmEvent, WarmRequest};
use super::pty::TtySize;
use crate::fdpass;
use crate::outcome::{Bound, Outcome, Termination};
use crate::plan::{Bounds, Plan, Rung};

const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
const BOUNDS_TICK: Duration = Duration::from_millis(10);

/// The init's identity: the namespace's root, mapped to a host uid/gid of
/// its own (never 0, never the workload's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitIds {
    pub host_uid: u32,
    pub host_gid: u32,
}

/// One command for a warm sandbox.
#[derive(Clone, Debug)]
pub struct WarmExec {
    /// `argv[0]` is an absolute path (no `PATH` lookup).
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// This exec's bounds (its own cgroup; CPU and wall from its start).
    pub bounds: Bounds,
}

/// The exec's stdin, stdout and stderr, handed to the init (an exec
/// without a terminal; see [`WarmSandbox::exec_tty`] for one with).
#[derive(Debug)]
pub struct ExecStdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

enum Event {
    /// With the terminal's master, for a tty exec.
    Started(Vec<OwnedFd>),
    Failed(String),
    Exited(Termination),
    /// The init is gone.
    Died,
}

type Waiters = Arc<Mutex<HashMap<u64, Sender<Event>>>>;

/// A live warm sandbox.
pub struct WarmSandbox {
    stage1: Mutex<Child>,
    control: Arc<OwnedFd>,
    cgroup: Arc<Cgroup>,
    waiters: Waiters,
    dead: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    /// The next exec, made ahead ([`super::warm_ahead`]).
    ahead: super::warm_ahead::Ahead,
    stopped: AtomicBool,
    /// Whether [`WarmSandbox::pause`] froze it (and no resume since).
    paused: AtomicBool,
    /// Held by a pause or resume and by an exec's start: a pause never
    /// freezes the init halfway through starting an exec.
    gate: Mutex<()>,
    /// The sandbox's proxy listener until the caller takes it.
    proxy_listener: Option<std::net::TcpListener>,
    /// The sandbox's `/tmp`, held open (see [`WarmSandbox::tmp_dir`]).
    tmp: Arc<OwnedFd>,
}

impl std::fmt::Debug for WarmSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmSandbox")
            .field("cgroup", &self.cgroup)
            .finish_non_exhaustive()
    }
}

fn write_id_maps(pid: u32, plan: &Plan, init: InitIds) -> io::Result<()> {
    let ids = plan.ids();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    // INVARIANT: two ids are mapped, neither to host 0 (Plan validation and
    // `start` refuse 0): the namespace's root to the init's own host uid,
    // the workload's uid to its host uid.
    std::fs::write(proc.join("setgroups"), "deny")?;
    std::fs::write(
        proc.join("uid_map"),
        format!("0 {} 1\n{} {} 1\n", init.host_uid, ids.uid, ids.host_uid),
    )?;
    std::fs::write(
        proc.join("gid_map"),
        format!("0 {} 1\n{} {} 1\n", init.host_gid, ids.gid, ids.host_gid),
    )?;
    Ok(())
}

/// The init's `/tmp`, already queued on the control socket (sent before
/// it reported `Started`); the wait only bounds a mismatch — an init of
/// another cordon that sends none — which refuses rather than hangs.
fn receive_tmp(sock: &OwnedFd) -> Result<OwnedFd, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let wait = Timespec {
        tv_sec: 2,
        tv_nsec: 0,
    };
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    match poll(&mut fds, Some(&wait)) {
        Ok(0) => return Err("the sandbox's init sent no descriptor of its /tmp (is `cordon-init` from another version of cordon? install both together: `bash install.sh`)".into()),
        Ok(_) => {}
        Err(e) => return Err(e.to_string()),
    }
    match fdpass::recv::<super::proto::Handover>(sock) {
        Ok(Some((super::proto::Handover::Tmp, mut fds))) if fds.len() == 1 => Ok(fds.remove(0)),
        Ok(Some((msg, fds))) => Err(format!("got {msg:?} with {} descriptors", fds.len())),
        Ok(None) => Err("the init closed the channel".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn event_reader(control: Arc<OwnedFd>, waiters: Waiters, dead: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while let Ok(Some((event, fds))) = fdpass::recv::<WarmEvent>(&*control) {
            let (id, ev, done) = match event {
                WarmEvent::Started { id } => (id, Event::Started(fds), false),
                WarmEvent::Failed { id, error } => (id, Event::Failed(error), true),
                WarmEvent::Exited { id, termination } => (id, Event::Exited(termination), true),
            };
            let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
            let tx = if done {
                w.remove(&id)
            } else {
                w.get(&id).cloned()
            };
            if let Some(tx) = tx {
                let _ = tx.send(ev);
            }
        }
        dead.store(true, Ordering::SeqCst);
        let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
        for (_, tx) in w.drain() {
            let _ = tx.send(Event::Died);
        }
    });
}

// Our starts clear close-on-exec on three descriptors for the instant of
// spawn; serialising them keeps one sandbox's descriptors out of another's.
static SPAWN: Mutex<()> = Mutex::new(());

/// A spawn for [`spawn_held`]: the command, and where its child goes.
type SpawnJob = (Command, mpsc::SyncSender<io::Result<Child>>);

static SPAWNER: std::sync::OnceLock<Mutex<Sender<SpawnJob>>> = std::sync::OnceLock::new();

/// Spawns `command` from a thread that lives as long as this process.
///
/// The init sets `PR_SET_PDEATHSIG` so that its owner's death takes the
/// sandbox with it — but the kernel sends it when the *thread* that
/// forked the init exits, not the process. Spawned from the caller's
/// thread, a warm sandbox died with that thread: a library host's worker
/// thread, a Tokio blocking thread that idles out, a pool filled from a
/// thread of its own (found by the library pool's test, whose callers'
/// sandboxes were dead once their threads were joined). Every warm init
/// is forked from this one thread instead.
fn spawn_held(command: Command) -> io::Result<Child> {
    let gone = || io::Error::other("the thread warm sandboxes are started from is gone");
    let jobs = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        // A thread that cannot be made leaves `rx` dropped: every spawn
        // then fails, saying so.
        let _ = std::thread::Builder::new()
            .name("cordon-warm-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            });
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::sync_channel(1);
    jobs.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, tx))
        .map_err(|_| gone())?;
    rx.recv().map_err(|_| gone())?
}

impl WarmSandbox {
    /// Builds the sandbox for `plan` (container rung; its `argv` is unused)
    /// with the init running as `init_ids`, in a cgroup called `name` below
    /// the owner's own. Returns once the init serves requests.
    pub fn start(
        plan: &Plan,
        init: &InitProgram,
        init_ids: InitIds,
        name: &str,
    ) -> Result<WarmSandbox, LaunchError> {
        let setup = |e: String| LaunchError::Setup {
            step: "warm sandbox".into(),
            error: e,
        };
        if plan.rung() != Rung::Container {
            return Err(setup(
                "warm sandboxes are built at the container rung".into(),
            ));
        }
        let ids = plan.ids();
        if init_ids.host_uid == 0
            || init_ids.host_gid == 0
            || init_ids.host_uid == ids.host_uid
            || init_ids.host_gid == ids.host_gid
        {
            return Err(setup(
                "the init needs a host uid and gid of its own: not 0, not the workload's".into(),
            ));
        }
        if ids.uid == 0 || ids.gid == 0 {
            return Err(setup(
                "the workload never runs as the namespace's root".into(),
            ));
        }
        let root = CgroupRoot::host().map_err(LaunchError::Cgroup)?;
        let total = Bounds {
            max_processes: plan.bounds().max_processes.saturating_add(1),
            ..plan.bounds().clone()
        };
        let cgroup = Cgroup::create(&root, name, &total).map_err(LaunchError::Cgroup)?;
        let started = Self::start_in(plan, init, init_ids, &cgroup);
        match started {
            Ok((child, control, proxy_listener, tmp)) => {
                let control = Arc::new(control);
                let waiters: Waiters = Arc::default();
                let dead = Arc::new(AtomicBool::new(false));
                event_reader(control.clone(), waiters.clone(), dead.clone());
                let cgroup = Arc::new(cgroup);
                let next = Arc::new(AtomicU64::new(1));
                let ahead =
                    super::warm_ahead::Ahead::start(control.clone(), cgroup.clone(), next.clone());
                Ok(WarmSandbox {
                    stage1: Mutex::new(child),
                    control,
                    cgroup,
                    waiters,
                    dead,
                    next,
                    ahead,
                    stopped: AtomicBool::new(false),
                    paused: AtomicBool::new(false),
                    gate: Mutex::new(()),
                    proxy_listener,
                    tmp: Arc::new(tmp),
                })
            }
            Err((e, child)) => {
                if let Some(mut child) = child {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let _ = cgroup::reclaim(&cgroup.dirs());
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn start_in(
        plan: &Plan,
        init: &InitProgram,
        init_ids: InitIds,
        cgroup: &Cgroup,
    ) -> Result<
        (Child, OwnedFd, Option<std::net::TcpListener>, OwnedFd),
        (LaunchError, Option<Child>),
    > {
        let no_child = |e| (e, None);
        let init_cg = cgroup
            .child("init", None)
            .map_err(|e| no_child(LaunchError::Cgroup(e)))?;
        let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| LaunchError::Pipe(e.into()));
        let (plan_r, plan_w) = pipe().map_err(no_child)?;
        let (report_r, report_w) = pipe().map_err(no_child)?;
        let (ours, theirs) = fdpass::pair().map_err(|e| no_child(LaunchError::Pipe(e)))?;
        let mut child = {
            let _guard = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            for fd in [plan_r.as_fd(), report_w.as_fd(), theirs.as_fd()] {
                fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))
                    .map_err(|e| no_child(LaunchError::Pipe(e.into())))?;
            }
            let mut command = Command::new(&init.path);
            command
                .args(&init.args)
                .arg(format!("{ARG_PLAN_FD}{}", plan_r.as_raw_fd()))
                .arg(format!("{ARG_REPORT_FD}{}", report_w.as_raw_fd()))
                .arg(format!("{ARG_CONTROL_FD}{}", theirs.as_raw_fd()))
                .arg(format!("{ARG_STAGE}warm1"))
                .arg(format!("{ARG_BUILD}{INIT_BUILD}"))
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            let spawned = spawn_held(command);
            drop((plan_r, report_w, theirs));
            spawned.map_err(|source| {
                no_child(LaunchError::Spawn {
                    path: init.path.clone(),
                    source,
                })
            })?
        };
        let reports = reader(File::from(report_r));
        let mut plan_w = File::from(plan_w);
        let result = (|| {
            let pid = child.id();
            let join = match init_cg.self_join_files() {
                Some(files) => files,
                None => {
                    init_cg.add(pid).map_err(LaunchError::Cgroup)?;
                    Vec::new()
                }
            };
            proto::send(&mut plan_w, &Control::Plan(Box::new(plan.clone())))
                .map_err(LaunchError::Pipe)?;
            proto::send(&mut plan_w, &Control::Join(join)).map_err(LaunchError::Pipe)?;
            let unexpected = |r: Report| match r {
                Report::Failed { step, error } => LaunchError::Setup { step, error },
                other => {
                    LaunchError::Pipe(io::Error::other(format!("unexpected report {other:?}")))
                }
            };
            match recv_report(&reports, &mut child, "unshare")? {
                Report::Unshared => {}
                other => return Err(unexpected(other)),
            }
            write_id_maps(pid, plan, init_ids).map_err(LaunchError::IdMap)?;
            proto::send(&mut plan_w, &Control::Mapped).map_err(LaunchError::Pipe)?;
            match recv_report(&reports, &mut child, "setup")? {
                Report::Started => {}
                other => return Err(unexpected(other)),
            }
            // The control socket's first packet, sent by stage 1 before the
            // init existed (so queued now, and before any event).
            let listener = plan
                .proxy_port()
                .map(|port| {
                    super::proxy::receive(&ours, port).map_err(|error| LaunchError::Setup {
                        step: "proxy listener".into(),
                        error,
                    })
                })
                .transpose()?;
            // Then the init's /tmp, sent before it reported `Started`.
            let tmp = receive_tmp(&ours).map_err(|error| LaunchError::Setup {
                step: "the sandbox's /tmp".into(),
                error,
            })?;
            Ok((listener, tmp))
        })();
        match result {
            Ok((listener, tmp)) => Ok((child, ours, listener, tmp)),
            Err(e) => Err((e, Some(child))),
        }
    }

    /// The listener on `127.0.0.1:proxy_port` of the sandbox's network
    /// namespace (the plan's `proxy_port`; `None` without one, or once
    /// taken). Every exec's only TCP route: what they connect to there
    /// queues here, for the owner to accept from outside. Made by the init
    /// before it served any exec; nothing in the sandbox holds it.
    pub fn take_proxy_listener(&mut self) -> Option<std::net::TcpListener> {
        self.proxy_listener.take()
    }

    /// The sandbox's `/tmp` (a tmpfs in its mount namespace), opened
    /// `O_PATH` by its init before any exec ran: the files API serves it
    /// beneath this descriptor, no link followed.
    pub fn tmp_dir(&self) -> Arc<OwnedFd> {
        self.tmp.clone()
    }

    /// The cgroup directories of the whole sandbox (for a record that lets
    /// another process reclaim it; see [`crate::reclaim_cgroups`]).
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.cgroup.dirs()
    }

    /// Whether the init still serves requests.
    pub fn alive(&self) -> bool {
        if self.dead.load(Ordering::SeqCst) || self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        let mut child = self.stage1.lock().unwrap_or_else(|p| p.into_inner());
        matches!(child.try_wait(), Ok(None))
    }

    /// Starts `exec` in the sandbox. Returns once its confinement is in
    /// place and it is starting, or with why it did not start.
    pub fn exec(&self, exec: &WarmExec, stdio: ExecStdio) -> Result<WarmRunning, LaunchError> {
        self.start_exec(exec, Some(stdio), None)
            .map(|(running, _)| running)
    }

    /// Starts `exec` in the sandbox with a pseudo-terminal of `size` as its
    /// stdin, stdout, stderr and controlling terminal. The terminal is of a
    /// devpts instance the exec mounts in its own mount namespace (it is
    /// `/dev/pts/0` inside), never the host's `/dev/pts` or a terminal of
    /// the host. Returns once the command is starting, with the terminal's
    /// master (close-on-exec): write the input to it, read the output from
    /// it (`EIO` once every process holding the terminal has ended), and
    /// resize with [`crate::resize_pty`].
    pub fn exec_tty(
        &self,
        exec: &WarmExec,
        size: TtySize,
    ) -> Result<(WarmRunning, OwnedFd), LaunchError> {
        let (running, mut fds) = self.start_exec(exec, None, Some(size))?;
        match (fds.pop(), fds.is_empty()) {
            (Some(master), true) => Ok((running, master)),
            // `running` is dropped: the exec is killed and its cgroup removed.
            _ => Err(LaunchError::Setup {
                step: "exec".into(),
                error: "the sandbox did not send the terminal's master".into(),
            }),
        }
    }

    /// Sends the request (with `stdio`, or none for a `tty` exec) and waits
    /// until the exec starts; returns the descriptors its start carried.
    fn start_exec(
        &self,
        exec: &WarmExec,
        stdio: Option<ExecStdio>,
        tty: Option<TtySize>,
    ) -> Result<(WarmRunning, Vec<OwnedFd>), LaunchError> {
        if !self.alive() {
            return Err(LaunchError::InitDied(
                "the sandbox is no longer running".into(),
            ));
        }
        // An exec on a paused sandbox resumes it first: its frozen init
        // would otherwise never start it. No pause comes until it started.
        let _gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if self.paused() {
            self.thaw().map_err(|e| LaunchError::Setup {
                step: "resume".into(),
                error: format!("the sandbox was paused and did not resume for the exec: {e}"),
            })?;
        }
        // The exec made ahead, when one is (not for a terminal, which its
        // PID 1 opens before it is confined): its bounds written now,
        // before anything of the workload's runs in it.
        let spare = match tty {
            None => self.ahead.take(),
            Some(_) => None,
        };
        let made_ahead = spare.is_some();
        let (id, cg, joins) = match spare {
            Some((id, cg)) => {
                if let Err(e) = cg.write_bounds(&exec.bounds) {
                    let _ = cg.kill_all();
                    let _ = cg.remove();
                    return Err(LaunchError::Cgroup(e));
                }
                (id, cg, Vec::new())
            }
            None => {
                let id = self.next.fetch_add(1, Ordering::SeqCst);
                let cg = self
                    .cgroup
                    .child(&format!("exec-{id}"), Some(&exec.bounds))
                    .map_err(LaunchError::Cgroup)?;
                let joins: Vec<File> = match cg
                    .join_files()
                    .iter()
                    .map(|p| std::fs::OpenOptions::new().write(true).open(p))
                    .collect::<io::Result<Vec<File>>>()
                {
                    Ok(f) => f,
                    Err(e) => {
                        let _ = cg.remove();
                        return Err(LaunchError::Cgroup(e));
                    }
                };
                (id, cg, joins)
            }
        };
        let (tx, rx) = mpsc::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let mut running = WarmRunning {
            id,
            made_ahead,
            ahead: self.ahead.wanter(),
            cgroup: Some(cg),
            events: rx,
            waiters: self.waiters.clone(),
            started: Instant::now(),
            cpu_limit: Duration::from_secs(exec.bounds.max_cpu_seconds),
            wall_limit: Duration::from_secs(exec.bounds.max_wall_seconds),
            done: false,
            cancel: crate::Cancel::new(),
        };
        let mut fds = Vec::new();
        if let Some(stdio) = &stdio {
            fds.extend([
                stdio.stdin.as_fd(),
                stdio.stdout.as_fd(),
                stdio.stderr.as_fd(),
            ]);
        }
        fds.extend(joins.iter().map(AsFd::as_fd));
        let request = WarmRequest::Exec {
            id,
            argv: exec.argv.clone(),
            env: exec.env.clone(),
            joins: joins.len(),
            tty,
        };
        fdpass::send(&*self.control, &request, &fds).map_err(LaunchError::Pipe)?;
        drop(fds);
        drop(stdio);
        drop(joins);
        match running.events.recv_timeout(SETUP_TIMEOUT) {
            Ok(Event::Started(fds)) => {
                running.started = Instant::now();
                Ok((running, fds))
            }
            Ok(Event::Failed(error)) => Err(LaunchError::Setup {
                step: "exec".into(),
                error,
            }),
            Ok(Event::Exited(_)) | Ok(Event::Died) | Err(RecvTimeoutError::Disconnected) => {
                Err(LaunchError::InitDied("the sandbox's init ended".into()))
            }
            Err(RecvTimeoutError::Timeout) => Err(LaunchError::Timeout(SETUP_TIMEOUT, "exec")),
        }
    }

    /// Freezes every process of the sandbox — its init and every exec's —
    /// through its cgroup: none runs or uses CPU until
    /// [`WarmSandbox::resume`]; their memory stays charged to the bound,
    /// and the wall clock of an exec in progress goes on. Idempotent; an
    /// error where this machine cannot freeze (no freezer), saying so.
    pub fn pause(&self) -> io::Result<()> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(io::Error::other("the sandbox is stopped"));
        }
        let _gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        self.cgroup.freeze(true)?;
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Thaws what [`WarmSandbox::pause`] froze. Idempotent.
    pub fn resume(&self) -> io::Result<()> {
        let _gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        self.thaw()
    }

    fn thaw(&self) -> io::Result<()> {
        self.cgroup.freeze(false)?;
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the sandbox is paused.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Kills everything in the sandbox and removes its cgroups. Idempotent.
    pub fn stop(&self) -> io::Result<()> {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.ahead.close();
        // A frozen init cannot end on EOF.
        if self.paused() {
            let _ = self.cgroup.freeze(false);
        }
        {
            let mut child = self.stage1.lock().unwrap_or_else(|p| p.into_inner());
            // Closing the control socket ends the init (PID 1 exits on EOF,
            // and the kernel kills its namespace); stage 1, its parent,
            // reaps it and exits. Killing stage 1 first would leave the init
            // a zombie for the host's init to reap.
            let _ = rustix::net::shutdown(&*self.control, rustix::net::Shutdown::Both);
            exited_within(&mut child, Duration::from_secs(2));
            // Our own unreaped child: its pid cannot have been reused.
            let _ = child.kill();
            let _ = child.wait();
        }
        cgroup::reclaim(&self.cgroup.dirs())
    }
}

/// Waits until `child` (ours, unreaped) has exited, at most `limit`:
/// woken by its pidfd the moment it does (a sandbox's dispose waits for
/// this; polling every millisecond added half of one on average), or,
/// where this kernel has no pidfd, checked every millisecond.
fn exited_within(child: &mut std::process::Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    let pidfd = super::launch::pidfd_of(child);
    let tick = if pidfd.is_some() {
        limit
    } else {
        Duration::from_millis(1)
    };
    while matches!(child.try_wait(), Ok(None)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        super::launch::wait_exit(pidfd.as_ref(), tick.min(left));
    }
}

impl Drop for WarmSandbox {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// An exec in progress. Dropping it kills everything the exec started.
pub struct WarmRunning {
    id: u64,
    made_ahead: bool,
    /// Given this exec's cgroup to remove once it ended (and asked for
    /// the next spare then).
    ahead: super::warm_ahead::Wanter,
    cgroup: Option<Cgroup>,
    events: Receiver<Event>,
    waiters: Waiters,
    started: Instant,
    cpu_limit: Duration,
    wall_limit: Duration,
    done: bool,
    cancel: crate::Cancel,
}

impl WarmRunning {
    /// A handle that kills the exec's whole tree from another thread while
    /// [`WarmRunning::wait`] waits (the exec then ends as killed by `SIGKILL`).
    pub fn canceller(&self) -> crate::Cancel {
        self.cancel.clone()
    }

    /// Whether this exec's processes were made ahead of its request (see
    /// the module `warm_ahead`): its namespaces, mounts and confinement
    /// were in place before it was asked for.
    pub fn made_ahead(&self) -> bool {
        self.made_ahead
    }

    fn kill(&self) {
        if let Some(cg) = &self.cgroup {
            let _ = cg.kill_all();
        }
    }

    /// Waits for the exec's first process, holding the CPU and wall-clock
    /// bounds by killing the exec's cgroup; then kills whatever the exec
    /// left running and removes its cgroup.
    pub fn wait(mut self) -> Result<Outcome, LaunchError> {
        let mut killed_by = None;
        let mut cancelled = false;
        let termination = loop {
            match self.events.recv_timeout(BOUNDS_TICK) {
                Ok(Event::Exited(t)) => break t,
                Ok(Event::Started(_)) => {}
                Ok(Event::Failed(e)) => {
                    return Err(LaunchError::Setup {
                        step: "exec".into(),
                        error: e,
                    })
                }
                Ok(Event::Died) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(LaunchError::InitDied("the sandbox's init ended".into()))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.cancel.is_cancelled() && !cancelled {
                cancelled = true;
                self.kill();
            }
            if killed_by.is_none() {
                let cpu = self.cgroup.as_ref().and_then(|c| c.cpu_usage().ok());
                if cpu.is_some_and(|c| c >= self.cpu_limit) {
                    killed_by = Some(Bound::Cpu);
                    self.kill();
                } else if self.started.elapsed() >= self.wall_limit {
                    killed_by = Some(Bound::Wall);
                    self.kill();
                }
            }
        };
        let wall = self.started.elapsed();
        self.kill();
        let outcome = super::launch::outcome_of(self.cgroup.as_ref(), termination, killed_by, wall);
        self.cleanup();
        Ok(outcome)
    }

    fn cleanup(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        // Nothing of the exec outlives this: its processes are killed
        // here; only its emptied cgroup's removal is left to the
        // sandbox's thread (with the next spare's making).
        if let Some(cg) = self.cgroup.take() {
            match cg.kill_all() {
                Ok(()) => self.ahead.retire(cg),
                Err(_) => {
                    let _ = cg.remove();
                }
            }
        }
    }
}

impl Drop for WarmRunning {
    fn drop(&mut self) {
        self.cleanup();
    }
}
