//! What every engine backend's registration and set-up share: the set-up
//! read from the host's, the probe's answer, the registration of an OCI
//! engine on this host, a recorded residue read back, and the route out a
//! sandbox's egress proxy serves.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::registry::BuildFn;
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{
    AcquireRequest, BackendRegistration, BackendSetup, Egress, EgressSetup, Isolation, WorkDirView,
};

use crate::WORKLOAD_ID;

/// What every engine backend is set up with, from the host's
/// [`BackendSetup`] and the loaded policy.
#[derive(Clone)]
pub struct EngineSetup {
    pub policy: Arc<Policy>,
    /// The deployment the router decides in.
    pub env: Deployment,
    /// Where each sandbox's directory is made.
    pub scratch: PathBuf,
    /// The operator's work dir (`--work-dir`); `None`: a fresh one per
    /// sandbox.
    pub work_dir: Option<PathBuf>,
    /// How the egress proxy resolves names and where it audits.
    pub egress: EgressSetup,
}

impl EngineSetup {
    pub fn of(setup: &BackendSetup, policy: Arc<Policy>) -> EngineSetup {
        EngineSetup {
            policy,
            env: Deployment {
                name: setup.deployment.clone(),
            },
            scratch: setup.scratch.clone(),
            work_dir: setup.work_dir.clone(),
            egress: setup.egress.clone(),
        }
    }
}

/// Why a backend cannot run on this machine, and what its probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrunnable {
    pub reason: String,
    pub found: Vec<String>,
}

impl Unrunnable {
    /// The probe's answer.
    pub fn probe(&self) -> Probe {
        not_runnable(&self.reason, &self.found)
    }
}

/// What a probe found the backend runnable with, for a build: else why
/// not, as one line.
pub fn probed<T: Clone>(probe: &Result<T, Unrunnable>) -> Result<T, String> {
    probe
        .as_ref()
        .cloned()
        .map_err(|u| why_not_runnable(&u.reason, &u.found))
}

/// A probe that found the backend runnable, and what it found.
pub fn runnable(found: Vec<String>) -> Probe {
    Probe {
        runnable: true,
        reason: None,
        found,
    }
}

/// A probe that found the backend not runnable: why, and what else it
/// found (the reason is not said twice).
pub fn not_runnable(reason: &str, found: &[String]) -> Probe {
    Probe {
        runnable: false,
        reason: Some(reason.to_string()),
        found: found.iter().filter(|f| *f != reason).cloned().collect(),
    }
}

/// Why a backend cannot be built, as one line: the probe's reason, then
/// what else it found.
pub fn why_not_runnable(reason: &str, found: &[String]) -> String {
    let found: Vec<&str> = found
        .iter()
        .filter(|f| *f != reason)
        .map(String::as_str)
        .collect();
    match found.is_empty() {
        true => reason.to_string(),
        false => format!("{reason} ({})", found.join("; ")),
    }
}

/// What an OCI engine on this host (docker, gvisor) claims: its name and
/// rung, egress through cordon's proxy, and what every such engine serves
/// ([`crate::engine_capabilities`], as its built backend declares).
pub fn engine_info(name: &'static str, isolation: Isolation, summary: &'static str) -> BackendInfo {
    BackendInfo {
        name,
        isolation,
        egress: Egress::Allowlist,
        capabilities: crate::engine_capabilities(),
        summary,
    }
}

/// The registration of an OCI engine on this host (docker, gvisor): the
/// spec's work dir path, the operator's work dir owned by (and every
/// workload run as) [`WORKLOAD_ID`], opt-in (used when named, or as the
/// floor asks).
pub fn engine_registration(
    info: BackendInfo,
    probe: fn(&BackendSetup) -> Probe,
    build: BuildFn,
    vet: fn(&serde_json::Value, u32) -> Result<(), String>,
    reclaim: fn(&serde_json::Value) -> Vec<String>,
    sweep: fn(&BackendSetup) -> (Vec<String>, Vec<String>),
) -> BackendRegistration {
    BackendRegistration {
        info,
        probe,
        build: Some(build),
        vet,
        reclaim,
        sweep,
        work_dir_view: WorkDirView::SpecPath,
        work_dir_owner: Some(WORKLOAD_ID),
        workload_uid: Some(WORKLOAD_ID),
        opt_in: true,
    }
}

/// A recorded residue read back as `backend`'s (`T`), or why not.
pub fn read_residue<T: serde::de::DeserializeOwned>(
    residue: &serde_json::Value,
    backend: &str,
) -> Result<T, String> {
    serde_json::from_value(residue.clone())
        .map_err(|e| format!("the recorded residue is not a {backend} one ({e})"))
}

/// Reclaims a recorded residue of `backend`'s with `reclaim` (which
/// returns what failed); one that is not `backend`'s is left alone, and
/// said.
pub fn reclaim_read<T: serde::de::DeserializeOwned>(
    residue: &serde_json::Value,
    backend: &str,
    reclaim: impl FnOnce(T) -> Vec<String>,
) -> Vec<String> {
    match read_residue(residue, backend) {
        Ok(r) => reclaim(r),
        Err(e) => vec![format!("{e}; left alone")],
    }
}

