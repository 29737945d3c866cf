//! [`GvisorSandbox`]: one sandbox's directory (its root, its volume, a
//! bundle per exec) and its execs, each one `runsc run`.
//!
//! The directory, `TMPDIR/cordon-gvisor-PID-N-STAMP/`, root's, mode 0700:
//!
//! - `rootfs/` — the read-only root ([`crate::oci::HostImage`]): the
//!   `host` image's mount points, or a stored image's skeleton (its
//!   directories bound from cordon's store as the plan grants);
//! - `volume/` — an ext4 volume of `max_disk`: `work/` (the work dir) and
//!   `tmp/` (`/tmp`), owned by [`crate::WORKLOAD_ID`], so one bound holds
//!   both, as at the local rungs;
//! - `masks/` — an empty directory and an empty file, bound over what the
//!   plan hides;
//! - `exec-K/` — one exec's `config.json` and runsc's log, removed when it
//!   ends. Its container is `cordon-gvisor-PID-N-STAMP-eK`, under
//!   [`crate::STATE_ROOT`], with cgroups of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cordon_confine::oci::{self, Bundle, HostImage, Mount, MountKind};
use cordon_confine::RootedFs;
use cordon_files::host_dir::{HostSecretsDir, HostWorkDir};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Attach, BackendError, ExecHandle, ExecRequest, Killer, Limits, Provenance,
    Sandbox, SandboxError, SandboxKey, StdinFeed,
};
use serde::{Deserialize, Serialize};

use crate::bundle::*;
use crate::cgroup::MemoryBound;
use crate::pod::{Pod, PodSpec};
use crate::running::*;
use crate::runsc::Runsc;
use crate::{GvisorConfig, WORKLOAD_ID};
use cordon_backend_kit::exec::{exec_failed, live, mounts_error, resolved_argv, ExecBounds};
use cordon_backend_kit::workarea::{make_masks, Acquiring, WorkArea};
use cordon_backend_kit::{failed, HostFiles, NEXT};

/// Why an exec asking for a terminal is refused.
const NO_TTY: &str = "the gvisor backend gives no terminal in this version; run without one, or at `--min-isolation container`";

/// What a sandbox leaves if its holder dies: its directory (with the
/// volume mounted in it) and the prefix of its containers' ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub dir: PathBuf,
    pub containers: String,
}

/// One gvisor sandbox.
pub struct GvisorSandbox {
    /// The directory's name: every container id begins with it.
    id: String,
    dir: PathBuf,
    image: HostImage,
    /// Where the image's tree is on the host: `/` for the `host` image, a
    /// stored image's root in cordon's store otherwise.
    image_root: PathBuf,
    volume: PathBuf,
    guest_work: String,
    provenance: Provenance,
    limits: Limits,
    policy: Arc<Policy>,
    env: Deployment,
    runsc: Runsc,
    view: RootedFs,
    /// The work dir and, for a spec that names secrets, the directory they
    /// are written to (`dir/secrets`, root's, the workload's group reads),
    /// bound read-only at `/run/cordon/secrets` in every exec.
    files: HostFiles,
    /// The mounts the policy's plan translates to, made at the first exec.
    base: OnceLock<Result<Vec<Mount>, SandboxError>>,
    /// The syscall table as one seccomp program (hex), which the helper
    /// installs on every exec in the pod (`crate::podexec`), made once.
    filter: OnceLock<Result<String, String>>,
    /// The runsc sandbox every exec is a container in (`crate::pod`).
    pod: Mutex<Option<Arc<Pod>>>,
    /// Execs started so far (the first runs in a runsc sandbox of its own).
    execs: std::sync::atomic::AtomicU64,
    /// Exec containers not known gone yet, and whether a pod was ever
    /// started: with neither, dispose has no container to look for.
    unsettled: Arc<std::sync::atomic::AtomicUsize>,
    pod_started: AtomicBool,
    key: SandboxKey,
    /// The egress proxy's channel, when the spec names hosts.
    route: Option<Route>,
    disposed: AtomicBool,
    /// Its pause (see [`cordon_backend_kit::Pausing`]).
    paused: cordon_backend_kit::Pausing,
    /// The spec's workspace, mounted copy-on-write as the work dir.
    workspace: Option<cordon_files::workspace::Workspace>,
    /// For a spec that `requires: [snapshot_memory]`: its running execs,
    /// which `checkpoint` saves (every exec then a runsc sandbox of its
    /// own). `None`: nothing is tracked, and `checkpoint` refuses.
    memory: Option<memory::Execs>,
}

