//! What every cordon backend shares, so that each backend crate holds only
//! what its engine does differently and no backend crate depends on
//! another:
//!
//! - the host ids a sandbox runs as: the fresh uid leases ([`IdLease`],
//!   [`lease_id`]) and the fixed ids ([`WORKLOAD_ID`], [`INSIDE_ID`], …),
//!   each defined once;
//! - the rung profiles ([`RungProfile`]): what the `process` and
//!   `container` rungs differ in, and the filesystem view a container-rung
//!   sandbox has (the microvm backend holds the same view in its guest);
//! - the init program a host names for sandboxes ([`init_of`]);
//! - where an image's tree is on this host ([`stored_root`]);
//! - one backend over any engine ([`EngineBackend`] over an [`Engine`]):
//!   an engine backend is one `impl Engine` and a registration
//!   ([`register`]: its set-up, probe answer, residue, route out);
//! - what a sandbox does alike whatever runs it: an exec's refusals,
//!   command and bounds ([`exec`]), its host-side files and the trait
//!   methods every sandbox writes the same ([`hosted`]);
//! - how a sandbox trusts its egress proxy's CA, and its route's
//!   environment ([`trust`]);
//! - the warm exec's helper a warm container runs every exec through
//!   ([`podexec`]).

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

pub mod dirs;
pub mod engine;
pub mod exec;
pub mod hosted;
mod ids;
pub mod memo;
mod pausing;
pub mod podexec;
pub mod ports;
pub mod profile;
pub mod register;
pub mod trust;
pub mod workarea;
pub mod workspace;

pub use dirs::{remove_sandbox_dir, SandboxDirs};
pub use engine::{Engine, EngineBackend, Which};
pub use hosted::{change_egress, no_route, HostFiles, Serving, NO_ROUTE};
pub use ids::{lease_id, sweep_id_leases, IdLease, FRESH_IDS, ID_LEASES};
pub use pausing::Pausing;
pub use profile::RungProfile;
pub use register::EngineSetup;

/// For the macros' paths.
#[doc(hidden)]
pub use cordon_sandbox as __sandbox;

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;

use cordon_linux::InitProgram;
use cordon_sandbox::{BackendError, BackendSetup};

/// Fresh sandboxes run as host uid/gid `FRESH_ID_BASE + n`: unprivileged,
/// above every ordinary account, one per live sandbox machine-wide (see
/// [`IdLease`]).
pub const FRESH_ID_BASE: u32 = 2_000_000_000;
/// A sandbox over a work dir the operator names (`--work-dir`) runs as this
/// host uid/gid; the directory is mounted idmapped so that its owner shows
/// as this id (and what this id makes lands as the owner): no chown.
pub const WORK_DIR_ID: u32 = 1_999_999_999;
/// The uid/gid a workload of an engine backend (docker, gvisor) runs as
/// inside its sandbox; files it makes in the work dir are owned by it on
/// the host too. Unprivileged, above every ordinary account, and the uid
/// an operator's files would be handed to.
pub const WORKLOAD_ID: u32 = 1_999_999_998;
/// The uid/gid inside a container-rung sandbox (and a microvm guest's).
pub const INSIDE_ID: u32 = 1000;
/// A warm sandbox's init runs as host uid/gid `workload + INIT_ID_OFFSET`:
/// a uid of its own that the workload does not have.
pub const INIT_ID_OFFSET: u32 = 1_000_000_000;

/// The names under which an engine records a sandbox's key and
/// directory on what it makes (docker's labels, runsc's annotations), so
/// any cordon process finds it by scope and thread.
pub mod labels {
    pub const SCOPE: &str = "dev.cordon.scope";
    pub const THREAD: &str = "dev.cordon.thread";
    pub const AGENT_DIR: &str = "dev.cordon.agent-dir";
    /// The sandbox's directory on the engine's host.
    pub const DIR: &str = "dev.cordon.dir";
}

/// Makes names unique within this process (cgroups, directories, lease
/// search starts).
pub static NEXT: AtomicU32 = AtomicU32::new(0);

