//! What every init stage shares — the one-shot init (`init.rs`) and the
//! warm sandbox's PID 1 (`warm_init.rs`): how a setup step fails, dying
//! with the parent, dropping to the workload's ids, rlimits. Both depend on
//! this module; it depends on neither (so `init` → `warm_init` is the only
//! arrow between them).

use nix::sys::prctl;
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Pid, Uid};

use crate::plan::Plan;

/// Exit code of an init whose setup failed (the report says why).
pub(crate) const SETUP_FAILED: i32 = 125;

pub(crate) struct Failure {
    pub step: &'static str,
    pub error: String,
}

pub(crate) fn fail<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure {
        step,
        error: e.to_string(),
    }
}

/// Dies with the parent; returns an error when the parent is already gone.
pub(crate) fn die_with_parent(expected_parent: Option<Pid>) -> Result<(), Failure> {
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(fail("PR_SET_PDEATHSIG"))?;
    if let Some(parent) = expected_parent {
        if nix::unistd::getppid() != parent {
            return Err(Failure {
                step: "PR_SET_PDEATHSIG",
                error: "the owner exited during setup".into(),
            });
        }
    }
    Ok(())
}

fn read_caps_zero() -> Result<(), Failure> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(fail("read capabilities"))?;
    for key in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .ok_or_else(|| fail("read capabilities")(format!("no {key}")))?;
        let value = line[key.len()..].trim();
        if u64::from_str_radix(value, 16) != Ok(0) {
            return Err(fail("drop capabilities")(format!(
                "{key} {value} after dropping"
            )));
        }
    }
    Ok(())
}

/// Bounding set first (needs CAP_SETPCAP), then ids, then whatever remains.
pub(crate) fn drop_privileges(uid: u32, gid: u32) -> Result<(), Failure> {
    for cap in caps::all() {
        caps::drop(None, caps::CapSet::Bounding, cap).map_err(fail("empty bounding set"))?;
    }
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    nix::unistd::setresgid(gid, gid, gid).map_err(fail("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(fail("setresuid"))?;
    for set in [
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(fail("clear capabilities"))?;
    }
    read_caps_zero()?;
    if nix::unistd::getuid() != uid || nix::unistd::geteuid() != uid {
        return Err(fail("setresuid")("uid did not change"));
    }
    Ok(())
}

pub(crate) fn rlimits(plan: &Plan) -> Result<(), Failure> {
    rlimits_for(plan.bounds())
}

pub(crate) fn rlimits_for(b: &crate::plan::Bounds) -> Result<(), Failure> {
    // Second layer only: the cgroup holds the tree-wide bounds.
    setrlimit(
        Resource::RLIMIT_CPU,
        b.max_cpu_seconds + 1,
        b.max_cpu_seconds + 2,
    )
    .map_err(fail("RLIMIT_CPU"))?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(fail("RLIMIT_CORE"))?;
    // A little above the cgroup's bound, so the cgroup (which reports what
    // it refused) trips first; this layer still holds if the cgroup does not.
    let nproc = u64::from(b.max_processes) + 2;
    setrlimit(Resource::RLIMIT_NPROC, nproc, nproc).map_err(fail("RLIMIT_NPROC"))?;
    Ok(())
}
