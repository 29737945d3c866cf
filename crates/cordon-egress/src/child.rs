//! The egress proxy in a process of its own.
//!
//! The proxy parses hostile input, so the `cordon` binary never runs it
//! inside the process that owns the sandboxes (root, holding every
//! sandbox's handles). [`ProxyChild::start`] starts `setup.proxy` (the
//! `cordon` binary's hidden proxy subcommand, which calls [`child_main`]);
//! the child confines itself before it reads a byte from any sandbox, and
//! then serves each sandbox's channel the owner hands it.
//!
//! ## The control channel
//!
//! One `SOCK_SEQPACKET` unix socket pair, close-on-exec; the child's end is
//! its standard input (so no descriptor number is adopted, and no other
//! child of the owner can inherit it). One JSON value per packet:
//!
//! | from  | packet                                                                 | fds |
//! |-------|------------------------------------------------------------------------|-----|
//! | owner | `{"version":1,"parent":PID,"setup":EgressSetup,"env":NAME,"policy_digest":HEX}` (the brief, first) | 0 |
//! | child | `{"ok":true}` or `{"ok":false,"error":"..."}` (ready, once)            | 0   |
//! | owner | `{"serve":{"id":N,"caller":{"sandbox":S,"identity":Identity,"allow":["host:port",...] or null}}}` | 1: the listener |
//! | owner | `{"stop":{"id":N}}`                                                    | 0   |
//! | owner | `{"egress":{"id":N,"allow":["host:port",...] or null,"failed":null or "why","by":"who"}}` (version 2) | 0 |
//! | child | `{"id":N,"ok":true}` or `{"id":N,"ok":false,"error":"..."}` (one per serve/stop/egress; an egress's ok carries `"generation":G`) | 0 |
//!
//! An `egress` replaces channel `N`'s allowlist while it serves (a new
//! generation: [`crate::LiveEgress`]); `failed` closes its egress instead
//! (the replacement did not load), and is answered `ok: false` saying so.
//!
//! The owner sends one request at a time and waits (bounded) for its reply;
//! a reply that does not come, or does not match, marks the channel broken
//! and every later request is refused. The child exits when the owner's end
//! hangs up, and is killed (`PR_SET_PDEATHSIG`) when the thread that
//! started it dies — a thread of this module that lives exactly as long as
//! the child, so a short-lived caller thread does not take the proxy with
//! it.

use std::any::Any;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{EgressEntry, EgressSetup};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::host::{config_from_setup, EgressHost, Opened, Serving};
use crate::proxy::{Caller, EgressChange};

/// The control channel's wire version; the brief carries it and the child
/// refuses any other.
pub const WIRE_VERSION: u32 = 2;
/// Largest control packet, in bytes of JSON.
/// How long the child has to confine itself and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the child has to answer one serve or stop.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a dropped [`ProxyChild`] waits for the child to exit on its own
/// before killing it.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// Environment variables the child is given, if the owner has them.
const KEPT_ENV: &[&str] = &["CORDON_LOG", "CORDON_EGRESS_WORKERS"];

// ---- wire -------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Brief {
    version: u32,
    /// The owner's pid: the child checks it is still its parent once its
    /// death signal is set.
    parent: i32,
    setup: EgressSetup,
    env: String,
    policy_digest: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Control {
    /// Serve the attached listener for `caller` until stopped.
    Serve { id: u64, caller: WireCaller },
    /// Stop serving `id`: its listener and every connection it started are
    /// closed before the reply.
    Stop { id: u64 },
    /// Replace `id`'s allowlist with `allow` (canonical entries), or close
    /// its egress when `failed` says why the replacement did not load.
    Egress {
        id: u64,
        allow: Option<Vec<String>>,
        failed: Option<String>,
        /// Who asked, for the audit line.
        by: String,
    },
}

