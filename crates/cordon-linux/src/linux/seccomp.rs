//! The syscall filter, kept as commented data: [`DENY`] is the whole list,
//! one entry per syscall (or syscall + argument pattern) with the reason it is
//! there. [`compile`] turns it into BPF with `seccompiler` when the init
//! starts (microseconds; the table is checked by unit tests at build time).
//!
//! The filter is a deny-list over an allow-by-default: the workload is a
//! general program (a Python interpreter, a shell), and the other layers
//! (namespaces, Landlock, cgroups) bound what the allowed syscalls can reach.
//! What is denied here is kernel attack surface and escape primitives that no
//! workload needs.
//!
//! Every non-native ABI is refused: `seccompiler` kills on any audit arch
//! other than x86_64 (the ia32 `int 0x80` entry), and [`compile`] prepends a
//! check that kills any syscall number with the x32 bit (`0x4000_0000`) set.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use crate::plan::Rung;

/// When an entry applies to a call of its syscall.
#[derive(Clone, Copy, Debug)]
pub(crate) enum When {
    /// Every call.
    Always,
    /// Any of these bits set in the 64-bit argument `arg`.
    AnyBit { arg: u8, bits: &'static [u64] },
    /// The low 32 bits of argument `arg` equal `value` (the kernel reads
    /// `int`/`unsigned int` arguments as 32 bits, so the high half must not
    /// be able to dodge the comparison).
    Eq32 { arg: u8, value: u64 },
    /// The low 32 bits of argument `arg` are none of `values`.
    NotIn32 { arg: u8, values: &'static [u64] },
}

/// Which rungs an entry applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rungs {
    Both,
    /// Only at the process rung, where Landlock cannot contain what a socket reaches.
    ProcessOnly,
}

/// One entry of the deny list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deny {
    pub name: &'static str,
    pub nr: i64,
    pub when: When,
    pub errno: i32,
    pub rungs: Rungs,
    pub why: &'static str,
}

const NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

const SOCKET_FAMILIES_ALLOWED: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
];

macro_rules! deny {
    ($name:ident, $why:expr) => {
        deny!($name, When::Always, libc::EPERM, Rungs::Both, $why)
    };
    ($name:ident, $when:expr, $errno:expr, $rungs:expr, $why:expr) => {
        Deny {
            name: stringify!($name),
            nr: paste_nr!($name),
            when: $when,
            errno: $errno,
            rungs: $rungs,
            why: $why,
        }
    };
}

