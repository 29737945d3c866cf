//! The container rung's fresh root, built in stage 2 (inside the new user
//! and mount namespaces, before `pivot_root`).
//!
//! Every source is opened `O_PATH` *before* anything is mounted, and bound
//! from `/proc/self/fd/N`, so a symlink swapped in during setup cannot
//! redirect a bind, and the tmpfs the root is built on (mounted over `/tmp`
//! in the private mount namespace) cannot hide a source under the host's
//! `/tmp`.
//!
//! Two images: the built-in `host` image ([`HOST_IMAGE`], plus host paths
//! the plan grants, each bound at its own path), or a stored image
//! (`Plan::image_root`): every top-level entry of the image but
//! [`IMAGE_SKIPPED`] (directories and files bound read-only, symlinks
//! recreated), and no host path from the plan's rules, whose paths then
//! name paths inside the image. Either way the work dir is bound read-write
//! from `Plan::work_dir_source` at `Plan::work_dir`, once.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{statvfs, FsFlags};

use super::fs_rules::{Rule, DEVICES, SYNTHESIZED};

mod trust;
use crate::plan::{Plan, SECRETS_AT, SYSTEM_BUNDLE, TRUST_AT, TRUST_BUNDLE};
use trust::trust_binds;

/// The built-in `host` image: the host's system directories, read-only.
/// `/etc` is not bound whole (unless a rule grants all of it): the sandbox
/// gets a directory of its own there, holding only the entries the rules
/// grant, the host's top-level links whose targets the rules let it read,
/// and the files in [`SYNTHESIZED`].
pub(crate) const HOST_IMAGE: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"];

/// The `host` image's `/etc`.
const HOST_ETC: &str = "/etc";

/// The sandbox's own host name.
pub(crate) const HOSTNAME: &str = "cordon";

/// Secrets the `host` image never shows, whatever the plan says (they are
/// also protected by file modes; this is the second layer).
pub(crate) const IMAGE_MASKS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// Top-level entries of a stored image that are never bound: the sandbox
/// gets its own `/proc`, `/dev` and `/tmp`, and neither `/sys` nor `/run`.
pub(crate) const IMAGE_SKIPPED: &[&str] = &["proc", "sys", "dev", "tmp", "run"];

/// Where the new root is assembled (a tmpfs over it, in our mount namespace).
const BUILD: &str = "/tmp";

