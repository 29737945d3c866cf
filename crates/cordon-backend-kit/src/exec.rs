//! What every backend's sandbox does the same around one exec: its
//! refusals and failures, the command checked and resolved before
//! anything is made, and the bounds the host holds while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_sandbox::{Attach, ExecRequest, ExitStatus, Limits, SandboxError};

/// The policy (or what the exec asks for) cannot be held here: nothing ran.
pub fn refused(reason: impl Into<String>) -> SandboxError {
    SandboxError::Refused {
        reason: reason.into(),
        rules: Vec::new(),
    }
}

/// The machinery of an exec failed.
pub fn exec_failed(reason: impl Into<String>) -> SandboxError {
    SandboxError::Failed {
        operation: "exec",
        reason: reason.into(),
    }
}

/// The policy's storage and compute plan for a sandbox made for
/// `identity` in `env`, as of now, over the work dir `work`: refused when
/// the policy refuses it.
pub fn plan_now(
    policy: &cordon_policy::Policy,
    identity: &cordon_policy::Identity,
    env: &cordon_policy::Deployment,
    work: &str,
) -> Result<cordon_policy::plan::ConfinementPlan, SandboxError> {
    policy
        .plan(identity, env, cordon_sandbox::guard::now(), work)
        .map_err(|e| refused(e.to_string()))
}

/// The policy's plan as an engine's mounts could not be made: refused
/// (what the plan asks cannot be held) or failed.
pub fn mounts_error(e: cordon_confine::oci::EngineMountsError) -> SandboxError {
    match e {
        cordon_confine::oci::EngineMountsError::Refused(r) => refused(r),
        cordon_confine::oci::EngineMountsError::Failed(r) => exec_failed(r),
    }
}

/// An exec of a sandbox already disposed of is refused before anything
/// is made (`disposed`: the sandbox's flag, set by its dispose).
pub fn live(disposed: &AtomicBool) -> Result<(), SandboxError> {
    match disposed.load(Ordering::SeqCst) {
        true => Err(exec_failed("the sandbox was disposed of")),
        false => Ok(()),
    }
}

/// The exec's command line with its program resolved in the sandbox's own
/// filesystem view (`argv[0]` the canonical path): what the engine runs.
/// Refused before anything is made: a terminal (the backend serves none;
/// `no_tty` says why and what to do), an empty command (no program, or a
/// program named by the empty string), a program the view cannot resolve.
pub fn resolved_argv(
    view: &dyn cordon_confine::FsView,
    req: &ExecRequest,
    attach: &Attach,
    no_tty: &str,
) -> Result<Vec<String>, SandboxError> {
    if attach.tty.is_some() {
        return Err(SandboxError::Unavailable {
            reason: no_tty.to_string(),
        });
    }
    let argv0 = req.argv.first().map(String::as_str).unwrap_or("");
    if argv0.is_empty() {
        return Err(refused("the command is empty"));
    }
    let canonical =
        cordon_confine::command::resolve(view, argv0).map_err(|e| refused(e.to_string()))?;
    let mut argv = req.argv.clone();
    argv[0] = canonical.command;
    Ok(argv)
}

/// An exec's wall clock in seconds: the sandbox's bound or the request's
/// timeout, whichever is shorter, and at least one.
pub fn wall_seconds(limits: &Limits, req: &ExecRequest) -> u64 {
    limits.wall_seconds.min(req.timeout.as_secs().max(1))
}

/// How long a started exec's CPU time may stay unreadable.
pub const CPU_GRACE: Duration = Duration::from_secs(5);

/// The bounds the host holds over one running exec: its wall clock, its
/// CPU time as read from its cgroup, and a kill asked for. The CPU bound
/// is held only while the CPU time can be read: an exec whose cgroup never
/// shows it within [`CPU_GRACE`] is stopped, never run unbounded.
#[derive(Debug)]
pub struct ExecBounds {
    started: Instant,
    deadline: Instant,
    cpu_nanos: u64,
    cpu_seen: bool,
    killed: Arc<AtomicBool>,
}

impl ExecBounds {
    /// The bounds of `req` in a sandbox of `limits`, starting now;
    /// `killed` is set by the exec's killer.
    pub fn new(limits: &Limits, req: &ExecRequest, killed: Arc<AtomicBool>) -> ExecBounds {
        let started = Instant::now();
        ExecBounds {
            started,
            deadline: started + Duration::from_secs(wall_seconds(limits, req)),
            cpu_nanos: limits.cpu_seconds.saturating_mul(1_000_000_000),
            cpu_seen: false,
            killed,
        }
    }

    /// An exec that ended before it could be seen running (no process to
    /// read the CPU time of): its CPU time is not waited for.
    pub fn ended_unseen(mut self) -> ExecBounds {
        self.cpu_seen = true;
        self
    }

