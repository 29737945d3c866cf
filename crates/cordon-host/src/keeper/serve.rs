//! The keeper process: builds one sandbox of any registered backend from
//! its brief and serves it on a socket until it is disposed, idle too long
//! or too old.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_linux::fdpass;
use cordon_policy::Policy;
use cordon_sandbox::{
    AcquireRequest, Attach, Backend, CallerContext, ExecEvent, ExecRequest, Killer, Registry,
    Sandbox, Stream,
};

use super::wire::{error_to_wire, status_to_wire, Launch, Reply, Request};
use crate::state::{self, ProcessId, Record, StateDir};

/// The keeper's entry point (the binary's hidden [`super::KEEPER_ARG`]
/// subcommand); never returns. `registry` is the binary's own: a keeper
/// serves whatever backend its brief names, if the binary registered it.
/// The first invocation starts a detached copy of itself and exits, so the
/// acquirer is never left with a long-lived child.
pub fn keeper_main(registry: &Registry) -> ! {
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
        .map_err(|e| Failure::from(format!("the keeper's brief: {e}")))
        .and_then(|l| serve(registry, l));
    match result {
        Ok(()) => std::process::exit(0),
        Err(Failure { kind, message: e }) => {
            // The kind travels with the reason (`failed[refused]: ...`):
            // the acquirer answers a policy's refusal as one, not as a
            // backend's failure.
            let line = format!("failed[{}]: {}\n", kind.as_str(), e.replace('\n', " | "));
            let _ = std::io::stdout().write_all(line.as_bytes());
            eprintln!("cordon keeper: {e}");
            std::process::exit(1)
        }
    }
}

/// Why a keeper did not start its sandbox, and the kind of that.
pub(crate) struct Failure {
    pub(crate) kind: cordon_sandbox::ErrorKind,
    pub(crate) message: String,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            kind: cordon_sandbox::ErrorKind::Failed,
            message,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

fn serve(registry: &Registry, launch: Launch) -> Result<(), Failure> {
    // The handle on the command line is what cleanup checks before it
    // signals this process: it must be the one this keeper keeps.
    let named = std::env::args().any(|a| a.strip_prefix(super::HANDLE_ARG) == Some(&launch.handle));
    if !named {
        return Err(Failure::from(format!(
            "the keeper was started without `{}{}` on its command line; start it through `keeper::spawn`",
            super::HANDLE_ARG,
            launch.handle
        )));
    }
    if launch.version != cordon_sandbox::wire::WIRE_VERSION {
        return Err(Failure::from(format!(
            "the brief is of wire version {}, this keeper reads {}; run the same cordon binary",
            launch.version,
            cordon_sandbox::wire::WIRE_VERSION
        )));
    }
    let state = StateDir::open(&launch.state_dir).map_err(|e| e.to_string())?;
    let policy = match &launch.policy_file {
        Some(p) => Policy::load_file(p),
        None => Policy::load_default(),
    }
    .map_err(|d| format!("loading the policy: {}", d.render()))?;
    if policy.digest != launch.provenance.policy_digest {
        return Err("the policy file changed since it was loaded; run the command again".into());
    }
    let policy = Arc::new(policy);
    let backend = registry
        .require(&launch.backend)?
        .build(&launch.setup, policy.clone())?;
    let identity = launch.provenance.identity.clone();
    let key = launch.key.clone();
    let caller = CallerContext::new(
        {
            let k = key.clone();
            move || k.scope.clone()
        },
        {
            let k = key.clone();
            move || k.thread.clone()
        },
        move || key.agent_dir.clone(),
        move || identity.clone(),
    );
    let key = caller.resolve().map_err(|e| e.to_string())?.key;
    let brokered = launch
        .brokered
        .iter()
        .cloned()
        .map(crate::keeper::wire::WireBrokered::into_brokered)
        .collect::<Result<Vec<_>, _>>()?;
    let req = AcquireRequest {
        key: key.clone(),
        provenance: launch.provenance.clone(),
        limits: launch.limits,
        brokered,
    };
    let sandbox = backend.acquire(&req).map_err(|e| Failure {
        kind: e.kind(),
        message: e.to_string(),
    })?;
    // Every exec a client asks for is decided here, whichever backend.
    let sandbox = cordon_sandbox::guard::guard(
        sandbox,
        policy,
        cordon_policy::Deployment {
            name: launch.setup.deployment.clone(),
        },
        launch.limits,
    );
    let result = serve_sandbox(&launch, &state, &backend, &key, &sandbox);
    drop(sandbox);
    let _ = backend.dispose(&key);
    let _ = state.remove(&launch.handle);
    // Gone by itself (idle, too old): its key's lock file goes too, unless
    // an owner holds it (that owner removes it).
    state.remove_lock_if_unused(&launch.key);
    result.map_err(Failure::from)
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

/// A flag set when the keeper is asked to end (a service manager's
/// SIGTERM, a Ctrl-C): the serving loop stops and the sandbox is disposed
/// of as at its idle timeout, not left for `cordon sandbox gc`.
fn asked_to_end() -> Result<Arc<AtomicBool>, String> {
    let term = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, term.clone())
            .map_err(|e| format!("cannot watch for signal {signal}: {e}"))?;
    }
    Ok(term)
}

