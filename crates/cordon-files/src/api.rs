//! The files API's operations beneath a [`ConfinedDir`]: a listing to a
//! depth with each entry's metadata, a read of a byte range, an append,
//! a removal of a file or a whole tree, and a rename — what an agent host
//! drives a sandbox's files with (issue 32), on the same footing as the
//! confined primitives: every path opened with `openat2` beneath the
//! directory's descriptor and no link followed on it; a walk goes on from
//! the descriptor of the directory it is in, never by path again, so a
//! link or a rename the workload swaps in meanwhile leads nowhere.
//!
//! Links are entries like any other: listed as links (never descended),
//! removed themselves (never what they name), refused as a file to read
//! or append to, and renamed themselves.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::confined::{beneath, classify, found, kind_of, ConfinedDir, ConfinedError};
use cordon_sandbox::FileKind;

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Relative to the confined directory.
    pub path: String,
    pub kind: FileKind,
    /// Bytes (a link's: its target's length).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Seconds since the epoch.
    pub mtime: i64,
}

/// A listing: its entries, in walk order (each directory's sorted by
/// name), and whether `max_entries` cut it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<Entry>,
    pub truncated: bool,
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `rel` itself: `""` (or `.`) is the directory.
fn root_or(rel: &str) -> &str {
    match rel.trim_end_matches('/') {
        "" | "." => "",
        r => r,
    }
}

pub(crate) fn open_dir(at: &ConfinedDir, rel: &str) -> Result<OwnedFd, ConfinedError> {
    let shown = if rel.is_empty() { "." } else { rel };
    if !rel.is_empty() {
        at.check(rel)?;
    }
    rustix::fs::openat2(
        at.fd(),
        shown,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )
    .map_err(|e| dir_error(at, shown, classify(e, shown, "open the directory")))
}

/// A directory that would not open: where `rel` itself is a link (the
/// kernel says "not a directory" for a link opened with `O_NOFOLLOW`),
/// that is the refusal, said so.
fn dir_error(at: &ConfinedDir, rel: &str, e: ConfinedError) -> ConfinedError {
    match e {
        ConfinedError::NotADirectory { .. } => match at.stat(rel) {
            Ok(Some(st)) if st.kind == FileKind::Symlink => ConfinedError::Link {
                path: rel.to_string(),
            },
            _ => e,
        },
        e => e,
    }
}

/// The sorted names in the directory `fd` (`.` and `..` left out).
pub(crate) fn names(fd: &OwnedFd, shown: &str) -> Result<Vec<String>, ConfinedError> {
    let dir = rustix::fs::Dir::read_from(fd).map_err(|e| classify(e, shown, "list"))?;
    let mut out = Vec::new();
    for e in dir {
        let e = e.map_err(|e| classify(e, shown, "list"))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn entry_of(dir: &impl AsFd, name: &str, path: String) -> Result<Option<Entry>, ConfinedError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(Entry {
            path,
            kind: kind_of(st.st_mode),
            size: u64::try_from(st.st_size).unwrap_or(0),
            mode: st.st_mode & 0o7777,
            mtime: st.st_mtime,
        })),
        // Gone between the listing and the stat.
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(classify(e, &path, "stat")),
    }
}

/// Opens the directory `name` in `dir`, itself no link.
pub(crate) fn open_child(dir: &OwnedFd, name: &str, shown: &str) -> Result<OwnedFd, ConfinedError> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| classify(e, shown, "open the directory"))
}