macro_rules! paste_nr {
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (chroot) => {
        libc::SYS_chroot
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (clone) => {
        libc::SYS_clone
    };
    (clone3) => {
        libc::SYS_clone3
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
    (quotactl_fd) => {
        libc::SYS_quotactl_fd
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (ioctl) => {
        libc::SYS_ioctl
    };
    (socket) => {
        libc::SYS_socket
    };
    (acct) => {
        libc::SYS_acct
    };
    (lookup_dcookie) => {
        libc::SYS_lookup_dcookie
    };
    (personality) => {
        libc::SYS_personality
    };
}

/// The deny list. Each entry says why it is here; `docs/security.md`
/// repeats the list for readers of the documentation.
pub(crate) const DENY: &[Deny] = &[
    // --- reading or steering other processes
    deny!(ptrace, "attach to and rewrite another process; the classic sandbox escape"),
    deny!(process_vm_readv, "read another process's memory without ptrace"),
    deny!(process_vm_writev, "write another process's memory without ptrace"),
    // --- the mount table: the fresh root must stay as built
    deny!(mount, "remount or bind over the root the sandbox was given"),
    deny!(umount2, "unmount a mask and reveal what it hides"),
    deny!(pivot_root, "swap the root for another"),
    deny!(chroot, "change root; combined with a held fd, the classic chroot escape"),
    deny!(open_tree, "new mount API: clone a mount tree"),
    deny!(move_mount, "new mount API: attach a mount anywhere"),
    deny!(fsopen, "new mount API: create a filesystem context"),
    deny!(fsconfig, "new mount API: configure a filesystem context"),
    deny!(fsmount, "new mount API: turn a context into a mount"),
    deny!(fspick, "new mount API: reconfigure an existing mount"),
    deny!(mount_setattr, "new mount API: change mount flags (e.g. drop noexec or ro)"),
    // --- namespaces: a new user namespace hands back every capability inside it
    deny!(unshare, "create namespaces (a user namespace regains capabilities)"),
    deny!(setns, "join another namespace through a held fd"),
    deny!(
        clone,
        When::AnyBit { arg: 0, bits: NS_FLAGS },
        libc::EPERM,
        Rungs::Both,
        "clone with CLONE_NEW* flags creates namespaces; plain fork/threads stay allowed"
    ),
    deny!(
        clone3,
        When::Always,
        libc::ENOSYS,
        Rungs::Both,
        "clone3 passes its flags in memory the filter cannot read; ENOSYS makes the C library fall back to clone"
    ),
    // --- kernel attack surface no workload needs
    deny!(keyctl, "kernel keyrings are not namespaced; a shared keyring leaks credentials"),
    deny!(add_key, "kernel keyrings (see keyctl)"),
    deny!(request_key, "kernel keyrings (see keyctl)"),
    deny!(bpf, "load eBPF programs: large kernel attack surface"),
    deny!(perf_event_open, "performance counters: side channels and kernel attack surface"),
    deny!(userfaultfd, "pauses kernel faults at will; a standard exploit primitive"),
    deny!(io_uring_setup, "io_uring bypasses the syscall filter for the operations it submits"),
    deny!(io_uring_enter, "io_uring (see io_uring_setup)"),
    deny!(io_uring_register, "io_uring (see io_uring_setup)"),
    deny!(kexec_load, "replace the running kernel"),
    deny!(kexec_file_load, "replace the running kernel"),
    deny!(init_module, "load kernel code"),
    deny!(finit_module, "load kernel code"),
    deny!(delete_module, "unload kernel code"),
    deny!(reboot, "reboot or halt the host"),
    deny!(swapon, "change the host's swap"),
    deny!(swapoff, "change the host's swap"),
    deny!(quotactl, "host filesystem quotas"),
    deny!(quotactl_fd, "host filesystem quotas"),
    deny!(open_by_handle_at, "open any file by handle, bypassing the path walk (the shocker escape)"),
    deny!(name_to_handle_at, "produce handles for open_by_handle_at"),
    deny!(acct, "host process accounting"),
    deny!(lookup_dcookie, "kernel profiling internals"),
    deny!(
        personality,
        When::NotIn32 { arg: 0, values: &[0, 0xffff_ffff] },
        libc::EPERM,
        Rungs::Both,
        "execution domains (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE) weaken the address-space defences; querying (0xffffffff) and PER_LINUX (0) stay"
    ),
    // --- terminals
    deny!(
        ioctl,
        When::Eq32 { arg: 1, value: libc::TIOCSTI },
        libc::EPERM,
        Rungs::Both,
        "TIOCSTI pushes keystrokes into a terminal's input: commands typed into the caller's shell"
    ),
    deny!(
        ioctl,
        When::Eq32 { arg: 1, value: libc::TIOCLINUX },
        libc::EPERM,
        Rungs::Both,
        "TIOCLINUX can paste a virtual console's selection into its input, like TIOCSTI"
    ),
    // --- sockets
    deny!(
        socket,
        When::NotIn32 { arg: 0, values: SOCKET_FAMILIES_ALLOWED },
        libc::EAFNOSUPPORT,
        Rungs::Both,
        "only unix, inet and inet6: no raw packet, netlink, vsock, bluetooth or other families"
    ),
    deny!(
        socket,
        When::Always,
        libc::EACCES,
        Rungs::ProcessOnly,
        "the process rung's network namespace is empty, but Landlock here cannot stop connect() to a pathname unix socket of a host service, so no socket is made at all (socketpair stays)"
    ),
];

/// The deny list as `(syscall, reason)` pairs, for diagnostics and docs.
pub fn deny_list() -> Vec<(&'static str, &'static str)> {
    DENY.iter().map(|d| (d.name, d.why)).collect()
}

/// One denial of the container rung's filter, for an enforcer that holds
/// it itself (the `gvisor` backend writes it as an OCI `linux.seccomp`,
/// which runsc loads inside its sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeniedCall {
    pub name: &'static str,
    pub errno: i32,
    pub when: DeniedWhen,
}

/// When a [`DeniedCall`] applies (the table's `When`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeniedWhen {
    Always,
    /// Any of these bits set in the 64-bit argument `arg`.
    AnyBit {
        arg: u8,
        bits: &'static [u64],
    },
    /// The low 32 bits of argument `arg` equal `value`.
    Eq32 {
        arg: u8,
        value: u64,
    },
    /// The low 32 bits of argument `arg` are none of `values`.
    NotIn32 {
        arg: u8,
        values: &'static [u64],
    },
}

/// The container rung's denials, as data.
pub fn container_denials() -> Vec<DeniedCall> {
    DENY.iter()
        .filter(|d| d.rungs == Rungs::Both)
        .map(|d| DeniedCall {
            name: d.name,
            errno: d.errno,
            when: match d.when {
                When::Always => DeniedWhen::Always,
                When::AnyBit { arg, bits } => DeniedWhen::AnyBit { arg, bits },
                When::Eq32 { arg, value } => DeniedWhen::Eq32 { arg, value },
                When::NotIn32 { arg, values } => DeniedWhen::NotIn32 { arg, values },
            },
        })
        .collect()
}

/// Errors building the filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are built for x86_64 only")]
    Arch,
    #[error("building the seccomp rule for `{name}`: {source}")]
    Rule {
        name: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("compiling the seccomp filter: {0}")]
    Compile(seccompiler::BackendError),
    #[error("installing the seccomp filter: {0}")]
    Install(seccompiler::Error),
    #[error("making one seccomp program of the filter's: {0}")]
    Merge(String),
}

