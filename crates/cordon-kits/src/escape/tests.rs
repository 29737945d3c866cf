//! The kit can fail: an unconfined subject (the host-directory sandbox,
//! whose exec runs on the host) fails each case below for the escape
//! itself, not for a set-up problem.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use cordon_files::host_dir::HostDirectorySandbox;
use cordon_sandbox::{Isolation, Provenance, Sandbox, SandboxSpec};

fn unconfined(root: &Path) -> EscapeSubject {
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    let provenance = Provenance {
        spec: SandboxSpec::new("escape", "host-directory")
            .unwrap()
            .with_work_dir(work.to_str().unwrap())
            .unwrap(),
        identity: cordon_policy::Identity::default(),
        policy_digest: String::new(),
        origin: None,
    };
    let sandbox: Arc<dyn Sandbox> = Arc::new(HostDirectorySandbox::new(&work, provenance).unwrap());
    EscapeSubject {
        name: "unconfined".into(),
        // Claims a real rung, so it is held to that rung's standard.
        isolation: Isolation::Container,
        sandbox: sandbox.clone(),
        bounded: sandbox,
        work_dir: work.display().to_string(),
        denied: DeniedProgram::perl(),
        denied_prefix: DeniedPrefix::coreutils_base(),
        // Bait and listeners under the test's own directory, so the
        // proof needs no root.
        host: EscapeHost {
            open_parent: root.to_path_buf(),
            home: root.to_path_buf(),
            run_dir: root.to_path_buf(),
            sleeper_uid: 65534,
            path_dirs: test_path(root),
        },
    }
}

/// A `PATH` under the test's own directory: an open directory first
/// (what a writable system directory would be), then one holding links
/// to the real tools, so planting never touches the host's own.
fn test_path(root: &Path) -> Vec<PathBuf> {
    let open = root.join("plant-bin");
    let real = root.join("real-bin");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir(&real).unwrap();
    for (name, target) in [
        ("python3", "/usr/bin/python3"),
        ("sh", "/bin/sh"),
        ("ls", "/bin/ls"),
    ] {
        std::os::unix::fs::symlink(target, real.join(name)).unwrap();
    }
    vec![open, real]
}

/// The cross-exec cases can fail: against the unconfined subject exec 1
/// plants a tool exec 2 runs, its tamperers outlive it, and a
/// concurrent exec writes into the sleeper's output.
#[test]
fn an_unconfined_subject_fails_the_cross_exec_cases() {
    let dir = tempfile::tempdir().unwrap();
    let subject = unconfined(dir.path());
    let cases: [(&str, &[&str]); 4] = [
        (
            "plant-tool-for-next-exec",
            &["exec 1 changed the host's", "exec 2 ran the planted tool"],
        ),
        (
            "background-outlives-exec",
            &["outlived it on the host", "they wrote after it ended"],
        ),
        (
            "concurrent-exec-tampering",
            &["exec B wrote into the sleeper's stdin or stdout"],
        ),
        ("concurrent-exec-proc-info", &["`fd_list` succeeded"]),
    ];
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let report = run_escape_cases(&subject, &names);
    eprintln!("{report}");
    assert_eq!(report.results.len(), cases.len(), "{report}");
    for (r, (name, why)) in report.results.iter().zip(cases) {
        assert_eq!(r.probe, name);
        assert!(
            !r.passed,
            "`{name}` passed against an unconfined subject:\n{report}"
        );
        assert!(
            why.iter().all(|w| r.detail.contains(w)),
            "`{name}` failed, but not for the escape (expected {why:?}): {}",
            r.detail
        );
    }
    // The planted tool was removed from the host again.
    assert!(!dir.path().join("plant-bin/python3").exists());
}

#[test]
fn an_unconfined_subject_fails_the_cases_for_the_escape_itself() {
    let dir = tempfile::tempdir().unwrap();
    let subject = unconfined(dir.path());
    let cases = [
        ("read-host-files", "read the host's bait"),
        ("write-outside-work-dir", "the workload created"),
        ("exec-denied-binary", "ran as the first command"),
        ("exec-denied-hard-link", "ran as the first command"),
        ("exec-denied-hard-link-loader", "ran through"),
        (
            "exec-denied-prefix",
            "which the deny of `/usr/bin/base` names, ran",
        ),
        ("tcp-connect-host-loopback", "a connection arrived"),
        ("unix-socket-host", "a connection arrived"),
        ("bind-port", "bound: tcp4 BOUND"),
        ("tiocsti", "pushed a keystroke: pty PUSHED"),
    ];
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let report = run_escape_cases(&subject, &names);
    assert_eq!(report.results.len(), cases.len(), "{report}");
    for (r, (name, why)) in report.results.iter().zip(cases) {
        assert_eq!(r.probe, name);
        assert!(
            !r.passed,
            "`{name}` passed against an unconfined subject:\n{report}"
        );
        assert!(
            r.detail.contains(why) && !r.detail.starts_with("could not set up"),
            "`{name}` failed, but not for the escape (expected {why:?}): {}",
            r.detail
        );
    }
    assert!(!report.all_passed());
    assert!(report
        .to_string()
        .ends_with(&format!("0 passed, {} failed", cases.len())));
}

/// As root the kit can start its host `sleep` as another uid; then the
/// process cases are proved too.
#[test]
fn as_root_an_unconfined_subject_fails_the_host_process_cases() {
    if !crate::conformance::can_make_device_nodes() {
        cordon_testkit::skip("the host-process proof", "it needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let subject = unconfined(dir.path());
    // An attach leaves the host process stopped (judged first); a
    // subject that detached cleanly is caught by the calls succeeding.
    let cases: [(&str, &[&str]); 2] = [
        ("host-processes", &["the host process was killed"]),
        ("ptrace", &["the host process was stopped", "succeeded"]),
    ];
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let report = run_escape_cases(&subject, &names);
    for (r, (name, why)) in report.results.iter().zip(cases) {
        assert!(
            !r.passed,
            "`{name}` passed against an unconfined subject:\n{report}"
        );
        assert!(
            why.iter().any(|w| r.detail.contains(w)),
            "`{name}`: {}",
            r.detail
        );
    }
}

#[test]
fn a_case_that_cannot_set_up_fails_rather_than_skips() {
    let dir = tempfile::tempdir().unwrap();
    let mut subject = unconfined(dir.path());
    subject.host.open_parent = dir.path().join("missing");
    subject.denied.path = "/nonexistent/denied".into();
    let report = run_escape_cases(
        &subject,
        &["unix-socket-host", "exec-denied-binary", "no-such-case"],
    );
    assert_eq!(report.passed(), 0, "{report}");
    assert_eq!(report.results.len(), 3);
}

#[test]
fn every_rung_hides_host_processes() {
    for iso in Isolation::ALL {
        assert_eq!(
            host_process_visibility(iso),
            HostProcessVisibility::Hidden,
            "{iso}"
        );
    }
}
