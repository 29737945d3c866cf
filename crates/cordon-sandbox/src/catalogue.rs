//! The backends cordon knows by name, what each claims, and whether this
//! machine can run it — what `cordon doctor` shows.
//!
//! The CLI's and server's default order is strongest rung first, so with
//! nothing configured a workload gets the strongest backend this machine can
//! really provide above the floor. They hand the router only the backends
//! the floor admits ([`BackendInfo::admitted_by`]); `cordon doctor` shows
//! the rest with the reason.
//!
//! `process` and `container` are built (`cordon-backend-local`), as is
//! `gvisor` (`cordon-backend-gvisor`) and `docker` (`cordon-backend-docker`),
//! and register themselves from there; [`planned`] holds the others, which are
//! not built in this version: their probes say so, and report what the
//! machine has that the backend will need. [`DoctorReport::from_registry`]
//! probes whatever a host registered.

use std::path::Path;

use crate::registry::{
    nothing_to_reclaim, nothing_to_sweep, nothing_to_vet, BackendRegistration, BackendSetup,
    Registry, WorkDirView,
};
pub use crate::registry::{BackendInfo, Probe};

use crate::capability::{Capability, CapabilitySet};
use crate::egress::Egress;
use crate::isolation::Isolation;

/// The backends cordon plans but does not build in this version, as they
/// will declare themselves. Their probes say "not built in this version"
/// and report what the machine has that each will need; building one
/// refuses. The built ones register from their own crates (the local rungs:
/// `cordon_backend_local::registrations()`), so nothing here restates what
/// a built backend declares.
pub fn planned() -> Vec<BackendRegistration> {
    use Capability::*;
    let full: CapabilitySet = [Exec, RunCode, FilesIn, FilesOut, FilesList, Network]
        .into_iter()
        .collect();
    let entry = |info: BackendInfo, probe: fn(&BackendSetup) -> Probe| BackendRegistration {
        info,
        probe,
        build: None,
        vet: nothing_to_vet,
        reclaim: nothing_to_reclaim,
        sweep: nothing_to_sweep,
        work_dir_view: WorkDirView::SpecPath,
        work_dir_owner: None,
        workload_uid: None,
        opt_in: false,
    };
    vec![entry(
        BackendInfo {
            name: "microvm",
            isolation: Isolation::Microvm,
            egress: Egress::Allowlist,
            capabilities: full.clone(),
            summary: "a QEMU microvm guest under KVM, egress through cordon's proxy",
        },
        |_| not_built("microvm", &ThisMachine),
    )]
}

/// What a probe may look at. [`ThisMachine`] is the real one.
pub trait Machine {
    /// Whether an executable of this name is on `PATH`.
    fn has_program(&self, name: &str) -> bool;
    fn path_exists(&self, path: &str) -> bool;
    fn read(&self, path: &str) -> Option<String>;
}

/// The machine cordon runs on. Reads only: no process is started.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThisMachine;

impl Machine for ThisMachine {
    fn has_program(&self, name: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
    }

    fn path_exists(&self, path: &str) -> bool {
        Path::new(path).exists()
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

fn have(what: &str, yes: bool) -> String {
    format!("{what}: {}", if yes { "found" } else { "not found" })
}

/// The probe of a backend not built in this version: it cannot run, and
/// this is what the machine has that it will need.
pub fn not_built(name: &str, m: &dyn Machine) -> Probe {
    let found = match name {
        "microvm" => vec![
            have("`qemu-system-x86_64`", m.has_program("qemu-system-x86_64")),
            have("`/dev/kvm`", m.path_exists("/dev/kvm")),
        ],
        _ => Vec::new(),
    };
    Probe {
        runnable: false,
        reason: Some("not built in this version".to_string()),
        found,
    }
}

/// One line of `cordon doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRow {
    pub backend: BackendInfo,
    pub probe: Probe,
    /// Whether the floor admits the backend's rung.
    pub admitted: bool,
}

impl DoctorRow {
    /// The floor admits it and this machine can run it.
    pub fn can_serve(&self) -> bool {
        self.admitted && self.probe.runnable
    }
}

/// Everything `cordon doctor` reports under one floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorReport {
    pub floor: Isolation,
    pub rows: Vec<DoctorRow>,
}

impl DoctorReport {
    /// Probes every registered backend (with `setup`) under `floor`.
    pub fn from_registry(
        floor: Isolation,
        registry: &Registry,
        setup: &BackendSetup,
    ) -> DoctorReport {
        DoctorReport::from_probes(
            floor,
            registry
                .iter()
                .map(|r| (r.info.clone(), (r.probe)(setup)))
                .collect(),
        )
    }

    pub fn from_probes(floor: Isolation, probes: Vec<(BackendInfo, Probe)>) -> DoctorReport {
        DoctorReport {
            floor,
            rows: probes
                .into_iter()
                .map(|(backend, probe)| DoctorRow {
                    admitted: backend.admitted_by(floor),
                    backend,
                    probe,
                })
                .collect(),
        }
    }

    /// Whether any backend can serve under the floor.
    pub fn can_serve(&self) -> bool {
        self.rows.iter().any(DoctorRow::can_serve)
    }

    /// The strongest rung below the floor at which this machine can run a
    /// backend: the floor a host would have to opt down to.
    pub fn opt_down_to(&self) -> Option<Isolation> {
        self.rows
            .iter()
            .filter(|r| !r.admitted && r.probe.runnable)
            .map(|r| r.backend.isolation)
            .max()
    }
}
