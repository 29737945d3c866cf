//! A sandbox's directories: a fresh volume made for it, or the operator's
//! directory through an idmapped mount. Both are held to `max_disk` by the
//! kernel (see `cordon_linux::volume`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use cordon_linux::volume;
use cordon_sandbox::BackendError;

use crate::{failed, NEXT, WORK_DIR_ID};

/// A directory that did not exist, created owner-only and handed to `id`.
pub(crate) fn fresh_dir(parent: &Path, what: &str, id: u32) -> Result<PathBuf, BackendError> {
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

/// A sandbox's secrets directory: a new directory under `parent`, owned by
/// root with the sandbox's group `gid`, mode 0750 — the workload (uid and
/// gid `gid`) lists and reads it, owns nothing in it, and no other uid
/// gets in. Bound read-only at the guest's secrets directory.
pub(crate) fn secrets_dir(parent: &Path, gid: u32) -> Result<PathBuf, BackendError> {
    group_dir(parent, "secrets", gid)
}

/// A new directory `cordon-WHAT-…` under `parent`, root's with the
/// sandbox's group `gid`, mode 0750 (the secrets', the trust's).
pub(crate) fn group_dir(parent: &Path, what: &str, gid: u32) -> Result<PathBuf, BackendError> {
    let dir = fresh_dir(parent, what, 0)?;
    let handed = std::os::unix::fs::chown(&dir, Some(0), Some(gid))
        .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)));
    if let Err(e) = handed {
        let _ = std::fs::remove_dir(&dir);
        return Err(failed(
            "acquire",
            format!("cannot hand `{}` to gid {gid}: {e}", dir.display()),
        ));
    }
    Ok(dir)
}

/// The process rung's secrets are bound at `/run/cordon/secrets` in the
/// sandbox's own mount namespace, over a tmpfs there that covers the
/// host's `/run/cordon`: which must then exist, a real directory of
/// root's. Made mode 0700 when absent (as cordon's state directory is).
pub(crate) fn secrets_cover_point() -> Result<(), BackendError> {
    let at = Path::new(cordon_linux::SECRETS_AT)
        .parent()
        .unwrap_or(Path::new("/run/cordon"));
    cordon_backend_kit::workarea::private_dir_at(at)
        .map_err(|e| failed("acquire", format!("cannot create `{}`: {e}", at.display())))?;
    match std::fs::symlink_metadata(at) {
        Ok(m) if m.is_dir() && m.uid() == 0 => Ok(()),
        Ok(_) => Err(failed(
            "acquire",
            format!(
                "`{}` is not a directory of root's, so the secrets cannot be mounted beneath it\nhelp: remove it (cordon makes it again)",
                at.display()
            ),
        )),
        Err(e) => Err(failed("acquire", format!("`{}`: {e}", at.display()))),
    }
}

/// A fresh volume of `size` bytes for `id`, mounted at a new directory
/// under `parent`: its `work` directory is the work dir and (when `tmp`)
/// its `tmp` directory the private temporary directory, so one bound holds
/// both. Returns the mount point.
pub(crate) fn fresh_volume(
    parent: &Path,
    id: u32,
    size: u64,
    tmp: bool,
) -> Result<PathBuf, BackendError> {
    let at = fresh_dir(parent, "volume", id)?;
    if let Err(e) = volume::mount_volume(&at, parent, size, id) {
        let _ = std::fs::remove_dir(&at);
        return Err(failed("acquire", format!("the work dir's volume: {e}")));
    }
    let inner = |name: &str| {
        let d = at.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&d)
            .and_then(|()| std::os::unix::fs::chown(&d, Some(id), Some(id)))
    };
    let made = inner("work").and_then(|()| if tmp { inner("tmp") } else { Ok(()) });
    if let Err(e) = made {
        let _ = remove_mount(&at);
        return Err(failed(
            "acquire",
            format!("cannot prepare the volume at `{}`: {e}", at.display()),
        ));
    }
    Ok(at)
}

