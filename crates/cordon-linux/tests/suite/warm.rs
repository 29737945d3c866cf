//! Warm sandboxes: one build, many execs; each exec confined on its own and
//! cleaned up when it ends.

use std::io::Read;
use std::os::fd::OwnedFd;

use cordon_linux::{ExecStdio, InitIds, Outcome, Plan, Rung, Termination, WarmExec, WarmSandbox};

use super::{enforcer_for, init_program, no_process_left, Case};

pub(super) struct Out {
    pub outcome: Outcome,
    pub stdout: String,
    pub stderr: String,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe")
}

pub(super) fn start(case: &Case, name: &str) -> WarmSandbox {
    let mut spec = case.spec.clone();
    spec.argv.clear();
    let plan = Plan::new(spec).expect("plan");
    let init = InitIds {
        host_uid: case.host_uid() + 1_000_000,
        host_gid: case.host_uid() + 1_000_000,
    };
    WarmSandbox::start(&plan, &init_program(), init, name).expect("warm sandbox starts")
}

fn exec(w: &WarmSandbox, case: &Case, argv: &[&str]) -> Out {
    exec_ahead(w, case, argv).0
}

/// [`exec`], and whether the exec was made ahead of its request.
fn exec_ahead(w: &WarmSandbox, case: &Case, argv: &[&str]) -> (Out, bool) {
    let (in_r, in_w) = pipe();
    drop(in_w);
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    let req = WarmExec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: case.spec.env.clone(),
        bounds: case.spec.bounds.clone(),
    };
    let running = w
        .exec(
            &req,
            ExecStdio {
                stdin: in_r,
                stdout: out_w,
                stderr: err_w,
            },
        )
        .expect("exec starts");
    let read = |fd: OwnedFd| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::fs::File::from(fd).read_to_string(&mut s);
            s
        })
    };
    let (o, e) = (read(out_r), read(err_r));
    let ahead = running.made_ahead();
    let outcome = running.wait().expect("exec ends");
    let out = Out {
        outcome,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
    };
    (out, ahead)
}

fn sh_ahead(w: &WarmSandbox, case: &Case, script: &str) -> (Out, bool) {
    exec_ahead(w, case, &["/bin/sh", "-c", script])
}

/// An exec made ahead of its request keeps every promise of one made on
/// request: it cannot see or signal another exec (nor the spare beside it
/// see it), nothing it leaves running outlives it, and its bounds — written
/// only as it is taken — kill at the bound and are reported as that bound.
#[test]
fn an_exec_made_ahead_keeps_the_promises_of_one_made_on_request() {
    let Some(_) = enforcer_for(Rung::Container, "warm execs made ahead") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = std::sync::Arc::new(start(
        &case,
        &format!("cordon-test-warm-ahead-{}", std::process::id()),
    ));
    // A, made ahead as the sandbox started, sleeps.
    let (w2, case_a) = (w.clone(), Case::new(Rung::Container, &["/bin/true"]));
    let a = std::thread::spawn(move || sh_ahead(&w2, &case_a, "sleep 3; echo a-finished"));
    std::thread::sleep(std::time::Duration::from_millis(800));
    // B (made on request: A took the spare, and the next is made once an
    // exec ends) and then C (made ahead, once B ended) look for A and
    // signal every pid they can name.
    let sweep = "n=0; for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); case \"$c\" in sleep) n=$((n+1));; esac; done; echo sleep-seen=$n; \
         for p in $(seq 3 4000); do kill -9 $p 2>/dev/null; done; echo done";
    let (b, b_ahead) = sh_ahead(&w, &case, sweep);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (c, c_ahead) = sh_ahead(&w, &case, sweep);
    let (a, a_ahead) = a.join().expect("exec a");
    assert!(
        (a_ahead, b_ahead, c_ahead) == (true, false, true),
        "{a_ahead} {b_ahead} {c_ahead}"
    );
    assert!(
        a.stdout.contains("a-finished"),
        "a was reached: {:?}",
        a.outcome
    );
    for x in [&b, &c] {
        assert!(x.stdout.contains("sleep-seen=0"), "{}", x.stdout);
        assert!(x.stdout.contains("done"), "{}{}", x.stdout, x.stderr);
    }
    // What one leaves running dies with it.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (d, d_ahead) = sh_ahead(
        &w,
        &case,
        "(sleep 1; echo survived > late) >/dev/null 2>&1 & echo started",
    );
    assert!(
        d_ahead && d.stdout.trim() == "started",
        "{d_ahead} {}",
        d.stdout
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let e = sh(&w, &case, "ls late 2>&1");
    assert!(e.stdout.contains("No such file"), "{}", e.stdout);
    // Its bounds, written as it is taken, kill and are reported.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut hog = Case::new(Rung::Container, &["/bin/true"]);
    hog.spec.bounds.max_memory = 64 << 20;
    let (f, f_ahead) = exec_ahead(
        &w,
        &hog,
        &[
            "/usr/bin/python3",
            "-c",
            "x=[]\nwhile True: x.append(b'\\x01'*(8<<20))",
        ],
    );
    assert!(f_ahead, "the memory hog was not made ahead");
    assert_eq!(
        f.outcome.killed_by,
        Some(cordon_linux::Bound::Memory),
        "{:?} {}",
        f.outcome,
        f.stderr
    );
    assert!(w.alive());
    w.stop().expect("stop");
    no_process_left(case.host_uid());
}

