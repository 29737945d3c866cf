//! Serving the host: one reader (this thread) dispatching frames, one
//! writer ([`Out`], a `Mutex`) shared by everything that answers.
//!
//! The reader never blocks on the workload: an exec's start and its wait
//! run in threads of their own ([`crate::exec`]), bytes for the workload go
//! through [`crate::feed::Feed`]s, and a file read streams from a thread.
//! A frame the host should not send (malformed, or a guest → host kind)
//! ends the session: the channel is out of step or the host is not cordon.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_files::host_dir::HostWorkDir;
use cordon_linux::{InitIds, InitProgram, Plan, PlanSpec, WarmSandbox};
use cordon_vm_proto::{ErrKind, FrameError, FrameReader, Msg};

use crate::console::say;
use crate::exec::{Execs, Request};
use crate::files::Files;
use crate::out::Out;
use crate::relay::Relay;

/// The warm sandbox's init runs as this host (guest) uid and gid: not 0,
/// and not a workload's (cordon's plans use ids far below it).
pub(crate) const INIT_ID: u32 = 1_999_999_997;

/// How the agent runs.
pub(crate) enum Mode {
    /// PID 1 of the VM: the work dir is a tmpfs of the plan's size, the
    /// init program is `/init init`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Guest,
    /// `serve-unix` on a host: the work dir is an ordinary directory.
    Test { init: InitProgram, name: String },
}

/// Why serving ended.
#[derive(Debug)]
pub(crate) enum End {
    /// The host closed the channel.
    Eof,
    /// The host asked for it.
    Shutdown,
    /// The host sent what it must not.
    Malformed(String),
    /// The channel failed.
    Channel(String),
}

impl End {
    /// Whether the host ended the session (rather than a fault).
    pub(crate) fn clean(&self) -> bool {
        matches!(self, End::Eof | End::Shutdown)
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Eof => f.write_str("the host closed the channel"),
            End::Shutdown => f.write_str("the host asked to shut down"),
            End::Malformed(e) => write!(f, "the host sent a malformed frame: {e}"),
            End::Channel(e) => write!(f, "the channel failed: {e}"),
        }
    }
}

/// The sandbox, once `Setup` built it.
struct Sandbox {
    warm: Arc<WarmSandbox>,
    files: Files,
    relay: Relay,
}

struct Agent {
    out: Arc<Out>,
    mode: Mode,
    sandbox: Option<Sandbox>,
    execs: Execs,
    /// Where `Trust` placed the sandbox's trust, which the plan must name.
    trust: Option<PathBuf>,
    /// The secrets directory `Setup` made.
    secrets: Option<PathBuf>,
    /// Parked (`Park`): the host saves the VM; the channel's end is then
    /// awaited out, not the session's end (in the guest).
    parked: bool,
}

/// Serves the host until the channel ends, the host shuts the agent down,
/// or a frame is malformed; then stops everything the sandbox runs.
pub(crate) fn serve(reader: impl Read, writer: Box<dyn Write + Send>, mode: Mode) -> End {
    let out = Arc::new(Out::new(writer));
    if !out.send(&ready(), &[]) {
        return End::Channel("the `ready` frame did not go out".into());
    }
    let mut agent = Agent {
        out,
        mode,
        sandbox: None,
        execs: Execs::default(),
        trust: None,
        secrets: None,
        parked: false,
    };
    let mut frames = FrameReader::new(BufReader::new(reader));
    let end = loop {
        match frames.read() {
            // Parked in a guest, the end of the channel is the host that
            // saved the VM letting go (or, in a copy restored from it, the
            // port not yet connected): the next host connects, and the
            // port reads again. Between frames, so nothing is lost.
            Ok(None) if agent.parked && matches!(agent.mode, Mode::Guest) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(None) => break End::Eof,
            Ok(Some((msg, data))) => {
                if let Some(end) = agent.handle(msg, data) {
                    break end;
                }
            }
            Err(FrameError::Io(e)) => break End::Channel(e.to_string()),
            Err(e) => break End::Malformed(e.to_string()),
        }
    };
    agent.teardown();
    end
}