#[derive(Debug, thiserror::Error)]
#[error("{step} `{path}`: {source}")]
pub struct RootfsError {
    pub step: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> RootfsError + 'a {
    move |e| RootfsError {
        step,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

fn ioerr<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> RootfsError + 'a {
    move |source| RootfsError {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn inside(path: &Path) -> PathBuf {
    Path::new(BUILD).join(path.strip_prefix("/").unwrap_or(path))
}

fn mount_fs(fstype: &str, target: &Path, flags: MsFlags, data: &str) -> Result<(), RootfsError> {
    mount(Some(fstype), target, Some(fstype), flags, Some(data)).map_err(err("mount", target))
}

/// Bind `src` on `target`, then remount with `flags` added to the flags the
/// kernel locks on the source (a user namespace may not clear them).
fn bind(src: &OwnedFd, target: &Path, flags: MsFlags) -> Result<(), RootfsError> {
    let src_path = PathBuf::from(format!("/proc/self/fd/{}", src.as_raw_fd()));
    mount::<Path, Path, str, str>(Some(&src_path), target, None, MsFlags::MS_BIND, None)
        .map_err(err("bind", target))?;
    let current = statvfs(target).map_err(err("statvfs", target))?.flags();
    let mut keep = MsFlags::empty();
    for (st, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if current.contains(st) {
            keep |= ms;
        }
    }
    mount::<str, Path, str, str>(
        None,
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | keep | flags,
        None,
    )
    .map_err(err("remount", target))
}

fn open_path(path: &Path) -> Option<OwnedFd> {
    nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()
}

fn mkdir_p(path: &Path) -> Result<(), RootfsError> {
    fs::create_dir_all(path).map_err(ioerr("mkdir", path))
}

/// A mount point of the right kind for `src` at `target`.
fn mount_point(src_is_dir: bool, target: &Path) -> Result<(), RootfsError> {
    if src_is_dir {
        return mkdir_p(target);
    }
    if let Some(parent) = target.parent() {
        mkdir_p(parent)?;
    }
    if !target.exists() {
        fs::write(target, b"").map_err(ioerr("create", target))?;
    }
    Ok(())
}

fn exec_granted(rules: &[Rule], path: &Path) -> bool {
    rules
        .iter()
        .any(|r| r.execute && (path.starts_with(&r.path) || r.path.starts_with(path)))
}

fn flags_for(read_only: bool, exec: bool) -> MsFlags {
    let mut f = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if read_only {
        f |= MsFlags::MS_RDONLY;
    }
    if !exec {
        f |= MsFlags::MS_NOEXEC;
    }
    f
}

struct Bind {
    target: PathBuf,
    src: OwnedFd,
    is_dir: bool,
    flags: MsFlags,
    /// Made only over a file the root already has there, reached through
    /// no link (else left out): the trust bundle over the system one.
    over_file: bool,
}

/// The built-in `host` image's sources: its system directories (read-only
/// unless a rule grants write on exactly that directory) and top-level
/// symlinks, then the plan's host paths outside it, each at its own path.
/// The work dir is not among them (see [`work_dir_binds`]).
fn host_image_sources(
    plan: &Plan,
    rules: &[Rule],
    symlinks: &mut Vec<(PathBuf, PathBuf)>,
    binds: &mut Vec<Bind>,
) -> Result<(), RootfsError> {
    let etc_whole = rules.iter().any(|r| r.path == Path::new(HOST_ETC));
    for dir in HOST_IMAGE {
        let path = Path::new(dir);
        if path == Path::new(HOST_ETC) && !etc_whole {
            etc_links(rules, symlinks)?;
            continue;
        }
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(path).map_err(ioerr("readlink", path))?;
                symlinks.push((path.to_path_buf(), to));
            }
            Ok(m) if m.is_dir() => {
                if let Some(src) = open_path(path) {
                    let write = rules.iter().any(|r| r.write && r.path == path);
                    binds.push(Bind {
                        target: path.to_path_buf(),
                        src,
                        is_dir: true,
                        flags: flags_for(!write, exec_granted(rules, path)),
                        over_file: false,
                    });
                }
            }
            _ => {}
        }
    }
    // What lies beneath the image's directories comes with them; beneath
    // `/etc`, only when all of it is granted.
    let in_image = |p: &Path| {
        HOST_IMAGE
            .iter()
            .any(|d| p.starts_with(d) && (*d != HOST_ETC || etc_whole))
    };
    let work = plan.work_dir();
    let mut plan_binds: Vec<&Rule> = rules
        .iter()
        .filter(|r| !r.device && r.path != Path::new("/proc") && r.path != Path::new("/tmp"))
        .filter(|r| r.read || r.write || r.execute)
        .filter(|r| !in_image(&r.path) || r.write)
        .filter(|r| !HOST_IMAGE.iter().any(|d| r.path == Path::new(d)))
        .filter(|r| !SYNTHESIZED.iter().any(|f| r.path == Path::new(f)))
        // The secrets come from `Plan::secrets_dir` (see `secrets_bind`).
        .filter(|r| r.path != Path::new(SECRETS_AT))
        // The work dir and what lies beneath it come from its source.
        .filter(|r| !r.path.starts_with(work))
        .collect();
    plan_binds.sort_by_key(|r| r.path.components().count());
    for r in plan_binds {
        if let (Some(src), Ok(meta)) = (open_path(&r.path), fs::metadata(&r.path)) {
            binds.push(Bind {
                target: r.path.clone(),
                src,
                is_dir: meta.is_dir(),
                flags: flags_for(!r.write, exec_granted(rules, &r.path)),
                over_file: false,
            });
        }
    }
    Ok(())
}

/// The host's top-level `/etc` links worth having (`localtime`,
/// `os-release`, `mtab`, …): those whose target, resolved on the host, the
/// rules let the workload read. A link grants nothing (the target is
/// checked when it is opened); the others would only show names.
fn etc_links(rules: &[Rule], symlinks: &mut Vec<(PathBuf, PathBuf)>) -> Result<(), RootfsError> {
    let etc = Path::new(HOST_ETC);
    let entries = match fs::read_dir(etc) {
        Ok(e) => e,
        Err(_) => return Ok(()),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let readable = fs::canonicalize(&path).is_ok_and(|target| {
            rules
                .iter()
                .any(|r| r.read && !r.device && target.starts_with(&r.path))
        });
        if readable {
            let to = fs::read_link(&path).map_err(ioerr("readlink", &path))?;
            found.push((path, to));
        }
    }
    found.sort();
    symlinks.extend(found);
    Ok(())
}

/// The `host` image's own `/etc` files: written to the new root's tmpfs
/// and bound over `/etc/NAME` read-only (over the host's, where a rule
/// bound all of `/etc`).
fn synthesized_etc(plan: &Plan, build: &Path, etc_whole: bool) -> Result<(), RootfsError> {
    let ids = plan.ids();
    let home = plan.work_dir().display();
    let (uid, gid) = (ids.uid, ids.gid);
    let contents = |name: &str| -> String {
        match name {
            "/etc/passwd" => format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                 {HOSTNAME}:x:{uid}:{gid}:cordon sandbox:{home}:/bin/sh\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
            "/etc/group" => format!("root:x:0:\n{HOSTNAME}:x:{gid}:\nnogroup:x:65534:\n"),
            "/etc/hostname" => format!("{HOSTNAME}\n"),
            _ => format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{HOSTNAME}\n"
            ),
        }
    };
    if !etc_whole {
        // /etc is the root tmpfs's own directory: the files go there.
        for name in SYNTHESIZED {
            let at = inside(Path::new(name));
            fs::write(&at, contents(name)).map_err(ioerr("create", &at))?;
            fs::set_permissions(&at, fs::Permissions::from_mode(0o644))
                .map_err(ioerr("chmod", &at))?;
        }
        return Ok(());
    }
    // The host's /etc is bound whole: each file is bound over the host's
    // from a staging directory on the root tmpfs (kept: the root cannot be
    // made read-only with unlinked files still in use; mode 0 to all but
    // the bind).
    let staging = build.join(".cordon-etc");
    mkdir_p(&staging)?;
    for name in SYNTHESIZED {
        let path = Path::new(name);
        let at = inside(path);
        if !at.is_file() {
            continue; // nowhere to put it in a read-only host /etc
        }
        let src = staging.join(path.file_name().unwrap_or_default());
        fs::write(&src, contents(name)).map_err(ioerr("create", &src))?;
        fs::set_permissions(&src, fs::Permissions::from_mode(0o644))
            .map_err(ioerr("chmod", &src))?;
        let fd = open_path(&src).ok_or_else(|| RootfsError {
            step: "open",
            path: src.clone(),
            source: std::io::Error::last_os_error(),
        })?;
        bind(
            &fd,
            &at,
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        )?;
    }
    fs::set_permissions(&staging, fs::Permissions::from_mode(0o000))
        .map_err(ioerr("chmod", &staging))?;
    Ok(())
}