/// Unmounts whatever is mounted at `at` (a volume, or an operator's
/// directory mapped there) and removes the then-empty mount point. Never
/// recurses into a mount: if one is still there, it fails.
pub(crate) fn remove_mount(at: &Path) -> Result<(), String> {
    for _ in 0..8 {
        match volume::is_mount_point(at) {
            Ok(true) => {
                volume::unmount(at).map_err(|e| format!("unmounting `{}`: {e}", at.display()))?;
            }
            Ok(false) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("`{}`: {e}", at.display())),
        }
    }
    if volume::is_mount_point(at).unwrap_or(true) {
        return Err(format!(
            "`{}` is still a mount point; left alone",
            at.display()
        ));
    }
    cordon_backend_kit::dirs::removed(std::fs::remove_dir(at), at)
}

/// An operator's work dir, checked: canonical, a directory of an ordinary
/// owner, on a filesystem no larger than `max_disk`. Then bound through
/// an idmapped mount at a new directory under `parent`, mapping its owner
/// to [`WORK_DIR_ID`] (what the workload runs as): returns the mount point
/// and the directory's owner.
pub(crate) fn given_dir(d: &Path, parent: &Path, max_disk: u64) -> Result<Given, BackendError> {
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
    if meta.uid() == 0 || meta.gid() == 0 {
        return Err(failed(
            "acquire",
            format!(
                "work dir `{dir}` is owned by {uid}:{gid}; the sandbox writes as the directory's owner, and root's files are not a sandbox's to make\nhelp: to let the sandbox work on what is in `{dir}`, use `--workspace {dir}` instead (it sees the files copy-on-write, held to max_disk; they change only when applied); else give a directory an ordinary user owns (`chown USER:GROUP {dir}`), or omit `--work-dir` to get a fresh one",
                dir = real.display(),
                uid = meta.uid(),
                gid = meta.gid(),
            ),
        ));
    }
    let size = volume::filesystem_bytes(&real)
        .map_err(|e| failed("acquire", format!("work dir `{}`: {e}", real.display())))?;
    if size == 0 {
        // ramfs and its kind report no size: nothing bounds them.
        return Err(failed(
            "acquire",
            format!(
                "work dir `{dir}` is on a filesystem that reports no size, so nothing would hold max_disk there\nhelp: put it on a filesystem with a size no larger than max_disk, or omit `--work-dir` to get a fresh one",
                dir = real.display()
            ),
        ));
    }
    if size > max_disk {
        return Err(failed(
            "acquire",
            format!(
                "work dir `{dir}` is on a filesystem of {size} bytes, more than max_disk ({max_disk} bytes), and cordon holds a bound on a directory it did not make only through that directory's own filesystem (it sets no quotas), so nothing would stop the sandbox filling it\nhelp: to let the sandbox work on what is in `{dir}`, use `--workspace {dir}` instead (it sees the files copy-on-write, held to max_disk whatever the filesystem; they change only when applied); else omit `--work-dir` (a fresh work dir is a volume of exactly max_disk), or put the directory on a filesystem of its own no larger than max_disk (e.g. a loop-mounted image)",
                dir = real.display(),
            ),
        ));
    }
    let at = fresh_dir(parent, "mapped", 0)?;
    if let Err(e) = volume::idmapped_bind(&real, &at, meta.uid(), meta.gid(), WORK_DIR_ID) {
        let _ = std::fs::remove_dir(&at);
        return Err(failed(
            "acquire",
            format!("{e}\nhelp: put the work dir on a filesystem that supports idmapped mounts (ext4, xfs, btrfs, tmpfs), or omit `--work-dir` to get a fresh one"),
        ));
    }
    Ok(Given {
        mount: at,
        real,
        owner: (meta.uid(), meta.gid()),
    })
}

/// An operator's work dir, mapped.
pub(crate) struct Given {
    /// Where it is mounted, idmapped: what the sandbox is given.
    pub mount: PathBuf,
    /// The directory itself: where cordon writes files in, as its owner
    /// (the idmapped mount has no id for root).
    pub real: PathBuf,
    /// Its owner's uid and gid.
    pub owner: (u32, u32),
}
