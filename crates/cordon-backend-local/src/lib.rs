//! cordon's local backends: the `process` and `container` rungs of
//! `cordon-linux` behind the sandbox protocol (`cordon_sandbox::Backend`).
//!
//! - [`LocalBackend`] serves one rung: [`Backend::acquire`] creates the
//!   sandbox's work dir (or takes the one it was given) and stores the
//!   provenance; every [`Sandbox::exec`] is one confined launch over that
//!   work dir (warm sandboxes come with the next issue).
//! - Before anything starts, the first command is checked against the
//!   compute surface in full ([`cordon_confine::command::resolve`]
//!   canonicalises it in the sandbox's filesystem view), then
//!   [`cordon_policy::Policy::plan`] is translated
//!   ([`cordon_confine::translate`], in the workload's paths) and mapped
//!   into a `cordon_linux::PlanSpec` that is never wider than the policy;
//!   what cannot be held is refused, naming the rule.
//! - [`probe`] is what `cordon doctor` shows for the two rungs.
//!
//! Egress is `closed` at both rungs until the egress proxy is wired.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

pub mod register;

pub use register::registrations;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cordon_confine::{FsView, HostFs, RootedFs};
use cordon_linux::{
    Bound as LinuxBound, Bounds, Enforcer, FsRule, Ids, InitProgram, LinuxEnforcer, Plan, PlanSpec,
    Rung, SandboxStdio, Termination,
};
use cordon_policy::{ComputeFacts, Deployment, Policy, Request, Surface, SurfaceFacts};
use cordon_sandbox::catalogue::Probe;
use cordon_sandbox::host_dir::HostWorkDir;
use cordon_sandbox::{
    AcquireRequest, Attach, Backend, BackendError, CapabilitySet, Egress, ExecHandle, ExecRequest,
    ExitStatus, FileRead, FileStat, Isolation, IsolationError, Killer, Limits, Provenance, Sandbox,
    SandboxError, SandboxKey, StdinFeed,
};

/// Fresh sandboxes run as host uid/gid `FRESH_ID_BASE + n`: unprivileged,
/// above every ordinary account, one per live sandbox machine-wide (see
/// [`IdLease`]).
pub const FRESH_ID_BASE: u32 = 2_000_000_000;
/// A work dir the operator names (`--work-dir`) is used by this one host
/// uid/gid, so it can be prepared once: `chown -R 1999999999:1999999999 DIR`.
pub const WORK_DIR_ID: u32 = 1_999_999_999;
/// The uid/gid inside a container-rung sandbox.
pub const INSIDE_ID: u32 = 1000;
/// A warm sandbox's init runs as host uid/gid `workload + INIT_ID_OFFSET`:
/// a uid of its own that the workload does not have.
pub const INIT_ID_OFFSET: u32 = 1_000_000_000;

/// Where the work dir comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum WorkDir {
    /// A fresh directory under `parent`, created by cordon for the sandbox
    /// (owned by its host uid) and removed at dispose.
    Fresh { parent: PathBuf },
    /// An operator's directory, visible at its own path, never chowned: it
    /// must already be owned by [`WORK_DIR_ID`].
    Given(PathBuf),
}

/// How a local backend is set up.
#[derive(Clone)]
pub struct LocalConfig {
    pub rung: Rung,
    pub policy: Arc<Policy>,
    /// The deployment the router decides in.
    pub env: Deployment,
    pub work_dir: WorkDir,
    /// The binary that runs `cordon_linux::init_main`.
    pub init: InitProgram,
}

/// The `process` or `container` backend.
pub struct LocalBackend {
    name: &'static str,
    config: LocalConfig,
    enforcer: Arc<LinuxEnforcer>,
    // The sandboxes this process created. `dispose_scope` reads this
    // registry: a per-process one, acceptable while `cordon run` owns every
    // sandbox it makes; deriving it from a state directory is the next
    // issue's job (with `cordon serve`).
    sandboxes: Mutex<HashMap<SandboxKey, Arc<LocalSandbox>>>,
}

