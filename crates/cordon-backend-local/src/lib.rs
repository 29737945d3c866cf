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
mod pipes;
pub mod register;
mod sandbox;
mod workdir;

pub use backend::{probe, LocalBackend};
pub use cordon_backend_kit::RungProfile;
pub use cordon_backend_kit::{lease_id, profile, sweep_id_leases, IdLease, ID_LEASES};
pub use cordon_backend_kit::{FRESH_ID_BASE, INIT_ID_OFFSET, INSIDE_ID, WORK_DIR_ID};
pub use pipes::{ExecPipes, OurEnds};
pub use register::registrations;
pub use sandbox::{LocalSandbox, Started};

use std::path::PathBuf;
use std::sync::Arc;

use cordon_backend_kit::{failed, NEXT};
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Policy};

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
