//! cordon's image store: the root trees a sandbox's `image` names.
//!
//! An [`ImageStore`] maps names to content-addressed root trees. `host` is
//! built in ([`Resolved::Host`]: the host's system directories, read-only,
//! which is what the container rung shows without an image); every other
//! name is imported ([`ImageStore::import`]: a directory or a `.tar`,
//! `.tar.gz`/`.tgz`, or a container image — an OCI image layout or a
//! `docker save` archive, flattened layer by layer in `oci`, its run config
//! kept as [`ImageConfig`]) or built ([`ImageStore::build_debootstrap`],
//! [`ImageStore::ensure_default`]) and resolves to a [`Resolved::Stored`]
//! whose `root` a backend binds read-only.
//!
//! # Layout
//!
//! ```text
//! ROOT/                      0711, owned by the store's owner (root)
//!   lock                     flock: commit, rm and gc take it
//!   blobs/sha256-<hex>/      0711; one per distinct tree
//!     rootfs/                0755; the tree
//!     links                  0644; its hard-link index (see [`link_index`])
//!   names/<name>.json        name -> digest, size, created, source, config
//!   tmp/<unique>/            0700; builds and imports in progress
//! ```
//!
//! `ROOT` is [`ImageStore::default_root`] (`$CORDON_IMAGE_STORE`, else
//! `/var/lib/cordon/images`). A sandbox's stage-2 init, an unprivileged
//! mapped uid on the host, opens an image root by path, so `ROOT` and every
//! directory above and below it down to `rootfs/` must be searchable by
//! others; files stay owned by the store's owner and are never writable by
//! group or others. [`ImageStore::open`] refuses a root that is writable by
//! group or others, owned by another user, or not searchable, and says what
//! to run.
//!
//! # Content addressing
//!
//! An image's digest is SHA-256 over a depth-first walk of its tree in byte
//! order of names: each entry's relative path, type, mode bits, and the
//! SHA-256 of its content (regular files) or its target (symlinks). Owners
//! and times are not part of it. Two names with the same content share one
//! blob.
//!
//! Before the digest, a tree is made fit for the store: device nodes, fifos
//! and sockets are removed (skipped with a warning on import; the sandbox
//! gets its own `/dev`, and images are mounted `nodev`), setuid/setgid and
//! group/other write bits are cleared (images are mounted `nosuid` and
//! read-only; a blob must not be writable by anyone but the store's owner,
//! or it could change under its digest), every entry is given the store's
//! owner, and the root gets mode 0755.
//!
//! # A broken or partial build is never used
//!
//! Every build or import happens under `tmp/<unique>/`, whose directory is
//! `flock`ed by its builder for as long as it works. The finished tree is
//! prepared, digested and synced, then renamed into `blobs/` in one step
//! (`RENAME_NOREPLACE`: if the blob exists, the new copy is discarded), and
//! only then is `names/<name>.json` written (temporary file, fsync,
//! rename). [`ImageStore::resolve`] returns only a name whose entry parses
//! and whose blob exists. A `tmp/` entry whose lock can be taken belongs to
//! a builder that died; [`ImageStore::open`] and [`ImageStore::gc`] remove
//! it (unmounting anything a killed debootstrap left mounted beneath it).
//! [`ImageStore::gc`] also removes blobs no name points to (a build killed
//! between the blob's rename and the name's write leaves one).
//!
//! # What is not checked
//!
//! `resolve` does not re-hash the blob (hundreds of megabytes); the store's
//! modes are what keep it unchanged. Removing a name whose blob a running
//! sandbox uses removes the files under it.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

mod debootstrap;
#[doc(hidden)]
pub mod fuzz;
mod links;
mod oci;
mod tree;

pub use debootstrap::{configured_mirror, DebootstrapOpts, DEFAULT_SUITE, FALLBACK_MIRROR};
pub use links::link_index;
pub use oci::{ImageConfig, ImportOpts, DEFAULT_PLATFORM};

