//! Kept sandboxes: each one is held by a keeper process of its own, so it
//! outlives the process that asked for it and is found again through the
//! state directory ([`crate::state`]), never through anyone's memory.
//!
//! ```text
//! acquirer ──spawn──> cordon __sandbox-keeper ──spawn──> keeper (detached, setsid)
//!                                                       │ owns the LocalSandbox (warm init, dirs)
//!   clients ──SOCK_SEQPACKET STATE/sandboxes/H.sock──> │ Exec (+ stdio fds), Ping, Dispose
//! ```
//!
//! File operations (`put`, reads for collection) do not go through the
//! keeper: the client works on the recorded host work dir directly, with the
//! same confined (`openat2`) operations the in-process sandbox uses.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_linux::fdpass;
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::host_dir::HostWorkDir;
use cordon_sandbox::{
    AcquireRequest, Attach, CallerContext, ExecHandle, ExecRequest, ExitStatus, FileRead, FileStat,
    Killer, Limits, Provenance, Sandbox, SandboxError,
};
use serde::{Deserialize, Serialize};

use crate::state::{self, KeyRecord, ProcessId, Record, StateDir};
use crate::{ExecPipes, LocalBackend, LocalConfig, WorkDir};

/// The hidden first argument that makes the `cordon` binary a keeper.
pub const KEEPER_ARG: &str = "__sandbox-keeper";

/// Everything a keeper needs to build its sandbox (its stdin, as JSON): the
/// typed wire form of what the acquirer decided, so the keeper parses no
/// spec and re-derives nothing. It loads the policy once (the file is not
/// carried) and refuses to serve if its digest is not the acquirer's.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// [`cordon_sandbox::wire::WIRE_VERSION`]; another is refused.
    pub version: u32,
    pub state_dir: PathBuf,
    pub handle: String,
    pub key: KeyRecord,
    pub owner: String,
    pub rung: cordon_linux::Rung,
    /// `None`: `cordon:default`.
    pub policy_file: Option<PathBuf>,
    pub deployment: String,
    pub provenance: Provenance,
    pub limits: Limits,
    pub work_dir: WorkDir,
    pub init: (PathBuf, Vec<String>),
    pub idle_timeout: u64,
    pub max_age: u64,
}

/// Client → keeper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Request {
    Ping,
    /// Descriptors attached: stdin, stdout, stderr.
    Exec {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        timeout_secs: u64,
    },
    Dispose,
}

/// How an exec ended, on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Status {
    Code(i32),
    Signal(i32),
    TimedOut,
    Bound(String),
}

/// Keeper → client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Reply {
    Pong { handle: String },
    Done(Status),
    Refused(String),
    Disposed,
}

fn status_to_wire(s: ExitStatus) -> Status {
    match s {
        ExitStatus::Code(c) => Status::Code(c),
        ExitStatus::Signal(s) => Status::Signal(s),
        ExitStatus::TimedOut => Status::TimedOut,
        ExitStatus::Bound { bound } => Status::Bound(bound.to_string()),
    }
}

fn status_from_wire(s: Status) -> ExitStatus {
    match s {
        Status::Code(c) => ExitStatus::Code(c),
        Status::Signal(s) => ExitStatus::Signal(s),
        Status::TimedOut => ExitStatus::TimedOut,
        Status::Bound(b) => ExitStatus::Bound {
            bound: match b.as_str() {
                "max_memory" => "max_memory",
                "max_cpu_seconds" => "max_cpu_seconds",
                "max_processes" => "max_processes",
                _ => "unknown bound",
            },
        },
    }
}

/// How long a keeper may take to answer a ping or a dispose before it is
/// treated as gone (then killed, if it is still that process, and reclaimed).
const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// How much longer than the exec's own timeout a client waits for its end.
const EXEC_GRACE: Duration = Duration::from_secs(60);

