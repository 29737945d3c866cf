//! [`LocalBackend`]: one rung behind the sandbox protocol; acquiring makes
//! a [`LocalSandbox`] (its directories, its uid, its warm sandbox).

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use cordon_files::host_dir::HostWorkDir;
use cordon_linux::{Enforcer, InitProgram, LinuxEnforcer, Rung};
use cordon_sandbox::registry::Probe;
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, Capability, CapabilitySet, Egress, Isolation,
    IsolationError, Sandbox, SandboxKey, WorkDirView,
};

use cordon_egress::EgressService;

use crate::profile::RungProfile;
use crate::sandbox::LocalSandbox;
use crate::workdir::{fresh_volume, given_dir, remove_mount, secrets_cover_point, secrets_dir};
use crate::{failed, LocalConfig, WorkDir, NEXT, WORK_DIR_ID};
use cordon_backend_kit::{lease_id, HostFiles};

/// The `process` or `container` backend.
pub struct LocalBackend {
    profile: &'static RungProfile,
    config: LocalConfig,
    /// Every sandbox is started through it, one-shot or warm.
    enforcer: Arc<dyn Enforcer + Send + Sync>,
    // The sandboxes this process created. `dispose_scope` reads this
    // registry: a per-process one, acceptable while `cordon run` owns every
    // sandbox it makes; deriving it from a state directory is the next
    // issue's job (with `cordon serve`).
    sandboxes: Mutex<HashMap<SandboxKey, Arc<LocalSandbox>>>,
    /// The egress proxy every sandbox of this backend that has a route out
    /// is served by; started with the first such sandbox.
    egress: std::sync::OnceLock<Result<Arc<dyn EgressService>, String>>,
}

/// A port for a sandbox's proxy channel, inside its own net namespace
/// (Landlock refuses a connect to any other port).
fn proxy_port() -> u16 {
    cordon_linux::netns::random_port()
}

/// What `cordon doctor` shows for `rung`: runnable, or what this machine
/// lacks for it.
pub fn probe(rung: Rung, init: InitProgram) -> Probe {
    let enforcer = LinuxEnforcer::new(init);
    match RungProfile::of(rung).available(&enforcer) {
        Ok(()) => Probe {
            runnable: true,
            reason: None,
            found: vec!["every mechanism the rung needs".into()],
        },
        Err(missing) => Probe {
            runnable: false,
            reason: Some("this machine lacks what the rung needs".into()),
            found: missing
                .absent
                .iter()
                .map(|a| format!("{}: found {} ({})", a.mechanism, a.found, a.help))
                .collect(),
        },
    }
}

/// What a local rung serves: exec, code and files at both; the network
/// (through the egress proxy and the spec's allowlist) where the rung's
/// egress is `allowlist`.
pub fn local_capabilities(p: &RungProfile) -> CapabilitySet {
    let mut caps = vec![
        Capability::Exec,
        Capability::RunCode,
        Capability::FilesIn,
        Capability::FilesOut,
        Capability::FilesList,
        Capability::Workspace,
        Capability::Snapshot,
    ];
    if p.egress == cordon_sandbox::Egress::Allowlist {
        caps.push(Capability::Network);
    }
    // A warm sandbox has a network namespace of its own to reach a port
    // in; the process rung's commands each have their own, or the host's.
    if p.warm {
        caps.push(Capability::Ports);
    }
    caps.into_iter().collect()
}

/// What [`LocalBackend::work_dir_for`] made.
struct WorkDirMade {
    id: u32,
    mount: PathBuf,
    host_work: PathBuf,
    fresh: bool,
    /// Where cordon itself writes files in, as whom.
    files_at: PathBuf,
    files_owner: (u32, u32),
    id_lease: Option<crate::IdLease>,
    workspace: Option<cordon_files::workspace::Workspace>,
}

impl LocalBackend {
    pub fn new(config: LocalConfig) -> LocalBackend {
        let enforcer: Arc<dyn Enforcer + Send + Sync> =
            Arc::new(LinuxEnforcer::new(config.init.clone()));
        LocalBackend {
            profile: RungProfile::of(config.rung),
            config,
            enforcer,
            sandboxes: Mutex::new(HashMap::new()),
            egress: std::sync::OnceLock::new(),
        }
    }