/// Whether process `pid` is gone: no such process, or one that has
/// exited and waits to be reaped (a zombie, as a keeper whose parent is
/// an init that does not reap; its pid is not reused while it is one).
/// What every backend's sweep asks of a residue's maker.
pub fn gone(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return !std::path::Path::new(&format!("/proc/{pid}")).exists();
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..))
        .and_then(|rest| rest.split_whitespace().next());
    matches!(state, Some("Z" | "X"))
}

/// A sandbox's program resolved in its own filesystem view (links
/// resolved), as the compute guard asks of every backend before an exec:
/// refused, with why, when it cannot be.
pub fn resolve_in(
    view: &dyn cordon_confine::FsView,
    program: &str,
) -> Result<cordon_sandbox::ResolvedCommand, cordon_sandbox::SandboxError> {
    let c = cordon_confine::command::resolve(view, program).map_err(|e| {
        cordon_sandbox::SandboxError::Refused {
            reason: e.to_string(),
            rules: Vec::new(),
        }
    })?;
    Ok(cordon_sandbox::ResolvedCommand {
        command: c.command,
        command_target: c.command_target,
    })
}

/// What every OCI engine backend serves (docker, gvisor): commands, code,
/// files in and declared files out (from the work dir on the host), a
/// workspace (mounted copy-on-write on the host), the network through
/// cordon's egress proxy (the one route out of a sandbox whose spec names
/// hosts), and ports (a sandbox made with `requires: [ports]` listens in
/// a namespace of its own, which cordon's forward connects into).
pub fn engine_capabilities() -> cordon_sandbox::CapabilitySet {
    use cordon_sandbox::Capability;
    [
        Capability::Exec,
        Capability::RunCode,
        Capability::FilesIn,
        Capability::FilesOut,
        Capability::FilesList,
        Capability::Network,
        Capability::Workspace,
        Capability::Snapshot,
        Capability::Ports,
    ]
    .into_iter()
    .collect()
}

/// A backend's failure in `operation`.
pub fn failed(operation: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Failed {
        operation,
        reason: reason.into(),
    }
}

/// A backend's refusal in `operation`: what the request asks cannot be
/// served (nothing was made).
pub fn refused(operation: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Refused {
        operation,
        reason: reason.into(),
    }
}

/// `done` when nothing failed, else every failure in `operation`.
pub fn all_done<T>(
    done: T,
    operation: &'static str,
    failures: Vec<String>,
) -> Result<T, BackendError> {
    if failures.is_empty() {
        Ok(done)
    } else {
        Err(failed(operation, failures.join("; ")))
    }
}

/// The program the host named to run as a sandbox's init (the `cordon`
/// binary's hidden subcommand), when it named one.
pub fn init_of(setup: &BackendSetup) -> Option<InitProgram> {
    setup.init.as_ref().map(|c| {
        c.args
            .iter()
            .fold(InitProgram::new(&c.path), |i, a| i.arg(a))
    })
}

/// Where the image `image` names is on this host: `/` for the built-in
/// `host` image, the stored root for an image of cordon's store (a name
/// the store lacks is refused with the store's own fix). An engine on this
/// host binds from there.
pub fn stored_root(image: &str) -> Result<PathBuf, String> {
    if image == "host" {
        return Ok(PathBuf::from("/"));
    }
    let store = cordon_image::ImageStore::open(&cordon_image::ImageStore::default_root())
        .map_err(|e| format!("image `{image}`: {e}"))?;
    match store.resolve(image).map_err(|e| e.to_string())? {
        cordon_image::Resolved::Host => Ok(PathBuf::from("/")),
        cordon_image::Resolved::Stored { root, .. } => Ok(root),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_zombie_maker_is_gone_a_live_one_is_not() {
        assert!(!super::gone(std::process::id()));
        assert!(super::gone(u32::MAX)); // above any pid_max (at most 2^22)
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        // Exited, not yet reaped: a zombie (gvisor's and microvm's sweeps
        // took it for alive, and left its sandbox until it was reaped).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !super::gone(pid) {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
    }
}
