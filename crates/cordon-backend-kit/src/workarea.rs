//! What an OCI engine's sandbox (docker, gvisor) holds on the host beside
//! its root: the masks bound over what a plan hides, and the work area — a
//! volume of `max_disk` holding the work dir (or the operator's, checked)
//! and `/tmp`, owned by the workload's uid — with the filesystem view the
//! plan is translated and commands resolved in.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cordon_confine::RootedFs;
use cordon_files::host_dir::HostWorkDir;

pub use crate::dirs::{private_dir, private_dir_at};
use crate::WORKLOAD_ID;

/// Makes `p` a directory of the workload's uid ([`WORKLOAD_ID`]), 0700.
pub fn owned_dir(p: &Path) -> Result<(), String> {
    private_dir(p)?;
    std::os::unix::fs::chown(p, Some(WORKLOAD_ID), Some(WORKLOAD_ID))
        .map_err(|e| format!("cannot hand `{}` to uid {WORKLOAD_ID}: {e}", p.display()))
}

/// `masks` under a sandbox's directory: an empty directory (0555) and an
/// empty file no one may read (0000), bound over what a plan hides.
pub fn make_masks(masks: &Path) -> Result<(), String> {
    private_dir(masks)?;
    std::fs::DirBuilder::new()
        .mode(0o555)
        .create(masks.join("dir"))
        .map_err(|e| format!("cannot create the mask directory: {e}"))?;
    std::fs::write(masks.join("file"), b"")
        .and_then(|()| {
            std::fs::set_permissions(
                masks.join("file"),
                std::os::unix::fs::PermissionsExt::from_mode(0o000),
            )
        })
        .map_err(|e| format!("cannot create the mask file: {e}"))
}

/// A sandbox's work area: where the work dir is on the host, the
/// workload's filesystem as the plan is translated in, and the confined
/// file access files in and out go through.
pub struct WorkArea {
    pub work_host: PathBuf,
    pub view: RootedFs,
    pub files: HostWorkDir,
    /// The spec's workspace, mounted copy-on-write as the work dir.
    pub workspace: Option<cordon_files::workspace::Workspace>,
    /// The sandbox's own `/tmp` on the host, beside a fresh work dir
    /// (`None` over an operator's work dir): what a snapshot captures.
    pub tmp: Option<PathBuf>,
    /// The sandbox's `/tmp` (on its volume, whatever the work dir) as the
    /// files API serves it.
    pub tmp_files: HostWorkDir,
}

/// What a work area is made from.
pub struct WorkAreaSpec<'a> {
    /// The sandbox's `volume` directory (made here, 0700).
    pub volume: &'a Path,
    /// Where the volume's backing file goes.
    pub scratch: &'a Path,
    pub disk_bytes: u64,
    /// The operator's work dir (`--work-dir`), checked; `None`: a fresh
    /// one on the volume.
    pub given: Option<&'a Path>,
    /// The spec's workspace: a host directory the fresh work dir is made
    /// from, copy-on-write (refused together with `given`).
    pub workspace: Option<&'a str>,
    /// The snapshot the work dir is made from (its tree underneath).
    pub origin: Option<&'a cordon_sandbox::Origin>,
    /// The image's tree on the host (`/` for `host`).
    pub image_root: &'a Path,
    /// The work dir as the workload sees it.
    pub guest_work: &'a str,
    /// The backend's name, for messages.
    pub backend: &'a str,
}

/// What an OCI engine's acquire settles before it makes anything: the
/// spec's work dir, checked (refused where the engine's view reserves the
/// path), and where its image's tree is on this host (refused when the
/// store lacks it).
pub struct Acquiring<'a> {
    pub req: &'a cordon_sandbox::AcquireRequest,
    pub setup: &'a crate::EngineSetup,
    pub guest_work: String,
    pub image_root: PathBuf,
    pub backend: &'static str,
}

impl<'a> Acquiring<'a> {
    pub fn new(
        req: &'a cordon_sandbox::AcquireRequest,
        setup: &'a crate::EngineSetup,
        backend: &'static str,
    ) -> Result<Acquiring<'a>, cordon_sandbox::BackendError> {
        let spec = &req.provenance.spec;
        let guest_work = spec.work_dir().to_string();
        cordon_confine::oci::check_work_dir(&guest_work, backend)
            .map_err(|reason| crate::refused("acquire", reason))?;
        let image_root =
            crate::stored_root(spec.image()).map_err(|reason| crate::refused("acquire", reason))?;
        Ok(Acquiring {
            req,
            setup,
            guest_work,
            image_root,
            backend,
        })
    }

    /// The work area in the sandbox's directory `dir` (its `volume`), of
    /// the request's `max_disk`, over the operator's work dir when the
    /// set-up names one.
    pub fn work_area(&self, dir: &crate::dirs::MadeDir) -> Result<WorkArea, String> {
        work_area(&WorkAreaSpec {
            volume: &dir.dir.join("volume"),
            scratch: &dir.scratch,
            disk_bytes: self.req.limits.disk_bytes,
            given: self.setup.work_dir.as_deref(),
            workspace: self.req.provenance.spec.workspace(),
            origin: self.req.provenance.origin.as_ref(),
            image_root: &self.image_root,
            guest_work: &self.guest_work,
            backend: self.backend,
        })
    }
}