fn serve_sandbox(
    launch: &Launch,
    state: &StateDir,
    backend: &Arc<dyn Backend>,
    key: &cordon_sandbox::SandboxKey,
    sandbox: &Arc<dyn Sandbox>,
) -> Result<(), String> {
    let sock_path = state.socket_path(&launch.handle);
    let listener = listen(&sock_path)?;
    state
        .write(&record_of(launch, sandbox))
        .map_err(|e| e.to_string())?;
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
    let term = asked_to_end()?;
    // A dispose request wakes the loop at once through this pipe.
    let (wake_r, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let wake_w = Arc::new(wake_w);
    let idle = Duration::from_secs(launch.idle_timeout);
    let max_age = Duration::from_secs(launch.max_age);
    let mut idle_paused = false;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if term.load(Ordering::SeqCst) {
            tracing::info!(handle = %launch.handle, "asked to end; disposing");
            return Ok(());
        }
        let idle_for = last.lock().map(|l| l.elapsed()).unwrap_or_default();
        if started.elapsed() > max_age {
            tracing::info!(handle = %launch.handle, "maximum age reached; disposing");
            return Ok(());
        }
        if busy.load(Ordering::SeqCst) == 0 && idle_for > idle {
            if !on_idle(launch, sandbox, idle_for, idle, &mut idle_paused) {
                return Ok(());
            }
        } else if idle_for <= idle {
            // A request came (an exec resumed it): paused again when idle.
            idle_paused = false;
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
        let (sandbox, backend, key) = (sandbox.clone(), backend.clone(), key.clone());
        let (last, busy, stop, wake) = (last.clone(), busy.clone(), stop.clone(), wake_w.clone());
        let handle = launch.handle.clone();
        std::thread::spawn(move || {
            let Ok(Some((req, fds))) = fdpass::recv::<Request>(&conn) else {
                return;
            };
            let reply = match req {
                Request::Ping => Reply::Pong { handle },
                Request::Port {
                    port,
                    listen,
                    caller,
                } => {
                    let req = cordon_sandbox::PortRequest {
                        port,
                        listen,
                        caller,
                    };
                    return port_for_client(&*sandbox, &req, &conn);
                }
                Request::Resize { .. } => error_to_wire(&cordon_sandbox::SandboxError::Invalid {
                    reason: "a resize belongs on an exec's connection".into(),
                }),
                // The loop is stopped only once the sandbox is gone and the
                // client has its answer: stopping first let the keeper exit
                // mid-dispose (a slow backend's, gVisor's pod takes seconds)
                // and the client found the connection closed unanswered.
                Request::Dispose => {
                    let _ = backend.dispose(&key);
                    Reply::Disposed
                }
                Request::Pause { paused } => pause_for_client(&*sandbox, paused),
                Request::Checkpoint { .. } | Request::CopyFilesOut { .. } => {
                    snapshot_for_client(&*sandbox, req)
                }
                Request::Watch { path, recursive } => {
                    watch_for_client(&*sandbox, &path, recursive, fds)
                }
                Request::Egress { allow, closed, by } => {
                    egress_for_client(&*sandbox, &allow, closed, &by)
                }
                Request::WriteFile { .. }
                | Request::Stat { .. }
                | Request::ReadFile { .. }
                | Request::ListDir { .. }
                | Request::Files { .. }
                | Request::Workspace { .. } => {
                    busy.fetch_add(1, Ordering::SeqCst);
                    let reply = file_for_client(&*sandbox, req, fds);
                    busy.fetch_sub(1, Ordering::SeqCst);
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                    reply
                }
                Request::Exec {
                    argv,
                    env,
                    timeout_secs,
                    tty,
                } => {
                    busy.fetch_add(1, Ordering::SeqCst);
                    let attach = tty.map_or_else(Attach::streamed_stdin, Attach::terminal);
                    let reply =
                        exec_for_client(&*sandbox, &conn, argv, env, timeout_secs, attach, fds);
                    busy.fetch_sub(1, Ordering::SeqCst);
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                    reply
                }
            };
            let disposed = matches!(reply, Reply::Disposed);
            let _ = fdpass::send(&conn, &reply, &[]);
            if disposed {
                stop.store(true, Ordering::SeqCst);
                let _ = rustix::io::write(&*wake, b"x");
            }
        });
    }
}

/// Opens a port of the sandbox for a client (the guard decides it with
/// the policy's ingress surface) and sends the connected socket back with
/// the answer, or the refusal.
fn port_for_client(sandbox: &dyn Sandbox, req: &cordon_sandbox::PortRequest, conn: &OwnedFd) {
    use std::os::fd::AsFd;
    let _ = match sandbox.open_port(req) {
        Ok(stream) => fdpass::send(conn, &Reply::PortOpen, &[stream.as_fd()]),
        Err(e) => fdpass::send(conn, &super::wire::error_to_wire(&e), &[]),
    };
}

/// Freezes (`true`) or thaws the sandbox for a client.
fn pause_for_client(sandbox: &dyn Sandbox, paused: bool) -> Reply {
    let done = if paused {
        sandbox.pause()
    } else {
        sandbox.resume()
    };
    match done {
        Ok(()) => Reply::Paused { paused },
        Err(e) => super::wire::error_to_wire(&e),
    }
}

/// Starts a watch for a client: its events are written to the pipe it
/// attached, one JSON line each, by a thread of their own until the watch
/// ends (its last line says why) or the client closes its end. The
/// keeper's exit (the sandbox disposed of) closes the pipe: the client's
/// end of the watch.
fn watch_for_client(
    sandbox: &dyn Sandbox,
    path: &str,
    recursive: bool,
    fds: Vec<OwnedFd>,
) -> Reply {
    let mut fds = fds.into_iter();
    let (Some(pipe), None) = (fds.next(), fds.next()) else {
        return Reply::Error {
            kind: cordon_sandbox::ErrorKind::Invalid,
            message: "a watch carries exactly one descriptor".into(),
            rules: Vec::new(),
        };
    };
    let mut source = match sandbox.watch(path, recursive) {
        Ok(s) => s,
        Err(e) => return super::wire::error_to_wire(&e),
    };
    std::thread::spawn(move || {
        let mut out = std::fs::File::from(pipe);
        loop {
            let line = match source.next(Duration::from_millis(500)) {
                cordon_sandbox::Next::Event(e) => serde_json::to_string(&e),
                cordon_sandbox::Next::Quiet => {
                    if super::watch::reader_gone(&out) {
                        return;
                    }
                    continue;
                }
                cordon_sandbox::Next::Ended(reason) => {
                    let _ = writeln!(out, "{}", super::watch::ended_line(&reason));
                    return;
                }
            };
            let Ok(line) = line else { continue };
            if writeln!(out, "{line}").is_err() {
                return;
            }
        }
    });
    Reply::Watching
}

/// Replaces the sandbox's egress allowlist for a client: the entries read
/// here (a bad one, or one listed twice, closes egress: never the old list
/// left in force), then the sandbox's own change (its guard checks the
/// policy for the sandbox's identity, and closes egress on a deny). A
/// client whose own replacement did not load sends why (`closed`): egress
/// is closed with that reason.
fn egress_for_client(
    sandbox: &dyn Sandbox,
    allow: &[String],
    closed: Option<String>,
    by: &str,
) -> Reply {
    if let Some(why) = closed {
        // The client says why, and what its own caller is told.
        return match sandbox.change_egress(cordon_sandbox::EgressChange::Close(why), by) {
            Ok(generation) => Reply::Egress { generation },
            Err(e) => error_to_wire(&e),
        };
    }
    let (change, bad) = match cordon_sandbox::EgressEntry::parse_list(allow) {
        Ok(list) => (cordon_sandbox::EgressChange::Replace(list), None),
        Err(why) => (cordon_sandbox::EgressChange::Close(why.clone()), Some(why)),
    };
    match (sandbox.change_egress(change, by), bad) {
        (Ok(generation), None) => Reply::Egress { generation },
        (Err(e), None) => error_to_wire(&e),
        // The list did not load: closed (or, with no route out, nothing to
        // close); either way the error is the list's.
        (r, Some(why)) => Reply::Error {
            kind: cordon_sandbox::ErrorKind::Invalid,
            message: match r {
                Err(cordon_sandbox::SandboxError::Invalid { reason }) => {
                    format!("{why}; {reason}")
                }
                _ => format!(
                    "{why}; the sandbox's egress is now closed (nothing is carried) until a change that loads"
                ),
            },
            rules: Vec::new(),
        },
    }
}

/// Serves one file request for a client, through the sandbox's own file
/// calls (its confinement holds as for any caller); bulk bytes travel in
/// the descriptor the client attached, never in a message.
fn file_for_client(sandbox: &dyn Sandbox, req: Request, fds: Vec<OwnedFd>) -> Reply {
    use super::wire::{kind_to_wire, WireEntry, WireStat, MAX_FILE_BYTES};
    let bad = |message: String| Reply::Error {
        kind: cordon_sandbox::ErrorKind::Invalid,
        message,
        rules: Vec::new(),
    };
    let mut fds = fds.into_iter();
    let one = |fds: &mut std::vec::IntoIter<OwnedFd>| match (fds.next(), fds.next()) {
        (Some(fd), None) => Some(std::fs::File::from(fd)),
        _ => None,
    };
    let err = |e: cordon_sandbox::SandboxError| super::wire::error_to_wire(&e);
    match req {
        Request::WriteFile { path, mode, len } => {
            let Some(f) = one(&mut fds) else {
                return bad("a file write carries exactly one descriptor".into());
            };
            if len > MAX_FILE_BYTES {
                return bad(format!(
                    "a file written through a keeper is at most {MAX_FILE_BYTES} bytes"
                ));
            }
            let mut bytes = Vec::new();
            match f.take(len + 1).read_to_end(&mut bytes) {
                Ok(n) if n as u64 == len => {}
                Ok(n) => return bad(format!("the file held {n} bytes, not the {len} announced")),
                Err(e) => return bad(format!("reading the client's file: {e}")),
            }
            match sandbox.write_file(&path, &bytes, mode) {
                Ok(()) => Reply::Written,
                Err(e) => err(e),
            }
        }
        Request::Stat { path } => {
            if fds.next().is_some() {
                return bad("a stat carries no descriptor".into());
            }
            match sandbox.stat_no_follow(&path) {
                Ok(stat) => Reply::Stat {
                    stat: stat.map(|s| WireStat {
                        kind: kind_to_wire(s.kind),
                        size: s.size,
                        mode: s.mode,
                    }),
                },
                Err(e) => err(e),
            }
        }
        Request::ReadFile { path, max } => {
            let Some(mut f) = one(&mut fds) else {
                return bad("a file read carries exactly one descriptor".into());
            };
            match sandbox.read_file(&path, max) {
                Ok(r) => {
                    let keep = r
                        .bytes
                        .len()
                        .min(usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX));
                    match f.write_all(&r.bytes[..keep]) {
                        Ok(()) => Reply::Read {
                            size: r.size,
                            len: keep as u64,
                        },
                        Err(e) => bad(format!("writing to the client's file: {e}")),
                    }
                }
                Err(e) => err(e),
            }
        }
        Request::ListDir { path } => {
            let Some(mut f) = one(&mut fds) else {
                return bad("a listing carries exactly one descriptor".into());
            };
            match sandbox.list_dir(&path) {
                Ok(entries) => {
                    let wire: Vec<WireEntry> = entries
                        .into_iter()
                        .map(|e| WireEntry {
                            name: e.name,
                            kind: kind_to_wire(e.kind),
                        })
                        .collect();
                    let json = match serde_json::to_vec(&wire) {
                        Ok(j) => j,
                        Err(e) => return bad(e.to_string()),
                    };
                    match f.write_all(&json) {
                        Ok(()) => Reply::Listed {
                            len: json.len() as u64,
                        },
                        Err(e) => bad(format!("writing to the client's file: {e}")),
                    }
                }
                Err(e) => err(e),
            }
        }
        Request::Workspace { apply } => {
            let Some(mut f) = one(&mut fds) else {
                return bad("a workspace request carries exactly one descriptor".into());
            };
            let json = match apply {
                None => sandbox
                    .workspace_diff()
                    .map(|c| serde_json::to_vec(&c).unwrap_or_default()),
                Some(only) => sandbox
                    .workspace_apply(&only)
                    .map(|r| serde_json::to_vec(&r).unwrap_or_default()),
            };
            match json {
                Ok(json) => match f.write_all(&json) {
                    Ok(()) => Reply::Workspace {
                        len: json.len() as u64,
                    },
                    Err(e) => bad(format!("writing to the client's file: {e}")),
                },
                Err(e) => err(e),
            }
        }
        Request::Files { len } => {
            let Some(f) = one(&mut fds) else {
                return bad("a files request carries exactly one descriptor".into());
            };
            files_for_client(sandbox, f, len)
        }
        _ => bad("not a file request".into()),
    }
}