/// [`Caller`] on the wire: allowlist entries in their canonical spelling.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCaller {
    sandbox: String,
    identity: Identity,
    allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    brokered: Vec<WireBrokered>,
}

/// A brokered secret on the control channel (owner to child only).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireBrokered {
    name: String,
    placeholder: String,
    value: Vec<u8>,
    to: Vec<String>,
}

/// Allowlist entries in their canonical spelling, each checked to read
/// back as itself.
fn allow_to_wire(list: &[EgressEntry]) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let text = e.to_string();
        // The child reads the entry back from this text: refuse one that
        // would not come back the same.
        if EgressEntry::parse(&text).as_ref() != Ok(e) {
            return Err(format!(
                "the egress allowlist entry `{text}` does not read back as itself; it cannot be handed to the egress proxy process"
            ));
        }
        out.push(text);
    }
    Ok(out)
}

fn allow_from_wire(list: &[String]) -> Result<Vec<EgressEntry>, String> {
    list.iter()
        .map(|e| EgressEntry::parse(e).map_err(|e| e.to_string()))
        .collect()
}

impl WireCaller {
    fn from_caller(c: &Caller) -> Result<WireCaller, String> {
        let allow = match &c.allow {
            None => None,
            Some(list) => Some(allow_to_wire(list)?),
        };
        Ok(WireCaller {
            sandbox: c.sandbox.clone(),
            identity: c.identity.clone(),
            allow,
            brokered: c
                .brokered
                .iter()
                .map(|b| WireBrokered {
                    name: b.name.clone(),
                    placeholder: b.placeholder.clone(),
                    value: b.value.clone(),
                    to: b.to.clone(),
                })
                .collect(),
        })
    }

    fn into_caller(self) -> Result<Caller, String> {
        let allow = match self.allow {
            None => None,
            Some(list) => Some(allow_from_wire(&list)?),
        };
        Ok(Caller {
            sandbox: self.sandbox,
            identity: self.identity,
            allow,
            brokered: self
                .brokered
                .into_iter()
                .map(|b| crate::BrokeredSecret {
                    name: b.name,
                    placeholder: b.placeholder,
                    value: b.value,
                    to: b.to,
                })
                .collect(),
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    /// The request answered; absent on the ready reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// A serve's answer: the sandbox's authority's certificate, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca: Option<String>,
    /// An egress change's answer: the generation now in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
}

impl Reply {
    fn of(id: Option<u64>, r: Result<(), String>) -> Reply {
        match r {
            Ok(()) => Reply {
                id,
                ok: true,
                error: None,
                ca: None,
                generation: None,
            },
            Err(e) => Reply {
                id,
                ok: false,
                error: Some(e),
                ca: None,
                generation: None,
            },
        }
    }

    /// Ok only for `ok: true` with no error: anything else refuses.
    fn result(self) -> Result<Option<String>, String> {
        match (self.ok, self.error) {
            (true, None) => Ok(self.ca),
            (_, Some(e)) => Err(e),
            (false, None) => Err("it refused without saying why".into()),
        }
    }
}

/// Sends one packet, with at most one descriptor attached (the format is
/// `cordon_linux::fdpass`'s, shared with the keeper and the warm init).
fn send_packet<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    cordon_linux::fdpass::send(sock, msg, fd.as_slice())
}

/// Receives one packet and its descriptors (close-on-exec); `Ok(None)` when
/// the peer has hung up.
fn recv_packet<T: DeserializeOwned>(sock: BorrowedFd<'_>) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    cordon_linux::fdpass::recv(sock)
}

/// Waits until `sock` is readable (or hung up) or `deadline` passes.
fn wait_readable(sock: BorrowedFd<'_>, deadline: Instant) -> Result<(), ()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(());
        }
        let ts = Timespec::try_from(left).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&sock, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            // Readable, hung up or in error: the recv that follows says which.
            Ok(_) => return Ok(()),
            Err(_) => return Ok(()),
        }
    }
}

