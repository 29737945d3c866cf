//! The backends cordon knows by name, what each claims, and whether this
//! machine can run it — what `cordon doctor` shows.
//!
//! The CLI's and server's default order is strongest rung first, so with
//! nothing configured a workload gets the strongest backend this machine can
//! really provide above the floor. They hand the router only the backends
//! the floor admits ([`BackendInfo::admitted_by`]); `cordon doctor` shows
//! the rest with the reason.
//!
//! Every backend cordon names is built and registers itself from its own
//! crate: `microvm` (`cordon-backend-microvm`), `gvisor`
//! (`cordon-backend-gvisor`), `docker` (`cordon-backend-docker`), and
//! `container` and `process` (`cordon-backend-local`); [`crate::builtin_registry`]
//! gathers them. [`planned`] holds the ones planned but not built in this
//! version — none now — and [`not_built`] is the probe such a registration
//! carries. [`DoctorReport::from_registry`] probes whatever a host
//! registered.
//!
//! Host-side: the protocol crate (`cordon-sandbox`) holds the registry and
//! what a backend declares ([`BackendInfo`], [`Probe`]); the report over
//! them is the host's.

use cordon_sandbox::registry::{BackendInfo, BackendRegistration, Probe, Registry};
use cordon_sandbox::{BackendSetup, Isolation};

/// The backends cordon plans but does not build in this version, as they
/// will declare themselves (`build: None`, probe [`not_built`]). None in
/// this version: each rung cordon names a backend for has one built, and
/// the built ones register from their own crates, so nothing here restates
/// what a built backend declares.
pub fn planned() -> Vec<BackendRegistration> {
    Vec::new()
}

/// The probe of a backend not built in this version: it cannot run.
pub fn not_built(_: &BackendSetup) -> Probe {
    Probe {
        runnable: false,
        reason: Some("not built in this version".to_string()),
        found: Vec::new(),
    }
}

/// One line of `cordon doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRow {
    pub backend: BackendInfo,
    pub probe: Probe,
    /// Whether the floor admits the backend's rung.
    pub admitted: bool,
    /// Used only when named or at a floor of its own rung
    /// (`BackendRegistration::opt_in`).
    pub opt_in: bool,
}

impl DoctorRow {
    /// The floor admits it and this machine can run it.
    pub fn can_serve(&self) -> bool {
        self.admitted && self.probe.runnable
    }

    /// It can serve and a host that names no backend uses it under
    /// `floor` (an opt-in backend above the floor is passed over).
    pub fn used_by_default(&self, floor: Isolation) -> bool {
        self.can_serve() && !(self.opt_in && self.backend.isolation > floor)
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
        let mut report = DoctorReport::from_probes(
            floor,
            registry
                .iter()
                .map(|r| (r.info.clone(), (r.probe)(setup)))
                .collect(),
        );
        for (row, reg) in report.rows.iter_mut().zip(registry.iter()) {
            row.opt_in = reg.opt_in;
        }
        report
    }

    pub fn from_probes(floor: Isolation, probes: Vec<(BackendInfo, Probe)>) -> DoctorReport {
        DoctorReport {
            floor,
            rows: probes
                .into_iter()
                .map(|(backend, probe)| DoctorRow {
                    admitted: backend.admitted_by(floor),
                    opt_in: false,
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