/// The files API for a client: the operation read from its file, the
/// answer written back in its place.
fn files_for_client(sandbox: &dyn Sandbox, mut f: std::fs::File, len: u64) -> Reply {
    use std::io::{Read, Seek, Write};
    let bad = |message: String| Reply::Error {
        kind: cordon_sandbox::ErrorKind::Invalid,
        message,
        rules: Vec::new(),
    };
    if len > super::wire::MAX_FILES_JSON {
        return bad(format!(
            "a files operation of {len} bytes is over the {}-byte limit",
            super::wire::MAX_FILES_JSON
        ));
    }
    let mut json = Vec::new();
    let read = f
        .seek(std::io::SeekFrom::Start(0))
        .and_then(|_| (&mut f).take(len).read_to_end(&mut json));
    if let Err(e) = read {
        return bad(format!("reading the client's file: {e}"));
    }
    let op: cordon_sandbox::FileOp = match serde_json::from_slice(&json) {
        Ok(op) => op,
        Err(e) => return bad(format!("the files operation: {e}")),
    };
    let answer = match sandbox.files(&op) {
        Ok(a) => a,
        Err(e) => return super::wire::error_to_wire(&e),
    };
    // A read's bytes go raw: as JSON they were base64, a third larger and
    // encoded and decoded on each side.
    let (out, reply) = match answer {
        cordon_sandbox::FileAnswer::Read { data, size } => {
            let len = data.len() as u64;
            (data, Reply::FileRead { size, len })
        }
        other => {
            let out = serde_json::to_vec(&other).unwrap_or_default();
            let len = out.len() as u64;
            (out, Reply::Files { len })
        }
    };
    let written = f
        .set_len(0)
        .and_then(|()| f.seek(std::io::SeekFrom::Start(0)))
        .and_then(|_| f.write_all(&out));
    match written {
        Ok(()) => reply,
        Err(e) => bad(format!("writing to the client's file: {e}")),
    }
}

