//! The confinement plan: what the kernel is asked to hold for one sandbox.
//!
//! [`PlanSpec`] is the wire form (serde, `deny_unknown_fields`); [`Plan`] is
//! the validated form and can only be built through [`Plan::new`] (or by
//! deserializing, which runs the same validation), so every `Plan` the
//! launcher sees is valid. A `Plan` crosses the pipe to the init program as
//! JSON and is validated again on the far side.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How strongly the workload is separated from the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rung {
    /// A separate process: dedicated unprivileged uid, Landlock, seccomp,
    /// cgroups/rlimits, `no_new_privs`. The host's filesystem and pids: its
    /// own IPC and (empty) net namespaces, and a mount namespace only for a
    /// `/proc` with `hidepid=invisible`.
    Process,
    /// Everything of `Process`, plus user/mount/pid/ipc/uts/net/cgroup
    /// namespaces and a fresh root entered with `pivot_root`.
    Container,
}

impl std::fmt::Display for Rung {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rung::Process => "process",
            Rung::Container => "container",
        })
    }
}

/// Rights on a path and everything beneath it (Landlock's path-beneath).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsRule {
    /// Absolute, normalised path (no `.` or `..`).
    pub path: PathBuf,
    #[serde(default)]
    pub read: bool,
    #[serde(default)]
    pub write: bool,
    #[serde(default)]
    pub execute: bool,
}

/// Resource bounds for the whole process tree of the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// Bytes of memory (cgroup memory limit; swap included where accounted).
    pub max_memory: u64,
    /// Live processes and threads in the tree (cgroup pids limit).
    pub max_processes: u32,
    /// CPU seconds summed over the whole tree (polled cgroup accounting).
    pub max_cpu_seconds: u64,
    /// Wall-clock seconds from launch.
    pub max_wall_seconds: u64,
    /// Bytes the workload may write to each writable filesystem the
    /// launcher gives it (the container rung's private `/tmp` is sized to
    /// the lesser of this and `max_memory`); the work dir's own bound is
    /// the filesystem it lives on (see `cordon_linux::volume`).
    #[serde(default = "default_max_disk")]
    pub max_disk: u64,
}

fn default_max_disk() -> u64 {
    1 << 30
}

/// Who the workload runs as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ids {
    /// Uid inside the sandbox (container rung); never 0.
    pub uid: u32,
    /// Gid inside the sandbox (container rung); never 0.
    pub gid: u32,
    /// Host uid the inside uid maps to (container) or the process runs as
    /// (process rung); never 0.
    pub host_uid: u32,
    /// Host gid, as `host_uid`; never 0.
    pub host_gid: u32,
}

