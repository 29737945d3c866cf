//! The registry: one registration a name, strongest rung first.

use cordon_sandbox::registry::{
    nothing_to_reclaim, nothing_to_sweep, nothing_to_vet, BackendInfo, BackendRegistration, Probe,
    Registry,
};
use cordon_sandbox::{CapabilitySet, Egress, Isolation, WorkDirView};

/// A registration with no build, as a planned backend would declare itself.
fn unbuilt(name: &'static str, isolation: Isolation) -> BackendRegistration {
    BackendRegistration {
        info: BackendInfo {
            name,
            isolation,
            egress: Egress::Allowlist,
            capabilities: CapabilitySet::default(),
            summary: "a test registration",
        },
        probe: |_| Probe {
            runnable: false,
            reason: Some("not built in this version".to_string()),
            found: Vec::new(),
        },
        build: None,
        vet: nothing_to_vet,
        reclaim: nothing_to_reclaim,
        sweep: nothing_to_sweep,
        work_dir_view: WorkDirView::SpecPath,
        work_dir_owner: None,
        workload_uid: None,
        opt_in: false,
    }
}

#[test]
fn a_name_is_registered_once_and_order_is_by_rung() {
    let mut registry = Registry::new();
    let vm = unbuilt("microvm", Isolation::Microvm);
    registry
        .register(unbuilt("lower", Isolation::Container))
        .unwrap();
    registry.register(vm.clone()).unwrap();
    let names: Vec<&str> = registry.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["microvm", "lower"]);
    assert!(registry.register(vm).is_err());
    assert!(registry.require("nope").unwrap_err().contains("`microvm`"));
}

/// A registration without a build refuses to build, saying so.
#[test]
fn an_unbuilt_registration_refuses_to_build() {
    let mut registry = Registry::new();
    registry
        .register(unbuilt("microvm", Isolation::Microvm))
        .unwrap();
    let policy = std::sync::Arc::new(cordon_policy::Policy::load_default().unwrap());
    let setup = cordon_sandbox::BackendSetup {
        deployment: String::new(),
        init: None,
        work_dir: None,
        scratch: std::env::temp_dir(),
        egress: Default::default(),
        engines: Default::default(),
    };
    let err = registry
        .get("microvm")
        .unwrap()
        .build(&setup, policy)
        .err()
        .unwrap();
    assert!(err.contains("not built"), "{err}");
}

/// An engine's settings read back as its own type; settings that do not
/// read as it, or did not serialise, are refused (never its defaults).
#[test]
fn engine_settings_read_back_typed_and_refuse_what_does_not_read() {
    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Toy {
        cache: Option<String>,
    }
    let mut e = cordon_sandbox::EngineSettings::default();
    assert_eq!(e.get::<Toy>("toy"), Ok(Toy::default()));
    let toy = Toy {
        cache: Some("/var/cache/toy".into()),
    };
    e.set("toy", &toy);
    assert_eq!(e.get::<Toy>("toy"), Ok(toy));
    e.set("toy", &serde_json::json!({"cahce": "/tmp"}));
    let err = e.get::<Toy>("toy").unwrap_err();
    assert!(
        err.contains("`toy` backend's settings do not read"),
        "{err}"
    );
    // A map with non-string keys does not serialise to JSON.
    let unserialisable: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
    e.set("toy", &unserialisable);
    let err = e.get::<Toy>("toy").unwrap_err();
    assert!(err.contains("did not serialise"), "{err}");
}
