//! A sandbox's directory on the host, as every engine backend makes it:
//! `TMPDIR/PREFIX-PID-N…`, root's, named by the process that made it.
//!
//! A recorded residue is data, not an authority: what a keeper's record
//! names is acted on as root only when [`SandboxDirs::vet`] finds it is
//! exactly what this backend makes — a plain path (no link, no `..`),
//! named for the keeper that recorded it, in this cordon's scratch
//! directory, a real directory of root's (or already gone). The three
//! copies of this check had drifted (microvm's skipped the plain-path
//! step); this is the one.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;

use cordon_sandbox::BackendError;

use crate::failed;

/// How one backend names its sandbox directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxDirs {
    /// The backend's name, for messages.
    pub backend: &'static str,
    /// Every directory begins so (`cordon-docker-`, …).
    pub prefix: &'static str,
}

impl SandboxDirs {
    /// The pid of the process that made the sandbox named `name`
    /// (`PREFIX-PID-N…`).
    pub fn maker_of(&self, name: &str) -> Option<u32> {
        cordon_confine::oci::maker_of(self.prefix, name)
    }

    /// A new sandbox directory in `scratch`: `PREFIX-PID-N-STAMP`, root's,
    /// 0700, made new (nothing planted at its path is used).
    pub fn make(&self, scratch: &Path) -> Result<MadeDir, BackendError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let id = format!(
            "{}{}-{}-{stamp}",
            self.prefix,
            std::process::id(),
            crate::NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let scratch = scratch
            .canonicalize()
            .map_err(|e| failed("acquire", format!("`{}`: {e}", scratch.display())))?;
        let dir = scratch.join(&id);
        private_dir(&dir).map_err(|e| failed("acquire", e))?;
        Ok(MadeDir { id, dir, scratch })
    }

    /// Whether `p`'s last component is a name this backend makes.
    pub fn ours(&self, p: &Path) -> bool {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| self.maker_of(n))
            .is_some()
    }

    /// Checks that `dir` (from a record) is a sandbox directory the process
    /// `keeper` made in this cordon's scratch directory (TMPDIR): what a
    /// reclaim may act on as root.
    pub fn vet(&self, dir: &Path, keeper: u32) -> Result<(), String> {
        plain(dir)?;
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if self.maker_of(name) != Some(keeper) {
            return Err(format!(
                "`{}` is not the directory of a {} sandbox the record's keeper ({keeper}) made (`{}{keeper}-…`)",
                dir.display(),
                self.backend,
                self.prefix
            ));
        }
        let scratch = scratch();
        if dir.parent() != Some(scratch.as_path()) {
            return Err(format!(
                "`{}` is not in `{}`, where this cordon makes sandbox directories (TMPDIR); run gc with TMPDIR set to its parent",
                dir.display(),
                scratch.display()
            ));
        }
        match std::fs::symlink_metadata(dir) {
            Ok(m) if !m.is_dir() || m.uid() != 0 => Err(format!(
                "`{}` is not a directory of root's; left alone",
                dir.display()
            )),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("`{}`: {e}", dir.display())),
        }
    }

    /// The directories in the scratch directory whose maker is gone (a
    /// zombie too): root's real directories with this backend's names.
    pub fn orphans(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(scratch()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| self.maker_of(n))
                    .is_some_and(crate::gone)
            })
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == 0))
            .collect()
    }

    /// Reclaims every orphan with `reclaim` (which returns what failed):
    /// what was done, and what failed.
    pub fn sweep(&self, reclaim: impl Fn(&Path) -> Vec<String>) -> (Vec<String>, Vec<String>) {
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for d in self.orphans() {
            let f = reclaim(&d);
            if f.is_empty() {
                done.push(d.display().to_string());
            }
            failures.extend(f);
        }
        (done, failures)
    }

    /// Sweeps the orphans as [`remove_sandbox_dir`] removes one (binds and
    /// volume unmounted first), after a sweep that did `done` and in which
    /// `failures` failed: what the whole sweep did, and what failed.
    pub fn sweep_dirs(
        &self,
        mut done: Vec<String>,
        mut failures: Vec<String>,
    ) -> (Vec<String>, Vec<String>) {
        let (d, f) = self.sweep(|d| remove_sandbox_dir(d).err().into_iter().collect());
        done.extend(d);
        failures.extend(f);
        (done, failures)
    }
}

/// Makes `p` a directory only root can enter (mode 0700); fails if it
/// exists.
pub fn private_dir(p: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(p)
        .map_err(|e| format!("cannot create `{}`: {e}", p.display()))
}

