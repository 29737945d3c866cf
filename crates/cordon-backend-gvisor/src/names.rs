//! The names this backend goes by and leaves on the host: its own, runsc's
//! state root, and the prefix of every directory, container and cgroup a
//! sandbox makes. A leaf: every other module names things through it.

use std::path::Path;

/// The backend's name.
pub const NAME: &str = "gvisor";
/// The rung it declares: once, for its registration and its built
/// backend alike.
pub const RUNG: cordon_sandbox::Isolation = cordon_sandbox::Isolation::HardenedContainer;
/// What it is, in a line (`cordon doctor`'s).
pub const SUMMARY: &str = "a gVisor (`runsc`) sandbox, each exec a pid and mount namespace of its own in it; egress through cordon's proxy (the workload's sockets then reach the host kernel, in a namespace holding only the proxy)";

/// Where cordon keeps runsc's container state (`runsc --root`): its own,
/// never another runtime's, so listing it finds only cordon's containers.
pub const STATE_ROOT: &str = "/run/cordon/gvisor";

/// The uid/gid the workload runs as inside the sandbox; files it makes in
/// the work dir are owned by it on the host too. Unprivileged, above every
/// ordinary account, and the uid an operator's files would be handed to.
pub use cordon_backend_kit::WORKLOAD_ID;

/// Every name a sandbox of this backend leaves on the host begins so
/// (its directory, its containers, their cgroups).
pub const PREFIX: &str = "cordon-gvisor-";

/// How this backend names its sandbox directories.
pub const DIRS: cordon_backend_kit::SandboxDirs = cordon_backend_kit::SandboxDirs {
    backend: NAME,
    prefix: PREFIX,
};

/// Whether `p`'s last component is a name this backend made.
pub(crate) fn ours(p: &Path) -> bool {
    DIRS.ours(p)
}
