//! The enforcer seam: can confinement hold here, and confine — one-shot
//! ([`Enforcer::confine`]) or as a warm sandbox every exec runs in
//! ([`Enforcer::start_warm`]).
//!
//! Enforcement is compiled for Linux on x86_64 only (the seccomp table uses
//! x86_64 syscall numbers); every other target gets [`Refusing`].

use crate::missing::{Mechanism, Missing};
use crate::plan::{Plan, Rung};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use crate::linux::launch::{InitProgram, LaunchError, Running, SandboxStdio};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use crate::linux::probe::Mechanisms;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use crate::linux::warm::{InitIds, WarmSandbox};

/// Why a sandbox was not started.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// A mechanism the rung needs is absent; nothing ran.
    #[error(transparent)]
    Missing(#[from] Missing),
    /// The sandbox could not be built; nothing of the workload ran.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// Something that holds a [`Plan`] below the workload.
pub trait Enforcer {
    /// Whether `rung` can be held on this machine, and if not, every
    /// mechanism that is missing and what to do about it.
    fn available(&self, rung: Rung) -> Result<(), Missing>;

    /// Whether a warm sandbox (container rung, every exec run inside it)
    /// can be held on this machine, and if not, what is missing.
    fn available_warm(&self) -> Result<(), Missing>;

    /// Starts the plan's first command confined by the plan. Refuses (and
    /// starts nothing) when [`Enforcer::available`] refuses.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn confine(&self, plan: &Plan, stdio: SandboxStdio) -> Result<Running, ConfineError>;

    /// Builds a warm sandbox for `plan` (container rung; its `argv` is
    /// unused) with its init running as `init_ids`, in a cgroup called
    /// `name` below the owner's own; returns once it serves execs. Refuses
    /// (and starts nothing) when [`Enforcer::available_warm`] refuses.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn start_warm(
        &self,
        plan: &Plan,
        init_ids: InitIds,
        name: &str,
    ) -> Result<WarmSandbox, ConfineError>;
}

/// The enforcer for targets without one: refuses everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Refusing;

impl Refusing {
    fn missing() -> Missing {
        Missing::one(
            Mechanism::Platform,
            std::env::consts::OS,
            "cordon-linux enforces on Linux x86_64 only; choose a backend that runs here",
        )
    }

    /// Refuses `plan` (the non-Linux `confine`).
    pub fn refuse(&self, _plan: &Plan) -> Result<(), Missing> {
        Err(Self::missing())
    }
}

impl Enforcer for Refusing {
    fn available(&self, _rung: Rung) -> Result<(), Missing> {
        Err(Self::missing())
    }

    fn available_warm(&self) -> Result<(), Missing> {
        Err(Self::missing())
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn confine(&self, _plan: &Plan, _stdio: SandboxStdio) -> Result<Running, ConfineError> {
        Err(Self::missing().into())
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn start_warm(
        &self,
        _plan: &Plan,
        _init_ids: InitIds,
        _name: &str,
    ) -> Result<WarmSandbox, ConfineError> {
        Err(Self::missing().into())
    }
}

/// The Linux enforcer: namespaces, a fresh root, Landlock, seccomp, cgroups.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[derive(Clone, Debug)]
pub struct LinuxEnforcer {
    init: InitProgram,
    mechanisms: Mechanisms,
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl LinuxEnforcer {
    /// Probes this machine now; `init` is the binary that runs
    /// [`crate::init_main`].
    pub fn new(init: InitProgram) -> Self {
        LinuxEnforcer {
            init,
            mechanisms: Mechanisms::detect(),
        }
    }

    /// With mechanisms given instead of probed (to simulate a machine).
    pub fn with_mechanisms(init: InitProgram, mechanisms: Mechanisms) -> Self {
        LinuxEnforcer { init, mechanisms }
    }

    pub fn mechanisms(&self) -> &Mechanisms {
        &self.mechanisms
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Enforcer for LinuxEnforcer {
    fn available(&self, rung: Rung) -> Result<(), Missing> {
        self.mechanisms.missing_for(rung)
    }

    /// What the container rung needs, and Landlock ABI
    /// [`crate::WARM_LANDLOCK_ABI`] (scoping keeps concurrent execs apart).
    fn available_warm(&self) -> Result<(), Missing> {
        self.available(Rung::Container)?;
        let abi = self.mechanisms.landlock_abi;
        if abi < crate::WARM_LANDLOCK_ABI {
            return Err(Missing::one(
                Mechanism::LandlockScoping,
                format!("landlock ABI {abi}"),
                "use Linux 6.12 or later (Landlock ABI 6): warm container sandboxes keep concurrent execs apart with signal and abstract-socket scoping",
            ));
        }
        Ok(())
    }

    fn confine(&self, plan: &Plan, stdio: SandboxStdio) -> Result<Running, ConfineError> {
        self.available(plan.rung())?;
        Ok(crate::linux::launch::launch(plan, &self.init, stdio)?)
    }

    fn start_warm(
        &self,
        plan: &Plan,
        init_ids: InitIds,
        name: &str,
    ) -> Result<WarmSandbox, ConfineError> {
        self.available_warm()?;
        Ok(WarmSandbox::start(plan, &self.init, init_ids, name)?)
    }
}

/// The enforcer for this target.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn platform_enforcer(init: InitProgram) -> LinuxEnforcer {
    LinuxEnforcer::new(init)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusing_refuses_warm_sandboxes_too() {
        let e: &dyn Enforcer = &Refusing;
        assert!(e.available_warm().is_err());
        assert!(e.available(Rung::Container).is_err());
    }
}