pub(crate) fn name_of(rung: Rung) -> &'static str {
    match rung {
        Rung::Process => "process",
        Rung::Container => "container",
    }
}

/// What this machine lacks for `rung`, as `cordon doctor` shows it.
/// What `enforcer`'s machine lacks for this backend at `rung`: the
/// container rung's sandboxes are warm.
fn available_on(enforcer: &LinuxEnforcer, rung: Rung) -> Result<(), cordon_linux::Missing> {
    match rung {
        Rung::Container => enforcer.available_warm(),
        Rung::Process => enforcer.available(rung),
    }
}

pub fn probe(rung: Rung, init: InitProgram) -> Probe {
    let enforcer = LinuxEnforcer::new(init);
    match available_on(&enforcer, rung) {
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

impl LocalBackend {
    pub fn new(config: LocalConfig) -> LocalBackend {
        let enforcer = Arc::new(LinuxEnforcer::new(config.init.clone()));
        LocalBackend {
            name: name_of(config.rung),
            config,
            enforcer,
            sandboxes: Mutex::new(HashMap::new()),
        }
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
        if self.config.rung == Rung::Process {
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
        available_on(&self.enforcer, self.config.rung)
    }
}

/// The filesystem as a sandbox at `rung` shows it: the host's own at the
/// process rung; at the container rung a root (the image's, or the host's
/// `/`) with the work dir bound at its `guest` path and, over an image, the
/// launcher's own trees (`/proc`, `/dev`, `/sys`, `/tmp`) as they are.
fn view_for(
    rung: Rung,
    guest: &str,
    host_work: &Path,
    image: Option<&Path>,
) -> Result<Box<dyn FsView + Send + Sync>, String> {
    match rung {
        Rung::Process => Ok(Box::new(HostFs)),
        Rung::Container => {
            let host_work = host_work
                .canonicalize()
                .map_err(|e| format!("the work dir `{}`: {e}", host_work.display()))?;
            let view = match image {
                Some(root) => ["/proc", "/dev", "/sys", "/tmp"]
                    .into_iter()
                    .fold(RootedFs::new(root), |v, own| v.bind(own, own)),
                None => RootedFs::new("/"),
            };
            Ok(Box::new(view.bind(guest, host_work)))
        }
    }
}

fn failed(operation: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Failed {
        operation,
        reason: reason.into(),
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Where fresh ids are leased: one lock file per id, `flock`ed for as long
/// as a sandbox uses it.
pub const ID_LEASES: &str = "/run/cordon-ids";
/// How many fresh ids there are (`FRESH_ID_BASE ..`); the init of a warm
/// sandbox uses `id + INIT_ID_OFFSET`, which stays below `u32::MAX`.
const FRESH_IDS: u32 = 64_000_000;

/// A fresh host uid/gid held by one sandbox for its life. Unique across
/// every cordon process on the machine: the lease is an exclusive `flock`
/// on `ID_LEASES/<id>`, which the kernel releases when the holder closes it
/// or dies.
#[derive(Debug)]
pub struct IdLease {
    id: u32,
    path: PathBuf,
    _lock: std::fs::File,
}

impl IdLease {
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for IdLease {
    /// The lease file goes with the lease (so `ID_LEASES` holds only live
    /// ones); a waiter that locked it meanwhile finds it gone from its path
    /// and looks again.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lease_dir() -> Result<&'static Path, BackendError> {
    let dir = Path::new(ID_LEASES);
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(failed(
                "acquire",
                format!("cannot create `{ID_LEASES}` to lease a sandbox uid: {e}"),
            ))
        }
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| failed("acquire", format!("`{ID_LEASES}`: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(failed(
            "acquire",
            format!("`{ID_LEASES}` must be a directory of uid {me} with mode 0700 (the sandbox uid leases); remove it and let cordon make it"),
        ));
    }
    Ok(dir)
}

/// Removes the lease files nobody holds (left by owners that were killed):
/// each is locked first, so a live lease is never touched. Returns how many.
pub fn sweep_id_leases() -> usize {
    let Ok(entries) = std::fs::read_dir(ID_LEASES) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
            && std::fs::remove_file(&path).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// Leases a fresh id, starting the search at a place derived from this
/// process (so owners rarely contend) and taking the first id nobody holds.
fn lease_id() -> Result<IdLease, BackendError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = lease_dir()?;
    let start = (std::process::id() % 1_000_000) * 64 + NEXT.fetch_add(1, Ordering::Relaxed) % 64;
    for k in 0..FRESH_IDS.min(100_000) {
        let id = FRESH_ID_BASE + (start + k) % FRESH_IDS;
        let path = dir.join(id.to_string());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| failed("acquire", format!("`{}`: {e}", path.display())))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // Locked a file a releasing holder had just removed: it
                // guards nothing anyone can find; try the next id.
                let held =
                    rustix::fs::fstat(&file).map_err(|e| failed("acquire", e.to_string()))?;
                match rustix::fs::stat(&path) {
                    Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => {
                        return Ok(IdLease {
                            id,
                            path,
                            _lock: file,
                        })
                    }
                    _ => continue,
                }
            }
            Err(rustix::io::Errno::WOULDBLOCK) => continue,
            Err(e) => return Err(failed("acquire", format!("`{}`: {e}", path.display()))),
        }
    }
    Err(failed(
        "acquire",
        "no free sandbox uid among the next 100000; dispose of sandboxes (`cordon sandbox gc`)",
    ))
}

/// A directory that did not exist, created owner-only and handed to `id`.
fn fresh_dir(parent: &Path, what: &str, id: u32) -> Result<PathBuf, BackendError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = parent.join(format!(
        "cordon-{what}-{}-{}-{stamp}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    // `create` fails if anything is already there: nothing planted is used.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| failed("acquire", format!("cannot create `{}`: {e}", dir.display())))?;
    std::os::unix::fs::chown(&dir, Some(id), Some(id)).map_err(|e| {
        let _ = std::fs::remove_dir(&dir);
        failed(
            "acquire",
            format!("cannot hand `{}` to uid {id}: {e}", dir.display()),
        )
    })?;
    Ok(dir)
}

/// An operator's work dir: canonical, a directory, writable by [`WORK_DIR_ID`].
fn given_dir(d: &Path) -> Result<PathBuf, BackendError> {
    let real = d
        .canonicalize()
        .map_err(|e| failed("acquire", format!("work dir `{}`: {e}", d.display())))?;
    let meta = std::fs::metadata(&real)
        .map_err(|e| failed("acquire", format!("work dir `{}`: {e}", real.display())))?;
    if !meta.is_dir() {
        return Err(failed(
            "acquire",
            format!("work dir `{}` is not a directory", real.display()),
        ));
    }
    let system = [
        "/", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp",
        "/root", "/home",
    ];
    if system.iter().any(|s| real == Path::new(s))
        || real.starts_with("/proc")
        || real.starts_with("/sys")
        || real.starts_with("/dev")
    {
        return Err(failed(
            "acquire",
            format!(
                "`{}` is a system directory; give the sandbox a directory of its own",
                real.display()
            ),
        ));
    }
    if meta.uid() != WORK_DIR_ID || meta.gid() != WORK_DIR_ID || meta.mode() & 0o700 != 0o700 {
        return Err(failed(
            "acquire",
            format!(
                "work dir `{dir}` is not writable by the sandbox's uid {WORK_DIR_ID} (it is owned by {uid}:{gid}, mode {mode:o}); cordon does not change the ownership of your tree\nhelp: hand it over yourself: `chown -R {WORK_DIR_ID}:{WORK_DIR_ID} {dir} && chmod u+rwx {dir}` (or omit `--work-dir` to get a fresh one)",
                dir = real.display(),
                uid = meta.uid(),
                gid = meta.gid(),
                mode = meta.mode() & 0o7777
            ),
        ));
    }
    Ok(real)
}

impl Backend for LocalBackend {
    fn name(&self) -> &str {
        self.name
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        // A rung this machine cannot hold is not claimed at all.
        self.available().map_err(|m| IsolationError::Unnamed {
            reason: m.to_string(),
        })?;
        Ok(match self.config.rung {
            Rung::Process => Isolation::Process,
            Rung::Container => Isolation::Container,
        })
    }

    fn egress(&self) -> Egress {
        Egress::Closed
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        self.image_root(image).map(drop)
    }

    fn capabilities(&self) -> CapabilitySet {
        register::local_capabilities()
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
        let mut id_lease = None;
        let (id, host_work, fresh) = match &self.config.work_dir {
            WorkDir::Fresh { parent } => {
                let lease = lease_id()?;
                let id = lease.id();
                id_lease = Some(lease);
                (id, fresh_dir(parent, "work", id)?, true)
            }
            WorkDir::Given(d) => (WORK_DIR_ID, given_dir(d)?, false),
        };
        let host_str = host_work
            .to_str()
            .ok_or_else(|| failed("acquire", "the work dir is not a UTF-8 path"))?
            .to_string();
        let spec_dir = req.provenance.spec.work_dir();
        // The container rung shows the work dir at the spec's path (the plan
        // is translated through the sandbox's view, see `view_for`); the process rung sees
        // the host's files, so it can only show it at its host path.
        let guest = match self.config.rung {
            Rung::Container => spec_dir.to_string(),
            Rung::Process => host_str,
        };
        let image_root = match self.image_root(req.provenance.spec.image()) {
            Ok(r) => r,
            Err(e) => {
                if fresh {
                    let _ = std::fs::remove_dir_all(&host_work);
                }
                return Err(failed("acquire", e));
            }
        };
        if self.config.rung == Rung::Process
            && spec_dir != cordon_sandbox::spec::DEFAULT_WORK_DIR
            && spec_dir != guest
        {
            if fresh {
                let _ = std::fs::remove_dir_all(&host_work);
            }
            return Err(failed(
                "acquire",
                format!("the spec's work dir `{spec_dir}` cannot be provided: the process rung shows the work dir at its host path `{guest}`; leave `work_dir` out of the spec, pass `--work-dir {spec_dir}`, or use the container rung"),
            ));
        }
        let tmp = match self.config.rung {
            Rung::Process => {
                let parent = host_work.parent().unwrap_or(Path::new("/tmp"));
                Some(fresh_dir(parent, "tmp", id).inspect_err(|_| {
                    if fresh {
                        let _ = std::fs::remove_dir_all(&host_work);
                    }
                })?)
            }
            Rung::Container => None,
        };
        let view = match view_for(self.config.rung, &guest, &host_work, image_root.as_deref()) {
            Ok(v) => v,
            Err(e) => {
                if fresh {
                    let _ = std::fs::remove_dir_all(&host_work);
                }
                let _ = tmp.as_deref().map(std::fs::remove_dir_all);
                return Err(failed("acquire", e));
            }
        };
        let files = HostWorkDir::new(&host_work, &guest)
            .map_err(|e| failed("acquire", e.to_string()))?
            .owned_by(id, id);
        let mut sandbox = LocalSandbox {
            id: format!("{}:{}", self.name, req.key),
            provenance: req.provenance.clone(),
            limits: req.limits,
            rung: self.config.rung,
            policy: self.config.policy.clone(),
            env: self.config.env.clone(),
            enforcer: self.enforcer.clone(),
            files,
            host_work,
            fresh,
            tmp,
            host_id: id,
            id_lease: Mutex::new(id_lease),
            image_root,
            view,
            warm: None,
            base: std::sync::OnceLock::new(),
        };
        if self.config.rung == Rung::Container {
            let started = sandbox.start_warm(&self.config.init, &self.warm_name(&req.key));
            match started {
                Ok(w) => sandbox.warm = Some(w),
                Err(e) => {
                    let _ = sandbox.remove_dirs();
                    return Err(e);
                }
            }
        }
        let sandbox = Arc::new(sandbox);
        all.insert(req.key.clone(), sandbox.clone());
        Ok(sandbox)
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

/// One sandbox of a local backend: a work dir and what it was made for.
/// Every exec is its own confined launch; none outlives its exec (the
/// launcher kills the whole cgroup when the first process ends).
pub struct LocalSandbox {
    id: String,
    provenance: Provenance,
    limits: Limits,
    rung: Rung,
    policy: Arc<Policy>,
    env: Deployment,
    enforcer: Arc<LinuxEnforcer>,
    files: HostWorkDir,
    host_work: PathBuf,
    fresh: bool,
    tmp: Option<PathBuf>,
    host_id: u32,
    /// The lease on `host_id` (fresh work dirs; `None` for the shared
    /// [`WORK_DIR_ID`]); released when the sandbox is dropped.
    id_lease: Mutex<Option<IdLease>>,
    /// Container rung: the root of the spec's image from the store (`None`:
    /// the built-in `host` image).
    image_root: Option<PathBuf>,
    /// The filesystem as the workload sees it: where the command is
    /// resolved and the plan translated.
    view: Box<dyn FsView + Send + Sync>,
    /// Container rung: the live sandbox every exec runs in.
    warm: Option<cordon_linux::WarmSandbox>,
    /// The translated plan without a command, made once per sandbox (the
    /// translation walks the filesystem).
    base: std::sync::OnceLock<(PlanSpec, Vec<String>)>,
}

fn refused(reason: String) -> SandboxError {
    SandboxError::Failed {
        operation: "exec",
        reason,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl LocalSandbox {
    /// Stops the sandbox (container rung: kills everything in it and
    /// removes its cgroups) and removes its directories.
    pub fn dispose(&self) -> Result<(), BackendError> {
        let stopped = match &self.warm {
            Some(w) => w
                .stop()
                .map_err(|e| failed("dispose", format!("stopping the sandbox: {e}"))),
            None => Ok(()),
        };
        let removed = self.remove_dirs();
        // Nothing runs as the uid any more: another sandbox may have it.
        if stopped.is_ok() {
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
        self.files.guest()
    }

    fn remove_dirs(&self) -> Result<(), BackendError> {
        let mut dirs: Vec<&Path> = self.tmp.iter().map(PathBuf::as_path).collect();
        if self.fresh {
            dirs.push(&self.host_work);
        }
        for d in dirs {
            // `remove_dir_all` does not follow links the workload planted.
            if let Err(e) = std::fs::remove_dir_all(d) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(failed(
                        "dispose",
                        format!("cannot remove `{}`: {e}", d.display()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The work dir's host side.
    pub fn work_dir(&self) -> &Path {
        &self.host_work
    }

    /// Checks the first command and builds the plan; refuses what cannot be held.
    pub fn plan_for(&self, req: &ExecRequest) -> Result<(PlanSpec, Vec<String>), SandboxError> {
        let argv0 = req.argv.first().map(String::as_str).unwrap_or("");
        let canonical = cordon_confine::command::resolve(&*self.view, argv0)
            .map_err(|e| refused(e.to_string()))?;
        let work = self.files.guest().to_string();
        let identity = &self.provenance.identity;
        let request = Request {
            identity: identity.clone(),
            env: self.env.clone(),
            now: now(),
            facts: SurfaceFacts::Compute(ComputeFacts {
                command: canonical.command.clone(),
                command_target: canonical.command_target.clone(),
                args: Some(req.argv.iter().skip(1).cloned().collect()),
                cpu: i64::try_from(self.limits.cpu_seconds).ok(),
                memory: i64::try_from(self.limits.memory_bytes).ok(),
                work_dir: Some(work.clone()),
            }),
        };
        let explanation = self.policy.explain(&request);
        if !explanation.decision.is_allowed() {
            let why = explanation.why(&self.policy, Surface::Compute);
            return Err(refused(format!(
                "the policy refuses `{}` (canonical `{}`{}) before it starts:\n  {}",
                argv0,
                canonical.command,
                if canonical.command_target != canonical.command {
                    format!(", target `{}`", canonical.command_target)
                } else {
                    String::new()
                },
                why.join("\n  ")
            )));
        }
        let (mut spec, notes) = self.base_plan()?;
        let mut argv = req.argv.clone();
        argv[0] = canonical.command;
        spec.argv = argv;
        spec.env.extend(req.env.clone());
        spec.bounds.max_wall_seconds = self.limits.wall_seconds.min(req.timeout.as_secs().max(1));
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
        let work = self.files.guest().to_string();
        let identity = &self.provenance.identity;
        let plan = self
            .policy
            .plan(identity, &self.env, now(), &work)
            .map_err(|e| refused(e.to_string()))?;
        // The translation works in the workload's paths and looks at the
        // disk through the sandbox's view.
        let host_work = self
            .host_work
            .canonicalize()
            .map_err(|e| refused(format!("the work dir `{}`: {e}", self.host_work.display())))?;
        let work_seen = self
            .view
            .canonical(Path::new(&work))
            .map_err(|e| refused(format!("the work dir `{work}`: {e}")))?;
        let tmp_seen: PathBuf = match self.rung {
            Rung::Container => PathBuf::from("/tmp"),
            Rung::Process => self
                .tmp
                .clone()
                .unwrap_or_else(|| PathBuf::from("/nonexistent")),
        };
        let t = cordon_confine::translate(
            &self.policy,
            &plan,
            &cordon_confine::Target {
                rung: name_of(self.rung),
                mode: match self.rung {
                    Rung::Container => cordon_confine::Mode::MasksAvailable,
                    Rung::Process => cordon_confine::Mode::NoMasks,
                },
                tmp_shared: self.rung == Rung::Process,
                work_dir: &work_seen,
                tmp_dir: &tmp_seen,
                fs: &*self.view,
            },
        )
        .map_err(|e| refused(e.message))?;
        let mut env = BTreeMap::from([
            (
                "PATH".to_string(),
                cordon_confine::command::IMAGE_PATH.to_string(),
            ),
            ("HOME".to_string(), work.clone()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
        ]);
        if let Some(tmp) = &self.tmp {
            env.insert("TMPDIR".into(), tmp.display().to_string());
        }
        let inside = match self.rung {
            Rung::Container => INSIDE_ID,
            Rung::Process => self.host_id,
        };
        let spec = PlanSpec {
            rung: self.rung,
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
            work_dir: PathBuf::from(&work),
            work_dir_source: (self.rung == Rung::Container && Path::new(&work) != host_work)
                .then(|| host_work.clone()),
            image_root: self.image_root.clone(),
            tmp_dir: self.tmp.clone(),
            env,
            bounds: Bounds {
                max_memory: self.limits.memory_bytes,
                max_processes: u32::try_from(self.limits.processes).unwrap_or(u32::MAX),
                max_cpu_seconds: self.limits.cpu_seconds,
                max_wall_seconds: self.limits.wall_seconds,
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
}

impl LocalSandbox {
    /// Builds the warm sandbox (container rung) from the plan for this
    /// identity; each exec is then checked and started inside it.
    fn start_warm(
        &self,
        init: &InitProgram,
        name: &str,
    ) -> Result<cordon_linux::WarmSandbox, BackendError> {
        let (mut spec, _notes) = self
            .base_plan()
            .map_err(|e| failed("acquire", e.to_string()))?;
        spec.argv.clear();
        let plan =
            Plan::new(spec).map_err(|e| failed("acquire", format!("the plan is refused: {e}")))?;
        self.enforcer
            .available(Rung::Container)
            .map_err(|m| failed("acquire", m.to_string()))?;
        let init_id = self.host_id.wrapping_add(INIT_ID_OFFSET);
        cordon_linux::WarmSandbox::start(
            &plan,
            init,
            cordon_linux::InitIds {
                host_uid: init_id,
                host_gid: init_id,
            },
            name,
        )
        .map_err(|e| failed("acquire", format!("the sandbox did not start: {e}")))
    }

    /// Checks `req` and starts it with `stdio`; returns a handle to wait on.
    pub fn start(
        &self,
        req: &ExecRequest,
        stdio: cordon_linux::ExecStdio,
    ) -> Result<Started, SandboxError> {
        if req.argv.is_empty() {
            return Err(refused("the command is empty".into()));
        }
        let (spec, _notes) = self.plan_for(req)?;
        match &self.warm {
            Some(w) => {
                let exec = cordon_linux::WarmExec {
                    argv: spec.argv,
                    env: spec.env,
                    bounds: spec.bounds,
                };
                w.exec(&exec, stdio)
                    .map(Started::Warm)
                    .map_err(|e| refused(format!("the sandbox did not start it: {e}")))
            }
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
                    .map_err(|e| refused(format!("the sandbox did not start: {e}")))
            }
        }
    }

    /// One exec: the command checked, the plan held, the output capped,
    /// returned as a handle at once.
    fn start_handle(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let pipes = ExecPipes::new(attach.stdin_stream || !req.stdin.is_empty())
            .map_err(|e| refused(format!("making pipes: {e}")))?;
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
        .map_err(|e| refused(format!("the sandbox failed: {e}")))?;
        Ok(status_of(&outcome))
    }
}

/// The three pipes of one exec, before they are split between the
/// sandbox and us.
pub struct ExecPipes {
    stdin: (std::os::fd::OwnedFd, Option<std::os::fd::OwnedFd>),
    stdout: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    stderr: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
}

/// Our ends of an exec's pipes.
pub struct OurEnds {
    stdin: Option<std::os::fd::OwnedFd>,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
}

impl ExecPipes {
    /// Pipes for stdout and stderr; for stdin a pipe when there is input,
    /// else `/dev/null`.
    pub fn new(with_stdin: bool) -> std::io::Result<ExecPipes> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let p = || pipe_with(PipeFlags::CLOEXEC).map_err(std::io::Error::from);
        let stdin = if with_stdin {
            let (r, w) = p()?;
            (r, Some(w))
        } else {
            (std::fs::File::open("/dev/null")?.into(), None)
        };
        let (out_r, out_w) = p()?;
        let (err_r, err_w) = p()?;
        Ok(ExecPipes {
            stdin,
            stdout: (out_r, out_w),
            stderr: (err_r, err_w),
        })
    }

    /// The sandbox's ends and ours.
    pub fn split(self) -> (cordon_linux::ExecStdio, OurEnds) {
        (
            cordon_linux::ExecStdio {
                stdin: self.stdin.0,
                stdout: self.stdout.1,
                stderr: self.stderr.1,
            },
            OurEnds {
                stdin: self.stdin.1,
                stdout: self.stdout.0,
                stderr: self.stderr.0,
            },
        )
    }
}

impl OurEnds {
    /// The handle over these pipes: stdin streamed (with
    /// `attach.stdin_stream`) or fed the request's bytes, stdout and stderr
    /// read capped at the request's limit, `wait` for the end, `killer` to
    /// stop it early.
    pub fn into_handle(
        self,
        req: &ExecRequest,
        attach: Attach,
        wait: impl FnOnce() -> Result<ExitStatus, SandboxError> + Send + 'static,
        killer: Killer,
    ) -> ExecHandle {
        let stdin = match self.stdin {
            Some(w) if attach.stdin_stream => StdinFeed::Stream(Box::new(std::fs::File::from(w))),
            Some(w) => StdinFeed::Bytes(Box::new(std::fs::File::from(w)), req.stdin.clone()),
            None => StdinFeed::None,
        };
        ExecHandle::from_pipes(
            stdin,
            std::fs::File::from(self.stdout),
            std::fs::File::from(self.stderr),
            req.max_output_bytes,
            wait,
            killer,
        )
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

impl LocalSandbox {
    fn write_in(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        // What cordon writes in belongs to the sandbox's uid (`owned_by`),
        // handed over through the new file's descriptor: a link a running
        // exec swaps in meanwhile is never chowned.
        self.files.write_file(path, contents, mode)
    }
}

impl Sandbox for LocalSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        self.start_handle(req, attach)
    }

    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.write_in(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.files.stat_no_follow(path)
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.files.read_file(path, max_bytes)
    }

    fn host_work_dir(&self) -> Option<cordon_sandbox::HostWorkDirRecord> {
        Some(cordon_sandbox::HostWorkDirRecord {
            host: self.work_dir().to_path_buf(),
            guest: self.guest_work_dir().to_string(),
            owner: Some(self.host_id()),
        })
    }

    fn residue(&self) -> serde_json::Value {
        let mut dirs: Vec<PathBuf> = self.tmp_dir().map(Path::to_path_buf).into_iter().collect();
        if self.fresh_work_dir() {
            dirs.push(self.work_dir().to_path_buf());
        }
        serde_json::to_value(register::Residue {
            cgroups: self.cgroup_dirs(),
            dirs,
        })
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod lease_tests {
    use super::*;

    #[test]
    fn live_sandboxes_never_share_a_fresh_uid() {
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true and leasing uids needs root"
            );
            eprintln!("\n!!!!!!!! SKIPPED uid leases: needs root !!!!!!!!\n");
            return;
        }
        // More than one block of 64 (the first cut reused ids after 64).
        let leases: Vec<IdLease> = (0..150).map(|_| lease_id().unwrap()).collect();
        let mut ids: Vec<u32> = leases.iter().map(IdLease::id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 150, "a uid was leased twice");
        assert!(ids
            .iter()
            .all(|&i| i >= FRESH_ID_BASE && i.checked_add(INIT_ID_OFFSET).is_some()));
        // Another holder (a second open file description, as another process
        // would have) cannot take a held id.
        let held = leases[0].id();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(Path::new(ID_LEASES).join(held.to_string()))
            .unwrap();
        assert!(
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
        );
        // A sweep leaves held leases alone.
        let _ = sweep_id_leases();
        assert!(ids
            .iter()
            .all(|i| Path::new(ID_LEASES).join(i.to_string()).exists()));
        drop(leases);
        // Released: the lease files are gone with the leases.
        assert!(ids
            .iter()
            .all(|i| !Path::new(ID_LEASES).join(i.to_string()).exists()));
        assert!(
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
        );
    }
}

#[cfg(test)]
mod available_tests {
    use super::*;

    #[test]
    fn the_container_rung_needs_landlock_scoping_for_its_warm_sandboxes() {
        let init = InitProgram::new("/nonexistent/cordon");
        let mut m = cordon_linux::Mechanisms::detect();
        let real = available_on(
            &LinuxEnforcer::with_mechanisms(init.clone(), m.clone()),
            Rung::Container,
        );
        m.landlock_abi = 5;
        let e = LinuxEnforcer::with_mechanisms(init, m);
        if let Err(other) = real {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true and the container rung is missing: {other}"
            );
            eprintln!("\n!!!!!!!! SKIPPED landlock scoping check: {other} !!!!!!!!\n");
            return;
        }
        // ABI 5 holds a one-shot container run, not a warm sandbox.
        assert!(e.available(Rung::Container).is_ok());
        let refused = available_on(&e, Rung::Container).unwrap_err().to_string();
        assert!(
            refused.contains("ABI 6") && refused.contains("warm"),
            "{refused}"
        );
    }
}
