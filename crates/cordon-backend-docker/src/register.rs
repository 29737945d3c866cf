//! The `docker` backend's registration: how a host finds, probes, builds
//! and cleans up after it.

use std::sync::Arc;

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup, Egress, Isolation, WorkDirView};

use cordon_backend_kit::remove_sandbox_dir;

use crate::residue::{reclaim_residue, vet_residue};
use crate::{DockerConfig, WORKLOAD_ID};

/// What the backend claims (its built backend declares the same).
pub fn info() -> BackendInfo {
    BackendInfo {
        name: crate::NAME,
        isolation: Isolation::Container,
        egress: Egress::Allowlist,
        capabilities: crate::backend::capabilities(),
        summary: "a Docker Engine container per exec, through the Engine API, egress through cordon's proxy",
    }
}

fn probe(_: &BackendSetup) -> Probe {
    match crate::probe::probe() {
        Ok(p) => Probe {
            runnable: true,
            reason: None,
            found: p.found.clone(),
        },
        // The reason is not said twice when it is also what was found
        // (one engine, and that one does not answer).
        Err((reason, found)) => Probe {
            runnable: false,
            reason: Some(reason.clone()),
            found: found.iter().filter(|f| *f != reason).cloned().collect(),
        },
    }
}

fn build(setup: &BackendSetup, policy: Arc<Policy>) -> Result<Arc<dyn Backend>, String> {
    let probed = crate::probe::probe().as_ref().map_err(|(reason, found)| {
        let found: Vec<&str> = found
            .iter()
            .filter(|f| *f != reason)
            .map(String::as_str)
            .collect();
        match found.is_empty() {
            true => reason.clone(),
            false => format!("{reason} ({})", found.join("; ")),
        }
    })?;
    Ok(Arc::new(crate::backend::backend(DockerConfig {
        policy,
        env: Deployment {
            name: setup.deployment.clone(),
        },
        scratch: setup.scratch.clone(),
        work_dir: setup.work_dir.clone(),
        endpoints: probed.endpoints.clone(),
        egress: setup.egress.clone(),
    })))
}

fn vet(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    vet_residue(residue, keeper)
}

fn reclaim(residue: &serde_json::Value) -> Vec<String> {
    reclaim_residue(residue)
}

/// Containers and sandbox directories whose making process is gone (an
/// owner killed before it could dispose of them or record them).
fn sweep() -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    // Every engine configured; only one that answers is swept, one that
    // does not is reported, its containers never silently forgotten.
    let eps = match crate::engine::endpoints() {
        Ok(eps) => eps,
        Err(e) => {
            failures.push(format!("no docker engine was swept: {e}"));
            Vec::new()
        }
    };
    for (ep, reached) in crate::engine::reach(&eps) {
        let engine = match reached {
            Ok(engine) => engine,
            // No engine configured and no socket at the default path:
            // nothing of this backend's can be there. (A socket there that
            // does not answer is reported below.)
            Err(_)
                if std::env::var_os(crate::engine::HOST_VAR).is_none()
                    && std::fs::symlink_metadata(&ep.socket).is_err() =>
            {
                continue
            }
            Err(e) => {
                failures.push(format!(
                    "the docker engine at `{ep}` was not swept (it did not answer; its containers, if any, are left until it does): {e}"
                ));
                continue;
            }
        };
        match engine.containers(&[(crate::LABEL_OWNER, crate::OWNER)]) {
            Ok(cs) => {
                for (id, labels) in cs {
                    let maker = labels
                        .get(crate::LABEL_MAKER)
                        .and_then(|p| p.parse::<u32>().ok());
                    if maker.is_some_and(crate::gone) {
                        match engine.remove(&id) {
                            Ok(()) => done.push(format!(
                                "docker container `{}` on `{ep}`",
                                labels
                                    .get(crate::LABEL_SANDBOX)
                                    .map_or(id.as_str(), String::as_str)
                            )),
                            Err(e) => failures.push(e),
                        }
                    }
                }
            }
            Err(e) => failures.push(format!("the docker engine at `{ep}` was not swept: {e}")),
        }
    }
    let (dirs, f) = crate::DIRS.sweep(|d| remove_sandbox_dir(d).err().into_iter().collect());
    done.extend(dirs);
    failures.extend(f);
    (done, failures)
}

