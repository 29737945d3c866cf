//! A copy of a directory a workload can write into (a sandbox's work dir)
//! into a fresh directory of the host's (a snapshot's tree), with the
//! content hash of every file.
//!
//! The source is the workload's: everything beneath it is opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from one descriptor
//! (a link is copied as a link, never followed; one swapped in mid-copy
//! makes the copy fail, not escape), files are read from their opened
//! descriptor with `O_NONBLOCK` (a FIFO cannot hang the host) and counted
//! against a byte cap as they are read. The destination is new and root's,
//! made here, and holds only what was copied: directories, regular files
//! (permission bits only: no set-id, no sticky) and links; FIFOs, sockets
//! and devices are left out and named.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use sha2::{Digest, Sha256};

use cordon_sandbox::FileKind;

/// One entry of a copied tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeEntry {
    pub path: String,
    /// `file`, `dir` or `symlink`.
    pub kind: String,
    /// Permission bits.
    pub mode: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A file's SHA-256 (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// What a copy made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    pub entries: Vec<TreeEntry>,
    /// Bytes of file contents copied.
    pub bytes: u64,
    /// What was left out (FIFOs, sockets, devices), by path.
    pub skipped: Vec<String>,
}

/// Why a copy stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("the files come to more than {cap} bytes, past what may be kept ({what})")]
    TooLarge { cap: u64, what: String },
    #[error("more than {cap} entries; a snapshot holds at most that many")]
    TooMany { cap: usize },
    #[error("`{path}`: {reason}")]
    Io { path: String, reason: String },
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn io(path: &str, e: impl std::fmt::Display) -> TreeError {
    TreeError::Io {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
        reason: e.to_string(),
    }
}

struct Copy<'a> {
    src: OwnedFd,
    cap: u64,
    cap_what: &'a str,
    max_entries: usize,
    out: Copied,
}

/// [`copy_tree`], then every entry of `dst` handed to uid and gid
/// `owner` (links themselves, never what they name): a tree made for a
/// sandbox (a snapshot's `/tmp` put back) before anything of it runs.
pub fn copy_tree_owned(
    src: &Path,
    dst: &Path,
    cap: u64,
    cap_what: &str,
    max_entries: usize,
    owner: u32,
) -> Result<Copied, TreeError> {
    let copied = copy_tree(src, dst, cap, cap_what, max_entries)?;
    chown_tree(dst, owner).map_err(|e| io(&dst.display().to_string(), e))?;
    Ok(copied)
}

fn chown_tree(p: &Path, owner: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(p, Some(owner), Some(owner))?;
    if std::fs::symlink_metadata(p)?.is_dir() {
        for e in std::fs::read_dir(p)? {
            chown_tree(&e?.path(), owner)?;
        }
    }
    Ok(())
}

