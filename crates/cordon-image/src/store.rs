//! [`ImageStore`]: the store's layout (`blobs/`, `names/`, `tmp/`), its
//! entries, a build's staging and commit, and `resolve`, `ls`, `rm`, `gc`.
//! Imports and builds, which end in a commit, are in [`crate::build`].

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dirs::{check_dir, lock_fd, lock_file, mkdir_mode, now, remove_tree, unique, Lock};
use crate::error::{io_err, rio_err, ImageError};
use crate::{
    links, tree, valid_name, BuildStep, GcReport, ImageConfig, ImageInfo, Resolved, DEFAULT_ROOT,
    HOST,
};

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

pub(crate) fn check_name(name: &str) -> Result<(), ImageError> {
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

/// A build in progress under `tmp/<unique>/`: locked while it lives, removed
/// on drop unless committed.
pub(crate) struct Staging {
    pub(crate) dir: PathBuf,
    _lock: Lock,
    committed: bool,
}

impl Staging {
    pub(crate) fn rootfs(&self) -> PathBuf {
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

    pub(crate) fn stage(&self) -> Result<Staging, ImageError> {
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
    pub(crate) fn commit(
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
