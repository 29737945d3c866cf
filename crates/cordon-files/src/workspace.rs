//! A workspace's changes, read from its upper layer and written back into
//! its directory (`cordon_linux::workspace` mounts the layers).
//!
//! **Diff** walks the upper layer only — it holds exactly what the sandbox
//! wrote — and compares each entry with the directory as it is now: a
//! file there with the same bytes and mode is no change (a file the
//! sandbox opened for writing and left alone is copied up all the same); a
//! whiteout (a character device 0:0) is a removal; an opaque directory
//! (`trusted.overlay.opaque`) hides what the directory held, so what the
//! directory has and the upper layer does not is a removal.
//!
//! **Apply** writes through descriptors, never paths: the directory and
//! the upper layer are opened once; everything beneath either is opened
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a link the
//! workload planted (or the host has) on a path leads nowhere. A file is
//! written to a temporary name beside its destination and renamed into
//! place; its mode keeps only the permission bits (no set-id, no sticky);
//! a new file or directory is its directory's owner's, a replaced file
//! keeps its owner. A link is written only when its target stays within
//! the directory (relative, and no `..` past the root). A path the host
//! changed since the sandbox was made (its `ctime` is later, and not by
//! an earlier apply) is refused, and so is an addition into a directory
//! whose entries the host changed meanwhile: the others are applied.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

use cordon_sandbox::{ApplyReport, Change, FileKind, RefusedChange, SandboxError, WorkspaceChange};

/// The most changes a diff lists; a sandbox that changed more is told to
/// collect its results another way.
pub const MAX_CHANGES: usize = 100_000;

/// A workspace: its directory, its upper layer, and when the sandbox began
/// to see the directory.
#[derive(Debug)]
pub struct Workspace {
    dir: PathBuf,
    upper: PathBuf,
    /// `ctime` at or after this (seconds, nanoseconds) is a change the
    /// sandbox did not see: [`Workspace::clock`] before the mount.
    since: (i64, i64),
    /// The directory's owner: what new files are given.
    owner: (u32, u32),
    /// What this workspace's own applies left behind: a path's inode and
    /// `ctime` after apply wrote it (or an entry in it), which is not a
    /// change of the host's.
    written: Mutex<HashMap<String, (u64, i64, i64)>>,
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn failed(operation: &'static str, path: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Failed {
        operation,
        reason: format!("`{path}`: {e}"),
    }
}

fn kind_of(st: &rustix::fs::Stat) -> FileKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

fn is_whiteout(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// `rel` opened beneath `root` (`""`: `root` itself) with `flags`.
fn open_at(root: &OwnedFd, rel: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        if rel.is_empty() { "." } else { rel },
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )
}

fn stat_at(root: &OwnedFd, rel: &str) -> Result<Option<rustix::fs::Stat>, Errno> {
    match open_at(root, rel, OFlags::PATH) {
        Ok(fd) => rustix::fs::fstat(&fd).map(Some),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

fn names(dir: &OwnedFd) -> Result<Vec<String>, Errno> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::new(fd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        // A name that is not UTF-8 cannot be named on any surface; it is
        // listed lossily and then refused by the name check at apply.
        out.push(String::from_utf8_lossy(n).into_owned());
    }
    out.sort();
    Ok(out)
}

fn same_bytes(a: OwnedFd, b: OwnedFd) -> std::io::Result<bool> {
    let (mut a, mut b) = (std::fs::File::from(a), std::fs::File::from(b));
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = a.read(&mut x)?;
        if n == 0 {
            return Ok(b.read(&mut y[..1])? == 0);
        }
        let mut got = 0;
        while got < n {
            let m = b.read(&mut y[got..n])?;
            if m == 0 {
                return Ok(false);
            }
            got += m;
        }
        if x[..n] != y[..n] {
            return Ok(false);
        }
    }
}

fn link_target(dir: &OwnedFd, rel: &str) -> Result<String, Errno> {
    let (parent, leaf) = match rel.rsplit_once('/') {
        Some((p, l)) => (Some(open_at(dir, p, OFlags::PATH | OFlags::DIRECTORY)?), l),
        None => (None, rel),
    };
    let at = parent.as_ref().unwrap_or(dir);
    let t = rustix::fs::readlinkat(at, leaf, Vec::new())?;
    Ok(t.to_string_lossy().into_owned())
}