mod memory;

impl GvisorSandbox {
    /// Makes the sandbox's directory, root and volume; nothing runs yet.
    pub(crate) fn create(
        config: &GvisorConfig,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<GvisorSandbox, BackendError> {
        let acquiring = Acquiring::new(req, &config.setup, crate::NAME)?;
        let (guest_work, image_root) = (&acquiring.guest_work, &acquiring.image_root);
        let made_dir = crate::DIRS.make(&config.setup.scratch)?;
        let (id, dir) = (made_dir.id.clone(), made_dir.dir.clone());
        let wants_secrets = !req.provenance.spec.secrets().is_empty();
        let mut workspace = None;
        let mut own_tmp = None;
        let mut tmp_files = None;
        let made =
            (|| -> Result<(HostImage, RootedFs, HostWorkDir, Option<HostSecretsDir>), String> {
                let image = if image_root == Path::new("/") {
                    HostImage::prepare(&dir.join("rootfs"))?
                } else {
                    stored_skeleton(&dir.join("rootfs"), image_root)?
                };
                if let Some(d) = image
                    .dirs
                    .iter()
                    .find(|d| Path::new(&guest_work).starts_with(d))
                {
                    return Err(format!(
                        "the work dir `{guest_work}` is inside the image's `{}`, which the gvisor backend binds from the image; name a work dir outside it, like `/workspace`",
                        d.display()
                    ));
                }
                image.write_etc(WORKLOAD_ID, WORKLOAD_ID, guest_work)?;
                install_shim(&image.rootfs)?;
                crate::podexec::install(&image.rootfs)?;
                oci::mkdir_in(&image.rootfs, Path::new(&guest_work))?;
                make_masks(&dir.join("masks"))?;
                let WorkArea {
                    view,
                    files,
                    workspace: w,
                    tmp: t,
                    tmp_files: tf,
                    ..
                } = acquiring.work_area(&made_dir)?;
                workspace = w;
                own_tmp = t;
                tmp_files = Some(tf);
                // Inside the sandbox's directory (root's, 0700): no other
                // sandbox's workload, though the same uid, can reach it.
                let secrets = if wants_secrets {
                    oci::mkdir_in(
                        &image.rootfs,
                        Path::new(cordon_sandbox::secrets::SECRETS_DIR),
                    )?;
                    Some(HostSecretsDir::make(dir.join("secrets"), WORKLOAD_ID)?)
                } else {
                    None
                };
                Ok((image, view, files, secrets))
            })();
        let ports = req
            .provenance
            .spec
            .requires()
            .contains(cordon_sandbox::Capability::Ports);
        let made = made.and_then(|m| match (&egress, ports) {
            (None, false) => Ok((m, None)),
            (service, _) => route(
                service.as_ref(),
                req,
                (&dir, image_root, &m.0.rootfs),
                ports,
            )
            .map(|r| (m, Some(r))),
        });
        let ((image, view, files, secrets), route) = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = remove_sandbox_dir(&dir);
                return Err(failed("acquire", e));
            }
        };
        let sandbox = GvisorSandbox {
            id,
            dir,
            image,
            image_root: image_root.clone(),
            volume: made_dir.dir.join("volume"),
            guest_work: guest_work.clone(),
            provenance: req.provenance.clone(),
            limits: req.limits,
            policy: config.setup.policy.clone(),
            env: config.setup.env.clone(),
            runsc: config.runsc.clone(),
            view,
            files: HostFiles::new(files, secrets, WORKLOAD_ID)
                .with_tmp(own_tmp)
                .with_tmp_files(tmp_files),
            base: OnceLock::new(),
            filter: OnceLock::new(),
            pod: Mutex::new(None),
            execs: std::sync::atomic::AtomicU64::new(0),
            unsettled: Default::default(),
            pod_started: AtomicBool::new(false),
            key: req.key.clone(),
            route,
            disposed: AtomicBool::new(false),
            paused: Default::default(),
            workspace,
            memory: req
                .provenance
                .spec
                .requires()
                .contains(cordon_sandbox::Capability::SnapshotMemory)
                .then(memory::Execs::default),
        };
        Ok(sandbox)
    }

    /// Pauses (or resumes) every runsc container of the sandbox; the first
    /// that fails fails the whole, saying which.
    fn freeze_all(&self, paused: bool) -> Result<(), SandboxError> {
        let operation = if paused { "pause" } else { "resume" };
        let failed = |reason: String| SandboxError::Failed { operation, reason };
        let prefix = format!("{}-", self.id);
        // A sandbox made to save its processes has no pod: its runsc
        // sandboxes are its running execs, which it tracks (no listing of
        // every container on the host).
        let ids = match &self.memory {
            Some(execs) => execs.running(),
            None => crate::runsc::list(&self.runsc.bin).map_err(failed)?,
        };
        for id in ids.iter().filter(|id| id.starts_with(&prefix)) {
            crate::runsc::pause(&self.runsc.bin, id, paused).map_err(failed)?;
        }
        Ok(())
    }

    /// The running runsc sandbox, started (again) when there is none or
    /// the last one ended.
    fn pod(&self) -> Result<Arc<Pod>, SandboxError> {
        let mut slot = self
            .pod
            .lock()
            .map_err(|_| exec_failed("the sandbox's pod lock is poisoned"))?;
        if let Some(p) = slot.as_ref() {
            if p.alive() {
                return Ok(p.clone());
            }
            // Its kernel ended (a kill at the memory bound, or killed from
            // outside): clear what is left of it before the next.
            let _ = p.stop(&self.runsc.bin);
            *slot = None;
        }
        if self.disposed.load(Ordering::SeqCst) {
            return Err(exec_failed("the sandbox was disposed of"));
        }
        self.pod_started.store(true, Ordering::SeqCst);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-p{k}", self.id);
        let pod_dir = self.dir.join(format!("pod-{k}"));
        private_dir(&pod_dir).map_err(exec_failed)?;
        let annotations = BTreeMap::from([
            (crate::pod::SCOPE.to_string(), self.key.scope().to_string()),
            (
                crate::pod::THREAD.to_string(),
                self.key.thread_id().to_string(),
            ),
            (
                crate::pod::AGENT_DIR.to_string(),
                self.key.agent_dir().to_string(),
            ),
            (crate::pod::DIR.to_string(), self.dir.display().to_string()),
        ]);
        let pod = Pod::start(PodSpec {
            id,
            dir: &pod_dir,
            root: &self.image.rootfs,
            mounts: self.exec_mounts()?,
            bin: &self.runsc.bin,
            uid: WORKLOAD_ID,
            memory_bytes: self.limits.memory_bytes,
            annotations,
            netns: self.route.as_ref().map(Route::path),
        })
        .map_err(exec_failed)?;
        let pod = Arc::new(pod);
        *slot = Some(pod.clone());
        Ok(pod)
    }

    /// Stops every container of the sandbox and removes everything it made:
    /// its containers' state and cgroups, its volume, its directory.
    pub fn dispose(&self) -> Result<(), BackendError> {
        if self.disposed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if let Ok(mut slot) = self.pod.lock() {
            if let Some(p) = slot.take() {
                p.dead.store(true, Ordering::SeqCst);
            }
        }
        self.files.end_watches();
        // Every container this sandbox made is known gone (no pod, each
        // exec's deleted): nothing to list. A sandbox that saves its
        // processes restores containers of its own, so it always looks.
        let settled = self.memory.is_none()
            && !self.pod_started.load(Ordering::SeqCst)
            && self.unsettled.load(Ordering::SeqCst) == 0;
        let failures = match settled {
            true => Vec::new(),
            false => remove_containers(&self.runsc.bin, &format!("{}-", self.id)),
        };
        // Its runsc sandboxes are gone: the serving ends and the
        // namespace closes when the sandbox is dropped.
        if let Some(r) = &self.route {
            r.serving.end();
        }
        cordon_backend_kit::dirs::remove_last(&self.dir, failures)
    }

    /// The sandbox's directory on the host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy's storage plan as this sandbox's mounts (once).
    fn base(&self) -> Result<Vec<Mount>, SandboxError> {
        self.base.get_or_init(|| self.make_base()).clone()
    }

    fn make_base(&self) -> Result<Vec<Mount>, SandboxError> {
        oci::engine_mounts(
            &self.policy,
            (
                &self.provenance.identity,
                &self.env,
                cordon_sandbox::guard::now(),
            ),
            crate::NAME,
            &self.guest_work,
            (&self.image_root, &self.image.dirs),
            &self.view,
            self.files.work().host(),
            (&self.image.rootfs, &self.volume, &self.dir.join("masks")),
        )
        .map_err(mounts_error)
    }

    fn start(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        live(&self.disposed)?;
        // An exec on a paused sandbox resumes it first; no pause comes
        // until it has started.
        let _awake = self.paused.awake(|p| self.freeze_all(p))?;
        let argv = resolved_argv(&self.view, req, &attach, NO_TTY)?;
        let trust = self.route.as_ref().and_then(|r| r.trust.as_ref());
        let env = cordon_backend_kit::workarea::exec_env(
            &self.guest_work,
            self.route.as_ref().and_then(|r| r.port),
            trust.is_some(),
            &req.env,
        );
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let cid = format!("{}-e{k}", self.id);
        let exec_dir = self.dir.join(format!("exec-{k}"));
        private_dir(&exec_dir).map_err(exec_failed)?;
        // The first exec is a runsc sandbox of its own (a one-shot `cordon
        // run` never pays for a pod, whose teardown alone costs runsc
        // 1-2 s); every later one is a container in the sandbox's pod,
        // but in a sandbox whose processes may be saved (`memory`): this
        // runsc restores a runsc sandbox of one container only.
        let first = self.execs.fetch_add(1, Ordering::SeqCst) == 0;
        let held = if first || self.memory.is_some() {
            MemoryBound::make(&cid, self.limits.memory_bytes).map(Held::Own)
        } else {
            self.pod().map(Held::Pod).map_err(|e| e.to_string())
        };
        let held = match held {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(exec_failed(e));
            }
        };
        let saved = memory::Saved {
            argv: argv.clone(),
            env: env.clone(),
            timeout_secs: req.timeout.as_secs(),
        };
        let target = match &held {
            Held::Pod(pod) => Target::PodExec {
                pod: pod.id.clone(),
                pid_file: crate::podexec::pid_file(&exec_dir),
            },
            Held::Own(_) => Target::Container,
        };
        // Counted before its container can exist: a dispose beside it
        // then asks runsc.
        let mut unsettled = match &target {
            Target::Container => Unsettled::counted(&self.unsettled),
            Target::PodExec { .. } => Unsettled::none(),
        };
        let with_stdin = attach.stdin_stream || !req.stdin.is_empty();
        let made = self.exec_command(&target, (&cid, &exec_dir), argv, env, with_stdin);
        let (mut cmd, log) = match made {
            Ok(c) => c,
            Err(e) => {
                unsettled.settle();
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(exec_failed(e));
            }
        };
        // runsc hands a container's stdio to the sentry, which keeps it
        // when the container's process never started (a masked program):
        // a plain pipe would then never end. The output comes through
        // relays that end once the exec has (see `Relayed`).
        let relay_done = RelayEnd::new();
        let relays = Relayed::pipe(&relay_done).and_then(|(out, out_w)| {
            Relayed::pipe(&relay_done).map(|(err, err_w)| (out, out_w, err, err_w))
        });
        let (stdout, out_w, stderr, err_w) = match relays {
            Ok(r) => r,
            Err(e) => {
                unsettled.settle();
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(exec_failed(format!("cannot make the output pipes: {e}")));
            }
        };
        cmd.stdout(Stdio::from(out_w)).stderr(Stdio::from(err_w));
        let spawned = cmd.spawn();
        // Our copies of the write ends go with the command.
        drop(cmd);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                unsettled.settle();
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(exec_failed(format!(
                    "cannot start `{}`: {e}",
                    self.runsc.bin.display()
                )));
            }
        };
        let stdin = match child.stdin.take() {
            Some(w) if attach.stdin_stream => StdinFeed::Stream(Box::new(w)),
            Some(w) => StdinFeed::Bytes(Box::new(w), req.stdin.clone()),
            None => StdinFeed::None,
        };
        let killed = Arc::new(AtomicBool::new(false));
        let in_pod = match &target {
            Target::PodExec { pod, pid_file } => Some((pod.clone(), pid_file.clone())),
            Target::Container => None,
        };
        let run = Running {
            child,
            cid: cid.clone(),
            state: crate::stateroot::Seen::new(),
            unsettled,
            target,
            exec_dir,
            log,
            bin: self.runsc.bin.clone(),
            bounds: ExecBounds::new(&self.limits, req, killed.clone()),
            // Before its container exists an exec's own cgroup reads
            // nothing: 0, and a pod's unreadable count charges everything.
            cpu_at_start: crate::runsc::cpu_nanos(held.cgroup(&cid)).unwrap_or(0),
            kills_at_start: held.memory().oom_kills().unwrap_or(0),
            refusals_at_start: held.memory().refusals(),
            held,
            relay_done,
        };
        let bin = self.runsc.bin.clone();
        let tracked = self.memory.as_ref().map(|m| m.track(&cid, saved));
        Ok(ExecHandle::from_pipes(
            stdin,
            stdout,
            stderr,
            req.max_output_bytes,
            move || match tracked {
                Some(t) => t.ended(run.wait()),
                None => run.wait(),
            },
            Killer::new(move || {
                killed.store(true, Ordering::SeqCst);
                match &in_pod {
                    // At once if runsc has said the helper's pid; the
                    // exec's wait (which sees `killed`) kills it otherwise.
                    Some((pod, pid_file)) => {
                        crate::podexec::kill(&bin, pod, pid_file, Duration::ZERO, &mut || false);
                    }
                    None => crate::runsc::kill(&bin, &cid),
                }
            }),
        ))
    }

    /// Writes what runsc reads for an exec (the bundle of its container,
    /// or the helper's process in the pod) into `exec_dir`, and the `runsc
    /// run` or `runsc exec` that starts it, with its log.
    fn exec_command(
        &self,
        target: &Target,
        (cid, exec_dir): (&str, &Path),
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        with_stdin: bool,
    ) -> Result<(Command, PathBuf), String> {
        let (config, file) = match target {
            Target::PodExec { .. } => (self.pod_process(argv, &env)?, "process.json"),
            Target::Container => {
                let mounts = self.exec_mounts().map_err(|e| e.to_string())?;
                (self.exec_config(cid, argv, env, mounts)?, "config.json")
            }
        };
        let log = exec_dir.join("runsc.log");
        std::fs::write(exec_dir.join(file), config.to_string())
            .map_err(|e| format!("cannot write the bundle: {e}"))?;
        let net = match self.route {
            Some(_) => crate::runsc::Network::ProxyRoute,
            None => crate::runsc::Network::None,
        };
        let mut cmd: Command = crate::runsc::command(&self.runsc.bin, &log, net);
        match target {
            Target::PodExec { pod, pid_file } => cmd
                .args(["exec", "--process"])
                .arg(exec_dir.join(file))
                .arg("--internal-pid-file")
                .arg(pid_file)
                .arg(pod),
            Target::Container => cmd.args(["run", "--bundle"]).arg(exec_dir).arg(cid),
        };
        cmd.stdin(if with_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        Ok((cmd, log))
    }

    /// An exec's mounts: the plan's, the secrets, the trust store.
    fn exec_mounts(&self) -> Result<Vec<Mount>, SandboxError> {
        let mut mounts = self.base()?;
        if let Some(secrets) = self.files.secrets() {
            mounts.push(Mount {
                destination: PathBuf::from(cordon_sandbox::secrets::SECRETS_DIR),
                source: secrets.host().to_path_buf(),
                kind: MountKind::ReadOnly { exec: false },
            });
        }
        // Last: over whatever of the image the plan bound there.
        let trust = self.route.as_ref().and_then(|r| r.trust.as_ref());
        for (source, target, _) in trust.iter().flat_map(|t| t.binds()) {
            mounts.push(Mount {
                destination: PathBuf::from(target),
                source,
                kind: MountKind::ReadOnly { exec: false },
            });
        }
        Ok(mounts)
    }

    /// The process `runsc exec` starts in the pod for an exec: the helper
    /// (`crate::podexec`) with the command, its bounds and the table.
    fn pod_process(
        &self,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
    ) -> Result<serde_json::Value, String> {
        let filter = self
            .filter
            .get_or_init(|| {
                let net = match &self.route {
                    None => crate::podexec::Net::Own,
                    Some(r) if r.listen => crate::podexec::Net::Listening,
                    Some(_) => crate::podexec::Net::ProxyRoute,
                };
                crate::podexec::filter_hex(net)
            })
            .clone()
            .map_err(|e| format!("the syscall table as one seccomp program: {e}"))?;
        let limits = crate::podexec::Limits {
            uid: WORKLOAD_ID,
            processes: self.limits.processes,
            cpu_seconds: self.limits.cpu_seconds,
            file_bytes: self.limits.disk_bytes,
        };
        Ok(crate::podexec::process(
            argv,
            env,
            &self.guest_work,
            &limits,
            &filter,
        ))
    }

    /// The OCI config of an exec's container (a runsc sandbox of its own:
    /// the first exec, or one of a sandbox that saves its processes): the
    /// command as the workload's uid in the sandbox's root with its mounts
    /// and bounds, in the route's network namespace when there is one.
    fn exec_config(
        &self,
        cid: &str,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        mounts: Vec<Mount>,
    ) -> Result<serde_json::Value, String> {
        let config = Bundle {
            root: &self.image.rootfs,
            argv,
            env,
            cwd: self.guest_work.clone(),
            uid: WORKLOAD_ID,
            gid: WORKLOAD_ID,
            mounts,
            // Held by the runsc sandbox's cgroup (`crate::pod`).
            memory_bytes: None,
            processes: self.limits.processes,
            cpu_seconds: self.limits.cpu_seconds,
            file_bytes: self.limits.disk_bytes,
            cgroup: format!("/{cid}/{}", crate::cgroup::LEAF),
        }
        .config();
        let mut config = config;
        crate::runsc::for_runsc(&mut config);
        if let Some(r) = &self.route {
            // The namespace holding the route, and the table narrowed.
            crate::runsc::join_netns(&mut config, &r.path(), r.listen)?;
        }
        Ok(config)
    }
}