/// The wire form of a plan. Build a [`Plan`] from it with [`Plan::new`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    pub rung: Rung,
    /// Path-beneath rights. Anything not granted here is denied.
    #[serde(default)]
    pub fs: Vec<FsRule>,
    /// Paths inside granted trees that must not be visible (container rung:
    /// covered by an empty read-only mount).
    #[serde(default)]
    pub mask_paths: Vec<PathBuf>,
    /// Executables inside granted trees that must not run, not even through
    /// the dynamic loader (container rung: covered by an empty file).
    #[serde(default)]
    pub mask_executables: Vec<PathBuf>,
    /// The work dir as the workload sees it, read-write.
    pub work_dir: PathBuf,
    /// Container rung: the host directory bound at `work_dir`. `None`: the
    /// work dir appears at its own host path (the process rung always).
    #[serde(default)]
    pub work_dir_source: Option<PathBuf>,
    /// Container rung: the host directory holding the image's root, bound
    /// read-only as the sandbox's `/`. `None`: the built-in `host` image
    /// (the host's system directories, read-only).
    #[serde(default)]
    pub image_root: Option<PathBuf>,
    /// Process rung only: the per-sandbox temporary directory named in
    /// `TMPDIR`, read-write. The caller creates it, owned by `host_uid`.
    #[serde(default)]
    pub tmp_dir: Option<PathBuf>,
    /// The complete environment of the workload; nothing else is inherited.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub bounds: Bounds,
    /// The first command; `argv[0]` is an absolute path (no `PATH` lookup).
    pub argv: Vec<String>,
    pub ids: Ids,
    /// Container rung only: the one TCP port the workload may connect to,
    /// on `127.0.0.1` of the sandbox's own network namespace. The init
    /// listens there before anything of the workload runs and hands the
    /// listener to the owner (see `Running::take_proxy_listener`); the
    /// workload may connect to it and nothing else (Landlock), and may bind
    /// no TCP port. `None`: no TCP at all. The namespace is private to the
    /// sandbox, so any port works; never 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_port: Option<u16>,
    /// Container rung only: the workload may bind TCP ports (and listen)
    /// in its own network namespace, for a server the host reaches through
    /// cordon as the policy's ingress surface allows (a spec that requires
    /// `ports`). The namespace holds only `lo` and the proxy's listener:
    /// binding opens no route out. `false`: it may bind no TCP port.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listen: bool,
    /// The host directory holding this sandbox's secrets, bound read-only
    /// (never executable) at [`SECRETS_AT`] in the sandbox's own mount
    /// namespace (process rung) or root (container rung), and readable
    /// there (Landlock); nothing under it is writable by the workload. The
    /// caller makes it for this sandbox alone. `None`: no secrets, and
    /// nothing at [`SECRETS_AT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_dir: Option<PathBuf>,
    /// Container rung only: the host directory holding the sandbox's
    /// trust of its egress proxy's CA (its bundle [`TRUST_BUNDLE`] and the
    /// CA alone), bound read-only (never executable) at [`TRUST_AT`] and
    /// readable there (Landlock); its bundle is also bound read-only over
    /// [`SYSTEM_BUNDLE`] where the sandbox's root has a file there reached
    /// through no link. The caller makes it for this sandbox alone. `None`:
    /// nothing at [`TRUST_AT`], the system bundle the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_dir: Option<PathBuf>,
    /// Container rung only: the host's [`KVM_DEVICE`] bound into the
    /// sandbox's `/dev`, with read, write and device ioctls (Landlock
    /// `IoctlDev`) on it alone — for a virtual machine monitor (the
    /// `microvm` backend's QEMU, in its jail), never a general workload:
    /// KVM's ioctls are a large kernel surface the rung otherwise keeps
    /// out of reach. The kernel still checks the node's mode against the
    /// sandbox's host uid and gid (never in the node's group), so the host
    /// must make it usable by others (`0666`, udev's usual mode). `false`:
    /// no `/dev/kvm` at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kvm: bool,
}

/// The device node [`PlanSpec::kvm`] gives.
pub const KVM_DEVICE: &str = "/dev/kvm";

/// Where a sandbox sees its secrets directory ([`PlanSpec::secrets_dir`]):
/// the protocol's `cordon_sandbox::secrets::SECRETS_DIR`.
pub const SECRETS_AT: &str = "/run/cordon/secrets";

/// Where a sandbox sees its trust directory ([`PlanSpec::trust_dir`]).
pub const TRUST_AT: &str = "/run/cordon/trust";
/// The bundle's name in the trust directory.
pub const TRUST_BUNDLE: &str = "ca-certificates.crt";
/// The system bundle path the trust directory's bundle is bound over.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A plan that passed validation. Fields are read through accessors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PlanSpec", into = "PlanSpec")]
pub struct Plan {
    // INVARIANT: `spec` passed `validate`.
    spec: PlanSpec,
}

/// Why a plan was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("`{path}` must be an absolute path without `.` or `..` ({what})")]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error("the first command is empty")]
    EmptyArgv,
    #[error("argv[0] `{0}` must be an absolute path: the sandbox has no `PATH` lookup")]
    RelativeProgram(String),
    #[error("`{what}` must be at least {min}, got {got}")]
    BoundTooSmall {
        what: &'static str,
        min: u64,
        got: u64,
    },
    #[error("{what} must not be 0: the workload never runs as (or maps to) root")]
    RootId { what: &'static str },
    #[error("environment variable `{0}` has an invalid name or value")]
    BadEnv(String),
    #[error("mask `{0}` is not inside any granted tree")]
    MaskOutsideGrant(PathBuf),
    #[error(
        "rule on `{0}`: /proc, /sys and /dev are provided by the launcher and cannot be granted"
    )]
    ReservedPath(PathBuf),
    #[error("the process rung needs `tmp_dir` (its TMPDIR; there is no private /tmp)")]
    MissingTmpDir,
    #[error("`tmp_dir` is for the process rung only; the container rung has a private /tmp")]
    TmpDirAtContainer,
    #[error("a string in the plan contains a NUL byte")]
    Nul,
    #[error("`{0}` is for the container rung only: the process rung sees the host's own files")]
    ContainerOnly(&'static str),
    #[error(
        "`proxy_port` needs the container rung: the process rung shares the host's network, so a port there would be the host's; use the container rung"
    )]
    ProxyPortNeedsContainer,
    #[error("`proxy_port` must not be 0: name the port the sandbox's proxy listens on")]
    ProxyPortZero,
    #[error("`{0}` overlaps the secrets directory `{SECRETS_AT}`, which is the launcher's alone and read-only")]
    SecretsOverlap(PathBuf),
    #[error("`{0}` overlaps the trust directory `{TRUST_AT}`, which is the launcher's alone and read-only")]
    TrustOverlap(PathBuf),
}