// ---- owner side -----------------------------------------------------------

/// Anything that serves sandbox channels: the proxy in this process
/// ([`EgressHost`]) or in a process of its own ([`ProxyChild`]). What
/// [`EgressService::serve`] returns serves until it is dropped.
pub trait EgressService: Send + Sync {
    fn serve(&self, listener: std::net::TcpListener, caller: Caller) -> Result<Served, String>;
}

/// Changes a served channel's allowlist while it serves (see
/// [`crate::LiveEgress`]).
pub trait ChannelControl: Send + Sync {
    /// Replaces the allowlist ([`EgressChange::Replace`]: the new
    /// generation's number) or closes egress ([`EgressChange::Close`]:
    /// always an error, saying so); `by` is who asked, for the audit line.
    fn change(&self, change: EgressChange, by: &str) -> Result<u64, String>;
}

impl ChannelControl for crate::host::HostControl {
    fn change(&self, change: EgressChange, by: &str) -> Result<u64, String> {
        crate::host::HostControl::change(self, change, by)
    }
}

/// A channel being served: it lasts as long as `handle` is held.
pub struct Served {
    /// Changes its allowlist.
    pub control: Arc<dyn ChannelControl>,
    pub handle: Box<dyn Any + Send>,
    /// The certificate (PEM) of the sandbox's own authority, when the
    /// policy has the proxy inspect some host: the sandbox must trust it
    /// (and nothing else of it ever leaves the proxy).
    pub ca_pem: Option<String>,
}

impl EgressService for EgressHost {
    fn serve(&self, listener: std::net::TcpListener, caller: Caller) -> Result<Served, String> {
        let s = EgressHost::serve(self, listener, caller)?;
        let ca_pem = s.ca_pem().map(str::to_string);
        Ok(Served {
            control: s.control(),
            handle: Box::new(s),
            ca_pem,
        })
    }
}

impl EgressService for ProxyChild {
    fn serve(&self, listener: std::net::TcpListener, caller: Caller) -> Result<Served, String> {
        let s = ProxyChild::serve(self, listener, caller)?;
        let ca_pem = s.ca_pem.clone();
        Ok(Served {
            control: Arc::new(ChildControl {
                channel: s.channel.clone(),
                id: s.id,
            }),
            handle: Box::new(s),
            ca_pem,
        })
    }
}

/// The egress service a setup asks for: a process of its own when
/// `setup.proxy` is set (what the `cordon` binary always does), else this
/// process.
pub fn start_service(
    setup: &EgressSetup,
    policy: Arc<Policy>,
    env: Deployment,
) -> Result<Arc<dyn EgressService>, String> {
    if setup.proxy.is_some() {
        Ok(Arc::new(ProxyChild::start(setup, &policy, &env)?))
    } else {
        let setup = setup.clone();
        Ok(Arc::new(EgressHost::start(move || {
            config_from_setup(&setup, policy, env)
        })?))
    }
}

/// The control channel, shared with every [`ChildServing`] (weakly: once
/// the [`ProxyChild`] is dropped the socket closes and the child exits).
struct Channel {
    sock: OwnedFd,
    /// One request and its reply at a time.
    turn: Mutex<()>,
    /// Set once a request went unanswered or wrong: nothing more is sent.
    broken: AtomicBool,
    next_id: AtomicU64,
}

impl Channel {
    fn broken(&self, why: String) -> String {
        self.broken.store(true, Ordering::SeqCst);
        why
    }