    /// What ends the exec now, given the CPU time it has used (`None`: not
    /// readable) in the cgroup `cgroup` (named in the error): `None` while
    /// it may go on; else how it ended, or why it was stopped. The caller
    /// stops it whenever this is `Some`.
    pub fn over(
        &mut self,
        cpu: Option<u64>,
        cgroup: &str,
    ) -> Option<Result<ExitStatus, SandboxError>> {
        self.cpu_seen |= cpu.is_some();
        if !self.cpu_seen && self.started.elapsed() > CPU_GRACE {
            return Some(Err(exec_failed(format!(
                "the exec's CPU time did not show in its cgroup (`{cgroup}`) within {}s, so `max_cpu_seconds` cannot be held and cordon stopped it; mount the cpuacct (cgroup v1) or cpu (v2) controller",
                CPU_GRACE.as_secs()
            ))));
        }
        if self.killed.load(Ordering::SeqCst) {
            Some(Ok(ExitStatus::Signal(9)))
        } else if Instant::now() >= self.deadline {
            Some(Ok(ExitStatus::TimedOut))
        } else if cpu.is_some_and(|n| n > self.cpu_nanos) {
            Some(Ok(ExitStatus::Bound {
                bound: "max_cpu_seconds",
            }))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cordon_confine::RootedFs;

    fn req(argv: &[&str]) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: Default::default(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(60),
            max_output_bytes: 1024,
        }
    }

    fn limits() -> Limits {
        Limits {
            memory_bytes: 1 << 30,
            processes: 64,
            cpu_seconds: 10,
            wall_seconds: 60,
            disk_bytes: 1 << 30,
        }
    }

    /// docker's and gvisor's sandboxes took an empty program name (`""`)
    /// on to the resolver; microvm's refused it as an empty command, as
    /// every backend now does, before anything is resolved or made.
    #[test]
    fn an_empty_program_or_a_terminal_is_refused_before_anything() {
        let root = tempfile::tempdir().unwrap();
        let view = RootedFs::new(root.path());
        for argv in [&[][..], &[""][..], &["", "-c", "true"][..]] {
            let e = resolved_argv(&view, &req(argv), &Attach::default(), "none").unwrap_err();
            assert!(
                matches!(&e, SandboxError::Refused { reason, .. } if reason.contains("empty")),
                "{e:?}"
            );
        }
        let tty = Attach {
            tty: Some(cordon_sandbox::TtySize { rows: 1, cols: 1 }),
            ..Attach::default()
        };
        let e = resolved_argv(&view, &req(&["sh"]), &tty, "no terminal here").unwrap_err();
        assert!(matches!(e, SandboxError::Unavailable { reason } if reason == "no terminal here"));
        // A program the view does not have is refused too.
        assert!(resolved_argv(&view, &req(&["nope"]), &Attach::default(), "").is_err());
    }

    /// gvisor's sandbox took an exec after its dispose on until making its
    /// exec directory failed; docker's refused it first, as every engine
    /// sandbox now does.
    #[test]
    fn an_exec_of_a_disposed_sandbox_is_refused() {
        let disposed = AtomicBool::new(false);
        assert!(live(&disposed).is_ok());
        disposed.store(true, Ordering::SeqCst);
        let e = live(&disposed).unwrap_err();
        assert!(e.to_string().contains("disposed"), "{e}");
    }

    #[test]
    fn an_exec_whose_cpu_never_shows_is_stopped_not_run_unbounded() {
        let limits = limits();
        let killed = Arc::new(AtomicBool::new(false));
        let mut b = ExecBounds::new(&limits, &req(&["x"]), killed.clone());
        assert!(b.over(None, "cg").is_none(), "within the grace it goes on");
        b.started -= CPU_GRACE + Duration::from_secs(1);
        let e = b.over(None, "cg").unwrap().unwrap_err();
        assert!(e.to_string().contains("`cg`"), "{e}");
        // Seen once, it is held by its bound from then on.
        let mut b = ExecBounds::new(&limits, &req(&["x"]), killed.clone());
        assert!(b.over(Some(1), "cg").is_none());
        b.started -= CPU_GRACE + Duration::from_secs(1);
        assert!(b.over(None, "cg").is_none());
        assert!(matches!(
            b.over(Some(u64::MAX), "cg"),
            Some(Ok(ExitStatus::Bound {
                bound: "max_cpu_seconds"
            }))
        ));
        killed.store(true, Ordering::SeqCst);
        assert!(matches!(
            b.over(Some(1), "cg"),
            Some(Ok(ExitStatus::Signal(9)))
        ));
        // One that ended unseen is not waited for.
        let mut b = ExecBounds::new(&limits, &req(&["x"]), Arc::default()).ended_unseen();
        b.started -= CPU_GRACE + Duration::from_secs(1);
        assert!(b.over(None, "cg").is_none());
    }
}
