//! [`LocalSandbox`]: one sandbox's directories, ids and (container rung)
//! warm sandbox; each exec's command checked, its plan made and held; the
//! [`Residue`] it records for its cleanup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cordon_backend_kit::HostFiles;
use cordon_confine::FsView;
use cordon_linux::{
    Bound as LinuxBound, Bounds, ConfineError, Enforcer, FsRule, Ids, Plan, PlanSpec, SandboxStdio,
    Termination,
};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    Attach, BackendError, ExecHandle, ExecRequest, ExitStatus, Killer, Limits, Provenance, Sandbox,
    SandboxError,
};
use serde::{Deserialize, Serialize};

use crate::failed;
use crate::pipes::ExecPipes;
use crate::profile::RungProfile;
use cordon_backend_kit::IdLease;

/// One sandbox of a local backend: a work dir and what it was made for.
/// Every exec is its own confined launch; none outlives its exec (the
/// launcher kills the whole cgroup when the first process ends).
pub struct LocalSandbox {
    pub(crate) id: String,
    pub(crate) provenance: Provenance,
    pub(crate) limits: Limits,
    pub(crate) profile: &'static RungProfile,
    pub(crate) policy: Arc<Policy>,
    pub(crate) env: Deployment,
    pub(crate) enforcer: Arc<dyn Enforcer + Send + Sync>,
    /// The work dir and, for a spec that names secrets, the host directory
    /// they are written to (only through [`Sandbox::write_file`] at the
    /// secrets directory), bound read-only there in the sandbox and removed
    /// at dispose.
    pub(crate) files: HostFiles,
    pub(crate) host_work: PathBuf,
    pub(crate) fresh: bool,
    /// The mount the work dir is on: a fresh volume of `max_disk` (the work
    /// dir is its `work`), or the operator's directory idmapped (the work
    /// dir itself). Unmounted and removed at dispose.
    pub(crate) mount: Option<PathBuf>,
    pub(crate) tmp: Option<PathBuf>,
    pub(crate) host_id: u32,
    /// The lease on `host_id` (fresh work dirs; `None` for the shared
    /// [`crate::WORK_DIR_ID`]); released when the sandbox is dropped.
    pub(crate) id_lease: Mutex<Option<IdLease>>,
    /// Container rung: the root of the spec's image from the store (`None`:
    /// the built-in `host` image).
    pub(crate) image_root: Option<PathBuf>,
    /// The filesystem as the workload sees it: where the command is
    /// resolved and the plan translated.
    pub(crate) view: Box<dyn FsView + Send + Sync>,
    /// Container rung: the live sandbox every exec runs in.
    pub(crate) warm: Option<cordon_linux::WarmSandbox>,
    /// Its network namespace, once a forward found it (every exec runs in
    /// the one namespace for the sandbox's life; held, so it is never
    /// another's): later connections do not walk its cgroups again.
    pub(crate) netns: Mutex<Option<std::os::fd::OwnedFd>>,
    /// The translated plan without a command, made once per sandbox (the
    /// translation walks the filesystem).
    pub(crate) base: std::sync::OnceLock<(PlanSpec, Vec<String>)>,
    /// Container rung with a non-empty `egress_allow`: the port inside the
    /// sandbox's net namespace where its one route out (the egress proxy)
    /// listens. `None`: no route at all.
    pub(crate) proxy_port: Option<u16>,
    /// The proxy serving this sandbox's channel; dropped (and the channel
    /// with it) when the sandbox is.
    pub(crate) egress: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// What changes that channel's allowlist while it serves.
    pub(crate) egress_control: Mutex<Option<Arc<dyn cordon_egress::ChannelControl>>>,
    /// Container rung with a route out, under a policy that has the proxy
    /// inspect: the sandbox's trust of its proxy's CA, in a directory of
    /// its own (root's, the workload's group; removed at dispose) bound at
    /// `/run/cordon/trust`, its bundle over the image's
    /// system one. Made before the warm sandbox starts (its binds are
    /// fixed then) and filled once the channel is served.
    pub(crate) trust: Option<(PathBuf, cordon_backend_kit::trust::Trust)>,
    /// The host directory the work dir is made from, copy-on-write (a
    /// spec's `workspace`): its changes, for diff and apply.
    pub(crate) workspace: Option<cordon_files::workspace::Workspace>,
}