/// Copies the directory at `src` (the host names it; everything beneath is
/// confined) into `dst`, which must not exist (made here, 0700, then given
/// the source's mode bits). At most `cap` bytes of contents (`cap_what`
/// says whose cap in the error) and `max_entries` entries.
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    cap: u64,
    cap_what: &str,
    max_entries: usize,
) -> Result<Copied, TreeError> {
    let shown = src.display().to_string();
    let src_fd = rustix::fs::openat(
        CWD,
        src,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(&shown, e))?;
    rustix::fs::mkdirat(CWD, dst, Mode::from_raw_mode(0o700))
        .map_err(|e| io(&dst.display().to_string(), e))?;
    let dst_fd = rustix::fs::openat(
        CWD,
        dst,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(&dst.display().to_string(), e))?;
    let mut c = Copy {
        src: src_fd,
        cap,
        cap_what,
        max_entries,
        out: Copied::default(),
    };
    c.dir("", &dst_fd)?;
    // One flush of the destination's filesystem, not one per file: the
    // caller publishes the tree (a rename) only after this returns.
    let flush = rustix::fs::openat(
        CWD,
        dst,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(|fd| rustix::fs::syncfs(&fd));
    flush.map_err(|e| io(&dst.display().to_string(), e))?;
    let st = rustix::fs::fstat(&c.src).map_err(|e| io("", e))?;
    rustix::fs::chmodat(
        CWD,
        dst,
        Mode::from_raw_mode(st.st_mode & 0o777),
        AtFlags::empty(),
    )
    .map_err(|e| io(&dst.display().to_string(), e))?;
    Ok(c.out)
}

impl Copy<'_> {
    fn open(&self, rel: &str, flags: OFlags) -> Result<OwnedFd, TreeError> {
        rustix::fs::openat2(
            &self.src,
            if rel.is_empty() { "." } else { rel },
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        )
        .map_err(|e| io(rel, e))
    }

    /// Copies the source directory `rel` into `into` (made, empty).
    fn dir(&mut self, rel: &str, into: &OwnedFd) -> Result<(), TreeError> {
        let listing = self.open(rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut names = Vec::new();
        for e in rustix::fs::Dir::new(listing).map_err(|e| io(rel, e))? {
            let e = e.map_err(|e| io(rel, e))?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            names.push(
                String::from_utf8(n.to_vec())
                    .map_err(|_| io(rel, "a name that is not UTF-8 cannot be kept"))?,
            );
        }
        names.sort();
        for name in names {
            if self.out.entries.len() >= self.max_entries {
                return Err(TreeError::TooMany {
                    cap: self.max_entries,
                });
            }
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let fd = self.open(&path, OFlags::PATH)?;
            let st = rustix::fs::fstat(&fd).map_err(|e| io(&path, e))?;
            let mode = st.st_mode & 0o777;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    rustix::fs::mkdirat(into, name.as_str(), Mode::from_raw_mode(0o700))
                        .map_err(|e| io(&path, e))?;
                    let sub = rustix::fs::openat(
                        into,
                        name.as_str(),
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| io(&path, e))?;
                    self.out.entries.push(entry(&path, FileKind::Dir, mode));
                    self.dir(&path, &sub)?;
                    rustix::fs::chmodat(
                        into,
                        name.as_str(),
                        Mode::from_raw_mode(mode),
                        AtFlags::empty(),
                    )
                    .map_err(|e| io(&path, e))?;
                }
                FileType::RegularFile => {
                    let (size, sha) = self.file(&path, into, &name, mode)?;
                    let mut e = entry(&path, FileKind::File, mode);
                    e.size = Some(size);
                    e.sha256 = Some(sha);
                    self.out.entries.push(e);
                }
                FileType::Symlink => {
                    let (parent, leaf) = match path.rsplit_once('/') {
                        Some((p, l)) => (Some(self.open(p, OFlags::PATH | OFlags::DIRECTORY)?), l),
                        None => (None, path.as_str()),
                    };
                    let target = rustix::fs::readlinkat(
                        parent.as_ref().unwrap_or(&self.src),
                        leaf,
                        Vec::new(),
                    )
                    .map_err(|e| io(&path, e))?;
                    let target = target
                        .to_str()
                        .map_err(|_| io(&path, "a link target that is not UTF-8 cannot be kept"))?
                        .to_string();
                    rustix::fs::symlinkat(target.as_str(), into, name.as_str())
                        .map_err(|e| io(&path, e))?;
                    let mut e = entry(&path, FileKind::Symlink, 0o777);
                    e.target = Some(target);
                    self.out.entries.push(e);
                }
                _ => self.out.skipped.push(path),
            }
        }
        Ok(())
    }

    fn file(
        &mut self,
        rel: &str,
        into: &OwnedFd,
        name: &str,
        mode: u32,
    ) -> Result<(u64, String), TreeError> {
        let src = self.open(rel, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let dst = rustix::fs::openat(
            into,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(rel, e))?;
        let (mut from, mut to) = (std::fs::File::from(src), std::fs::File::from(dst));
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(rel, e)),
            };
            size += n as u64;
            self.out.bytes += n as u64;
            if self.out.bytes > self.cap {
                return Err(TreeError::TooLarge {
                    cap: self.cap,
                    what: self.cap_what.to_string(),
                });
            }
            hash.update(&buf[..n]);
            to.write_all(&buf[..n]).map_err(|e| io(rel, e))?;
        }
        rustix::fs::fchmod(&to, Mode::from_raw_mode(mode)).map_err(|e| io(rel, e))?;
        Ok((size, hex(&hash.finalize())))
    }
}