fn normal_absolute(what: &'static str, path: &Path) -> Result<(), PlanError> {
    let ok = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !path.as_os_str().as_encoded_bytes().contains(&0);
    if ok {
        Ok(())
    } else {
        Err(PlanError::NotAbsolute {
            what,
            path: path.to_path_buf(),
        })
    }
}

fn reserved(path: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|r| path.starts_with(r) || Path::new(r).starts_with(path))
}

impl Plan {
    /// Validates `spec` into a plan.
    pub fn new(spec: PlanSpec) -> Result<Self, PlanError> {
        validate(&spec)?;
        Ok(Plan { spec })
    }

    pub fn rung(&self) -> Rung {
        self.spec.rung
    }
    pub fn fs(&self) -> &[FsRule] {
        &self.spec.fs
    }
    pub fn mask_paths(&self) -> &[PathBuf] {
        &self.spec.mask_paths
    }
    pub fn mask_executables(&self) -> &[PathBuf] {
        &self.spec.mask_executables
    }
    pub fn work_dir(&self) -> &Path {
        &self.spec.work_dir
    }
    pub fn tmp_dir(&self) -> Option<&Path> {
        self.spec.tmp_dir.as_deref()
    }
    /// The host directory behind the work dir (container rung), or the
    /// work dir itself.
    pub fn work_dir_source(&self) -> &Path {
        self.spec
            .work_dir_source
            .as_deref()
            .unwrap_or(&self.spec.work_dir)
    }
    pub fn image_root(&self) -> Option<&Path> {
        self.spec.image_root.as_deref()
    }
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.spec.env
    }
    pub fn bounds(&self) -> &Bounds {
        &self.spec.bounds
    }
    pub fn argv(&self) -> &[String] {
        &self.spec.argv
    }
    pub fn ids(&self) -> &Ids {
        &self.spec.ids
    }
    /// The host directory bound read-only at [`SECRETS_AT`], if any.
    pub fn secrets_dir(&self) -> Option<&Path> {
        self.spec.secrets_dir.as_deref()
    }
    /// The host directory bound read-only at [`TRUST_AT`], if any
    /// (container rung).
    pub fn trust_dir(&self) -> Option<&Path> {
        self.spec.trust_dir.as_deref()
    }
    /// Whether the sandbox gets [`KVM_DEVICE`] (container rung).
    pub fn kvm(&self) -> bool {
        self.spec.kvm
    }
    /// The one TCP port the workload may connect to (container rung).
    pub fn proxy_port(&self) -> Option<u16> {
        self.spec.proxy_port
    }
    /// Whether the workload may bind TCP ports in its own namespace.
    pub fn listen(&self) -> bool {
        self.spec.listen
    }
    /// The wire form.
    pub fn spec(&self) -> &PlanSpec {
        &self.spec
    }
}

impl TryFrom<PlanSpec> for Plan {
    type Error = PlanError;
    fn try_from(spec: PlanSpec) -> Result<Self, PlanError> {
        Plan::new(spec)
    }
}

impl From<Plan> for PlanSpec {
    fn from(plan: Plan) -> Self {
        plan.spec
    }
}