/// What a local sandbox leaves if its holder dies: its cgroups and the
/// directories cordon made for it, and the host uid they belong to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub cgroups: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
    /// The sandbox's host uid (absent in records of older cordons: the
    /// directories must then be owned by some sandbox uid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

use cordon_backend_kit::exec::{exec_failed, plan_now, refused, wall_seconds};

impl LocalSandbox {
    /// Stops the sandbox (container rung: kills everything in it and
    /// removes its cgroups) and removes its directories.
    pub fn dispose(&self) -> Result<(), BackendError> {
        // The route out closes first.
        drop(
            self.egress_control
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        drop(self.egress.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.files.end_watches();
        let stopped = match &self.warm {
            Some(w) => w
                .stop()
                .map_err(|e| failed("dispose", format!("stopping the sandbox: {e}"))),
            None => Ok(()),
        };
        let removed = self.remove_dirs();
        // Nothing runs as the uid any more: another sandbox may have it, so
        // what the uid owns in the host's System V IPC goes too (the
        // workload had its own namespace; this is what an older cordon's
        // process rung left).
        if stopped.is_ok() {
            for f in cordon_linux::remove_sysv_ipc_of(self.host_id).1 {
                tracing::warn!(uid = self.host_id, "dispose: {f}");
            }
            self.id_lease
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
        }
        stopped.and(removed)
    }

    /// The cgroup directories of a warm sandbox (empty at the process rung,
    /// where each exec's cgroup lives only as long as the exec).
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.warm
            .as_ref()
            .map(cordon_linux::WarmSandbox::cgroup_dirs)
            .unwrap_or_default()
    }

    /// Freezes (`true`) or thaws the warm sandbox; a machine without a
    /// freezer refuses, saying what to mount.
    fn frozen(&self, frozen: bool) -> Result<(), SandboxError> {
        let operation = if frozen { "pause" } else { "resume" };
        let Some(w) = self.warm.as_ref() else {
            return Err(SandboxError::Invalid {
                reason: format!("the process rung runs each command in a cgroup of its own, with no sandbox-wide one to freeze, so it cannot {operation}; make the sandbox at the container rung (`--min-isolation container`)"),
            });
        };
        let done = if frozen { w.pause() } else { w.resume() };
        done.map_err(|e| match e.kind() {
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

    /// The host uid/gid the workload runs as.
    pub fn host_id(&self) -> u32 {
        self.host_id
    }

    /// Whether it was given a fresh work dir (removed at dispose).
    pub fn fresh_work_dir(&self) -> bool {
        self.fresh
    }

    /// Process rung: the private temporary directory.
    pub fn tmp_dir(&self) -> Option<&Path> {
        self.tmp.as_deref()
    }

    /// The work dir as the workload sees it.
    pub fn guest_work_dir(&self) -> &str {
        self.files.work().guest()
    }

    pub(crate) fn remove_dirs(&self) -> Result<(), BackendError> {
        if let Some(s) = self.files.secrets() {
            remove_secrets(s.host())?;
        }
        if let Some((t, _)) = &self.trust {
            remove_secrets(t)?;
        }
        if let (Some(tmp), false) = (&self.tmp, self.fresh) {
            // In the operator's directory (a fresh volume goes whole).
            // `remove_dir_all` does not follow links the workload planted.
            if let Err(e) = std::fs::remove_dir_all(tmp) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(failed(
                        "dispose",
                        format!("cannot remove `{}`: {e}", tmp.display()),
                    ));
                }
            }
        }
        if let Some(m) = &self.mount {
            if self.fresh {
                // Our own volume, about to go whole: what the workload
                // wrote need not be flushed on the way out. A failure
                // only costs the flush.
                let _ = cordon_linux::volume::discard(m);
            }
            crate::workdir::remove_mount(m).map_err(|e| failed("dispose", e))?;
        }
        Ok(())
    }

    /// The work dir's host side.
    pub fn work_dir(&self) -> &Path {
        &self.host_work
    }

    /// Builds the plan for one exec; refuses what cannot be held. The
    /// command was decided on the compute surface before it reached this
    /// sandbox: the router and the keeper put every sandbox inside the
    /// compute guard (`cordon_sandbox::guard`), which asks
    /// [`Sandbox::resolve_command`] here and hands over the resolved path.
    pub fn plan_for(&self, req: &ExecRequest) -> Result<(PlanSpec, Vec<String>), SandboxError> {
        let argv0 = req.argv.first().map(String::as_str).unwrap_or("");
        let canonical = cordon_confine::command::resolve(&*self.view, argv0)
            .map_err(|e| refused(e.to_string()))?;
        let (mut spec, notes) = self.base_plan()?;
        let mut argv = req.argv.clone();
        argv[0] = canonical.command;
        spec.argv = argv;
        spec.env.extend(req.env.clone());
        spec.bounds.max_wall_seconds = wall_seconds(&self.limits, req);
        Ok((spec, notes))
    }

    /// The plan for this sandbox's identity and work dir, without a command:
    /// the policy's storage and compute rules translated for the rung.
    fn base_plan(&self) -> Result<(PlanSpec, Vec<String>), SandboxError> {
        if let Some(base) = self.base.get() {
            return Ok(base.clone());
        }
        let made = self.make_base_plan()?;
        Ok(self.base.get_or_init(|| made).clone())
    }

    fn make_base_plan(&self) -> Result<(PlanSpec, Vec<String>), SandboxError> {
        let work = self.files.work().guest();
        let plan = plan_now(&self.policy, &self.provenance.identity, &self.env, work)?;
        let t = self.confinement(&plan, work)?;
        let host_work = self.host_work.canonicalize().map_err(|e| {
            exec_failed(format!("the work dir `{}`: {e}", self.host_work.display()))
        })?;
        let mut env = BTreeMap::from([
            (
                "PATH".to_string(),
                cordon_confine::command::IMAGE_PATH.to_string(),
            ),
            ("HOME".to_string(), work.to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
        ]);
        if let Some(tmp) = &self.tmp {
            env.insert("TMPDIR".into(), tmp.display().to_string());
        }
        env.extend(cordon_backend_kit::trust::egress_env(
            self.proxy_port,
            self.trust.is_some(),
        ));
        let inside = self.profile.inside_id(self.host_id);
        let spec = PlanSpec {
            rung: self.profile.rung,
            fs: t.fs.into_iter().map(fs_rule).collect(),
            mask_paths: t.mask_paths,
            mask_executables: t.mask_executables,
            work_dir: PathBuf::from(work),
            work_dir_source: self.profile.work_dir_source(work, &host_work),
            image_root: self.image_root.clone(),
            tmp_dir: self.tmp.clone(),
            proxy_port: self.proxy_port,
            listen: self.profile.warm
                && self
                    .provenance
                    .spec
                    .requires()
                    .contains(cordon_sandbox::Capability::Ports),
            secrets_dir: self.files.secrets().map(|s| s.host().to_path_buf()),
            trust_dir: self.trust.as_ref().map(|(_, t)| t.dir().to_path_buf()),
            kvm: false,
            env,
            bounds: Bounds {
                max_memory: self.limits.memory_bytes,
                max_processes: u32::try_from(self.limits.processes).unwrap_or(u32::MAX),
                max_cpu_seconds: self.limits.cpu_seconds,
                max_wall_seconds: self.limits.wall_seconds,
                max_disk: self.limits.disk_bytes,
            },
            argv: Vec::new(),
            ids: Ids {
                uid: inside,
                gid: inside,
                host_uid: self.host_id,
                host_gid: self.host_id,
            },
        };
        Ok((spec, t.notes))
    }

    /// `plan` translated in the workload's paths, looking at the disk
    /// through the sandbox's view; `work` is the work dir as it sees it.
    fn confinement(
        &self,
        plan: &cordon_policy::plan::ConfinementPlan,
        work: &str,
    ) -> Result<cordon_confine::Confinement, SandboxError> {
        let work_seen = self
            .view
            .canonical(Path::new(work))
            .map_err(|e| exec_failed(format!("the work dir `{work}`: {e}")))?;
        let tmp_seen = self.profile.tmp_seen(self.tmp.as_deref());
        cordon_confine::translate(
            &self.policy,
            plan,
            &cordon_confine::Target {
                rung: self.profile.name,
                mode: self.profile.mode,
                tmp_shared: self.profile.private_tmp_dir(),
                work_dir: &work_seen,
                tmp_dir: &tmp_seen,
                fs: &*self.view,
            },
        )
        .map_err(|e| refused(e.message))
    }
}

impl Drop for LocalSandbox {
    /// A sandbox dropped without [`LocalSandbox::dispose`] (its holder
    /// panicked, a test let it go) still gives back its mount: the volume
    /// (and its loop device) or the operator's directory mapped. Lazily, so
    /// a warm sandbox still running keeps it until it ends.
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            let _ = crate::workdir::remove_mount(m);
        }
        // No secret stays on the host after its sandbox.
        if let Some(s) = self.files.secrets() {
            let _ = remove_secrets(s.host());
        }
        if let Some((t, _)) = &self.trust {
            let _ = remove_secrets(t);
        }
    }
}

/// Removes a secrets directory (`remove_dir_all` follows no link; nothing
/// in it is the workload's).
pub(crate) fn remove_secrets(dir: &Path) -> Result<(), BackendError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(failed(
            "dispose",
            format!(
                "cannot remove the secrets directory `{}`: {e}",
                dir.display()
            ),
        )),
    }
}

