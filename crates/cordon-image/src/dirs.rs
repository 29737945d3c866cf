//! The store's files on disk, below [`crate::ImageStore`]: checked
//! directories, `flock`s, unique names, and removal of a tree (unmounting
//! what a killed build left mounted in it).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{io_err, rio_err, ImageError};

static NEXT: AtomicU64 = AtomicU64::new(0);

pub(crate) fn unique() -> String {
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

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks one directory of the store (or above it). `own`: it must belong
/// to us and not be writable by group or others; otherwise it must belong to
/// root or us and be writable by others only with the sticky bit.
pub(crate) fn check_dir(path: &Path, own: bool) -> Result<(), ImageError> {
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

pub(crate) fn mkdir_mode(path: &Path, mode: u32) -> Result<(), ImageError> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", path)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("mkdir", path)(e)),
    }
}

/// An exclusive `flock` on a file, released on drop.
pub(crate) struct Lock(#[expect(dead_code, reason = "held for its lock")] File);

pub(crate) fn lock_file(path: &Path, block: bool) -> Result<Option<Lock>, ImageError> {
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

pub(crate) fn lock_fd(f: File, path: &Path, block: bool) -> Result<Option<Lock>, ImageError> {
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
pub(crate) fn unmount_beneath(dir: &Path) {
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

pub(crate) fn unescape_mountinfo(s: &str) -> PathBuf {
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

pub(crate) fn remove_tree(path: &Path) -> Result<(), ImageError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo("/a\\040b"), PathBuf::from("/a b"));
    }
}