/// Serves `listener` as `req`'s sandbox's one route out: the proxy learns
/// the sandbox, the identity (the acquire request's, never the
/// workload's) and the spec's allowlist. The serving lasts as long as
/// what this returns is held; it carries the sandbox's CA certificate
/// when the policy has the proxy inspect some host.
pub fn serve_route(
    service: &dyn cordon_egress::EgressService,
    listener: std::net::TcpListener,
    req: &AcquireRequest,
) -> Result<cordon_egress::Served, String> {
    service.serve(
        listener,
        cordon_egress::Caller {
            sandbox: req.key.to_string(),
            identity: req.provenance.identity.clone(),
            allow: Some(req.provenance.spec.egress_allow().to_vec()),
            brokered: req
                .brokered
                .iter()
                .map(|b| cordon_egress::BrokeredSecret {
                    name: b.name.to_string(),
                    placeholder: b.placeholder.clone(),
                    value: b.value.expose().to_vec(),
                    to: b.to.clone(),
                })
                .collect(),
        },
    )
}

/// A route out made on the host: a network namespace of its own holding
/// only `lo` and the proxy's listener on `127.0.0.1:port`, served.
pub struct PrivateRoute {
    pub port: u16,
    pub ns: std::os::fd::OwnedFd,
    /// What serves it and changes its allowlist, kept for the sandbox's
    /// life.
    pub serving: crate::Serving,
    /// The sandbox's CA certificate (PEM), when the proxy inspects.
    pub ca_pem: Option<String>,
}

/// Makes `req`'s sandbox's route out in a namespace of its own.
pub fn private_route(
    service: &dyn cordon_egress::EgressService,
    req: &AcquireRequest,
) -> Result<PrivateRoute, String> {
    let port = cordon_linux::netns::random_port();
    let made = cordon_linux::netns::private_with_listener(port).map_err(|e| {
        format!("making the sandbox's network namespace with the egress proxy's listener: {e}")
    })?;
    let served = serve_route(service, made.listener, req)?;
    Ok(PrivateRoute {
        port,
        ns: made.ns,
        serving: crate::Serving::of(Some((served.handle, served.control))),
        ca_pem: served.ca_pem,
    })
}

/// For a backend's tests: whether its `vet` holds what the kit's
/// [`crate::SandboxDirs::vet`] holds. The residue `residue_of` makes for a
/// directory of `dirs`' in TMPDIR (and its name) passes for the keeper that made it and
/// no other; the same for a directory elsewhere is refused (saying
/// TMPDIR); a residue of another shape is refused. `Err`: the case that
/// was not held.
pub fn vet_holds(
    dirs: crate::SandboxDirs,
    vet: fn(&serde_json::Value, u32) -> Result<(), String>,
    residue_of: impl Fn(&std::path::Path, &str) -> serde_json::Value,
) -> Result<(), String> {
    let keeper = 4_000_000; // above any pid_max: never a live process
    let name = format!("{}{keeper}-0-1", dirs.prefix);
    let ok = residue_of(&crate::dirs::scratch().join(&name), &name);
    vet(&ok, keeper).map_err(|e| format!("its own keeper's residue was refused: {e}"))?;
    match vet(&ok, keeper + 1) {
        Err(e) if e.contains("keeper") => {}
        other => return Err(format!("another keeper's residue: {other:?}")),
    }
    match vet(
        &residue_of(&std::path::Path::new("/var").join(&name), &name),
        keeper,
    ) {
        Err(e) if e.contains("TMPDIR") => {}
        other => return Err(format!("a directory outside TMPDIR: {other:?}")),
    }
    match vet(&serde_json::json!({"dirs": []}), keeper) {
        Err(_) => Ok(()),
        Ok(()) => Err("a residue of another shape passed".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_probe_says_its_reason_once() {
        let found = ["no runsc".to_string(), "PATH: /bin".to_string()];
        let p = not_runnable("no runsc", &found);
        assert_eq!((p.runnable, p.found.len()), (false, 1));
        assert_eq!(
            why_not_runnable("no runsc", &found),
            "no runsc (PATH: /bin)"
        );
        assert_eq!(why_not_runnable("no runsc", &found[..1]), "no runsc");
    }

    #[test]
    fn a_residue_of_another_backend_is_left_alone() {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct R {
            #[allow(dead_code)]
            dir: PathBuf,
        }
        let other = serde_json::json!({"dir": "/tmp/x", "cgroups": []});
        let mut called = false;
        let f = reclaim_read(&other, "toy", |_: R| {
            called = true;
            Vec::new()
        });
        assert!(!called);
        assert!(
            f[0].contains("not a toy one") && f[0].ends_with("left alone"),
            "{f:?}"
        );
        assert!(read_residue::<R>(&serde_json::json!({"dir": "/tmp/x"}), "toy").is_ok());
    }
}
