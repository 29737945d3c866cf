//! The catalogue and the report `cordon doctor` prints.

use cordon_sandbox::catalogue::{
    builtin_backends, probe, DoctorReport, Machine, Probe, ThisMachine,
};
use cordon_sandbox::{Egress, Isolation};

#[test]
fn the_catalogue_names_five_backends_strongest_first() {
    let names: Vec<&str> = builtin_backends().iter().map(|b| b.name).collect();
    assert_eq!(
        names,
        ["microvm", "gvisor", "container", "docker", "process"]
    );
    let rungs: Vec<Isolation> = builtin_backends().iter().map(|b| b.isolation).collect();
    assert!(rungs.windows(2).all(|w| w[0] >= w[1]), "{rungs:?}");
    assert!(builtin_backends()
        .iter()
        .all(|b| b.egress != Egress::Unrestricted));
}

#[test]
fn the_local_rungs_claim_closed_egress_and_no_file_listing() {
    for b in builtin_backends() {
        if b.name == "process" || b.name == "container" {
            assert_eq!(b.egress, Egress::Closed, "{}", b.name);
            assert!(!b
                .capabilities
                .contains(cordon_sandbox::Capability::FilesList));
            assert!(!b.capabilities.contains(cordon_sandbox::Capability::Network));
        }
    }
}

/// This crate cannot probe a backend it does not link: without the built
/// probes (`DoctorReport::with_built`), every backend reads as not built.
#[test]
fn every_probe_honestly_reports_not_built() {
    let report = DoctorReport::new(Isolation::Microvm, &ThisMachine);
    assert_eq!(report.rows.len(), 5);
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

struct Everything;

impl Machine for Everything {
    fn has_program(&self, _: &str) -> bool {
        true
    }
    fn path_exists(&self, _: &str) -> bool {
        true
    }
    fn read(&self, _: &str) -> Option<String> {
        Some("1000\n".into())
    }
}

#[test]
fn probes_report_what_the_machine_has() {
    let b = builtin_backends();
    let vm = probe(&b[0], &Everything);
    assert_eq!(
        vm.found,
        ["`qemu-system-x86_64`: found", "`/dev/kvm`: found"]
    );
    let c = probe(&b[2], &Everything);
    assert_eq!(c.found, ["user namespaces: available"]);
}

#[test]
fn the_report_finds_the_floor_to_opt_down_to() {
    let runnable = |names: &[&str]| {
        builtin_backends()
            .into_iter()
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
