//! Confined file primitives: every host-side read out of, or write into, a
//! directory a workload can touch goes through these.
//!
//! A workload can plant a link (`ln -s /root/.ssh work/x`) exactly where the
//! host is about to read or write as root, and it can swap one in between
//! any check and any use. So nothing here checks a path and then uses it:
//!
//! - [`ConfinedDir`] holds a descriptor of a directory. Everything beneath
//!   it is opened with `openat2` and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
//!   from that descriptor, so no link on the path and no `..` can lead out,
//!   whatever is swapped in meanwhile.
//! - A read ([`ConfinedDir::read_capped`]) opens with `O_NOFOLLOW |
//!   O_NONBLOCK | O_CLOEXEC`, takes the size from `fstat` on the opened
//!   descriptor, refuses anything but a regular file (a FIFO cannot hang the
//!   host), and reads at most the cap plus one byte.
//! - A write ([`ConfinedDir::write_file`]) creates parents one at a time
//!   (`mkdirat` beneath the current descriptor, then reopen with `openat2`),
//!   creates a temporary file with `O_CREAT | O_EXCL` and renames it into
//!   place with `renameat` within the same directory descriptor. A link
//!   planted at the destination is replaced (or, without replace, refused),
//!   never followed.
//! - Where the kernel lacks `openat2` (`ENOSYS`, Linux before 5.6), every
//!   call is refused with [`ConfinedError::Unavailable`]: there is no
//!   fallback to a resolve-then-open check.
//!
//! [`cordon_sandbox::confined::refuse_symlinked_parents`] is the other
//! half, for backends that stat through their own means: the walk that
//! refuses any symlinked parent of a path, the work dir's own ancestors
//! included, using the caller's unconfined, no-follow stat. It opens
//! nothing on the host, so it stays in the protocol crate; [`host_lstat`]
//! is the stat it takes for a host directory.

use std::path::Path;

use cordon_sandbox::{ArtifactNameError, FileKind, FileRead, FileStat, SandboxError};

/// A confined operation that is refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfinedError {
    #[error("`{path}`: the kernel has no `openat2` ({reason}); cordon needs Linux 5.6 or later to confine file access and does not fall back to a racy check")]
    Unavailable { path: String, reason: String },
    #[error("`{path}` has a symbolic link on its path; cordon follows no links beneath a confined directory")]
    Link { path: String },
    #[error("`{path}` resolves outside its directory; cordon reads and writes only beneath it")]
    Escapes { path: String },
    #[error("`{path}` is a {found}, not a regular file")]
    NotRegular { path: String, found: &'static str },
    #[error("a parent of `{path}` is not a directory")]
    NotADirectory { path: String },
    #[error("`{path}` does not exist")]
    NotFound { path: String },
    #[error("something already exists at `{path}`; land under another name, or remove it first")]
    Exists { path: String },
    #[error("`{path}` is a directory that is not empty; remove it recursively")]
    NotEmpty { path: String },
    #[error("`{path}` is refused: {source}")]
    Name {
        path: String,
        source: ArtifactNameError,
    },
    #[error("cannot {operation} `{path}`: {reason}")]
    Io {
        path: String,
        operation: &'static str,
        reason: String,
    },
}

impl From<ConfinedError> for SandboxError {
    fn from(e: ConfinedError) -> SandboxError {
        match e {
            ConfinedError::NotFound { path } => SandboxError::NotFound { path },
            ConfinedError::NotRegular { path, found } => SandboxError::NotRegularFile {
                path,
                found: found.to_string(),
            },
            ConfinedError::Unavailable { path, reason } => {
                SandboxError::ConfinementUnavailable { path, reason }
            }
            ConfinedError::Link { ref path }
            | ConfinedError::Escapes { ref path }
            | ConfinedError::NotADirectory { ref path }
            | ConfinedError::Exists { ref path }
            | ConfinedError::NotEmpty { ref path }
            | ConfinedError::Name { ref path, .. } => SandboxError::PathRefused {
                path: path.clone(),
                reason: e.to_string(),
            },
            ConfinedError::Io {
                operation, reason, ..
            } => SandboxError::Failed { operation, reason },
        }
    }
}

