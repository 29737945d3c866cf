//! The names this backend goes by and gives what it makes: its own, its
//! sandboxes' (directories and jail cgroups) and their jails'. A leaf:
//! every other module names things through it.

use std::sync::atomic::{AtomicU32, Ordering};

/// The backend's name.
pub const NAME: &str = "microvm";

/// Every directory (and jail cgroup) of a sandbox of this backend is named
/// so: `cordon-microvm-PID-N`, PID the making process.
pub const PREFIX: &str = "cordon-microvm-";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A new sandbox name of this process.
pub(crate) fn fresh_name() -> String {
    format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pid of the process that made the sandbox named `name`.
pub fn maker_of(name: &str) -> Option<u32> {
    DIRS.maker_of(name)
}

/// How this backend names its sandbox directories.
pub const DIRS: cordon_backend_kit::SandboxDirs = cordon_backend_kit::SandboxDirs {
    backend: NAME,
    prefix: PREFIX,
};

/// The jail's name for the sandbox named `name` (jail names take letters,
/// digits and `_`).
pub fn jail_name(name: &str) -> String {
    name.replace('-', "_")
}
