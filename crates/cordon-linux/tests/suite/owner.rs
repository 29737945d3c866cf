//! The sandbox dies with its owner: an owner process starts a sandbox and is
//! SIGKILLed (no destructor runs); nothing of the sandbox may survive it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_linux::{Enforcer, LinuxEnforcer, Plan, PlanSpec, SandboxStdio};

use super::*;
use crate::both;

const OWNER_ENV: &str = "CORDON_LINUX_TEST_OWNER_PLAN";

/// Not a case by itself: the owner process that `sandbox_dies_with_its_owner`
/// starts (this test binary again) and kills.
#[test]
#[ignore = "helper: run by sandbox_dies_with_its_owner"]
fn owner_helper() {
    let Ok(json) = std::env::var(OWNER_ENV) else {
        return;
    };
    let spec: PlanSpec = serde_json::from_str(&json).expect("plan json");
    let plan = Plan::new(spec).expect("plan");
    let stdio = SandboxStdio {
        stdin: Stdio::null(),
        stdout: Stdio::null(),
        stderr: Stdio::null(),
    };
    let running = LinuxEnforcer::new(init_program())
        .confine(&plan, stdio)
        .expect("confine");
    println!("OWNER-STARTED");
    std::thread::sleep(Duration::from_secs(60));
    drop(running);
}

fn live_processes_of(uid: u32) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        };
        if field("Uid:") == Some(uid.to_string()) && field("State:").as_deref() != Some("Z") {
            n += 1;
        }
    }
    n
}

/// The cgroup a SIGKILLed owner leaves behind (documented); removed here.
fn remove_cgroups_of(owner_pid: u32) {
    let prefix = format!("cordon-{owner_pid}-");
    let mut stack = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if !path.is_dir() {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir(&path);
            } else if depth < 4 {
                stack.push((path, depth + 1));
            }
        }
    }
}

both!(sandbox_dies_with_its_owner, |rung| {
    let Some(_) = enforcer_for(rung, "owner death") else {
        return;
    };
    let case = Case::new(rung, &["/bin/sleep", "60"]);
    let uid = case.host_uid();
    let mut owner = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "suite::owner::owner_helper",
            "--ignored",
            "--nocapture",
        ])
        .env(OWNER_ENV, serde_json::to_string(&case.spec).expect("json"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("owner");
    let stdout = owner.stdout.take().expect("stdout");
    let started = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("OWNER-STARTED"));
    assert!(started, "the owner did not start a sandbox");
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_processes_of(uid) == 0 {
        assert!(Instant::now() < deadline, "the workload never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    let owner_pid = owner.id();
    owner.kill().expect("kill owner");
    owner.wait().expect("reap owner");
    no_process_left(uid);
    remove_cgroups_of(owner_pid);
});

/// After a process-rung run that left many processes behind, none lingers
/// as a zombie counted against the uid's `RLIMIT_NPROC`: the init is their
/// subreaper and reaps them before it reports. The next run on the same uid
/// can fork as much as the first.
#[test]
fn no_zombie_of_a_process_rung_run_outlives_it() {
    let Some(enforcer) = super::enforcer_for(cordon_linux::Rung::Process, "zombie reaping") else {
        return;
    };
    let mut case = super::shell(
        cordon_linux::Rung::Process,
        "for i in $(seq 40); do (sleep 30 & sleep 30 &) ; done; echo spawned",
    );
    case.spec.bounds.max_processes = 100;
    let run = case.run(&enforcer);
    assert!(run.stdout.contains("spawned"), "{run:?}");
    // Right after the run: no process of the uid, zombie or not.
    let left = super::processes_of(case.host_uid(), true);
    assert!(left.is_empty(), "left behind: {left:?}");
    // And the same uid forks as much again.
    let again = case.run(&enforcer);
    assert!(again.stdout.contains("spawned"), "{again:?}");
}

// A one-shot run cancelled from another thread while `wait` waits: the
// whole tree dies at once (no bound was near), and the run ends killed.
both!(a_cancelled_run_ends_at_once_with_its_tree, |rung| {
    let Some(enforcer) = enforcer_for(rung, "cancel") else {
        return;
    };
    let case = Case::new(rung, &["/bin/sh", "-c", "sleep 60 & sleep 60"]);
    let uid = case.host_uid();
    let plan = Plan::new(case.spec.clone()).expect("plan");
    let stdio = SandboxStdio {
        stdin: Stdio::null(),
        stdout: Stdio::null(),
        stderr: Stdio::null(),
    };
    let running = enforcer.confine(&plan, stdio).expect("confine");
    let cancel = running.canceller();
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_processes_of(uid) < 2 {
        assert!(Instant::now() < deadline, "the workload never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = std::thread::spawn(move || running.wait());
    std::thread::sleep(Duration::from_millis(100));
    let cancelled = Instant::now();
    cancel.cancel();
    let outcome = waited.join().expect("join").expect("wait");
    assert!(
        cancelled.elapsed() < Duration::from_secs(1),
        "the cancelled run took {:?} to end",
        cancelled.elapsed()
    );
    assert_eq!(
        outcome.termination,
        cordon_linux::Termination::Signaled(9),
        "{outcome:?}"
    );
    assert_eq!(outcome.killed_by, None, "no bound killed it: {outcome:?}");
    no_process_left(uid);
});