/// Connects to a keeper; every read on the socket gives up after `within`.
fn connect(path: &Path, within: Duration) -> std::io::Result<OwnedFd> {
    use rustix::net::{
        connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
    };
    let s = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    fdpass::size_buffers(&s)?;
    rustix::net::sockopt::set_socket_timeout(
        &s,
        rustix::net::sockopt::Timeout::Recv,
        Some(within),
    )?;
    connect(&s, &SocketAddrUnix::new(path)?)?;
    Ok(s)
}

fn ask(path: &Path, req: &Request, fds: &[std::os::fd::BorrowedFd<'_>]) -> std::io::Result<Reply> {
    let s = connect(path, ANSWER_WITHIN)?;
    fdpass::send(&s, req, fds)?;
    match fdpass::recv::<Reply>(&s)? {
        Some((r, _)) => Ok(r),
        None => Err(std::io::Error::other(
            "the keeper closed the connection without answering",
        )),
    }
}

/// Whether the keeper of `rec` answers.
pub fn ping(state: &StateDir, rec: &Record) -> bool {
    rec.keeper.alive()
        && matches!(ask(&state.socket_path(&rec.handle), &Request::Ping, &[]), Ok(Reply::Pong { handle }) if handle == rec.handle)
}

/// Disposes of the sandbox of `rec`: asks its keeper, and whatever the
/// keeper did not do (it is gone, or does not answer) is reclaimed from
/// the record. Best effort; returns what failed, for the log.
pub fn dispose_record(state: &StateDir, rec: &Record) -> Vec<String> {
    let mut failures = Vec::new();
    if rec.keeper.alive() {
        match ask(&state.socket_path(&rec.handle), &Request::Dispose, &[]) {
            Ok(Reply::Disposed) => {
                // The keeper removed everything; wait for it to go.
                let deadline = Instant::now() + Duration::from_secs(10);
                while rec.keeper.alive() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            other => failures.push(format!(
                "the keeper did not dispose ({other:?}); reclaiming"
            )),
        }
    }
    failures.extend(force_reclaim(state, rec));
    failures
}

/// Reclaims `rec` without asking its keeper: kills the keeper if it is
/// still that process, then removes what the record names.
pub fn force_reclaim(state: &StateDir, rec: &Record) -> Vec<String> {
    if rec.keeper.alive() {
        kill(&rec.keeper);
    }
    reclaim(state, rec)
}

/// Kills `p` if it is still that very process (pidfd pinned, then checked).
fn kill(p: &ProcessId) {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let Some(pid) = i32::try_from(p.pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) {
        if p.alive() {
            let _ = pidfd_send_signal(&fd, Signal::KILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Removes what a record names: cgroups (killing their processes), the
/// fresh work dir, the temporary directory, the state entries.
pub fn reclaim(state: &StateDir, rec: &Record) -> Vec<String> {
    let mut failures = Vec::new();
    if let Err(e) = cordon_linux::reclaim_cgroups(&rec.cgroups) {
        failures.push(format!("cgroups: {e}"));
    }
    let mut dirs: Vec<&PathBuf> = rec.tmp_dir.iter().collect();
    if rec.fresh_work_dir {
        dirs.push(&rec.work_dir);
    }
    for d in dirs {
        if let Err(e) = std::fs::remove_dir_all(d) {
            if e.kind() != std::io::ErrorKind::NotFound {
                failures.push(format!("{}: {e}", d.display()));
            }
        }
    }
    if let Err(e) = state.remove(&rec.handle) {
        failures.push(e.to_string());
    }
    failures
}

/// Starts a keeper for `launch` with `keeper` (the `cordon` binary and its
/// hidden argument) and waits until it serves, or says why it did not.
pub fn spawn(
    keeper: &cordon_linux::InitProgram,
    launch: &Launch,
    state: &StateDir,
) -> Result<Record, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.log_path(&launch.handle))
        .map_err(|e| format!("keeper log: {e}"))?;
    let mut child = Command::new(&keeper.path)
        .args(&keeper.args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(std::env::var_os("CORDON_IMAGE_STORE").map(|v| ("CORDON_IMAGE_STORE", v)))
        .envs(std::env::var_os("CORDON_LOG").map(|v| ("CORDON_LOG", v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("starting the keeper `{}`: {e}", keeper.path.display()))?;
    let json = serde_json::to_vec(launch).map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&json)
            .map_err(|e| format!("briefing the keeper: {e}"))?;
    }
    let out = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Some(out) = out {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    // The first keeper only starts the detached one; reap it.
    let _ = child.wait();
    let log_tail = || {
        let text = std::fs::read_to_string(state.log_path(&launch.handle)).unwrap_or_default();
        text.lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    };
    match line.trim() {
        "ready" => state
            .read(&launch.handle)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the keeper said ready but wrote no record".to_string()),
        "" => Err(format!(
            "the keeper did not start the sandbox:\n{}",
            log_tail()
        )),
        other => Err(other.trim_start_matches("failed: ").to_string()),
    }
}

/// A sandbox held by a keeper, driven from this process.
pub struct KeptSandbox {
    state: StateDir,
    record: Record,
    provenance: Provenance,
    files: HostWorkDir,
}

impl KeptSandbox {
    /// The sandbox `record` names, with the provenance it was created with.
    pub fn new(state: StateDir, record: Record) -> Result<KeptSandbox, SandboxError> {
        let files = HostWorkDir::new(&record.work_dir, &record.guest_work_dir)?
            .owned_by(record.host_id, record.host_id);
        Ok(KeptSandbox {
            state,
            provenance: record.provenance.clone(),
            record,
            files,
        })
    }

    pub fn record(&self) -> &Record {
        &self.record
    }

    fn start_handle(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let failed = |reason: String| SandboxError::Failed {
            operation: "exec",
            reason,
        };
        let pipes = ExecPipes::new(attach.stdin_stream || !req.stdin.is_empty())
            .map_err(|e| failed(e.to_string()))?;
        let (theirs, ours) = pipes.split();
        let within = req.timeout.max(Duration::from_secs(1)) + EXEC_GRACE;
        let sock = connect(&self.state.socket_path(&self.record.handle), within).map_err(|e| {
            failed(format!(
                "sandbox `{}` does not answer ({e}); it may have expired or been disposed — `cordon sandbox ls` shows what is live",
                self.record.handle
            ))
        })?;
        fdpass::send(
            &sock,
            &Request::Exec {
                argv: req.argv.clone(),
                env: req.env.clone(),
                timeout_secs: req.timeout.as_secs().max(1),
            },
            &[
                theirs.stdin.as_fd(),
                theirs.stdout.as_fd(),
                theirs.stderr.as_fd(),
            ],
        )
        .map_err(|e| failed(e.to_string()))?;
        drop(theirs);
        // Killing the exec is hanging up on the keeper: it watches the
        // connection and kills the exec's tree when its client is gone —
        // the same path as a client process that was killed.
        let sock = Arc::new(sock);
        let hang_up = sock.clone();
        let killer = Killer::new(move || {
            let _ = rustix::net::shutdown(&*hang_up, rustix::net::Shutdown::Both);
        });
        Ok(ours.into_handle(
            req,
            attach,
            move || match fdpass::recv::<Reply>(&sock) {
                Ok(Some((Reply::Done(s), _))) => Ok(status_from_wire(s)),
                Ok(Some((Reply::Refused(why), _))) => Err(failed(why)),
                Ok(None) => Err(failed("the exec was killed: its client hung up".into())),
                Ok(other) => Err(failed(format!("the keeper answered {other:?}"))),
                Err(e) => Err(failed(format!("the keeper's answer: {e}"))),
            },
            killer,
        ))
    }
}

impl Sandbox for KeptSandbox {
    fn id(&self) -> &str {
        &self.record.handle
    }
    fn provenance(&self) -> &Provenance {
        &self.provenance
    }
    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        self.start_handle(req, attach)
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.files.write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.files.stat_no_follow(path)
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.files.read_file(path, max_bytes)
    }
}

/// The keeper's entry point (`cordon __sandbox-keeper`); never returns.
/// The first invocation starts a detached copy of itself and exits, so the
/// acquirer is never left with a long-lived child.
pub fn keeper_main() -> ! {
    let detached = std::env::args().any(|a| a == "--detached");
    if !detached {
        let exe = std::fs::read_link("/proc/self/exe")
            .unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let args: Vec<String> = std::env::args().skip(1).collect();
        let spawned = Command::new(exe)
            .args(&args)
            .arg("--detached")
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn();
        std::process::exit(if spawned.is_ok() { 0 } else { 1 });
    }
    let _ = rustix::process::setsid();
    let mut input = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut input);
    let result = serde_json::from_slice::<Launch>(&input)
        .map_err(|e| format!("the keeper's brief: {e}"))
        .and_then(serve);
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let line = format!("failed: {}\n", e.replace('\n', " | "));
            let _ = std::io::stdout().write_all(line.as_bytes());
            eprintln!("cordon keeper: {e}");
            std::process::exit(1)
        }
    }
}

fn serve(launch: Launch) -> Result<(), String> {
    if launch.version != cordon_sandbox::wire::WIRE_VERSION {
        return Err(format!(
            "the brief is of wire version {}, this keeper reads {}; run the same cordon binary",
            launch.version,
            cordon_sandbox::wire::WIRE_VERSION
        ));
    }
    let state = StateDir::open(&launch.state_dir).map_err(|e| e.to_string())?;
    let policy = match &launch.policy_file {
        Some(p) => Policy::load_file(p),
        None => Policy::load_default(),
    }
    .map_err(|d| format!("loading the policy: {d:?}"))?;
    if policy.digest != launch.provenance.policy_digest {
        return Err("the policy file changed since it was loaded; run the command again".into());
    }
    let mut init = cordon_linux::InitProgram::new(&launch.init.0);
    for a in &launch.init.1 {
        init = init.arg(a);
    }
    let backend = LocalBackend::new(LocalConfig {
        rung: launch.rung,
        policy: Arc::new(policy),
        env: Deployment {
            name: launch.deployment.clone(),
        },
        work_dir: launch.work_dir.clone(),
        init,
    });
    let identity = launch.provenance.identity.clone();
    let k = launch.key.clone();
    let caller = CallerContext::new(
        move || k.scope.clone(),
        {
            let k = launch.key.clone();
            move || k.thread.clone()
        },
        {
            let k = launch.key.clone();
            move || k.agent_dir.clone()
        },
        move || identity.clone(),
    );
    let key = caller.resolve().map_err(|e| e.to_string())?.key;
    let req = AcquireRequest {
        key,
        provenance: launch.provenance.clone(),
        limits: launch.limits,
    };
    let sandbox = backend.acquire_local(&req).map_err(|e| e.to_string())?;
    let result = serve_sandbox(&launch, &state, &sandbox);
    let _ = sandbox.dispose();
    let _ = state.remove(&launch.handle);
    result
}

fn listen(path: &Path) -> Result<OwnedFd, String> {
    use rustix::net::{
        bind, listen, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
    };
    let _ = std::fs::remove_file(path);
    let s = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.to_string())?;
    bind(&s, &SocketAddrUnix::new(path).map_err(|e| e.to_string())?)
        .map_err(|e| format!("binding {}: {e}", path.display()))?;
    listen(&s, 64).map_err(|e| e.to_string())?;
    Ok(s)
}

fn serve_sandbox(
    launch: &Launch,
    state: &StateDir,
    sandbox: &Arc<crate::LocalSandbox>,
) -> Result<(), String> {
    let sock_path = state.socket_path(&launch.handle);
    let listener = listen(&sock_path)?;
    let record = Record {
        version: cordon_sandbox::wire::WIRE_VERSION,
        handle: launch.handle.clone(),
        key: launch.key.clone(),
        owner: launch.owner.clone(),
        backend: crate::name_of(launch.rung).to_string(),
        keeper: ProcessId::current(),
        created: state::now(),
        idle_timeout: launch.idle_timeout,
        max_age: launch.max_age,
        provenance: launch.provenance.clone(),
        work_dir: sandbox.work_dir().to_path_buf(),
        fresh_work_dir: sandbox.fresh_work_dir(),
        guest_work_dir: sandbox.guest_work_dir().to_string(),
        tmp_dir: sandbox.tmp_dir().map(Path::to_path_buf),
        host_id: sandbox.host_id(),
        cgroups: sandbox.cgroup_dirs(),
    };
    state.write(&record).map_err(|e| e.to_string())?;
    // Ready: the acquirer reads this line, then our stdout goes quiet.
    println!("ready");
    let _ = std::io::stdout().flush();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    let started = Instant::now();
    let last = Arc::new(Mutex::new(Instant::now()));
    let busy = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // A dispose request wakes the loop at once through this pipe.
    let (wake_r, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let wake_w = Arc::new(wake_w);
    let idle = Duration::from_secs(launch.idle_timeout);
    let max_age = Duration::from_secs(launch.max_age);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let idle_for = last.lock().map(|l| l.elapsed()).unwrap_or_default();
        if started.elapsed() > max_age {
            tracing::info!(handle = %launch.handle, "maximum age reached; disposing");
            return Ok(());
        }
        if busy.load(Ordering::SeqCst) == 0 && idle_for > idle {
            tracing::info!(handle = %launch.handle, "idle timeout reached; disposing");
            return Ok(());
        }
        let mut fds = [
            rustix::event::PollFd::new(&listener, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(&wake_r, rustix::event::PollFlags::IN),
        ];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(_) => continue,
            Ok(_) => {}
        }
        if !fds[1].revents().is_empty() {
            continue; // `stop` is set
        }
        let Ok(conn) = rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC)
        else {
            continue;
        };
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let sandbox = sandbox.clone();
        let (last, busy, stop, wake) = (last.clone(), busy.clone(), stop.clone(), wake_w.clone());
        let handle = launch.handle.clone();
        std::thread::spawn(move || {
            let Ok(Some((req, fds))) = fdpass::recv::<Request>(&conn) else {
                return;
            };
            let reply = match req {
                Request::Ping => Reply::Pong { handle },
                Request::Dispose => {
                    stop.store(true, Ordering::SeqCst);
                    let _ = sandbox.dispose();
                    Reply::Disposed
                }
                Request::Exec {
                    argv,
                    env,
                    timeout_secs,
                } => {
                    busy.fetch_add(1, Ordering::SeqCst);
                    let reply = exec_for_client(&sandbox, &conn, argv, env, timeout_secs, fds);
                    busy.fetch_sub(1, Ordering::SeqCst);
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                    reply
                }
            };
            let disposed = matches!(reply, Reply::Disposed);
            let _ = fdpass::send(&conn, &reply, &[]);
            if disposed {
                let _ = rustix::io::write(&*wake, b"x");
            }
        });
    }
}