fn condition(
    name: &'static str,
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, len, op, value).map_err(|source| SeccompError::Rule { name, source })
}

fn rules_for(entry: &Deny) -> Result<Vec<SeccompRule>, SeccompError> {
    let name = entry.name;
    let rule = |conds: Vec<SeccompCondition>| {
        SeccompRule::new(conds).map_err(|source| SeccompError::Rule { name, source })
    };
    Ok(match entry.when {
        When::Always => vec![],
        When::AnyBit { arg, bits } => bits
            .iter()
            .map(|&bit| {
                let c = condition(
                    name,
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                )?;
                rule(vec![c])
            })
            .collect::<Result<_, _>>()?,
        When::Eq32 { arg, value } => vec![rule(vec![condition(
            name,
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            value,
        )?])?],
        When::NotIn32 { arg, values } => {
            let conds = values
                .iter()
                .map(|&v| condition(name, arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v))
                .collect::<Result<_, _>>()?;
            vec![rule(conds)?]
        }
    })
}

// seccomp_data layout: nr at offset 0, arch at 4.
/// BPF_LD | BPF_W | BPF_ABS (BPF_LD and BPF_W are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Compiles the filter for `rung` into BPF programs, in installation order.
///
/// One program per distinct errno (seccompiler gives one match action per
/// program); the kernel runs all of them and a denial in any one wins over
/// the others' allow.
pub(crate) fn compile(rung: Rung) -> Result<Vec<BpfProgram>, SeccompError> {
    compile_entries(
        DENY.iter()
            .filter(|entry| entry.rungs == Rungs::Both || rung == Rung::Process),
    )
}

/// Compiles `entries` (whatever their `rungs`) into BPF programs, in
/// installation order: the x32 guard first, then one program per errno.
pub(crate) fn compile_entries<'a>(
    entries: impl IntoIterator<Item = &'a Deny>,
) -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|_| SeccompError::Arch)?;
    if std::env::consts::ARCH != "x86_64" {
        return Err(SeccompError::Arch);
    }
    // None = every call of the syscall; Some(rules) = any of the rules.
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Option<Vec<SeccompRule>>>> = BTreeMap::new();
    for entry in entries {
        let rules = rules_for(entry)?;
        let slot = by_errno
            .entry(entry.errno)
            .or_default()
            .entry(entry.nr)
            .or_insert_with(|| Some(Vec::new()));
        match (slot.as_mut(), rules.is_empty()) {
            // An unconditional entry wins over conditional ones.
            (_, true) => *slot = None,
            (Some(existing), false) => existing.extend(rules),
            (None, false) => {}
        }
    }
    let mut programs = Vec::new();
    for (errno, slots) in by_errno {
        let rules = slots
            .into_iter()
            .map(|(nr, rules)| (nr, rules.unwrap_or_default()))
            .collect();
        let errno = u32::try_from(errno).map_err(|_| SeccompError::Arch)?;
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno),
            arch,
        )
        .map_err(SeccompError::Compile)?;
        let program: BpfProgram = filter.try_into().map_err(SeccompError::Compile)?;
        programs.push(program);
    }
    // Refuse the x32 ABI: same audit arch as x86_64, syscall numbers with bit 30 set.
    let x32_guard = vec![
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    programs.insert(0, x32_guard);
    Ok(programs)
}