/// The built-in image.
pub const HOST: &str = "host";
/// The image [`ImageStore::ensure_default`] builds: minimal Debian with
/// `python3`.
pub const DEFAULT_IMAGE: &str = "default";
/// Where the store lives unless `$CORDON_IMAGE_STORE` says otherwise.
pub const DEFAULT_ROOT: &str = "/var/lib/cordon/images";

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{step} `{path}`: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("image store `{path}` {problem}; fix it with `{fix}`")]
    InsecureStore {
        path: PathBuf,
        problem: String,
        fix: String,
    },
    #[error("`{name}` is not an image name: use 1-64 of a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit")]
    BadName { name: String },
    #[error("`host` is the built-in image (the host's system directories); it cannot be {action}")]
    Builtin { action: &'static str },
    #[error("no image named `{name}` in `{store}`; build it with `cordon image build {name} --debootstrap` or import one with `cordon image import {name} DIR|TARBALL`")]
    NotFound { name: String, store: PathBuf },
    #[error("image `{name}` cannot be used: {reason}; build or import it again, or remove it with `cordon image rm {name}`")]
    Broken { name: String, reason: String },
    #[error("`{}`: entry `{}` is refused: {reason}", archive.display(), entry.display())]
    UnsafeEntry {
        archive: PathBuf,
        entry: PathBuf,
        reason: String,
    },
    #[error("`{}` is refused as an image: {reason}", path.display())]
    BadImage { path: PathBuf, reason: String },
    #[error("`{}` does not match its digest (expected {want}, it hashes to {got}); the image is damaged or was altered: export it again", path.display())]
    DigestMismatch {
        path: PathBuf,
        want: String,
        got: String,
    },
    #[error("`{}` is neither a directory nor a `.tar`, `.tar.gz` or `.tgz` archive{hint}", path.display())]
    UnsupportedSource { path: PathBuf, hint: String },
    #[error("`debootstrap` is not installed; install it with `apt-get install debootstrap`")]
    DebootstrapMissing,
    #[error("debootstrap failed ({status}); no image was named. Its last lines:\n{tail}")]
    DebootstrapFailed { status: String, tail: String },
    #[error("{what} `{value}` is refused: expected {help}")]
    BadOption {
        what: &'static str,
        value: String,
        help: &'static str,
    },
}

impl ImageError {
    /// Whether the error is a refusal the caller can fix (a usage error)
    /// rather than a failure of the machine.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ImageError::Io { .. } | ImageError::DebootstrapFailed { .. }
        )
    }
}

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| ImageError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn rio_err<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(rustix::io::Errno) -> ImageError + 'a {
    move |e| ImageError::Io {
        step,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// What an image name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The built-in `host` image: the host's system directories, read-only.
    Host,
    /// A stored image; `root` is the directory holding its root tree.
    Stored {
        name: String,
        digest: String,
        root: PathBuf,
    },
}

/// One stored name, as `ls` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageInfo {
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes of regular files in the tree.
    pub size: u64,
    /// Unix seconds when the name was written.
    pub created: u64,
    /// How it was made (`debootstrap SUITE MIRROR [+pkgs]`, `import PATH`).
    pub source: String,
    /// How the image says to run it (env, user, work dir, entrypoint,
    /// cmd): kept from an imported OCI or `docker save` image's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ImageConfig>,
}

/// What `gc` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Leftovers of builds and imports that did not finish.
    pub tmp_removed: usize,
    /// Blobs no name pointed to.
    pub blobs_removed: usize,
}

/// A test hook's view of a build's progress.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildStep {
    /// The tree is written under `tmp/`, not yet digested.
    Staged,
    /// The blob is in `blobs/`; the name is not written yet.
    BlobStored,
}

type Hook = Box<dyn Fn(BuildStep) + Send + Sync>;

/// The image store at one root. See the crate docs for the layout and the
/// guarantees.
pub struct ImageStore {
    root: PathBuf,
    hook: Option<Hook>,
}