fn entry(path: &str, kind: FileKind, mode: u32) -> TreeEntry {
    TreeEntry {
        path: path.to_string(),
        kind: match kind {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
        }
        .into(),
        mode,
        size: None,
        sha256: None,
        target: None,
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Removes a tree this module made (`remove_dir_all`, which follows no
/// link); `Ok` when it is not there.
pub fn remove_tree(dst: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dst) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The entries of a tree the host made itself (a backend's copy out of
/// its guest, its saved processes), each file hashed, in the order
/// [`copy_tree`] lists them: directories, files and links. Anything else
/// is an error: the host makes nothing else.
pub fn hash_tree(dir: &Path) -> Result<Copied, TreeError> {
    let mut out = Copied::default();
    hash_into(dir, "", &mut out)?;
    Ok(out)
}

fn hash_into(dir: &Path, rel: &str, out: &mut Copied) -> Result<(), TreeError> {
    let here = dir.join(rel);
    let mut names: Vec<_> = std::fs::read_dir(&here)
        .map_err(|e| io(rel, e))?
        .flatten()
        .collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| io(rel, "a name that is not UTF-8 cannot be kept"))?;
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::symlink_metadata(e.path()).map_err(|e| io(&path, e))?;
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
        let ft = meta.file_type();
        if ft.is_dir() {
            out.entries.push(entry(&path, FileKind::Dir, mode));
            hash_into(dir, &path, out)?;
        } else if ft.is_file() {
            let mut f = std::fs::File::open(e.path()).map_err(|e| io(&path, e))?;
            let mut h = Sha256::new();
            let n = std::io::copy(&mut f, &mut h).map_err(|e| io(&path, e))?;
            out.bytes += n;
            let mut t = entry(&path, FileKind::File, mode);
            t.size = Some(n);
            t.sha256 = Some(hex(&h.finalize()));
            out.entries.push(t);
        } else if ft.is_symlink() {
            let target = std::fs::read_link(e.path()).map_err(|e| io(&path, e))?;
            let mut t = entry(&path, FileKind::Symlink, 0o777);
            t.target = Some(target.to_string_lossy().into_owned());
            out.entries.push(t);
        } else {
            return Err(io(&path, "not a file, a directory or a link"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_tree_is_copied_with_hashes_links_kept_and_the_cap_held() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::write(src.join("d/f"), "abc").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("l")).unwrap();
        let dst = t.path().join("dst");
        let c = copy_tree(&src, &dst, 1 << 20, "test", 100).unwrap();
        let paths: Vec<&str> = c.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["d", "d/f", "l"]);
        assert_eq!(
            c.entries[1].sha256.as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(std::fs::read_to_string(dst.join("d/f")).unwrap(), "abc");
        assert_eq!(
            std::fs::read_link(dst.join("l")).unwrap(),
            Path::new("/etc/passwd")
        );
        assert_eq!(c.bytes, 3);
        // The copy hashed again is what the copy said it made.
        let h = hash_tree(&dst).unwrap();
        assert_eq!((h.entries, h.bytes), (c.entries.clone(), c.bytes));
        let err = copy_tree(&src, &t.path().join("small"), 2, "test", 100).unwrap_err();
        assert!(matches!(err, TreeError::TooLarge { .. }), "{err}");
        let err = copy_tree(&src, &t.path().join("few"), 1 << 20, "test", 2).unwrap_err();
        assert!(matches!(err, TreeError::TooMany { .. }), "{err}");
    }
}