    /// The egress proxy, started on first use: in a confined process of its
    /// own when the setup names one (the `cordon` binary always does),
    /// else in this process.
    fn egress_host(&self) -> Result<Arc<dyn EgressService>, String> {
        self.egress
            .get_or_init(|| {
                cordon_egress::start_service(
                    &self.config.egress,
                    self.config.policy.clone(),
                    self.config.env.clone(),
                )
            })
            .clone()
    }

    /// The cgroup name of a warm sandbox for `key`: findable from the
    /// system (`cordon-` prefix), unique per process and sandbox.
    fn warm_name(&self, key: &SandboxKey) -> String {
        format!(
            "cordon-{}-{}-{}",
            key.id(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Where the image `image` names is on this host: `None` for the
    /// built-in `host` image (the host's own system directories), the
    /// stored root for an image of cordon's store (container rung only).
    pub fn image_root(&self, image: &str) -> Result<Option<PathBuf>, String> {
        if image == "host" {
            return Ok(None);
        }
        if !self.profile.runs_images() {
            return Err(format!(
                "the process rung runs on the host's own files, so it runs only the `host` image, not `{image}`; use the container rung"
            ));
        }
        let store = cordon_image::ImageStore::open(&cordon_image::ImageStore::default_root())
            .map_err(|e| e.to_string())?;
        match store.resolve(image).map_err(|e| e.to_string())? {
            cordon_image::Resolved::Host => Ok(None),
            cordon_image::Resolved::Stored { root, .. } => Ok(Some(root)),
        }
    }

    /// Why this rung cannot run here, if it cannot.
    pub fn available(&self) -> Result<(), cordon_linux::Missing> {
        self.profile.available(&*self.enforcer)
    }
}

impl Backend for LocalBackend {
    fn name(&self) -> &str {
        self.profile.name
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        // A rung this machine cannot hold is not claimed at all.
        self.available().map_err(|m| IsolationError::Unnamed {
            reason: m.to_string(),
        })?;
        Ok(self.profile.isolation)
    }

    fn egress(&self) -> Egress {
        self.profile.egress
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        self.image_root(image).map(drop)
    }

    fn capabilities(&self) -> CapabilitySet {
        local_capabilities(self.profile)
    }

    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        self.acquire_local(req).map(|s| s as Arc<dyn Sandbox>)
    }

    fn dispose(&self, key: &SandboxKey) -> Result<bool, BackendError> {
        self.dispose_local(key)
    }

    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        self.dispose_scope_local(scope, thread_id)
    }

    fn rekey(
        &self,
        from: &SandboxKey,
        to: &SandboxKey,
    ) -> Result<cordon_sandbox::backend::Rekeyed, BackendError> {
        let mut all = self
            .sandboxes
            .lock()
            .map_err(|_| failed("rekey", "the sandbox registry is poisoned"))?;
        Ok(cordon_sandbox::backend::rekey_in(&mut all, from, to))
    }
}

impl LocalBackend {
    /// [`Backend::acquire`], returning the concrete sandbox.
    pub fn acquire_local(&self, req: &AcquireRequest) -> Result<Arc<LocalSandbox>, BackendError> {
        if req.provenance.policy_digest != self.config.policy.digest {
            return Err(failed(
                "acquire",
                "the router's policy is not the one this backend enforces; build both from the same policy",
            ));
        }
        let mut all = self
            .sandboxes
            .lock()
            .map_err(|_| failed("acquire", "the sandbox registry is poisoned"))?;
        if let Some(s) = all.get(&req.key) {
            return Ok(s.clone());
        }
        let sandbox = Arc::new(self.make_sandbox(req)?);
        all.insert(req.key.clone(), sandbox.clone());
        Ok(sandbox)
    }