impl std::fmt::Debug for ImageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageStore")
            .field("root", &self.root)
            .finish()
    }
}

/// Whether `name` is a valid image name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

fn check_name(name: &str) -> Result<(), ImageError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(ImageError::BadName { name: name.into() })
    }
}

fn blob_dir_name(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
    .then(|| format!("sha256-{hex}"))
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks one directory of the store (or above it). `own`: it must belong
/// to us and not be writable by group or others; otherwise it must belong to
/// root or us and be writable by others only with the sticky bit.
fn check_dir(path: &Path, own: bool) -> Result<(), ImageError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("stat", path))?;
    let me = rustix::process::geteuid().as_raw();
    let refuse = |problem: String, fix: String| ImageError::InsecureStore {
        path: path.to_path_buf(),
        problem,
        fix,
    };
    let shown = path.display();
    if !meta.is_dir() {
        return Err(refuse(
            "is not a directory".into(),
            format!("rm {shown} (or set CORDON_IMAGE_STORE to a directory)"),
        ));
    }
    let mode = meta.mode();
    if own {
        if meta.uid() != me {
            return Err(refuse(
                format!(
                    "is owned by uid {}, not by this user (uid {me})",
                    meta.uid()
                ),
                format!("chown {me} {shown}"),
            ));
        }
        if mode & 0o022 != 0 {
            return Err(refuse(
                "is writable by group or others".into(),
                format!("chmod go-w {shown}"),
            ));
        }
    } else {
        if meta.uid() != 0 && meta.uid() != me {
            return Err(refuse(
                format!("lies under a directory owned by uid {}", meta.uid()),
                format!("chown root {shown}"),
            ));
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(refuse(
                "lies under a directory writable by group or others".into(),
                format!("chmod go-w {shown}"),
            ));
        }
    }
    if mode & 0o001 == 0 {
        return Err(refuse(
            "is not searchable by other users (a sandbox's init opens images as an unprivileged uid)"
                .into(),
            format!("chmod o+x {shown}"),
        ));
    }
    Ok(())
}

fn mkdir_mode(path: &Path, mode: u32) -> Result<(), ImageError> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", path)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("mkdir", path)(e)),
    }
}

/// An exclusive `flock` on a file, released on drop.
struct Lock(#[expect(dead_code, reason = "held for its lock")] File);

fn lock_file(path: &Path, block: bool) -> Result<Option<Lock>, ImageError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_err("open lock", path))?;
    lock_fd(f, path, block)
}

fn lock_fd(f: File, path: &Path, block: bool) -> Result<Option<Lock>, ImageError> {
    let op = if block {
        rustix::fs::FlockOperation::LockExclusive
    } else {
        rustix::fs::FlockOperation::NonBlockingLockExclusive
    };
    match rustix::fs::flock(f.as_fd(), op) {
        Ok(()) => Ok(Some(Lock(f))),
        Err(rustix::io::Errno::WOULDBLOCK) if !block => Ok(None),
        Err(e) => Err(rio_err("lock", path)(e)),
    }
}

/// Unmounts everything mounted at or below `dir` (a killed debootstrap
/// leaves `proc` and `sys` mounted in its target), deepest first.
fn unmount_beneath(dir: &Path) {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH);
    }
}

