//! Root trees: copying a directory or a tarball into a staging directory,
//! making a built tree fit for the store, and the content digest.
//!
//! Nothing here follows a symlink: sources are walked with `lstat`, files are
//! opened `O_NOFOLLOW`, and every parent of an entry written into the tree
//! must already be a real directory in the tree (so a tar entry cannot write
//! through a link an earlier entry planted).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::ImageError;

/// The mode bits kept in the store: no setuid/setgid (images are mounted
/// `nosuid` anyway) and no group/other write (a blob must not change under
/// its digest; inside the sandbox the image is read-only regardless).
pub(crate) const KEPT_MODE: u32 = 0o1755;

/// The mode of every image's root directory: the sandbox's stage-2 init, an
/// unprivileged uid on the host, must search it.
pub(crate) const ROOT_MODE: u32 = 0o755;

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| ImageError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

/// What a walk counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TreeStats {
    /// Sum of the sizes of regular files, in bytes.
    pub size: u64,
    pub entries: u64,
}

/// Entries of `dir`, sorted by name bytes (the canonical order).
fn sorted_entries(dir: &Path) -> Result<Vec<fs::DirEntry>, ImageError> {
    let mut v = fs::read_dir(dir)
        .map_err(io_err("read directory", dir))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("read directory", dir))?;
    v.sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
    Ok(v)
}

fn open_nofollow(path: &Path) -> Result<File, ImageError> {
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits();
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags as i32)
        .open(path)
        .map_err(io_err("open", path))
}

fn hash_file(path: &Path) -> Result<[u8; 32], ImageError> {
    let mut f = open_nofollow(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io_err("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

fn frame(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// The content digest of the tree at `root`: SHA-256 over a depth-first walk
/// in byte order of names. Each entry contributes its relative path, its
/// type, its mode bits, and the SHA-256 of its content (regular file) or its
/// target (symlink), every field length-prefixed. Owners and times are not
/// part of it. Returns `sha256:<hex>`.
pub(crate) fn digest(root: &Path) -> Result<(String, TreeStats), ImageError> {
    let mut h = Sha256::new();
    h.update(b"cordon-image-tree-v1\0");
    let mut stats = TreeStats::default();
    digest_entry(root, Path::new(""), &mut h, &mut stats)?;
    Ok((format!("sha256:{}", hex(&h.finalize())), stats))
}

fn digest_entry(
    root: &Path,
    rel: &Path,
    h: &mut Sha256,
    stats: &mut TreeStats,
) -> Result<(), ImageError> {
    let path = root.join(rel);
    let meta = fs::symlink_metadata(&path).map_err(io_err("stat", &path))?;
    let ft = meta.file_type();
    stats.entries += 1;
    frame(h, rel.as_os_str().as_bytes());
    h.update((meta.mode() & 0o7777).to_be_bytes());
    if ft.is_symlink() {
        h.update(b"l");
        let to = fs::read_link(&path).map_err(io_err("readlink", &path))?;
        frame(h, to.as_os_str().as_bytes());
    } else if ft.is_file() {
        h.update(b"f");
        h.update(hash_file(&path)?);
        stats.size += meta.len();
    } else if ft.is_dir() {
        h.update(b"d");
        for e in sorted_entries(&path)? {
            digest_entry(root, &rel.join(e.file_name()), h, stats)?;
        }
        h.update(b"D"); // end of directory: keeps the framing unambiguous
    } else {
        // `prepare` removed every other kind before the digest is taken.
        return Err(ImageError::Io {
            step: "digest",
            path,
            source: io::Error::other("a device node, fifo or socket is left in the tree"),
        });
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a tree fit for the store, in place: removes device nodes, fifos
/// and sockets (the sandbox gets its own `/dev`; the image is mounted
/// `nodev`), keeps only [`KEPT_MODE`] bits, gives every entry the store's
/// owner, and sets the root to [`ROOT_MODE`]. Returns what it removed.
pub(crate) fn prepare(root: &Path) -> Result<Prepared, ImageError> {
    let owner = (rustix::process::geteuid(), rustix::process::getegid());
    let mut done = Prepared::default();
    prepare_entry(root, owner, &mut done)?;
    fs::set_permissions(root, fs::Permissions::from_mode(ROOT_MODE))
        .map_err(io_err("chmod", root))?;
    Ok(done)
}

/// What [`prepare`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// Device nodes, fifos and sockets removed.
    pub special: u64,
    /// Files and directories whose setuid or setgid bit was cleared.
    pub setid: u64,
}

fn prepare_entry(
    path: &Path,
    owner: (rustix::process::Uid, rustix::process::Gid),
    done: &mut Prepared,
) -> Result<(), ImageError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("stat", path))?;
    let ft = meta.file_type();
    if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
        fs::remove_file(path).map_err(io_err("remove special file", path))?;
        done.special += 1;
        return Ok(());
    }
    if meta.uid() != owner.0.as_raw() || meta.gid() != owner.1.as_raw() {
        // lchown: a symlink's own owner, never its target's.
        rustix::fs::chownat(
            rustix::fs::CWD,
            path,
            Some(owner.0),
            Some(owner.1),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| ImageError::Io {
            step: "chown",
            path: path.to_path_buf(),
            source: e.into(),
        })?;
    }
    if ft.is_symlink() {
        return Ok(());
    }
    if ft.is_dir() {
        for e in sorted_entries(path)? {
            prepare_entry(&e.path(), owner, done)?;
        }
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o6000 != 0 {
        done.setid += 1;
    }
    if mode & KEPT_MODE != mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & KEPT_MODE))
            .map_err(io_err("chmod", path))?;
    }
    Ok(())
}