/// A denial an engine's sandbox adds when its network namespace holds no
/// route out: unix sockets only (the table's Docker form, `DockerNet::None`).
const ENGINE_UNIX_ONLY: Deny = Deny {
    name: "socket",
    nr: libc::SYS_socket,
    when: When::NotIn32 {
        arg: 0,
        values: &[libc::AF_UNIX as u64],
    },
    errno: libc::EAFNOSUPPORT,
    rungs: Rungs::Both,
    why: "an engine sandbox without a route out holds no Landlock: no inet socket is made at all",
};

/// A denial an engine's sandbox adds when nothing in it may serve.
const ENGINE_NO_LISTEN: Deny = Deny {
    name: "listen",
    nr: libc::SYS_listen,
    when: When::Always,
    errno: libc::EPERM,
    rungs: Rungs::Both,
    why: "an engine sandbox holds no Landlock to refuse a bind: nothing listens unless the spec asks for ports",
};

/// The container rung's filter narrowed as an engine's sandbox without
/// Landlock needs it (`unix_only`: no route out, so no inet socket;
/// `no_listen`: a route but no ports), as one program's bytes (`struct
/// sock_filter` in this machine's order): for a helper of cordon's that
/// installs it inside the engine (the gvisor backend's warm exec).
pub fn engine_program(unix_only: bool, no_listen: bool) -> Result<Vec<u8>, SeccompError> {
    let extra = [
        unix_only.then_some(&ENGINE_UNIX_ONLY),
        no_listen.then_some(&ENGINE_NO_LISTEN),
    ];
    let entries = DENY
        .iter()
        .filter(|entry| entry.rungs == Rungs::Both)
        .chain(extra.into_iter().flatten());
    let one = super::seccomp_merge::merge(&compile_entries(entries)?)?;
    let mut bytes = Vec::with_capacity(one.len() * 8);
    for i in &one {
        bytes.extend_from_slice(&i.code.to_ne_bytes());
        bytes.push(i.jt);
        bytes.push(i.jf);
        bytes.extend_from_slice(&i.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// Installs the filter for `rung` on the calling thread (and so on every
/// process it later starts). Sets `no_new_privs` (required by the kernel).
pub(crate) fn install(rung: Rung) -> Result<(), SeccompError> {
    seccompiler::apply_filter(&compile_one(rung)?).map_err(SeccompError::Install)
}

/// [`compile`]'s programs as one ([`super::seccomp_merge`]): one attach,
/// one run per system call, the same decisions.
pub(crate) fn compile_one(rung: Rung) -> Result<BpfProgram, SeccompError> {
    super::seccomp_merge::merge(&compile(rung)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_says_why() {
        for d in DENY {
            assert!(d.why.len() > 10, "`{}` has no reason", d.name);
        }
    }

    #[test]
    fn the_issue_list_is_covered() {
        let names: Vec<&str> = DENY.iter().map(|d| d.name).collect();
        for required in [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "pivot_root",
            "unshare",
            "setns",
            "clone",
            "clone3",
            "keyctl",
            "add_key",
            "request_key",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "reboot",
            "swapon",
            "swapoff",
            "quotactl",
            "open_by_handle_at",
            "ioctl",
            "socket",
        ] {
            assert!(names.contains(&required), "`{required}` is not denied");
        }
        let clone3 = DENY.iter().find(|d| d.name == "clone3");
        assert_eq!(clone3.map(|d| d.errno), Some(libc::ENOSYS));
    }

    #[test]
    fn compiles_for_both_rungs_with_the_x32_guard_first() {
        for rung in [Rung::Container, Rung::Process] {
            let programs = compile(rung).unwrap();
            assert!(programs.len() >= 3);
            let guard = &programs[0];
            assert_eq!(guard[1].k, X32_SYSCALL_BIT);
            assert_eq!(guard[2].k, libc::SECCOMP_RET_KILL_PROCESS);
        }
        // The process rung adds a program (socket → EACCES).
        assert_eq!(
            compile(Rung::Process).unwrap().len(),
            compile(Rung::Container).unwrap().len() + 1
        );
    }
}