/// The `docker` backend, as a host registers it. Opt-in: used when named
/// (`--backend docker`). It sits on the `container` rung beside the native
/// one, which serves more (secrets, terminals, egress) without a daemon;
/// an operator who runs Docker chooses it.
pub fn registration() -> BackendRegistration {
    BackendRegistration {
        info: info(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn names_are_read_as_the_backend_writes_them() {
        assert_eq!(crate::maker_of("cordon-docker-12-3-456"), Some(12));
        assert_eq!(crate::maker_of("cordon-docker-12-3-456-e7"), Some(12));
        for bad in [
            "cordon-docker-x-3",
            "cordon-gvisor-1-2-3",
            "cordon-docker-12",
        ] {
            assert_eq!(crate::maker_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_residue_names_only_what_its_keeper_made() {
        let keeper = 4_000_000; // above any pid_max: never a live process
        let scratch = std::env::temp_dir().canonicalize().unwrap();
        let name = format!("cordon-docker-{keeper}-0-1");
        let dir = scratch.join(&name);
        let engine = "unix:///run/docker.sock";
        let ok = serde_json::json!({"dir": dir, "sandbox": name, "engine": engine});
        assert_eq!(vet(&ok, keeper), Ok(()));
        assert!(vet(&ok, keeper + 1).unwrap_err().contains("keeper"));
        let other =
            serde_json::json!({"dir": dir, "sandbox": "cordon-docker-1-0-1", "engine": engine});
        assert!(vet(&other, keeper).unwrap_err().contains("sandbox"));
        let tcp = serde_json::json!({"dir": dir, "sandbox": name, "engine": "tcp://h:1"});
        assert!(vet(&tcp, keeper).is_err());
        let elsewhere = serde_json::json!({
            "dir": format!("/var/{name}"),
            "sandbox": name,
            "engine": engine,
        });
        assert!(vet(&elsewhere, keeper).unwrap_err().contains("TMPDIR"));
        assert!(vet(&serde_json::json!({"dirs": []}), keeper).is_err());
    }

    #[test]
    fn endpoints_are_unix_sockets_or_refused() {
        assert_eq!(
            crate::engine::Endpoint::parse("unix:///run/d.sock")
                .unwrap()
                .socket,
            PathBuf::from("/run/d.sock")
        );
        let e = crate::engine::Endpoint::parse("tcp://1.2.3.4:2375").unwrap_err();
        assert!(e.contains("CORDON_DOCKER_HOST"), "{e}");
        assert!(crate::engine::Endpoint::parse("unix://relative.sock").is_err());
        // A remote engine is refused with why: the binds need this host.
        assert!(
            e.contains("same host") || e.contains("must be on that host"),
            "{e}"
        );
    }

    #[test]
    fn several_endpoints_are_a_list_each_named_once() {
        use crate::engine::parse_endpoints;
        let eps = parse_endpoints("unix:///a.sock, unix:///b.sock").unwrap();
        let socks: Vec<_> = eps.iter().map(|e| e.socket.clone()).collect();
        assert_eq!(socks, [PathBuf::from("/a.sock"), PathBuf::from("/b.sock")]);
        let e = parse_endpoints("unix:///a.sock,unix:///a.sock").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = parse_endpoints("unix:///a.sock,tcp://h:2376").unwrap_err();
        assert!(e.contains("remote engine"), "{e}");
        let e = parse_endpoints(" , ").unwrap_err();
        assert!(e.contains("names no engine"), "{e}");
    }
}
