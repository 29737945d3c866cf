//! The sandbox's trust files (its egress CA) in the root being built.

use std::path::{Path, PathBuf};

use super::{flags_for, Bind, Plan, RootfsError, SYSTEM_BUNDLE, TRUST_AT, TRUST_BUNDLE};

/// The sandbox's trust directory ([`crate::plan::PlanSpec::trust_dir`]),
/// bound read-only, never executable, at [`TRUST_AT`]; and its bundle over
/// [`SYSTEM_BUNDLE`] where the root has a file there (last: over whatever
/// the image or a rule put there).
pub(super) fn trust_binds(plan: &Plan) -> Result<Vec<Bind>, RootfsError> {
    let Some(dir) = plan.trust_dir() else {
        return Ok(Vec::new());
    };
    let open = |path: &Path, dir: bool| {
        let mut flags = rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC;
        if dir {
            flags |= rustix::fs::OFlags::DIRECTORY;
        }
        // No link anywhere on the way: the directory is the caller's own,
        // made for this sandbox.
        rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            flags,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| RootfsError {
            step: "open trust dir",
            path: path.to_path_buf(),
            source: e.into(),
        })
    };
    Ok(vec![
        Bind {
            target: PathBuf::from(TRUST_AT),
            src: open(dir, true)?,
            is_dir: true,
            flags: flags_for(true, false),
            over_file: false,
        },
        Bind {
            target: PathBuf::from(SYSTEM_BUNDLE),
            src: open(&dir.join(TRUST_BUNDLE), false)?,
            is_dir: false,
            flags: flags_for(true, false),
            over_file: true,
        },
    ])
}