/// A neutral rule as `cordon-linux` holds it.
fn fs_rule(r: cordon_confine::PathRule) -> FsRule {
    FsRule {
        path: r.path,
        read: r.read,
        write: r.write,
        execute: r.execute,
    }
}

impl LocalSandbox {
    /// Builds the warm sandbox (container rung) from the plan for this
    /// identity; each exec is then checked and started inside it.
    pub(crate) fn start_warm(&self, name: &str) -> Result<cordon_linux::WarmSandbox, BackendError> {
        // Each refusal keeps its kind: the policy's is `Refused`, a plan
        // the spec makes impossible `Invalid` (not a backend's failure).
        let (mut spec, _notes) = self
            .base_plan()
            .map_err(|e| BackendError::of_kind(e.kind(), "acquire", e.to_string()))?;
        spec.argv.clear();
        let plan = Plan::new(spec).map_err(|e| BackendError::Invalid {
            operation: "acquire",
            reason: format!("the plan is refused: {e}"),
        })?;
        self.enforcer
            .start_warm(&plan, self.profile.init_ids(self.host_id), name)
            .map_err(|e| match e {
                ConfineError::Missing(m) => failed("acquire", m.to_string()),
                e => failed("acquire", format!("the sandbox did not start: {e}")),
            })
    }

