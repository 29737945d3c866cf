//! A sandbox's bundle root: the route out (when its spec names hosts), the compatibility shim, and the skeleton of a stored image.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;

use cordon_backend_kit::Serving;
use cordon_confine::oci::{self, HostImage};
use cordon_sandbox::AcquireRequest;

/// A sandbox's own network namespace, made by cordon, which every runsc
/// sandbox of it runs in (`--network=host` there): holding only `lo`,
/// and the egress proxy's listener on `127.0.0.1:port` when the spec names
/// hosts (its one route out, served). Held for the sandbox's life;
/// dropping it closes the namespace and ends the serving.
pub(crate) struct Route {
    /// The proxy's listener's port; `None`: no route out.
    pub(crate) port: Option<u16>,
    pub(crate) ns: std::os::fd::OwnedFd,
    pub(crate) serving: Serving,
    /// The egress proxy's CA the sandbox trusts, when the policy
    /// inspects: its files in the sandbox's `trust`, bound read-only into
    /// every exec.
    pub(crate) trust: Option<cordon_backend_kit::trust::Trust>,
    /// Made with `requires: [ports]`: the workload listens in it.
    pub(crate) listen: bool,
}

impl Route {
    /// The namespace as runsc opens it: through this process's descriptor.
    pub(crate) fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("/proc/{}/fd/{}", std::process::id(), self.ns.as_raw_fd())
    }
}

/// Makes the namespace for `req`'s sandbox: with `service`, the route out
/// (its listener, served; and when the proxy inspects, the sandbox's trust
/// of its CA in `dir/trust` from the image at `image_root`, with the mount
/// points in the bundle's `rootfs` — a CA that cannot be placed refuses
/// the route); without, loopback only. `listen`: the workload may listen.
pub(crate) fn route(
    service: Option<&Arc<dyn cordon_egress::EgressService>>,
    req: &AcquireRequest,
    (dir, image_root, rootfs): (&Path, &Path, &Path),
    listen: bool,
) -> Result<Route, String> {
    let Some(service) = service else {
        let ns = cordon_linux::netns::private_loopback()
            .map_err(|e| format!("making the sandbox's network namespace: {e}"))?;
        return Ok(Route {
            port: None,
            ns,
            serving: Serving::of(None),
            trust: None,
            listen,
        });
    };
    let r = cordon_backend_kit::register::private_route(&**service, req)?;
    let trust = match &r.ca_pem {
        Some(pem) => Some(
            trust_in(dir, image_root, rootfs, pem).map_err(cordon_backend_kit::trust::unplaced)?,
        ),
        None => None,
    };
    Ok(Route {
        port: Some(r.port),
        ns: r.ns,
        serving: r.serving,
        trust,
        listen,
    })
}

/// The trust files, and a mount point in `rootfs` for each (the root is
/// read-only to runsc; one the plan binds over from the image is the
/// image's own).
fn trust_in(
    dir: &Path,
    image_root: &Path,
    rootfs: &Path,
    pem: &str,
) -> Result<cordon_backend_kit::trust::Trust, String> {
    let t = cordon_backend_kit::trust::Trust::make(&dir.join("trust"), image_root, pem)?;
    for (_, target, is_dir) in t.binds() {
        let target = Path::new(target);
        if is_dir {
            oci::mkdir_in(rootfs, target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            oci::mkdir_in(rootfs, parent)?;
        }
        let at = oci::under(rootfs, target);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&at)
            .map_err(|e| format!("cannot make the mount point `{}`: {e}", at.display()))?;
    }
    Ok(t)
}

pub(crate) use cordon_backend_kit::workarea::private_dir;

/// The compatibility shim (`shim/noautomount.c`: this runsc refuses
/// `AT_NO_AUTOMOUNT`, which coreutils passes on every stat), built with
/// the crate.
pub(crate) const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/noautomount.so"));

/// Where the shim is in the sandbox's root.
pub const SHIM_PATH: &str = "/.cordon/noautomount.so";

/// Puts the shim in `rootfs` (root's, read-only for everyone else: the
/// root is mounted read-only anyway) and names it in the root's own
/// `/etc/ld.so.preload`, so every dynamically linked program loads it.
pub(crate) fn install_shim(rootfs: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = oci::under(rootfs, Path::new(SHIM_PATH));
    if let Some(parent) = path.parent() {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(parent)
            .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
    }
    std::fs::write(&path, SHIM)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)))
        .map_err(|e| format!("cannot write the shim `{}`: {e}", path.display()))?;
    std::fs::write(rootfs.join("etc/ld.so.preload"), format!("{SHIM_PATH}\n"))
        .map_err(|e| format!("cannot write the root's `/etc/ld.so.preload`: {e}"))
}

/// The bundle's root for a stored image at `image_root`: its top-level
/// links as they are, an empty mount point for each of its top-level
/// directories (bound from the store as the plan grants, by
/// [`crate::oci::plan_mounts`]), and cordon's own `/etc`, `/proc`, `/dev`
/// and `/tmp`. Nothing of the image is copied.
pub(crate) fn stored_skeleton(rootfs: &Path, image_root: &Path) -> Result<HostImage, String> {
    let own = ["etc", "proc", "dev", "sys", "tmp"];
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(rootfs)
        .map_err(|e| format!("cannot create `{}`: {e}", rootfs.display()))?;
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(image_root)
        .map_err(|e| format!("the image's root `{}`: {e}", image_root.display()))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    let mut dirs = Vec::new();
    for name in names {
        let at = image_root.join(&name);
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("the image's `{}`: {e}", at.display()))?;
        if own.iter().any(|o| name == *o) {
            continue;
        }
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(&at)
                .map_err(|e| format!("cannot read the link `{}`: {e}", at.display()))?;
            std::os::unix::fs::symlink(&to, rootfs.join(&name))
                .map_err(|e| format!("cannot link `{}` in the root: {e}", at.display()))?;
        } else if meta.is_dir() {
            oci::mkdir_in(rootfs, &Path::new("/").join(&name))?;
            dirs.push(Path::new("/").join(&name));
        }
    }
    for d in own.iter().filter(|d| **d != "sys") {
        oci::mkdir_in(rootfs, &Path::new("/").join(d))?;
    }
    Ok(HostImage {
        rootfs: rootfs.to_path_buf(),
        dirs,
    })
}