/// Runs one exec for a client: its stdin copied in from the client's pipe,
/// its output copied out to the client's pipes (the client holds the caps),
/// killed when the client hangs up.
fn exec_for_client(
    sandbox: &dyn Sandbox,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    timeout_secs: u64,
    attach: Attach,
    fds: Vec<OwnedFd>,
) -> Reply {
    let mut fds = fds.into_iter();
    let (Some(stdin), Some(stdout), Some(stderr), None) =
        (fds.next(), fds.next(), fds.next(), fds.next())
    else {
        return Reply::Error {
            kind: cordon_sandbox::ErrorKind::Invalid,
            message: "an exec carries exactly three descriptors: stdin, stdout, stderr".into(),
            rules: Vec::new(),
        };
    };
    let req = ExecRequest {
        argv,
        env,
        stdin: Vec::new(),
        timeout: Duration::from_secs(timeout_secs),
        max_output_bytes: u64::MAX,
    };
    let mut handle = match sandbox.start_exec(&req, attach) {
        Ok(h) => h,
        Err(e) => return error_to_wire(&e),
    };
    if let Some(mut input) = handle.take_stdin() {
        // Ends when the client closes its end (or the exec stops reading).
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::fs::File::from(stdin), &mut input);
        });
    }
    let killer = handle.killer();
    let resizer = handle.resizer();
    // The watcher sleeps in `poll` on the client's connection and on this
    // pipe: the exec's end wakes it at once (a timed poll would add its
    // tick to every exec).
    let Ok((wake_r, wake_w)) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) else {
        killer.kill();
        return Reply::Error {
            kind: cordon_sandbox::ErrorKind::Failed,
            message: "the keeper could not make a pipe to watch its client".into(),
            rules: Vec::new(),
        };
    };
    let (mut out, mut err) = (std::fs::File::from(stdout), std::fs::File::from(stderr));
    let end = std::thread::scope(|scope| {
        scope.spawn(|| watch_client(conn, &wake_r, &killer, resizer.as_ref()));
        let end = loop {
            match handle.next_event() {
                // A client that stopped reading loses output, not the exec.
                Some(ExecEvent::Output(Stream::Stdout, b)) => {
                    let _ = out.write_all(&b);
                }
                Some(ExecEvent::Output(Stream::Stderr, b)) => {
                    let _ = err.write_all(&b);
                }
                Some(ExecEvent::Exited(end)) => break end,
                None => {
                    break Err(cordon_sandbox::SandboxError::Failed {
                        operation: "exec",
                        reason: "the exec's events ended early".into(),
                    })
                }
            }
        };
        let _ = rustix::io::write(&wake_w, b"x");
        end
    });
    drop((out, err));
    match end {
        Ok(end) => Reply::Done(status_to_wire(end.status)),
        Err(e) => error_to_wire(&e),
    }
}