    /// The sandbox's work dir: a fresh volume of its own uid (over a
    /// snapshot's files or a workspace when asked), or the operator's
    /// directory mapped.
    fn work_dir_for(
        &self,
        req: &AcquireRequest,
        private_tmp: bool,
    ) -> Result<WorkDirMade, BackendError> {
        let spec = &req.provenance.spec;
        match &self.config.work_dir {
            WorkDir::Fresh { parent } => {
                let lease = lease_id()?;
                let id = lease.id();
                let vol = fresh_volume(parent, id, req.limits.disk_bytes, private_tmp)?;
                let layered = (|| {
                    if let Some(origin) = &req.provenance.origin {
                        cordon_backend_kit::workspace::mount_origin(origin, &vol, id)?;
                        restore_tmp(origin, &vol, private_tmp, req.limits.disk_bytes, id)?;
                    }
                    spec.workspace()
                        .map(|dir| cordon_backend_kit::workspace::mount(dir, &vol, id))
                        .transpose()
                })();
                let workspace = match layered {
                    Ok(w) => w,
                    Err(e) => {
                        let _ = crate::workdir::remove_mount(&vol);
                        return Err(e);
                    }
                };
                let work = vol.join("work");
                Ok(WorkDirMade {
                    id,
                    mount: vol,
                    host_work: work.clone(),
                    fresh: true,
                    files_at: work,
                    files_owner: (id, id),
                    id_lease: Some(lease),
                    workspace,
                })
            }
            WorkDir::Given(_) if spec.workspace().is_some() || req.provenance.origin.is_some() => {
                Err(cordon_sandbox::BackendError::Invalid {
                    operation: "acquire",
                    reason: "a sandbox is made over an operator's work dir (`--work-dir`), or from a workspace (`--workspace`) or a snapshot (`--from`): one of them; drop `--work-dir`".into(),
                })
            }
            WorkDir::Given(d) => {
                let g = given_dir(d, &std::env::temp_dir(), req.limits.disk_bytes)?;
                Ok(WorkDirMade {
                    id: WORK_DIR_ID,
                    mount: g.mount.clone(),
                    host_work: g.mount,
                    fresh: false,
                    files_at: g.real,
                    files_owner: g.owner,
                    id_lease: None,
                    workspace: None,
                })
            }
        }
    }

    /// A new sandbox for `req`: its uid and directories, its filesystem
    /// view and (when the rung is warm) its running sandbox. Whatever was
    /// made is removed when a later step fails.
    fn make_sandbox(&self, req: &AcquireRequest) -> Result<LocalSandbox, BackendError> {
        let private_tmp = self.profile.private_tmp_dir();
        let WorkDirMade {
            id,
            mount,
            host_work,
            fresh,
            files_at,
            files_owner,
            id_lease,
            workspace,
        } = self.work_dir_for(req, private_tmp)?;
        let mut made = Made {
            tmp: None,
            mount: Some(mount.clone()),
            secrets: None,
        };
        let secrets = if req.provenance.spec.secrets().is_empty() {
            None
        } else {
            let parent = match &self.config.work_dir {
                WorkDir::Fresh { parent } => parent.clone(),
                WorkDir::Given(_) => std::env::temp_dir(),
            };
            let dir = self
                .secrets_dir_for(id, &parent)
                .map_err(|e| made.fail(e))?;
            made.secrets = Some(dir.clone());
            Some(
                cordon_files::host_dir::HostSecretsDir::new(&dir, id)
                    .map_err(|e| made.fail(e.to_string()))?,
            )
        };
        let host_str = host_work
            .to_str()
            .ok_or_else(|| failed("acquire", "the work dir is not a UTF-8 path"))?
            .to_string();
        let spec_dir = req.provenance.spec.work_dir();
        let guest = self.profile.guest_work_dir(spec_dir, &host_str);
        let image_root = self
            .image_root(req.provenance.spec.image())
            .map_err(|e| made.fail(e))?;
        self.check_work_dir(spec_dir, &guest)
            .map_err(|e| made.fail(e))?;
        let tmp = if !private_tmp {
            None
        } else if fresh {
            Some(mount.join("tmp"))
        } else {
            // The operator's directory is the one bounded place this
            // sandbox may write, so its temporary directory is made there
            // (a new name, owned as the directory is) and removed at
            // dispose.
            let name = private_tmp_in(&files_at, files_owner).map_err(|e| made.fail(e))?;
            made.tmp = Some(host_work.join(&name));
            Some(host_work.join(name))
        };
        let view = self
            .profile
            .view(&guest, &host_work, image_root.as_deref())
            .map_err(|e| made.fail(e))?;
        let files = HostWorkDir::new(&files_at, &guest)
            .map_err(|e| made.fail(e.to_string()))?
            .owned_by(files_owner.0, files_owner.1);
        let mut sandbox = LocalSandbox {
            id: format!("{}:{}", self.profile.name, req.key),
            provenance: req.provenance.clone(),
            limits: req.limits,
            profile: self.profile,
            policy: self.config.policy.clone(),
            env: self.config.env.clone(),
            enforcer: self.enforcer.clone(),
            files: HostFiles::new(files, secrets, id)
                .with_tmp(if fresh { tmp.clone() } else { None })
                .with_tmp_files(
                    private_tmp_files(tmp.as_deref(), fresh, files_owner)
                        .map_err(|e| made.fail(e))?,
                ),
            host_work,
            fresh,
            mount: made.mount.take(),
            tmp,
            host_id: id,
            id_lease: Mutex::new(id_lease),
            image_root,
            view,
            warm: None,
            netns: Mutex::new(None),
            base: std::sync::OnceLock::new(),
            proxy_port: None,
            egress: Mutex::new(None),
            egress_control: Mutex::new(None),
            trust: None,
            workspace,
        };
        made.secrets = None;
        let allow = req.provenance.spec.egress_allow();
        let host = if self.profile.egress == Egress::Allowlist && !allow.is_empty() {
            // Started before the sandbox, so a proxy that cannot start
            // refuses the sandbox rather than leave it without its route.
            match self.egress_host() {
                Ok(h) => {
                    sandbox.proxy_port = Some(proxy_port());
                    if self.config.policy.inspects_any() {
                        // Bound when the sandbox starts; filled with the
                        // CA its channel is served with.
                        match self.prepare_trust(&sandbox) {
                            Ok(t) => sandbox.trust = Some(t),
                            Err(e) => {
                                let _ = sandbox.remove_dirs();
                                return Err(failed(
                                    "acquire",
                                    cordon_backend_kit::trust::unplaced(e),
                                ));
                            }
                        }
                    }
                    Some(h)
                }
                Err(e) => {
                    let _ = sandbox.remove_dirs();
                    return Err(failed("acquire", e));
                }
            }
        } else {
            None
        };
        if self.profile.warm {
            if let Err(e) = self.start_warm_in(&mut sandbox, &req.key, files_owner) {
                let _ = sandbox.remove_dirs();
                return Err(e);
            }
        }
        if let Some(host) = host {
            route_egress(&mut sandbox, host.as_ref(), req)?;
        }
        Ok(sandbox)
    }

