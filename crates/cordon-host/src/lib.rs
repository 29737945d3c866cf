//! cordon's host layer: what every surface (the CLI, `cordon serve`,
//! `cordon mcp`, a Rust library host) builds its host from.
//!
//! - [`builtin_registry`] — every backend this build knows (docker, gvisor,
//!   microvm and the local `process` and `container` rungs). A host may
//!   register more: a registration is all a backend takes.
//! - [`builder`] — the one host builder: a surface maps its flags or
//!   configuration to a [`HostBuilder`] and gets the host.
//! - [`assembly`] — from a host setup (floor, policy, backend preference,
//!   keeper) to the policy, the chosen backends and the router.
//! - [`config`] — the host configuration file and the floor's resolution.
//! - [`catalogue`] — what `cordon doctor` reports over a registry.
//! - [`secrets`] — the secret stores a host configures: a directory of
//!   files ([`secrets::DirectorySecrets`]) or a command
//!   ([`secrets::CommandSecrets`]).
//! - [`exec_json`] — an exec's events as JSON (the CLI's and the server's).
//! - [`roles`] — the process roles (sandbox init, keeper, egress proxy)
//!   dispatched from one place, and this binary as each of them.
//! - [`keeper`] and [`state`] — kept sandboxes for any registered backend:
//!   a keeper process per sandbox, found through the state directory.
//! - [`pool`] — warm pools: sandboxes made ahead, claimed by a
//!   get-or-create of their spec (`cordon serve`'s pools are these).
//! - [`kits`] — the files-out conformance kit and the escape kit, run
//!   against any registered backend.
//! - [`config`] — the host configuration file (`min_isolation`, `egress`)
//!   and where the floor comes from: flag, then `CORDON_MIN_ISOLATION`,
//!   then the file, then `microvm`.
//! - [`exec_json`] — an exec's events as JSON, the one shape `cordon run`,
//!   `cordon sandbox exec` and `cordon serve` report them in.
//!
//! Module arrows: `builder` → `assembly` → `keeper` → `state`;
//! `builder` → `roles` → `keeper`; `builder`, `assembly` → `config`;
//! `builder` → `secrets`; `kits` → `assembly`, `config`. `catalogue` and
//! `exec_json` stand alone.
//! Nothing here enforces anything: backends do, below the workload.

pub mod assembly;
pub mod builder;
pub mod catalogue;
pub mod config;
pub mod exec_json;
pub mod keeper;
pub mod kits;
pub mod pool;
pub mod roles;
pub mod secrets;
pub mod snapshots;
pub mod state;

pub use assembly::{Host, HostError, HostSetup};
pub use builder::{HostBuilder, Keep};

use cordon_sandbox::Registry;

/// Every backend this build of cordon knows, strongest rung first: the
/// `microvm` backend leads where a guest really boots under KVM; under TCG
/// it declares `container` and comes after the local container backend
/// (the registry keeps order within a rung), so a `container` floor still
/// means the local container rung unless `--backend microvm` is named.
pub fn builtin_registry() -> Registry {
    let mut r = Registry::new();
    // Its rung is the machine's with the settings the setup will carry.
    let microvm = cordon_backend_microvm::registration(
        &cordon_backend_microvm::artifacts::VmSettings::from_env(),
    );
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

/// Each built-in engine's settings as the `cordon` binary takes them: from
/// its environment (`CORDON_DOCKER_HOST`; `CORDON_VM_KERNEL`,
/// `CORDON_VM_AGENT`, `CORDON_VM_CACHE`, `CORDON_VM_ACCEL=tcg`). Read here,
/// at the surface, once; backends read them only from their setup, and a
/// keeper gets them in its brief.
pub fn builtin_engine_settings() -> cordon_sandbox::EngineSettings {
    let mut e = cordon_sandbox::EngineSettings::default();
    e.set(
        cordon_backend_docker::NAME,
        &cordon_backend_docker::engine::DockerSettings::from_env(),
    );
    e.set(
        cordon_backend_microvm::NAME,
        &cordon_backend_microvm::artifacts::VmSettings::from_env(),
    );
    e
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
