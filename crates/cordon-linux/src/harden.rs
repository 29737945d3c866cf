//! Self-confinement for a host process that parses hostile input: the
//! standalone egress proxy (`cordon proxy`) calls [`confine_self`] once it
//! has bound its listening socket and opened its audit log, while it is
//! still single-threaded, so every thread it starts afterwards (its tokio
//! runtime's) inherits the confinement.
//!
//! Layers, in the order applied:
//!
//! 1. `no_new_privs`: nothing the process runs can gain privileges.
//! 2. Capabilities: the effective, permitted, inheritable, ambient and
//!    bounding sets are emptied, so a proxy run as root keeps no privilege
//!    (it keeps uid 0's file ownership: Landlock, not capabilities, holds
//!    its writes).
//! 3. Landlock, filesystem: every write-like right (write, make and remove
//!    anything, refer, truncate and, from ABI 5, device ioctls) and execute
//!    are handled; write-file alone is granted, on the one
//!    [`SelfConfinement::writable_file`]. Reads are not handled. From ABI
//!    6, both scopes (signals, abstract unix sockets) are handled too.
//! 4. seccomp: a deny list answering an errno (never a kill, so a library
//!    probing a syscall degrades): exec, tracing, mounts, namespaces,
//!    kernel modules and other kernel attack surface (see [`deny_list`]).
//!
//! Everything that can fail for a reason the caller can act on (threads
//! running, Landlock absent or too old, the writable file not a regular
//! file, the filter not compiling) is found before the first layer is
//! applied: such an `Err` leaves the process as it was. An `Err` from a
//! step that applies a layer means the kernel refused it midway; the
//! process is then partly confined and must exit rather than serve.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope,
};
use seccompiler::BpfProgram;

use crate::linux::fs_rules::{abi_enum, enforce};
use crate::linux::probe::landlock_abi;
use crate::linux::seccomp::{compile_entries, Deny, Rungs, When, DENY};
use crate::missing::{Mechanism, Missing};

/// What [`confine_self`] confines the calling process to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelfConfinement {
    /// The one file the process may still write (append) to: its audit
    /// log, opened already or not. It must exist (creating it would need a
    /// right on its directory, which stays refused) and be a regular file.
    /// Landlock cannot tell an append from an overwrite: the file can be
    /// written anywhere, but not truncated, removed or renamed.
    pub writable_file: Option<PathBuf>,
    /// The operator's explicit flag: when Landlock is absent or below ABI
    /// [`LANDLOCK_ABI_NEEDED`], apply the other layers and say so in
    /// [`Applied`] instead of returning [`HardenError::Missing`]. A
    /// Landlock that is present is always applied.
    pub without_landlock: bool,
    /// When the process runs as root: the uid and gid it switches to
    /// (supplementary groups dropped) after emptying the bounding set and
    /// before clearing the rest, so what it can still read is what that
    /// uid can read, not everything root can. Ignored when not root.
    pub run_as: Option<(u32, u32)>,
}

/// The lowest Landlock ABI [`confine_self`] uses: ABI 3 is the first that
/// handles truncation, without which any file uid 0 owns could be emptied.
pub const LANDLOCK_ABI_NEEDED: u8 = 3;

/// What was applied, one line each, for the log and `--help`-level docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub lines: Vec<String>,
}

/// Why [`confine_self`] did not confine the process.
#[derive(Debug, thiserror::Error)]
pub enum HardenError {
    #[error(
        "self-confinement needs a single-threaded process (Landlock and capabilities hold only the calling thread, so a thread started earlier would stay unconfined), but /proc/self/task lists {0} threads: confine before starting the runtime or any other thread"
    )]
    Threads(usize),
    #[error("self-confinement cannot count this process's threads in /proc/self/task: {0}")]
    ThreadCount(std::io::Error),
    /// Landlock is absent or too old: the caller refuses to start unless
    /// the operator asked for [`SelfConfinement::without_landlock`].
    #[error("{0}")]
    Missing(Missing),
    #[error("the writable file `{path}`: {why}")]
    WritableFile { path: PathBuf, why: String },
    /// A step failed: before the first layer (nothing applied) or while
    /// applying one (the process is partly confined and must exit).
    #[error("self-confinement, {step}: {detail}")]
    Step { step: &'static str, detail: String },
}

fn step<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> HardenError {
    move |e| HardenError::Step {
        step,
        detail: e.to_string(),
    }
}