/// An unconfined, no-follow stat of a host path (`lstat`), for
/// [`cordon_sandbox::confined::refuse_symlinked_parents`].
pub fn host_lstat(path: &str) -> Result<Option<FileKind>, SandboxError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            Ok(Some(if t.is_symlink() {
                FileKind::Symlink
            } else if t.is_dir() {
                FileKind::Dir
            } else if t.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SandboxError::Failed {
            operation: "lstat",
            reason: format!("`{path}`: {e}"),
        }),
    }
}

/// A step of a confined write, for a test that plants a link mid-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// The parent directory is open; nothing is created in it yet.
    ParentOpen,
    /// The temporary file is written; it is not renamed into place yet.
    TempWritten,
}

/// How a confined write treats something already at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse ([`ConfinedError::Exists`]); the default for landing.
    Refuse,
    /// Replace it atomically. A link there is replaced, not followed; a
    /// directory there is refused.
    Replace,
}

#[cfg(target_os = "linux")]
pub use linux::ConfinedDir;
#[cfg(target_os = "linux")]
pub(crate) use linux::{beneath, classify, found, kind_of};

#[cfg(target_os = "linux")]
mod linux {
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};

    use rustix::fs::{FileType, Mode, OFlags, RenameFlags, ResolveFlags, CWD};
    use rustix::io::Errno;

    use super::{ConfinedError, Existing, WriteStep};
    use cordon_sandbox::{validate_artifact_name, FileKind, FileRead, FileStat};

    /// Beneath the directory descriptor, and no link anywhere on the path.
    pub(crate) fn beneath() -> ResolveFlags {
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
    }

    /// Maps an errno from a confined call to what it means.
    pub(crate) fn classify(errno: Errno, path: &str, operation: &'static str) -> ConfinedError {
        let path = path.to_string();
        match errno {
            Errno::NOSYS => ConfinedError::Unavailable {
                path,
                reason: errno.to_string(),
            },
            Errno::LOOP => ConfinedError::Link { path },
            Errno::XDEV => ConfinedError::Escapes { path },
            Errno::NOENT => ConfinedError::NotFound { path },
            Errno::NOTDIR => ConfinedError::NotADirectory { path },
            Errno::EXIST => ConfinedError::Exists { path },
            Errno::ISDIR => ConfinedError::NotRegular {
                path,
                found: "directory",
            },
            other => ConfinedError::Io {
                path,
                operation,
                reason: other.to_string(),
            },
        }
    }

    pub(crate) fn kind_of(mode: u32) -> FileKind {
        match FileType::from_raw_mode(mode) {
            FileType::RegularFile => FileKind::File,
            FileType::Directory => FileKind::Dir,
            FileType::Symlink => FileKind::Symlink,
            _ => FileKind::Other,
        }
    }

    pub(crate) fn found(mode: u32) -> &'static str {
        match FileType::from_raw_mode(mode) {
            FileType::RegularFile => "regular file",
            FileType::Directory => "directory",
            FileType::Symlink => "symbolic link",
            FileType::Fifo => "FIFO",
            FileType::CharacterDevice => "character device",
            FileType::BlockDevice => "block device",
            FileType::Socket => "socket",
            FileType::Unknown => "file of unknown type",
        }
    }

    fn size_of(st: &rustix::fs::Stat) -> u64 {
        u64::try_from(st.st_size).unwrap_or(0)
    }

    static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

    /// An open directory everything confined happens beneath.
    #[derive(Debug)]
    pub struct ConfinedDir {
        fd: OwnedFd,
        shown: String,
        /// Directories and files this handle creates are handed to this
        /// uid/gid through their descriptors (never by path).
        owner: Option<(u32, u32)>,
    }

    impl ConfinedDir {
        /// Opens a directory the host names, following links in `path`
        /// itself (the host chose it); everything *beneath* it is confined.
        /// The descriptor is kept, so a later swap of `path` changes nothing.
        pub fn open(path: &Path) -> Result<ConfinedDir, ConfinedError> {
            let shown = path.display().to_string();
            let fd = rustix::fs::openat(
                CWD,
                path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| classify(e, &shown, "open the directory"))?;
            Ok(ConfinedDir {
                fd,
                shown,
                owner: None,
            })
        }

        /// Opens an absolute directory with no link anywhere on its path —
        /// its ancestors included — in one `openat2` call. For a work dir a
        /// workload can write into.
        pub fn open_no_links(path: &Path) -> Result<ConfinedDir, ConfinedError> {
            let shown = path.display().to_string();
            if !path.is_absolute() {
                return Err(ConfinedError::Io {
                    path: shown,
                    operation: "open the directory",
                    reason: "the path is not absolute".into(),
                });
            }
            let fd = rustix::fs::openat2(
                CWD,
                path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(|e| classify(e, &shown, "open the directory"))?;
            Ok(ConfinedDir {
                fd,
                shown,
                owner: None,
            })
        }

        /// A directory already open (`fd`, with `O_PATH` or not), shown as
        /// `shown` in errors: a place with no path cordon can walk, such as
        /// a sandbox's own `/tmp` held open in its mount namespace. Its
        /// own descriptor, duplicated.
        pub fn pinned(fd: &OwnedFd, shown: &str) -> Result<ConfinedDir, ConfinedError> {
            let fd = fd.try_clone().map_err(|e| ConfinedError::Io {
                path: shown.to_string(),
                operation: "open the directory",
                reason: e.to_string(),
            })?;
            Ok(ConfinedDir {
                fd,
                shown: shown.to_string(),
                owner: None,
            })
        }

        /// Makes a new directory `name` in the host's directory `parent`
        /// (reached as [`ConfinedDir::open`] reaches it) and opens it: see
        /// [`ConfinedDir::make_private`].
        pub fn create_private(parent: &Path, name: &str) -> Result<ConfinedDir, ConfinedError> {
            ConfinedDir::open(parent)?.make_private(name)
        }

        /// Makes a new directory `name` (one segment) beneath this one,
        /// mode 0700, and opens it with no link followed. Made, never
        /// adopted: anything already at `name` — a directory someone else
        /// planted there included — is refused ([`ConfinedError::Exists`]).
        /// The opened directory is checked through its descriptor to be a
        /// directory owned by this process's user that lets no group or
        /// other in (as cordon's state directory is).
        pub fn make_private(&self, name: &str) -> Result<ConfinedDir, ConfinedError> {
            self.check(name)?;
            if name.contains('/') {
                return Err(ConfinedError::Io {
                    path: name.to_string(),
                    operation: "create the directory",
                    reason: "a private directory is made one level down".into(),
                });
            }
            rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700))
                .map_err(|e| classify(e, name, "create the directory"))?;
            let fd = rustix::fs::openat2(
                &self.fd,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            )
            .map_err(|e| classify(e, name, "open the directory"))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, name, "stat"))?;
            let uid = rustix::process::geteuid().as_raw();
            let unsafe_dir = |reason: String| ConfinedError::Io {
                path: format!("{}/{name}", self.shown),
                operation: "hold the directory",
                reason,
            };
            if kind_of(st.st_mode) != FileKind::Dir {
                return Err(unsafe_dir(format!("it is a {}", found(st.st_mode))));
            }
            if st.st_uid != uid {
                return Err(unsafe_dir(format!(
                    "it is owned by uid {}, not {uid}",
                    st.st_uid
                )));
            }
            if st.st_mode & 0o077 != 0 {
                return Err(unsafe_dir(format!(
                    "its mode {:o} lets group or others in",
                    st.st_mode & 0o7777
                )));
            }
            Ok(ConfinedDir {
                fd,
                shown: format!("{}/{name}", self.shown),
                owner: None,
            })
        }

        /// Removes the file (or link: the link itself) at `rel`, with no
        /// link followed on its parents; `Ok(false)` when nothing is there.
        pub fn remove_file(&self, rel: &str) -> Result<bool, ConfinedError> {
            self.check(rel)?;
            let parent;
            let (dir, leaf) = match rel.rsplit_once('/') {
                Some((p, l)) => {
                    parent = rustix::fs::openat2(
                        &self.fd,
                        p,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                        beneath(),
                    );
                    match &parent {
                        Ok(fd) => (fd, l),
                        Err(Errno::NOENT) => return Ok(false),
                        Err(e) => return Err(classify(*e, rel, "open the directory")),
                    }
                }
                None => (&self.fd, rel),
            };
            match rustix::fs::unlinkat(dir, leaf, rustix::fs::AtFlags::empty()) {
                Ok(()) => Ok(true),
                Err(Errno::NOENT) => Ok(false),
                Err(e) => Err(classify(e, rel, "remove")),
            }
        }

        /// How the directory is shown in errors.
        /// What this handle creates from now on is handed to `uid`/`gid`
        /// through the new file's or directory's own descriptor.
        pub fn owned_by(mut self, uid: u32, gid: u32) -> ConfinedDir {
            self.owner = Some((uid, gid));
            self
        }

        pub fn shown(&self) -> &str {
            &self.shown
        }

        /// The directory's descriptor (for the files API, [`crate::api`]).
        pub(crate) fn fd(&self) -> &OwnedFd {
            &self.fd
        }

        pub(crate) fn check(&self, rel: &str) -> Result<(), ConfinedError> {
            validate_artifact_name(rel).map_err(|source| ConfinedError::Name {
                path: rel.to_string(),
                source,
            })
        }

        /// Stats `rel` without following any link (a link at `rel` is
        /// reported as one; a link on its parents is refused); `Ok(None)`
        /// when it or a parent is absent.
        pub fn stat(&self, rel: &str) -> Result<Option<FileStat>, ConfinedError> {
            self.check(rel)?;
            let fd = match rustix::fs::openat2(
                &self.fd,
                rel,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(classify(e, rel, "stat")),
            };
            let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, rel, "stat"))?;
            Ok(Some(FileStat {
                kind: kind_of(st.st_mode),
                size: Some(size_of(&st)),
                mode: st.st_mode & 0o7777,
            }))
        }

        /// Lists the directory at `rel` (`""`: this directory) without
        /// following any link: at most `max_entries + 1` entries (`.` and
        /// `..` left out), so a caller sees a directory larger than its cap.
        /// A link is listed as one; the kind comes from the entry, or from a
        /// no-follow `fstatat` beneath the listed directory when the
        /// filesystem does not say.
        pub fn list(
            &self,
            rel: &str,
            max_entries: usize,
        ) -> Result<Vec<cordon_sandbox::DirEntry>, ConfinedError> {
            let shown = if rel.is_empty() { "." } else { rel };
            if !rel.is_empty() {
                self.check(rel)?;
            }
            let fd = rustix::fs::openat2(
                &self.fd,
                shown,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            )
            .map_err(|e| classify(e, shown, "open the directory"))?;
            let io = |e: Errno| classify(e, shown, "list");
            let stat_fd = fd.try_clone().map_err(|e| ConfinedError::Io {
                path: shown.to_string(),
                operation: "list",
                reason: e.to_string(),
            })?;
            let mut out = Vec::new();
            for entry in rustix::fs::Dir::new(fd).map_err(io)? {
                let entry = entry.map_err(io)?;
                let name = entry.file_name();
                if name.to_bytes() == b"." || name.to_bytes() == b".." {
                    continue;
                }
                let kind = match entry.file_type() {
                    FileType::Unknown => {
                        rustix::fs::statat(&stat_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                            .map(|st| kind_of(st.st_mode))
                            .map_err(io)?
                    }
                    t => kind_of(t.as_raw_mode()),
                };
                out.push(cordon_sandbox::DirEntry {
                    name: name.to_string_lossy().into_owned(),
                    kind,
                });
                if out.len() > max_entries {
                    break;
                }
            }
            Ok(out)
        }

        /// Reads the regular file at `rel`, bounded: the size is taken from
        /// `fstat` on the opened descriptor, and at most `max_bytes + 1`
        /// bytes are read (none when the opened file is already larger).
        pub fn read_capped(&self, rel: &str, max_bytes: u64) -> Result<FileRead, ConfinedError> {
            self.check(rel)?;
            let fd = rustix::fs::openat2(
                &self.fd,
                rel,
                OFlags::RDONLY
                    | OFlags::NOFOLLOW
                    | OFlags::NONBLOCK
                    | OFlags::NOCTTY
                    | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            )
            .map_err(|e| classify(e, rel, "open"))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, rel, "stat"))?;
            if kind_of(st.st_mode) != FileKind::File {
                return Err(ConfinedError::NotRegular {
                    path: rel.to_string(),
                    found: found(st.st_mode),
                });
            }
            let size = size_of(&st);
            if size > max_bytes {
                return Ok(FileRead {
                    bytes: Vec::new(),
                    size,
                });
            }
            let limit = max_bytes.saturating_add(1);
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            std::fs::File::from(fd)
                .take(limit)
                .read_to_end(&mut bytes)
                .map_err(|e| ConfinedError::Io {
                    path: rel.to_string(),
                    operation: "read",
                    reason: e.to_string(),
                })?;
            Ok(FileRead { bytes, size })
        }

        /// Opens (creating when absent) each directory of `rel_dir` beneath
        /// this one, one segment at a time: `mkdirat` beneath the current
        /// descriptor, then reopen it with `openat2`. A link in the way is
        /// refused, whenever it was planted.
        pub fn create_dirs(&self, rel_dir: &str) -> Result<ConfinedDir, ConfinedError> {
            self.check(rel_dir)?;
            let mut current: Option<OwnedFd> = None;
            let mut shown = self.shown.clone();
            for segment in rel_dir.split('/') {
                let dir = current.as_ref().unwrap_or(&self.fd);
                let created = match rustix::fs::mkdirat(dir, segment, Mode::from_raw_mode(0o755)) {
                    Ok(()) => true,
                    Err(Errno::EXIST) => false,
                    Err(e) => return Err(classify(e, rel_dir, "create the directory")),
                };
                // Without O_DIRECTORY, a link planted here opens as itself
                // (O_PATH | O_NOFOLLOW) and is named for what it is.
                let fd = rustix::fs::openat2(
                    dir,
                    segment,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    beneath(),
                )
                .map_err(|e| classify(e, rel_dir, "open the directory"))?;
                let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, rel_dir, "stat"))?;
                match kind_of(st.st_mode) {
                    FileKind::Dir => {
                        if let (true, Some((uid, gid))) = (created, self.owner) {
                            // Through the descriptor just checked to be a
                            // directory: nothing swapped in is chowned.
                            rustix::fs::chownat(
                                &fd,
                                "",
                                Some(rustix::fs::Uid::from_raw(uid)),
                                Some(rustix::fs::Gid::from_raw(gid)),
                                rustix::fs::AtFlags::EMPTY_PATH,
                            )
                            .map_err(|e| classify(e, rel_dir, "hand over the directory"))?;
                        }
                    }
                    FileKind::Symlink => {
                        return Err(ConfinedError::Link {
                            path: rel_dir.to_string(),
                        })
                    }
                    _ => {
                        return Err(ConfinedError::NotADirectory {
                            path: rel_dir.to_string(),
                        })
                    }
                }
                shown.push('/');
                shown.push_str(segment);
                current = Some(fd);
            }
            match current {
                Some(fd) => Ok(ConfinedDir {
                    fd,
                    shown,
                    owner: self.owner,
                }),
                None => Err(ConfinedError::Io {
                    path: rel_dir.to_string(),
                    operation: "create the directory",
                    reason: "no segment".into(),
                }),
            }
        }

        /// Writes `contents` to `rel` with exactly `mode`: parents by
        /// [`ConfinedDir::create_dirs`], a temporary file created with
        /// `O_CREAT | O_EXCL` beside the destination, renamed into place
        /// with `renameat` beneath the same descriptor. `hook` runs at each
        /// [`WriteStep`] (tests plant links there).
        pub fn write_file(
            &self,
            rel: &str,
            contents: &[u8],
            mode: u32,
            existing: Existing,
            hook: Option<&(dyn Fn(WriteStep) + Send + Sync)>,
        ) -> Result<(), ConfinedError> {
            self.check(rel)?;
            let (parent, leaf) = match rel.rsplit_once('/') {
                Some((p, l)) => (Some(self.create_dirs(p)?), l),
                None => (None, rel),
            };
            let dir = parent.as_ref().unwrap_or(self);
            if let Some(h) = hook {
                h(WriteStep::ParentOpen);
            }
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let temp = format!(".cordon-{}-{n}.tmp", std::process::id());
            let fd = rustix::fs::openat2(
                &dir.fd,
                temp.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::NOCTTY
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
                beneath(),
            )
            .map_err(|e| classify(e, rel, "create"))?;
            let remove_temp = || {
                let _ = rustix::fs::unlinkat(&dir.fd, temp.as_str(), rustix::fs::AtFlags::empty());
            };
            let written = (|| {
                if let Some((uid, gid)) = self.owner.or(dir.owner) {
                    rustix::fs::fchown(
                        &fd,
                        Some(rustix::fs::Uid::from_raw(uid)),
                        Some(rustix::fs::Gid::from_raw(gid)),
                    )
                    .map_err(|e| classify(e, rel, "hand over"))?;
                }
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777))
                    .map_err(|e| classify(e, rel, "set the mode of"))?;
                let mut file = std::fs::File::from(fd);
                std::io::Write::write_all(&mut file, contents).map_err(|e| ConfinedError::Io {
                    path: rel.to_string(),
                    operation: "write",
                    reason: e.to_string(),
                })?;
                file.sync_all().map_err(|e| ConfinedError::Io {
                    path: rel.to_string(),
                    operation: "sync",
                    reason: e.to_string(),
                })
            })();
            if let Err(e) = written {
                remove_temp();
                return Err(e);
            }
            if let Some(h) = hook {
                h(WriteStep::TempWritten);
            }
            let renamed = match existing {
                Existing::Replace => rustix::fs::renameat(&dir.fd, temp.as_str(), &dir.fd, leaf),
                Existing::Refuse => rustix::fs::renameat_with(
                    &dir.fd,
                    temp.as_str(),
                    &dir.fd,
                    leaf,
                    RenameFlags::NOREPLACE,
                ),
            };
            if let Err(e) = renamed {
                remove_temp();
                return Err(classify(e, rel, "rename into place"));
            }
            Ok(())
        }
    }
}

