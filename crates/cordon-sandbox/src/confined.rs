//! The confinement walk, for every backend that serves files: it opens
//! nothing on the host itself.
//!
//! [`refuse_symlinked_parents`] refuses any symlinked parent of a path, the
//! work dir's own ancestors included, using the caller's unconfined,
//! no-follow stat — a backend without host paths runs it with its own
//! stat. The host-side half (`openat2` beneath a directory descriptor, the
//! host's `lstat`, `HostWorkDir` and `FsSink`) lives in the `cordon-files`
//! crate (`cordon_files::confined`), where backends that serve files from a
//! host directory share it.

use crate::backend::{FileKind, SandboxError};
use crate::outputs::validate_artifact_name;

/// The name a [`FileKind`] is shown with.
pub fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "regular file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Other => "special file (FIFO, device or socket)",
    }
}

/// Whether the walk found every parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parents {
    /// Every parent is a real directory.
    Present,
    /// This parent does not exist, so neither does the path.
    Absent { missing: String },
}

/// The confinement walk for a backend that serves `files_out`: refuses
/// `path` if any of its parents — from `/` down, so the work dir's own
/// ancestors too — is a symbolic link or not a directory.
///
/// `stat` must be **unconfined** (it has to see the ancestors of the work
/// dir) and **no-follow** (a stat that resolves a link describes the target
/// and hides the escape); `Ok(None)` means absent.
/// `cordon_files::confined::host_lstat` is one for a host directory. `path`
/// must be absolute and canonical. The final component is not examined:
/// stat it no-follow yourself and refuse anything but a regular file.
///
/// A check, not a guarantee, against a workload still running: pair it with
/// a confined open (`cordon_files::confined::ConfinedDir`) or a guest that
/// is stopped.
pub fn refuse_symlinked_parents(
    path: &str,
    mut stat: impl FnMut(&str) -> Result<Option<FileKind>, SandboxError>,
) -> Result<Parents, SandboxError> {
    let refuse = |reason: String| SandboxError::PathRefused {
        path: path.to_string(),
        reason,
    };
    let Some(rel) = path.strip_prefix('/') else {
        return Err(refuse("it is not absolute".into()));
    };
    validate_artifact_name(rel).map_err(|e| refuse(e.to_string()))?;
    let mut prefix = String::new();
    let segments: Vec<&str> = rel.split('/').collect();
    for segment in &segments[..segments.len() - 1] {
        prefix.push('/');
        prefix.push_str(segment);
        match stat(&prefix)? {
            None => return Ok(Parents::Absent { missing: prefix }),
            Some(FileKind::Dir) => {}
            Some(FileKind::Symlink) => {
                return Err(refuse(format!(
                    "its parent `{prefix}` is a symbolic link; cordon follows no links on an output's path (point the work dir at its real location)"
                )))
            }
            Some(other) => {
                return Err(refuse(format!(
                    "its parent `{prefix}` is a {}, not a directory",
                    kind_name(other)
                )))
            }
        }
    }
    Ok(Parents::Present)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_refuses_a_linked_ancestor_and_reports_an_absent_one() {
        let stat = |p: &str| -> Result<Option<FileKind>, SandboxError> {
            Ok(match p {
                "/srv" => Some(FileKind::Dir),
                "/srv/work" => Some(FileKind::Symlink),
                "/data" => Some(FileKind::Dir),
                "/data/file" => Some(FileKind::File),
                _ => None,
            })
        };
        let e = refuse_symlinked_parents("/srv/work/out.png", stat).unwrap_err();
        assert!(
            e.to_string().contains("`/srv/work` is a symbolic link"),
            "{e}"
        );
        let e = refuse_symlinked_parents("/data/file/x", stat).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert_eq!(
            refuse_symlinked_parents("/gone/out.png", stat).unwrap(),
            Parents::Absent {
                missing: "/gone".into()
            }
        );
        assert_eq!(
            refuse_symlinked_parents("/data/x", stat).unwrap(),
            Parents::Present
        );
        for bad in ["relative/x", "/a/../b", "/a//b", "/"] {
            assert!(refuse_symlinked_parents(bad, stat).is_err(), "{bad}");
        }
    }
}
