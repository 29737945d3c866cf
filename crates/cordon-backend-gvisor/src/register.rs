//! The `gvisor` backend's registration: how a host finds, probes, builds
//! and cleans up after it.

use std::sync::Arc;

use cordon_backend_kit::register as kit;
use cordon_backend_kit::EngineSetup;
use cordon_policy::Policy;
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup};

use crate::sandbox::{remove_containers, remove_sandbox_dir, Residue};
use crate::GvisorConfig;

/// What the backend claims (its built backend declares the same).
pub fn info() -> BackendInfo {
    let mut info = kit::engine_info(crate::NAME, crate::names::RUNG, crate::SUMMARY);
    info.capabilities
        .insert(cordon_sandbox::Capability::SnapshotMemory);
    info
}

fn probe(_: &BackendSetup) -> Probe {
    match crate::runsc::probe() {
        Ok(r) => kit::runnable(vec![
                format!("`runsc`: {} ({})", r.bin.display(), r.version),
                format!(
                    "platform: {} (a trivial container ran in {} ms)",
                    r.platform, r.probe_millis
                ),
                "egress: a spec that names hosts runs with `--network=host` in a namespace holding only the proxy's listener, so its sockets are the host kernel's (hostinet), not gVisor's stack".to_string(),
                "snapshot_memory: `runsc checkpoint`/`restore` save a sandbox made with `requires: [snapshot_memory]` (each exec a runsc sandbox of its own, no egress route); checked when a snapshot is taken, not probed here".to_string(),
        ]),
        Err(u) => u.probe(),
    }
}

fn build(setup: &BackendSetup, policy: Arc<Policy>) -> Result<Arc<dyn Backend>, String> {
    Ok(Arc::new(crate::backend::backend(GvisorConfig {
        runsc: kit::probed(crate::runsc::probe())?,
        setup: EngineSetup::of(setup, policy),
    })))
}

/// Checks that a recorded residue names only what a gvisor sandbox of the
/// keeper `keeper` makes: a directory named `cordon-gvisor-KEEPER-…` in
/// this cordon's scratch directory (TMPDIR), root's, and the containers
/// named after it.
fn vet(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    let r: Residue = kit::read_residue(residue, crate::NAME)?;
    crate::DIRS.vet(&r.dir, keeper)?;
    let name = r.dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if r.containers != format!("{name}-") {
        return Err(format!(
            "the recorded containers `{}` are not the directory `{name}`'s",
            r.containers
        ));
    }
    Ok(())
}

fn reclaim(residue: &serde_json::Value) -> Vec<String> {
    kit::reclaim_read(residue, crate::NAME, |r: Residue| {
        let mut failures = Vec::new();
        if let Some(bin) = crate::runsc::binary() {
            failures.extend(remove_containers(&bin, &r.containers));
        }
        failures.extend(remove_sandbox_dir(&r.dir).err());
        failures
    })
}

/// Containers and sandbox directories whose making process is gone (an
/// owner killed before it could dispose of them or record them).
fn sweep(_: &BackendSetup) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    // A zombie maker is gone too (its pid is not reused while it is one).
    let gone = cordon_backend_kit::gone;
    if let Some(bin) = crate::runsc::binary() {
        if let Ok(ids) = crate::runsc::list(&bin) {
            for id in ids {
                if crate::DIRS.maker_of(&id).is_some_and(gone) {
                    crate::runsc::kill(&bin, &id);
                    match crate::runsc::delete(&bin, &id) {
                        Ok(()) => done.push(format!("runsc container `{id}`")),
                        Err(e) => failures.push(e),
                    }
                    crate::runsc::remove_cgroups(&id);
                }
            }
        }
    }
    // Cgroups whose container is gone (cordon's memory parent outlives
    // its container by design; an owner killed mid-exec leaves it).
    for name in crate::runsc::all_cgroup_names() {
        if crate::DIRS.maker_of(&name).is_some_and(gone) {
            crate::runsc::remove_cgroups(&name);
            if crate::runsc::cgroups_of(&name).is_empty() {
                done.push(format!("cgroup `{name}`"));
            }
        }
    }
    crate::DIRS.sweep_dirs(done, failures)
}

/// The `gvisor` backend, as a host registers it. It is used where the
/// floor is `hardened_container` or above, or when named (`--backend
/// gvisor`); a lower floor's default order passes over it
/// ([`BackendRegistration::opt_in`]) while it lacks terminals (it serves
/// secrets, egress and images from cordon's store).
pub fn registration() -> BackendRegistration {
    kit::engine_registration(info(), probe, build, vet, reclaim, sweep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_residue_names_only_what_its_keeper_made() {
        let named = |dir: &std::path::Path, name: &str| serde_json::json!({"dir": dir, "containers": format!("{name}-")});
        assert_eq!(kit::vet_holds(crate::DIRS, vet, named), Ok(()));
        // Its containers are its directory's.
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let dir = dir.join("cordon-gvisor-4000000-0-1");
        let other = serde_json::json!({"dir": dir, "containers": "cordon-gvisor-1-"});
        assert!(vet(&other, 4_000_000).unwrap_err().contains("containers"));
    }
}