/// Copies the directory `src` into `dest` (which must not exist): symlinks
/// as symlinks, regular files, directories, modes. Device nodes, fifos and
/// sockets are skipped, each reported to `warn`.
pub(crate) fn copy_dir(
    src: &Path,
    dest: &Path,
    warn: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    let meta = fs::symlink_metadata(src).map_err(io_err("stat", src))?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .map_err(io_err("mkdir", dest))?;
    copy_children(src, dest, warn)?;
    fs::set_permissions(dest, fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(io_err("chmod", dest))
}

fn copy_children(src: &Path, dest: &Path, warn: &mut dyn FnMut(&str)) -> Result<(), ImageError> {
    for e in sorted_entries(src)? {
        let from = e.path();
        let to = dest.join(e.file_name());
        let meta = fs::symlink_metadata(&from).map_err(io_err("stat", &from))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(&from).map_err(io_err("readlink", &from))?;
            std::os::unix::fs::symlink(&target, &to).map_err(io_err("symlink", &to))?;
        } else if ft.is_dir() {
            copy_dir(&from, &to, warn)?;
        } else if ft.is_file() {
            let mut input = open_nofollow(&from)?;
            // The source may change under us: what was opened must still be
            // a regular file (a fifo swapped in would block or feed garbage).
            let opened = input.metadata().map_err(io_err("stat", &from))?;
            if !opened.is_file() {
                return Err(ImageError::Io {
                    step: "copy",
                    path: from,
                    source: io::Error::other("changed from a regular file while importing"),
                });
            }
            write_file(&to, &mut input, meta.mode())?;
        } else {
            warn(&format!(
                "skipped `{}`: device nodes, fifos and sockets are not stored (the sandbox gets its own /dev)",
                from.display()
            ));
        }
    }
    Ok(())
}

fn write_file(to: &Path, input: &mut dyn Read, mode: u32) -> Result<(), ImageError> {
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io_err("create", to))?;
    io::copy(input, &mut out).map_err(io_err("write", to))?;
    out.flush().map_err(io_err("write", to))?;
    out.set_permissions(fs::Permissions::from_mode(mode & 0o7777))
        .map_err(io_err("chmod", to))
}

/// A tar entry path as a relative path without `.`: refuses `..` anywhere and
/// absolute paths. `None` is the archive's root (`./`).
pub(crate) fn tar_relative(raw: &Path) -> Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err("it contains `..`".into()),
            Component::RootDir | Component::Prefix(_) => {
                return Err("it is an absolute path".into())
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Every parent of `rel` below `root` must be a real directory (created here
/// when missing); a symlink or file on the way is refused.
fn real_parents(root: &Path, rel: &Path) -> Result<(), String> {
    let mut at = root.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "its parent `{}` is not a directory in the archive (a link or file)",
                    at.strip_prefix(root).unwrap_or(&at).display()
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o755)
                    .create(&at)
                    .map_err(|e| format!("mkdir: {e}"))?;
            }
            Err(e) => return Err(format!("stat: {e}")),
        }
    }
    Ok(())
}

/// Unpacks the tar stream `input` into `dest` (which must not exist).
/// Refuses entries with `..` or an absolute path, entries whose parent is a
/// link, hard links to anything but a regular file already unpacked, and
/// sparse or unknown entry types; skips device nodes and fifos with a
/// warning. Directory modes are applied last, so a read-only directory in
/// the archive does not stop its own contents.
pub(crate) fn unpack_tar(
    input: &mut dyn Read,
    archive: &Path,
    dest: &Path,
    warn: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .map_err(io_err("mkdir", dest))?;
    let mut u = Unpacker::new(dest, false);
    u.apply(input, archive, warn)?;
    u.finish()
}

