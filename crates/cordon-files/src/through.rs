//! A sandbox's files copied into a host tree, and a host tree copied into
//! a sandbox, through the files API alone ([`FileOp`]): for a backend
//! whose files live where the host cannot open them (the microVM's guest),
//! so its snapshots and restores are made of the same operations its
//! agent already serves, confined there as every other call is.
//!
//! What the sandbox answers is the workload's to shape: every name is
//! checked to be one plain path component before anything is made of it,
//! the destination is a fresh directory of the host's that only this code
//! writes (so no link is ever met there), and the bytes are counted
//! against the caller's room as they arrive.
//!
//! Links are not copied out: the files API lists a link but does not say
//! what it names, so one is left out and named (`skipped`), and a tree
//! holding one is refused on the way in.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use cordon_sandbox::{FileAnswer, FileKind, FileOp, SandboxError, WriteHow};

/// One operation of a sandbox's files API.
pub type Files<'a> = &'a dyn Fn(&FileOp) -> Result<FileAnswer, SandboxError>;

/// The most bytes asked for in one read.
const READ_CHUNK: u64 = 4 << 20;

/// The most bytes sent in one write.
const WRITE_CHUNK: usize = 16 << 20;

/// What a copy out made.
#[derive(Debug, Default)]
pub struct CopiedOut {
    /// Bytes of file contents copied.
    pub bytes: u64,
    /// Entries made (directories and files; every entry listed, a
    /// skipped one too, counts against the caller's `max_entries`).
    pub entries: usize,
    /// What was left out (links, FIFOs, sockets, devices), by path as the
    /// workload names it.
    pub skipped: Vec<String>,
}

/// The sandbox's path for `rel` beneath `root` (`""`: its work dir, whose
/// paths are relative; `/tmp`: absolute).
fn at(root: &str, rel: &str) -> String {
    match (root.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_string(),
        (false, true) => root.to_string(),
        (false, false) => format!("{root}/{rel}"),
    }
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The last component of a listed `path`, checked to be a plain name
/// directly beneath `dir` (as the sandbox names both).
fn name_in<'p>(dir: &str, path: &'p str) -> Result<&'p str, String> {
    let name = if dir.is_empty() {
        path
    } else {
        path.strip_prefix(dir)
            .and_then(|r| r.strip_prefix('/'))
            .unwrap_or("")
    };
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(format!(
            "the sandbox listed `{path}` in `{dir}`, not a name in it; nothing was kept"
        ));
    }
    Ok(name)
}

/// Copies the sandbox's directory `root` (`""`: its work dir; `/tmp`) into
/// `dst`, which must not exist (made here, 0700, then given the source's
/// permission bits), with at most `room` bytes of contents and
/// `max_entries` entries (both lowered by what is copied).
pub fn copy_out(
    files: Files<'_>,
    root: &str,
    dst: &Path,
    room: &mut u64,
    max_entries: &mut usize,
) -> Result<CopiedOut, String> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dst)
        .map_err(|e| format!("`{}`: {e}", dst.display()))?;
    let mut out = CopiedOut::default();
    let mut modes = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let listed = at(root, &rel);
        let listing = match files(&FileOp::List {
            path: listed.clone(),
            depth: 0,
        }) {
            // Removed by the running workload since its parent was
            // listed: it is not there to copy (it is said so).
            Err(SandboxError::NotFound { .. }) if !rel.is_empty() => {
                let host = dst.join(&rel);
                std::fs::remove_dir(&host).map_err(|e| format!("`{}`: {e}", host.display()))?;
                modes.retain(|(h, _)| *h != host);
                out.entries -= 1;
                out.skipped
                    .push(format!("{listed} (removed while it was copied)"));
                continue;
            }
            r => r.map_err(|e| format!("listing `{listed}`: {e}"))?,
        };
        let entries = match listing {
            FileAnswer::Listing {
                truncated: true, ..
            } => {
                return Err(format!(
                    "`{listed}` holds more entries than one listing answers; a snapshot through the files API takes a directory of at most {} entries",
                    cordon_sandbox::files::MAX_LIST_ENTRIES
                ))
            }
            FileAnswer::Listing { entries, .. } => entries,
            other => return Err(format!("listing `{listed}` was answered {other:?}")),
        };
        for e in entries {
            let name = name_in(&listed, &e.path)?;
            let rel = join(&rel, name);
            let host = dst.join(&rel);
            // Every entry counts, a skipped one too (the list of what was
            // left out is held to the same bound).
            if *max_entries == 0 {
                return Err(
                    "more entries than a snapshot holds; remove some, or take fewer".into(),
                );
            }
            *max_entries -= 1;
            if matches!(e.kind, FileKind::Dir | FileKind::File) {
                out.entries += 1;
            }
            match e.kind {
                FileKind::Dir => {
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&host)
                        .map_err(|err| format!("`{}`: {err}", host.display()))?;
                    modes.push((host, e.mode & 0o777));
                    stack.push(rel);
                }
                FileKind::File => {
                    match copy_file_out(files, &e.path, &host, e.mode & 0o777, room)? {
                        Some(n) => out.bytes += n,
                        None => {
                            out.entries -= 1;
                            out.skipped
                                .push(format!("{} (removed while it was copied)", e.path));
                        }
                    }
                }
                FileKind::Symlink | FileKind::Other => out.skipped.push(e.path),
            }
        }
    }
    // Modes last, deepest first: a directory without its owner's write
    // bit is still filled.
    for (host, mode) in modes.into_iter().rev() {
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("`{}`: {e}", host.display()))?;
    }
    Ok(out)
}

