//! A spec's `workspace` on any backend whose work dir is a directory on
//! this host (the process and container rungs, docker, gvisor): the host
//! directory checked, mounted copy-on-write over the sandbox's volume
//! (`cordon_linux::workspace`), and its changes diffed and applied
//! (`cordon_files::workspace`) — one code path for every such backend.

use std::path::Path;

use cordon_files::workspace::Workspace;
use cordon_sandbox::{ApplyReport, BackendError, SandboxError, WorkspaceChange};

/// Mounts the spec's workspace `dir` at `VOLUME/work` for a workload
/// running as `to` (that directory must exist, the workload's, empty):
/// the directory's owner shows as `to`; what `to` writes stays on the
/// volume. The caller removes the volume on failure.
pub fn mount(dir: &str, volume: &Path, to: u32) -> Result<Workspace, BackendError> {
    let invalid = |reason: String| BackendError::Invalid {
        operation: "acquire",
        reason,
    };
    let (real, owner) = cordon_files::workspace::check_dir(dir).map_err(invalid)?;
    let since = Workspace::clock();
    let layers = cordon_linux::workspace::mount_workspace(&real, volume, owner, to)
        .map_err(|e| crate::failed("acquire", e))?;
    Ok(Workspace::new(&real, &layers.upper, owner, since))
}

/// A sandbox's [`cordon_sandbox::Sandbox::workspace_diff`].
pub fn diff(w: Option<&Workspace>) -> Result<Vec<WorkspaceChange>, SandboxError> {
    match w {
        Some(w) => w.diff(),
        None => Err(SandboxError::Invalid {
            reason: cordon_sandbox::workspace::NO_WORKSPACE.into(),
        }),
    }
}

/// A sandbox's [`cordon_sandbox::Sandbox::workspace_apply`].
pub fn apply(w: Option<&Workspace>, only: &[String]) -> Result<ApplyReport, SandboxError> {
    match w {
        Some(w) => w.apply(only),
        None => Err(SandboxError::Invalid {
            reason: cordon_sandbox::workspace::NO_WORKSPACE.into(),
        }),
    }
}

/// Mounts a snapshot's tree (`origin.tree`, in cordon's snapshot store,
/// its files root's) at `VOLUME/work` for a workload running as `to`:
/// the snapshot's files as the work dir, read-only underneath, what `to`
/// writes on the volume. Nothing of the snapshot changes, so any number of
/// sandboxes share it.
pub fn mount_origin(
    origin: &cordon_sandbox::Origin,
    volume: &Path,
    to: u32,
) -> Result<(), BackendError> {
    let tree = &origin.tree;
    let meta = std::fs::symlink_metadata(tree).map_err(|e| BackendError::Invalid {
        operation: "acquire",
        reason: format!("snapshot `{}`: its files at `{}`: {e}\nhelp: `cordon sandbox snapshots` lists the snapshots there are", origin.snapshot, tree.display()),
    })?;
    if !meta.is_dir() {
        return Err(BackendError::Invalid {
            operation: "acquire",
            reason: format!(
                "snapshot `{}`: `{}` is not a directory",
                origin.snapshot,
                tree.display()
            ),
        });
    }
    cordon_linux::workspace::mount_workspace(tree, volume, (0, 0), to)
        .map(|_| ())
        .map_err(|e| crate::failed("acquire", e))
}
