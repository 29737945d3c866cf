//! The `gvisor` backend's registration: how a host finds, probes, builds
//! and cleans up after it.

use std::sync::Arc;

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup, Egress, Isolation, WorkDirView};

use crate::sandbox::{remove_containers, remove_sandbox_dir, Residue};
use crate::{GvisorConfig, WORKLOAD_ID};

/// What the backend claims (its built backend declares the same).
pub fn info() -> BackendInfo {
    BackendInfo {
        name: crate::NAME,
        isolation: Isolation::HardenedContainer,
        egress: Egress::Allowlist,
        capabilities: crate::backend::capabilities(),
        summary: "a gVisor (`runsc`) sandbox, each exec a container in it; egress through cordon's proxy (the workload's sockets then reach the host kernel, in a namespace holding only the proxy)",
    }
}

fn probe(_: &BackendSetup) -> Probe {
    match crate::runsc::probe() {
        Ok(r) => Probe {
            runnable: true,
            reason: None,
            found: vec![
                format!("`runsc`: {} ({})", r.bin.display(), r.version),
                format!(
                    "platform: {} (a trivial container ran in {} ms)",
                    r.platform, r.probe_millis
                ),
                "egress: a spec that names hosts runs with `--network=host` in a namespace holding only the proxy's listener, so its sockets are the host kernel's (hostinet), not gVisor's stack".to_string(),
            ],
        },
        Err(u) => Probe {
            runnable: false,
            reason: Some(u.reason.clone()),
            found: u.found.clone(),
        },
    }
}

fn build(setup: &BackendSetup, policy: Arc<Policy>) -> Result<Arc<dyn Backend>, String> {
    let runsc = crate::runsc::probe()
        .as_ref()
        .map_err(|u| format!("{} ({})", u.reason, u.found.join("; ")))?
        .clone();
    Ok(Arc::new(crate::backend::backend(GvisorConfig {
        policy,
        env: Deployment {
            name: setup.deployment.clone(),
        },
        scratch: setup.scratch.clone(),
        work_dir: setup.work_dir.clone(),
        runsc,
        egress: setup.egress.clone(),
    })))
}

/// Checks that a recorded residue names only what a gvisor sandbox of the
/// keeper `keeper` makes: a directory named `cordon-gvisor-KEEPER-…` in
/// this cordon's scratch directory (TMPDIR), root's, and the containers
/// named after it.
fn vet(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    let r: Residue = serde_json::from_value(residue.clone())
        .map_err(|e| format!("the recorded residue is not a gvisor one ({e})"))?;
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
    let r: Residue = match serde_json::from_value(residue.clone()) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "the recorded residue is not a gvisor one ({e}); left alone"
            )]
        }
    };
    let mut failures = Vec::new();
    if let Some(bin) = crate::runsc::binary() {
        failures.extend(remove_containers(&bin, &r.containers));
    }
    if let Err(e) = remove_sandbox_dir(&r.dir) {
        failures.push(e);
    }
    failures
}

/// Containers and sandbox directories whose making process is gone (an
/// owner killed before it could dispose of them or record them).
fn sweep() -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    // A zombie maker is gone too (its pid is not reused while it is one).
    let gone = cordon_backend_kit::gone;
    if let Some(bin) = crate::runsc::binary() {
        if let Ok(ids) = crate::runsc::list(&bin) {
            for id in ids {
                if crate::maker_of(&id).is_some_and(gone) {
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
        if crate::maker_of(&name).is_some_and(gone) {
            crate::runsc::remove_cgroups(&name);
            if crate::runsc::cgroups_of(&name).is_empty() {
                done.push(format!("cgroup `{name}`"));
            }
        }
    }
    let (dirs, f) = crate::DIRS.sweep(|d| remove_sandbox_dir(d).err().into_iter().collect());
    done.extend(dirs);
    failures.extend(f);
    (done, failures)
}

/// The `gvisor` backend, as a host registers it. It is used where the
/// floor is `hardened_container` or above, or when named (`--backend
/// gvisor`); a lower floor's default order passes over it
/// ([`BackendRegistration::opt_in`]) while it lacks terminals (it serves
/// secrets, egress and images from cordon's store).
pub fn registration() -> BackendRegistration {
    BackendRegistration {
        info: info(),
        probe,
        build: Some(build),
        vet,
        reclaim,
        sweep,
        work_dir_view: WorkDirView::SpecPath,
        work_dir_owner: Some(WORKLOAD_ID),
        workload_uid: Some(WORKLOAD_ID),
        opt_in: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_as_the_backend_writes_them() {
        assert_eq!(crate::maker_of("cordon-gvisor-12-3-456"), Some(12));
        assert_eq!(crate::maker_of("cordon-gvisor-12-3-456-e7"), Some(12));
        for bad in ["cordon-gvisor-x-3", "cordon-work-1-2-3", "cordon-gvisor-12"] {
            assert_eq!(crate::maker_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_residue_names_only_what_its_keeper_made() {
        let keeper = 4_000_000; // above any pid_max: never a live process
        let scratch = std::env::temp_dir().canonicalize().unwrap();
        let dir = scratch.join(format!("cordon-gvisor-{keeper}-0-1"));
        let ok =
            serde_json::json!({"dir": dir, "containers": format!("cordon-gvisor-{keeper}-0-1-")});
        assert_eq!(vet(&ok, keeper), Ok(()));
        let e = vet(&ok, keeper + 1).unwrap_err();
        assert!(e.contains("keeper"), "{e}");
        let other = serde_json::json!({"dir": dir, "containers": "cordon-gvisor-1-"});
        assert!(vet(&other, keeper).unwrap_err().contains("containers"));
        let elsewhere = serde_json::json!({
            "dir": format!("/var/cordon-gvisor-{keeper}-0-1"),
            "containers": format!("cordon-gvisor-{keeper}-0-1-"),
        });
        assert!(vet(&elsewhere, keeper).unwrap_err().contains("TMPDIR"));
        assert!(vet(&serde_json::json!({"dirs": []}), keeper).is_err());
    }
}