    /// Starts `sandbox`'s warm sandbox and serves its `/tmp` — a tmpfs in
    /// its own mount namespace, held open by its init — to the files API,
    /// written as `owner` (the workload).
    fn start_warm_in(
        &self,
        sandbox: &mut LocalSandbox,
        key: &SandboxKey,
        owner: (u32, u32),
    ) -> Result<(), BackendError> {
        let w = sandbox.start_warm(&self.warm_name(key))?;
        let tmp = HostWorkDir::pinned(w.tmp_dir(), "/tmp", "/tmp")
            .map_err(|e| failed("acquire", e.to_string()))?;
        sandbox
            .files
            .set_tmp_files(tmp.owned_by(owner.0, owner.1).as_owner());
        sandbox.warm = Some(w);
        Ok(())
    }

    /// A new secrets directory for a sandbox running as `id`, under
    /// `parent`. Only for a uid of its own: sandboxes over an operator's
    /// directory all run as [`WORK_DIR_ID`], and one of them could read
    /// another's secrets through the host path wherever its policy lets it
    /// read the directory they are in.
    fn secrets_dir_for(&self, id: u32, parent: &std::path::Path) -> Result<PathBuf, String> {
        if id == WORK_DIR_ID {
            return Err(format!(
                "secrets are delivered only to a sandbox with a uid of its own, and a sandbox over a directory given with `--work-dir` runs as the uid {WORK_DIR_ID} every such sandbox shares\nhelp: omit `--work-dir` (a fresh work dir comes with its own uid), or drop `secrets` from the spec"
            ));
        }
        if self.profile.rung == Rung::Process {
            secrets_cover_point().map_err(|e| e.to_string())?;
        }
        secrets_dir(parent, id).map_err(|e| e.to_string())
    }