    /// The plan for `req` (a command is required).
    fn plan_exec(&self, req: &ExecRequest) -> Result<PlanSpec, SandboxError> {
        // A program named by the empty string is no command either (as at
        // every backend: `cordon_backend_kit::exec::resolved_argv`).
        if req.argv.first().is_none_or(String::is_empty) {
            return Err(refused("the command is empty"));
        }
        Ok(self.plan_for(req)?.0)
    }

    /// Checks `req` and starts it with `stdio`; returns a handle to wait on.
    pub fn start(
        &self,
        req: &ExecRequest,
        stdio: cordon_linux::ExecStdio,
    ) -> Result<Started, SandboxError> {
        let spec = self.plan_exec(req)?;
        match &self.warm {
            Some(w) => w
                .exec(&warm_exec(spec), stdio)
                .map(Started::Warm)
                .map_err(|e| exec_failed(format!("the sandbox did not start it: {e}"))),
            None => {
                let plan =
                    Plan::new(spec).map_err(|e| refused(format!("the plan is refused: {e}")))?;
                let stdio = SandboxStdio {
                    stdin: std::process::Stdio::from(stdio.stdin),
                    stdout: std::process::Stdio::from(stdio.stdout),
                    stderr: std::process::Stdio::from(stdio.stderr),
                };
                self.enforcer
                    .confine(&plan, stdio)
                    .map(Started::OneShot)
                    .map_err(|e| exec_failed(format!("the sandbox did not start: {e}")))
            }
        }
    }