impl ConfinedDir {
    /// Lists the directory `rel` (`""`: this one) and, to `depth` levels
    /// below it (`0`: its entries only), the directories in it; at most
    /// `max_entries` entries, `truncated` set when there were more.
    pub fn list_tree(
        &self,
        rel: &str,
        depth: u32,
        max_entries: usize,
    ) -> Result<Listing, ConfinedError> {
        let rel = root_or(rel);
        let fd = open_dir(self, rel)?;
        let mut out = Listing {
            entries: Vec::new(),
            truncated: false,
        };
        self.walk(&fd, rel, depth, max_entries, &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        fd: &OwnedFd,
        at: &str,
        depth: u32,
        max: usize,
        out: &mut Listing,
    ) -> Result<(), ConfinedError> {
        let shown = if at.is_empty() { "." } else { at };
        for name in names(fd, shown)? {
            if out.entries.len() >= max {
                out.truncated = true;
                return Ok(());
            }
            let path = join(at, &name);
            let Some(e) = entry_of(fd, &name, path.clone())? else {
                continue;
            };
            let descend = e.kind == FileKind::Dir && depth > 0;
            out.entries.push(e);
            if descend {
                match open_child(fd, &name, &path) {
                    Ok(child) => self.walk(&child, &path, depth - 1, max, out)?,
                    // Swapped for a link or removed meanwhile: not followed.
                    Err(ConfinedError::Link { .. } | ConfinedError::NotFound { .. }) => {}
                    Err(ConfinedError::NotADirectory { .. }) => {}
                    Err(e) => return Err(e),
                }
                if out.truncated {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// What is at `rel` (a link itself, never what it names); `None`:
    /// nothing there.
    pub fn info(&self, rel: &str) -> Result<Option<Entry>, ConfinedError> {
        let rel = root_or(rel);
        if rel.is_empty() {
            let st = rustix::fs::fstat(self.fd()).map_err(|e| classify(e, ".", "stat"))?;
            return Ok(Some(Entry {
                path: String::new(),
                kind: kind_of(st.st_mode),
                size: u64::try_from(st.st_size).unwrap_or(0),
                mode: st.st_mode & 0o7777,
                mtime: st.st_mtime,
            }));
        }
        let (parent, leaf) = match self.parent_of(rel) {
            Ok(p) => p,
            Err(ConfinedError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match &parent {
            Some(fd) => entry_of(fd, leaf, rel.to_string()),
            None => entry_of(self.fd(), leaf, rel.to_string()),
        }
    }

    /// Opens the regular file `rel` with `flags` (no link followed, a
    /// FIFO never blocking), checked on its descriptor; with its size.
    fn open_regular(&self, rel: &str, flags: OFlags) -> Result<(OwnedFd, u64), ConfinedError> {
        self.check(rel)?;
        let fd = rustix::fs::openat2(
            self.fd(),
            rel,
            flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        )
        .map_err(|e| classify(e, rel, "open"))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, rel, "stat"))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(ConfinedError::NotRegular {
                path: rel.to_string(),
                found: found(st.st_mode),
            });
        }
        Ok((fd, u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// Reads at most `len` bytes of the regular file `rel` from `offset`;
    /// with the file's size.
    pub fn read_range(
        &self,
        rel: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, u64), ConfinedError> {
        let (fd, size) = self.open_regular(rel, OFlags::RDONLY)?;
        let want = len.min(size.saturating_sub(offset));
        let mut buf = vec![0u8; usize::try_from(want).unwrap_or(0)];
        let mut got = 0usize;
        while got < buf.len() {
            match rustix::io::pread(&fd, &mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(classify(e, rel, "read")),
            }
        }
        buf.truncate(got);
        Ok((buf, size))
    }

    /// Appends `data` to the regular file `rel`, which must exist.
    pub fn append(&self, rel: &str, data: &[u8]) -> Result<(), ConfinedError> {
        let (fd, _) = self.open_regular(rel, OFlags::WRONLY | OFlags::APPEND)?;
        let mut done = 0;
        while done < data.len() {
            match rustix::io::write(&fd, &data[done..]) {
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(classify(e, rel, "write")),
            }
        }
        Ok(())
    }

    /// The directory holding `rel`'s last part, opened beneath (no link
    /// on the way), and that part.
    fn parent_of<'r>(&self, rel: &'r str) -> Result<(Option<OwnedFd>, &'r str), ConfinedError> {
        self.check(rel)?;
        match rel.rsplit_once('/') {
            Some((p, leaf)) => {
                let fd = rustix::fs::openat2(
                    self.fd(),
                    p,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    beneath(),
                )
                .map_err(|e| dir_error(self, p, classify(e, p, "open the directory")))?;
                Ok((Some(fd), leaf))
            }
            None => Ok((None, rel)),
        }
    }

    /// Removes `rel`: a file or a link (itself), or — with `recursive` — a
    /// directory and everything in it, walked from descriptors (a link
    /// inside is removed, never followed). `Ok(false)`: nothing there. The
    /// directory itself (`""`) is never removed.
    pub fn remove(&self, rel: &str, recursive: bool) -> Result<bool, ConfinedError> {
        let rel = root_or(rel);
        if rel.is_empty() {
            return Err(ConfinedError::Io {
                path: ".".into(),
                operation: "remove",
                reason: "the directory itself is not removed; name what is in it".into(),
            });
        }
        let (parent, leaf) = match self.parent_of(rel) {
            Ok(p) => p,
            Err(ConfinedError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let dir: &dyn AsFd = match &parent {
            Some(fd) => fd,
            None => self.fd(),
        };
        let st = match rustix::fs::statat(dir, leaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(classify(e, rel, "stat")),
        };
        if kind_of(st.st_mode) == FileKind::Dir {
            if recursive {
                let child = open_child(&dup(dir, rel)?, leaf, rel)?;
                empty_tree(&child, rel)?;
            }
            rustix::fs::unlinkat(dir, leaf, AtFlags::REMOVEDIR).map_err(|e| match e {
                Errno::NOTEMPTY => ConfinedError::NotEmpty {
                    path: rel.to_string(),
                },
                e => classify(e, rel, "remove"),
            })?;
        } else {
            rustix::fs::unlinkat(dir, leaf, AtFlags::empty())
                .map_err(|e| classify(e, rel, "remove"))?;
        }
        Ok(true)
    }

    /// Renames `from` to `to` (both beneath; no link followed on either
    /// path; a link at `from` is moved itself). Something at `to` is
    /// refused, never replaced; `to`'s directory must exist.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), ConfinedError> {
        let (from, to) = (root_or(from), root_or(to));
        for p in [from, to] {
            if p.is_empty() {
                return Err(ConfinedError::Io {
                    path: ".".into(),
                    operation: "rename",
                    reason: "the directory itself is not renamed".into(),
                });
            }
        }
        let (fp, fl) = self.parent_of(from)?;
        let (tp, tl) = self.parent_of(to)?;
        let fdir: &dyn AsFd = match &fp {
            Some(fd) => fd,
            None => self.fd(),
        };
        let tdir: &dyn AsFd = match &tp {
            Some(fd) => fd,
            None => self.fd(),
        };
        rustix::fs::renameat_with(fdir, fl, tdir, tl, RenameFlags::NOREPLACE).map_err(|e| match e {
            Errno::NOENT => ConfinedError::NotFound {
                path: from.to_string(),
            },
            Errno::EXIST => ConfinedError::Exists {
                path: to.to_string(),
            },
            e => classify(e, from, "rename"),
        })
    }
}

/// A descriptor of `dir` that can be listed from (`O_PATH` ones cannot).
fn dup(dir: &dyn AsFd, shown: &str) -> Result<OwnedFd, ConfinedError> {
    rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| classify(e, shown, "open the directory"))
}

/// Removes everything in the directory `fd`, depth first, each entry by
/// name from its own directory's descriptor.
fn empty_tree(fd: &OwnedFd, shown: &str) -> Result<(), ConfinedError> {
    for name in names(fd, shown)? {
        let path = join(shown, &name);
        let st = match rustix::fs::statat(fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(classify(e, &path, "stat")),
        };
        if kind_of(st.st_mode) == FileKind::Dir {
            let child = open_child(fd, &name, &path)?;
            empty_tree(&child, &path)?;
            rustix::fs::unlinkat(fd, name.as_str(), AtFlags::REMOVEDIR)
                .map_err(|e| classify(e, &path, "remove"))?;
        } else {
            rustix::fs::unlinkat(fd, name.as_str(), AtFlags::empty())
                .map_err(|e| classify(e, &path, "remove"))?;
        }
    }
    Ok(())
}