fn exec_for_client(
    sandbox: &crate::LocalSandbox,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    timeout_secs: u64,
    fds: Vec<OwnedFd>,
) -> Reply {
    let mut fds = fds.into_iter();
    let (Some(stdin), Some(stdout), Some(stderr), None) =
        (fds.next(), fds.next(), fds.next(), fds.next())
    else {
        return Reply::Refused(
            "an exec carries exactly three descriptors: stdin, stdout, stderr".into(),
        );
    };
    let req = ExecRequest {
        argv,
        env,
        stdin: Vec::new(),
        timeout: Duration::from_secs(timeout_secs),
        max_output_bytes: 0,
    };
    let started = sandbox.start(
        &req,
        cordon_linux::ExecStdio {
            stdin,
            stdout,
            stderr,
        },
    );
    let started = match started {
        Ok(s) => s,
        Err(e) => return Reply::Refused(e.to_string()),
    };
    // The client sends nothing after its request: the connection turning
    // readable or hung up means the client is gone (killed, or it killed
    // the exec), and the exec and everything it started go with it.
    let cancel = started.canceller();
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| watch_client(conn, &done, &cancel));
        let result = started.wait();
        done.store(true, Ordering::SeqCst);
        result
    });
    match result {
        Ok(s) => Reply::Done(status_to_wire(s)),
        Err(e) => Reply::Refused(e.to_string()),
    }
}