/// Syscalls the proxy's filter adds to the sandbox's shared list.
const PROXY_ONLY: &[Deny] = &[
    Deny {
        name: "execve",
        nr: libc::SYS_execve,
        when: When::Always,
        errno: libc::EPERM,
        rungs: Rungs::Both,
        why: "the proxy never runs another program; a hijacked proxy would start a shell",
    },
    Deny {
        name: "execveat",
        nr: libc::SYS_execveat,
        when: When::Always,
        errno: libc::EPERM,
        rungs: Rungs::Both,
        why: "exec through a file descriptor (see execve)",
    },
    Deny {
        name: "fanotify_init",
        nr: libc::SYS_fanotify_init,
        when: When::Always,
        errno: libc::EPERM,
        rungs: Rungs::Both,
        why: "watch and block other processes' file access",
    },
    Deny {
        name: "iopl",
        nr: libc::SYS_iopl,
        when: When::Always,
        errno: libc::EPERM,
        rungs: Rungs::Both,
        why: "raw I/O port access",
    },
    Deny {
        name: "ioperm",
        nr: libc::SYS_ioperm,
        when: When::Always,
        errno: libc::EPERM,
        rungs: Rungs::Both,
        why: "raw I/O port access",
    },
];

/// The shared entries the proxy does not take: the sandbox's socket-family
/// limits (the proxy's resolver may need netlink; Landlock and the network
/// namespace are what hold a sandbox's sockets, not this filter).
const SHARED_NOT_TAKEN: &[&str] = &["socket"];

fn proxy_entries() -> impl Iterator<Item = &'static Deny> {
    DENY.iter()
        .filter(|d| d.rungs == Rungs::Both && !SHARED_NOT_TAKEN.contains(&d.name))
        .chain(PROXY_ONLY.iter())
}

/// The proxy's seccomp deny list as `(syscall, reason)` pairs, in order,
/// one pair per entry (a syscall denied under several argument patterns
/// appears once per pattern).
pub fn deny_list() -> Vec<(&'static str, &'static str)> {
    proxy_entries().map(|d| (d.name, d.why)).collect()
}

fn compile_filter() -> Result<Vec<BpfProgram>, HardenError> {
    let programs =
        compile_entries(proxy_entries()).map_err(step("compiling the seccomp filter"))?;
    crate::linux::seccomp_merge::merge(&programs)
        .map(|one| vec![one])
        .map_err(step("compiling the seccomp filter"))
}

/// Which Landlock ABI to apply, from the one `found`: `Ok(None)` when
/// there is none to apply and the operator allowed that.
fn landlock_level(found: u8, without_landlock: bool) -> Result<Option<u8>, Missing> {
    if found >= LANDLOCK_ABI_NEEDED {
        return Ok(Some(found));
    }
    if without_landlock {
        return Ok(None);
    }
    let found_text = match found {
        0 => "no landlock (not built, or not in the lsm= list)".to_string(),
        n => format!(
            "landlock ABI {n}, which cannot refuse truncation (ABI {LANDLOCK_ABI_NEEDED}, Linux 6.2, is needed)"
        ),
    };
    Err(Missing::one(
        Mechanism::Landlock,
        found_text,
        "boot a kernel with Landlock ABI 3 or later enabled (lsm=landlock,...), or start the proxy with its explicit flag to run without filesystem confinement",
    ))
}

/// The rights handled at `abi`: every write-like right, and execute.
fn handled(abi: landlock::ABI) -> BitFlags<AccessFs> {
    AccessFs::from_write(abi) | AccessFs::Execute
}

fn check_writable(path: &Path) -> Result<(), HardenError> {
    let bad = |why: String| HardenError::WritableFile {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| {
        bad(format!(
            "{e} (it must exist before confining: creating it later is refused)"
        ))
    })?;
    if !meta.is_file() {
        // A grant on a directory would reach everything beneath it.
        return Err(bad("not a regular file".into()));
    }
    Ok(())
}

fn landlock_ruleset(
    c: &SelfConfinement,
    level: u8,
) -> Result<(RulesetCreated, Vec<String>), HardenError> {
    let abi = abi_enum(level);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled(abi))
        .map_err(step("landlock"))?;
    let scoped = level >= 6;
    if scoped {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(step("landlock scoping"))?;
    }
    let mut created = ruleset.create().map_err(step("landlock"))?;
    let granted = match &c.writable_file {
        Some(path) => {
            check_writable(path)?;
            let fd = PathFd::new(path).map_err(|e| HardenError::WritableFile {
                path: path.clone(),
                why: e.to_string(),
            })?;
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::WriteFile))
                .map_err(step("landlock rule on the writable file"))?;
            format!("write-file granted on {} only", path.display())
        }
        None => "granted on nothing".to_string(),
    };
    let ioctl = if level >= 5 { ", device ioctls" } else { "" };
    let mut lines = vec![format!(
        "landlock (ABI {level}): writing, creating, removing, renaming and linking files, truncation{ioctl} and execution refused everywhere; {granted}; reads not restricted"
    )];
    lines.push(if scoped {
        format!("landlock scoping (ABI {level}): no signals to, and no abstract unix sockets of, processes outside this one")
    } else {
        format!("landlock scoping: NOT applied (ABI {level} has none; 6 is needed): signals and abstract unix sockets are not confined")
    });
    Ok((created, lines))
}

