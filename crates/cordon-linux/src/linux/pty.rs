//! A warm exec's pseudo-terminal, from a devpts instance of the exec's own.
//!
//! ```text
//! exec's PID 1 (own mount namespace): mount devpts (newinstance) at /dev/pts
//!   drops to the workload's uid, opens /dev/pts/ptmx: master + slave 0
//!   master ── SCM_RIGHTS ──> init ── SCM_RIGHTS, on `Started` ──> owner
//!   └─ the command: setsid, TIOCSCTTY on the slave, slave as 0/1/2
//! ```
//!
//! The host's terminal and the host's `/dev/pts` are never in the sandbox:
//! the instance is mounted fresh in a mount namespace only this exec has,
//! so it holds nothing but the exec's own terminals, and it ends with the
//! exec. The owner holds the master; it writes the input, reads the output
//! and resizes with [`resize_pty`] (the kernel sends `SIGWINCH` to the
//! terminal's foreground process group).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::mount::{mount, MsFlags};
use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use serde::{Deserialize, Serialize};

/// A terminal's size, in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl From<TtySize> for Winsize {
    fn from(s: TtySize) -> Winsize {
        Winsize {
            ws_row: s.rows,
            ws_col: s.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// Where each tty exec mounts its devpts instance (`/dev/ptmx` in the
/// warm root is a link to `pts/ptmx`).
pub(crate) const DEVPTS: &str = "/dev/pts";

/// Most terminals one exec's instance holds: its own, and any the command
/// opens itself through `/dev/ptmx` (`script`, `tmux`). Instances other
/// than the host's initial one share the kernel's `pty/max - pty/reserve`;
/// this keeps one exec from using that up.
pub(crate) const MAX_PTYS: u32 = 16;

/// Sets the terminal's size through its master (`TIOCSWINSZ`); the kernel
/// sends `SIGWINCH` to the terminal's foreground process group when the
/// size changes.
pub fn resize_pty(master: impl AsFd, size: TtySize) -> io::Result<()> {
    rustix::termios::tcsetwinsize(master, size.into()).map_err(Into::into)
}

/// Mounts a new devpts instance at [`DEVPTS`]. Run in the exec's own mount
/// namespace (its mounts already private), with `CAP_SYS_ADMIN` there.
/// No `gid=`: a new terminal belongs to the uid and gid that opened it.
pub(crate) fn mount_instance() -> nix::Result<()> {
    let opts = format!("newinstance,ptmxmode=0666,mode=0620,max={MAX_PTYS}");
    mount(
        Some("devpts"),
        Path::new(DEVPTS),
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(opts.as_str()),
    )
}

/// Opens a new terminal in the instance at [`DEVPTS`]: the master and its
/// slave (opened through the master, `TIOCGPTPEER`, not by a path),
/// unlocked, with the window size set. Both close-on-exec, neither the
/// caller's controlling terminal.
pub(crate) fn open(size: TtySize) -> io::Result<(OwnedFd, OwnedFd)> {
    let ptmx = Path::new(DEVPTS).join("ptmx");
    let master = rustix::fs::open(
        &ptmx,
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // The master must be of the instance mounted there, nothing else.
    let instance = rustix::fs::stat(DEVPTS)?;
    if rustix::fs::fstat(&master)?.st_dev != instance.st_dev {
        return Err(io::Error::other(
            "the terminal opened is not of the exec's own devpts instance",
        ));
    }
    rustix::pty::unlockpt(&master)?;
    rustix::termios::tcsetwinsize(&master, size.into())?;
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    Ok((master, slave))
}

/// In the command's process, before `execve`: a session of its own whose
/// controlling terminal is `slave`, so the command's process group is the
/// terminal's foreground group (`SIGWINCH`, `^C`, job control).
pub(crate) fn take_as_controlling(slave: impl AsFd) -> io::Result<()> {
    rustix::process::setsid()?;
    rustix::process::ioctl_tiocsctty(slave)?;
    Ok(())
}