/// Cancels an exec when its client hangs up; returns when `done` is set.
fn watch_client(conn: &OwnedFd, done: &AtomicBool, cancel: &cordon_linux::Cancel) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let tick = Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    while !done.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(conn, PollFlags::IN | PollFlags::RDHUP)];
        if let Ok(n) = poll(&mut fds, Some(&tick)) {
            if n > 0 && !fds[0].revents().is_empty() {
                cancel.cancel();
                return;
            }
        }
    }
}

/// How kept sandboxes are set up.
#[derive(Clone)]
pub struct KeptConfig {
    pub state: StateDir,
    /// The `cordon` binary with [`KEEPER_ARG`].
    pub keeper: cordon_linux::InitProgram,
    /// The policy file the config's policy was loaded from (`None`:
    /// `cordon:default`); the keeper loads it again and checks the digest.
    pub policy_file: Option<PathBuf>,
    pub idle_timeout: Duration,
    pub max_age: Duration,
    /// This owner's name for itself, recorded with each sandbox.
    pub owner: String,
}

/// What a restarted owner does with the sandboxes it made before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRestart {
    /// Keep the live ones (each is attached again by its key on the next
    /// acquire); reclaim those whose keeper is gone or that expired.
    Adopt,
    /// Dispose of every one of them.
    Reclaim,
}

