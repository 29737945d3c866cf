//! Kept sandboxes, for any registered backend: each one is held by a
//! keeper process of its own, so it outlives the process that asked for it
//! and is found again through the state directory ([`crate::state`]),
//! never through anyone's memory.
//!
//! ```text
//! acquirer ──spawn──> BINARY __sandbox-keeper ──spawn──> keeper (detached, setsid)
//!   (KeptBackend)      brief on stdin (wire::Launch)   │ registry → backend → sandbox
//!   clients ──SOCK_SEQPACKET STATE/sandboxes/H.sock──> │ Exec (+ stdio pipes), Ping, Dispose
//! ```
//!
//! The keeper rebuilds the backend from its registration and the
//! serialisable [`cordon_sandbox::BackendSetup`], acquires the one sandbox
//! with the provenance and limits the acquirer's router decided, and serves
//! it through the [`cordon_sandbox::Sandbox`] trait: a new backend gets
//! kept sandboxes (state directory, key locks, idle timeout, max age,
//! adopt/reclaim, gc) by registering, with no keeper code of its own. A
//! keeper that dies is cleaned up after from the residue its sandbox
//! reported, by the registration's `reclaim`.
//!
//! File operations (`put`, reads for collection) do not go through the
//! keeper: a backend whose work dir is a host directory records it, and the
//! client works on it directly with the same confined (`openat2`)
//! operations the in-process sandbox uses.

mod client;
mod dial;
mod serve;
mod sweep;
mod watch;
pub mod wire;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_policy::Policy;
use cordon_sandbox::{
    AcquireRequest, BackendRegistration, BackendSetup, Registry, Sandbox, SelfCommand,
};

pub use client::KeptSandbox;
use dial::ask;
pub use serve::keeper_main;
pub use sweep::{reclaim_dead_keepers, Reclaimed};
pub use wire::{IdlePause, Launch};
use wire::{Reply, Request, WireBrokered};

use crate::state::{self, KeyRecord, ProcessId, Record, StateDir};

/// The hidden first argument that makes the `cordon` binary a keeper.
pub const KEEPER_ARG: &str = "__sandbox-keeper";

/// Whether the keeper of `rec` answers.
pub fn ping(state: &StateDir, rec: &Record) -> bool {
    rec.keeper.alive()
        && matches!(ask(&state.socket_path(&rec.handle), &Request::Ping, &[]), Ok(Reply::Pong { handle }) if handle == rec.handle)
}

/// The argument that names, on a keeper's command line, the sandbox it
/// keeps (`--handle=HANDLE`): what lets root-run cleanup tell that keeper
/// from any other process before it signals one.
pub const HANDLE_ARG: &str = "--handle=";

/// Whether `p` is (now) the keeper of sandbox `handle`, run by this user:
/// its command line carries [`KEEPER_ARG`] and `--handle=HANDLE` as
/// [`spawn`] starts it, and its real and effective uids are ours. `Err`
/// says what it is instead.
pub fn check_keeper(p: &ProcessId, handle: &str) -> Result<(), String> {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid))
        .map_err(|e| format!("process {} cannot be looked at ({e})", p.pid))?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let marked = args.iter().any(|a| a == KEEPER_ARG)
        && args
            .iter()
            .any(|a| a.strip_prefix(HANDLE_ARG) == Some(handle));
    if !marked {
        let shown: String = args.join(" ").chars().take(160).collect();
        return Err(format!(
            "process {} (`{shown}`) is not the keeper of `{handle}`",
            p.pid
        ));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid))
        .map_err(|e| format!("process {} cannot be looked at ({e})", p.pid))?;
    let me = rustix::process::geteuid().as_raw().to_string();
    let uids: Vec<&str> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|l| l.split_whitespace().take(2).collect())
        .unwrap_or_default();
    if uids.len() != 2 || uids.iter().any(|u| *u != me) {
        return Err(format!(
            "process {} runs as uid {uids:?}, not as this user ({me})",
            p.pid
        ));
    }
    if !p.alive() {
        return Err(format!("process {} is no longer the one recorded", p.pid));
    }
    Ok(())
}