/// The whiteout prefix of image layers: `.wh.NAME` deletes `NAME` of the
/// layers below.
const WHITEOUT: &str = ".wh.";
/// A layer's marker that its directory hides everything below it.
const OPAQUE: &str = ".wh..wh..opq";

/// Applies tar streams onto one tree, in order: a plain archive (`layered`
/// false) or the layers of an image (`layered` true: whiteouts honoured, an
/// entry may replace what a lower layer left, even a directory).
pub(crate) struct Unpacker {
    dest: PathBuf,
    layered: bool,
    /// Directories and their archive modes, applied by [`Unpacker::finish`].
    dir_modes: Vec<(PathBuf, u32)>,
    /// Relative paths the current layer wrote, with their parents: a
    /// whiteout or an opaque marker removes only what lower layers left.
    this_layer: HashSet<PathBuf>,
    /// Entries skipped (device nodes, fifos) over every stream.
    pub(crate) skipped: u64,
}

impl Unpacker {
    pub(crate) fn new(dest: &Path, layered: bool) -> Unpacker {
        Unpacker {
            dest: dest.to_path_buf(),
            layered,
            dir_modes: Vec::new(),
            this_layer: HashSet::new(),
            skipped: 0,
        }
    }

    fn mark(&mut self, rel: &Path) {
        let mut p = rel;
        loop {
            if !self.this_layer.insert(p.to_path_buf()) {
                break;
            }
            match p.parent() {
                Some(q) if !q.as_os_str().is_empty() => p = q,
                _ => break,
            }
        }
    }

    /// Removes `rel` (a file, link or whole directory, never following a
    /// link) and forgets the modes of directories that went with it.
    fn remove(&mut self, rel: &Path) -> Result<(), ImageError> {
        let at = self.dest.join(rel);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&at).map_err(io_err("remove", &at))?,
            Ok(_) => fs::remove_file(&at).map_err(io_err("remove", &at))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("stat", &at)(e)),
        }
        self.dir_modes.retain(|(p, _)| !p.starts_with(&at));
        Ok(())
    }

    /// An opaque directory: what lower layers left beneath `dir` goes; what
    /// this layer wrote stays.
    fn make_opaque(&mut self, dir: &Path) -> Result<(), ImageError> {
        for e in sorted_entries(&self.dest.join(dir))? {
            let rel = dir.join(e.file_name());
            if !self.this_layer.contains(&rel) {
                self.remove(&rel)?;
            } else if fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir()) {
                self.make_opaque(&rel)?;
            }
        }
        Ok(())
    }

    /// Applies one tar stream. In layered mode, call once per layer, lowest
    /// first.
    pub(crate) fn apply(
        &mut self,
        input: &mut dyn Read,
        archive: &Path,
        warn: &mut dyn FnMut(&str),
    ) -> Result<(), ImageError> {
        self.this_layer.clear();
        let dest = self.dest.clone();
        let mut ar = tar::Archive::new(input);
        let bad_archive = |source: io::Error| ImageError::Io {
            step: "read archive",
            path: archive.to_path_buf(),
            source,
        };
        for entry in ar.entries().map_err(bad_archive)? {
            let mut entry = entry.map_err(bad_archive)?;
            let kind = entry.header().entry_type();
            if kind.is_pax_global_extensions()
                || kind.is_pax_local_extensions()
                || kind.is_gnu_longname()
                || kind.is_gnu_longlink()
            {
                continue;
            }
            let raw = entry.path().map_err(bad_archive)?.into_owned();
            let refuse = |reason: String| ImageError::UnsafeEntry {
                archive: archive.to_path_buf(),
                entry: raw.clone(),
                reason,
            };
            let mode = entry.header().mode().map_err(bad_archive)?;
            let Some(rel) = tar_relative(&raw).map_err(refuse)? else {
                if kind.is_dir() {
                    continue; // the root: its mode is the store's
                }
                return Err(refuse("the archive's root is not a directory".into()));
            };
            if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
                self.skipped += 1;
                warn(&format!(
                    "skipped `{}` in `{}`: device nodes and fifos are not stored (the sandbox gets its own /dev)",
                    raw.display(),
                    archive.display()
                ));
                continue;
            }
            let file_name = rel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if self.layered && file_name.starts_with(WHITEOUT) {
                // A whiteout in a directory no layer made hides nothing
                // (and makes no directory); one beneath a link is refused
                // like any entry.
                if !parents_exist(&dest, &rel).map_err(refuse)? {
                    continue;
                }
                let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
                self.mark(&parent);
                if file_name == OPAQUE {
                    self.make_opaque(&parent)?;
                    continue;
                }
                let hidden = &file_name[WHITEOUT.len()..];
                if hidden.is_empty() || hidden == "." || hidden == ".." {
                    return Err(refuse("a whiteout that names no entry".into()));
                }
                if hidden.starts_with(WHITEOUT) {
                    // Other `.wh..wh.` names are the layer tool's own
                    // bookkeeping (aufs hard-link dirs), not content.
                    continue;
                }
                let victim = parent.join(hidden);
                if !self.this_layer.contains(&victim) {
                    self.remove(&victim)?;
                }
                continue;
            }
            real_parents(&dest, &rel).map_err(refuse)?;
            let to = dest.join(&rel);
            let existing = fs::symlink_metadata(&to).ok();
            let mut exists_as_dir = false;
            match &existing {
                Some(m) if m.is_dir() && kind.is_dir() => exists_as_dir = true,
                Some(m) if m.is_dir() => {
                    if !self.layered || self.this_layer.contains(&rel) {
                        return Err(refuse("it replaces a directory of the archive".into()));
                    }
                    // A lower layer's directory replaced by this layer's
                    // file or link.
                    self.remove(&rel)?;
                }
                Some(_) => fs::remove_file(&to).map_err(io_err("replace", &to))?,
                None => {}
            }
            self.mark(&rel);
            if kind.is_dir() {
                if !exists_as_dir {
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&to)
                        .map_err(io_err("mkdir", &to))?;
                }
                self.dir_modes.retain(|(p, _)| p != &to);
                self.dir_modes.push((to, mode));
            } else if kind.is_symlink() {
                // The target is data: stored as written, never resolved here.
                let target = entry
                    .link_name()
                    .map_err(bad_archive)?
                    .ok_or_else(|| refuse("a symlink without a target".into()))?;
                std::os::unix::fs::symlink(&target, &to).map_err(io_err("symlink", &to))?;
            } else if kind.is_hard_link() {
                let target = entry
                    .link_name()
                    .map_err(bad_archive)?
                    .ok_or_else(|| refuse("a hard link without a target".into()))?;
                let target = tar_relative(&target)
                    .map_err(|r| refuse(format!("its link target is unsafe: {r}")))?
                    .ok_or_else(|| refuse("a hard link to the archive's root".into()))?;
                check_parents(&dest, &target).map_err(refuse)?;
                let src = dest.join(&target);
                match fs::symlink_metadata(&src) {
                    Ok(m) if m.is_file() => {}
                    _ => return Err(refuse(
                        "a hard link to something that is not a regular file earlier in the archive"
                            .into(),
                    )),
                }
                fs::hard_link(&src, &to).map_err(io_err("link", &to))?;
            } else if kind.is_file() || kind.is_contiguous() {
                write_file(&to, &mut entry, mode)?;
            } else {
                return Err(refuse(format!(
                    "entry type {:?} is not supported",
                    kind.as_byte() as char
                )));
            }
        }
        Ok(())
    }

    /// Sets the directories' modes, deepest first, so a directory without
    /// write permission is set after everything beneath it.
    pub(crate) fn finish(mut self) -> Result<(), ImageError> {
        self.dir_modes
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (p, mode) in self.dir_modes {
            fs::set_permissions(&p, fs::Permissions::from_mode(mode & 0o7777))
                .map_err(io_err("chmod", &p))?;
        }
        Ok(())
    }
}