/// The `process` or `container` backend with sandboxes that outlive this
/// process: each is held by a keeper and recorded in the state directory.
pub struct KeptBackend {
    inner: LocalBackend,
    kept: KeptConfig,
}

fn failed(operation: &'static str, reason: impl Into<String>) -> cordon_sandbox::BackendError {
    cordon_sandbox::BackendError::Failed {
        operation,
        reason: reason.into(),
    }
}

fn key_record(key: &cordon_sandbox::SandboxKey) -> KeyRecord {
    KeyRecord {
        scope: key.scope().to_string(),
        thread: key.thread_id().to_string(),
        agent_dir: key.agent_dir().to_string(),
    }
}

const LOCK_WAIT: Duration = Duration::from_secs(120);

impl KeptBackend {
    pub fn new(config: LocalConfig, kept: KeptConfig) -> KeptBackend {
        KeptBackend {
            inner: LocalBackend::new(config),
            kept,
        }
    }

    pub fn state(&self) -> &StateDir {
        &self.kept.state
    }

    /// Run once when an owner starts: finds the sandboxes recorded under
    /// this owner's name and adopts or reclaims them per `policy`. Returns
    /// (kept, disposed). Failures are logged, never fatal.
    pub fn recover(&self, policy: OnRestart) -> (usize, usize) {
        let state = &self.kept.state;
        let Ok((records, _)) = state.list() else {
            return (0, 0);
        };
        let now = state::now();
        let (mut kept, mut gone) = (0, 0);
        for rec in records.into_iter().filter(|r| r.owner == self.kept.owner) {
            let live = !rec.orphaned_or_expired(now) && ping(state, &rec);
            if live && policy == OnRestart::Adopt {
                kept += 1;
                continue;
            }
            let Ok(_lock) = state.lock(&rec.key, LOCK_WAIT) else {
                tracing::warn!(handle = %rec.handle, "recover: the key is locked; skipped");
                continue;
            };
            for f in dispose_record(state, &rec) {
                tracing::warn!(handle = %rec.handle, "recover: {f}");
            }
            gone += 1;
        }
        (kept, gone)
    }

