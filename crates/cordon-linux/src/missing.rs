//! What an enforcer cannot hold on this machine, and what to do about it.

use serde::{Deserialize, Serialize};

/// A kernel mechanism the enforcer relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// The platform itself (cordon-linux enforces only on Linux/x86_64).
    Platform,
    /// Privileges the launcher needs (root on the host, to map ids and make cgroups).
    Privilege,
    UserNamespace,
    MountNamespace,
    PidNamespace,
    NetNamespace,
    IpcNamespace,
    UtsNamespace,
    CgroupNamespace,
    Landlock,
    LandlockNetwork,
    LandlockScoping,
    Seccomp,
    CgroupMemory,
    CgroupPids,
    CgroupCpuAccounting,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Mechanism::Platform => "platform",
            Mechanism::Privilege => "privilege",
            Mechanism::UserNamespace => "user namespace",
            Mechanism::MountNamespace => "mount namespace",
            Mechanism::PidNamespace => "pid namespace",
            Mechanism::NetNamespace => "network namespace",
            Mechanism::IpcNamespace => "ipc namespace",
            Mechanism::UtsNamespace => "uts namespace",
            Mechanism::CgroupNamespace => "cgroup namespace",
            Mechanism::Landlock => "landlock filesystem rules",
            Mechanism::LandlockNetwork => "landlock tcp rules (ABI 4)",
            Mechanism::LandlockScoping => "landlock signal and abstract-socket scoping (ABI 6)",
            Mechanism::Seccomp => "seccomp filters",
            Mechanism::CgroupMemory => "cgroup memory controller",
            Mechanism::CgroupPids => "cgroup pids controller",
            Mechanism::CgroupCpuAccounting => "cgroup cpu accounting",
        };
        f.write_str(s)
    }
}

/// One absent mechanism: what was found and how to get it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Absent {
    pub mechanism: Mechanism,
    /// What the probe saw, e.g. "landlock ABI 3".
    pub found: String,
    /// What the operator can do, e.g. "boot with lsm=landlock,...".
    pub help: String,
}

/// Every mechanism a rung needs that this machine lacks. Never empty when
/// returned as an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct Missing {
    pub absent: Vec<Absent>,
}

impl Missing {
    pub fn one(mechanism: Mechanism, found: impl Into<String>, help: impl Into<String>) -> Self {
        Missing {
            absent: vec![Absent {
                mechanism,
                found: found.into(),
                help: help.into(),
            }],
        }
    }

    /// Does this list name `mechanism`?
    pub fn names(&self, mechanism: Mechanism) -> bool {
        self.absent.iter().any(|a| a.mechanism == mechanism)
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot confine here; missing:")?;
        for a in &self.absent {
            write!(
                f,
                "\n  - {}: found {}\n    help: {}",
                a.mechanism, a.found, a.help
            )?;
        }
        Ok(())
    }
}
