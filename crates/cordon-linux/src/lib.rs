//! cordon's Linux enforcement: holds a confinement [`Plan`] below the
//! workload, at the syscall filter, the namespaces and the filesystem.
//!
//! - [`Plan`] (validated from the serde wire form [`PlanSpec`]) says what the
//!   kernel must hold: the [`Rung`], path-beneath [`FsRule`]s, masks, the work
//!   dir, the environment, [`Bounds`], the first command and the [`Ids`].
//! - [`Enforcer`] is the seam: [`Enforcer::available`] says what is
//!   [`Missing`] for a rung; [`Enforcer::confine`] starts the plan.
//!   [`LinuxEnforcer`] implements it on Linux; [`Refusing`] refuses
//!   everywhere (the only enforcer on other targets).
//! - [`launch`] starts an init program (any binary that calls
//!   [`init_main`] when given the launcher's arguments) and returns a
//!   [`Running`]; [`Running::wait`] enforces the CPU and wall-clock bounds and
//!   returns an [`Outcome`].
//! - A plan's `proxy_port` (container rung) is the sandbox's one TCP route:
//!   stage 1 listens on `127.0.0.1:proxy_port` inside the sandbox's network
//!   namespace before anything else runs there and hands the listener to
//!   the owner (`Running::take_proxy_listener`,
//!   `WarmSandbox::take_proxy_listener`); Landlock lets the workload
//!   connect to that port only and bind none.
//! - [`confine_self`] confines the calling process itself (the standalone
//!   egress proxy, once it has bound its socket and opened its audit log):
//!   no_new_privs, no capabilities, Landlock on writes and exec, seccomp.
//!
//! Process architecture (container rung): owner → init stage 1 (unshares,
//! the owner maps ids) → init stage 2 = PID 1 (builds the root, pivots,
//! drops, Landlock, seccomp) → workload. Process rung: owner → init (drops
//! to the dedicated uid, Landlock, seccomp) → exec workload. See
//! `docs/security.md` and the "Enforcing on Linux" section of
//! `docs/design.md`.

mod enforcer;
mod missing;
mod outcome;
mod plan;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod bundle;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod fdpass;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod harden;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod netns;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod volume;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod workspace;

/// Fuzzing entries (`fuzz/`); not API.
#[doc(hidden)]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod fuzz {
    /// The `init_wire` target: the frames between the owner and the init.
    pub fn init_frames(data: &[u8]) {
        crate::linux::proto::fuzz_frames(data)
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use enforcer::{
    platform_enforcer, InitProgram, LaunchError, LinuxEnforcer, Mechanisms, Running, SandboxStdio,
};
pub use enforcer::{ConfineError, Enforcer, Refusing};
pub use missing::{Absent, Mechanism, Missing};
pub use outcome::{Bound, Cancel, Outcome, Termination};
pub use plan::{
    Bounds, FsRule, Ids, Plan, PlanError, PlanSpec, Rung, KVM_DEVICE, SECRETS_AT, SYSTEM_BUNDLE,
    TRUST_AT, TRUST_BUNDLE,
};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use harden::{confine_self, Applied, HardenError, SelfConfinement};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::launch::{launch, launch_named};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::pty::{resize_pty, TtySize};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::warm::{ExecStdio, InitIds, WarmExec, WarmRunning, WarmSandbox};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::warm_init::WARM_LANDLOCK_ABI;

/// Kills everything in the cgroup directories `dirs` (and below) and removes
/// them: reclaims a warm sandbox from its record when its owner is gone.
/// Sandbox cgroups below this process's own cgroup whose owning process is
/// gone (by name), each with its directories: what a killed owner left.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn orphaned_sandbox_cgroups() -> Vec<(String, Vec<std::path::PathBuf>)> {
    linux::cgroup::orphaned_sandboxes()
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn reclaim_cgroups(dirs: &[std::path::PathBuf]) -> std::io::Result<()> {
    linux::cgroup::reclaim(dirs)
}
/// Freezes (`true`) or thaws every process in the cgroup whose directories
/// are `dirs` (a run's [`Running::cgroup_dirs`]), returning once the
/// kernel says it is done; an `Unsupported` error when none of them is a
/// freezer's (v1 `freezer` not mounted, no v2 `cgroup.freeze`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn freeze_cgroups(dirs: &[std::path::PathBuf], frozen: bool) -> std::io::Result<()> {
    linux::cgroup::freeze_dirs(dirs, frozen)
}
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::seccomp::deny_list as seccomp_deny_list;
/// The container rung's seccomp filter as the programs it is made of (in
/// installation order) and as the one program cordon installs: for
/// `benches/seccomp.rs`, which times a workload's system calls under each.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[doc(hidden)]
pub fn seccomp_container_filter(
) -> Result<(Vec<Vec<libc::sock_filter>>, Vec<libc::sock_filter>), String> {
    let parts = linux::seccomp::compile(plan::Rung::Container).map_err(|e| e.to_string())?;
    let one = linux::seccomp_merge::merge(&parts).map_err(|e| e.to_string())?;
    let conv = |p: &Vec<seccompiler::sock_filter>| {
        p.iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect::<Vec<_>>()
    };
    Ok((parts.iter().map(conv).collect(), conv(&one)))
}
pub use linux::seccomp::{container_denials, DeniedCall, DeniedWhen};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::seccomp::{engine_program as seccomp_engine_program, SeccompError};
/// Removes the System V IPC objects of the caller's namespace that `uid`
/// owns or created (see `linux::sysv`): (how many, what failed).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use linux::sysv::remove_owned_by as remove_sysv_ipc_of;

/// The init program's entry point. A binary that embeds cordon-linux calls
/// this when started with the launcher's arguments (see [`InitProgram`]);
/// it never returns.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn init_main() -> ! {
    linux::init::init_main()
}

/// The init program's entry point; on this target there is nothing to set
/// up, so it refuses.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub fn init_main() -> ! {
    eprintln!("cordon init: sandboxes are enforced on Linux only");
    std::process::exit(125)
}
