//! `max_disk`: a compute bound like the others: a size, stated by the
//! default, narrowed (never widened) by layers.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;

use cordon_policy::resolve::MemoryFiles;
use cordon_policy::*;

fn load(top: &str, others: &[(&str, &str)]) -> Result<Policy, String> {
    let files = MemoryFiles(
        others
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    Policy::load_with("top.yaml", top, &files).map_err(|d| d.render())
}

const ROOT: &str = "policy:\n  compute:\n    max_disk: 512MiB\n";

#[test]
fn the_default_states_max_disk() {
    let p = load("policy:\n  extends: [\"cordon:default\"]\n", &[]).unwrap();
    assert_eq!(p.bounds.max_disk, 1 << 30);
    assert_eq!(Bounds::DEFAULT.max_disk, 1 << 30);
}

#[test]
fn max_disk_is_a_size() {
    let p = load(ROOT, &[]).unwrap();
    assert_eq!(p.bounds.max_disk, 512 << 20);
    assert_eq!(Bound::MaxDisk.show(p.bounds.max_disk), "512MiB");
    let err = load("policy:\n  compute:\n    max_disk: lots\n", &[]).unwrap_err();
    assert!(err.contains("512MiB"), "the help shows a size: {err}");
    let err = load("policy:\n  compute:\n    max_disk: 0\n", &[]).unwrap_err();
    assert!(
        err.contains("`max_disk` of 0 would refuse everything"),
        "{err}"
    );
    let err = load("policy:\n  storage:\n    max_disk: 1GiB\n", &[]).unwrap_err();
    assert!(err.contains("max_disk"), "{err}");
}

#[test]
fn a_layer_narrows_max_disk_and_may_not_widen_it() {
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_disk: 64MiB\n";
    let p = load(top, &[("root.yaml", ROOT)]).unwrap();
    let b = p.bounds_for(&Identity::default(), &Deployment::default());
    assert_eq!(b.max_disk, 64 << 20);
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_disk: 2GiB\n";
    let err = load(top, &[("root.yaml", ROOT)]).unwrap_err();
    assert!(
        err.contains("`max_disk` of 2GiB is higher than the root allows"),
        "{err}"
    );
    // Unstated at the root: held to the built-in default.
    let top = "policy:\n  extends: [./root.yaml]\n  compute:\n    max_disk: 2GiB\n";
    let err = load(top, &[("root.yaml", "policy:\n  compute: {}\n")]).unwrap_err();
    assert!(err.contains("built-in default of 1GiB"), "{err}");
}