fn thread_count() -> Result<usize, HardenError> {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc/self/task").map_err(HardenError::ThreadCount)? {
        entry.map_err(HardenError::ThreadCount)?;
        n += 1;
    }
    Ok(n)
}

/// `/proc/self/status` fields that must read as `want` after confining.
fn verify_status(checks: &[(&str, u64)]) -> Result<(), HardenError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(step("verifying"))?;
    for (key, want) in checks {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .ok_or_else(|| step("verifying")(format!("no {key} in /proc/self/status")))?;
        let got = if key.starts_with("Cap") {
            u64::from_str_radix(value, 16).ok()
        } else {
            value.parse().ok()
        };
        if got != Some(*want) {
            return Err(step("verifying")(format!(
                "/proc/self/status has {key} {value}, not {want}"
            )));
        }
    }
    Ok(())
}

fn drop_capabilities(run_as: Option<(u32, u32)>) -> Result<String, HardenError> {
    use caps::{CapSet, Capability};
    let permitted = caps::read(None, CapSet::Permitted).map_err(step("reading capabilities"))?;
    // The bounding set shrinks only with CAP_SETPCAP. Without it (a proxy
    // not run as root) the process holds no capability to keep, and
    // no_new_privs (with exec refused) means it cannot gain one.
    let bounding = if permitted.contains(&Capability::CAP_SETPCAP) {
        for cap in caps::all() {
            caps::drop(None, CapSet::Bounding, cap).map_err(step("emptying the bounding set"))?;
        }
        true
    } else {
        false
    };
    let mut switched = None;
    if let Some((uid, gid)) = run_as {
        if nix::unistd::geteuid().is_root() && uid != 0 && gid != 0 {
            use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
            setgroups(&[]).map_err(step("dropping supplementary groups"))?;
            let g = Gid::from_raw(gid);
            setresgid(g, g, g).map_err(step("switching gid"))?;
            let u = Uid::from_raw(uid);
            setresuid(u, u, u).map_err(step("switching uid"))?;
            switched = Some(uid);
        }
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(step("clearing capabilities"))?;
    }
    let mut zero = vec![
        ("CapInh:", 0),
        ("CapPrm:", 0),
        ("CapEff:", 0),
        ("CapAmb:", 0),
    ];
    if bounding {
        zero.push(("CapBnd:", 0));
    }
    verify_status(&zero)?;
    let uid_line = match switched {
        Some(uid) => {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let want = format!("{uid}\t{uid}\t{uid}\t{uid}");
            if !status
                .lines()
                .any(|l| l.strip_prefix("Uid:").is_some_and(|v| v.trim() == want))
            {
                return Err(HardenError::Step {
                    step: "switching uid",
                    detail: "the kernel reports another uid".into(),
                });
            }
            format!("; running as uid {uid} (no supplementary groups)")
        }
        None => String::new(),
    };
    Ok(if bounding {
        format!("capabilities: effective, permitted, inheritable, ambient and bounding sets empty{uid_line}")
    } else {
        format!("capabilities: effective, permitted, inheritable and ambient sets empty; bounding set left (no CAP_SETPCAP to shrink it; no_new_privs keeps it unreachable){uid_line}")
    })
}

