//! The backends cordon knows by name, what each claims, and whether this
//! machine can run it — what `cordon doctor` shows.
//!
//! The CLI's and server's default order is strongest rung first, so with
//! nothing configured a workload gets the strongest backend this machine can
//! really provide above the floor. They hand the router only the backends
//! the floor admits ([`BuiltinBackend::admitted_by`]); `cordon doctor` shows
//! the rest with the reason.
//!
//! `process` and `container` are built (`cordon-backend-local`); the binary
//! that links them probes them with [`DoctorReport::with_built`]. The others
//! are not built in this version: their probes say so, and report what the
//! machine has that the backend will need.

use std::path::Path;

use crate::capability::{Capability, CapabilitySet};
use crate::egress::Egress;
use crate::isolation::Isolation;

/// A backend cordon ships (or will), as it will declare itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinBackend {
    pub name: &'static str,
    pub isolation: Isolation,
    pub egress: Egress,
    pub capabilities: CapabilitySet,
    pub summary: &'static str,
}

impl BuiltinBackend {
    /// Whether a floor admits this backend.
    pub fn admitted_by(&self, floor: Isolation) -> bool {
        self.isolation >= floor
    }
}

/// Every built-in backend, strongest rung first (the default order).
pub fn builtin_backends() -> Vec<BuiltinBackend> {
    use Capability::*;
    let full: CapabilitySet = [Exec, RunCode, FilesIn, FilesOut, FilesList, Network]
        .into_iter()
        .collect();
    // What cordon-backend-local serves (no `files_list` yet).
    let local: CapabilitySet = [Exec, RunCode, FilesIn, FilesOut].into_iter().collect();
    vec![
        BuiltinBackend {
            name: "microvm",
            isolation: Isolation::Microvm,
            egress: Egress::Allowlist,
            capabilities: full.clone(),
            summary: "a QEMU microvm guest under KVM, egress through cordon's proxy",
        },
        BuiltinBackend {
            name: "gvisor",
            isolation: Isolation::HardenedContainer,
            egress: Egress::Allowlist,
            capabilities: full.clone(),
            summary: "a gVisor (`runsc`) sandbox, egress through cordon's proxy",
        },
        BuiltinBackend {
            name: "container",
            isolation: Isolation::Container,
            // Closed until the egress proxy is wired (cordon-backend-local).
            egress: Egress::Closed,
            capabilities: local.clone(),
            summary: "cordon's own Linux namespaces, cgroups, Landlock and seccomp",
        },
        BuiltinBackend {
            name: "docker",
            isolation: Isolation::Container,
            egress: Egress::Allowlist,
            capabilities: full,
            summary: "a Docker container on an internal network, egress through cordon's proxy",
        },
        BuiltinBackend {
            name: "process",
            isolation: Isolation::Process,
            egress: Egress::Closed,
            capabilities: local,
            summary:
                "a separate process as a dedicated uid, Landlock, seccomp, cgroups, no network",
        },
    ]
}

/// What a probe of this machine found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub runnable: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// What the machine has (or lacks) that the backend needs.
    pub found: Vec<String>,
}

/// What a probe may look at. [`ThisMachine`] is the real one.
pub trait Machine {
    /// Whether an executable of this name is on `PATH`.
    fn has_program(&self, name: &str) -> bool;
    fn path_exists(&self, path: &str) -> bool;
    fn read(&self, path: &str) -> Option<String>;
}

/// The machine cordon runs on. Reads only: no process is started.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThisMachine;

impl Machine for ThisMachine {
    fn has_program(&self, name: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
    }

    fn path_exists(&self, path: &str) -> bool {
        Path::new(path).exists()
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

fn have(what: &str, yes: bool) -> String {
    format!("{what}: {}", if yes { "found" } else { "not found" })
}

fn user_namespaces(m: &dyn Machine) -> bool {
    let max = m
        .read("/proc/sys/user/max_user_namespaces")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let clone_allowed = m
        .read("/proc/sys/kernel/unprivileged_userns_clone")
        .is_none_or(|s| s.trim() != "0");
    max > 0 && clone_allowed
}

/// Probes whether this machine can run `backend`.
pub fn probe(backend: &BuiltinBackend, m: &dyn Machine) -> Probe {
    let found = match backend.name {
        "microvm" => vec![
            have("`qemu-system-x86_64`", m.has_program("qemu-system-x86_64")),
            have("`/dev/kvm`", m.path_exists("/dev/kvm")),
        ],
        "gvisor" => vec![have("`runsc`", m.has_program("runsc"))],
        "docker" => vec![
            have("`dockerd`", m.has_program("dockerd")),
            have(
                "`/var/run/docker.sock`",
                m.path_exists("/var/run/docker.sock"),
            ),
        ],
        "container" => vec![format!(
            "user namespaces: {}",
            if user_namespaces(m) {
                "available"
            } else {
                "unavailable"
            }
        )],
        _ => Vec::new(),
    };
    Probe {
        runnable: false,
        reason: Some("not built in this version".to_string()),
        found,
    }
}

/// One line of `cordon doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRow {
    pub backend: BuiltinBackend,
    pub probe: Probe,
    /// Whether the floor admits the backend's rung.
    pub admitted: bool,
}

impl DoctorRow {
    /// The floor admits it and this machine can run it.
    pub fn can_serve(&self) -> bool {
        self.admitted && self.probe.runnable
    }
}

/// Everything `cordon doctor` reports under one floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorReport {
    pub floor: Isolation,
    pub rows: Vec<DoctorRow>,
}

impl DoctorReport {
    /// Probes every built-in backend on `m` under `floor`.
    pub fn new(floor: Isolation, m: &dyn Machine) -> DoctorReport {
        DoctorReport::with_built(floor, m, &|_| None)
    }

    /// As [`DoctorReport::new`], with the real probe of each backend that
    /// is built into this binary (`built` answers `None` for the others,
    /// which this crate cannot probe: it does not depend on them).
    pub fn with_built(
        floor: Isolation,
        m: &dyn Machine,
        built: &dyn Fn(&BuiltinBackend) -> Option<Probe>,
    ) -> DoctorReport {
        DoctorReport::from_probes(
            floor,
            builtin_backends()
                .into_iter()
                .map(|b| {
                    let p = built(&b).unwrap_or_else(|| probe(&b, m));
                    (b, p)
                })
                .collect(),
        )
    }

    pub fn from_probes(floor: Isolation, probes: Vec<(BuiltinBackend, Probe)>) -> DoctorReport {
        DoctorReport {
            floor,
            rows: probes
                .into_iter()
                .map(|(backend, probe)| DoctorRow {
                    admitted: backend.admitted_by(floor),
                    backend,
                    probe,
                })
                .collect(),
        }
    }

    /// Whether any backend can serve under the floor.
    pub fn can_serve(&self) -> bool {
        self.rows.iter().any(DoctorRow::can_serve)
    }

    /// The strongest rung below the floor at which this machine can run a
    /// backend: the floor a host would have to opt down to.
    pub fn opt_down_to(&self) -> Option<Isolation> {
        self.rows
            .iter()
            .filter(|r| !r.admitted && r.probe.runnable)
            .map(|r| r.backend.isolation)
            .max()
    }
}