/// Whether every parent of `rel` below `root` exists; each that does must
/// be a real directory (nothing is created): for a whiteout.
fn parents_exist(root: &Path, rel: &Path) -> Result<bool, String> {
    let mut at = root.to_path_buf();
    for c in rel.parent().into_iter().flat_map(Path::components) {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "its parent `{}` is not a directory in the archive (a link or file)",
                    at.strip_prefix(root).unwrap_or(&at).display()
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("stat: {e}")),
        }
    }
    Ok(true)
}

/// Every parent of `rel` below `root` must already be a real directory
/// (nothing is created): for a hard link's target.
fn check_parents(root: &Path, rel: &Path) -> Result<(), String> {
    let mut at = root.to_path_buf();
    for c in rel.parent().into_iter().flat_map(Path::components) {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(format!(
                    "its link target's parent `{}` is not a directory unpacked before it",
                    at.strip_prefix(root).unwrap_or(&at).display()
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_paths_with_dotdot_or_absolute_are_refused() {
        assert!(tar_relative(Path::new("../etc/passwd")).is_err());
        assert!(tar_relative(Path::new("a/../../b")).is_err());
        assert!(tar_relative(Path::new("a/../b")).is_err());
        assert!(tar_relative(Path::new("/etc/passwd")).is_err());
        assert_eq!(
            tar_relative(Path::new("./usr/bin")).ok().flatten(),
            Some(PathBuf::from("usr/bin"))
        );
        assert_eq!(tar_relative(Path::new("./")).ok(), Some(None));
    }
}