    /// Disposes of every sandbox whose keeper is gone or that is past its
    /// maximum age. Returns how many, and what failed (logged, never fatal).
    pub fn gc(state: &StateDir) -> (usize, Vec<String>) {
        let (records, bad) = match state.list() {
            Ok(l) => l,
            Err(e) => return (0, vec![e.to_string()]),
        };
        let mut failures: Vec<String> = bad
            .iter()
            .map(|p| format!("unreadable record `{}` left alone", p.display()))
            .collect();
        let now = state::now();
        let mut n = 0;
        for rec in records {
            if !rec.orphaned_or_expired(now) {
                continue;
            }
            let Ok(lock) = state.lock(&rec.key, Duration::from_secs(5)) else {
                failures.push(format!(
                    "`{}` is locked by another owner; skipped",
                    rec.handle
                ));
                continue;
            };
            failures.extend(dispose_record(state, &rec));
            lock.unlock_and_remove();
            n += 1;
        }
        (n, failures)
    }

    /// Reclaims what no record names: the cgroups of sandboxes whose owner
    /// was killed before it could dispose (a `cordon run` killed with
    /// SIGKILL), found by name below this process's own cgroup. Returns the
    /// names reclaimed, and what failed.
    pub fn gc_unrecorded() -> (Vec<String>, Vec<String>) {
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for (name, dirs) in cordon_linux::orphaned_sandbox_cgroups() {
            match cordon_linux::reclaim_cgroups(&dirs) {
                Ok(()) => done.push(name),
                Err(e) => failures.push(format!("cgroup `{name}`: {e}")),
            }
        }
        (done, failures)
    }
}