/// Kills and deletes every container under cordon's state root whose id
/// begins with `prefix`, and removes their cgroups. Returns what failed.
pub(crate) fn remove_containers(bin: &Path, prefix: &str) -> Vec<String> {
    let mut failures = Vec::new();
    match crate::runsc::list(bin) {
        Ok(ids) => {
            let mut ids: Vec<&String> = ids.iter().filter(|i| i.starts_with(prefix)).collect();
            // Execs first, then the pause container that holds their kernel.
            ids.sort_by_key(|i| crate::pod::is_pause(i));
            for id in ids {
                crate::runsc::kill(bin, id);
                if let Err(e) = crate::runsc::delete(bin, id) {
                    failures.push(e);
                }
                crate::runsc::remove_cgroups(id);
            }
        }
        Err(e) => failures.push(e),
    }
    failures
}

pub(crate) use cordon_backend_kit::remove_sandbox_dir;

impl Drop for GvisorSandbox {
    /// A sandbox dropped without [`GvisorSandbox::dispose`] still gives
    /// back its containers, its volume and its directory.
    fn drop(&mut self) {
        let _ = self.dispose();
    }
}

impl Sandbox for GvisorSandbox {
    cordon_backend_kit::host_sandbox!(start, view, files);

    /// Through runsc: every runsc sandbox of it (its pod, a first exec's
    /// own) paused whole, its sentry and gofer included.
    fn workspace_diff(&self) -> Result<Vec<cordon_sandbox::WorkspaceChange>, SandboxError> {
        cordon_backend_kit::workspace::diff(self.workspace.as_ref())
    }