fn validate(spec: &PlanSpec) -> Result<(), PlanError> {
    // An empty argv is a warm sandbox's base plan (each exec names its own
    // command); the one-shot launcher refuses it.
    if let Some(program) = spec.argv.first() {
        if !program.starts_with('/') {
            return Err(PlanError::RelativeProgram(program.clone()));
        }
    }
    if spec.argv.iter().any(|a| a.contains('\0')) {
        return Err(PlanError::Nul);
    }
    normal_absolute("work_dir", &spec.work_dir)?;
    if reserved(&spec.work_dir) {
        return Err(PlanError::ReservedPath(spec.work_dir.clone()));
    }
    for (what, path) in [
        ("work_dir_source", &spec.work_dir_source),
        ("image_root", &spec.image_root),
    ] {
        if let Some(path) = path {
            if spec.rung == Rung::Process {
                return Err(PlanError::ContainerOnly(what));
            }
            normal_absolute(what, path)?;
        }
    }
    for rule in &spec.fs {
        normal_absolute("fs rule", &rule.path)?;
        if reserved(&rule.path) {
            return Err(PlanError::ReservedPath(rule.path.clone()));
        }
    }
    if let Some(dir) = &spec.secrets_dir {
        normal_absolute("secrets_dir", dir)?;
        // Nothing the plan grants may be bound over the secrets, nor may
        // the work dir (read-write) contain them.
        let at = Path::new(SECRETS_AT);
        let overlaps = |p: &Path| p.starts_with(at) || at.starts_with(p);
        if overlaps(&spec.work_dir) {
            return Err(PlanError::SecretsOverlap(spec.work_dir.clone()));
        }
        if let Some(r) = spec.fs.iter().find(|r| r.path.starts_with(at)) {
            return Err(PlanError::SecretsOverlap(r.path.clone()));
        }
    }
    if let Some(dir) = &spec.trust_dir {
        normal_absolute("trust_dir", dir)?;
        if spec.rung == Rung::Process {
            return Err(PlanError::ContainerOnly("trust_dir"));
        }
        let at = Path::new(TRUST_AT);
        let overlaps = |p: &Path| p.starts_with(at) || at.starts_with(p);
        if overlaps(&spec.work_dir) {
            return Err(PlanError::TrustOverlap(spec.work_dir.clone()));
        }
        if let Some(r) = spec.fs.iter().find(|r| r.path.starts_with(at)) {
            return Err(PlanError::TrustOverlap(r.path.clone()));
        }
    }
    for mask in spec.mask_paths.iter().chain(&spec.mask_executables) {
        normal_absolute("mask", mask)?;
        let granted = spec
            .fs
            .iter()
            .filter(|r| r.read || r.write || r.execute)
            .any(|r| mask.starts_with(&r.path) && mask != &r.path)
            || mask.starts_with(&spec.work_dir);
        if !granted {
            return Err(PlanError::MaskOutsideGrant(mask.clone()));
        }
    }
    if spec.kvm && spec.rung == Rung::Process {
        return Err(PlanError::ContainerOnly("kvm"));
    }
    if spec.listen && spec.rung == Rung::Process {
        return Err(PlanError::ContainerOnly("listen"));
    }
    match (spec.rung, spec.proxy_port) {
        (_, None) => {}
        (Rung::Process, Some(_)) => return Err(PlanError::ProxyPortNeedsContainer),
        (Rung::Container, Some(0)) => return Err(PlanError::ProxyPortZero),
        (Rung::Container, Some(_)) => {}
    }
    match (spec.rung, &spec.tmp_dir) {
        (Rung::Process, None) => return Err(PlanError::MissingTmpDir),
        (Rung::Process, Some(t)) => normal_absolute("tmp_dir", t)?,
        (Rung::Container, Some(_)) => return Err(PlanError::TmpDirAtContainer),
        (Rung::Container, None) => {}
    }
    for (k, v) in &spec.env {
        let bad_name = k.is_empty() || k.contains('=') || k.contains('\0');
        if bad_name || v.contains('\0') {
            return Err(PlanError::BadEnv(k.clone()));
        }
    }
    let b = &spec.bounds;
    let checks: [(&'static str, u64, u64); 5] = [
        ("max_memory", 4 << 20, b.max_memory),
        ("max_processes", 1, u64::from(b.max_processes)),
        ("max_cpu_seconds", 1, b.max_cpu_seconds),
        ("max_wall_seconds", 1, b.max_wall_seconds),
        ("max_disk", 1 << 20, b.max_disk),
    ];
    for (what, min, got) in checks {
        if got < min {
            return Err(PlanError::BoundTooSmall { what, min, got });
        }
    }
    let ids = &spec.ids;
    for (what, id) in [
        ("ids.uid", ids.uid),
        ("ids.gid", ids.gid),
        ("ids.host_uid", ids.host_uid),
        ("ids.host_gid", ids.host_gid),
    ] {
        if id == 0 {
            return Err(PlanError::RootId { what });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PlanSpec {
        PlanSpec {
            rung: Rung::Container,
            fs: vec![FsRule {
                path: "/usr".into(),
                read: true,
                write: false,
                execute: true,
            }],
            mask_paths: vec![],
            mask_executables: vec![],
            work_dir: "/tmp/w".into(),
            work_dir_source: None,
            image_root: None,
            tmp_dir: None,
            env: BTreeMap::new(),
            bounds: Bounds {
                max_memory: 64 << 20,
                max_processes: 16,
                max_cpu_seconds: 1,
                max_wall_seconds: 5,
                max_disk: 64 << 20,
            },
            argv: vec!["/bin/true".into()],
            ids: Ids {
                uid: 1000,
                gid: 1000,
                host_uid: 100_000,
                host_gid: 100_000,
            },
            proxy_port: None,
            listen: false,
            secrets_dir: None,
            trust_dir: None,
            kvm: false,
        }
    }

    #[test]
    fn a_trust_dir_is_the_container_rungs_and_nothing_is_granted_beneath_it() {
        let mut s = spec();
        s.trust_dir = Some("/var/tmp/cordon-x/trust".into());
        let plan = Plan::new(s.clone()).unwrap();
        assert_eq!(plan.trust_dir(), Some(Path::new("/var/tmp/cordon-x/trust")));
        let mut p = s.clone();
        p.fs[0].path = format!("{TRUST_AT}/a").into();
        assert!(matches!(Plan::new(p), Err(PlanError::TrustOverlap(_))));
        let mut p = s.clone();
        p.work_dir = "/run".into();
        assert!(matches!(Plan::new(p), Err(PlanError::TrustOverlap(_))));
        let mut p = s.clone();
        p.rung = Rung::Process;
        p.tmp_dir = Some("/tmp/x".into());
        assert!(matches!(
            Plan::new(p),
            Err(PlanError::ContainerOnly("trust_dir"))
        ));
    }

    #[test]
    fn valid_plan_round_trips_through_json() {
        let plan = Plan::new(spec()).unwrap();
        let json = serde_json::to_string(&plan).unwrap();
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(plan, back);
    }

    #[test]
    fn deserializing_an_invalid_plan_fails() {
        let mut s = spec();
        s.ids.host_uid = 0;
        let json = serde_json::to_string(&s).unwrap();
        assert!(serde_json::from_str::<Plan>(&json).is_err());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let mut v = serde_json::to_value(spec()).unwrap();
        v["dangerously_unconfined"] = serde_json::Value::Bool(true);
        assert!(serde_json::from_value::<Plan>(v).is_err());
    }

    #[test]
    fn root_ids_are_refused() {
        for f in [
            |s: &mut PlanSpec| s.ids.uid = 0,
            |s: &mut PlanSpec| s.ids.gid = 0,
            |s: &mut PlanSpec| s.ids.host_uid = 0,
            |s: &mut PlanSpec| s.ids.host_gid = 0,
        ] {
            let mut s = spec();
            f(&mut s);
            assert!(matches!(Plan::new(s), Err(PlanError::RootId { .. })));
        }
    }

    #[test]
    fn relative_or_dotted_paths_are_refused() {
        let mut s = spec();
        s.argv = vec!["python3".into()];
        assert!(matches!(Plan::new(s), Err(PlanError::RelativeProgram(_))));
        let mut s = spec();
        s.fs[0].path = "/usr/../root".into();
        assert!(matches!(Plan::new(s), Err(PlanError::NotAbsolute { .. })));
        let mut s = spec();
        s.work_dir = "work".into();
        assert!(matches!(Plan::new(s), Err(PlanError::NotAbsolute { .. })));
    }

    #[test]
    fn nothing_the_plan_grants_lies_over_or_under_the_secrets() {
        let mut s = spec();
        s.secrets_dir = Some("/var/tmp/cordon-secrets-1-2-3".into());
        assert!(Plan::new(s).is_ok());
        let mut s = spec();
        s.secrets_dir = Some("/var/tmp/cordon-secrets-1-2-3".into());
        s.work_dir = SECRETS_AT.into();
        assert!(matches!(Plan::new(s), Err(PlanError::SecretsOverlap(_))));
        let mut s = spec();
        s.secrets_dir = Some("/var/tmp/cordon-secrets-1-2-3".into());
        s.work_dir = "/run".into();
        assert!(matches!(Plan::new(s), Err(PlanError::SecretsOverlap(_))));
        let mut s = spec();
        s.secrets_dir = Some("/var/tmp/cordon-secrets-1-2-3".into());
        s.fs[0].path = format!("{SECRETS_AT}/a").into();
        assert!(matches!(Plan::new(s), Err(PlanError::SecretsOverlap(_))));
        let mut s = spec();
        s.secrets_dir = Some("relative".into());
        assert!(matches!(Plan::new(s), Err(PlanError::NotAbsolute { .. })));
    }

    #[test]
    fn masks_are_held_at_both_rungs_inside_grants_only() {
        let mut s = spec();
        s.rung = Rung::Process;
        s.tmp_dir = Some("/tmp/t".into());
        s.mask_executables = vec!["/usr/bin/perl".into()];
        assert!(Plan::new(s).is_ok());
        let mut s = spec();
        s.mask_paths = vec!["/opt/secret".into()];
        assert!(matches!(Plan::new(s), Err(PlanError::MaskOutsideGrant(_))));
        let mut s = spec();
        s.mask_executables = vec!["/usr/bin/perl".into()];
        assert!(Plan::new(s).is_ok());
    }

    #[test]
    fn reserved_paths_zero_bounds_and_bad_env_are_refused() {
        let mut s = spec();
        s.fs[0].path = "/dev".into();
        assert!(matches!(Plan::new(s), Err(PlanError::ReservedPath(_))));
        let mut s = spec();
        s.fs[0].path = "/".into();
        assert!(matches!(Plan::new(s), Err(PlanError::ReservedPath(_))));
        let mut s = spec();
        s.bounds.max_cpu_seconds = 0;
        assert!(matches!(Plan::new(s), Err(PlanError::BoundTooSmall { .. })));
        let mut s = spec();
        s.env.insert("A=B".into(), "x".into());
        assert!(matches!(Plan::new(s), Err(PlanError::BadEnv(_))));
    }

    #[test]
    fn image_root_and_work_dir_source_belong_to_the_container_rung() {
        let mut s = spec();
        s.image_root = Some("/var/lib/cordon/images/x/root".into());
        s.work_dir_source = Some("/var/tmp/w".into());
        s.work_dir = "/workspace".into();
        assert!(Plan::new(s.clone()).is_ok());
        s.image_root = Some("images/x".into());
        assert!(matches!(Plan::new(s), Err(PlanError::NotAbsolute { .. })));
        let mut s = spec();
        s.rung = Rung::Process;
        s.tmp_dir = Some("/tmp/t".into());
        s.image_root = Some("/var/lib/cordon/images/x/root".into());
        assert!(matches!(
            Plan::new(s),
            Err(PlanError::ContainerOnly("image_root"))
        ));
    }

    #[test]
    fn tmp_dir_belongs_to_the_process_rung() {
        let mut s = spec();
        s.rung = Rung::Process;
        assert!(matches!(Plan::new(s), Err(PlanError::MissingTmpDir)));
        let mut s = spec();
        s.tmp_dir = Some("/tmp/t".into());
        assert!(matches!(Plan::new(s), Err(PlanError::TmpDirAtContainer)));
    }

    #[test]
    fn proxy_port_belongs_to_the_container_rung_and_is_never_0() {
        let mut s = spec();
        s.proxy_port = Some(41_000);
        let plan = Plan::new(s.clone()).unwrap();
        assert_eq!(plan.proxy_port(), Some(41_000));
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
        s.proxy_port = Some(0);
        assert_eq!(Plan::new(s.clone()), Err(PlanError::ProxyPortZero));
        s.proxy_port = Some(41_000);
        s.rung = Rung::Process;
        s.tmp_dir = Some("/tmp/t".into());
        let err = Plan::new(s).unwrap_err();
        assert_eq!(err, PlanError::ProxyPortNeedsContainer);
        assert!(err.to_string().contains("use the container rung"), "{err}");
    }

    #[test]
    fn kvm_belongs_to_the_container_rung_and_stays_off_the_wire_when_off() {
        let plan = Plan::new(spec()).unwrap();
        assert!(!plan.kvm());
        let v = serde_json::to_value(&plan).unwrap();
        assert!(v.get("kvm").is_none(), "{v}");
        let mut s = spec();
        s.kvm = true;
        let plan = Plan::new(s.clone()).unwrap();
        assert!(plan.kvm());
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
        s.rung = Rung::Process;
        s.tmp_dir = Some("/tmp/t".into());
        assert_eq!(Plan::new(s), Err(PlanError::ContainerOnly("kvm")));
    }

    #[test]
    fn a_plan_without_proxy_port_keeps_its_wire_form() {
        let plan = Plan::new(spec()).unwrap();
        let v = serde_json::to_value(&plan).unwrap();
        assert!(v.get("proxy_port").is_none(), "{v}");
        assert_eq!(
            serde_json::from_value::<Plan>(v).unwrap().proxy_port(),
            None
        );
    }
}