/// A stored image's sources: every top-level entry of `image` but
/// [`IMAGE_SKIPPED`], each opened `O_PATH | O_NOFOLLOW` beneath a pinned
/// descriptor of the image root. Directories and files are bound read-only
/// whatever the rules say (a blob is shared and content-addressed; a write
/// grant there fails with `EROFS`), executable only where a rule grants
/// execute; symlinks are recreated; anything else is left out.
fn stored_image_sources(
    image: &Path,
    rules: &[Rule],
    symlinks: &mut Vec<(PathBuf, PathBuf)>,
    binds: &mut Vec<Bind>,
) -> Result<(), RootfsError> {
    use rustix::fs::{FileType, OFlags};
    let rerr = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |e: rustix::io::Errno| RootfsError {
            step,
            path,
            source: e.into(),
        }
    };
    let root = rustix::fs::open(
        image,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(rerr("open image root", image))?;
    // Listed through the pinned descriptor, so the listing and the entries
    // opened below are of the same directory.
    let listing = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
    let mut names: Vec<std::ffi::OsString> = fs::read_dir(&listing)
        .map_err(ioerr("list image root", image))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(ioerr("list image root", image))?;
    names.sort();
    for name in names {
        if IMAGE_SKIPPED.iter().any(|s| name == *s) {
            continue;
        }
        let target = Path::new("/").join(&name);
        let at = image.join(&name);
        let fd = rustix::fs::openat(
            &root,
            name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(rerr("open image entry", &at))?;
        let st = rustix::fs::fstat(&fd).map_err(rerr("stat image entry", &at))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let to = rustix::fs::readlinkat(&root, name.as_os_str(), Vec::new())
                    .map_err(rerr("readlink", &at))?;
                let to = PathBuf::from(std::ffi::OsString::from_vec(to.into_bytes()));
                symlinks.push((target, to));
            }
            kind @ (FileType::Directory | FileType::RegularFile) => {
                let flags = flags_for(true, exec_granted(rules, &target));
                binds.push(Bind {
                    target,
                    src: fd,
                    is_dir: kind == FileType::Directory,
                    flags,
                    over_file: false,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The work dir, bound read-write from `plan.work_dir_source()` at
/// `plan.work_dir()`, then the rules on paths beneath it (narrower rights
/// bound over it), their sources translated the same way. Without a
/// `work_dir_source` both are the host path itself.
fn work_dir_binds(plan: &Plan, rules: &[Rule]) -> Result<Vec<Bind>, RootfsError> {
    let work = plan.work_dir();
    let source = plan.work_dir_source();
    let src = open_path(source).ok_or_else(|| RootfsError {
        step: "open work dir source",
        path: source.to_path_buf(),
        source: std::io::Error::last_os_error(),
    })?;
    let is_dir = fs::metadata(format!("/proc/self/fd/{}", src.as_raw_fd()))
        .map_err(ioerr("stat work dir source", source))?
        .is_dir();
    let mut out = vec![Bind {
        target: work.to_path_buf(),
        src,
        is_dir,
        // Never executable, whatever tree it lies in: the workload writes
        // here (the translator refuses an executable tree around it; this
        // is the second layer).
        flags: flags_for(false, false),
        over_file: false,
    }];
    let mut beneath: Vec<&Rule> = rules
        .iter()
        .filter(|r| !r.device && r.path.starts_with(work) && r.path != work)
        .filter(|r| r.read || r.write || r.execute)
        .collect();
    beneath.sort_by_key(|r| r.path.components().count());
    for r in beneath {
        let Ok(rel) = r.path.strip_prefix(work) else {
            continue;
        };
        let host = source.join(rel);
        if let (Some(src), Ok(meta)) = (open_path(&host), fs::symlink_metadata(&host)) {
            if meta.file_type().is_symlink() {
                continue; // never bound through a link of the work dir
            }
            out.push(Bind {
                target: r.path.clone(),
                src,
                is_dir: meta.is_dir(),
                flags: flags_for(!r.write, false),
                over_file: false,
            });
        }
    }
    Ok(out)
}

/// The sandbox's secrets directory, bound read-only, never executable, at
/// [`SECRETS_AT`] (last: nothing the plan grants lies beneath it).
fn secrets_bind(plan: &Plan) -> Result<Option<Bind>, RootfsError> {
    let Some(dir) = plan.secrets_dir() else {
        return Ok(None);
    };
    // No link anywhere on the way: the directory is the caller's own, made
    // for this sandbox.
    let src = rustix::fs::openat2(
        rustix::fs::CWD,
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| RootfsError {
        step: "open secrets dir",
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    Ok(Some(Bind {
        target: PathBuf::from(SECRETS_AT),
        src,
        is_dir: true,
        flags: flags_for(true, false),
        over_file: false,
    }))
}

/// Whether the root being built has a file at `target`, reached through
/// no link.
fn file_in_build(target: &Path) -> bool {
    let mut at = PathBuf::from(BUILD);
    let parts: Vec<_> = target
        .strip_prefix("/")
        .unwrap_or(target)
        .components()
        .collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if i + 1 == parts.len() => return m.is_file(),
            Ok(m) if m.is_dir() => {}
            _ => return false,
        }
    }
    false
}

/// A mount point for `target` (a path inside the sandbox) on the root being
/// built, refusing to pass through a symlink of the image: a link there
/// would resolve against the host's root before `pivot_root`.
fn mount_point_no_links(target: &Path, is_dir: bool) -> Result<PathBuf, RootfsError> {
    let mut at = PathBuf::from(BUILD);
    let parts: Vec<_> = target
        .strip_prefix("/")
        .unwrap_or(target)
        .components()
        .collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        let last = i + 1 == parts.len();
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(RootfsError {
                    step: "mount point",
                    path: target.to_path_buf(),
                    source: std::io::Error::other(
                        "passes through a symlink of the image; choose a work dir the image does not link (like /workspace)",
                    ),
                })
            }
            Ok(m) if m.is_dir() || last => {}
            Ok(_) => {
                return Err(RootfsError {
                    step: "mount point",
                    path: target.to_path_buf(),
                    source: std::io::Error::other("a file of the image is in the way"),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let made = if last && !is_dir {
                    fs::write(&at, b"")
                } else {
                    fs::create_dir(&at)
                };
                made.map_err(|e| RootfsError {
                    step: "mount point (the image is read-only: use a work dir the image has, or one at the top level like /workspace)",
                    path: target.to_path_buf(),
                    source: e,
                })?;
            }
            Err(e) => return Err(ioerr("mount point", target)(e)),
        }
    }
    Ok(at)
}

/// Where `mask` (a path inside the sandbox) lies on the root being built,
/// resolved as if the root were `/` (`RESOLVE_IN_ROOT`: an image's links,
/// absolute ones included, resolve inside it). `None`: nothing there to
/// hide, or nothing stage 2 can reach; the workload has the same uid and
/// cannot reach it either.
fn mask_target(build: &OwnedFd, mask: &Path) -> Result<Option<(PathBuf, bool)>, RootfsError> {
    use rustix::fs::{OFlags, ResolveFlags};
    use rustix::io::Errno;
    let rel = mask.strip_prefix("/").unwrap_or(mask);
    let fd = match rustix::fs::openat2(
        build,
        rel,
        OFlags::PATH | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP) => return Ok(None),
        Err(e) => {
            return Err(RootfsError {
                step: "resolve mask",
                path: mask.to_path_buf(),
                source: e.into(),
            })
        }
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| RootfsError {
        step: "stat mask",
        path: mask.to_path_buf(),
        source: e.into(),
    })?;
    // The resolved path has no links left; nothing else runs in this mount
    // namespace, so it still names the same file when mounted on.
    let at = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(ioerr("resolve mask", mask))?;
    if !at.starts_with(BUILD) {
        return Err(RootfsError {
            step: "resolve mask",
            path: mask.to_path_buf(),
            source: std::io::Error::other("resolved outside the new root"),
        });
    }
    let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    Ok(Some((at, is_dir)))
}

/// Builds the root for `plan` and enters it with `pivot_root`. Mounts a new
/// `/proc` (the caller is PID 1 of the new pid namespace) before the old root
/// goes, because the kernel only lets a user namespace mount procfs while a
/// full procfs is visible.
///
/// With `terminals` (a warm sandbox), `/dev` also gets an empty `pts`
/// directory (where a tty exec mounts a devpts instance of its own, in its
/// own mount namespace), `ptmx` linked to `pts/ptmx`, and the host's
/// `/dev/tty` node, which opens only the caller's own controlling terminal
/// (none, outside a tty exec). Never the host's `/dev/pts` or a terminal of
/// the host.
pub(crate) fn enter(plan: &Plan, rules: &[Rule], terminals: bool) -> Result<(), RootfsError> {
    let root = Path::new("/");
    // Nothing mounted here may propagate back to the host.
    mount::<str, Path, str, str>(
        None,
        root,
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )
    .map_err(err("make private", root))?;

    // 1. Pin every source before anything is covered.
    let sources = pin_sources(plan, rules, terminals)?;

    // 2. The new root: a tmpfs, private to this mount namespace.
    let build = Path::new(BUILD);
    build_tree(plan, rules, &sources)?;
    mount_dev(&sources.devices, terminals)?;
    let proc = inside(Path::new("/proc"));
    mkdir_p(&proc)?;
    mount_fs(
        "proc",
        &proc,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "",
    )?;

    // 3. Masks: an empty read-only file or directory over each.
    mask(plan, build)?;

    // 4. The root itself read-only, then swap roots and drop the old one.
    pivot(build, root)
}

/// What [`enter`] mounts, each source opened before anything is covered.
struct Sources {
    /// Links made in the new root: where, and what they point to.
    symlinks: Vec<(PathBuf, PathBuf)>,
    /// Binds, in the order they are mounted.
    binds: Vec<Bind>,
    /// Device nodes bound into the new `/dev`.
    devices: Vec<(PathBuf, OwnedFd)>,
}

/// Step 1 of [`enter`]: pins the image's entries, the rules' paths, the
/// work dir, the secrets and the devices.
fn pin_sources(plan: &Plan, rules: &[Rule], terminals: bool) -> Result<Sources, RootfsError> {
    let mut symlinks = Vec::new();
    let mut binds = Vec::new();
    let image = plan.image_root();
    match image {
        None => host_image_sources(plan, rules, &mut symlinks, &mut binds)?,
        Some(dir) => stored_image_sources(dir, rules, &mut symlinks, &mut binds)?,
    }
    // After the image's entries and the rules above it, before the rules
    // beneath it: binds are mounted in this order.
    let work = work_dir_binds(plan, rules)?;
    let depth = plan.work_dir().components().count();
    let at = binds
        .iter()
        .position(|b| {
            image.is_none()
                && b.target.components().count() > depth
                && !HOST_IMAGE.iter().any(|d| b.target == Path::new(d))
        })
        .unwrap_or(binds.len());
    binds.splice(at..at, work);
    binds.extend(secrets_bind(plan)?);
    binds.extend(trust_binds(plan)?);
    let mut devices = Vec::new();
    let kvm = plan.kvm().then(|| PathBuf::from(crate::plan::KVM_DEVICE));
    for path in DEVICES.iter().map(|d| Path::new("/dev").join(d)).chain(kvm) {
        let src = open_path(&path).ok_or_else(|| RootfsError {
            step: "open device",
            path: path.clone(),
            source: std::io::Error::last_os_error(),
        })?;
        devices.push((path, src));
    }
    if terminals {
        // Optional: without it, a tty exec's terminal is on its 0/1/2 only.
        let path = Path::new("/dev/tty");
        if let Some(src) = open_path(path) {
            devices.push((path.to_path_buf(), src));
        }
    }

    Ok(Sources {
        symlinks,
        binds,
        devices,
    })
}

/// Step 2 of [`enter`]: the new root's tmpfs, its links, `/tmp` and the
/// binds (and, for the `host` image, its own `/etc`).
fn build_tree(plan: &Plan, rules: &[Rule], sources: &Sources) -> Result<(), RootfsError> {
    let Sources {
        symlinks, binds, ..
    } = sources;
    let image = plan.image_root();
    let build = Path::new(BUILD);
    mount_fs(
        "tmpfs",
        build,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755,size=1m",
    )?;
    for (path, to) in symlinks {
        let at = inside(path);
        if let Some(parent) = at.parent() {
            mkdir_p(parent)?;
        }
        std::os::unix::fs::symlink(to, &at).map_err(ioerr("symlink", &at))?;
    }
    // /tmp first: the work dir may live under the host's /tmp.
    let tmp = inside(Path::new("/tmp"));
    mkdir_p(&tmp)?;
    // Its pages are memory (charged to the memory cgroup); it is also held
    // to `max_disk`, so a write past either ends in ENOSPC or the memory
    // bound, never in the host's memory.
    let tmp_bytes = plan.bounds().max_memory.min(plan.bounds().max_disk);
    let tmp_size = format!("mode=1777,size={tmp_bytes}");
    mount_fs(
        "tmpfs",
        &tmp,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        &tmp_size,
    )?;
    for b in binds {
        if b.over_file && !file_in_build(&b.target) {
            continue;
        }
        let at = if image.is_some() {
            mount_point_no_links(&b.target, b.is_dir)?
        } else {
            let at = inside(&b.target);
            mount_point(b.is_dir, &at)?;
            at
        };
        bind(&b.src, &at, b.flags)?;
    }
    if image.is_none() {
        mkdir_p(&inside(Path::new(HOST_ETC)))?;
        let etc_whole = rules.iter().any(|r| r.path == Path::new(HOST_ETC));
        synthesized_etc(plan, build, etc_whole)?;
    }
    Ok(())
}

/// Step 2 of [`enter`], continued: the new root's `/dev`, read-only.
fn mount_dev(devices: &[(PathBuf, OwnedFd)], terminals: bool) -> Result<(), RootfsError> {
    // A minimal /dev: five devices bound from the host (and `/dev/kvm`
    // with `Plan::kvm`), nothing else.
    let dev = inside(Path::new("/dev"));
    mkdir_p(&dev)?;
    mount_fs(
        "tmpfs",
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
    )?;
    for (path, src) in devices {
        let at = inside(path);
        mount_point(false, &at)?;
        bind(src, &at, MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC)?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let at = dev.join(name);
        std::os::unix::fs::symlink(to, &at).map_err(ioerr("symlink", &at))?;
    }
    if terminals {
        let pts = dev.join("pts");
        fs::create_dir(&pts).map_err(ioerr("mkdir", &pts))?;
        let ptmx = dev.join("ptmx");
        std::os::unix::fs::symlink("pts/ptmx", &ptmx).map_err(ioerr("symlink", &ptmx))?;
    }
    mount::<str, Path, str, str>(
        None,
        &dev,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None,
    )
    .map_err(err("remount ro", &dev))?;
    Ok(())
}

/// Step 3 of [`enter`]: an empty read-only file or directory over each
/// masked path.
fn mask(plan: &Plan, build: &Path) -> Result<(), RootfsError> {
    let empty_file = build.join(".cordon-empty");
    fs::write(&empty_file, b"").map_err(ioerr("create", &empty_file))?;
    fs::set_permissions(&empty_file, fs::Permissions::from_mode(0o000))
        .map_err(ioerr("chmod", &empty_file))?;
    let empty_fd = open_path(&empty_file).ok_or_else(|| RootfsError {
        step: "open",
        path: empty_file.clone(),
        source: std::io::Error::last_os_error(),
    })?;
    let masks = IMAGE_MASKS
        .iter()
        .map(PathBuf::from)
        .chain(plan.mask_paths().iter().cloned())
        .chain(plan.mask_executables().iter().cloned());
    let build_fd = nix::fcntl::open(
        build,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err("open", build))?;
    for mask in masks {
        let Some((at, is_dir)) = mask_target(&build_fd, &mask)? else {
            continue; // nothing there to hide
        };
        if is_dir {
            mount_fs(
                "tmpfs",
                &at,
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                "mode=000,size=4k",
            )?;
        } else {
            bind(
                &empty_fd,
                &at,
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            )?;
        }
    }
    drop(build_fd);
    drop(empty_fd);

    Ok(())
}

/// Step 4 of [`enter`]: the new root read-only, then the swap.
fn pivot(build: &Path, root: &Path) -> Result<(), RootfsError> {
    mount::<str, Path, str, str>(
        None,
        build,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None,
    )
    .map_err(err("remount ro", build))?;
    nix::unistd::chdir(build).map_err(err("chdir", build))?;
    // pivot_root(".", "."): the old root ends up stacked on the new one and
    // is detached at once, so no directory for it is needed.
    nix::unistd::pivot_root(".", ".").map_err(err("pivot_root", build))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err("unmount old root", root))?;
    nix::unistd::chdir(root).map_err(err("chdir", root))?;
    Ok(())
}