fn copy_file_out(
    files: Files<'_>,
    path: &str,
    host: &Path,
    mode: u32,
    room: &mut u64,
) -> Result<Option<u64>, String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(host)
        .map_err(|e| format!("`{}`: {e}", host.display()))?;
    let mut offset = 0u64;
    let mut size = None;
    loop {
        let read = files(&FileOp::Read {
            path: path.to_string(),
            offset,
            len: READ_CHUNK,
        });
        // Listed, then removed or renamed away by the running workload
        // before its first read: gone, not copied (a file removed after
        // its reading began is taken as far as it was read).
        if offset == 0 && matches!(read, Err(SandboxError::NotFound { .. })) {
            drop(f);
            std::fs::remove_file(host).map_err(|e| format!("`{}`: {e}", host.display()))?;
            return Ok(None);
        }
        let (data, now) = match read.map_err(|e| format!("reading `{path}`: {e}"))? {
            FileAnswer::Read { data, size } => (data, size),
            other => return Err(format!("reading `{path}` was answered {other:?}")),
        };
        // The size first seen bounds the copy: a file the workload grows
        // meanwhile is taken as it was when the copy began.
        let size = *size.get_or_insert(now);
        let take = data
            .len()
            .min(usize::try_from(size - offset.min(size)).unwrap_or(usize::MAX));
        if take == 0 {
            break;
        }
        let n = take as u64;
        if n > *room {
            return Err(format!(
                "the files come to more than the room left ({} bytes more were wanted at `{path}`)",
                n - *room
            ));
        }
        *room -= n;
        f.write_all(&data[..take])
            .map_err(|e| format!("`{}`: {e}", host.display()))?;
        offset += n;
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("`{}`: {e}", host.display()))?;
    Ok(Some(offset))
}

/// Copies the host tree `src` (a snapshot's, the host's own) into the
/// sandbox's directory `root` (`""`: its work dir; `/tmp`): directories
/// made, files written new with their permission bits. A link, FIFO,
/// socket or device in the tree is refused: the files API makes none.
/// Directories keep the mode the sandbox gives a new one.
pub fn copy_in(files: Files<'_>, src: &Path, root: &str) -> Result<u64, String> {
    let mut bytes = 0u64;
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let here = src.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&here)
            .map_err(|e| format!("`{}`: {e}", here.display()))?
            .flatten()
            .collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = e
                .file_name()
                .into_string()
                .map_err(|n| format!("`{}`: a name that is not UTF-8", n.to_string_lossy()))?;
            let rel = join(&rel, &name);
            let path = at(root, &rel);
            let host = src.join(&rel);
            let meta = std::fs::symlink_metadata(&host)
                .map_err(|e| format!("`{}`: {e}", host.display()))?;
            if meta.is_dir() {
                files(&FileOp::Mkdir { path: path.clone() })
                    .map_err(|e| format!("making `{path}`: {e}"))?;
                stack.push(rel);
            } else if meta.is_file() {
                bytes += copy_file_in(files, &host, &path, meta.permissions().mode() & 0o777)?;
            } else {
                return Err(format!(
                    "`{path}` in the snapshot is not a file or a directory (a link, say), which this backend cannot make through its files API; restore it at the backend that took it"
                ));
            }
        }
    }
    Ok(bytes)
}

