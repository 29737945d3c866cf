//! cordon's host layer: what the CLI uses now and a server will use next.
//!
//! - [`builtin_registry`] — every backend this build knows: the ones it
//!   runs (`cordon-backend-gvisor`'s, `cordon-backend-docker`'s and
//!   `cordon-backend-local`'s
//!   registrations) and the ones it plans
//!   ([`cordon_sandbox::catalogue::planned`]). A host may register more.
//! - [`assembly`] — from a host setup (floor, policy, backend preference,
//!   state directory) to the policy, the chosen backends and the router,
//!   in one place.
//! - [`keeper`] and [`state`] — kept sandboxes for any registered backend:
//!   a keeper process per sandbox, found through the state directory.
//! - [`kits`] — the files-out conformance kit and the escape kit, run
//!   against any registered backend.
//!
//! Module arrows: `assembly` → `keeper` → `state`; `kits` → `assembly`.
//! Nothing here enforces anything: backends do, below the workload.

pub mod assembly;
pub mod keeper;
pub mod kits;
pub mod state;

pub use assembly::{Host, HostError, HostSetup};

use cordon_sandbox::Registry;

/// Every backend this build of cordon knows, strongest rung first.
pub fn builtin_registry() -> Registry {
    let mut r = Registry::new();
    for reg in cordon_sandbox::catalogue::planned()
        .into_iter()
        .chain([
            cordon_backend_gvisor::registration(),
            cordon_backend_docker::registration(),
        ])
        .chain(cordon_backend_local::registrations())
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
        assert_eq!(
            names,
            ["microvm", "gvisor", "docker", "container", "process"]
        );
        assert!(r
            .iter()
            .all(|b| b.info.egress != cordon_sandbox::Egress::Unrestricted));
        let built: Vec<&str> = r
            .iter()
            .filter(|b| b.build.is_some())
            .map(|b| b.name())
            .collect();
        assert_eq!(built, ["gvisor", "docker", "container", "process"]);
    }
}
