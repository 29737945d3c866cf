//! PID 1 of the microvm: set the VM up, serve the host, power off.
//!
//! The initramfs holds `/init` (this binary), `/modules/*.ko` and
//! `/modules/order` (the modules' file names, one a line, in load order;
//! `.ko`, or `.ko.xz`/`.zst`/`.gz` for a kernel that decompresses modules
//! itself, 6.4 and later). After the modules load, the root moves off the initramfs onto
//! a tmpfs ([`leave_rootfs`]), so the sandbox can `pivot_root`.
//! Nothing here may panic or return: PID 1 ending is a kernel panic. Every
//! step says what it does on the console (ttyS0, the host's log of the VM);
//! a step that fails is said there too, and serving goes on when the
//! channel is up (the host then sees `Setup` fail with the reason).

use std::ffi::CString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::mount::{mount, MsFlags};

use crate::console::say;
use crate::serve::{self, Mode};

/// The virtio-serial port the host opens for the agent.
const PORT_NAME: &str = "cordon.ctl";
/// The image disk (the sandbox's root), read-only.
const IMAGE_DISK: &str = "/dev/vda";
const IMAGE_AT: &str = "/image";
/// How long devices may take to appear after their modules load.
const DEVICE_WAIT: Duration = Duration::from_secs(5);
/// How long the host may take to open its end of the port.
const HOST_WAIT: Duration = Duration::from_secs(60);

/// The whole life of PID 1.
pub(crate) fn pid1() -> ! {
    std::panic::set_hook(Box::new(|info| say!("panic: {info}")));
    // A panic here would end PID 1, a kernel panic: the VM still ends, but
    // powered off is the orderly way.
    if std::panic::catch_unwind(run).is_err() {
        say!("the agent panicked; powering off");
    }
    power_off()
}

/// Boots and serves until the session ends.
fn run() {
    match boot() {
        Ok(port) => {
            let reader = match port.try_clone() {
                Ok(r) => r,
                Err(e) => {
                    say!("cannot clone the channel: {e}");
                    power_off()
                }
            };
            let end = serve::serve(reader, Box::new(port), Mode::Guest);
            say!("{end}; powering off");
        }
        Err(e) => say!("boot failed: {e}; powering off"),
    }
}

/// Syncs and powers the VM off. If even that fails, PID 1 exits: a kernel
/// panic, which ends the VM too (`panic=-1` and QEMU's `-no-reboot`).
fn power_off() -> ! {
    nix::unistd::sync();
    let Err(e) = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_POWER_OFF);
    say!("power off failed: {e}");
    std::process::exit(1)
}

/// Everything before serving; returns the channel.
fn boot() -> Result<File, String> {
    mount_fs(
        "devtmpfs",
        "/dev",
        "devtmpfs",
        MsFlags::MS_NOSUID,
        "mode=0755",
    )?;
    console();
    mount_fs("proc", "/proc", "proc", nosuid_nodev_noexec(), "")?;
    say!("up ({})", kernel_release());
    mount_fs("sysfs", "/sys", "sysfs", nosuid_nodev_noexec(), "")?;
    load_modules();
    leave_rootfs()?;
    let port = open_port()?;
    mount_image();
    cgroups()?;
    mount_fs(
        "tmpfs",
        "/tmp",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777",
    )?;
    // Said here for the log; `setup` refuses with the same words.
    match serve::warm_available(&serve::guest_init()) {
        Ok(()) => say!("this kernel can hold a warm sandbox"),
        Err(e) => say!("{e}"),
    }
    wait_for_host(&port)?;
    say!("serving on `{PORT_NAME}`");
    Ok(port)
}

/// Moves the root off the initramfs onto a tmpfs, as `switch_root` does:
/// the sandbox's init enters its fresh root with `pivot_root`, which the
/// kernel refuses while the root is the initial rootfs (pivot_root(2),
/// `EINVAL`: rootfs has no parent mount). The new root holds this binary
/// (the warm sandbox's init program is `/init`) and the mounts made so far;
/// the modules, loaded now, stay behind and are removed.
fn leave_rootfs() -> Result<(), String> {
    const NEW: &str = "/.root";
    mount_fs("tmpfs", NEW, "tmpfs", MsFlags::empty(), "mode=0755")?;
    std::fs::copy("/init", format!("{NEW}/init"))
        .map_err(|e| format!("copying /init to the new root: {e}"))?;
    for at in ["/dev", "/proc", "/sys"] {
        let to = format!("{NEW}{at}");
        let _ = std::fs::create_dir_all(&to);
        mount(
            Some(at),
            to.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|e| format!("moving {at} to the new root: {e}"))?;
    }
    // What only the initramfs held: its memory is freed once unlinked.
    let _ = std::fs::remove_dir_all("/modules");
    let _ = std::fs::remove_file("/init");
    std::env::set_current_dir(NEW).map_err(|e| format!("entering the new root: {e}"))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| format!("moving the new root onto `/`: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("chroot into the new root: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("entering `/`: {e}"))?;
    say!("root moved off the initramfs");
    Ok(())
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "kernel release unknown".into())
}