    /// Sends `msg` (with `fd` attached) and waits for the reply to `id`.
    fn request(
        &self,
        msg: &Control,
        id: u64,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Option<String>, String> {
        self.request_reply(msg, id, fd)?
            .result()
            .map_err(|e| format!("the egress proxy process: {e}"))
    }

    /// Sends `msg` and returns the reply to `id`, whatever it says.
    fn request_reply(
        &self,
        msg: &Control,
        id: u64,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Reply, String> {
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        if self.broken.load(Ordering::SeqCst) {
            return Err(
                "the egress proxy process stopped answering earlier; run the command again".into(),
            );
        }
        send_packet(self.sock.as_fd(), msg, fd).map_err(|e| {
            self.broken(format!(
                "sending to the egress proxy process: {e} (its standard error says why it stopped); run the command again"
            ))
        })?;
        let reply = read_reply(self.sock.as_fd(), Instant::now() + REQUEST_TIMEOUT)
            .map_err(|e| self.broken(e))?;
        if reply.id != Some(id) {
            return Err(self.broken(format!(
                "the egress proxy process answered request {:?} to request {id}; run the command again",
                reply.id
            )));
        }
        Ok(reply)
    }
}

/// Changes a channel served by a [`ProxyChild`].
struct ChildControl {
    channel: Weak<Channel>,
    id: u64,
}

impl ChannelControl for ChildControl {
    fn change(&self, change: EgressChange, by: &str) -> Result<u64, String> {
        let ch = self
            .channel
            .upgrade()
            .ok_or("the egress proxy process is gone; run the command again")?;
        let (allow, failed) = match change {
            EgressChange::Replace(list) => (Some(allow_to_wire(&list)?), None),
            EgressChange::Close(why) => (None, Some(why)),
        };
        let msg = Control::Egress {
            id: self.id,
            allow,
            failed,
            by: by.to_string(),
        };
        let reply = ch.request_reply(&msg, self.id, None)?;
        let generation = reply.generation;
        reply.result()?;
        generation.ok_or_else(|| {
            "the egress proxy process did not say which generation is in force; run the same cordon binary".into()
        })
    }
}

/// Reads one reply, bounded by `deadline`.
fn read_reply(sock: BorrowedFd<'_>, deadline: Instant) -> Result<Reply, String> {
    if wait_readable(sock, deadline).is_err() {
        return Err(
            "the egress proxy process did not answer in time; run the command again (its standard error may say why)"
                .into(),
        );
    }
    match recv_packet::<Reply>(sock) {
        Ok(Some((reply, fds))) if fds.is_empty() => Ok(reply),
        Ok(Some(_)) => Err(
            "the egress proxy process sent descriptors it was not asked for; run the command again"
                .into(),
        ),
        Ok(None) => Err(
            "the egress proxy process exited (its standard error says why); run the command again"
                .into(),
        ),
        Err(e) => Err(format!(
            "reading from the egress proxy process: {e}; run the command again"
        )),
    }
}

/// The egress proxy running in a process of its own. Dropping it closes the
/// control channel: the child exits, and with it every channel it serves.
pub struct ProxyChild {
    channel: Option<Arc<Channel>>,
    pid: u32,
    /// To kill the child without racing its reaping (`None` on kernels
    /// without pidfds: then a child that does not exit on hang-up is left
    /// to its death signal).
    pidfd: Option<OwnedFd>,
    /// Told when the child has exited and been reaped.
    exited: Mutex<mpsc::Receiver<()>>,
}

/// One channel served by a [`ProxyChild`]; dropping it stops it: when the
/// drop returns the child has closed the listener and every connection it
/// started (unless the child stopped answering: then the channel is
/// broken and the child is left to exit with its owner).
pub struct ChildServing {
    channel: Weak<Channel>,
    id: u64,
    /// The sandbox's authority's certificate, if the proxy inspects.
    pub ca_pem: Option<String>,
}

impl Drop for ChildServing {
    fn drop(&mut self) {
        let Some(ch) = self.channel.upgrade() else {
            return;
        };
        if let Err(e) = ch.request(&Control::Stop { id: self.id }, self.id, None) {
            tracing::warn!(target: "cordon::egress", "stopping egress channel {}: {e}", self.id);
        }
    }
}

enum Spawned {
    Running { pid: u32, pidfd: Option<OwnedFd> },
    Failed(io::Error),
}

impl ProxyChild {
    /// Starts `setup.proxy`, hands it the brief and waits (at most 10 s)
    /// until it has loaded the policy (checked against `policy`'s digest),
    /// confined itself and started serving.
    pub fn start(
        setup: &EgressSetup,
        policy: &Policy,
        env: &Deployment,
    ) -> Result<ProxyChild, String> {
        let Some(cmd) = &setup.proxy else {
            return Err("the egress setup names no proxy command to start; set `egress.proxy` (the cordon binary sets it itself), or host the proxy in this process".into());
        };
        let (ours, theirs) = cordon_linux::fdpass::pair()
            .map_err(|e| format!("making the egress proxy's control socket: {e}"))?;

        let mut command = Command::new(&cmd.path);
        command
            .args(&cmd.args)
            .env_clear()
            // Its end is its stdin: dup2'd in the child after fork, so the
            // descriptor needs no close-on-exec juggling here and no other
            // child spawned concurrently can inherit it.
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for k in KEPT_ENV {
            if let Some(v) = std::env::var_os(k) {
                command.env(k, v);
            }
        }

        // The spawning thread lives as long as the child (it waits for it):
        // PR_SET_PDEATHSIG fires when the thread that forked the child
        // exits, so a short-lived caller thread must not be that thread.
        let (tx, rx) = mpsc::channel::<Spawned>();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let what = cmd.path.display().to_string();
        std::thread::Builder::new()
            .name("cordon-egress-child".into())
            .spawn(move || {
                let spawned = command.spawn();
                // Closes this process's copy of the child's end, so the
                // child's exit is seen as a hang-up.
                drop(command);
                let mut child = match spawned {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Spawned::Failed(e));
                        return;
                    }
                };
                let pid = child.id();
                // Not reaped before `wait` below, so the pid is still this
                // child's.
                let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
                    rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
                });
                let _ = tx.send(Spawned::Running { pid, pidfd });
                let _ = child.wait();
                let _ = exit_tx.send(());
            })
            .map_err(|e| format!("starting a thread for the egress proxy process: {e}"))?;
        let (pid, pidfd) = match rx.recv() {
            Ok(Spawned::Running { pid, pidfd }) => (pid, pidfd),
            Ok(Spawned::Failed(e)) => {
                return Err(format!("starting the egress proxy process {what}: {e}"));
            }
            Err(_) => {
                return Err(format!(
                    "starting the egress proxy process {what}: the thread starting it failed"
                ))
            }
        };
        let child = ProxyChild {
            channel: Some(Arc::new(Channel {
                sock: ours,
                turn: Mutex::new(()),
                broken: AtomicBool::new(false),
                next_id: AtomicU64::new(1),
            })),
            pid,
            pidfd,
            exited: Mutex::new(exit_rx),
        };
        // From here on an error drops `child`, which ends the process.
        let ch = child.channel()?;
        let brief = Brief {
            version: WIRE_VERSION,
            parent: rustix::process::getpid().as_raw_pid(),
            setup: setup.clone(),
            env: env.name.clone(),
            policy_digest: policy.digest.clone(),
        };
        send_packet(ch.sock.as_fd(), &brief, None).map_err(|e| {
            format!("sending the egress proxy process its brief: {e} (its standard error says why it stopped)")
        })?;
        let reply = read_reply(ch.sock.as_fd(), Instant::now() + START_TIMEOUT)?;
        if reply.id.is_some() {
            return Err(
                "the egress proxy process answered its brief out of turn; run the command again"
                    .into(),
            );
        }
        reply
            .result()
            .map_err(|e| format!("the egress proxy process did not start: {e}"))?;
        Ok(child)
    }

    fn channel(&self) -> Result<&Arc<Channel>, String> {
        self.channel
            .as_ref()
            .ok_or_else(|| "the egress proxy process is gone; run the command again".to_string())
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Hands `listener` (a sandbox's channel) to the child to serve for
    /// `caller`, and closes this process's copy of it.
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        caller: Caller,
    ) -> Result<ChildServing, String> {
        let ch = self.channel()?;
        let caller = WireCaller::from_caller(&caller)?;
        let id = ch.next_id.fetch_add(1, Ordering::SeqCst);
        let ca_pem = ch.request(&Control::Serve { id, caller }, id, Some(listener.as_fd()))?;
        drop(listener);
        Ok(ChildServing {
            channel: Arc::downgrade(ch),
            id,
            ca_pem,
        })
    }
}