pub(super) fn sh(w: &WarmSandbox, case: &Case, script: &str) -> Out {
    exec(w, case, &["/bin/sh", "-c", script])
}

#[test]
fn state_persists_across_execs_and_nothing_is_left_after_stop() {
    let Some(_) = enforcer_for(Rung::Container, "warm reuse") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = start(&case, &format!("cordon-test-warm-{}", std::process::id()));
    let a = sh(
        &w,
        &case,
        "echo round1 > note && echo hi-from-tmp > /tmp/t && id -u",
    );
    assert_eq!(
        a.outcome.termination,
        Termination::Exited(0),
        "{}",
        a.stderr
    );
    assert_eq!(a.stdout.trim(), "1000");
    let b = sh(&w, &case, "cat note /tmp/t");
    assert_eq!(b.stdout, "round1\nhi-from-tmp\n", "{}", b.stderr);
    let dirs = w.cgroup_dirs();
    assert!(dirs.iter().all(|d| d.exists()));
    w.stop().expect("stop");
    assert!(
        dirs.iter().all(|d| !d.exists()),
        "cgroups removed: {dirs:?}"
    );
    no_process_left(case.host_uid());
    no_process_left(case.host_uid() + 1_000_000);
}

#[test]
fn what_an_exec_leaves_running_dies_with_it() {
    let Some(_) = enforcer_for(Rung::Container, "warm exec cleanup") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = start(
        &case,
        &format!("cordon-test-warm-bg-{}", std::process::id()),
    );
    // A background sleeper that would write a file later if it survived.
    let a = sh(
        &w,
        &case,
        "(sleep 1; echo survived > late) >/dev/null 2>&1 & echo started",
    );
    assert_eq!(a.stdout.trim(), "started");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let b = sh(
        &w,
        &case,
        "ls late 2>&1; ps -eo user,comm 2>/dev/null | grep -c sleep || true",
    );
    assert!(b.stdout.contains("No such file"), "{}", b.stdout);
}

#[test]
fn an_exec_cannot_see_or_signal_the_init_or_a_sibling_exec() {
    let Some(_) = enforcer_for(Rung::Container, "warm isolation") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = std::sync::Arc::new(start(
        &case,
        &format!("cordon-test-warm-sig-{}", std::process::id()),
    ));
    // Exec A sleeps; exec B looks for it and for the sandbox's init, and
    // signals every pid it can name.
    let w2 = w.clone();
    let case_a = Case {
        spec: cordon_linux::PlanSpec {
            env: case.spec.env.clone(),
            bounds: case.spec.bounds.clone(),
            ..Case::new(Rung::Container, &["/bin/true"]).spec
        },
        ..Case::new(Rung::Container, &["/bin/true"])
    };
    let a = std::thread::spawn(move || sh(&w2, &case_a, "sleep 3; echo a-finished"));
    std::thread::sleep(std::time::Duration::from_millis(800));
    let b = sh(
        &w,
        &case,
        "n=0; for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); case \"$c\" in sleep) n=$((n+1));; esac; done; echo sleep-seen=$n; \
         for p in $(seq 3 4000); do kill -9 $p 2>/dev/null; done; echo b-done",
    );
    let a = a.join().expect("exec a");
    assert!(
        a.stdout.contains("a-finished"),
        "a was reached by b: {:?} / b: {}",
        a.outcome,
        b.stdout
    );
    assert!(b.stdout.contains("sleep-seen=0"), "{}", b.stdout);
    assert!(b.stdout.contains("b-done"), "{}{}", b.stdout, b.stderr);
    assert!(w.alive());
}

