//! Filesystems a sandbox writes to, held to `max_disk` by the kernel.
//!
//! A fresh work dir is a volume of its own: a sparse ext4 image of exactly
//! `max_disk` bytes, attached to a loop device (autoclear) and mounted by
//! the owner (root) before anything of the workload runs. The image file is
//! unlinked as soon as the loop device holds it, so nothing of it is left on
//! the host once the mount is gone. A write past the end of the filesystem
//! fails with `ENOSPC` inside the volume; the host's filesystem is not the
//! one that fills. An operator's directory is held only where its own
//! filesystem is no larger than the bound (project quotas could hold one
//! on a larger filesystem; cordon sets none yet); see `docs/security.md`,
//! "How disk is bounded".

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Where `mkfs.ext4` is, if this machine has it.
pub fn mkfs_program() -> Option<PathBuf> {
    [
        "/usr/sbin/mkfs.ext4",
        "/sbin/mkfs.ext4",
        "/usr/bin/mkfs.ext4",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// What this machine lacks to make volumes (`cordon doctor`), else `Ok`.
pub fn probe() -> Result<String, String> {
    let mkfs = mkfs_program().ok_or(
        "`mkfs.ext4` not found (install e2fsprogs); without it no work dir can be held to max_disk",
    )?;
    if !Path::new("/dev/loop-control").exists() {
        return Err("`/dev/loop-control` is missing (load the `loop` module); without it no work dir can be held to max_disk".into());
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.lines().any(|l| l.trim_end().ends_with("ext4")) {
        return Err(
            "the kernel has no ext4; without it no work dir can be held to max_disk".into(),
        );
    }
    Ok(format!(
        "a fresh work dir is an ext4 volume of max_disk on a loop device ({})",
        mkfs.display()
    ))
}

/// The free bytes of the filesystem holding `p` (for an unprivileged
/// writer).
pub fn free_bytes(p: &Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(p).map_err(io::Error::from)?;
    Ok(s.blocks_available() * s.fragment_size())
}

/// The total size of the filesystem holding `p`, in bytes.
pub fn filesystem_bytes(p: &Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(p).map_err(io::Error::from)?;
    Ok(s.blocks() * s.fragment_size())
}

/// Makes a volume of `size` bytes and mounts it at `at` (an empty
/// directory), its root owned by `owner` (uid and gid), mode 0711 (the
/// directories the caller makes in it decide who reaches what). The
/// sparse image is made in `images` and unlinked once attached. Refused
/// when the filesystem under `images` has less than `size` free: a volume
/// larger than the space behind it would let the workload fill the host's
/// disk before its own.
pub fn mount_volume(at: &Path, images: &Path, size: u64, owner: u32) -> Result<(), String> {
    let mkfs = mkfs_program()
        .ok_or("`mkfs.ext4` not found: install e2fsprogs so a work dir can be held to max_disk")?;
    let free = free_bytes(images).map_err(|e| format!("`{}`: {e}", images.display()))?;
    if free < size {
        return Err(format!(
            "max_disk is {size} bytes but the filesystem under `{}` has only {free} bytes free, so the bound would not be the one that stops a write; free space there, or state a smaller `max_disk` (or `resources.disk`)",
            images.display()
        ));
    }
    let image = images.join(format!(
        ".cordon-volume-{}-{}.img",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&image)
        .map_err(|e| format!("cannot create `{}`: {e}", image.display()))?;
    let made = make_and_mount(&mkfs, &file, &image, at, size, owner);
    // Attached (or failed): the name is never needed again.
    let _ = std::fs::remove_file(&image);
    made
}

fn make_and_mount(
    mkfs: &Path,
    file: &File,
    image: &Path,
    at: &Path,
    size: u64,
    owner: u32,
) -> Result<(), String> {
    let from_template = match template(mkfs, size) {
        // One filesystem made once per size, copied (its few blocks of
        // metadata; the rest is a hole): 1-3 ms, where `mkfs.ext4` per
        // start cost 28-115 ms here.
        Ok(t) => {
            copy_sparse(&t, file, size).map_err(|e| {
                format!("copying the volume template to `{}`: {e}", image.display())
            })?;
            true
        }
        Err(_) => {
            file.set_len(size)
                .map_err(|e| format!("sizing `{}`: {e}", image.display()))?;
            mkfs_at(mkfs, image, size)?;
            false
        }
    };
    mount_image(file, at)?;
    if !from_template {
        // A template has none; a filesystem made here has mkfs's.
        let _ = std::fs::remove_dir(at.join("lost+found"));
    }
    let owned = std::os::unix::fs::chown(at, Some(owner), Some(owner))
        .and_then(|()| std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o711)));
    if let Err(e) = owned {
        let _ = unmount(at);
        return Err(format!("handing `{}` to uid {owner}: {e}", at.display()));
    }
    Ok(())
}

/// Attaches `file` to a loop device (autoclear) and mounts its ext4 at
/// `at`, `nosuid,nodev`. `nobarrier`: a volume is thrown away with its
/// sandbox, so nothing in it needs to survive a crash, and without cache
/// flushes its teardown does not `fsync` the image into the host's disk
/// (0.85 ms of every dispose here; the unlinked image's pages are dropped
/// instead of written).
fn mount_image(file: &File, at: &Path) -> Result<(), String> {
    let (loop_fd, dev_path) = attach(file).map_err(|e| format!("attaching a loop device: {e}"))?;
    let mounted = nix::mount::mount(
        Some(dev_path.as_path()),
        at,
        Some("ext4"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some("nobarrier"),
    );
    // With autoclear the device goes when the last mount of it does.
    drop(loop_fd);
    mounted.map_err(|e| format!("mounting the volume at `{}`: {e}", at.display()))
}

/// `mkfs.ext4` over `image` (`size` bytes): no journal (the volume lives
/// as long as its sandbox), no room reserved to grow (it never does; this
/// takes a template's data from 656 KiB to 144 KiB at 1 GiB), no blocks
/// reserved for root, no discard.
fn mkfs_at(mkfs: &Path, image: &Path, size: u64) -> Result<(), String> {
    let out = std::process::Command::new(mkfs)
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal,^resize_inode",
            "-E",
        ])
        .arg("nodiscard,lazy_itable_init=1")
        .arg(image)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running `{}`: {e}", mkfs.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed on a {size}-byte volume: {}",
            mkfs.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Where volume templates are kept: root's alone (a template is mounted
/// as root, so no one else may have written it).
const TEMPLATES: &str = "/run/cordon-volumes";

/// The template filesystem of `size` bytes, made on first use.
fn template(mkfs: &Path, size: u64) -> Result<File, String> {
    let dir = Path::new(TEMPLATES);
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.to_string()),
    }
    let root_only = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0 && m.mode() & 0o022 == 0 && !m.file_type().is_symlink()
        })
    };
    if !root_only(dir) || !root_only(Path::new("/run")) {
        return Err(format!("`{TEMPLATES}` is not root's alone"));
    }
    // `v2`: no resize inode and no `lost+found` (a template of an earlier
    // cordon is left alone, and made anew under this name).
    let path = dir.join(format!("ext4-v2-{size}.img"));
    if let Ok(f) = File::open(&path) {
        if root_only(&path) && f.metadata().is_ok_and(|m| m.is_file() && m.len() == size) {
            return Ok(f);
        }
        return Err(format!(
            "`{}` is not a template cordon made",
            path.display()
        ));
    }
    let tmp = dir.join(format!(
        ".ext4-{size}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let made = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|f| f.set_len(size))
        .map_err(|e| e.to_string())
        .and_then(|()| mkfs_at(mkfs, &tmp, size))
        .and_then(|()| without_lost_found(&tmp))
        // Whoever renames last wins; both made the same thing.
        .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| e.to_string()));
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made?;
    File::open(&path).map_err(|e| e.to_string())
}