/// Whether a link at `rel` to `target` stays within the directory it is
/// written into: relative, and never climbing past its root.
fn target_stays_within(rel: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') {
        return false;
    }
    let mut depth: i64 = rel.matches('/').count() as i64;
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

impl Workspace {
    /// The workspace over `dir` (canonical, the host's) whose changes are
    /// in `upper`; `owner` is `dir`'s; `since` is [`Workspace::clock`]
    /// read before the layers were mounted.
    pub fn new(dir: &Path, upper: &Path, owner: (u32, u32), since: (i64, i64)) -> Workspace {
        Workspace {
            dir: dir.to_path_buf(),
            upper: upper.to_path_buf(),
            since,
            owner,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Now, on the clock filesystems stamp `ctime` with (the kernel's
    /// coarse realtime clock): a change made after this reads has a
    /// `ctime` at or after it. One made within the same tick before it
    /// may too, and is then taken for the host's — refused, never lost.
    pub fn clock() -> (i64, i64) {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        (t.tv_sec, t.tv_nsec)
    }

    /// The host directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn open_roots(&self) -> Result<(OwnedFd, OwnedFd), SandboxError> {
        let open = |p: &Path| {
            rustix::fs::openat(
                CWD,
                p,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| failed("open the workspace", &p.display().to_string(), e))
        };
        Ok((open(&self.dir)?, open(&self.upper)?))
    }

    /// Every change, sorted by path (a directory before what is in it).
    pub fn diff(&self) -> Result<Vec<WorkspaceChange>, SandboxError> {
        let (dir, upper) = self.open_roots()?;
        let mut out = Vec::new();
        self.walk(&upper, &dir, "", true, &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn walk(
        &self,
        upper: &OwnedFd,
        dir: &OwnedFd,
        rel: &str,
        lower_is_dir: bool,
        out: &mut Vec<WorkspaceChange>,
    ) -> Result<(), SandboxError> {
        let io = |e: Errno| failed("read the workspace's changes", rel, e);
        let here = open_at(upper, rel, OFlags::RDONLY | OFlags::DIRECTORY).map_err(io)?;
        let in_upper = names(&here).map_err(io)?;
        for name in &in_upper {
            if out.len() > MAX_CHANGES {
                return Err(SandboxError::Invalid {
                    reason: format!("the sandbox changed more than {MAX_CHANGES} paths in its workspace; apply a directory at a time (`apply PATH`), or collect its results as outputs"),
                });
            }
            let path = join(rel, name);
            let st = stat_at(upper, &path)
                .map_err(io)?
                .ok_or_else(|| io(Errno::NOENT))?;
            let lower = if lower_is_dir {
                stat_at(dir, &path).map_err(io)?
            } else {
                None
            };
            let change = |change, st: &rustix::fs::Stat| WorkspaceChange {
                path: path.clone(),
                change,
                kind: kind_of(st),
                size: (kind_of(st) == FileKind::File).then_some(st.st_size as u64),
            };
            if is_whiteout(&st) {
                if let Some(l) = &lower {
                    out.push(change(Change::Removed, l));
                }
                continue;
            }
            let added_or_modified = if lower.is_some() {
                Change::Modified
            } else {
                Change::Added
            };
            match kind_of(&st) {
                FileKind::Dir => {
                    let lower_dir = lower.as_ref().is_some_and(|l| kind_of(l) == FileKind::Dir);
                    if !lower_dir {
                        out.push(change(added_or_modified, &st));
                    }
                    self.walk(upper, dir, &path, lower_dir, out)?;
                    if lower_dir && self.opaque(upper, &path)? {
                        let sub =
                            open_at(dir, &path, OFlags::PATH | OFlags::DIRECTORY).map_err(io)?;
                        let kept = names(
                            &open_at(upper, &path, OFlags::PATH | OFlags::DIRECTORY).map_err(io)?,
                        )
                        .map_err(io)?;
                        for n in names(&sub).map_err(io)? {
                            if kept.binary_search(&n).is_err() {
                                let p = join(&path, &n);
                                if let Some(l) = stat_at(dir, &p).map_err(io)? {
                                    out.push(WorkspaceChange {
                                        path: p,
                                        change: Change::Removed,
                                        kind: kind_of(&l),
                                        size: (kind_of(&l) == FileKind::File)
                                            .then_some(l.st_size as u64),
                                    });
                                }
                            }
                        }
                    }
                }
                FileKind::File => {
                    let same = match &lower {
                        Some(l)
                            if kind_of(l) == FileKind::File
                                && l.st_size == st.st_size
                                && (l.st_mode & 0o777) == (st.st_mode & 0o777) =>
                        {
                            let a = open_at(upper, &path, OFlags::RDONLY | OFlags::NONBLOCK)
                                .map_err(io)?;
                            let b = open_at(dir, &path, OFlags::RDONLY | OFlags::NONBLOCK)
                                .map_err(io)?;
                            same_bytes(a, b).map_err(|e| failed("compare", &path, e))?
                        }
                        _ => false,
                    };
                    if !same {
                        out.push(change(added_or_modified, &st));
                    }
                }
                FileKind::Symlink => {
                    let same = match &lower {
                        Some(l) if kind_of(l) == FileKind::Symlink => {
                            link_target(upper, &path).map_err(io)?
                                == link_target(dir, &path).map_err(io)?
                        }
                        _ => false,
                    };
                    if !same {
                        out.push(change(added_or_modified, &st));
                    }
                }
                FileKind::Other => out.push(change(added_or_modified, &st)),
            }
        }
        Ok(())
    }

    /// Whether the upper layer's directory `rel` is opaque (hides what
    /// the directory held). Unreadable is an error, never "not opaque": a
    /// diff that took it so would leave out the removals it stands for,
    /// and an apply would keep files the sandbox removed.
    fn opaque(&self, upper: &OwnedFd, rel: &str) -> Result<bool, SandboxError> {
        let fd = open_at(upper, rel, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| failed("diff", rel, e))?;
        let mut v = [0u8; 4];
        match rustix::fs::fgetxattr(&fd, "trusted.overlay.opaque", &mut v) {
            Ok(n) => Ok(n == 1 && v[0] == b'y'),
            Err(rustix::io::Errno::NODATA) => Ok(false),
            Err(e) => Err(failed(
                "diff",
                rel,
                format!("its overlay opaque mark cannot be read: {e}"),
            )),
        }
    }

    /// Applies the changes at or beneath `only`'s paths (all when empty).
    pub fn apply(&self, only: &[String]) -> Result<ApplyReport, SandboxError> {
        let only: Vec<String> = only
            .iter()
            .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
            .collect();
        let wanted = |p: &str| {
            only.is_empty()
                || only
                    .iter()
                    .any(|o| o.is_empty() || o == "." || p == o || p.starts_with(&format!("{o}/")))
        };
        let changes: Vec<WorkspaceChange> = self
            .diff()?
            .into_iter()
            .filter(|c| wanted(&c.path))
            .collect();
        let mut report = ApplyReport::default();
        for o in &only {
            if !o.is_empty()
                && o != "."
                && !changes
                    .iter()
                    .any(|c| c.path == *o || c.path.starts_with(&format!("{o}/")))
            {
                report.refused.push(RefusedChange {
                    path: o.clone(),
                    reason: "the sandbox changed nothing at or beneath this path".into(),
                });
            }
        }
        let (dir, upper) = self.open_roots()?;
        // Decided before anything is written: an earlier change of this
        // apply must not make a later one look like the host's.
        let verdicts: Vec<Option<String>> =
            changes.iter().map(|c| self.conflict(&dir, c)).collect();
        let mut removed: Vec<String> = Vec::new();
        for (c, verdict) in changes.into_iter().zip(verdicts) {
            if removed.iter().any(|r| c.path.starts_with(&format!("{r}/"))) {
                continue; // inside a directory this apply removed
            }
            let done = match verdict {
                Some(reason) => Err(reason),
                None => self.apply_one(&dir, &upper, &c),
            };
            match done {
                Ok(()) => {
                    if c.change == Change::Removed && c.kind == FileKind::Dir {
                        removed.push(c.path.clone());
                    }
                    self.remember(&dir, &c.path);
                    report.applied.push(c);
                }
                Err(reason) => report.refused.push(RefusedChange {
                    path: c.path,
                    reason,
                }),
            }
        }
        Ok(report)
    }

    /// Why `c` must not be applied because the host changed its path (or,
    /// for an addition, the directory it goes in) since the sandbox saw it.
    fn conflict(&self, dir: &OwnedFd, c: &WorkspaceChange) -> Option<String> {
        if cordon_sandbox::validate_artifact_name(&c.path).is_err() {
            return Some("the name is not one cordon writes (a relative path of UTF-8 segments, none `.` or `..`)".into());
        }
        let changed = |rel: &str| -> Result<bool, Errno> {
            let Some(st) = stat_at(dir, rel)? else {
                return Ok(false);
            };
            let ct = (st.st_ctime, st.st_ctime_nsec as i64);
            if ct < self.since {
                return Ok(false);
            }
            let mine = self.written.lock().ok().and_then(|w| w.get(rel).copied());
            Ok(mine != Some((st.st_ino, ct.0, ct.1)))
        };
        let what = match c.change {
            Change::Added => c.path.rsplit_once('/').map_or("", |(p, _)| p).to_string(),
            _ => c.path.clone(),
        };
        let mut check = vec![what];
        if c.change == Change::Removed && c.kind == FileKind::Dir {
            let mut under = Vec::new();
            if let Err(e) = self.tree(dir, &c.path, &mut under) {
                return Some(format!("cannot look through the directory: {e}"));
            }
            check.extend(under);
        }
        for rel in &check {
            match changed(rel) {
                Ok(false) => {}
                Ok(true) => {
                    let shown = if rel.is_empty() {
                        "the workspace's top directory".to_string()
                    } else {
                        format!("`{rel}`")
                    };
                    return Some(format!("{shown} changed in the directory since the sandbox was made, so the sandbox's version could overwrite work it never saw; look at both and copy by hand (or apply after making a new sandbox over the current directory)"));
                }
                Err(e) => return Some(format!("cannot stat `{rel}` in the directory: {e}")),
            }
        }
        None
    }

    fn tree(&self, dir: &OwnedFd, rel: &str, out: &mut Vec<String>) -> Result<(), Errno> {
        let fd = open_at(dir, rel, OFlags::PATH | OFlags::DIRECTORY)?;
        for n in names(&fd)? {
            let p = join(rel, &n);
            out.push(p.clone());
            if stat_at(dir, &p)?.is_some_and(|s| kind_of(&s) == FileKind::Dir) {
                self.tree(dir, &p, out)?;
            }
        }
        Ok(())
    }

    /// Notes what `rel` (and its directory) are after this apply wrote
    /// them, so a later apply does not take them for the host's changes.
    fn remember(&self, dir: &OwnedFd, rel: &str) {
        let parent = rel.rsplit_once('/').map_or("", |(p, _)| p);
        let Ok(mut w) = self.written.lock() else {
            return;
        };
        for p in [rel, parent] {
            if let Ok(Some(st)) = stat_at(dir, p) {
                w.insert(
                    p.to_string(),
                    (st.st_ino, st.st_ctime, st.st_ctime_nsec as i64),
                );
            }
        }
    }

    fn apply_one(&self, dir: &OwnedFd, upper: &OwnedFd, c: &WorkspaceChange) -> Result<(), String> {
        let (parent_rel, leaf) = c.path.rsplit_once('/').unwrap_or(("", &c.path));
        if c.change == Change::Removed {
            let parent = open_at(dir, parent_rel, OFlags::PATH | OFlags::DIRECTORY)
                .map_err(|e| e.to_string())?;
            return if c.kind == FileKind::Dir {
                remove_tree(&parent, leaf).map_err(|e| format!("cannot remove the directory: {e}"))
            } else {
                rustix::fs::unlinkat(&parent, leaf, AtFlags::empty())
                    .map_err(|e| format!("cannot remove: {e}"))
            };
        }
        let st = stat_at(upper, &c.path)
            .map_err(|e| e.to_string())?
            .ok_or("the sandbox's version is gone")?;
        let mode = st.st_mode & 0o777;
        let parent = self.make_dirs(dir, parent_rel)?;
        let existing = stat_at(dir, &c.path).map_err(|e| e.to_string())?;
        match kind_of(&st) {
            FileKind::Dir => {
                if let Some(e) = &existing {
                    if kind_of(e) == FileKind::Dir {
                        return Ok(());
                    }
                    rustix::fs::unlinkat(&parent, leaf, AtFlags::empty()).map_err(|e| format!("cannot replace: {e}"))?;
                }
                rustix::fs::mkdirat(&parent, leaf, Mode::from_raw_mode(mode)).map_err(|e| format!("cannot create the directory: {e}"))?;
                let made = rustix::fs::openat(&parent, leaf, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(|e| e.to_string())?;
                self.hand_over(&made, None)
            }
            FileKind::File => {
                if existing.as_ref().is_some_and(|e| kind_of(e) == FileKind::Dir) {
                    return Err("a directory is there in the workspace; remove it by hand first".into());
                }
                let src = open_at(upper, &c.path, OFlags::RDONLY | OFlags::NONBLOCK).map_err(|e| e.to_string())?;
                let owner = existing.as_ref().map(|e| (e.st_uid, e.st_gid));
                self.write_into(&parent, leaf, |tmp| {
                    let mut to = std::fs::File::from(tmp.try_clone().map_err(|e| e.to_string())?);
                    std::io::copy(&mut std::fs::File::from(src), &mut to).map_err(|e| format!("cannot copy: {e}"))?;
                    to.sync_all().map_err(|e| format!("cannot sync: {e}"))?;
                    rustix::fs::fchmod(tmp, Mode::from_raw_mode(mode)).map_err(|e| e.to_string())?;
                    self.hand_over(tmp, owner)
                })
            }
            FileKind::Symlink => {
                let target = link_target(upper, &c.path).map_err(|e| e.to_string())?;
                if !target_stays_within(&c.path, &target) {
                    return Err(format!("a link to `{target}` would point out of the workspace; cordon writes no link that leads out of it"));
                }
                if existing.as_ref().is_some_and(|e| kind_of(e) == FileKind::Dir) {
                    return Err("a directory is there in the workspace; remove it by hand first".into());
                }
                let tmp = temp_name();
                rustix::fs::symlinkat(target.as_str(), &parent, tmp.as_str()).map_err(|e| format!("cannot create the link: {e}"))?;
                let placed = rustix::fs::renameat(&parent, tmp.as_str(), &parent, leaf);
                if let Err(e) = placed {
                    let _ = rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty());
                    return Err(format!("cannot put the link in place: {e}"));
                }
                let owner = (rustix::fs::Uid::from_raw(self.owner.0), rustix::fs::Gid::from_raw(self.owner.1));
                rustix::fs::chownat(&parent, leaf, Some(owner.0), Some(owner.1), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| e.to_string())
            }
            FileKind::Other => Err("the sandbox made a FIFO, socket or device here; only files, directories and links are applied".into()),
        }
    }

    /// The directory `rel` beneath `dir`, made (each new one its owner's,
    /// 0755) where absent; a link or a file in the way is refused.
    fn make_dirs(&self, dir: &OwnedFd, rel: &str) -> Result<OwnedFd, String> {
        let mut cur =
            open_at(dir, "", OFlags::PATH | OFlags::DIRECTORY).map_err(|e| e.to_string())?;
        if rel.is_empty() {
            return Ok(cur);
        }
        for seg in rel.split('/') {
            let made = match rustix::fs::mkdirat(&cur, seg, Mode::from_raw_mode(0o755)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(format!("cannot create `{rel}`: {e}")),
            };
            let next = open_at(&cur, seg, OFlags::PATH | OFlags::DIRECTORY).map_err(|e| {
                format!("`{rel}` is not a directory the workspace can be written through ({e})")
            })?;
            if made {
                self.hand_over(&next, None)?;
            }
            cur = next;
        }
        Ok(cur)
    }

    fn hand_over(&self, fd: &OwnedFd, owner: Option<(u32, u32)>) -> Result<(), String> {
        let (u, g) = owner.unwrap_or(self.owner);
        rustix::fs::chownat(
            fd,
            "",
            Some(rustix::fs::Uid::from_raw(u)),
            Some(rustix::fs::Gid::from_raw(g)),
            AtFlags::EMPTY_PATH,
        )
        .map_err(|e| format!("cannot hand over to {u}:{g}: {e}"))
    }

    fn write_into(
        &self,
        parent: &OwnedFd,
        leaf: &str,
        fill: impl FnOnce(&OwnedFd) -> Result<(), String>,
    ) -> Result<(), String> {
        let tmp = temp_name();
        let fd = rustix::fs::openat2(
            parent,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            beneath(),
        )
        .map_err(|e| format!("cannot create a temporary file: {e}"))?;
        let done = fill(&fd).and_then(|()| {
            rustix::fs::renameat(parent, tmp.as_str(), parent, leaf)
                .map_err(|e| format!("cannot put the file in place: {e}"))
        });
        if done.is_err() {
            let _ = rustix::fs::unlinkat(parent.as_fd(), tmp.as_str(), AtFlags::empty());
        }
        done
    }
}

fn temp_name() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        ".cordon-apply-{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Removes `leaf` (a directory) beneath `parent` and everything in it,
/// through descriptors, following no link.
fn remove_tree(parent: &OwnedFd, leaf: &str) -> Result<(), Errno> {
    let fd = rustix::fs::openat2(
        parent,
        leaf,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )?;
    for n in names(&fd)? {
        let st = rustix::fs::statat(&fd, n.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        if kind_of(&st) == FileKind::Dir {
            remove_tree(&fd, &n)?;
        } else {
            rustix::fs::unlinkat(&fd, n.as_str(), AtFlags::empty())?;
        }
    }
    rustix::fs::unlinkat(parent, leaf, AtFlags::REMOVEDIR)
}

/// Directories never made a workspace: the host's system trees (a
/// sandbox would read all of it) and the pseudo-filesystems.
pub fn refuse_system_dir(real: &Path, what: &str) -> Result<(), String> {
    let system = [
        "/", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp",
        "/root", "/home", "/var", "/run", "/boot",
    ];
    if system.iter().any(|s| real == Path::new(s))
        || ["/proc", "/sys", "/dev", "/run/cordon", "/etc"]
            .iter()
            .any(|p| real.starts_with(p))
    {
        return Err(format!(
            "{what} `{}` is a system directory; give the sandbox a directory of its own (a project's)",
            real.display()
        ));
    }
    Ok(())
}

/// The host directory a spec names as its workspace, checked: it exists
/// and is a directory, and not a system one. Returns its canonical path
/// and its owner.
pub fn check_dir(dir: &str) -> Result<(PathBuf, (u32, u32)), String> {
    let real = Path::new(dir)
        .canonicalize()
        .map_err(|e| format!("workspace `{dir}`: {e}\nhelp: name an existing directory"))?;
    let meta =
        std::fs::metadata(&real).map_err(|e| format!("workspace `{}`: {e}", real.display()))?;
    if !meta.is_dir() {
        return Err(format!("workspace `{}` is not a directory", real.display()));
    }
    refuse_system_dir(&real, "workspace")?;
    Ok((real, (meta.uid(), meta.gid())))
}

#[cfg(test)]
mod tests {
    use super::target_stays_within;

    #[test]
    fn a_link_target_must_stay_within_the_workspace() {
        assert!(target_stays_within("a", "b"));
        assert!(target_stays_within("d/a", "../b"));
        assert!(target_stays_within("d/e/a", "../../b"));
        assert!(!target_stays_within("d/a", "../../b"));
        assert!(!target_stays_within("a", "../x"));
        assert!(!target_stays_within("a", "/etc/passwd"));
        assert!(!target_stays_within("a", ""));
        assert!(target_stays_within("a", "./b/../c"));
        assert!(!target_stays_within("a", "b/../../c"));
    }
}
