//! [`MicrovmSandbox`]: one guest and what it was made for.
//!
//! Decide here, enforce there: the host resolves each command over the
//! image's tree and turns the policy's storage and compute plan into a
//! container-rung `cordon_linux::PlanSpec` (the same translation the local
//! `container` backend makes, over the same image); the guest agent holds
//! that plan inside the VM with cordon's Linux enforcer, so the policy
//! holds in the guest as it does on a host, and the VM is the boundary
//! around it.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use cordon_confine::FsView;
use cordon_linux::{Bounds, FsRule, Ids, PlanSpec, Rung};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Attach, BackendError, DirEntry, ExecHandle, ExecRequest, FileRead, FileStat,
    Limits, Provenance, Sandbox, SandboxError,
};

use crate::channel::{Channel, ConnOpener, ConnSink};
use crate::vm::{Accel, BootSpec, Vm};

mod memory;
pub use memory::NO_MEMORY_WITH_EGRESS;

/// The workload's uid/gid inside its namespace in the guest (the
/// container rung's, so plans read the same).
pub use cordon_backend_kit::INSIDE_ID;
/// The guest-side "host" id the workload's is mapped to (the guest's root
/// namespace; nothing on the real host): the engine backends' workload id,
/// so a plan reads the same on every engine.
pub const GUEST_WORKLOAD_ID: u32 = cordon_backend_kit::WORKLOAD_ID;
/// Where the agent mounts the work dir's tmpfs in the guest.
pub const GUEST_WORK_SOURCE: &str = "/run/cordon-work";
/// Where the agent mounts the packed image in the guest.
pub const GUEST_IMAGE: &str = "/image";
/// Where the agent places the sandbox's trust of its egress CA in the
/// guest (outside anything the workload sees; bound at
/// `/run/cordon/trust` in the sandbox).
pub const GUEST_TRUST_DIR: &str = "/run/cordon-trust";
/// Where the agent makes the sandbox's secrets directory in the guest
/// (in its RAM; bound read-only at `/run/cordon/secrets` in the sandbox),
/// when the spec names secrets.
pub const GUEST_SECRETS_DIR: &str = "/run/cordon-secrets";

/// What a sandbox needs from its backend.
#[derive(Clone)]
pub struct SandboxConfig {
    pub policy: Arc<Policy>,
    pub env: Deployment,
    pub machine: crate::probe::Machine,
    pub init: cordon_linux::InitProgram,
    pub scratch: PathBuf,
}

/// A live microvm sandbox.
pub struct MicrovmSandbox {
    id: String,
    provenance: Provenance,
    limits: Limits,
    policy: Arc<Policy>,
    env: Deployment,
    vm: Vm,
    /// The guest's RAM and CPUs (a copy saved with its memory needs the same).
    memory_mib: u64,
    cpus: u32,
    /// The image's tree as the workload sees it (resolution, translation).
    view: Box<dyn FsView + Send + Sync>,
    work: String,
    base: OnceLock<PlanSpec>,
    proxy_port: Option<u16>,
    /// Whether the guest placed the egress proxy's CA for the sandbox to
    /// trust (the proxy inspects some host).
    trusts_ca: bool,
    route: Mutex<Option<Route>>,
    dir: PathBuf,
    /// Its pause: held while anything is asked of the guest, which a
    /// frozen one would never answer.
    paused: cordon_backend_kit::Pausing,
    /// Made with `requires: [ports]`: the workload listens in the guest,
    /// and forwards cross the channel ([`crate::ports`]); the host's side
    /// of them made at the first.
    ports: Option<OnceLock<crate::ports::PortPairs>>,
}

/// The egress route: the proxy's listener in a namespace of its own, which
/// the relay connects into for each connection the guest opens.
struct Route {
    ns: Arc<OwnedFd>,
    serving: cordon_backend_kit::Serving,
}

use cordon_backend_kit::failed;

use cordon_backend_kit::exec::{plan_now, refused, resolved_argv, wall_seconds};