/// Removes mkfs's `lost+found` from the filesystem in `image`, once per
/// template rather than once per volume (a workload never needs it, and
/// its `rmdir` was a write on every start).
fn without_lost_found(image: &Path) -> Result<(), String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(|e| e.to_string())?;
    let at = image.with_extension("mnt");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&at)
        .map_err(|e| format!("`{}`: {e}", at.display()))?;
    let done = mount_image(&file, &at).and_then(|()| {
        let removed = std::fs::remove_dir(at.join("lost+found"))
            .map_err(|e| format!("removing the template's lost+found: {e}"));
        let unmounted = unmount(&at).map_err(|e| format!("unmounting the template: {e}"));
        removed.and(unmounted.map(|_| ()))
    });
    let _ = std::fs::remove_dir(&at);
    done
}

/// Copies `src` into `dst` (both `size` bytes long), its data only: the
/// holes stay holes.
fn copy_sparse(src: &File, dst: &File, size: u64) -> io::Result<()> {
    use rustix::fs::SeekFrom;
    dst.set_len(size)?;
    let mut at = 0u64;
    while at < size {
        let data = match rustix::fs::seek(src, SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break, // only a hole is left
            Err(e) => return Err(e.into()),
        };
        let hole = rustix::fs::seek(src, SeekFrom::Hole(data))?.min(size);
        let (mut from, mut to) = (data, data);
        while from < hole {
            let want = usize::try_from(hole - from).unwrap_or(usize::MAX);
            let n =
                match rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), want) {
                    Ok(n) => n,
                    // Across filesystems (a template on a tmpfs `/run`) the
                    // kernel may refuse: copy through a buffer instead.
                    Err(
                        rustix::io::Errno::XDEV
                        | rustix::io::Errno::INVAL
                        | rustix::io::Errno::NOSYS,
                    ) => {
                        copy_range(src, dst, from, hole)?;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                };
            if n == 0 {
                return Err(io::Error::other("the template ended early"));
            }
        }
        at = hole;
    }
    Ok(())
}

