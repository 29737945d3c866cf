//! The planned backends, the registry and the report `cordon doctor` prints.

use cordon_sandbox::catalogue::{not_built, planned, DoctorReport, Machine, Probe, ThisMachine};
use cordon_sandbox::registry::{BackendRegistration, BackendSetup, Registry};
use cordon_sandbox::{Egress, Isolation};

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

#[test]
fn the_planned_backends_are_strongest_first_and_none_is_built() {
    let names: Vec<&str> = planned().iter().map(|b| b.name()).collect();
    assert_eq!(names, ["microvm"]);
    let rungs: Vec<Isolation> = planned().iter().map(|b| b.info.isolation).collect();
    assert!(rungs.windows(2).all(|w| w[0] >= w[1]), "{rungs:?}");
    assert!(planned()
        .iter()
        .all(|b| b.info.egress != Egress::Unrestricted && b.build.is_none()));
}

/// A backend that is not built says so, and building it refuses.
#[test]
fn every_planned_probe_honestly_reports_not_built() {
    let mut registry = Registry::new();
    for r in planned() {
        registry.register(r).unwrap();
    }
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
    let policy = std::sync::Arc::new(cordon_policy::Policy::load_default().unwrap());
    let err = registry
        .get("microvm")
        .unwrap()
        .build(&setup(), policy)
        .err()
        .unwrap();
    assert!(err.contains("not built"), "{err}");
}

#[test]
fn a_name_is_registered_once_and_order_is_by_rung() {
    let mut registry = Registry::new();
    let mut p = planned();
    let vm: BackendRegistration = p.pop().unwrap();
    let mut lower = vm.clone();
    lower.info.name = "lower";
    lower.info.isolation = Isolation::Container;
    registry.register(lower).unwrap();
    registry.register(vm.clone()).unwrap();
    let names: Vec<&str> = registry.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["microvm", "lower"]);
    assert!(registry.register(vm).is_err());
    assert!(registry.require("nope").unwrap_err().contains("`microvm`"));
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
    let vm = not_built("microvm", &Everything);
    assert_eq!(
        vm.found,
        ["`qemu-system-x86_64`: found", "`/dev/kvm`: found"]
    );
    // gvisor is built (`cordon-backend-gvisor`): its probe runs runsc.
    assert_eq!(not_built("gvisor", &Everything).found, Vec::<String>::new());
    // docker is built (`cordon-backend-docker`): its probe asks the engine.
    let nothing = not_built("docker", &ThisMachine);
    assert!(!nothing.runnable && nothing.found.is_empty(), "{nothing:?}");
}

#[test]
fn the_report_finds_the_floor_to_opt_down_to() {
    let mut infos: Vec<_> = planned().into_iter().map(|r| r.info).collect();
    // A stand-in for a built rung below the planned ones.
    let mut docker = infos[0].clone();
    docker.name = "docker";
    docker.isolation = Isolation::Container;
    infos.push(docker);
    let mut process = infos[0].clone();
    process.name = "process";
    process.isolation = Isolation::Process;
    infos.push(process);
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
