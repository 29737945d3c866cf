//! The local rungs' registrations: how a host finds, probes, builds and
//! cleans up after the `container` and `process` backends. What they claim
//! comes from their [`RungProfile`], as [`crate::LocalBackend`]'s own
//! declarations do; the host assembly refuses a built backend whose
//! declarations differ from its registration's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::catalogue::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup, Capability, CapabilitySet};
use serde::{Deserialize, Serialize};

use crate::{LocalBackend, LocalConfig, RungProfile, WorkDir, WORK_DIR_ID};

/// What a local rung serves: exec, code and files at both; the network
/// (through the egress proxy and the spec's allowlist) where the rung's
/// egress is `allowlist`.
pub fn local_capabilities(p: &RungProfile) -> CapabilitySet {
    let mut caps = vec![
        Capability::Exec,
        Capability::RunCode,
        Capability::FilesIn,
        Capability::FilesOut,
    ];
    if p.egress == cordon_sandbox::Egress::Allowlist {
        caps.push(Capability::Network);
    }
    caps.into_iter().collect()
}

fn info(rung: Rung) -> BackendInfo {
    let p = RungProfile::of(rung);
    BackendInfo {
        name: p.name,
        isolation: p.isolation,
        egress: p.egress,
        capabilities: local_capabilities(p),
        summary: p.summary,
    }
}

fn init_of(setup: &BackendSetup) -> Option<InitProgram> {
    setup.init.as_ref().map(|c| {
        c.args
            .iter()
            .fold(InitProgram::new(&c.path), |i, a| i.arg(a))
    })
}

fn probe_rung(rung: Rung, setup: &BackendSetup) -> Probe {
    match init_of(setup) {
        Some(init) => crate::probe(rung, init),
        None => Probe {
            runnable: false,
            reason: Some("no sandbox init program was given".into()),
            found: vec!["the host did not say how to run its binary as a sandbox init".into()],
        },
    }
}

fn build_rung(
    rung: Rung,
    setup: &BackendSetup,
    policy: Arc<Policy>,
) -> Result<Arc<dyn Backend>, String> {
    let init = init_of(setup).ok_or_else(|| {
        format!(
            "backend `{}` needs the sandbox init program (this binary with its init argument)",
            RungProfile::of(rung).name
        )
    })?;
    Ok(Arc::new(LocalBackend::new(LocalConfig {
        rung,
        policy,
        env: Deployment {
            name: setup.deployment.clone(),
        },
        work_dir: match &setup.work_dir {
            Some(d) => WorkDir::Given(d.clone()),
            None => WorkDir::Fresh {
                parent: setup.scratch.clone(),
            },
        },
        init,
        egress: setup.egress.clone(),
    })))
}

/// What a local sandbox leaves if its holder dies: its cgroups and the
/// directories cordon made for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub cgroups: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
}

fn reclaim(residue: &serde_json::Value) -> Vec<String> {
    let r: Residue = match serde_json::from_value(residue.clone()) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "the recorded residue is not a local one ({e}); left alone"
            )]
        }
    };
    let mut failures = Vec::new();
    if let Err(e) = cordon_linux::reclaim_cgroups(&r.cgroups) {
        failures.push(format!("cgroups: {e}"));
    }
    for d in &r.dirs {
        // A mount (a volume, an operator's directory mapped) is unmounted
        // first and only its then-empty mount point removed: nothing is
        // ever removed through a mount of the operator's files.
        match crate::workdir::remove_mount(d) {
            Ok(()) => {}
            Err(_) if !cordon_linux::volume::is_mount_point(d).unwrap_or(true) => {
                // A plain directory cordon made (a record from before work
                // dirs were volumes, a temporary directory).
                if let Err(e) = std::fs::remove_dir_all(d) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        failures.push(format!("{}: {e}", d.display()));
                    }
                }
            }
            Err(e) => failures.push(e),
        }
    }
    failures
}

/// The cgroups of sandboxes whose owner was killed before it could record
/// or dispose of them (found by name below this process's cgroup), and the
/// uid leases such owners left.
fn sweep() -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    for (name, dirs) in cordon_linux::orphaned_sandbox_cgroups() {
        match cordon_linux::reclaim_cgroups(&dirs) {
            Ok(()) => done.push(name),
            Err(e) => failures.push(format!("cgroup `{name}`: {e}")),
        }
    }
    let _ = crate::sweep_id_leases();
    for m in orphaned_mounts() {
        match crate::workdir::remove_mount(&m) {
            Ok(()) => done.push(m.display().to_string()),
            Err(e) => failures.push(e),
        }
    }
    (done, failures)
}

/// Work dir mounts (volumes, operators' directories mapped) whose making
/// process is gone: named `cordon-volume-PID-…` / `cordon-mapped-PID-…`
/// by the process that made them. A live process with that pid keeps them.
fn orphaned_mounts() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in info.lines() {
        let Some(point) = line.split(' ').nth(4) else {
            continue;
        };
        let path = PathBuf::from(point);
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let pid = ["cordon-volume-", "cordon-mapped-"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                out.push(path);
            }
        }
    }
    out
}

fn registration(rung: Rung) -> BackendRegistration {
    BackendRegistration {
        info: info(rung),
        probe: match rung {
            Rung::Container => |s| probe_rung(Rung::Container, s),
            Rung::Process => |s| probe_rung(Rung::Process, s),
        },
        build: Some(match rung {
            Rung::Container => |s, p| build_rung(Rung::Container, s, p),
            Rung::Process => |s, p| build_rung(Rung::Process, s, p),
        }),
        reclaim,
        sweep,
        work_dir_view: RungProfile::of(rung).work_dir_view(),
        work_dir_owner: Some(WORK_DIR_ID),
        workload_uid: Some(WORK_DIR_ID),
    }
}

/// The `container` and `process` backends, strongest first.
pub fn registrations() -> Vec<BackendRegistration> {
    vec![registration(Rung::Container), registration(Rung::Process)]
}