/// Makes `p` a directory only its maker can enter (mode 0700) unless
/// there is something there already (which the caller then checks).
pub fn private_dir_at(p: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// A sandbox directory [`SandboxDirs::make`] made.
#[derive(Debug)]
pub struct MadeDir {
    /// Its name: the sandbox's id.
    pub id: String,
    pub dir: PathBuf,
    /// The scratch directory it is in, canonical.
    pub scratch: PathBuf,
}

/// Where this cordon makes sandbox directories: TMPDIR, canonical.
pub fn scratch() -> PathBuf {
    let scratch = std::env::temp_dir();
    scratch.canonicalize().unwrap_or(scratch)
}

/// A path with nothing to resolve: absolute, no `.`/`..`, its own
/// canonical form when it exists.
pub fn plain(path: &Path) -> Result<(), String> {
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(format!("`{}` is not a plain absolute path", path.display()));
    }
    match path.canonicalize() {
        Ok(real) if real == path => Ok(()),
        Ok(real) => Err(format!(
            "`{}` leads through a link (to `{}`)",
            path.display(),
            real.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("`{}`: {e}", path.display())),
    }
}

/// Unmounts a sandbox directory's binds (`binds/*`) and volume (`volume`)
/// and removes the directory; never removes anything through a mount that
/// is still there (a bind's source is the host's own).
pub fn remove_sandbox_dir(dir: &Path) -> Result<(), String> {
    let binds = dir.join("binds");
    if let Ok(entries) = std::fs::read_dir(&binds) {
        for e in entries.flatten() {
            let p = e.path();
            if cordon_linux::volume::is_mount_point(&p).unwrap_or(true) {
                cordon_linux::volume::unmount(&p)
                    .map_err(|e| format!("unmounting `{}`: {e}", p.display()))?;
            }
            if cordon_linux::volume::is_mount_point(&p).unwrap_or(true) {
                return Err(format!(
                    "`{}` is still a mount point; left alone",
                    p.display()
                ));
            }
            // Never recursive: a bind that is somehow still there fails.
            let removed = if p.is_dir() {
                std::fs::remove_dir(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed.map_err(|e| format!("cannot remove `{}`: {e}; left alone", p.display()))?;
        }
    }
    let volume = dir.join("volume");
    // Whether the volume is mounted; a check that cannot say refuses (a
    // recursive removal through a live mount would reach its contents).
    let mounted = |v: &Path| match cordon_linux::volume::is_mount_point(v) {
        Ok(m) => Ok(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!(
            "cannot tell whether `{}` is a mount point ({e}); left alone",
            v.display()
        )),
    };
    if mounted(&volume)? {
        let _ = cordon_linux::volume::discard(&volume);
        cordon_linux::volume::unmount(&volume)
            .map_err(|e| format!("unmounting `{}`: {e}", volume.display()))?;
    }
    if mounted(&volume)? {
        return Err(format!(
            "`{}` is still a mount point; left alone",
            volume.display()
        ));
    }
    removed(std::fs::remove_dir_all(dir), dir)
}

/// A dispose's end: the sandbox's directory removed last (as
/// [`remove_sandbox_dir`] removes it), after what else the dispose ended
/// with `failures`; every failure reported.
pub fn remove_last(dir: &Path, mut failures: Vec<String>) -> Result<(), BackendError> {
    failures.extend(remove_sandbox_dir(dir).err());
    crate::all_done((), "dispose", failures)
}

/// A removal of `path`'s outcome: what was already gone is removed too.
pub fn removed(outcome: std::io::Result<()>, path: &Path) -> Result<(), String> {
    match outcome {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove `{}`: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const DIRS: SandboxDirs = SandboxDirs {
        backend: "toy",
        prefix: "cordon-toy-",
    };

    #[test]
    fn names_are_read_as_backends_write_them() {
        assert_eq!(DIRS.maker_of("cordon-toy-12-3-456"), Some(12));
        assert_eq!(DIRS.maker_of("cordon-toy-12-3"), Some(12));
        // An exec's container or a pod's, named after its sandbox.
        assert_eq!(DIRS.maker_of("cordon-toy-12-3-456-e7"), Some(12));
        for bad in [
            "cordon-toy-x-3",
            "cordon-other-1-2-3",
            "cordon-toy-12",
            "cordon-toy-",
        ] {
            assert_eq!(DIRS.maker_of(bad), None, "{bad}");
        }
    }

    /// microvm's vet took a recorded path through a link, or with `..`,
    /// as long as its name and parent looked right: every backend's vet
    /// now refuses both.
    #[test]
    fn a_recorded_dir_through_a_link_or_dotdot_is_refused() {
        let keeper = std::process::id();
        let scratch = scratch();
        let name = format!("cordon-toy-{keeper}-0");
        let dotted = scratch.join("x").join("..").join(&name);
        let e = DIRS.vet(&dotted, keeper).unwrap_err();
        assert!(e.contains("plain absolute path"), "{e}");
        // A link in TMPDIR named as a sandbox directory, to a directory
        // elsewhere: never taken for one.
        let elsewhere = tempfile::tempdir().unwrap();
        let link = scratch.join(&name);
        std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
        let e = DIRS.vet(&link, keeper).unwrap_err();
        std::fs::remove_file(&link).unwrap();
        assert!(e.contains("through a link"), "{e}");
        // Another keeper's name, or a directory elsewhere: refused too.
        assert!(DIRS.vet(&scratch.join(&name), keeper + 1).is_err());
        assert!(DIRS
            .vet(&elsewhere.path().join(&name), keeper)
            .unwrap_err()
            .contains("is not in"));
        // What is gone is fine to reclaim (nothing to act on).
        assert!(DIRS.vet(&scratch.join(&name), keeper).is_ok());
    }
}