impl cordon_sandbox::Backend for KeptBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn isolation(&self) -> Result<cordon_sandbox::Isolation, cordon_sandbox::IsolationError> {
        self.inner.isolation()
    }
    fn egress(&self) -> cordon_sandbox::Egress {
        self.inner.egress()
    }
    fn capabilities(&self) -> cordon_sandbox::CapabilitySet {
        self.inner.capabilities()
    }
    fn materialises(&self, image: &str) -> Result<(), String> {
        self.inner.materialises(image)
    }

    fn acquire(
        &self,
        req: &AcquireRequest,
    ) -> Result<Arc<dyn Sandbox>, cordon_sandbox::BackendError> {
        let cfg = &self.inner.config;
        if req.provenance.policy_digest != cfg.policy.digest {
            return Err(failed(
                "acquire",
                "the router's policy is not the one this backend enforces",
            ));
        }
        self.inner
            .image_root(req.provenance.spec.image())
            .map_err(|e| failed("acquire", e))?;
        let state = &self.kept.state;
        let key = key_record(&req.key);
        let _lock = state
            .lock(&key, LOCK_WAIT)
            .map_err(|e| failed("acquire", e.to_string()))?;
        if let Some(rec) = state
            .find(&key)
            .map_err(|e| failed("acquire", e.to_string()))?
        {
            let live = !rec.orphaned_or_expired(state::now());
            if live && ping(state, &rec) {
                let mut what = Vec::new();
                if rec.backend != self.inner.name() {
                    what.push(format!("backend (`{}`)", rec.backend));
                }
                let made = &rec.provenance;
                let differs = made.spec.differences(&req.provenance.spec);
                if !differs.is_empty() {
                    what.push(format!("spec ({})", differs.join(", ")));
                }
                if made.identity != req.provenance.identity {
                    what.push(format!(
                        "identity (`{}/{}`)",
                        made.identity.namespace, made.identity.name
                    ));
                }
                if made.policy_digest != req.provenance.policy_digest {
                    what.push("policy (its digest differs)".to_string());
                }
                if !what.is_empty() {
                    return Err(failed(
                        "acquire",
                        format!(
                            "sandbox `{}` exists for this key but was created for another {}; it is not handed back\nhelp: dispose of it first (`cordon sandbox down {}`)",
                            rec.handle,
                            what.join(", "),
                            rec.handle
                        ),
                    ));
                }
                return KeptSandbox::new(state.clone(), rec)
                    .map(|s| Arc::new(s) as Arc<dyn Sandbox>)
                    .map_err(|e| failed("acquire", e.to_string()));
            }
            // A live keeper that did not answer a ping is not asked again.
            let failures = if live {
                force_reclaim(state, &rec)
            } else {
                dispose_record(state, &rec)
            };
            for f in failures {
                tracing::warn!(handle = %rec.handle, "reclaiming a sandbox: {f}");
            }
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let handle = format!(
            "{}-{}-{:x}{:x}",
            self.inner.name(),
            &key.id()[..12],
            std::process::id() % 0x10000,
            (stamp ^ SEQ.fetch_add(1, Ordering::Relaxed) as u32) % 0x10000
        );
        let launch = Launch {
            version: cordon_sandbox::wire::WIRE_VERSION,
            state_dir: state.path().to_path_buf(),
            handle,
            key,
            owner: self.kept.owner.clone(),
            rung: cfg.rung,
            policy_file: self.kept.policy_file.clone(),
            deployment: cfg.env.name.clone(),
            provenance: req.provenance.clone(),
            limits: req.limits,
            work_dir: cfg.work_dir.clone(),
            init: (
                cfg.init.path.clone(),
                cfg.init
                    .args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            ),
            idle_timeout: self.kept.idle_timeout.as_secs().max(1),
            max_age: self.kept.max_age.as_secs().max(1),
        };
        let rec = spawn(&self.kept.keeper, &launch, state).map_err(|e| {
            let _ = state.remove(&launch.handle);
            failed("acquire", e)
        })?;
        KeptSandbox::new(state.clone(), rec)
            .map(|s| Arc::new(s) as Arc<dyn Sandbox>)
            .map_err(|e| failed("acquire", e.to_string()))
    }

    fn dispose(
        &self,
        key: &cordon_sandbox::SandboxKey,
    ) -> Result<bool, cordon_sandbox::BackendError> {
        let state = &self.kept.state;
        let key = key_record(key);
        let lock = state
            .lock(&key, LOCK_WAIT)
            .map_err(|e| failed("dispose", e.to_string()))?;
        match state
            .find(&key)
            .map_err(|e| failed("dispose", e.to_string()))?
        {
            Some(rec) => {
                for f in dispose_record(state, &rec) {
                    tracing::warn!(handle = %rec.handle, "dispose: {f}");
                }
                lock.unlock_and_remove();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn dispose_scope(
        &self,
        scope: &str,
        thread_id: &str,
    ) -> Result<usize, cordon_sandbox::BackendError> {
        dispose_scope(&self.kept.state, Some(self.inner.name()), scope, thread_id)
            .map_err(|e| failed("dispose_scope", e))
    }
}

/// Disposes of every recorded sandbox of `scope`/`thread_id` (of one
/// backend, or of all): found from the state directory, so any process
/// reclaims what another created. Failures are logged, never fatal.
pub fn dispose_scope(
    state: &StateDir,
    backend: Option<&str>,
    scope: &str,
    thread_id: &str,
) -> Result<usize, String> {
    let (records, _) = state.list().map_err(|e| e.to_string())?;
    let mut n = 0;
    for rec in records {
        if rec.key.scope != scope || rec.key.thread != thread_id {
            continue;
        }
        if backend.is_some_and(|b| b != rec.backend) {
            continue;
        }
        let Ok(lock) = state.lock(&rec.key, LOCK_WAIT) else {
            tracing::warn!(handle = %rec.handle, "dispose_scope: the key is locked; skipped");
            continue;
        };
        for f in dispose_record(state, &rec) {
            tracing::warn!(handle = %rec.handle, "dispose_scope: {f}");
        }
        lock.unlock_and_remove();
        n += 1;
    }
    Ok(n)
}