/// Reads `path` (absolute host path) through a fresh [`ConfinedDir`] of
/// `root` opened with no link on its path. A convenience for one-off reads.
#[cfg(target_os = "linux")]
pub fn read_beneath(root: &Path, rel: &str, max_bytes: u64) -> Result<FileRead, ConfinedError> {
    ConfinedDir::open_no_links(root)?.read_capped(rel, max_bytes)
}

/// Stats `rel` beneath `root` (no link anywhere on the path).
#[cfg(target_os = "linux")]
pub fn stat_beneath(root: &Path, rel: &str) -> Result<Option<FileStat>, ConfinedError> {
    ConfinedDir::open_no_links(root)?.stat(rel)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_openat2_is_refused_not_worked_around() {
        let e = linux::classify(rustix::io::Errno::NOSYS, "out.png", "open");
        assert!(matches!(e, ConfinedError::Unavailable { .. }), "{e:?}");
        assert!(e.to_string().contains("does not fall back"), "{e}");
        let s = SandboxError::from(e);
        assert!(matches!(s, SandboxError::ConfinementUnavailable { .. }));
    }

    #[test]
    fn a_private_directory_is_made_fresh_0700_and_never_adopted() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let parent = tempfile::tempdir().unwrap();
        let made = ConfinedDir::create_private(parent.path(), "art").unwrap();
        let m = std::fs::symlink_metadata(parent.path().join("art")).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, 0o700);
        assert_eq!(made.shown(), format!("{}/art", parent.path().display()));
        // A directory already there, even one that looks just as private,
        // is refused: made, never adopted.
        let e = ConfinedDir::create_private(parent.path(), "art").unwrap_err();
        assert!(matches!(e, ConfinedError::Exists { .. }), "{e:?}");
        std::fs::create_dir(parent.path().join("planted")).unwrap();
        std::fs::set_permissions(
            parent.path().join("planted"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let e = ConfinedDir::create_private(parent.path(), "planted").unwrap_err();
        assert!(matches!(e, ConfinedError::Exists { .. }), "{e:?}");
        // A link there is not followed into a directory elsewhere.
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), parent.path().join("link")).unwrap();
        assert!(ConfinedDir::create_private(parent.path(), "link").is_err());
        assert!(ConfinedDir::create_private(parent.path(), "a/b").is_err());
    }

    #[test]
    fn remove_file_removes_a_link_itself_and_follows_none_on_its_parents() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "outside").unwrap();
        let dir = ConfinedDir::open(root.path()).unwrap();
        // A directory on the path swapped for a link: refused, not followed.
        std::os::unix::fs::symlink(outside.path(), root.path().join("d")).unwrap();
        let e = dir.remove_file("d/keep").unwrap_err();
        assert!(
            matches!(
                e,
                ConfinedError::Link { .. } | ConfinedError::NotADirectory { .. }
            ),
            "{e:?}"
        );
        assert!(outside.path().join("keep").exists());
        // A link at the leaf: the link goes, its target stays.
        std::os::unix::fs::symlink(outside.path().join("keep"), root.path().join("f")).unwrap();
        assert!(dir.remove_file("f").unwrap());
        assert!(outside.path().join("keep").exists());
        assert!(!dir.remove_file("f").unwrap());
    }
}