/// The agent's announcement: at its start, and in a copy restored from
/// a saved VM.
fn ready() -> Msg {
    Msg::Ready {
        agent: env!("CARGO_PKG_VERSION").to_string(),
        kernel: kernel_release(),
        proto: cordon_vm_proto::PROTOCOL,
    }
}

/// The warm sandbox's init program in the guest: this binary, `/init`.
pub(crate) fn guest_init() -> InitProgram {
    InitProgram::new("/init").arg("init")
}

/// Whether this kernel can hold a warm sandbox, or what it lacks.
pub(crate) fn warm_available(init: &InitProgram) -> Result<(), String> {
    use cordon_linux::Enforcer;
    cordon_linux::LinuxEnforcer::new(init.clone())
        .available_warm()
        .map_err(|m| format!("this kernel cannot hold the sandbox: {m}"))
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

impl Agent {
    fn handle(&mut self, msg: Msg, data: Vec<u8>) -> Option<End> {
        let out = self.out.clone();
        match msg {
            Msg::Setup {
                req,
                plan,
                disk_bytes,
            } => {
                match self.setup(plan, disk_bytes) {
                    Ok(()) => {
                        self.out.send(&Msg::Done { req }, &[]);
                    }
                    Err((kind, message)) => {
                        say!("setup failed: {message}");
                        self.out.error(req, kind, "", &message);
                    }
                }
                None
            }
            Msg::Trust {
                req,
                dir,
                image_root,
                ca_pem,
            } => {
                match self.trust(Path::new(&dir), Path::new(&image_root), &ca_pem) {
                    Ok(()) => {
                        self.out.send(&Msg::Done { req }, &[]);
                    }
                    Err((kind, message)) => {
                        say!("the egress CA was not placed: {message}");
                        self.out.error(req, kind, &dir, &message);
                    }
                }
                None
            }
            Msg::Exec {
                id,
                argv,
                env,
                bounds,
                max_output_bytes,
            } => {
                match &self.sandbox {
                    Some(s) => self.execs.start(
                        out,
                        s.warm.clone(),
                        Request {
                            id,
                            argv,
                            env,
                            bounds,
                            max_output_bytes,
                        },
                    ),
                    None => {
                        self.out.send(
                            &Msg::ExecFailed {
                                id,
                                error: "the sandbox is not set up: send `setup` first".into(),
                            },
                            &[],
                        );
                    }
                }
                None
            }
            Msg::Stdin { id } => {
                self.execs.stdin(id, data);
                None
            }
            Msg::StdinEnd { id } => {
                self.execs.stdin_end(id);
                None
            }
            Msg::Kill { id } => {
                self.execs.kill(id);
                None
            }
            Msg::WriteStart { .. }
            | Msg::WriteData { .. }
            | Msg::Stat { .. }
            | Msg::Read { .. }
            | Msg::List { .. }
            | Msg::FilesOp { .. }
            | Msg::WatchStart { .. }
            | Msg::WatchStop { .. } => {
                self.files_msg(msg, data);
                None
            }
            Msg::ConnData { conn } => {
                if let Some(s) = &self.sandbox {
                    s.relay.data(conn, data);
                }
                None
            }
            Msg::ConnClose { conn } => {
                if let Some(s) = &self.sandbox {
                    s.relay.close(conn);
                }
                None
            }
            Msg::PortOpen { req, conn, port } => {
                self.port_open(req, conn, port);
                None
            }
            Msg::Shutdown {} => Some(End::Shutdown),
            Msg::Park { req } => {
                if self.parked {
                    return Some(End::Malformed("`park` while parked".into()));
                }
                self.parked = self.out.park(req);
                say!("parked: the host saves the VM");
                None
            }
            Msg::Unpark { restored } => {
                if !self.parked {
                    return Some(End::Malformed("`unpark` while not parked".into()));
                }
                self.parked = false;
                self.out.unpark();
                if restored {
                    // A copy: its host knows nothing of this guest yet.
                    say!("restored from a saved VM");
                    self.out.send(&ready(), &[]);
                }
                None
            }
            Msg::Ready { .. }
            | Msg::Output { .. }
            | Msg::Exited { .. }
            | Msg::ExecFailed { .. }
            | Msg::Done { .. }
            | Msg::StatReply { .. }
            | Msg::ReadData { .. }
            | Msg::ReadEnd { .. }
            | Msg::ListReply { .. }
            | Msg::FilesData { .. }
            | Msg::FilesEnd { .. }
            | Msg::WatchEvent { .. }
            | Msg::WatchEnd { .. }
            | Msg::Error { .. }
            | Msg::ConnOpen { .. } => Some(End::Malformed(format!(
                "a `{}` frame is the guest's to send, not the host's",
                msg.kind()
            ))),
        }
    }

    /// A files frame: writes in, stat, read, list, the files API, watches.
    fn files_msg(&mut self, msg: Msg, data: Vec<u8>) {
        let out = self.out.clone();
        match msg {
            Msg::WriteStart {
                req,
                path,
                mode,
                size,
            } => {
                // Refused: the host's `write_data` frames for `req` that
                // follow are dropped, as nothing is pending for it.
                if let Some(f) = self.files_or_refuse(req, &path) {
                    f.write_start(&out, req, path, mode, size);
                }
            }
            Msg::WriteData { req } => {
                if let Some(s) = &mut self.sandbox {
                    s.files.write_data(&self.out, req, data);
                }
            }
            Msg::WatchStart {
                req,
                path,
                recursive,
            } => {
                if let Some(f) = self.files_or_refuse(req, &path) {
                    f.watch_start(&out, req, &path, recursive);
                }
            }
            Msg::WatchStop { req } => {
                if let Some(s) = &self.sandbox {
                    s.files.watches.stop(req);
                }
            }
            Msg::FilesOp { req, op, size } => {
                if let Some(f) = self.files_or_refuse(req, "") {
                    f.files_start(&out, req, op, size);
                }
            }
            Msg::Stat { req, path } => {
                if let Some(f) = self.files_or_refuse(req, &path) {
                    f.stat(&out, req, &path);
                }
            }
            Msg::Read { req, path, max } => {
                if let Some(f) = self.files_or_refuse(req, &path) {
                    f.read(out, req, path, max);
                }
            }
            Msg::List { req, path } => {
                if let Some(f) = self.files_or_refuse(req, &path) {
                    f.list(&out, req, &path);
                }
            }
            _ => {}
        }
    }

    /// The work dir's files, or an `unavailable` answer before `Setup`.
    fn files_or_refuse(&mut self, req: u64, path: &str) -> Option<&mut Files> {
        match &mut self.sandbox {
            Some(s) => Some(&mut s.files),
            None => {
                self.out.error(
                    req,
                    ErrKind::Unavailable,
                    path,
                    "the sandbox is not set up: send `setup` first",
                );
                None
            }
        }
    }

    /// Places the sandbox's trust of `ca_pem` at `dir` (before `Setup`:
    /// the sandbox's binds are made as it starts).
    fn trust(
        &mut self,
        dir: &Path,
        image_root: &Path,
        ca_pem: &str,
    ) -> Result<(), (ErrKind, String)> {
        let refused = |m: String| (ErrKind::Refused, m);
        if self.sandbox.is_some() {
            return Err(refused(
                "the sandbox is already set up; its trust is placed before `setup`".into(),
            ));
        }
        if let Some(placed) = &self.trust {
            return Err(refused(format!(
                "the sandbox's trust is already placed, at `{}`",
                placed.display()
            )));
        }
        #[cfg(target_os = "linux")]
        let placed = crate::trust::place(dir, image_root, ca_pem);
        #[cfg(not(target_os = "linux"))]
        let placed: Result<(), String> = {
            let _ = (image_root, ca_pem);
            Err("the guest is Linux".into())
        };
        placed.map_err(|m| (ErrKind::Failed, m))?;
        self.trust = Some(dir.to_path_buf());
        Ok(())
    }

    /// Makes the work dir and starts the warm sandbox for `plan`.
    fn setup(&mut self, plan: serde_json::Value, disk_bytes: u64) -> Result<(), (ErrKind, String)> {
        let refused = |m: String| (ErrKind::Refused, m);
        let failed = |m: String| (ErrKind::Failed, m);
        if self.sandbox.is_some() {
            return Err(refused("the sandbox is already set up".into()));
        }
        let spec: PlanSpec =
            serde_json::from_value(plan).map_err(|e| refused(format!("the plan: {e}")))?;
        let plan =
            Plan::new(spec.clone()).map_err(|e| refused(format!("the plan is refused: {e}")))?;
        // The plan trusts what `Trust` placed, and only that.
        match (&spec.trust_dir, &self.trust) {
            (None, None) => {}
            (Some(named), Some(placed)) if named == placed => {}
            (Some(named), _) => {
                return Err(refused(format!(
                    "the plan's trust directory `{}` is not where `trust` placed the sandbox's CA ({})",
                    named.display(),
                    self.trust
                        .as_deref()
                        .map_or("nothing was placed".into(), |p| format!("`{}`", p.display()))
                )))
            }
            (None, Some(placed)) => {
                return Err(refused(format!(
                    "the sandbox's CA was placed at `{}`, but the plan does not name it as its trust directory",
                    placed.display()
                )))
            }
        }
        let guest = spec
            .work_dir
            .to_str()
            .ok_or_else(|| refused("the work dir is not UTF-8".into()))?
            .to_string();
        let host: PathBuf = spec
            .work_dir_source
            .clone()
            .unwrap_or_else(|| spec.work_dir.clone());
        let (uid, gid) = (spec.ids.host_uid, spec.ids.host_gid);
        let (init, name) = match &self.mode {
            Mode::Guest => (guest_init(), "cordon-vm".to_string()),
            Mode::Test { init, name } => (init.clone(), name.clone()),
        };
        // What the kernel lacks is said as such (the host may pick another
        // kernel), before anything is made.
        warm_available(&init).map_err(|m| (ErrKind::Unavailable, m))?;
        self.make_work_dir(&host, disk_bytes, uid, gid)
            .map_err(failed)?;
        let ids = InitIds {
            host_uid: INIT_ID,
            host_gid: INIT_ID,
        };
        // The secrets directory the plan binds read-only: the agent's,
        // made now (nothing there before is used), gone at teardown.
        let secrets = match &spec.secrets_dir {
            Some(d) => {
                let made = cordon_files::host_dir::HostSecretsDir::make(d, gid).map_err(failed)?;
                self.secrets = Some(d.clone());
                Some(made)
            }
            None => None,
        };
        let mut warm = WarmSandbox::start(&plan, &init, ids, &name)
            .map_err(|e| failed(format!("the sandbox did not start: {e}")))?;
        let listener = warm.take_proxy_listener();
        let files = HostWorkDir::new(&host, &guest)
            .map_err(|e| failed(e.to_string()))?
            .owned_by(uid, gid);
        // The sandbox's /tmp, a tmpfs of its user namespace that the
        // agent (root of the guest, unmapped there) writes as the workload.
        let tmp = HostWorkDir::pinned(warm.tmp_dir(), "/tmp", "/tmp")
            .map_err(|e| failed(e.to_string()))?
            .owned_by(uid, gid)
            .as_owner();
        let relay = Relay::start(listener, self.out.clone());
        self.sandbox = Some(Sandbox {
            warm: Arc::new(warm),
            files: Files::new(files, Some(tmp), secrets),
            relay,
        });
        say!("the sandbox is up (work dir `{guest}`)");
        Ok(())
    }

    /// The work dir: a tmpfs of `disk_bytes` in the guest (its only bound
    /// on what the workload writes there), an ordinary directory in test
    /// mode; mode 0700, owned by the workload.
    fn make_work_dir(
        &self,
        dir: &PathBuf,
        disk_bytes: u64,
        uid: u32,
        gid: u32,
    ) -> Result<(), String> {
        let shown = dir.display();
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("creating the work dir `{shown}`: {e}"))?;
        match self.mode {
            #[cfg(target_os = "linux")]
            Mode::Guest => mount_work_dir(dir, disk_bytes, uid, gid),
            #[cfg(not(target_os = "linux"))]
            Mode::Guest => Err("the guest is Linux".into()),
            Mode::Test { .. } => {
                let _ = disk_bytes;
                use std::os::unix::fs::PermissionsExt;
                std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                    .and_then(|()| {
                        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    })
                    .map_err(|e| format!("handing the work dir `{shown}` to {uid}: {e}"))
            }
        }
    }

    /// Connects to `127.0.0.1:port` inside the sandbox's network namespace
    /// (its members' — nothing runs there yet: refused) for the host's
    /// forward, and relays it as `conn`; `Error` with why otherwise.
    fn port_open(&self, req: u64, conn: u64, port: u16) {
        let out = self.out.clone();
        let Some(s) = self.sandbox.as_ref() else {
            return port_refused(
                &out,
                req,
                ErrKind::Unavailable,
                "the sandbox is not set up".into(),
            );
        };
        // On a thread of its own: finding the namespace walks the
        // sandbox's cgroups, and the frame loop (exec output, other
        // connections) never waits behind it. The host waits for `Done`
        // before it sends on the connection.
        let (warm, relay) = (s.warm.clone(), s.relay.clone());
        std::thread::spawn(move || {
            use std::os::fd::AsFd;
            let opened = (|| {
                let ns = cordon_linux::netns::of_cgroups(&warm.cgroup_dirs())
                    .map_err(|e| (ErrKind::Failed, format!("finding the sandbox's network namespace: {e}")))?
                    .ok_or((
                        ErrKind::Unavailable,
                        format!("nothing runs in the sandbox, so nothing listens on port {port}; start the server first"),
                    ))?;
                let stream = cordon_linux::netns::connect_loopback_in(ns.as_fd(), port).map_err(|e| {
                    match e.kind() {
                        std::io::ErrorKind::ConnectionRefused => (
                            ErrKind::Unavailable,
                            format!("nothing listens on port {port} in the sandbox; start the server first (listening on 127.0.0.1 or 0.0.0.0)"),
                        ),
                        _ => (ErrKind::Failed, format!("connecting to port {port} in the sandbox: {e}")),
                    }
                })?;
                relay
                    .adopt(req, conn, stream)
                    .map_err(|e| (ErrKind::Failed, e))
            })();
            if let Err((kind, message)) = opened {
                port_refused(&out, req, kind, message);
            }
        });
    }

    /// Kills every exec, stops the sandbox and removes its trust and its
    /// secrets directory.
    fn teardown(&mut self) {
        self.execs.kill_all();
        if let Some(s) = self.sandbox.take() {
            s.files.watches.stop_all();
            s.relay.stop();
            if let Err(e) = s.warm.stop() {
                say!("stopping the sandbox: {e}");
            }
        }
        // Only certificates, but the agent's own: gone with the session.
        if let Some(dir) = self.trust.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(dir) = self.secrets.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The work dir in the guest: a tmpfs of `bytes` (the workload's disk
/// bound there), mode 0700, owned by the workload.
#[cfg(target_os = "linux")]
fn mount_work_dir(dir: &std::path::Path, bytes: u64, uid: u32, gid: u32) -> Result<(), String> {
    if bytes == 0 {
        return Err("the work dir's size is 0 (a tmpfs of size 0 would be unbounded)".into());
    }
    let data = format!("size={bytes},mode=0700,uid={uid},gid={gid}");
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| format!("mounting the work dir `{}` ({data}): {e}", dir.display()))
}

/// The answer to a `PortOpen` that did not open.
fn port_refused(out: &Out, req: u64, kind: ErrKind, message: String) {
    out.send(
        &Msg::Error {
            req,
            kind,
            path: String::new(),
            message,
        },
        &[],
    );
}