    /// One exec: the command checked, the plan held, the output capped,
    /// returned as a handle at once.
    fn start_handle(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        if let Some(size) = attach.tty {
            return self.start_on_terminal(req, size);
        }
        let pipes = ExecPipes::new(attach.stdin_stream || !req.stdin.is_empty())
            .map_err(|e| exec_failed(format!("making pipes: {e}")))?;
        let (stdio, ours) = pipes.split();
        let started = self.start(req, stdio)?;
        let cancel = started.canceller();
        Ok(ours.into_handle(
            req,
            attach,
            move || started.wait(),
            Killer::new(move || cancel.cancel()),
        ))
    }
}

impl LocalSandbox {
    /// One exec on a pseudo-terminal of the sandbox's own (a devpts
    /// instance in the exec's mount namespace; the master comes back to us):
    /// the warm (container) rung only.
    fn start_on_terminal(
        &self,
        req: &ExecRequest,
        size: cordon_sandbox::TtySize,
    ) -> Result<ExecHandle, SandboxError> {
        let Some(w) = &self.warm else {
            return Err(SandboxError::Unavailable {
                reason: "a terminal is served only at the container rung, whose execs have a devpts of their own; run without a terminal, or at `--min-isolation container`".into(),
            });
        };
        let exec = warm_exec(self.plan_exec(req)?);
        let (running, master) = w
            .exec_tty(&exec, linux_size(size))
            .map_err(|e| exec_failed(format!("the sandbox did not start it: {e}")))?;
        let started = Started::Warm(running);
        let cancel = started.canceller();
        let dup = |fd: &std::os::fd::OwnedFd| {
            fd.try_clone()
                .map_err(|e| exec_failed(format!("the terminal's descriptor: {e}")))
        };
        let (input, resize) = (dup(&master)?, Arc::new(dup(&master)?));
        let handle = ExecHandle::from_pipes(
            cordon_sandbox::StdinFeed::Stream(Box::new(std::fs::File::from(input))),
            // The master reads EIO once nothing in the sandbox holds the
            // terminal: the end of its output.
            std::fs::File::from(master),
            std::io::empty(),
            req.max_output_bytes,
            move || started.wait(),
            Killer::new(move || cancel.cancel()),
        );
        Ok(
            handle.with_resizer(Arc::new(move |s: cordon_sandbox::TtySize| {
                cordon_linux::resize_pty(&*resize, linux_size(s))
            })),
        )
    }
}

/// One exec of a warm sandbox, from its plan.
fn warm_exec(spec: PlanSpec) -> cordon_linux::WarmExec {
    cordon_linux::WarmExec {
        argv: spec.argv,
        env: spec.env,
        bounds: spec.bounds,
    }
}

/// The protocol's terminal size as the enforcing layer takes it.
fn linux_size(s: cordon_sandbox::TtySize) -> cordon_linux::TtySize {
    cordon_linux::TtySize {
        rows: s.rows,
        cols: s.cols,
    }
}

/// An exec that started, in either engine.
pub enum Started {
    Warm(cordon_linux::WarmRunning),
    OneShot(cordon_linux::Running),
}

impl Started {
    /// Kills it (and everything it started) from another thread.
    pub fn canceller(&self) -> cordon_linux::Cancel {
        match self {
            Started::Warm(w) => w.canceller(),
            Started::OneShot(r) => r.canceller(),
        }
    }