impl MicrovmSandbox {
    /// Boots a guest for `req` over the image tree `image_root` packed at
    /// `packed`.
    pub fn create(
        config: &SandboxConfig,
        req: &AcquireRequest,
        image_root: &Path,
        packed: &Path,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
        name: String,
    ) -> Result<MicrovmSandbox, BackendError> {
        let spec = &req.provenance.spec;
        let work = spec.work_dir().to_string();
        let dir = config.scratch.join(&name);
        std::fs::create_dir(&dir)
            .map_err(|e| failed("acquire", format!("cannot make `{}`: {e}", dir.display())))?;
        let made = (|| {
            // The work dir lives in the guest; the view binds an empty
            // stand-in so the translation sees it as the workload will.
            let stand_in = dir.join("work-view");
            std::fs::create_dir(&stand_in).map_err(|e| failed("acquire", e.to_string()))?;
            let view = cordon_backend_kit::profile::CONTAINER
                .view(&work, &stand_in, Some(image_root))
                .map_err(|e| failed("acquire", e))?;
            let label = Label {
                scope: req.key.scope().to_string(),
                thread: req.key.thread_id().to_string(),
                key: req.key.to_string(),
                accel: config.machine.accel,
            };
            std::fs::write(
                dir.join("sandbox.json"),
                serde_json::to_vec(&label).map_err(|e| failed("acquire", e.to_string()))?,
            )
            .map_err(|e| failed("acquire", e.to_string()))?;
            // A copy of a guest saved with its memory: read what it was
            // made with, and refuse before anything boots what cannot load.
            let saved = memory::of_origin(req, egress.is_some()).map_err(refused_acquire)?;
            let (proxy_port, route, opener, ca_pem) = match egress {
                None => (None, None, None, None),
                Some(service) => {
                    let (port, route, ca_pem) =
                        route(&service, req).map_err(|e| failed("acquire", e))?;
                    let (opener, slot) = relay_opener(route.ns.clone(), port);
                    (Some(port), Some((route, slot)), Some(opener), ca_pem)
                }
            };
            let memory_mib = (req.limits.memory_bytes >> 20).max(64) + GUEST_OS_MIB;
            let boot = BootSpec {
                qemu: config.machine.qemu.clone(),
                kernel: config.machine.kernel.image.clone(),
                initramfs: config.machine.initramfs.clone(),
                image: packed.to_path_buf(),
                accel: config.machine.accel,
                memory_mib,
                cpus: 1,
                run_dir: dir.join("run"),
                deadline: boot_deadline(config.machine.accel),
                name: crate::jail_name(&name),
                incoming: saved.is_some(),
            };
            std::fs::create_dir(&boot.run_dir).map_err(|e| failed("acquire", e.to_string()))?;
            let vm = match &saved {
                Some((s, state)) => {
                    s.fits(&boot).map_err(refused_acquire)?;
                    Vm::restore(&boot, &config.init, opener, state, s.first_id)
                }
                None => Vm::boot(&boot, &config.init, opener),
            }
            .map_err(|e| failed("acquire", e))?;
            let residue = crate::Residue {
                dir: dir.clone(),
                cgroups: vm.jail.cgroup_dirs(),
            };
            if let Err(e) = serde_json::to_vec(&residue)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    std::fs::write(dir.join("residue.json"), b).map_err(|e| e.to_string())
                })
            {
                vm.stop();
                return Err(failed("acquire", format!("recording the sandbox: {e}")));
            }
            let route = route.map(|(r, slot)| {
                let _ = slot.set(Arc::downgrade(&vm.channel));
                r
            });
            let sb = MicrovmSandbox {
                id: name.clone(),
                provenance: req.provenance.clone(),
                limits: req.limits,
                policy: config.policy.clone(),
                env: config.env.clone(),
                vm,
                memory_mib,
                cpus: boot.cpus,
                view,
                work,
                base: OnceLock::new(),
                proxy_port,
                trusts_ca: ca_pem.is_some(),
                route: Mutex::new(route),
                dir: dir.clone(),
                paused: Default::default(),
                ports: req
                    .provenance
                    .spec
                    .requires()
                    .contains(cordon_sandbox::Capability::Ports)
                    .then(OnceLock::new),
            };
            // A copy holds its sandbox already: the plan it was saved
            // with, which must be the one its host gives it now.
            if let Some((s, _)) = &saved {
                if let Err(e) = memory::same_plan(&sb, s) {
                    sb.vm.stop();
                    return Err(refused_acquire(e));
                }
                return Ok(sb);
            }
            sb.set_up(req, ca_pem.as_deref())
                .inspect_err(|_| sb.vm.stop())?;
            Ok(sb)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// A booted guest made ready: the egress CA placed (before the
    /// sandbox starts: its binds are made then), the sandbox set up with
    /// its plan, and a snapshot's files put in.
    fn set_up(&self, req: &AcquireRequest, ca_pem: Option<&str>) -> Result<(), BackendError> {
        if let Some(pem) = ca_pem {
            self.vm
                .channel
                .trust(GUEST_TRUST_DIR, GUEST_IMAGE, pem)
                .map_err(|e| {
                    failed(
                        "acquire",
                        cordon_backend_kit::trust::unplaced(format!("in the guest: {e}")),
                    )
                })?;
        }
        let plan = self.base_plan().map_err(|e| match e {
            SandboxError::Refused { reason, .. } => refused_acquire(reason),
            e => failed("acquire", e.to_string()),
        })?;
        let plan_json =
            serde_json::to_value(&plan).map_err(|e| failed("acquire", e.to_string()))?;
        self.vm
            .channel
            .setup(plan_json, req.limits.disk_bytes)
            .map_err(|e| {
                failed(
                    "acquire",
                    format!("the guest could not set the sandbox up: {e}"),
                )
            })?;
        if let Some(origin) = &req.provenance.origin {
            self.restore(origin).map_err(|e| {
                failed(
                    "acquire",
                    format!(
                        "the snapshot `{}` could not be put in the guest: {e}",
                        origin.snapshot
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// A snapshot's files written into the new guest's work dir and
    /// `/tmp` through its files API, before anything runs there (what
    /// the other backends mount as a lower layer: a guest reaches no host
    /// directory). A snapshot with processes is loaded whole instead
    /// ([`memory`]).
    fn restore(&self, origin: &cordon_sandbox::Origin) -> Result<(), String> {
        let files = |op: &cordon_sandbox::FileOp| self.vm.channel.files(op);
        cordon_files::through::copy_in(&files, &origin.tree, "")?;
        if let Some(tmp) = &origin.tmp {
            cordon_files::through::copy_in(&files, tmp, "/tmp")?;
        }
        Ok(())
    }

    /// The sandbox's directory on the host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The guest's kernel release, as its agent said.
    pub fn kernel_release(&self) -> &str {
        &self.vm.kernel_release
    }

    /// Which accelerator runs it.
    pub fn accel(&self) -> Accel {
        self.vm.accel
    }

    /// How long the boot took.
    pub fn boot_time(&self) -> Duration {
        self.vm.boot
    }

    /// The guest awake: resumed first when paused; held (no pause comes
    /// between) while the caller asks something of it.
    fn awake(&self) -> Result<std::sync::MutexGuard<'_, bool>, SandboxError> {
        self.paused.awake(|p| self.frozen(p))
    }

    /// Freezes or thaws QEMU and its guest through the jail's cgroup.
    fn frozen(&self, frozen: bool) -> Result<(), SandboxError> {
        let operation = if frozen { "pause" } else { "resume" };
        self.vm.jail.freeze(frozen).map_err(|e| match e.kind() {
            std::io::ErrorKind::Unsupported => SandboxError::Refused {
                reason: e.to_string(),
                rules: Vec::new(),
            },
            _ => SandboxError::Failed {
                operation,
                reason: e.to_string(),
            },
        })
    }

    /// Ends the guest and removes the sandbox's directory.
    pub fn dispose(&self) -> Result<(), BackendError> {
        self.vm.stop();
        *self.route.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed(
                "dispose",
                format!("cannot remove `{}`: {e}", self.dir.display()),
            )),
        }
    }

    /// The sandbox's plan without a command: the policy's storage and
    /// compute rules translated for the container rung over the image.
    fn base_plan(&self) -> Result<PlanSpec, SandboxError> {
        if let Some(p) = self.base.get() {
            return Ok(p.clone());
        }
        let plan = plan_now(
            &self.policy,
            &self.provenance.identity,
            &self.env,
            &self.work,
        )?;
        let work_seen = self
            .view
            .canonical(Path::new(&self.work))
            .map_err(|e| refused(format!("the work dir `{}`: {e}", self.work)))?;
        let t = cordon_confine::translate(
            &self.policy,
            &plan,
            &cordon_confine::Target {
                rung: "container",
                mode: cordon_confine::Mode::MasksAvailable,
                tmp_shared: false,
                work_dir: &work_seen,
                tmp_dir: Path::new("/tmp"),
                fs: &*self.view,
            },
        )
        .map_err(|e| refused(e.message))?;
        let mut env = BTreeMap::from([
            (
                "PATH".to_string(),
                cordon_confine::command::IMAGE_PATH.to_string(),
            ),
            ("HOME".to_string(), self.work.clone()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
        ]);
        env.extend(cordon_backend_kit::trust::egress_env(
            self.proxy_port,
            self.trusts_ca,
        ));
        let spec = PlanSpec {
            rung: Rung::Container,
            fs: t
                .fs
                .into_iter()
                .map(|r| FsRule {
                    path: r.path,
                    read: r.read,
                    write: r.write,
                    execute: r.execute,
                })
                .collect(),
            mask_paths: t.mask_paths,
            mask_executables: t.mask_executables,
            work_dir: PathBuf::from(&self.work),
            work_dir_source: Some(PathBuf::from(GUEST_WORK_SOURCE)),
            image_root: Some(PathBuf::from(GUEST_IMAGE)),
            tmp_dir: None,
            proxy_port: self.proxy_port,
            listen: self.ports.is_some(),
            secrets_dir: (!self.provenance.spec.secrets().is_empty())
                .then(|| PathBuf::from(GUEST_SECRETS_DIR)),
            trust_dir: self.trusts_ca.then(|| PathBuf::from(GUEST_TRUST_DIR)),
            kvm: false,
            env,
            bounds: self.bounds(self.limits.wall_seconds),
            argv: Vec::new(),
            ids: Ids {
                uid: INSIDE_ID,
                gid: INSIDE_ID,
                host_uid: GUEST_WORKLOAD_ID,
                host_gid: GUEST_WORKLOAD_ID,
            },
        };
        Ok(self.base.get_or_init(|| spec).clone())
    }

    fn bounds(&self, wall: u64) -> Bounds {
        Bounds {
            max_memory: self.limits.memory_bytes,
            max_processes: u32::try_from(self.limits.processes).unwrap_or(u32::MAX),
            max_cpu_seconds: self.limits.cpu_seconds,
            max_wall_seconds: wall,
            max_disk: self.limits.disk_bytes,
        }
    }
}

fn refused_acquire(reason: String) -> BackendError {
    BackendError::Refused {
        operation: "acquire",
        reason,
    }
}

/// RAM the guest's kernel and agent need beside the workload's bound.
pub const GUEST_OS_MIB: u64 = 160;

fn boot_deadline(accel: Accel) -> Duration {
    match accel {
        Accel::Kvm => Duration::from_secs(10),
        // One boot in about fourteen hung silently under TCG here; a
        // healthy one takes 2–4 s, more on a loaded machine.
        Accel::Tcg => Duration::from_secs(30),
    }
}

/// What a sandbox's directory says about it: how `dispose_scope` and the
/// sweep find it from the system's own state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Label {
    pub scope: String,
    pub thread: String,
    pub key: String,
    pub accel: Accel,
}

/// Makes the egress route for `req`: the proxy's listener in a network
/// namespace of its own, served; and the CA the proxy signs inspected
/// hosts' leaves with, when it inspects some.
fn route(
    service: &Arc<dyn cordon_egress::EgressService>,
    req: &AcquireRequest,
) -> Result<(u16, Route, Option<String>), String> {
    let made = cordon_backend_kit::register::private_route(&**service, req)?;
    Ok((
        made.port,
        Route {
            ns: Arc::new(made.ns),
            serving: made.serving,
        },
        made.ca_pem,
    ))
}

type ChannelSlot = Arc<OnceLock<Weak<Channel>>>;

/// The host side of relayed connections: each connection the guest opens
/// is a TCP connection to the proxy's listener, made inside the proxy's
/// namespace, its bytes copied both ways.
fn relay_opener(ns: Arc<OwnedFd>, port: u16) -> (ConnOpener, ChannelSlot) {
    let slot: ChannelSlot = Arc::new(OnceLock::new());
    let s = slot.clone();
    let opener: ConnOpener = Arc::new(move |conn: u64| -> Option<ConnSink> {
        let ch = s.get()?.upgrade()?;
        let stream = match cordon_linux::netns::connect_in(
            ns.as_fd(),
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        ) {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!("the egress relay could not reach the proxy: {e}");
                ch.conn_close(conn);
                return None;
            }
        };
        let sink = crate::ports::relay_stream(Arc::downgrade(&ch), conn, stream, true);
        if sink.is_none() {
            ch.conn_close(conn);
        }
        sink
    });
    (opener, slot)
}

impl Sandbox for MicrovmSandbox {
    /// Through the proxy serving its route: replaces the allowlist (new
    /// connections are decided by the new generation, open ones it denies
    /// are closed) or closes egress; a sandbox with no route refuses.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        match &*self.route.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(r) => r.serving.change(change, by),
            None => Err(cordon_backend_kit::no_route()),
        }
    }

    cordon_backend_kit::sandbox_basics!(view);

    /// Through the jail's cgroup: QEMU — the whole guest, its kernel and
    /// every process — frozen; its RAM stays. Anything asked of the guest
    /// (an exec, a file) resumes it first.
    fn pause(&self) -> Result<(), SandboxError> {
        self.paused.set(true, |p| self.frozen(p))
    }
    fn resume(&self) -> Result<(), SandboxError> {
        self.paused.set(false, |p| self.frozen(p))
    }

    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let _awake = self.awake()?;
        let argv = resolved_argv(
            &*self.view,
            req,
            &attach,
            "the microvm backend serves no terminal yet; run without one",
        )?;
        let base = self.base_plan()?;
        let mut env = base.env.clone();
        env.extend(req.env.clone());
        let wall = wall_seconds(&self.limits, req);
        let bounds = serde_json::to_value(self.bounds(wall)).map_err(|e| SandboxError::Failed {
            operation: "exec",
            reason: e.to_string(),
        })?;
        self.vm.channel.exec(
            argv,
            env,
            bounds,
            req.max_output_bytes,
            Some(req.stdin.clone()),
            attach.stdin_stream,
            Duration::from_secs(wall),
        )
    }

    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        let _awake = self.awake()?;
        self.vm.channel.write_file(path, contents, mode)
    }

    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let _awake = self.awake()?;
        self.vm.channel.stat(path)
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        let _awake = self.awake()?;
        let r = self.vm.channel.read(path, max_bytes)?;
        if r.bytes.len() as u64 > max_bytes.saturating_add(1) {
            return Err(SandboxError::Failed {
                operation: "read",
                reason: "the guest sent more than was asked".into(),
            });
        }
        Ok(r)
    }

    fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, SandboxError> {
        let _awake = self.awake()?;
        self.vm.channel.list(path)
    }

    fn files(
        &self,
        op: &cordon_sandbox::FileOp,
    ) -> Result<cordon_sandbox::FileAnswer, SandboxError> {
        let _awake = self.awake()?;
        self.vm.channel.files(op)
    }

    /// The whole guest saved through QEMU's migration into a file
    /// ([`memory`]): its processes, memory and confinement; the source
    /// goes on as it was (its execs too). Refused with an egress route.
    fn checkpoint(&self, into: &Path) -> Result<u32, SandboxError> {
        memory::save(self, into)
    }

    /// Through the guest's files API ([`cordon_files::through`]), the
    /// guest awake and held so for the copy.
    fn copy_files_out(
        &self,
        into: &Path,
        room: u64,
        max_entries: usize,
    ) -> Result<Vec<String>, SandboxError> {
        let _awake = self.awake()?;
        let files = |op: &cordon_sandbox::FileOp| self.vm.channel.files(op);
        let (mut room, mut left) = (room, max_entries);
        let failed = |reason: String| SandboxError::Failed {
            operation: "snapshot",
            reason,
        };
        let work =
            cordon_files::through::copy_out(&files, "", &into.join("tree"), &mut room, &mut left)
                .map_err(failed)?;
        let tmp = cordon_files::through::copy_out(
            &files,
            "/tmp",
            &into.join("tmp"),
            &mut room,
            &mut left,
        )
        .map_err(|e| failed(format!("`/tmp`: {e}")))?;
        Ok(work.skipped.into_iter().chain(tmp.skipped).collect())
    }

    fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        let _awake = self.awake()?;
        self.vm.channel.watch(path, recursive)
    }

    /// Opened by the guest agent in the sandbox's network namespace there,
    /// relayed over the channel ([`crate::ports`]); refused for a sandbox
    /// not made to listen.
    fn open_port(
        &self,
        req: &cordon_sandbox::PortRequest,
    ) -> Result<std::net::TcpStream, SandboxError> {
        let Some(pairs) = &self.ports else {
            return Err(SandboxError::Unsupported {
                capability: cordon_sandbox::Capability::Ports,
            });
        };
        let _awake = self.awake()?;
        if pairs.get().is_none() {
            let made = crate::ports::PortPairs::make().map_err(|reason| SandboxError::Failed {
                operation: "port",
                reason,
            })?;
            // Another forward may have made them meanwhile: one is kept.
            let _ = pairs.set(made);
        }
        let Some(made) = pairs.get() else {
            return Err(SandboxError::Failed {
                operation: "port",
                reason: "the forward's namespace is gone".into(),
            });
        };
        crate::ports::open(&self.vm.channel, made, req.port)
    }

    fn residue(&self) -> serde_json::Value {
        serde_json::to_value(crate::Residue {
            dir: self.dir.clone(),
            cgroups: self.vm.jail.cgroup_dirs(),
        })
        .unwrap_or(serde_json::Value::Null)
    }
}

impl Drop for MicrovmSandbox {
    fn drop(&mut self) {
        self.vm.jail.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files the agent places are the ones the env names in the
    /// sandbox, where `cordon_linux` binds the plan's trust directory.
    #[test]
    fn the_guests_trust_files_are_the_ones_the_env_names() {
        use cordon_backend_kit::trust::{BUNDLE_AT, CA_AT};
        assert_eq!(
            BUNDLE_AT,
            format!("{}/{}", cordon_linux::TRUST_AT, cordon_linux::TRUST_BUNDLE)
        );
        assert_eq!(
            CA_AT,
            format!("{}/{}", cordon_linux::TRUST_AT, cordon_vm_proto::TRUST_CA)
        );
        // Apart from the work dir's source and the image, which the plan
        // also names in the guest.
        let trust = Path::new(GUEST_TRUST_DIR);
        for other in [GUEST_WORK_SOURCE, GUEST_IMAGE] {
            assert!(!trust.starts_with(other) && !Path::new(other).starts_with(trust));
        }
    }
}