/// Copies bytes `from..end` of `src` to the same place in `dst`.
fn copy_range(src: &File, dst: &File, mut from: u64, end: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 16];
    while from < end {
        let want = usize::try_from(end - from).map_or(buf.len(), |n| n.min(buf.len()));
        let n = src.read_at(&mut buf[..want], from)?;
        if n == 0 {
            return Err(io::Error::other("the template ended early"));
        }
        dst.write_all_at(&buf[..n], from)?;
        from += n as u64;
    }
    Ok(())
}

/// A free loop device bound to `file` with autoclear.
#[expect(unsafe_code, reason = "the loop device's ioctls")]
fn attach(file: &File) -> io::Result<(OwnedFd, PathBuf)> {
    let ctl = File::open("/dev/loop-control")?;
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                continue; // a udev race: the node is not there yet
            }
            return Err(e);
        }
        // SAFETY: `fd` was just opened and is owned here alone.
        let dev = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: all-zero is a valid LoopConfig (plain integers and arrays).
        let mut cfg: LoopConfig = unsafe { std::mem::zeroed() };
        cfg.fd = file.as_raw_fd() as u32;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: LOOP_CONFIGURE reads one LoopConfig, which outlives the call.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg) };
        if r == 0 {
            return Ok((dev, path));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
        // Another process took it between GET_FREE and CONFIGURE.
    }
    Err(io::Error::other("no loop device stayed free"))
}

/// Whether `p` is the root of a mount.
pub fn is_mount_point(p: &Path) -> io::Result<bool> {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        p,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .map_err(io::Error::from)?;
    if st
        .stx_attributes_mask
        .contains(rustix::fs::StatxAttributes::MOUNT_ROOT)
    {
        return Ok(st
            .stx_attributes
            .contains(rustix::fs::StatxAttributes::MOUNT_ROOT));
    }
    Err(io::Error::other("the kernel does not say where mounts are"))
}

/// What a volume must hold before [`discard`] shuts it down: below this,
/// flushing it at unmount is cheaper than the shutdown (about 1 ms here).
const DISCARD_ABOVE: u64 = 8 << 20;

const EXT4_SUPER_MAGIC: i64 = 0xEF53;
/// `EXT4_IOC_SHUTDOWN`, `_IOR('X', 125, __u32)`.
const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587D;
/// Shut down without flushing anything.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;
const LOOP_MAJOR: u32 = 7;

