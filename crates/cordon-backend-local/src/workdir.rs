//! A sandbox's directories: a fresh one made for it, or the operator's.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

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

/// An operator's work dir: canonical, a directory, writable by [`WORK_DIR_ID`].
pub(crate) fn given_dir(d: &Path) -> Result<PathBuf, BackendError> {
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