    fn workspace_apply(
        &self,
        only: &[String],
    ) -> Result<cordon_sandbox::ApplyReport, SandboxError> {
        cordon_backend_kit::workspace::apply(self.workspace.as_ref(), only)
    }

    /// Through `runsc checkpoint` of each running exec's runsc sandbox
    /// (`memory`).
    fn checkpoint(&self, into: &Path) -> Result<u32, SandboxError> {
        self.checkpoint_all(into)
    }

    fn pause(&self) -> Result<(), SandboxError> {
        live(&self.disposed)?;
        self.paused.set(true, |p| self.freeze_all(p))
    }
    fn resume(&self) -> Result<(), SandboxError> {
        live(&self.disposed)?;
        self.paused.set(false, |p| self.freeze_all(p))
    }

    /// Through the proxy serving its route: replaces the allowlist (new
    /// connections are decided by the new generation, open ones it denies
    /// are closed) or closes egress; a sandbox with no route refuses.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        match &self.route {
            Some(r) if r.port.is_some() => r.serving.change(change, by),
            _ => Err(cordon_backend_kit::no_route()),
        }
    }

    /// Inside the sandbox's own network namespace, where a sandbox made
    /// with `requires: [ports]` runs its workload's sockets (hostinet);
    /// refused otherwise.
    fn open_port(
        &self,
        req: &cordon_sandbox::PortRequest,
    ) -> Result<std::net::TcpStream, SandboxError> {
        live(&self.disposed)?;
        let Some(r) = self.route.as_ref().filter(|r| r.listen) else {
            return Err(SandboxError::Unsupported {
                capability: cordon_sandbox::Capability::Ports,
            });
        };
        let ns = r.ns.try_clone().map_err(|e| SandboxError::Failed {
            operation: "port",
            reason: format!("the sandbox's network namespace: {e}"),
        })?;
        cordon_backend_kit::ports::connect(Some(ns), req.port)
    }

    fn residue(&self) -> serde_json::Value {
        serde_json::to_value(Residue {
            dir: self.dir.clone(),
            containers: format!("{}-", self.id),
        })
        .unwrap_or_default()
    }
}