/// Mounts the volume and makes the work dir and `/tmp` on it (or checks
/// the operator's work dir), all owned by the workload's uid.
pub fn work_area(s: &WorkAreaSpec<'_>) -> Result<WorkArea, String> {
    private_dir(s.volume)?;
    cordon_linux::volume::mount_volume(s.volume, s.scratch, s.disk_bytes, WORKLOAD_ID)
        .map_err(|e| format!("the work dir's volume: {e}"))?;
    let mut workspace = None;
    let work_host = match (s.given, s.workspace) {
        (Some(_), _) if s.origin.is_some() => return Err("a sandbox is made from a snapshot or over an operator's work dir (`--work-dir`), not both; drop `--work-dir`".into()),
        (Some(_), Some(_)) => return Err("a sandbox is made either over an operator's work dir (`--work-dir`) or from a workspace (`--workspace`), not both; drop one".into()),
        (Some(d), None) => {
            cordon_confine::oci::given_work_dir(d, s.disk_bytes, WORKLOAD_ID, s.backend)?
        }
        (None, w) => {
            owned_dir(&s.volume.join("work"))?;
            if let Some(origin) = s.origin {
                if w.is_some() {
                    return Err("a sandbox is made from a snapshot or over a workspace, not both".into());
                }
                crate::workspace::mount_origin(origin, s.volume, WORKLOAD_ID)
                    .map_err(|e| e.to_string())?;
            }
            if let Some(dir) = w {
                workspace = Some(
                    crate::workspace::mount(dir, s.volume, WORKLOAD_ID).map_err(|e| match e {
                        cordon_sandbox::BackendError::Invalid { reason, .. }
                        | cordon_sandbox::BackendError::Failed { reason, .. }
                        | cordon_sandbox::BackendError::Refused { reason, .. }
                        | cordon_sandbox::BackendError::Unavailable { reason } => reason,
                    })?,
                );
            }
            s.volume.join("work")
        }
    };
    make_tmp(&s.volume.join("tmp"), s.origin, s.disk_bytes, WORKLOAD_ID)?;
    // The image's own tree with the work dir and `/tmp` bound in: the plan
    // is translated (and commands resolved) in it; the container then
    // shows only what the translated rules reach.
    let view = RootedFs::new(s.image_root)
        .bind("/tmp", s.volume.join("tmp"))
        .bind(s.guest_work, &work_host);
    let files = HostWorkDir::new(&work_host, s.guest_work)
        .map_err(|e| e.to_string())?
        .owned_by(WORKLOAD_ID, WORKLOAD_ID);
    let tmp_files = HostWorkDir::new(s.volume.join("tmp"), "/tmp")
        .map_err(|e| e.to_string())?
        .owned_by(WORKLOAD_ID, WORKLOAD_ID);
    Ok(WorkArea {
        work_host,
        view,
        files,
        workspace,
        tmp: s.given.is_none().then(|| s.volume.join("tmp")),
        tmp_files,
    })
}

/// Makes a sandbox's own `/tmp` at `tmp` (on its volume), owned by `to`:
/// empty, or a copy of the snapshot's it is made from (at most
/// `disk_bytes`, the volume's bound).
pub fn make_tmp(
    tmp: &Path,
    origin: Option<&cordon_sandbox::Origin>,
    disk_bytes: u64,
    to: u32,
) -> Result<(), String> {
    match origin.and_then(|o| o.tmp.as_ref().map(|t| (o, t))) {
        Some((o, from)) => {
            cordon_files::tree::copy_tree_owned(from, tmp, disk_bytes, "max_disk", usize::MAX, to)
                .map(drop)
                .map_err(|e| format!("snapshot `{}`: its `/tmp`: {e}", o.snapshot))?;
            std::fs::set_permissions(tmp, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(|e| format!("`{}`: {e}", tmp.display()))
        }
        None => {
            private_dir(tmp)?;
            std::os::unix::fs::chown(tmp, Some(to), Some(to))
                .map_err(|e| format!("cannot hand `{}` to uid {to}: {e}", tmp.display()))
        }
    }
}

/// An exec's environment in an engine's sandbox: cordon's (`PATH` of the
/// image, `HOME` the work dir, `LANG`, `TMPDIR`), the route out's
/// ([`crate::trust::egress_env`]: the proxy's when the sandbox has a route,
/// the CA's files when it trusts one), then the request's own.
pub fn exec_env(
    guest_work: &str,
    proxy_port: Option<u16>,
    trusts_ca: bool,
    request: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::from([
        (
            "PATH".to_string(),
            cordon_confine::command::IMAGE_PATH.to_string(),
        ),
        ("HOME".to_string(), guest_work.to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("TMPDIR".to_string(), "/tmp".to_string()),
    ]);
    env.extend(crate::trust::egress_env(proxy_port, trusts_ca));
    env.extend(request.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}