fn nosuid_nodev_noexec() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
}

/// Mounts `fstype` at `at` (made when absent). Already mounted there (the
/// kernel's devtmpfs automount) counts as done.
fn mount_fs(src: &str, at: &str, fstype: &str, flags: MsFlags, data: &str) -> Result<(), String> {
    let _ = std::fs::create_dir_all(at);
    let data = (!data.is_empty()).then_some(data);
    match mount(Some(src), at, Some(fstype), flags, data) {
        Ok(()) | Err(nix::errno::Errno::EBUSY) => Ok(()),
        Err(e) => Err(format!("mounting {fstype} at `{at}`: {e}")),
    }
}

/// stdin from `/dev/null`, stdout and stderr to `/dev/console`. The kernel
/// may have started PID 1 with none open (an initramfs without
/// `/dev/console`); then the first files opened would be 0, 1 and 2, and
/// the sandbox init's stderr (inherited) would land in the channel.
fn console() {
    use std::os::fd::AsRawFd;
    // A file that came out as 0, 1 or 2 is one of the three now: kept open
    // (forgotten), not closed when dropped.
    let keep = |f: File| {
        if f.as_raw_fd() <= 2 {
            std::mem::forget(f);
        }
    };
    if let Ok(null) = File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        keep(null);
    }
    if let Ok(console) = std::fs::OpenOptions::new().write(true).open("/dev/console") {
        let _ = nix::unistd::dup2_stdout(&console);
        let _ = nix::unistd::dup2_stderr(&console);
        keep(console);
    }
}

/// Compressed module files: the kernel decompresses them itself when
/// asked (`MODULE_INIT_COMPRESSED_FILE`, Linux 6.4 with
/// `CONFIG_MODULE_DECOMPRESS`, as Debian's 6.12 has).
const COMPRESSED: [&str; 3] = [".ko.xz", ".ko.zst", ".ko.gz"];

/// `MODULE_INIT_COMPRESSED_FILE` (include/uapi/linux/module.h), which nix
/// does not name.
const MODULE_INIT_COMPRESSED_FILE: u32 = 4;

/// A module's name as the kernel knows it: the file name without `.ko`
/// (or a compressed `.ko.*`), dashes as underscores.
fn module_name(file: &str) -> String {
    COMPRESSED
        .iter()
        .chain(&[".ko"])
        .find_map(|ext| file.strip_suffix(ext))
        .unwrap_or(file)
        .replace('-', "_")
}

fn module_flags(file: &str) -> nix::kmod::ModuleInitFlags {
    if COMPRESSED.iter().any(|ext| file.ends_with(ext)) {
        nix::kmod::ModuleInitFlags::from_bits_retain(MODULE_INIT_COMPRESSED_FILE)
    } else {
        nix::kmod::ModuleInitFlags::empty()
    }
}

/// The parameters the kernel command line gives module `name`
/// (`name.param=value` words), as `finit_module` takes them
/// (`param=value …`). No modprobe runs here to pass them on, and
/// `virtio_mmio.device=…` is how the VM's devices are announced.
fn params_for(name: &str, cmdline: &str) -> String {
    cmdline
        .split_whitespace()
        .filter_map(|w| {
            let (module, param) = w.split_once('.')?;
            (module.replace('-', "_") == name && param.contains('=')).then_some(param)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Loads `/modules/*.ko` in the order of `/modules/order`. A module that
/// fails is said on the console and the rest still load (a built-in one
/// reports `EEXIST`, which is fine).
fn load_modules() {
    let order = match std::fs::read_to_string("/modules/order") {
        Ok(o) => o,
        Err(e) => {
            say!(
                "no module list (/modules/order: {e}); the kernel must have what it needs built in"
            );
            return;
        }
    };
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    for file in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name = module_name(file);
        let params = params_for(&name, &cmdline);
        let loaded = File::open(Path::new("/modules").join(file))
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let params = CString::new(params.clone()).map_err(|e| e.to_string())?;
                match nix::kmod::finit_module(&f, &params, module_flags(file)) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            });
        match loaded {
            Ok(()) if params.is_empty() => say!("module {name}"),
            Ok(()) => say!("module {name} ({params})"),
            Err(e) => say!("module {name} did not load: {e}"),
        }
    }
}