/// Confines the calling process; see the module documentation for the
/// layers. Call it while single-threaded: it refuses (and applies
/// nothing) if `/proc/self/task` holds more than one thread.
pub fn confine_self(c: &SelfConfinement) -> Result<Applied, HardenError> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(HardenError::Threads(threads));
    }
    // Everything that can be refused is settled before the first layer.
    let found = landlock_abi();
    let level = landlock_level(found, c.without_landlock).map_err(HardenError::Missing)?;
    let landlock = match level {
        Some(level) => Some(landlock_ruleset(c, level)?),
        None => None,
    };
    let programs = compile_filter()?;

    let mut lines =
        vec!["single-threaded when confined: every later thread inherits all of this".to_string()];

    nix::sys::prctl::set_no_new_privs().map_err(step("setting no_new_privs"))?;
    lines.push("no_new_privs: set".into());

    lines.push(drop_capabilities(c.run_as)?);

    match landlock {
        Some((created, landlock_lines)) => {
            enforce(created).map_err(step("applying landlock"))?;
            lines.extend(landlock_lines);
        }
        None => lines.push(format!(
            "landlock: NOT applied (found ABI {found}, {LANDLOCK_ABI_NEEDED} needed; the operator chose to run without it): writes and execution are held only by seccomp's exec refusal, not on files"
        )),
    }

    for program in &programs {
        seccompiler::apply_filter_all_threads(program).map_err(step("installing seccomp"))?;
    }
    let mut names: Vec<&str> = proxy_entries().map(|d| d.name).collect();
    names.dedup();
    lines.push(format!(
        "seccomp: {} refused with an errno (clone only with namespace flags, clone3 ENOSYS so the C library falls back to clone, personality only to change the domain, ioctl only TIOCSTI/TIOCLINUX); x32 syscalls kill",
        names.join(", ")
    ));

    verify_status(&[("NoNewPrivs:", 1), ("Seccomp:", 2)])?;
    Ok(Applied { lines })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brief_list_is_denied_with_eperm_or_enosys() {
        let entries: Vec<&Deny> = proxy_entries().collect();
        for name in [
            "execve",
            "execveat",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "unshare",
            "setns",
            "bpf",
            "init_module",
            "finit_module",
            "delete_module",
            "kexec_load",
            "kexec_file_load",
            "keyctl",
            "add_key",
            "request_key",
            "userfaultfd",
            "perf_event_open",
            "personality",
            "swapon",
            "swapoff",
            "reboot",
            "acct",
            "quotactl",
            "open_by_handle_at",
            "name_to_handle_at",
            "fanotify_init",
            "iopl",
            "ioperm",
            "clone",
            "clone3",
        ] {
            let found: Vec<_> = entries.iter().filter(|d| d.name == name).collect();
            assert!(!found.is_empty(), "`{name}` is not denied");
            for d in found {
                let want = if name == "clone3" {
                    libc::ENOSYS
                } else {
                    libc::EPERM
                };
                assert_eq!(d.errno, want, "`{name}`");
            }
        }
        // Only namespace-creating clones; fork and threads stay.
        let clone = entries.iter().find(|d| d.name == "clone");
        assert!(matches!(
            clone.map(|d| d.when),
            Some(When::AnyBit { arg: 0, .. })
        ));
        assert!(entries.iter().all(|d| d.name != "socket"));
        assert!(entries.iter().all(|d| d.why.len() > 10));
    }

    #[test]
    fn the_filter_compiles_with_the_x32_guard_first() {
        // x32 guard, EPERM, ENOSYS: three programs, joined into one.
        let parts = compile_entries(proxy_entries()).unwrap();
        assert_eq!(parts.len(), 3);
        let programs = compile_filter().unwrap();
        assert_eq!(programs.len(), 1);
        assert_eq!(programs[0][2].k, libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn landlock_below_abi_3_is_refused_unless_the_operator_allows_it() {
        for found in [0, 1, 2] {
            let missing = landlock_level(found, false).unwrap_err();
            assert!(missing.names(Mechanism::Landlock));
            let text = missing.to_string();
            assert!(text.contains("help:"), "{text}");
            assert_eq!(landlock_level(found, true).unwrap(), None);
        }
        assert!(landlock_level(2, false)
            .unwrap_err()
            .to_string()
            .contains("truncation"));
        for found in [3, 5, 6] {
            // A Landlock that is there is applied, flag or not.
            assert_eq!(landlock_level(found, false).unwrap(), Some(found));
            assert_eq!(landlock_level(found, true).unwrap(), Some(found));
        }
    }

    #[test]
    fn every_write_right_and_execute_are_handled_and_reads_are_not() {
        for level in [3u8, 5, 6] {
            let abi = abi_enum(level);
            let h = handled(abi);
            for right in [
                AccessFs::WriteFile,
                AccessFs::MakeReg,
                AccessFs::MakeDir,
                AccessFs::MakeSym,
                AccessFs::MakeSock,
                AccessFs::MakeFifo,
                AccessFs::MakeChar,
                AccessFs::MakeBlock,
                AccessFs::RemoveFile,
                AccessFs::RemoveDir,
                AccessFs::Refer,
                AccessFs::Truncate,
                AccessFs::Execute,
            ] {
                assert!(h.contains(right), "ABI {level}: {right:?} not handled");
            }
            assert_eq!(h.contains(AccessFs::IoctlDev), level >= 5);
            assert!(!h.contains(AccessFs::ReadFile) && !h.contains(AccessFs::ReadDir));
        }
    }

    #[test]
    fn the_writable_file_must_be_an_existing_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            check_writable(dir.path()),
            Err(HardenError::WritableFile { .. })
        ));
        assert!(matches!(
            check_writable(&dir.path().join("absent")),
            Err(HardenError::WritableFile { .. })
        ));
        let file = dir.path().join("audit.log");
        std::fs::write(&file, b"").unwrap();
        assert!(check_writable(&file).is_ok());
    }
}