/// Kills an exec when its client hangs up; returns when `done` turns
/// readable (the exec ended). After its request the client sends only
/// terminal resizes: the connection turning readable with anything else,
/// or hung up, means the client is gone (killed, or it killed the exec),
/// and the exec and everything it started go with it.
fn watch_client(
    conn: &OwnedFd,
    done: &OwnedFd,
    killer: &Killer,
    resizer: Option<&cordon_sandbox::Resizer>,
) {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds = [
            PollFd::new(conn, PollFlags::IN | PollFlags::RDHUP),
            PollFd::new(done, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            // Unable to watch the client: its exec does not outlive it
            // unwatched.
            Err(_) => {
                killer.kill();
                return;
            }
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        let revents = fds[0].revents();
        if revents.is_empty() {
            continue;
        }
        let hung_up = revents.intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR);
        if !hung_up {
            if let Ok(Some((Request::Resize { size }, _))) = fdpass::recv::<Request>(conn) {
                if let Some(r) = resizer {
                    let _ = r(size);
                }
                continue;
            }
        }
        killer.kill();
        return;
    }
}

/// `on_idle: pause`, at the end: the sandbox's files kept as a snapshot
/// (named `idle-HANDLE`) in the store `how` names, so it can be restored;
/// one that cannot be taken is logged, and the sandbox goes all the same
/// (its idle time is up).
fn idle_snapshot(launch: &Launch, sandbox: &Arc<dyn Sandbox>, how: &super::IdlePause) {
    let Some(dir) = &how.snapshots else { return };
    let name: String = format!("idle-{}", launch.handle).chars().take(64).collect();
    let taken = crate::snapshots::SnapshotStore::open(dir, how.quota_per_scope).and_then(|st| {
        st.take(
            &**sandbox,
            &launch.backend,
            &launch.key.scope,
            &launch.key.thread,
            Some(&name),
            crate::snapshots::Capture::FilesLeftPaused,
        )
    });
    match taken {
        Ok((snap, _)) => {
            tracing::info!(handle = %launch.handle, snapshot = %snap.id, "its files are kept as snapshot `{name}`")
        }
        Err(e) => {
            tracing::warn!(handle = %launch.handle, "its files could not be kept as a snapshot: {e}")
        }
    }
}