    /// A directory of `sandbox`'s own (root's with its group, as its
    /// secrets', beside them; 0755: certificates only) holding its trust
    /// files, empty until its channel is served.
    fn prepare_trust(
        &self,
        sandbox: &LocalSandbox,
    ) -> Result<(PathBuf, cordon_backend_kit::trust::Trust), String> {
        let parent = match &self.config.work_dir {
            WorkDir::Fresh { parent } => parent.clone(),
            WorkDir::Given(_) => std::env::temp_dir(),
        };
        let dir = crate::workdir::group_dir(&parent, "trust", sandbox.host_id)
            .map_err(|e| e.to_string())?;
        let image = sandbox
            .image_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/"));
        match cordon_backend_kit::trust::Trust::prepare_in(&dir, &image) {
            Ok(t) => Ok((dir, t)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Whether the work dir can be shown where the spec asks (`spec_dir`)
    /// when the workload sees it at `guest`. The container rung shows it at
    /// the spec's path (the plan is translated in the sandbox's view); the
    /// process rung sees the host's files, so it can only show it at its
    /// host path.
    fn check_work_dir(&self, spec_dir: &str, guest: &str) -> Result<(), String> {
        if self.profile.work_dir_view() == WorkDirView::HostPath
            && spec_dir != cordon_sandbox::spec::DEFAULT_WORK_DIR
            && spec_dir != guest
        {
            return Err(format!("the spec's work dir `{spec_dir}` cannot be provided: the process rung shows the work dir at its host path `{guest}`; leave `work_dir` out of the spec, pass `--work-dir {spec_dir}`, or use the container rung"));
        }
        Ok(())
    }

    fn dispose_local(&self, key: &SandboxKey) -> Result<bool, BackendError> {
        let gone = self
            .sandboxes
            .lock()
            .map_err(|_| failed("dispose", "the sandbox registry is poisoned"))?
            .remove(key);
        match gone {
            Some(s) => {
                s.dispose()?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn dispose_scope_local(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        let gone: Vec<Arc<LocalSandbox>> = {
            let mut all = self
                .sandboxes
                .lock()
                .map_err(|_| failed("dispose_scope", "the sandbox registry is poisoned"))?;
            let keys: Vec<SandboxKey> = all
                .keys()
                .filter(|k| k.scope() == scope && k.thread_id() == thread_id)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| all.remove(k)).collect()
        };
        for s in &gone {
            s.dispose()?;
        }
        Ok(gone.len())
    }
}

/// The mount an acquire made so far (a fresh volume, or the operator's
/// directory mapped), removed if it fails.
struct Made {
    mount: Option<PathBuf>,
    /// The secrets directory, removed whole.
    secrets: Option<PathBuf>,
    /// A temporary directory made in the operator's directory (through
    /// the mount), removed before it is unmounted.
    tmp: Option<PathBuf>,
}

impl Made {
    fn remove(&mut self) {
        if let Some(s) = self.secrets.take() {
            let _ = std::fs::remove_dir_all(s);
        }
        if let Some(t) = self.tmp.take() {
            let _ = std::fs::remove_dir_all(t);
        }
        if let Some(m) = self.mount.take() {
            let _ = remove_mount(&m);
        }
    }

    /// Removes them and says why acquire failed.
    fn fail(&mut self, reason: String) -> BackendError {
        self.remove();
        failed("acquire", reason)
    }
}

/// A snapshot's `/tmp` put back as the new sandbox's own (`VOLUME/tmp`,
/// made empty by [`fresh_volume`]); refused at a rung with no `/tmp` of
/// its own, which would drop it.
fn restore_tmp(
    origin: &cordon_sandbox::Origin,
    vol: &std::path::Path,
    private_tmp: bool,
    disk_bytes: u64,
    id: u32,
) -> Result<(), BackendError> {
    if origin.tmp.is_none() {
        return Ok(());
    }
    if !private_tmp {
        return Err(failed(
            "acquire",
            format!("snapshot `{}` holds a `/tmp`, and this rung gives a sandbox no `/tmp` of its own to put it back in; restore it at the rung it was taken at", origin.snapshot),
        ));
    }
    let tmp = vol.join("tmp");
    std::fs::remove_dir(&tmp)
        .map_err(|e| failed("acquire", format!("`{}`: {e}", tmp.display())))?;
    cordon_backend_kit::workarea::make_tmp(&tmp, Some(origin), disk_bytes, id)
        .map_err(|e| failed("acquire", e))
}

/// A private temporary directory in an operator's work dir (the one
/// bounded place such a sandbox may write): a new name, owned as the
/// directory is, removed at dispose. Returns its name.
fn private_tmp_in(files_at: &std::path::Path, owner: (u32, u32)) -> Result<String, String> {
    let name = format!(
        ".cordon-tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(files_at.join(&name))
        .and_then(|()| std::os::unix::fs::chown(files_at.join(&name), Some(owner.0), Some(owner.1)))
        .map_err(|e| format!("cannot create `{name}` in the work dir: {e}"))?;
    Ok(name)
}

/// Serves the sandbox's egress channel (its warm init hands the listener
/// over) on `host`, the proxy started before it; a channel that cannot be
/// served ends the sandbox.
fn route_egress(
    sandbox: &mut LocalSandbox,
    host: &dyn cordon_egress::EgressService,
    req: &AcquireRequest,
) -> Result<(), BackendError> {
    let served = sandbox
        .warm
        .as_mut()
        .and_then(cordon_linux::WarmSandbox::take_proxy_listener)
        .ok_or_else(|| "the sandbox did not hand over its egress channel".to_string())
        .and_then(|listener| cordon_backend_kit::register::serve_route(host, listener, req));
    let served = served.map_err(|e| format!("the egress proxy: {e}"));
    let placed = served.and_then(|s| {
        *sandbox.egress.lock().unwrap_or_else(|p| p.into_inner()) = Some(s.handle);
        *sandbox
            .egress_control
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(s.control);
        place_ca(sandbox.trust.as_mut().map(|(_, t)| t), s.ca_pem.as_deref())
            .map_err(cordon_backend_kit::trust::unplaced)
    });
    if let Err(e) = placed {
        let _ = sandbox.dispose();
        return Err(failed("acquire", e));
    }
    Ok(())
}

/// Fills the trust prepared for the sandbox with the CA its channel was
/// served with. The sandbox was started with the trust's binds exactly
/// when the policy inspects, which is exactly when the proxy gives a CA:
/// either without the other is refused (an empty bundle over the image's,
/// or a CA the sandbox does not trust).
fn place_ca(
    trust: Option<&mut cordon_backend_kit::trust::Trust>,
    ca_pem: Option<&str>,
) -> Result<(), String> {
    match (trust, ca_pem) {
        (None, None) => Ok(()),
        (Some(t), Some(pem)) => t.fill(pem),
        (None, Some(_)) => Err(
            "the proxy made a CA though the policy inspected no host when the sandbox was made"
                .into(),
        ),
        (Some(_), None) => {
            Err("the policy inspects, but the proxy served the channel without a CA".into())
        }
    }
}

#[cfg(test)]
mod available_tests {
    use super::*;
    use crate::profile::CONTAINER;

    #[test]
    fn the_container_rung_needs_landlock_scoping_for_its_warm_sandboxes() {
        let init = InitProgram::new("/nonexistent/cordon");
        let mut m = cordon_linux::Mechanisms::detect();
        let real = CONTAINER.available(&LinuxEnforcer::with_mechanisms(init.clone(), m.clone()));
        m.landlock_abi = 5;
        let e = LinuxEnforcer::with_mechanisms(init, m);
        if let Err(other) = real {
            cordon_testkit::skip("landlock scoping check", other);
            return;
        }
        // ABI 5 holds a one-shot container run, not a warm sandbox.
        assert!(e.available(Rung::Container).is_ok());
        let refused = CONTAINER.available(&e).unwrap_err().to_string();
        assert!(
            refused.contains("ABI 6") && refused.contains("warm"),
            "{refused}"
        );
    }
}

#[cfg(test)]
mod secrets_tests {
    use super::*;

    /// Every `--work-dir` sandbox runs as the one shared uid: one of them
    /// could read another's secrets through their host path, so none is
    /// given any (the refusal says what to do instead).
    #[test]
    fn a_sandbox_on_the_shared_uid_gets_no_secrets_directory() {
        let policy = Arc::new(cordon_policy::Policy::load_default().unwrap());
        let parent = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(LocalConfig {
            rung: Rung::Container,
            policy,
            env: cordon_policy::Deployment::default(),
            work_dir: WorkDir::Given(parent.path().to_path_buf()),
            init: InitProgram::new("/nonexistent/cordon"),
            egress: cordon_sandbox::EgressSetup::default(),
        });
        let e = b.secrets_dir_for(WORK_DIR_ID, parent.path()).unwrap_err();
        assert!(e.contains("omit `--work-dir`"), "{e}");
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }
}

/// The process rung's own temporary directory as the files API serves it:
/// the policy names it `/tmp`, as the workload's own rules do. Over an
/// operator's work dir it is inside that directory, reached through it.
fn private_tmp_files(
    tmp: Option<&std::path::Path>,
    fresh: bool,
    owner: (u32, u32),
) -> Result<Option<HostWorkDir>, String> {
    match (tmp, fresh) {
        (Some(t), true) => HostWorkDir::new(t, "/tmp")
            .map(|d| Some(d.owned_by(owner.0, owner.1)))
            .map_err(|e| e.to_string()),
        _ => Ok(None),
    }
}