/// Waits (bounded) for the virtio-serial port named [`PORT_NAME`] and its
/// device node, and opens it read-write.
fn open_port() -> Result<File, String> {
    let deadline = Instant::now() + DEVICE_WAIT;
    loop {
        if let Some(dev) = find_port() {
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&dev)
            {
                Ok(f) => return Ok(f),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("opening `{}`: {e}", dev.display()))
                }
                Err(_) => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no virtio-serial port named `{PORT_NAME}` appeared within {}s",
                DEVICE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the host has its end of the port open. Until
/// then a read returns 0, as at the end of the session, and what is
/// written is dropped (`ready` among it); `poll` shows `POLLHUP` while the
/// host's side is closed (virtio_console's `port_fops_poll`).
fn wait_for_host(port: &File) -> Result<(), String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + HOST_WAIT;
    // No wait in the poll itself: a connected host sends nothing before
    // `Ready`, so a timeout here was always spent in full (100 ms a boot).
    let tick = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut said = false;
    loop {
        let mut fds = [PollFd::new(port, PollFlags::IN)];
        // An error (EINTR) only means looking again.
        let _ = poll(&mut fds, Some(&tick));
        if !fds[0].revents().contains(PollFlags::HUP) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the host did not open its end of `{PORT_NAME}` within {}s",
                HOST_WAIT.as_secs()
            ));
        }
        if !said {
            say!("waiting for the host to open `{PORT_NAME}`");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn find_port() -> Option<PathBuf> {
    std::fs::read_dir("/sys/class/virtio-ports")
        .ok()?
        .flatten()
        .find(|e| {
            std::fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim() == PORT_NAME)
        })
        .map(|e| Path::new("/dev").join(e.file_name()))
}

/// The image disk, read-only at [`IMAGE_AT`]: erofs, else squashfs. A
/// missing or unreadable disk is said and left: the plan naming
/// `/image` then fails at `Setup`, with the host told why.
fn mount_image() {
    let deadline = Instant::now() + DEVICE_WAIT;
    while !Path::new(IMAGE_DISK).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::create_dir_all(IMAGE_AT);
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    let mut errors = Vec::new();
    for fstype in ["erofs", "squashfs"] {
        match mount(
            Some(IMAGE_DISK),
            IMAGE_AT,
            Some(fstype),
            flags,
            None::<&str>,
        ) {
            Ok(()) => {
                say!("image {IMAGE_DISK} ({fstype}) at {IMAGE_AT}");
                return;
            }
            Err(e) => errors.push(format!("{fstype}: {e}")),
        }
    }
    say!(
        "the image disk {IMAGE_DISK} did not mount ({})",
        errors.join(", ")
    );
}

/// cgroup2 at `/sys/fs/cgroup`, handing the sandbox's cgroups the memory,
/// pids and (when present) cpu controllers.
fn cgroups() -> Result<(), String> {
    let at = "/sys/fs/cgroup";
    mount_fs("cgroup2", at, "cgroup2", nosuid_nodev_noexec(), "")?;
    let have = std::fs::read_to_string(format!("{at}/cgroup.controllers"))
        .map_err(|e| format!("reading the cgroup controllers: {e}"))?;
    let mut enable = Vec::new();
    for c in ["memory", "pids", "cpu"] {
        if have.split_whitespace().any(|h| h == c) {
            enable.push(format!("+{c}"));
        } else {
            say!("cgroup controller `{c}` is absent");
        }
    }
    std::fs::write(format!("{at}/cgroup.subtree_control"), enable.join(" "))
        .map_err(|e| format!("enabling cgroup controllers {enable:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_parameters_come_from_the_command_line() {
        let cmdline = "console=ttyS0 virtio_mmio.device=4K@0xfeb00000:12 virtio_mmio.device=4K@0xfeb01000:13 virtio-mmio.x=1 virtio_mmiox.device=no quiet virtio_mmio.flag\n";
        assert_eq!(
            params_for("virtio_mmio", cmdline),
            "device=4K@0xfeb00000:12 device=4K@0xfeb01000:13 x=1"
        );
        assert_eq!(params_for("virtio_blk", cmdline), "");
        assert_eq!(module_name("virtio-mmio.ko"), "virtio_mmio");
        assert_eq!(module_name("erofs.ko"), "erofs");
        assert_eq!(module_name("virtio_blk.ko.xz"), "virtio_blk");
        assert!(module_flags("virtio_blk.ko.xz").bits() == MODULE_INIT_COMPRESSED_FILE);
        assert!(module_flags("erofs.ko").is_empty());
    }
}
