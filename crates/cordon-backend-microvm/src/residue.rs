//! What a sandbox records for its cleanup, and the cleanup: its VM's
//! cgroups killed, its directory removed.

use std::path::{Path, PathBuf};

use crate::names::jail_name;

/// What a sandbox records for its cleanup: its directory and its jail's
/// cgroups (the QEMU process and everything it started).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub dir: PathBuf,
    pub cgroups: Vec<PathBuf>,
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