fn copy_file_in(files: Files<'_>, host: &Path, path: &str, mode: u32) -> Result<u64, String> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(host)
        .map_err(|e| format!("`{}`: {e}", host.display()))?;
    let mut sent = 0u64;
    let mut first = true;
    loop {
        let mut chunk = Vec::new();
        (&mut f)
            .take(WRITE_CHUNK as u64)
            .read_to_end(&mut chunk)
            .map_err(|e| format!("`{}`: {e}", host.display()))?;
        if chunk.is_empty() && !first {
            return Ok(sent);
        }
        let n = chunk.len();
        files(&FileOp::Write {
            path: path.to_string(),
            data: chunk,
            mode,
            how: if first {
                WriteHow::Create
            } else {
                WriteHow::Append
            },
        })
        .map_err(|e| format!("writing `{path}`: {e}"))?;
        sent += n as u64;
        first = false;
        if n < WRITE_CHUNK {
            return Ok(sent);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::host_dir::HostWorkDir;

    fn served(dir: &Path) -> impl Fn(&FileOp) -> Result<FileAnswer, SandboxError> {
        let w = HostWorkDir::new(dir, "/work").unwrap();
        move |op| w.files(op)
    }

    /// Out and back in: files with their bytes and modes, directories
    /// nested; a link is named, not copied; the room bounds the bytes.
    #[test]
    fn a_tree_goes_out_and_comes_back_in() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("d/e")).unwrap();
        std::fs::write(src.join("a"), b"alpha").unwrap();
        std::fs::write(src.join("d/e/b"), vec![7u8; 9 << 20]).unwrap();
        std::fs::set_permissions(src.join("a"), std::fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("d/link")).unwrap();
        let files = served(&src);
        let (mut room, mut left) = (u64::MAX, 100);
        let out = copy_out(&files, "", &t.path().join("out"), &mut room, &mut left).unwrap();
        assert_eq!(out.bytes, 5 + (9 << 20));
        assert_eq!(out.skipped, vec!["d/link".to_string()]);
        assert_eq!(out.entries, 4);
        assert_eq!(std::fs::read(t.path().join("out/a")).unwrap(), b"alpha");
        let m = std::fs::metadata(t.path().join("out/a")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o751);
        assert!(std::fs::symlink_metadata(t.path().join("out/d/link")).is_err());

        let back = t.path().join("back");
        std::fs::create_dir(&back).unwrap();
        let n = copy_in(&served(&back), &t.path().join("out"), "").unwrap();
        assert_eq!(n, 5 + (9 << 20));
        assert_eq!(
            std::fs::read(back.join("d/e/b")).unwrap(),
            vec![7u8; 9 << 20]
        );
        let m = std::fs::metadata(back.join("a")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o751);

        let (mut room, mut left) = (1000, 100);
        let e = copy_out(&files, "", &t.path().join("small"), &mut room, &mut left).unwrap_err();
        assert!(e.contains("more than the room left"), "{e}");
        let (mut room, mut left) = (u64::MAX, 4);
        let e = copy_out(&files, "", &t.path().join("few"), &mut room, &mut left).unwrap_err();
        assert!(e.contains("more entries"), "{e}");
    }

    /// A listing whose names are not plain names beneath the directory
    /// listed (what a compromised guest could answer) is refused before
    /// anything is made of it.
    #[test]
    fn a_name_that_climbs_out_is_refused() {
        let t = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/../../x", "", "..", "/etc/x", "sub/x"] {
            let lying = |op: &FileOp| match op {
                FileOp::List { .. } => Ok(FileAnswer::Listing {
                    entries: vec![cordon_sandbox::FileInfo {
                        path: bad.to_string(),
                        kind: FileKind::File,
                        size: 1,
                        mode: 0o644,
                        mtime: 0,
                    }],
                    truncated: false,
                }),
                _ => Ok(FileAnswer::Read {
                    data: b"x".to_vec(),
                    size: 1,
                }),
            };
            let dst = t.path().join(format!("d{}", bad.len()));
            let _ = std::fs::remove_dir_all(&dst);
            let (mut room, mut left) = (u64::MAX, 10);
            let e = copy_out(&lying, "", &dst, &mut room, &mut left).unwrap_err();
            assert!(e.contains("not a name in it"), "{bad}: {e}");
            assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 0, "{bad}");
        }
    }

    /// A file or directory the running workload removes between its
    /// listing and its copy (a rename's old name) is left out and named,
    /// not a failed snapshot; the rest is copied.
    #[test]
    fn what_goes_away_while_it_is_copied_is_left_out_and_named() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("gone-dir")).unwrap();
        std::fs::write(src.join("count.tmp"), b"41").unwrap();
        std::fs::write(src.join("kept"), b"k").unwrap();
        let real = served(&src);
        let racing = |op: &FileOp| {
            let answer = real(op);
            // The workload moves on right after the root was listed.
            if matches!(op, FileOp::List { path, .. } if path.is_empty()) {
                let _ = std::fs::rename(src.join("count.tmp"), src.join("count"));
                let _ = std::fs::remove_dir(src.join("gone-dir"));
            }
            answer
        };
        let (mut room, mut left) = (u64::MAX, 100);
        let out = copy_out(&racing, "", &t.path().join("out"), &mut room, &mut left).unwrap();
        let mut skipped = out.skipped.clone();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                "count.tmp (removed while it was copied)",
                "gone-dir (removed while it was copied)"
            ]
        );
        assert_eq!(std::fs::read(t.path().join("out/kept")).unwrap(), b"k");
        assert!(!t.path().join("out/count.tmp").exists());
        assert!(!t.path().join("out/gone-dir").exists());
        assert_eq!((out.bytes, out.entries), (1, 1));
    }

    /// A tree holding a link is refused on the way in, naming it.
    #[test]
    fn a_link_in_the_tree_is_refused_on_the_way_in() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::os::unix::fs::symlink("x", src.join("l")).unwrap();
        let back = t.path().join("back");
        std::fs::create_dir(&back).unwrap();
        let e = copy_in(&served(&back), &src, "").unwrap_err();
        assert!(
            e.contains("`l`") && e.contains("not a file or a directory"),
            "{e}"
        );
    }
}
