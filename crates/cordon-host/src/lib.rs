//! cordon's host layer: what the CLI uses now and a server will use next.
//!
//! - [`builtin_registry`] — every backend this build knows: the ones it
//!   runs (`cordon-backend-microvm`'s, `cordon-backend-gvisor`'s,
//!   `cordon-backend-docker`'s and `cordon-backend-local`'s
//!   registrations). A host may register more.
//! - [`catalogue`] — what `cordon doctor` reports over a registry, and the
//!   backends planned but not built ([`catalogue::planned`]: none now).
//! - [`assembly`] — from a host setup (floor, policy, backend preference,
//!   state directory) to the policy, the chosen backends and the router,
//!   in one place.
//! - [`secrets`] — the secret stores a host configures: a directory of
//!   files ([`secrets::DirectorySecrets`]) or a command
//!   ([`secrets::CommandSecrets`]).
//! - [`keeper`] and [`state`] — kept sandboxes for any registered backend:
//!   a keeper process per sandbox, found through the state directory.
//! - [`kits`] — the files-out conformance kit and the escape kit, run
//!   against any registered backend.
//! - [`config`] — the host configuration file (`min_isolation`, `egress`)
//!   and where the floor comes from: flag, then `CORDON_MIN_ISOLATION`,
//!   then the file, then `microvm`.
//! - [`exec_json`] — an exec's events as JSON, the one shape `cordon run`,
//!   `cordon sandbox exec` and `cordon serve` report them in.
//!
//! Module arrows: `assembly` → `keeper` → `state`; `assembly` → `config`;
//! `kits` → `assembly`, `config`. `catalogue`, `exec_json` and
//! `secrets` stand alone.
//! Nothing here enforces anything: backends do, below the workload.

pub mod assembly;
pub mod catalogue;
pub mod config;
pub mod exec_json;
pub mod keeper;
pub mod kits;
pub mod secrets;
pub mod state;

pub use assembly::{Host, HostError, HostSetup};

use cordon_sandbox::Registry;

/// Every backend this build of cordon knows, strongest rung first: the
/// `microvm` backend leads where a guest really boots under KVM; under TCG
/// it declares `container` and comes after the local container backend
/// (the registry keeps order within a rung), so a `container` floor still
/// means the local container rung unless `--backend microvm` is named.
pub fn builtin_registry() -> Registry {
    let mut r = Registry::new();
    let microvm = cordon_backend_microvm::registration();
    let (first, last) = if microvm.info.isolation == cordon_sandbox::Isolation::Microvm {
        (Some(microvm), None)
    } else {
        (None, Some(microvm))
    };
    for reg in first
        .into_iter()
        .chain([
            cordon_backend_gvisor::registration(),
            cordon_backend_docker::registration(),
        ])
        .chain(cordon_backend_local::registrations())
        .chain(last)
    {
        // INVARIANT: the built-in names are distinct (a test checks).
        let _ = r.register(reg);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_registry_names_five_backends_strongest_first() {
        let r = builtin_registry();
        let names: Vec<&str> = r.iter().map(|b| b.name()).collect();
        let microvm = r.get("microvm").map(|b| b.info.isolation);
        if microvm == Some(cordon_sandbox::Isolation::Microvm) {
            assert_eq!(
                names,
                ["microvm", "gvisor", "docker", "container", "process"]
            );
        } else {
            assert_eq!(microvm, Some(cordon_sandbox::Isolation::Container));
            assert_eq!(
                names,
                ["gvisor", "docker", "container", "microvm", "process"]
            );
        }
        assert!(r
            .iter()
            .all(|b| b.info.egress != cordon_sandbox::Egress::Unrestricted));
        let built: Vec<&str> = r
            .iter()
            .filter(|b| b.build.is_some())
            .map(|b| b.name())
            .collect();
        assert_eq!(built.len(), 5, "{built:?}");
    }
}
