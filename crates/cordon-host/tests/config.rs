//! Where the host's floor comes from, and unknown rungs refused everywhere.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_host::config::{resolve_floor, FloorSource, HostConfig};
use cordon_sandbox::Isolation;

fn cfg(rung: &str) -> HostConfig {
    HostConfig::from_yaml("cordon.yaml", &format!("min_isolation: {rung}\n")).unwrap()
}

#[test]
fn precedence_is_flag_then_environment_then_file_then_microvm() {
    let c = cfg("container");
    let f = resolve_floor(Some("vm"), Some("hardened_container"), Some(&c)).unwrap();
    assert_eq!((f.rung, f.source), (Isolation::Vm, FloorSource::Flag));
    let f = resolve_floor(None, Some("hardened_container"), Some(&c)).unwrap();
    assert_eq!(
        (f.rung, f.source),
        (Isolation::HardenedContainer, FloorSource::Env)
    );
    let f = resolve_floor(None, None, Some(&c)).unwrap();
    assert_eq!(f.rung, Isolation::Container);
    assert_eq!(f.source.to_string(), "`min_isolation` in `cordon.yaml`");
    let empty = HostConfig::from_yaml("cordon.yaml", "{}\n").unwrap();
    let f = resolve_floor(None, None, Some(&empty)).unwrap();
    assert_eq!(
        (f.rung, f.source),
        (Isolation::Microvm, FloorSource::Default)
    );
    let f = resolve_floor(None, None, None).unwrap();
    assert_eq!(f.rung, Isolation::Microvm);
}

#[test]
fn an_unknown_rung_is_refused_wherever_it_comes_from() {
    let mut report = String::new();
    let err = "Container".parse::<Isolation>().unwrap_err();
    report.push_str(&format!("parse\n  {err}\n"));
    let err = resolve_floor(Some("microVM"), None, None).unwrap_err();
    report.push_str(&format!("flag\n  {err}\n"));
    // Even when a valid flag overrides it.
    let err = resolve_floor(Some("vm"), Some("proces"), None).unwrap_err();
    report.push_str(&format!("env\n  {err}\n"));
    let err = resolve_floor(None, Some(""), None).unwrap_err();
    report.push_str(&format!("empty env\n  {err}\n"));
    let err = HostConfig::from_yaml("cordon.yaml", "# host\nmin_isolation: gvisor\n").unwrap_err();
    report.push_str(&format!("file\n  {err}\n"));
    let err = HostConfig::from_yaml("cordon.yaml", "min_isolaton: vm\n").unwrap_err();
    report.push_str(&format!("file key\n  {err}\n"));
    insta::assert_snapshot!("unknown_rung_everywhere", report);
}

#[test]
fn a_config_file_is_read_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cordon.yaml");
    std::fs::write(&path, "min_isolation: process\n").unwrap();
    let c = HostConfig::from_file(&path).unwrap();
    assert_eq!(c.min_isolation, Some(Isolation::Process));
    assert!(HostConfig::from_file(&dir.path().join("absent.yaml")).is_err());
}

#[test]
fn the_egress_section_is_read_and_checked() {
    let c = HostConfig::from_yaml(
        "cordon.yaml",
        "egress:\n  nameservers: [\"127.0.0.53:53\", \"[::1]:5353\"]\n  hosts_file: /etc/cordon/hosts\n  audit: /var/log/cordon-egress.jsonl\n",
    )
    .unwrap();
    let e = c.egress.unwrap();
    assert_eq!(
        e.nameservers.unwrap(),
        vec![
            "127.0.0.53:53".parse().unwrap(),
            "[::1]:5353".parse().unwrap()
        ]
    );
    assert_eq!(e.hosts_file.unwrap().to_str(), Some("/etc/cordon/hosts"));
    // The audit log's bounds: defaults unless given, each given one taken.
    assert_eq!(e.audit_bounds, cordon_sandbox::AuditBounds::default());
    let bounded = HostConfig::from_yaml(
        "cordon.yaml",
        "egress:\n  audit_bounds:\n    keep: 5\n    sandbox_bytes_per_sec: 4096\n",
    )
    .unwrap()
    .egress
    .unwrap()
    .audit_bounds;
    assert_eq!(
        bounded,
        cordon_sandbox::AuditBounds {
            keep: 5,
            sandbox_bytes_per_sec: 4096,
            ..Default::default()
        }
    );
    // `nameservers: []` is no DNS at all, not the system's.
    let none = HostConfig::from_yaml("cordon.yaml", "egress:\n  nameservers: []\n").unwrap();
    assert_eq!(none.egress.unwrap().nameservers, Some(vec![]));
    for (text, says) in [
        ("egress:\n  nameservers: [\"8.8.8.8\"]\n", "ADDR:PORT"),
        ("egress:\n  audit: audit.jsonl\n", "absolute"),
        ("egress:\n  hosts_file: ./hosts\n", "absolute"),
        ("egress:\n  resolver: x\n", "unknown field"),
        (
            "egress:\n  audit_bounds:\n    rotate_bytes: 10\n",
            "`egress.audit_bounds`: `rotate_bytes` is 10",
        ),
        (
            "egress:\n  audit_bounds:\n    sandbox_burst_bytes: 100\n",
            "`sandbox_burst_bytes` is 100",
        ),
        (
            "egress:\n  audit_bounds:\n    keep: 1000\n",
            "`keep` is 1000",
        ),
        ("egress:\n  audit_bounds:\n    rate: 1\n", "unknown field"),
    ] {
        let e = HostConfig::from_yaml("cordon.yaml", text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{text:?}: {e}");
    }
}
