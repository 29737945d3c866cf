//! cordon's `docker` backend: the `container` rung on a Docker Engine,
//! driven through the Engine API (never the `docker` CLI).
//!
//! - [`engine`] reaches the engine over its unix socket with `bollard`,
//!   negotiating the API version down to the engine's (Debian's 20.10
//!   speaks 1.41, older than the crate's default) and refusing one older
//!   than [`engine::MIN_API`]; it owns a small tokio runtime, so the
//!   synchronous backend traits work from any caller, inside a runtime or
//!   not. The engines are `CORDON_DOCKER_HOST` (`unix:///…`, several
//!   comma-separated), else `/var/run/docker.sock`; each must be on this
//!   host (cordon binds its directories into the containers), so a TCP
//!   endpoint is refused.
//! - Placement ([`probe::place`]): a new sandbox goes to the engine with
//!   the fewest live cordon sandboxes (anchors, by label) among those that
//!   answer within [`engine::ANSWER`], the configured order breaking ties.
//!   `dispose_scope` and `gc` look at every engine; one that does not
//!   answer is named (never taken for empty).
//! - [`DockerBackend`] (`backend.rs`) acquires a [`DockerSandbox`]
//!   (`sandbox.rs`): a directory on the host holding cordon's `/etc`
//!   files, a volume of `max_disk` for the work dir and `/tmp`, and the
//!   binds the policy's plan translates to; an *anchor* container (made,
//!   never started) carries the sandbox's labels on the engine, so any
//!   cordon process finds it by scope and thread.
//! - Every exec is one container of the `host` image (an empty image
//!   cordon imports once per engine, with the host's system directories
//!   bound read-only): no network, a read-only root, every capability
//!   dropped, `no-new-privileges`, the container rung's seccomp denials,
//!   memory and pids bounds, a non-root user. Its CPU time is read from
//!   its cgroup and the container is killed at `max_cpu_seconds`; the
//!   wall clock likewise. A container per exec is what makes "nothing an
//!   exec starts outlives it" hold: when its first process ends, the
//!   engine kills everything in its pid namespace.
//! - [`register::registration`] is what a host adds to its registry.
//!
//! Egress is `closed` in this version (network mode `none`).

#![cfg(target_os = "linux")]

mod backend;
mod containers;
pub mod engine;
pub mod probe;
pub mod register;
mod residue;
mod sandbox;

pub use backend::{backend, Docker, DockerBackend};
pub use register::registration;
pub use sandbox::DockerSandbox;

use cordon_backend_kit::EngineSetup;

use crate::engine::Endpoint;

/// The backend's name.
pub const NAME: &str = "docker";
/// What it is, in a line (`cordon doctor`'s).
pub const SUMMARY: &str =
    "a Docker Engine container per exec, through the Engine API, egress through cordon's proxy";

/// The uid/gid the workload runs as (the same unprivileged id as the
/// gvisor backend's).
pub use cordon_backend_kit::WORKLOAD_ID;

/// Every name this backend leaves on the host or the engine begins so.
pub const PREFIX: &str = "cordon-docker-";

/// The label every container of cordon's carries, and its value.
pub const LABEL_OWNER: &str = "dev.cordon.owner";
pub const OWNER: &str = "cordon";
/// The sandbox (its id: `cordon-docker-PID-N-STAMP`).
pub const LABEL_SANDBOX: &str = "dev.cordon.sandbox";
/// What the container is: `anchor` (the sandbox's labels) or `exec`.
pub const LABEL_ROLE: &str = "dev.cordon.role";
pub use cordon_backend_kit::labels::{
    AGENT_DIR as LABEL_AGENT_DIR, DIR as LABEL_DIR, SCOPE as LABEL_SCOPE, THREAD as LABEL_THREAD,
};
/// The pid of the process that made it (a keeper, for a kept sandbox).
pub const LABEL_MAKER: &str = "dev.cordon.maker";
/// The engine endpoint the sandbox was placed on, as cordon reaches it.
pub const LABEL_ENGINE: &str = "dev.cordon.engine";

use cordon_backend_kit::{failed, NEXT};

/// How this backend names its sandbox directories.
pub const DIRS: cordon_backend_kit::SandboxDirs = cordon_backend_kit::SandboxDirs {
    backend: NAME,
    prefix: PREFIX,
};

/// How a docker backend is set up.
#[derive(Clone)]
pub struct DockerConfig {
    /// What every engine backend is set up with; the operator's work dir
    /// is owned by [`crate::WORKLOAD_ID`].
    pub setup: EngineSetup,
    /// The engines, in the configured order: each acquire places its
    /// sandbox on one ([`crate::probe::place`]); `dispose_scope` looks
    /// at every one.
    pub endpoints: Vec<Endpoint>,
}