impl Drop for ProxyChild {
    fn drop(&mut self) {
        // The hang-up: the child exits on it.
        drop(self.channel.take());
        let exited = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if exited.recv_timeout(EXIT_GRACE).is_ok() {
            return;
        }
        match &self.pidfd {
            Some(fd) => {
                if let Err(e) =
                    rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL)
                {
                    tracing::warn!(target: "cordon::egress", "killing the egress proxy process {}: {e}", self.pid);
                }
                let _ = exited.recv_timeout(EXIT_GRACE);
            }
            None => tracing::warn!(
                target: "cordon::egress",
                "the egress proxy process {} did not exit when its owner hung up; it dies with this process",
                self.pid
            ),
        }
    }
}

// ---- child side -----------------------------------------------------------

/// A confinement for the proxy process, run once everything it needs is
/// open and while the process is still single-threaded.
pub type ConfineFn = fn(&EgressSetup) -> Result<(), String>;

/// The proxy process: the whole of the `cordon` binary's hidden proxy
/// subcommand. Its control socket is its standard input. In order: the
/// death signal; the brief; the policy (refused unless its digest is the
/// owner's); the hosts file, the audit log and this host's addresses
/// opened; `confine` (an error is reported to the owner and ends the
/// process); only then the runtime and the proxy, then the ready reply, and
/// then serve and stop requests until the owner hangs up (exit 0).
pub fn child_main(confine: ConfineFn) -> ! {
    let sock = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon egress proxy: its control socket (standard input): {e}; it is started by cordon itself, not by hand");
            std::process::exit(2)
        }
    };
    let host = match prepare(sock.as_fd(), confine) {
        Ok(Some(host)) => host,
        // The owner hung up before the brief.
        Ok(None) => std::process::exit(0),
        Err(e) => {
            eprintln!("cordon egress proxy: {e}");
            let _ = send_packet(sock.as_fd(), &Reply::of(None, Err(e)), None);
            std::process::exit(1)
        }
    };
    if let Err(e) = send_packet(sock.as_fd(), &Reply::of(None, Ok(())), None) {
        eprintln!("cordon egress proxy: telling the owner it is ready: {e}");
        std::process::exit(1)
    }
    match control_loop(sock.as_fd(), &host) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("cordon egress proxy: {e}");
            std::process::exit(1)
        }
    }
}

