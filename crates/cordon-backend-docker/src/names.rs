//! The names this backend goes by and leaves on the host and the engine:
//! its own, its directories' prefix, and the labels on cordon's
//! containers. A leaf: every other module names things through it.

/// The backend's name.
pub const NAME: &str = "docker";
/// The rung it declares: once, for its registration and its built
/// backend alike.
pub const RUNG: cordon_sandbox::Isolation = cordon_sandbox::Isolation::Container;
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

/// How this backend names its sandbox directories.
pub const DIRS: cordon_backend_kit::SandboxDirs = cordon_backend_kit::SandboxDirs {
    backend: NAME,
    prefix: PREFIX,
};
