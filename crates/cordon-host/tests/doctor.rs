//! The catalogue `cordon doctor` prints: what is planned, and the report
//! over a registry.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_host::catalogue::{not_built, planned, DoctorReport};
use cordon_sandbox::registry::{
    nothing_to_reclaim, nothing_to_sweep, nothing_to_vet, BackendInfo, BackendRegistration, Probe,
    Registry,
};
use cordon_sandbox::{BackendSetup, CapabilitySet, Egress, Isolation, WorkDirView};

fn setup() -> BackendSetup {
    BackendSetup {
        deployment: String::new(),
        init: None,
        work_dir: None,
        scratch: std::env::temp_dir(),
        egress: Default::default(),
        engines: Default::default(),
    }
}

fn info(name: &'static str, isolation: Isolation) -> BackendInfo {
    BackendInfo {
        name,
        isolation,
        egress: Egress::Allowlist,
        capabilities: CapabilitySet::default(),
        summary: "a test backend",
    }
}

/// Every backend cordon names is built (`cordon_host::builtin_registry`
/// builds each), so none is left planned.
#[test]
fn nothing_built_is_listed_as_planned() {
    assert!(planned().is_empty());
    let built = cordon_host::builtin_registry();
    assert!(built.iter().all(|b| b.build.is_some()));
    assert!(built.get("microvm").is_some());
}

/// A registration without a build carries the `not_built` probe: the
/// report says so, and building it refuses.
#[test]
fn a_not_built_probe_honestly_reports_it() {
    let mut registry = Registry::new();
    registry
        .register(BackendRegistration {
            info: info("someday", Isolation::Vm),
            probe: not_built,
            build: None,
            vet: nothing_to_vet,
            reclaim: nothing_to_reclaim,
            sweep: nothing_to_sweep,
            work_dir_view: WorkDirView::SpecPath,
            work_dir_owner: None,
            workload_uid: None,
            opt_in: false,
        })
        .unwrap();
    let report = DoctorReport::from_registry(Isolation::Microvm, &registry, &setup());
    assert_eq!(report.rows.len(), 1);
    for row in &report.rows {
        assert!(!row.probe.runnable, "{}", row.backend.name);
        assert_eq!(
            row.probe.reason.as_deref(),
            Some("not built in this version")
        );
    }
    assert!(!report.can_serve());
    assert_eq!(report.opt_down_to(), None);
}

#[test]
fn the_report_finds_the_floor_to_opt_down_to() {
    let infos = [
        info("microvm", Isolation::Microvm),
        info("docker", Isolation::Container),
        info("process", Isolation::Process),
    ];
    let runnable = |names: &[&str]| {
        infos
            .iter()
            .cloned()
            .map(|b| {
                let ok = names.contains(&b.name);
                (
                    b,
                    Probe {
                        runnable: ok,
                        reason: (!ok).then(|| "absent".to_string()),
                        found: vec![],
                    },
                )
            })
            .collect::<Vec<_>>()
    };
    let r = DoctorReport::from_probes(Isolation::Microvm, runnable(&["docker", "process"]));
    assert!(!r.can_serve());
    assert_eq!(r.opt_down_to(), Some(Isolation::Container));
    let r = DoctorReport::from_probes(Isolation::Container, runnable(&["docker", "process"]));
    assert!(r.can_serve());
    let r = DoctorReport::from_probes(Isolation::Microvm, runnable(&["microvm"]));
    assert!(r.can_serve());
    assert_eq!(r.opt_down_to(), None);
}
