//! A spec's `workspace` on any backend whose work dir is a directory on
//! this host (the process and container rungs, docker, gvisor): the host
//! directory checked, mounted copy-on-write over the sandbox's volume
//! (`cordon_linux::workspace`), and its changes diffed and applied
//! (`cordon_files::workspace`) — one code path for every such backend.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cordon_files::workspace::Workspace;
use cordon_sandbox::{ApplyReport, BackendError, SandboxError, WorkspaceChange};

/// Directories never made a workspace: the host's system trees (a
/// sandbox would read all of it) and the pseudo-filesystems.
pub fn refuse_system_dir(real: &Path, what: &str) -> Result<(), String> {
    let system = [
        "/", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp",
        "/root", "/home", "/var", "/run", "/boot",
    ];
    if system.iter().any(|s| real == Path::new(s))
        || ["/proc", "/sys", "/dev", "/run/cordon", "/etc"]
            .iter()
            .any(|p| real.starts_with(p))
    {
        return Err(format!(
            "{what} `{}` is a system directory; give the sandbox a directory of its own (a project's)",
            real.display()
        ));
    }
    Ok(())
}

/// The host directory a spec names as its workspace, checked: it exists
/// and is a directory, and not a system one. Returns its canonical path
/// and its owner.
pub fn check(dir: &str) -> Result<(PathBuf, (u32, u32)), String> {
    let real = Path::new(dir)
        .canonicalize()
        .map_err(|e| format!("workspace `{dir}`: {e}\nhelp: name an existing directory"))?;
    let meta =
        std::fs::metadata(&real).map_err(|e| format!("workspace `{}`: {e}", real.display()))?;
    if !meta.is_dir() {
        return Err(format!("workspace `{}` is not a directory", real.display()));
    }
    refuse_system_dir(&real, "workspace")?;
    Ok((real, (meta.uid(), meta.gid())))
}

/// Mounts the spec's workspace `dir` at `VOLUME/work` for a workload
/// running as `to` (that directory must exist, the workload's, empty):
/// the directory's owner shows as `to`; what `to` writes stays on the
/// volume. The caller removes the volume on failure.
pub fn mount(dir: &str, volume: &Path, to: u32) -> Result<Workspace, BackendError> {
    let invalid = |reason: String| BackendError::Invalid {
        operation: "acquire",
        reason,
    };
    let (real, owner) = check(dir).map_err(invalid)?;
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
