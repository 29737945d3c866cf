//! cordon's `microvm` backend: a QEMU `microvm` guest per sandbox, booted
//! from a kernel of the host's, an initramfs cordon builds (its guest agent
//! as PID 1, `cordon-vm-agent`) and the spec's image packed read-only,
//! driven over one framed channel (`cordon-vm-proto`).
//!
//! - [`probe`] finds QEMU, the guest kernel and the agent, builds the
//!   initramfs ([`artifacts`]) and decides the accelerator by booting a
//!   guest under KVM: KVM only when that guest answered. Under KVM the
//!   backend declares `microvm`; under TCG (an emulator, not a security
//!   boundary) it declares `container`, what its jail gives.
//! - [`vm`] boots one guest inside [`jail`] (cordon's Linux enforcer around
//!   the QEMU process) with a deadline and one retry.
//! - [`channel`] is the host's end of the control channel: exec, files,
//!   relayed egress connections; every size bounded, and a guest that
//!   breaks a rule ends its own VM.
//! - [`MicrovmBackend`] and [`MicrovmSandbox`] serve the backend traits:
//!   the host decides (command resolution, the policy's plan translated
//!   over the image), the agent enforces it in the guest with cordon's
//!   container rung.
//! - [`register::registration`] is what a host adds to its registry.

#![cfg(target_os = "linux")]

pub mod artifacts;
mod backend;
pub mod channel;
pub mod jail;
pub mod probe;
pub mod register;
pub mod sandbox;
pub mod vm;

pub use backend::{
    backend, capabilities, image_tree, rung_of, Microvm, MicrovmBackend, MicrovmConfig,
};
pub use register::registration;
pub use sandbox::{Label, MicrovmSandbox};

use std::path::{Path, PathBuf};
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

/// The sandbox directories in `scratch` and their labels (a directory
/// without a readable label is left out: it is not known to be ours).
pub fn found_sandboxes(scratch: &Path) -> Vec<(PathBuf, Label)> {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| backend::named_ours(p))
        .filter(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == 0)
        })
        .filter_map(|p| {
            let label = std::fs::read(p.join("sandbox.json")).ok()?;
            let label: Label = serde_json::from_slice(&label).ok()?;
            Some((p, label))
        })
        .collect()
}

/// What a sandbox records for its cleanup: its directory and its jail's
/// cgroups (the QEMU process and everything it started).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub dir: PathBuf,
    pub cgroups: Vec<PathBuf>,
}

/// The jail's name for the sandbox named `name` (jail names take letters,
/// digits and `_`).
pub fn jail_name(name: &str) -> String {
    name.replace('-', "_")
}

/// A cgroup directory a sandbox named `name` may have: its jail's, named
/// after it (`cordon-vm-JAIL-…`), in the cgroup filesystem.
fn cgroup_is_of(dir: &Path, name: &str) -> bool {
    let jail = format!("cordon-vm-{}-", jail_name(name));
    dir.starts_with("/sys/fs/cgroup")
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&jail))
        && !dir
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Kills what `residue` names and removes its directory; returns what
/// failed. The cgroups are believed only when they carry the directory's
/// name.
pub fn reclaim(residue: &Residue) -> Vec<String> {
    let mut failures = Vec::new();
    let name = residue
        .dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    let cgroups: Vec<PathBuf> = residue
        .cgroups
        .iter()
        .filter(|d| cgroup_is_of(d, &name))
        .cloned()
        .collect();
    if cgroups.len() != residue.cgroups.len() {
        failures.push(format!(
            "some recorded cgroups of `{}` are not named after it; left alone",
            residue.dir.display()
        ));
    }
    if !cgroups.is_empty() {
        if let Err(e) = cordon_linux::reclaim_cgroups(&cgroups) {
            failures.push(format!(
                "killing the VM of `{}`: {e}",
                residue.dir.display()
            ));
        }
    }
    match std::fs::remove_dir_all(&residue.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => failures.push(format!("removing `{}`: {e}", residue.dir.display())),
    }
    failures
}

/// Reclaims the sandbox directory `dir` from the residue it holds.
pub fn reclaim_dir(dir: &Path) -> Vec<String> {
    let residue = std::fs::read(dir.join("residue.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Residue>(&b).ok())
        .unwrap_or(Residue {
            dir: dir.to_path_buf(),
            cgroups: Vec::new(),
        });
    if residue.dir != dir {
        return vec![format!(
            "`{}` records another directory; left alone",
            dir.display()
        )];
    }
    reclaim(&residue)
}