/// Before a volume cordon made is unmounted for good: when it holds more
/// than a few MiB, shuts its filesystem down without flushing, so the
/// unmount does not copy what the workload wrote through the loop device
/// into an image that is about to be freed (64 MiB written: 34 ms of
/// unmount against 7 ms here). Only for a volume this process made and
/// nothing else (never an operator's directory mapped in, never anything
/// `gc` found): and even then `at` must be the root of an ext4 mount on a
/// loop device, or nothing is done. `Ok(true)`: shut down.
#[expect(unsafe_code, reason = "the ext4 shutdown ioctl")]
pub fn discard(at: &Path) -> io::Result<bool> {
    let dir = rustix::fs::open(
        at,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let st = rustix::fs::statx(
        &dir,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BASIC_STATS,
    )?;
    let mount_root = st
        .stx_attributes_mask
        .contains(rustix::fs::StatxAttributes::MOUNT_ROOT)
        && st
            .stx_attributes
            .contains(rustix::fs::StatxAttributes::MOUNT_ROOT);
    let fs = rustix::fs::fstatfs(&dir)?;
    if !mount_root || st.stx_dev_major != LOOP_MAJOR || fs.f_type as i64 != EXT4_SUPER_MAGIC {
        return Ok(false);
    }
    let used = (fs.f_blocks as u64).saturating_sub(fs.f_bfree as u64) * fs.f_bsize as u64;
    if used <= DISCARD_ABOVE {
        return Ok(false);
    }
    let flags: u32 = EXT4_GOING_FLAGS_NOLOGFLUSH;
    // SAFETY: a valid descriptor and a u32 that outlives the call; the
    // result is checked.
    let r = unsafe { libc::ioctl(dir.as_raw_fd(), EXT4_IOC_SHUTDOWN as _, &flags) };
    if r == 0 {
        Ok(true)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts `at` (lazily: a sandbox still holding it keeps it until it
/// ends). `Ok(false)`: nothing was mounted there.
pub fn unmount(at: &Path) -> io::Result<bool> {
    match nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Binds `src` at `at` (an existing empty directory, or an empty file for
/// a file) with exactly these rights: `nosuid`, `nodev`, read-only unless
/// `write`, `noexec` unless `exec`; not recursive (mounts beneath `src`
/// are not carried), private. For engines that cannot set `noexec` on a
/// bind themselves (Docker's binds): they are handed this mount, which a
/// bind of it keeps. Undone with [`unmount`].
pub fn restricted_bind(src: &Path, at: &Path, write: bool, exec: bool) -> Result<(), String> {
    use nix::mount::MsFlags;
    nix::mount::mount(Some(src), at, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("binding `{}` at `{}`: {e}", src.display(), at.display()))?;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if !write {
        flags |= MsFlags::MS_RDONLY;
    }
    if !exec {
        flags |= MsFlags::MS_NOEXEC;
    }
    let held =
        nix::mount::mount(None::<&str>, at, None::<&str>, flags, None::<&str>).and_then(|()| {
            nix::mount::mount(
                None::<&str>,
                at,
                None::<&str>,
                MsFlags::MS_PRIVATE,
                None::<&str>,
            )
        });
    if let Err(e) = held {
        let _ = unmount(at);
        return Err(format!(
            "restricting the bind of `{}` at `{}`: {e}",
            src.display(),
            at.display()
        ));
    }
    Ok(())
}

/// A user namespace whose only mapping is `from` (uid and gid `from_gid`)
/// to host id `to`: the mapping an idmapped mount applies.
#[expect(
    unsafe_code,
    reason = "a child that only holds a user namespace is forked by hand"
)]
fn idmap_userns(from_uid: u32, from_gid: u32, to: u32) -> io::Result<OwnedFd> {
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (hold_r, hold_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: the child calls only async-signal-safe syscalls (unshare,
    // write, read, _exit) before it ends.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; raw descriptors stay valid in the child.
        unsafe {
            // The parent's ends, or the read below never sees the end.
            libc::close(hold_w.as_raw_fd());
            libc::close(ready_r.as_raw_fd());
            let ok = libc::unshare(libc::CLONE_NEWUSER) == 0;
            let b = [u8::from(ok)];
            libc::write(ready_w.as_raw_fd(), b.as_ptr().cast(), 1);
            let mut x = [0u8; 1];
            libc::read(hold_r.as_raw_fd(), x.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(hold_r);
    let reap = |hold_w: OwnedFd| {
        drop(hold_w);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    };
    let mut b = [0u8; 1];
    let n = nix::unistd::read(&ready_r, &mut b).unwrap_or(0);
    if n != 1 || b[0] != 1 {
        reap(hold_w);
        return Err(io::Error::other(
            "cannot make a user namespace for the mapping",
        ));
    }
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let made = std::fs::write(proc.join("setgroups"), "deny")
        .and_then(|()| std::fs::write(proc.join("uid_map"), format!("{from_uid} {to} 1\n")))
        .and_then(|()| std::fs::write(proc.join("gid_map"), format!("{from_gid} {to} 1\n")))
        .and_then(|()| File::open(proc.join("ns/user")).map(OwnedFd::from));
    reap(hold_w);
    made
}

/// Binds `src` at `at` (an empty directory) through an idmapped mount:
/// files `src` holds as uid `from_uid` / gid `from_gid` show as host id
/// `to` through it, and what `to` creates there lands as `from_uid` /
/// `from_gid` on disk. `nosuid`, `nodev`; not recursive (mounts beneath
/// `src` are not carried). Refused with the kernel's reason where the
/// filesystem cannot be idmapped.
pub fn idmapped_bind(
    src: &Path,
    at: &Path,
    from_uid: u32,
    from_gid: u32,
    to: u32,
) -> Result<(), String> {
    idmapped(src, at, from_uid, from_gid, to, false)
}

/// [`idmapped_bind`], read-only: what a workspace's lower layer is.
pub fn idmapped_bind_read_only(
    src: &Path,
    at: &Path,
    from_uid: u32,
    from_gid: u32,
    to: u32,
) -> Result<(), String> {
    idmapped(src, at, from_uid, from_gid, to, true)
}

fn idmapped(
    src: &Path,
    at: &Path,
    from_uid: u32,
    from_gid: u32,
    to: u32,
    read_only: bool,
) -> Result<(), String> {
    let userns = idmap_userns(from_uid, from_gid, to)
        .map_err(|e| format!("the id mapping for `{}`: {e}", src.display()))?;
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        src,
        rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
            | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| format!("cannot clone the mount of `{}`: {e}", src.display()))?;
    set_idmap(&tree, &userns, read_only).map_err(|e| {
        let why = if e.raw_os_error() == Some(libc::EINVAL)
            || e.raw_os_error() == Some(libc::EOPNOTSUPP)
        {
            " (its filesystem does not support idmapped mounts)"
        } else {
            ""
        };
        format!(
            "cannot map the owner of `{}` into the sandbox: {e}{why}",
            src.display()
        )
    })?;
    rustix::mount::move_mount(
        &tree,
        "",
        rustix::fs::CWD,
        at,
        rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| {
        format!(
            "cannot mount `{}` at `{}`: {e}",
            src.display(),
            at.display()
        )
    })
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `mount_setattr(tree, "", AT_EMPTY_PATH)`: idmapped through `userns`,
/// `nosuid`, `nodev`, private (and read-only when asked).
#[expect(unsafe_code, reason = "mount_setattr has no safe wrapper here")]
fn set_idmap(tree: &OwnedFd, userns: &OwnedFd, read_only: bool) -> io::Result<()> {
    let rdonly = if read_only { MOUNT_ATTR_RDONLY } else { 0 };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | rdonly,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid descriptor, an empty C string, and a MountAttr of the
    // size passed, all outliving the call; the result is checked.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn sparse(dir: &Path, name: &str, size: u64) -> File {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .unwrap();
        f.set_len(size).unwrap();
        f
    }

    #[test]
    fn a_template_is_copied_with_its_holes_and_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let size = 64 << 20;
        let src = sparse(dir.path(), "src", size);
        src.write_all_at(b"superblock", 1024).unwrap();
        src.write_all_at(b"far away", 40 << 20).unwrap();
        for (name, through_buffer) in [("kernel", false), ("buffer", true)] {
            let dst = sparse(dir.path(), name, 0);
            if through_buffer {
                dst.set_len(size).unwrap();
                copy_range(&src, &dst, 0, 4096).unwrap();
                copy_range(&src, &dst, 40 << 20, (40 << 20) + 4096).unwrap();
            } else {
                copy_sparse(&src, &dst, size).unwrap();
            }
            let mut got = [0u8; 10];
            dst.read_exact_at(&mut got, 1024).unwrap();
            assert_eq!(&got, b"superblock", "{name}");
            let mut got = [0u8; 8];
            dst.read_exact_at(&mut got, 40 << 20).unwrap();
            assert_eq!(&got, b"far away", "{name}");
            let m = dst.metadata().unwrap();
            assert_eq!(m.len(), size, "{name}");
            use std::os::unix::fs::MetadataExt;
            assert!(m.blocks() * 512 < 1 << 20, "{name}: the holes were filled");
        }
    }
}
