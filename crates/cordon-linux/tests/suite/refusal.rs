//! Refusal when a mechanism is unavailable, simulated through the enforcer
//! seam: nothing runs, and the error names exactly what is missing.

use cordon_linux::{ConfineError, Enforcer, Mechanism, Mechanisms, Refusing, Rung};

use super::*;

fn simulated(tweak: impl FnOnce(&mut Mechanisms)) -> LinuxEnforcer {
    let mut m = Mechanisms::detect();
    // Start from a machine that has everything, then take something away.
    m.root = true;
    m.landlock_abi = 7;
    m.seccomp = true;
    m.cgroups = Ok(());
    m.platform = Ok(());
    for ns in &mut m.namespaces {
        ns.1 = true;
    }
    tweak(&mut m);
    LinuxEnforcer::with_mechanisms(init_program(), m)
}

/// Confining must refuse with `mechanism` named, and start nothing.
fn assert_refused(enforcer: &LinuxEnforcer, rung: Rung, mechanism: Mechanism) {
    let case = shell(rung, "echo ran > marker");
    let plan = Plan::new(case.spec.clone()).expect("plan");
    match enforcer.confine(&plan, SandboxStdio::piped()) {
        Err(ConfineError::Missing(missing)) => {
            assert!(
                missing.names(mechanism),
                "{mechanism} not named in: {missing}"
            );
            let text = missing.to_string();
            assert!(text.contains("help:"), "no help in: {text}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("started without {mechanism}"),
    }
    assert!(!case.work_dir().join("marker").exists(), "the workload ran");
    assert!(enforcer.available(rung).is_err());
}

#[test]
fn container_refuses_without_landlock_network_rules() {
    let e = simulated(|m| m.landlock_abi = 3);
    assert_refused(&e, Rung::Container, Mechanism::LandlockNetwork);
}

#[test]
fn process_rung_refuses_without_landlock_scoping() {
    // ABI 5 is enough for the container rung, not for the process rung,
    // which has no pid namespace to keep signals in.
    let e = simulated(|m| m.landlock_abi = 5);
    assert_refused(&e, Rung::Process, Mechanism::LandlockScoping);
    assert!(e.available(Rung::Container).is_ok());
}

#[test]
fn refuses_without_landlock_at_all() {
    let e = simulated(|m| m.landlock_abi = 0);
    assert_refused(&e, Rung::Container, Mechanism::Landlock);
    assert_refused(&e, Rung::Process, Mechanism::Landlock);
}

#[test]
fn refuses_without_seccomp() {
    let e = simulated(|m| m.seccomp = false);
    assert_refused(&e, Rung::Container, Mechanism::Seccomp);
    assert_refused(&e, Rung::Process, Mechanism::Seccomp);
}

#[test]
fn container_refuses_without_a_user_namespace() {
    let e = simulated(|m| m.namespaces[0].1 = false);
    assert_refused(&e, Rung::Container, Mechanism::UserNamespace);
}

#[test]
fn refuses_without_a_cgroup_controller() {
    let e = simulated(|m| {
        m.cgroups = Err(cordon_linux::Missing::one(
            Mechanism::CgroupPids,
            "no pids controller",
            "mount it",
        ))
    });
    assert_refused(&e, Rung::Container, Mechanism::CgroupPids);
    assert_refused(&e, Rung::Process, Mechanism::CgroupPids);
}

#[test]
fn refuses_without_root_and_lists_everything_missing() {
    let e = simulated(|m| {
        m.root = false;
        m.seccomp = false;
    });
    let missing = e.available(Rung::Container).unwrap_err();
    assert!(
        missing.names(Mechanism::Privilege) && missing.names(Mechanism::Seccomp),
        "{missing}"
    );
    assert_eq!(missing.absent.len(), 2, "{missing}");
}

#[test]
fn the_refusing_enforcer_refuses_every_rung() {
    for rung in [Rung::Container, Rung::Process] {
        let missing = Refusing.available(rung).unwrap_err();
        assert!(missing.names(Mechanism::Platform));
        let plan = Plan::new(shell(rung, "true").spec.clone()).expect("plan");
        assert!(matches!(
            Refusing.confine(&plan, SandboxStdio::piped()),
            Err(ConfineError::Missing(_))
        ));
    }
}

#[test]
fn a_mask_outside_every_grant_is_refused_at_both_rungs() {
    // Masks inside a granted tree are held at both rungs (`masks.rs`); one
    // outside every grant names nothing the sandbox could reach.
    for rung in [Rung::Process, Rung::Container] {
        let mut case = shell(rung, "true");
        case.spec.mask_executables = vec!["/usr/bin/perl".into()];
        assert!(Plan::new(case.spec.clone()).is_ok(), "{rung}");
        case.spec.mask_executables = vec!["/opt/cordon-nowhere/tool".into()];
        assert!(Plan::new(case.spec.clone()).is_err(), "{rung}");
        case.spec.mask_executables.clear();
        case.spec.mask_paths = vec!["/opt/cordon-nowhere".into()];
        assert!(Plan::new(case.spec.clone()).is_err(), "{rung}");
    }
}

/// An init program built from other sources (here: one that reports a
/// stale build) refuses before it does anything, naming the fix; the
/// workload never runs.
#[test]
fn an_init_from_another_build_refuses() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_) = enforcer_for(Rung::Container, "stale init") else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let stale = dir.path().join("stale-init");
    std::fs::write(
        &stale,
        format!(
            "#!/bin/sh\nexec {} \"$@\" --cordon-build=0.0.0-stale\n",
            env!("CARGO_BIN_EXE_cordon-linux-init")
        ),
    )
    .expect("write");
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let enforcer = LinuxEnforcer::new(InitProgram::new(&stale));
    for rung in [Rung::Container, Rung::Process] {
        let case = shell(rung, "echo ran > marker");
        let plan = Plan::new(case.spec.clone()).expect("plan");
        // The script was just written: a test on another thread that
        // forks meanwhile holds its write descriptor until it execs, and
        // the kernel refuses to run a file open for writing (ETXTBSY).
        // That is the harness's race, not the init's answer: tried again.
        let mut err = String::new();
        for _ in 0..20 {
            err = match enforcer.confine(&plan, SandboxStdio::piped()) {
                Ok(r) => match r.wait() {
                    Ok(o) => panic!("{rung}: the stale init ran the workload: {o:?}"),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if !err.contains("Text file busy") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(err.contains("built from other sources"), "{rung}: {err}");
        assert!(err.contains("0.0.0-stale"), "{rung}: {err}");
        assert!(
            !case.work_dir().join("marker").exists(),
            "{rung}: the workload ran"
        );
    }
}