/// Everything up to the ready reply. `Ok(None)`: the owner hung up first.
fn prepare(sock: BorrowedFd<'_>, confine: ConfineFn) -> Result<Option<EgressHost>, String> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("setting its death signal: {e}"))?;
    let brief: Brief = match recv_packet(sock) {
        Ok(Some((brief, fds))) if fds.is_empty() => brief,
        Ok(Some(_)) => {
            return Err("the brief carried descriptors; run the same cordon binary".into())
        }
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(format!(
                "reading the brief: {e}; run the same cordon binary"
            ))
        }
    };
    if brief.version != WIRE_VERSION {
        return Err(format!(
            "the brief is of wire version {}, this proxy reads {WIRE_VERSION}; run the same cordon binary",
            brief.version
        ));
    }
    // Set after the death signal: if the owner died before, this process
    // has another parent by now.
    let parent = rustix::process::getppid().map(|p| p.as_raw_pid());
    if parent != Some(brief.parent) {
        return Err("its owner exited before it started; run the command again".into());
    }
    let setup = brief.setup;
    let policy = match &setup.policy_file {
        Some(p) => Policy::load_file(p),
        None => Policy::load_default(),
    }
    .map_err(|d| format!("loading the policy: {}", d.render()))?;
    if policy.digest != brief.policy_digest {
        return Err("the policy file changed since it was loaded; run the command again".into());
    }
    // Everything read or opened before confinement.
    let opened = Opened::open(&setup, Vec::new(), policy.inspects_any())?;

    confine(&setup).map_err(|e| format!("confining itself: {e}"))?;

    // Threads only from here on.
    let host = opened.start(Arc::new(policy), Deployment { name: brief.env })?;
    Ok(Some(host))
}