#[test]
fn each_exec_is_held_to_its_own_bounds() {
    let Some(_) = enforcer_for(Rung::Container, "warm bounds") else {
        return;
    };
    let mut case = Case::new(Rung::Container, &["/bin/true"]);
    case.spec.bounds.max_wall_seconds = 1;
    let w = start(
        &case,
        &format!("cordon-test-warm-wall-{}", std::process::id()),
    );
    let a = sh(&w, &case, "sleep 5");
    assert_eq!(a.outcome.killed_by, Some(cordon_linux::Bound::Wall));
    // The sandbox outlives an exec that hit its bound.
    let b = sh(&w, &case, "echo still-here");
    assert_eq!(b.stdout.trim(), "still-here");
}

#[test]
fn stop_leaves_no_zombie_of_the_init() {
    let Some(_) = enforcer_for(Rung::Container, "warm stop") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = start(
        &case,
        &format!("cordon-test-warm-zombie-{}", std::process::id()),
    );
    let a = sh(&w, &case, "echo ok");
    assert_eq!(a.stdout.trim(), "ok");
    w.stop().expect("stop");
    // Right after stop: nothing runs as the init's or the workload's host
    // uid, not even a zombie waiting for the host's init.
    for uid in [case.host_uid(), case.host_uid() + 1_000_000] {
        let left = super::processes_of(uid, true);
        assert!(left.is_empty(), "uid {uid}: {left:?}");
    }
}

/// A paused sandbox runs nothing: a busy loop's count does not move while
/// paused and moves again once resumed; an exec on a paused sandbox resumes
/// it first; a paused sandbox stops cleanly.
#[test]
fn pause_freezes_every_process_and_resume_or_an_exec_thaws_them() {
    let Some(_) = enforcer_for(Rung::Container, "warm pause") else {
        return;
    };
    let case = Case::new(Rung::Container, &["/bin/true"]);
    let w = start(
        &case,
        &format!("cordon-test-warm-pause-{}", std::process::id()),
    );
    let (in_r, in_w) = pipe();
    drop(in_w);
    let (_out_r, out_w) = pipe();
    let (_err_r, err_w) = pipe();
    let req = WarmExec {
        argv: [
            "/bin/sh",
            "-c",
            "i=0; while :; do i=$((i+1)); echo $i > count; done",
        ]
        .map(String::from)
        .to_vec(),
        env: case.spec.env.clone(),
        bounds: case.spec.bounds.clone(),
    };
    let running = w
        .exec(
            &req,
            ExecStdio {
                stdin: in_r,
                stdout: out_w,
                stderr: err_w,
            },
        )
        .expect("the loop starts");
    // The loop truncates and rewrites the file: a read between the two
    // sees nothing, and is read again.
    let count = || -> u64 {
        for _ in 0..200 {
            let read = std::fs::read_to_string(case.work.path().join("count"));
            if let Some(n) = read.ok().and_then(|s| s.trim().parse().ok()) {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        0
    };
    let moving = || {
        let a = count();
        std::thread::sleep(std::time::Duration::from_millis(400));
        count() > a
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(moving(), "the loop never ran");
    w.pause().expect("pause");
    assert!(w.paused());
    // A write in flight may land just after: then nothing moves.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!moving(), "the loop ran while paused");
    assert!(!moving(), "the loop ran while paused");
    w.resume().expect("resume");
    assert!(!w.paused());
    assert!(moving(), "the loop did not go on after resume");
    // Paused again, an exec resumes it first.
    w.pause().expect("pause");
    let b = sh(&w, &case, "echo ran");
    assert_eq!(b.stdout, "ran\n", "{}", b.stderr);
    assert!(!w.paused());
    assert!(moving(), "the exec did not resume the sandbox");
    // Paused, it still stops: everything dies and nothing is left.
    w.pause().expect("pause");
    let dirs = w.cgroup_dirs();
    w.stop().expect("stop");
    drop(running);
    assert!(dirs.iter().all(|d| !d.exists()), "cgroups left: {dirs:?}");
    no_process_left(case.host_uid());
}