/// The idle timeout is reached: `false` when the sandbox goes now (the
/// default; or `on_idle: pause` idle twice over, its files kept first; or
/// a sandbox that cannot pause); `true` when it stays, paused.
fn on_idle(
    launch: &Launch,
    sandbox: &Arc<dyn Sandbox>,
    idle_for: Duration,
    idle: Duration,
    idle_paused: &mut bool,
) -> bool {
    let Some(how) = &launch.on_idle_pause else {
        tracing::info!(handle = %launch.handle, "idle timeout reached; disposing");
        return false;
    };
    if idle_for > idle * 2 {
        idle_snapshot(launch, sandbox, how);
        tracing::info!(handle = %launch.handle, "paused and idle as long again; disposing");
        return false;
    }
    if *idle_paused {
        return true;
    }
    match sandbox.pause() {
        Ok(()) => {
            *idle_paused = true;
            tracing::info!(handle = %launch.handle, "idle timeout reached; paused");
            true
        }
        Err(e) => {
            tracing::info!(handle = %launch.handle, "idle timeout reached; it cannot pause ({e}); disposing");
            false
        }
    }
}

/// The record a keeper writes for its sandbox (this process its keeper).
fn record_of(launch: &Launch, sandbox: &Arc<dyn Sandbox>) -> Record {
    Record {
        version: cordon_sandbox::wire::WIRE_VERSION,
        handle: launch.handle.clone(),
        key: launch.key.clone(),
        owner: launch.owner.clone(),
        backend: launch.backend.clone(),
        keeper: ProcessId::current(),
        created: state::now(),
        idle_timeout: launch.idle_timeout,
        max_age: launch.max_age,
        provenance: launch.provenance.clone(),
        host_work_dir: sandbox.host_work_dir(),
        residue: sandbox.residue(),
    }
}

/// A snapshot's part the backend takes: its processes saved, or the
/// files of a sandbox whose files the host cannot open copied out.
fn snapshot_for_client(sandbox: &dyn cordon_sandbox::Sandbox, req: Request) -> Reply {
    match req {
        Request::Checkpoint { into } => sandbox.checkpoint(&into).map_or_else(
            |e| error_to_wire(&e),
            |processes| Reply::Checkpointed { processes },
        ),
        Request::CopyFilesOut {
            into,
            room,
            max_entries,
        } => sandbox
            .copy_files_out(&into, room, max_entries)
            .map_or_else(
                |e| error_to_wire(&e),
                |skipped| Reply::FilesCopied { skipped },
            ),
        _ => error_to_wire(&cordon_sandbox::SandboxError::Invalid {
            reason: "not a snapshot request".into(),
        }),
    }
}
