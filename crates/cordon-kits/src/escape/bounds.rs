//! The bounds: memory, CPU, processes and wall clock of the bounded
//! sandbox, and nothing outliving them.

use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use cordon_sandbox::ExitStatus;

use super::case::{
    EscapeSubject, BOUND_CPU_SECONDS, BOUND_MEMORY, BOUND_PROCESSES, BOUND_WALL_SECONDS,
};
use super::host::nonce;
use super::workload::{exec_in, py_in, Ran};

pub(super) fn bounded(s: &EscapeSubject, code: &str) -> Ran {
    py_in(&*s.bounded, code)
}

/// Live (not zombie) host processes whose command line holds `token`,
/// after a grace of two seconds for the sandbox's teardown.
pub(super) fn survivors(token: &str) -> Vec<u32> {
    let scan = || {
        let mut left = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return left;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains(token) {
                continue;
            }
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if !zombie {
                left.push(pid);
            }
        }
        left
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = scan();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fails when processes of the workload outlived its exec (and kills
/// them, as the host's cleanup: the case has already failed).
pub(super) fn none_survive(token: &str, run: &Ran) -> Result<(), String> {
    let left = survivors(token);
    if left.is_empty() {
        return Ok(());
    }
    for pid in &left {
        let _ = Command::new("/bin/kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    Err(format!(
        "{} process(es) of the workload outlived it on the host: {left:?} {}",
        left.len(),
        run.show()
    ))
}

pub(super) fn fork_bomb(s: &EscapeSubject) -> Result<String, String> {
    // The children sleep (and are capped at 500) so an unconfined subject
    // does not take the host down with it. The token marks its processes
    // on the host.
    let token = format!("cordon-escape-fork-{}", nonce());
    let run = bounded(
        s,
        &format!("# {token}\nimport os,time\nn=0\nfor i in range(500):\n    try:\n        if os.fork()==0:\n            time.sleep(20); os._exit(0)\n        n+=1\n    except OSError: break\nprint('forked',n,flush=True)\nprint('end',flush=True)"
        ),
    );
    none_survive(&token, &run)?;
    let forked: Option<u64> = run.stdout().lines().find_map(|l| {
        l.strip_prefix("forked ")
            .and_then(|n| n.trim().parse().ok())
    });
    match (forked, run.status()) {
        (Some(n), _) if n >= BOUND_PROCESSES => Err(format!(
            "forked {n} processes under max_processes {BOUND_PROCESSES} {}",
            run.show()
        )),
        (Some(n), _) if run.took > Duration::from_secs(10) => Err(format!(
            "forked {n}, but the sleeping children kept the run alive for {:.1}s {}",
            run.took.as_secs_f64(),
            run.show()
        )),
        (Some(n), _) => Ok(format!(
            "stopped after {n} forks under max_processes {BOUND_PROCESSES}"
        )),
        (
            None,
            Some(ExitStatus::Bound {
                bound: "max_processes",
            }),
        ) => Ok("killed at the `max_processes` bound".into()),
        (None, _) => Err(format!(
            "could not set up: the fork bomb never reported {}",
            run.show()
        )),
    }
}

pub(super) fn memory_bomb(s: &EscapeSubject) -> Result<String, String> {
    // Stops by itself at 1 GiB, so an unconfined subject survives it.
    let run = bounded(
        s,
        "x=[]\nprint('start',flush=True)\nfor i in range(128): x.append(b'\\x01'*(8<<20))\nprint('ALLOCATED',len(x)*8,'MiB',flush=True)",
    );
    if !run.stdout().contains("start")
        && run.status()
            != Some(ExitStatus::Bound {
                bound: "max_memory",
            })
    {
        return Err(format!(
            "could not set up: the workload did not start {}",
            run.show()
        ));
    }
    if run.stdout().contains("ALLOCATED") {
        return Err(format!(
            "allocated 1 GiB under max_memory {} MiB {}",
            BOUND_MEMORY >> 20,
            run.show()
        ));
    }
    match run.status() {
        Some(ExitStatus::Bound {
            bound: "max_memory",
        }) => Ok("killed at the `max_memory` bound".into()),
        _ => Err(format!(
            "stopped, but not reported as the `max_memory` bound {}",
            run.show()
        )),
    }
}

pub(super) fn cpu_spin(s: &EscapeSubject) -> Result<String, String> {
    // Four spinners: a per-process limit would let them use four times the
    // bound. Each gives up after 20 s of wall time on its own.
    let token = format!("cordon-escape-spin-{}", nonce());
    let run = bounded(
        s,
        &format!("# {token}\nimport os,time\nprint('start',flush=True)\nfor i in range(3):\n    if os.fork()==0: break\nt=time.time()\nwhile time.time()-t<20: pass\nprint('SPUN',flush=True)"
        ),
    );
    none_survive(&token, &run)?;
    if run.stdout().contains("SPUN") {
        return Err(format!(
            "spun for 20 s under max_cpu_seconds {BOUND_CPU_SECONDS} {}",
            run.show()
        ));
    }
    match run.status() {
        Some(ExitStatus::Bound {
            bound: "max_cpu_seconds",
        }) if run.took < Duration::from_secs(BOUND_WALL_SECONDS + 2) => Ok(format!(
            "killed at the `max_cpu_seconds` bound after {:.1}s",
            run.took.as_secs_f64()
        )),
        _ => Err(format!(
            "not stopped at the `max_cpu_seconds` bound ({:.1}s) {}",
            run.took.as_secs_f64(),
            run.show()
        )),
    }
}

pub(super) fn wall_clock(s: &EscapeSubject) -> Result<String, String> {
    // The request's own timeout is far above the bound: what stops it must
    // be the sandbox's `max_wall_seconds`.
    let run = exec_in(
        &*s.bounded,
        vec!["/bin/sleep".into(), "60".into()],
        Duration::from_secs(30),
    );
    match run.status() {
        Some(ExitStatus::TimedOut) if run.took < Duration::from_secs(BOUND_WALL_SECONDS + 3) => {
            Ok(format!(
                "stopped at the `max_wall_seconds` bound after {:.1}s",
                run.took.as_secs_f64()
            ))
        }
        _ => Err(format!(
            "not stopped at max_wall_seconds {BOUND_WALL_SECONDS} ({:.1}s) {}",
            run.took.as_secs_f64(),
            run.show()
        )),
    }
}