/// Checks a record before anything is killed or removed on its word: a
/// live keeper it names is that sandbox's keeper ([`check_keeper`]), and
/// its residue is one its backend makes (the registration's `vet`). `Err`:
/// the record is left alone; the message says why and what to do.
pub fn vet_record(state: &StateDir, registry: &Registry, rec: &Record) -> Result<(), String> {
    let refuse = |why: String| {
        format!(
            "record `{}` left alone, nothing killed or removed: {why}\nhelp: if that sandbox is gone, remove the record (`{}`) and what it names yourself; if the record is right, stop its keeper and run `cordon sandbox gc` again",
            rec.handle,
            state.record_path(&rec.handle).display()
        )
    };
    if rec.keeper.alive() {
        check_keeper(&rec.keeper, &rec.handle).map_err(refuse)?;
    }
    if let Some(r) = registry.get(&rec.backend) {
        (r.vet)(&rec.residue, rec.keeper.pid).map_err(refuse)?;
    }
    Ok(())
}

/// Disposes of the sandbox of `rec`: asks its keeper, and whatever the
/// keeper did not do (it is gone, or does not answer) is reclaimed from
/// the record. Best effort; returns what failed, for the log. A record
/// that fails [`vet_record`] is left alone (the reason is returned).
pub fn dispose_record(state: &StateDir, registry: &Registry, rec: &Record) -> Vec<String> {
    if let Err(why) = vet_record(state, registry, rec) {
        return vec![why];
    }
    let mut note = None;
    if rec.keeper.alive() {
        match ask(&state.socket_path(&rec.handle), &Request::Dispose, &[]) {
            Ok(Reply::Disposed) => {
                // The keeper removed everything; wait for it to go.
                let deadline = Instant::now() + Duration::from_secs(10);
                while rec.keeper.alive() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            other => {
                note = Some(format!(
                    "the keeper did not dispose ({other:?}); reclaiming"
                ))
            }
        }
    }
    let failures = force_reclaim(state, registry, rec);
    match note {
        // Reclaimed whole without it: a note, not a failure.
        Some(note) if failures.is_empty() => {
            tracing::warn!(handle = %rec.handle, "{note}; reclaimed");
            failures
        }
        Some(note) => std::iter::once(note).chain(failures).collect(),
        None => failures,
    }
}

/// Reclaims `rec` without asking its keeper: kills the keeper if it is
/// still that very keeper, then removes what the record names. Nothing is
/// done for a record that fails [`vet_record`].
pub fn force_reclaim(state: &StateDir, registry: &Registry, rec: &Record) -> Vec<String> {
    if let Err(why) = vet_record(state, registry, rec) {
        return vec![why];
    }
    if rec.keeper.alive() {
        if let Err(why) = kill(&rec.keeper, &rec.handle) {
            return vec![format!(
                "record `{}` left alone: {why}; run `cordon sandbox gc` again",
                rec.handle
            )];
        }
    }
    reclaim(state, registry, rec)
}

/// Kills `p` if it is still the keeper of `handle`: pinned by a pidfd
/// first, then checked ([`check_keeper`]), then signalled through the
/// pidfd, so neither a reused pid nor another process is ever signalled.
fn kill(p: &ProcessId, handle: &str) -> Result<(), String> {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let Some(pid) = i32::try_from(p.pid).ok().and_then(Pid::from_raw) else {
        return Err(format!("{} is not a pid", p.pid));
    };
    if let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) {
        if p.alive() {
            check_keeper(p, handle)?;
            let _ = pidfd_send_signal(&fd, Signal::KILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Removes what a record names: the residue its sandbox reported, by its
/// backend's registration (a local sandbox's cgroups, killing their
/// processes, and the directories cordon made), then the state entries.
/// A residue this binary cannot reclaim (its backend is not registered
/// here) keeps its record: the record is the only pointer to it. So does
/// one its registration's `vet` does not pass (checked again here, just
/// before anything goes).
pub fn reclaim(state: &StateDir, registry: &Registry, rec: &Record) -> Vec<String> {
    let mut failures = match registry.get(&rec.backend) {
        Some(r) => {
            if let Err(why) = (r.vet)(&rec.residue, rec.keeper.pid) {
                return vec![format!(
                    "record `{}` left alone, nothing removed: {why}\nhelp: if that sandbox is gone, remove the record (`{}`) and what it names yourself",
                    rec.handle,
                    state.record_path(&rec.handle).display()
                )];
            }
            (r.reclaim)(&rec.residue)
        }
        None if rec.residue.is_null() => Vec::new(),
        None => {
            return vec![format!(
                "backend `{}` is not registered in this binary, so what its sandbox left ({}) is not reclaimed and its record `{}` is kept; run `gc` with the binary that made it",
                rec.backend, rec.residue, rec.handle
            )]
        }
    };
    if let Err(e) = state.remove(&rec.handle) {
        failures.push(e.to_string());
    }
    failures
}

/// The keeper's failure line (`failed[KIND]: REASON`): its kind and reason.
fn failure_line(line: &str) -> (cordon_sandbox::ErrorKind, String) {
    use cordon_sandbox::ErrorKind;
    let tagged = line
        .strip_prefix("failed[")
        .and_then(|r| r.split_once("]: "));
    let Some((kind, reason)) = tagged else {
        return (
            ErrorKind::Failed,
            line.trim_start_matches("failed: ").to_string(),
        );
    };
    let kind = match kind {
        "refused" => ErrorKind::Refused,
        "invalid" => ErrorKind::Invalid,
        "unavailable" => ErrorKind::Unavailable,
        _ => ErrorKind::Failed,
    };
    (kind, reason.to_string())
}

/// Starts a keeper for `launch` with `keeper` (the `cordon` binary and its
/// hidden argument) and waits until it serves, or says why it did not
/// (with the kind of that: a policy's refusal is not a backend's failure).
pub fn spawn(
    keeper: &SelfCommand,
    launch: &Launch,
    state: &StateDir,
) -> Result<Record, (cordon_sandbox::ErrorKind, String)> {
    let failed = |e: String| (cordon_sandbox::ErrorKind::Failed, e);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.log_path(&launch.handle))
        .map_err(|e| failed(format!("keeper log: {e}")))?;
    let mut child = Command::new(&keeper.path)
        .args(&keeper.args)
        .arg(format!("{HANDLE_ARG}{}", launch.handle))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(std::env::var_os("CORDON_IMAGE_STORE").map(|v| ("CORDON_IMAGE_STORE", v)))
        .envs(std::env::var_os("CORDON_LOG").map(|v| ("CORDON_LOG", v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| {
            failed(format!(
                "starting the keeper `{}`: {e}",
                keeper.path.display()
            ))
        })?;
    let json = serde_json::to_vec(launch).map_err(|e| failed(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&json)
            .map_err(|e| failed(format!("briefing the keeper: {e}")))?;
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
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| failed("the keeper said ready but wrote no record".to_string())),
        "" => Err(failed(format!(
            "the keeper did not start the sandbox:\n{}",
            log_tail()
        ))),
        other => Err(failure_line(other)),
    }
}

/// How kept sandboxes are set up.
#[derive(Clone)]
pub struct KeptConfig {
    pub state: StateDir,
    /// This binary with [`KEEPER_ARG`]: it must run [`keeper_main`] with
    /// a registry holding the backend.
    pub keeper: SelfCommand,
    /// The policy file the config's policy was loaded from (`None`:
    /// `cordon:default`); the keeper loads it again and checks the digest.
    pub policy_file: Option<PathBuf>,
    pub idle_timeout: Duration,
    pub max_age: Duration,
    /// This owner's name for itself, recorded with each sandbox.
    pub owner: String,
    /// Pause an idle sandbox instead of disposing of it (see
    /// [`IdlePause`]); `None`: dispose.
    pub on_idle_pause: Option<IdlePause>,
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

/// Any registered backend with sandboxes that outlive this process: each
/// is held by a keeper and recorded in the state directory.
pub struct KeptBackend {
    registration: BackendRegistration,
    registry: Registry,
    setup: BackendSetup,
    inner: Arc<dyn cordon_sandbox::Backend>,
    policy: Arc<Policy>,
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
    /// The backend `name` of `registry`, built with `setup` and `policy`,
    /// kept. The keepers rebuild it from the same registration.
    pub fn new(
        registry: &Registry,
        name: &str,
        setup: BackendSetup,
        policy: Arc<Policy>,
        kept: KeptConfig,
    ) -> Result<KeptBackend, String> {
        let registration = registry.require(name)?.clone();
        let inner = registration.build(&setup, policy.clone())?;
        Ok(KeptBackend {
            registration,
            registry: registry.clone(),
            setup,
            inner,
            policy,
            kept,
        })
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
            let Ok(lock) = state.lock(&rec.key, LOCK_WAIT) else {
                tracing::warn!(handle = %rec.handle, "recover: the key is locked; skipped");
                continue;
            };
            for f in dispose_record(state, &self.registry, &rec) {
                tracing::warn!(handle = %rec.handle, "recover: {f}");
            }
            // Counted, and its lock file removed, only when its record went.
            if matches!(state.read(&rec.handle), Ok(None)) {
                lock.unlock_and_remove();
                gone += 1;
            }
        }
        (kept, gone)
    }

    /// Disposes of every sandbox whose keeper is gone or that is past its
    /// maximum age. Returns how many, and what failed (logged, never fatal).
    pub fn gc(state: &StateDir, registry: &Registry) -> (usize, Vec<String>) {
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
            failures.extend(dispose_record(state, registry, &rec));
            lock.unlock_and_remove();
            // Counted only when its record went (a residue this binary
            // cannot reclaim keeps it).
            if matches!(state.read(&rec.handle), Ok(None)) {
                n += 1;
            }
        }
        (n, failures)
    }

    /// Reclaims what no record names, by every registration's sweep (the
    /// local rungs: cgroups of sandboxes whose owner was killed before it
    /// could dispose, found by name below this process's own cgroup).
    /// Returns the names reclaimed, and what failed.
    pub fn gc_unrecorded(registry: &Registry, setup: &BackendSetup) -> (Vec<String>, Vec<String>) {
        let (mut done, mut failures) = (Vec::new(), Vec::new());
        for r in registry.iter() {
            let (d, f) = (r.sweep)(setup);
            done.extend(d);
            failures.extend(f);
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
        if req.provenance.policy_digest != self.policy.digest {
            return Err(failed(
                "acquire",
                "the router's policy is not the one this backend enforces",
            ));
        }
        self.inner
            .materialises(req.provenance.spec.image())
            .map_err(|e| failed("acquire", e))?;
        let state = &self.kept.state;
        let key = key_record(&req.key);
        let lock = state
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
                // A get-or-create that names no snapshot takes the
                // sandbox at the key however it was made; one that names
                // a snapshot must find that one's.
                if req.provenance.origin.is_some() && made.origin != req.provenance.origin {
                    what.push("origin (another snapshot, or none)".to_string());
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
            // A record that does not hold up is not acted on, nor is another
            // sandbox made beside it (it would be found first again).
            vet_record(state, &self.registry, &rec).map_err(|why| failed("acquire", why))?;
            // A live keeper that did not answer a ping is not asked again.
            let failures = if live {
                force_reclaim(state, &self.registry, &rec)
            } else {
                dispose_record(state, &self.registry, &rec)
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
            backend: self.registration.name().to_string(),
            setup: self.setup.clone(),
            policy_file: self.kept.policy_file.clone(),
            provenance: req.provenance.clone(),
            limits: req.limits,
            idle_timeout: self.kept.idle_timeout.as_secs().max(1),
            max_age: self.kept.max_age.as_secs().max(1),
            on_idle_pause: self.kept.on_idle_pause.clone(),
            brokered: req.brokered.iter().map(WireBrokered::of).collect(),
        };
        let rec = match spawn(&self.kept.keeper, &launch, state) {
            Ok(rec) => rec,
            Err((kind, e)) => {
                // Nothing was made: no record, and no lock file left for it.
                let _ = state.remove(&launch.handle);
                lock.unlock_and_remove();
                return Err(cordon_sandbox::BackendError::of_kind(kind, "acquire", e));
            }
        };
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
                let failures = dispose_record(state, &self.registry, &rec);
                for f in &failures {
                    tracing::warn!(handle = %rec.handle, "dispose: {f}");
                }
                // Disposed is its record gone with nothing failing; else
                // the sandbox (or what it left) is still there: an error
                // with why, never a success. The lock file goes with the
                // record only.
                let gone = matches!(state.read(&rec.handle), Ok(None));
                if gone {
                    lock.unlock_and_remove();
                }
                if failures.is_empty() && gone {
                    return Ok(true);
                }
                Err(failed(
                    "dispose",
                    format!(
                        "sandbox `{}` was not disposed: {}",
                        rec.handle,
                        if failures.is_empty() {
                            "its record is still there".to_string()
                        } else {
                            failures.join("; ")
                        }
                    ),
                ))
            }
            None => {
                lock.unlock_and_remove();
                Ok(false)
            }
        }
    }

    fn dispose_scope(
        &self,
        scope: &str,
        thread_id: &str,
    ) -> Result<usize, cordon_sandbox::BackendError> {
        let (n, failures) = dispose_scope(
            &self.kept.state,
            &self.registry,
            Some(self.inner.name()),
            scope,
            thread_id,
        )
        .map_err(|e| failed("dispose_scope", e))?;
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failed(
                "dispose_scope",
                format!("{n} disposed; {}", failures.join("; ")),
            ))
        }
    }

    /// The record's key rewritten (`StateDir::rekey`, under both keys'
    /// locks): the next lookup by key, from any process, finds it at `to`.
    fn rekey(
        &self,
        from: &cordon_sandbox::SandboxKey,
        to: &cordon_sandbox::SandboxKey,
    ) -> Result<cordon_sandbox::backend::Rekeyed, cordon_sandbox::BackendError> {
        use cordon_sandbox::backend::Rekeyed;
        let state = &self.kept.state;
        let (from, to) = (key_record(from), key_record(to));
        match state
            .find(&from)
            .map_err(|e| failed("rekey", e.to_string()))?
        {
            Some(rec) if rec.backend == self.inner.name() => {
                match state.rekey(&rec.handle, &from, &to) {
                    Ok(_) => Ok(Rekeyed::Moved),
                    Err(crate::state::StateError::KeyTaken(_)) => Ok(Rekeyed::KeyTaken),
                    Err(e) => Err(failed("rekey", e.to_string())),
                }
            }
            _ => Ok(Rekeyed::NotHeld),
        }
    }
}

/// Disposes of every recorded sandbox of `scope`/`thread_id` (of one
/// backend, or of all): found from the state directory, so any process
/// reclaims what another created. Returns how many went and what failed
/// (an engine that did not answer, a key locked by another owner): the
/// failures never stop the others, and are never dropped.
pub fn dispose_scope(
    state: &StateDir,
    registry: &Registry,
    backend: Option<&str>,
    scope: &str,
    thread_id: &str,
) -> Result<(usize, Vec<String>), String> {
    let (records, _) = state.list().map_err(|e| e.to_string())?;
    let mut n = 0;
    let mut failures = Vec::new();
    for rec in records {
        if rec.key.scope != scope || rec.key.thread != thread_id {
            continue;
        }
        if backend.is_some_and(|b| b != rec.backend) {
            continue;
        }
        let Ok(lock) = state.lock(&rec.key, LOCK_WAIT) else {
            tracing::warn!(handle = %rec.handle, "dispose_scope: the key is locked; skipped");
            failures.push(format!(
                "`{}` is locked by another owner; skipped",
                rec.handle
            ));
            continue;
        };
        for f in dispose_record(state, registry, &rec) {
            tracing::warn!(handle = %rec.handle, "dispose_scope: {f}");
            failures.push(format!("`{}`: {f}", rec.handle));
        }
        lock.unlock_and_remove();
        // Counted only when its record went (one left alone keeps it).
        if matches!(state.read(&rec.handle), Ok(None)) {
            n += 1;
        }
    }
    Ok((n, failures))
}

#[cfg(test)]
mod keeper_check_tests {
    use super::*;

    fn id_of(child: &std::process::Child) -> ProcessId {
        let pid = child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        ProcessId {
            pid,
            start: rest.split_whitespace().nth(19).unwrap().parse().unwrap(),
        }
    }

    #[test]
    fn only_the_keeper_of_that_very_handle_passes() {
        let mut other = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        // A process whose command line reads like a keeper of `h-1`.
        let mut marked = Command::new("/bin/sh")
            .args(["-c", "sleep 30; :", KEEPER_ARG, "--handle=h-1"])
            .spawn()
            .unwrap();
        // Once both have exec'd.
        for c in [&other, &marked] {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !std::fs::read(format!("/proc/{}/cmdline", c.id()))
                .unwrap_or_default()
                .starts_with(b"/bin/s")
            {
                assert!(Instant::now() < deadline, "never exec'd");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let e = check_keeper(&id_of(&other), "h-1").unwrap_err();
        assert!(e.contains("is not the keeper of `h-1`"), "{e}");
        assert_eq!(check_keeper(&id_of(&marked), "h-1"), Ok(()));
        let e = check_keeper(&id_of(&marked), "h-2").unwrap_err();
        assert!(e.contains("is not the keeper of `h-2`"), "{e}");
        // The same pid with another start time is not that process.
        let mut stale = id_of(&marked);
        stale.start += 1;
        assert!(check_keeper(&stale, "h-1").is_err());
        for c in [&mut other, &mut marked] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
