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
//! - The names the backend goes by and leaves on the host and the engine
//!   ([`NAME`], [`PREFIX`], the `LABEL_*`s) are `names.rs`'s, a leaf every
//!   module names them through; [`DockerConfig`] is `config.rs`'s.
//!
//! Egress is `closed` in this version (network mode `none`).

#![cfg(target_os = "linux")]

mod backend;
mod config;
mod containers;
pub mod engine;
mod names;
mod pod;
pub mod probe;
pub mod register;
mod residue;
mod sandbox;

pub use backend::{backend, Docker, DockerBackend};
pub use config::DockerConfig;
pub use names::{
    DIRS, LABEL_AGENT_DIR, LABEL_DIR, LABEL_ENGINE, LABEL_MAKER, LABEL_OWNER, LABEL_ROLE,
    LABEL_SANDBOX, LABEL_SCOPE, LABEL_THREAD, NAME, OWNER, PREFIX, SUMMARY, WORKLOAD_ID,
};
pub use register::registration;
pub use sandbox::DockerSandbox;