    /// Waits for it and says how it ended.
    pub fn wait(self) -> Result<ExitStatus, SandboxError> {
        let outcome = match self {
            Started::Warm(w) => w.wait(),
            Started::OneShot(r) => r.wait(),
        }
        .map_err(|e| exec_failed(format!("the sandbox failed: {e}")))?;
        Ok(status_of(&outcome))
    }
}

fn status_of(outcome: &cordon_linux::Outcome) -> ExitStatus {
    match outcome.killed_by {
        Some(LinuxBound::Wall) => ExitStatus::TimedOut,
        Some(LinuxBound::Memory) => ExitStatus::Bound {
            bound: "max_memory",
        },
        Some(LinuxBound::Cpu) => ExitStatus::Bound {
            bound: "max_cpu_seconds",
        },
        Some(LinuxBound::Processes) => ExitStatus::Bound {
            bound: "max_processes",
        },
        None => match outcome.termination {
            Termination::Exited(c) => ExitStatus::Code(c),
            Termination::Signaled(s) => ExitStatus::Signal(s),
        },
    }
}

impl Sandbox for LocalSandbox {
    cordon_backend_kit::host_sandbox!(start_handle, view, files);

    /// Through its warm sandbox's cgroup: every process frozen, its
    /// memory still charged to the bound; an exec resumes it first.
    fn pause(&self) -> Result<(), SandboxError> {
        self.frozen(true)
    }
    fn resume(&self) -> Result<(), SandboxError> {
        self.frozen(false)
    }

    fn workspace_diff(&self) -> Result<Vec<cordon_sandbox::WorkspaceChange>, SandboxError> {
        cordon_backend_kit::workspace::diff(self.workspace.as_ref())
    }

    /// Inside the warm sandbox's network namespace (the container rung's
    /// own); the process rung has no sandbox-wide one, and refuses.
    fn open_port(
        &self,
        req: &cordon_sandbox::PortRequest,
    ) -> Result<std::net::TcpStream, SandboxError> {
        let Some(w) = self.warm.as_ref() else {
            return Err(SandboxError::Unsupported {
                capability: cordon_sandbox::Capability::Ports,
            });
        };
        let failed = |e: std::io::Error| SandboxError::Failed {
            operation: "port",
            reason: format!("finding the sandbox's network namespace: {e}"),
        };
        let ns = {
            let mut held = self.netns.lock().unwrap_or_else(|p| p.into_inner());
            if held.is_none() {
                *held = cordon_linux::netns::of_cgroups(&w.cgroup_dirs()).map_err(failed)?;
            }
            held.as_ref()
                .map(|n| n.try_clone())
                .transpose()
                .map_err(failed)?
        };
        cordon_backend_kit::ports::connect(ns, req.port)
    }

    fn workspace_apply(
        &self,
        only: &[String],
    ) -> Result<cordon_sandbox::ApplyReport, SandboxError> {
        cordon_backend_kit::workspace::apply(self.workspace.as_ref(), only)
    }

    /// Through the proxy serving its channel: the container rung with a
    /// route out. One without (the process rung, an empty `egress_allow`)
    /// refuses, as the trait's default says.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        let control = self
            .egress_control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        cordon_backend_kit::change_egress(control.as_deref(), change, by)
    }
    fn residue(&self) -> serde_json::Value {
        // The mount goes whole (it is unmounted before anything under it is
        // removed); a temporary directory in the operator's own first.
        let mut dirs: Vec<PathBuf> = Vec::new();
        if !self.fresh {
            dirs.extend(self.tmp_dir().map(Path::to_path_buf));
        }
        dirs.extend(self.mount.clone());
        dirs.extend(self.files.secrets().map(|s| s.host().to_path_buf()));
        dirs.extend(self.trust.as_ref().map(|(t, _)| t.clone()));
        serde_json::to_value(Residue {
            cgroups: self.cgroup_dirs(),
            dirs,
            uid: Some(self.host_id()),
        })
        .unwrap_or_default()
    }
}