fn unescape_mountinfo(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

fn remove_tree(path: &Path) -> Result<(), ImageError> {
    unmount_beneath(path);
    // Make every directory writable first: a tree may hold 0555 directories.
    fn open_up(p: &Path) {
        if let Ok(m) = fs::symlink_metadata(p) {
            if m.is_dir() {
                let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
                if let Ok(rd) = fs::read_dir(p) {
                    for e in rd.flatten() {
                        open_up(&e.path());
                    }
                }
            }
        }
    }
    if rustix::process::geteuid().as_raw() != 0 {
        open_up(path);
    }
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// A build in progress under `tmp/<unique>/`: locked while it lives, removed
/// on drop unless committed.
struct Staging {
    dir: PathBuf,
    _lock: Lock,
    committed: bool,
}

impl Staging {
    fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = remove_tree(&self.dir);
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NameEntry {
    version: u32,
    #[serde(flatten)]
    info: ImageInfo,
}

impl ImageStore {
    /// `$CORDON_IMAGE_STORE`, else [`DEFAULT_ROOT`].
    pub fn default_root() -> PathBuf {
        std::env::var_os("CORDON_IMAGE_STORE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT))
    }

    /// Opens (creating when missing) the store at `root`: checks that it
    /// and its parents are safe and searchable, creates `blobs/`, `names/`
    /// and `tmp/`, and removes leftovers of builds that died.
    pub fn open(root: &Path) -> Result<ImageStore, ImageError> {
        if !root.exists() {
            if let Some(parent) = root.parent() {
                fs::create_dir_all(parent).map_err(io_err("mkdir", parent))?;
            }
            mkdir_mode(root, 0o711)?;
        }
        let root = root.canonicalize().map_err(io_err("resolve", root))?;
        for anc in root.ancestors().skip(1) {
            check_dir(anc, false)?;
        }
        check_dir(&root, true)?;
        for (sub, mode) in [("blobs", 0o711), ("names", 0o755), ("tmp", 0o700)] {
            let p = root.join(sub);
            if !p.exists() {
                mkdir_mode(&p, mode)?;
            }
            if sub != "tmp" {
                check_dir(&p, true)?;
            } else {
                let m = fs::symlink_metadata(&p).map_err(io_err("stat", &p))?;
                if !m.is_dir()
                    || m.uid() != rustix::process::geteuid().as_raw()
                    || m.mode() & 0o077 != 0
                {
                    return Err(ImageError::InsecureStore {
                        path: p.clone(),
                        problem: "must be a directory of this user with mode 0700".into(),
                        fix: format!(
                            "chown {} {} && chmod 0700 {}",
                            rustix::process::geteuid().as_raw(),
                            p.display(),
                            p.display()
                        ),
                    });
                }
            }
        }
        let store = ImageStore { root, hook: None };
        store.clean_tmp()?;
        Ok(store)
    }

    /// Calls `hook` at each [`BuildStep`] (tests stop a build there).
    #[doc(hidden)]
    pub fn with_step_hook(mut self, hook: impl Fn(BuildStep) + Send + Sync + 'static) -> Self {
        self.hook = Some(Box::new(hook));
        self
    }

    /// The store's root directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn step(&self, s: BuildStep) {
        if let Some(h) = &self.hook {
            h(s);
        }
    }

    fn name_path(&self, name: &str) -> PathBuf {
        self.root.join("names").join(format!("{name}.json"))
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        blob_dir_name(digest).map(|d| self.root.join("blobs").join(d))
    }

    fn store_lock(&self) -> Result<Lock, ImageError> {
        let p = self.root.join("lock");
        lock_file(&p, true)?.ok_or_else(|| ImageError::Io {
            step: "lock",
            path: p,
            source: io::Error::other("lock not taken"),
        })
    }

    /// Removes `tmp/` entries whose builder is gone (their lock is free).
    fn clean_tmp(&self) -> Result<usize, ImageError> {
        let tmp = self.root.join("tmp");
        let mut removed = 0;
        for e in fs::read_dir(&tmp)
            .map_err(io_err("read directory", &tmp))?
            .flatten()
        {
            let p = e.path();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir {
                let _ = fs::remove_file(&p);
                removed += 1;
                continue;
            }
            let Ok(f) = File::open(&p) else { continue };
            if let Some(_held) = lock_fd(f, &p, false)? {
                remove_tree(&p)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn stage(&self) -> Result<Staging, ImageError> {
        let dir = self.root.join("tmp").join(unique());
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io_err("mkdir", &dir))?;
        let f = File::open(&dir).map_err(io_err("open", &dir))?;
        let lock = lock_fd(f, &dir, true)?.ok_or_else(|| ImageError::Io {
            step: "lock",
            path: dir.clone(),
            source: io::Error::other("lock not taken"),
        })?;
        Ok(Staging {
            dir,
            _lock: lock,
            committed: false,
        })
    }

    /// Prepares, digests and stores the staged tree, then names it.
    fn commit(
        &self,
        mut staging: Staging,
        name: &str,
        source: String,
        config: Option<ImageConfig>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        self.step(BuildStep::Staged);
        let rootfs = staging.rootfs();
        let done = tree::prepare(&rootfs)?;
        if done.special > 0 {
            progress(&format!(
                "removed {} device nodes, fifos or sockets (the sandbox gets its own /dev)",
                done.special
            ));
        }
        if done.setid > 0 {
            progress(&format!(
                "cleared the setuid/setgid bits of {} entries (images are mounted nosuid)",
                done.setid
            ));
        }
        progress("computing the digest");
        let (digest, stats) = tree::digest(&rootfs)?;
        // The hard-link index, kept beside the tree (a hint: a failure
        // here only leaves it to be computed at first use).
        if let Ok(groups) = links::build(&rootfs) {
            let _ = links::store(&rootfs, &groups);
        }
        let blob = self.blob_path(&digest).ok_or_else(|| ImageError::Io {
            step: "digest",
            path: rootfs.clone(),
            source: io::Error::other("malformed digest"),
        })?;
        fs::set_permissions(&staging.dir, fs::Permissions::from_mode(0o711))
            .map_err(io_err("chmod", &staging.dir))?;
        // Durable before it is named: the blob's content, then the rename.
        let f = File::open(&staging.dir).map_err(io_err("open", &staging.dir))?;
        rustix::fs::syncfs(&f).map_err(rio_err("sync", &staging.dir))?;
        drop(f);
        let _lock = self.store_lock()?;
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            &staging.dir,
            rustix::fs::CWD,
            &blob,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => staging.committed = true,
            // Same content already stored: this copy is dropped (and removed).
            Err(rustix::io::Errno::EXIST) | Err(rustix::io::Errno::NOTEMPTY) => {}
            Err(e) => return Err(rio_err("store blob", &blob)(e)),
        }
        drop(staging);
        let blobs = self.root.join("blobs");
        if let Ok(d) = File::open(&blobs) {
            let _ = d.sync_all();
        }
        self.step(BuildStep::BlobStored);
        let info = ImageInfo {
            name: name.into(),
            digest,
            size: stats.size,
            created: now(),
            source,
            config,
        };
        let previous = self.read_entry(name).ok();
        self.write_entry(&info)?;
        if let Some(prev) = previous {
            if prev.digest != info.digest {
                self.remove_blob_if_unused(&prev.digest)?;
            }
        }
        Ok(info)
    }

    fn write_entry(&self, info: &ImageInfo) -> Result<(), ImageError> {
        let names = self.root.join("names");
        let tmp = names.join(format!(".{}.{}.tmp", info.name, unique()));
        let json = serde_json::to_vec_pretty(&NameEntry {
            version: 1,
            info: info.clone(),
        })
        .map_err(|e| io_err("encode", &tmp)(io::Error::other(e)))?;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io_err("create", &tmp))?;
        let written = f.write_all(&json).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("write", &tmp)(e));
        }
        let dest = self.name_path(&info.name);
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("rename", &dest)(e));
        }
        if let Ok(d) = File::open(&names) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn read_entry(&self, name: &str) -> Result<ImageInfo, ImageError> {
        let p = self.name_path(name);
        let mut text = String::new();
        match File::open(&p) {
            Ok(mut f) => f.read_to_string(&mut text).map_err(io_err("read", &p))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ImageError::NotFound {
                    name: name.into(),
                    store: self.root.clone(),
                })
            }
            Err(e) => return Err(io_err("open", &p)(e)),
        };
        let entry: NameEntry = serde_json::from_str(&text).map_err(|e| ImageError::Broken {
            name: name.into(),
            reason: format!("its entry `{}` does not parse ({e})", p.display()),
        })?;
        if entry.version != 1
            || entry.info.name != name
            || blob_dir_name(&entry.info.digest).is_none()
        {
            return Err(ImageError::Broken {
                name: name.into(),
                reason: format!("its entry `{}` is malformed", p.display()),
            });
        }
        Ok(entry.info)
    }

    /// The names in `names/`, sorted.
    fn names(&self) -> Result<Vec<String>, ImageError> {
        let dir = self.root.join("names");
        let mut out: Vec<String> = fs::read_dir(&dir)
            .map_err(io_err("read directory", &dir))?
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.strip_suffix(".json")?.to_string();
                valid_name(&n).then_some(n)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// What `name` stands for. `host` is built in; any other name must have
    /// a complete entry whose blob exists.
    pub fn resolve(&self, name: &str) -> Result<Resolved, ImageError> {
        if name == HOST {
            return Ok(Resolved::Host);
        }
        check_name(name)?;
        let info = self.read_entry(name)?;
        let blob = self
            .blob_path(&info.digest)
            .ok_or_else(|| ImageError::Broken {
                name: name.into(),
                reason: "its digest is malformed".into(),
            })?;
        let root = blob.join("rootfs");
        match fs::symlink_metadata(&root) {
            Ok(m) if m.is_dir() => Ok(Resolved::Stored {
                name: info.name,
                digest: info.digest,
                root,
            }),
            _ => Err(ImageError::Broken {
                name: name.into(),
                reason: format!("its blob `{}` is missing", blob.display()),
            }),
        }
    }

    /// Imports `src` as `name` with the default [`ImportOpts`]; see
    /// [`ImageStore::import_with`].
    pub fn import(
        &self,
        name: &str,
        src: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        self.import_with(name, src, &ImportOpts::default(), progress)
    }

    /// Imports `src` as `name`, replacing an earlier image of that name.
    /// `src` is a root tree (a directory, or a `.tar`/`.tar.gz`/`.tgz` file)
    /// or a container image: an OCI image layout (a directory with
    /// `oci-layout` and `index.json`, or such a directory in a tar archive)
    /// or a `docker save` archive (`manifest.json`). An image's blobs are
    /// checked against their digests before use, its layers applied in
    /// order with whiteouts honoured, and its config's env, user, work dir,
    /// entrypoint and cmd kept in [`ImageInfo::config`]. Symlinks are kept
    /// as symlinks (never followed); device nodes, fifos and sockets are
    /// skipped, each reported to `progress`.
    pub fn import_with(
        &self,
        name: &str,
        src: &Path,
        opts: &ImportOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        if name == HOST {
            return Err(ImageError::Builtin { action: "replaced" });
        }
        check_name(name)?;
        let meta = fs::metadata(src).map_err(io_err("stat", src))?;
        let staging = self.stage()?;
        let rootfs = staging.rootfs();
        let mut config = None;
        if meta.is_dir() {
            if let Some(kind) = oci::detect(src) {
                progress(&format!("reading the image in `{}`", src.display()));
                config = Some(self.flatten_into(src, kind, &rootfs, opts, progress)?);
            } else {
                progress(&format!("copying `{}`", src.display()));
                tree::copy_dir(src, &rootfs, progress)?;
            }
        } else if meta.is_file() {
            let lower = src.to_string_lossy().to_lowercase();
            let mut f = File::open(src).map_err(io_err("open", src))?;
            let mut magic = [0u8; 2];
            let n = f.read(&mut magic).map_err(io_err("read", src))?;
            let gz = n == 2 && magic == [0x1f, 0x8b];
            let named_gz = lower.ends_with(".tar.gz") || lower.ends_with(".tgz");
            if !(lower.ends_with(".tar") || named_gz) || gz != named_gz {
                let hint = if gz != named_gz && (lower.ends_with(".tar") || named_gz) {
                    " (its content does not match its name)".to_string()
                } else {
                    " (decompress other formats first, e.g. `xz -d`)".to_string()
                };
                return Err(ImageError::UnsupportedSource {
                    path: src.to_path_buf(),
                    hint,
                });
            }
            let open_tar = || -> Result<Box<dyn Read>, ImageError> {
                let f = io::BufReader::new(File::open(src).map_err(io_err("open", src))?);
                Ok(if gz {
                    Box::new(flate2::read::GzDecoder::new(f))
                } else {
                    Box::new(f)
                })
            };
            let names = oci::tar_top_names(&mut open_tar()?, src)?;
            if let Some(kind) = oci::detect_names(names.iter().map(String::as_str)) {
                // The archive's own entries are unpacked like any tarball's
                // (nothing outside the staging directory), then read as a
                // layout directory.
                let layout = staging.dir.join("layout");
                progress(&format!("unpacking the image archive `{}`", src.display()));
                tree::unpack_tar(&mut open_tar()?, src, &layout, progress)?;
                config = Some(self.flatten_into(&layout, kind, &rootfs, opts, progress)?);
                remove_tree(&layout)?;
            } else {
                progress(&format!("unpacking `{}`", src.display()));
                tree::unpack_tar(&mut open_tar()?, src, &rootfs, progress)?;
            }
        } else {
            return Err(ImageError::UnsupportedSource {
                path: src.to_path_buf(),
                hint: String::new(),
            });
        }
        if config.is_none() && opts.platform.is_some() {
            return Err(ImageError::BadImage {
                path: src.to_path_buf(),
                reason: "`--platform` chooses from an OCI image index; this is a plain root tree"
                    .into(),
            });
        }
        let source = format!("import {}", src.display());
        self.commit(staging, name, source, config, progress)
    }

    fn flatten_into(
        &self,
        layout: &Path,
        kind: oci::Layout,
        rootfs: &Path,
        opts: &ImportOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageConfig, ImageError> {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(rootfs)
            .map_err(io_err("mkdir", rootfs))?;
        oci::flatten(layout, kind, rootfs, opts, progress)
    }

    /// Builds `name` with `debootstrap --variant=minbase [--include=..]
    /// SUITE TMPDIR MIRROR`, streaming its output lines to `progress`.
    /// On failure the temporary tree is removed and nothing is named.
    pub fn build_debootstrap(
        &self,
        name: &str,
        opts: &DebootstrapOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        if name == HOST {
            return Err(ImageError::Builtin { action: "replaced" });
        }
        check_name(name)?;
        let mirror = opts
            .mirror
            .clone()
            .unwrap_or_else(|| configured_mirror(&opts.suite));
        opts.validate(&mirror)?;
        let program = debootstrap::find_program(opts.program.as_deref())?;
        let staging = self.stage()?;
        progress(&format!(
            "debootstrap --variant=minbase {}{} {}",
            if opts.include.is_empty() {
                String::new()
            } else {
                format!("--include={} ", opts.include.join(","))
            },
            opts.suite,
            mirror
        ));
        debootstrap::run(&program, opts, &mirror, &staging.rootfs(), progress)?;
        let mut source = format!("debootstrap {} {mirror}", opts.suite);
        if !opts.include.is_empty() {
            source.push_str(&format!(" +{}", opts.include.join(",")));
        }
        self.commit(staging, name, source, None, progress)
    }

    /// The store's `default` image (minimal Debian with `python3`): built
    /// on first use, showing debootstrap's progress, reused afterwards. Two
    /// callers at once build it once.
    pub fn ensure_default(&self, progress: &mut dyn FnMut(&str)) -> Result<Resolved, ImageError> {
        self.ensure_default_with(&DebootstrapOpts::default(), progress)
    }

    /// [`ensure_default`](Self::ensure_default) with other debootstrap
    /// options (`python3` is always included).
    pub fn ensure_default_with(
        &self,
        opts: &DebootstrapOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Resolved, ImageError> {
        match self.resolve(DEFAULT_IMAGE) {
            Err(ImageError::NotFound { .. }) | Err(ImageError::Broken { .. }) => {}
            other => return other,
        }
        let _building = lock_file(&self.root.join("default.lock"), true)?;
        match self.resolve(DEFAULT_IMAGE) {
            Err(ImageError::NotFound { .. }) | Err(ImageError::Broken { .. }) => {}
            other => return other,
        }
        let mut opts = opts.clone();
        if !opts.include.iter().any(|p| p == "python3") {
            opts.include.push("python3".into());
        }
        progress("building the `default` image (first use)");
        self.build_debootstrap(DEFAULT_IMAGE, &opts, progress)?;
        self.resolve(DEFAULT_IMAGE)
    }

    /// Every stored name (not `host`), sorted by name. A name whose entry
    /// does not parse is left out (`resolve` says what is wrong with it).
    pub fn ls(&self) -> Result<Vec<ImageInfo>, ImageError> {
        let mut out = Vec::new();
        for n in self.names()? {
            match self.read_entry(&n) {
                Ok(info) => out.push(info),
                // Removed meanwhile, or broken: not listed.
                Err(ImageError::NotFound { .. }) | Err(ImageError::Broken { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Removes `name`, and its blob when no other name points to it.
    pub fn rm(&self, name: &str) -> Result<(), ImageError> {
        if name == HOST {
            return Err(ImageError::Builtin { action: "removed" });
        }
        check_name(name)?;
        let _lock = self.store_lock()?;
        let info = self.read_entry(name);
        let p = self.name_path(name);
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ImageError::NotFound {
                    name: name.into(),
                    store: self.root.clone(),
                })
            }
            Err(e) => return Err(io_err("remove", &p)(e)),
        }
        if let Ok(info) = info {
            self.remove_blob_if_unused(&info.digest)?;
        }
        Ok(())
    }

    /// Caller holds the store lock.
    fn remove_blob_if_unused(&self, digest: &str) -> Result<bool, ImageError> {
        let used = self
            .names()?
            .iter()
            .filter_map(|n| self.read_entry(n).ok())
            .any(|i| i.digest == digest);
        match self.blob_path(digest) {
            Some(blob) if !used && blob.exists() => {
                remove_tree(&blob)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Removes leftovers of builds that died and blobs no name points to.
    /// A name whose entry does not parse keeps nothing alive, but is left
    /// for `rm` to remove.
    pub fn gc(&self) -> Result<GcReport, ImageError> {
        let _lock = self.store_lock()?;
        let mut report = GcReport {
            tmp_removed: self.clean_tmp()?,
            ..Default::default()
        };
        let used: Vec<String> = self
            .names()?
            .iter()
            .filter_map(|n| self.read_entry(n).ok())
            .filter_map(|i| blob_dir_name(&i.digest))
            .collect();
        let blobs = self.root.join("blobs");
        for e in fs::read_dir(&blobs)
            .map_err(io_err("read directory", &blobs))?
            .flatten()
        {
            let n = e.file_name().to_string_lossy().into_owned();
            if !used.contains(&n) {
                remove_tree(&e.path())?;
                report.blobs_removed += 1;
            }
        }
        let names = self.root.join("names");
        for e in fs::read_dir(&names)
            .map_err(io_err("read directory", &names))?
            .flatten()
        {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(report)
    }
}

/// `created` as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_time(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_times() {
        assert!(valid_name("default"));
        assert!(valid_name("py3.11-slim_x"));
        for bad in ["", "Host", "../x", "a/b", "-x", ".x", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_251_199), "2024-02-29T23:59:59Z");
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo("/a\\040b"), PathBuf::from("/a b"));
    }
}
