//! What this machine can hold, found by probing (never by kernel version).

use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI,
};

use super::cgroup::{self, CgroupRoot};
use crate::missing::{Absent, Mechanism, Missing};
use crate::plan::Rung;

/// The mechanisms found on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mechanisms {
    /// The launcher runs as host root (it maps ids, makes cgroups, and the
    /// process rung switches to the workload's uid).
    pub root: bool,
    /// Namespaces present under `/proc/self/ns` (user, mnt, pid, net, ipc, uts, cgroup).
    pub namespaces: Vec<(Mechanism, bool)>,
    /// Highest Landlock ABI this crate can use, 0 when Landlock is unavailable.
    pub landlock_abi: u8,
    pub seccomp: bool,
    /// `Err` lists the cgroup controllers that are missing.
    pub cgroups: Result<(), Missing>,
    /// `Err` when this target has no enforcement (not Linux x86_64).
    pub platform: Result<(), String>,
}

fn landlock_abi_works(abi: ABI, net: bool, scope: bool) -> bool {
    let attempt = || -> Result<(), landlock::RulesetError> {
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))?;
        if net {
            rs = rs.handle_access(AccessNet::from_all(abi))?;
        }
        if scope {
            rs = rs.scope(Scope::from_all(abi))?;
        }
        // Creating a ruleset restricts nothing; it only asks the kernel.
        rs.create()?;
        Ok(())
    };
    attempt().is_ok()
}

/// Detects the Landlock ABI by asking the kernel to create rulesets.
pub(crate) fn landlock_abi() -> u8 {
    let levels = [
        (ABI::V6, 6, true, true),
        (ABI::V5, 5, true, false),
        (ABI::V4, 4, true, false),
        (ABI::V3, 3, false, false),
        (ABI::V2, 2, false, false),
        (ABI::V1, 1, false, false),
    ];
    for (abi, n, net, scope) in levels {
        if landlock_abi_works(abi, net, scope) {
            return n;
        }
    }
    0
}

impl Mechanisms {
    /// Probes this machine.
    pub fn detect() -> Self {
        let ns = |m, name: &str| (m, Path::new("/proc/self/ns").join(name).exists());
        let max_userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let mut namespaces = vec![
            ns(Mechanism::UserNamespace, "user"),
            ns(Mechanism::MountNamespace, "mnt"),
            ns(Mechanism::PidNamespace, "pid"),
            ns(Mechanism::NetNamespace, "net"),
            ns(Mechanism::IpcNamespace, "ipc"),
            ns(Mechanism::UtsNamespace, "uts"),
            ns(Mechanism::CgroupNamespace, "cgroup"),
        ];
        if max_userns == 0 {
            namespaces[0].1 = false;
        }
        let seccomp = std::fs::read_to_string("/proc/self/status")
            .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
            .unwrap_or(false);
        let cgroups = CgroupRoot::host()
            .map_err(|e| {
                Missing::one(
                    Mechanism::CgroupMemory,
                    format!("/proc/self/cgroup unreadable: {e}"),
                    "mount /proc",
                )
            })
            .and_then(|root| cgroup::detect(&root).map(|_| ()));
        let platform = if std::env::consts::ARCH == "x86_64" {
            Ok(())
        } else {
            Err(format!("architecture {}", std::env::consts::ARCH))
        };
        Mechanisms {
            root: nix::unistd::geteuid().is_root(),
            namespaces,
            landlock_abi: landlock_abi(),
            seccomp,
            cgroups,
            platform,
        }
    }

    /// Everything `rung` needs that is absent.
    pub fn missing_for(&self, rung: Rung) -> Result<(), Missing> {
        let mut absent = Vec::new();
        let mut add = |mechanism, found: String, help: &str| {
            absent.push(Absent {
                mechanism,
                found,
                help: help.to_string(),
            })
        };
        if let Err(found) = &self.platform {
            add(
                Mechanism::Platform,
                found.clone(),
                "cordon-linux's seccomp filter is written for x86_64; use a stronger backend",
            );
        }
        if !self.root {
            add(
                Mechanism::Privilege,
                "not running as root".into(),
                "run the launcher as root: it maps ids to an unprivileged uid and creates cgroups",
            );
        }
        if rung == Rung::Container {
            for (m, present) in &self.namespaces {
                if !present {
                    add(
                        *m,
                        "absent from /proc/self/ns (or user.max_user_namespaces is 0)".into(),
                        "use a kernel with this namespace enabled",
                    );
                }
            }
        }
        let needed = match rung {
            Rung::Container => 4,
            Rung::Process => 6,
        };
        if self.landlock_abi < needed {
            let (m, help) = match (self.landlock_abi, rung) {
                (0, _) => (
                    Mechanism::Landlock,
                    "boot a kernel with CONFIG_SECURITY_LANDLOCK and `landlock` in lsm=",
                ),
                (1..=3, _) => (
                    Mechanism::LandlockNetwork,
                    "use Linux 6.7 or later (Landlock ABI 4) so TCP bind/connect can be denied",
                ),
                _ => (
                    Mechanism::LandlockScoping,
                    "use Linux 6.12 or later (Landlock ABI 6): the process rung needs signal and abstract-socket scoping",
                ),
            };
            add(m, format!("landlock ABI {}", self.landlock_abi), help);
        }
        if !self.seccomp {
            add(
                Mechanism::Seccomp,
                "no Seccomp line in /proc/self/status".into(),
                "use a kernel with CONFIG_SECCOMP_FILTER",
            );
        }
        if let Err(m) = &self.cgroups {
            absent.extend(m.absent.iter().cloned());
        }
        if absent.is_empty() {
            Ok(())
        } else {
            Err(Missing { absent })
        }
    }
}
