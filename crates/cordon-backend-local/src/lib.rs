//! cordon's local backends: the `process` and `container` rungs of
//! `cordon-linux` behind the sandbox protocol (`cordon_sandbox::Backend`).
//!
//! - [`LocalBackend`] serves one rung: [`cordon_sandbox::Backend::acquire`]
//!   creates the sandbox's work dir (or takes the one it was given) and
//!   stores the provenance ([`LocalSandbox`]); every exec is one confined
//!   launch over that work dir (process rung) or runs in the warm sandbox
//!   acquire built (container rung).
//! - Before anything starts, the first command is checked against the
//!   compute surface in full ([`cordon_confine::command::resolve`]
//!   canonicalises it in the sandbox's filesystem view), then
//!   [`cordon_policy::Policy::plan`] is translated
//!   ([`cordon_confine::translate`], in the workload's paths) and mapped
//!   into a `cordon_linux::PlanSpec` that is never wider than the policy;
//!   what cannot be held is refused, naming the rule.
//! - [`probe`] is what `cordon doctor` shows for the two rungs.
//! - What differs between the rungs is asked of one [`RungProfile`] each
//!   (`profile.rs`); the backend is `backend.rs`, a sandbox and its execs
//!   `sandbox.rs`, the uid leases `ids.rs`, the work dir `workdir.rs`, an
//!   exec's pipes `pipes.rs`.
//!
//! Egress: the container rung is `allowlist` — a sandbox whose spec names
//! hosts gets one route out, a loopback port in its own net namespace that
//! Landlock alone lets it connect to, served by `cordon-egress` in the
//! process that owns the sandbox; a spec that names none gets no route. The
//! process rung is `closed`.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod backend;
mod ids;
mod pipes;
pub mod profile;
pub mod register;
mod sandbox;
mod workdir;

pub use backend::{probe, LocalBackend};
pub use ids::{lease_id, sweep_id_leases, IdLease, ID_LEASES};
pub use pipes::{ExecPipes, OurEnds};
pub use profile::RungProfile;
pub use register::registrations;
pub use sandbox::{LocalSandbox, Started};

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::BackendError;

/// Fresh sandboxes run as host uid/gid `FRESH_ID_BASE + n`: unprivileged,
/// above every ordinary account, one per live sandbox machine-wide (see
/// [`IdLease`]).
pub const FRESH_ID_BASE: u32 = 2_000_000_000;
/// A sandbox over a work dir the operator names (`--work-dir`) runs as this
/// host uid/gid; the directory is mounted idmapped so that its owner shows
/// as this id (and what this id makes lands as the owner): no chown.
pub const WORK_DIR_ID: u32 = 1_999_999_999;
/// The uid/gid inside a container-rung sandbox.
pub const INSIDE_ID: u32 = 1000;
/// A warm sandbox's init runs as host uid/gid `workload + INIT_ID_OFFSET`:
/// a uid of its own that the workload does not have.
pub const INIT_ID_OFFSET: u32 = 1_000_000_000;

/// Where the work dir comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum WorkDir {
    /// A fresh volume of `max_disk` under `parent` (its root owned by the
    /// sandbox's host uid), made by cordon for the sandbox and removed at
    /// dispose.
    Fresh { parent: PathBuf },
    /// An operator's directory, never chowned: mounted idmapped (its owner
    /// shown as [`WORK_DIR_ID`]) on a filesystem no larger than `max_disk`.
    Given(PathBuf),
}

/// How a local backend is set up.
#[derive(Clone)]
pub struct LocalConfig {
    pub rung: Rung,
    pub policy: Arc<Policy>,
    /// The deployment the router decides in.
    pub env: Deployment,
    pub work_dir: WorkDir,
    /// The binary that runs `cordon_linux::init_main`.
    pub init: InitProgram,
    /// How the egress proxy resolves names and where it audits.
    pub egress: cordon_sandbox::EgressSetup,
}

fn failed(operation: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Failed {
        operation,
        reason: reason.into(),
    }
}

/// Makes names unique within this process (cgroups, directories, lease
/// search starts).
pub(crate) static NEXT: AtomicU32 = AtomicU32::new(0);