/// Serve and stop requests until the owner hangs up.
fn control_loop(sock: BorrowedFd<'_>, host: &EgressHost) -> Result<(), String> {
    let mut serving: HashMap<u64, Serving> = HashMap::new();
    loop {
        let (msg, mut fds) = match recv_packet::<Control>(sock) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("reading a request from its owner: {e}")),
        };
        let mut ca = None;
        let mut generation = None;
        let (id, result) = match msg {
            Control::Serve { id, caller } => {
                let r = if fds.len() != 1 {
                    Err(format!(
                        "a serve request carries exactly one listener, not {}",
                        fds.len()
                    ))
                } else if let Entry::Vacant(slot) = serving.entry(id) {
                    let fd = fds.remove(0);
                    caller
                        .into_caller()
                        .and_then(|c| serve_one(host, fd, c))
                        .map(|h| {
                            ca = h.ca_pem().map(str::to_string);
                            slot.insert(h);
                        })
                } else {
                    Err(format!("channel {id} is served already"))
                };
                (id, r)
            }
            Control::Egress {
                id,
                allow,
                failed,
                by,
            } => {
                let r = if !fds.is_empty() {
                    Err("an egress change carries no descriptors".into())
                } else {
                    match serving.get(&id) {
                        None => Err(format!("channel {id} is not served")),
                        Some(h) => {
                            let change = match (allow, failed) {
                                (_, Some(why)) => Ok(EgressChange::Close(why)),
                                (Some(list), None) => allow_from_wire(&list)
                                    .map(EgressChange::Replace)
                                    // Read here, never left wider: closed.
                                    .or_else(|e| Ok::<_, String>(EgressChange::Close(e))),
                                (None, None) => {
                                    Err("an egress change names an allowlist or why it failed"
                                        .to_string())
                                }
                            };
                            change.and_then(|c| h.control().change(c, &by)).map(|g| {
                                generation = Some(g);
                            })
                        }
                    }
                };
                (id, r)
            }
            Control::Stop { id } => {
                let r = if !fds.is_empty() {
                    Err("a stop request carries no descriptors".into())
                } else {
                    match serving.remove(&id) {
                        Some(h) => host.stop(h, Duration::from_secs(5)),
                        None => Err(format!("channel {id} is not served")),
                    }
                };
                (id, r)
            }
        };
        drop(fds);
        let mut reply = Reply::of(Some(id), result);
        reply.ca = ca;
        reply.generation = generation;
        send_packet(sock, &reply, None).map_err(|e| format!("answering its owner: {e}"))?;
    }
}

/// Serves a received listener, after checking it is one.
fn serve_one(host: &EgressHost, fd: OwnedFd, caller: Caller) -> Result<Serving, String> {
    use rustix::net::sockopt;
    let is_listener = sockopt::socket_type(&fd).is_ok_and(|t| t == rustix::net::SocketType::STREAM)
        && sockopt::socket_acceptconn(&fd).unwrap_or(false);
    if !is_listener {
        return Err("the descriptor handed over is not a listening stream socket".into());
    }
    host.serve(std::net::TcpListener::from(fd), caller)
}
