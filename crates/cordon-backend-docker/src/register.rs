//! The `docker` backend's registration: how a host finds, probes, builds
//! and cleans up after it.

use std::sync::Arc;

use cordon_backend_kit::register as kit;
use cordon_backend_kit::EngineSetup;
use cordon_policy::Policy;
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup};

use crate::engine::DockerSettings;
use crate::residue::{reclaim_residue, vet_residue};
use crate::DockerConfig;

/// What the backend claims (its built backend declares the same).
pub fn info() -> BackendInfo {
    kit::engine_info(crate::NAME, crate::names::RUNG, crate::SUMMARY)
}

fn probe(setup: &BackendSetup) -> Probe {
    let settings = match DockerSettings::of(setup) {
        Ok(s) => s,
        Err(e) => return kit::not_runnable(&e, &[]),
    };
    match crate::probe::probe(&settings) {
        Ok(p) => kit::runnable(p.found.clone()),
        Err((reason, found)) => kit::not_runnable(reason, found),
    }
}

fn build(setup: &BackendSetup, policy: Arc<Policy>) -> Result<Arc<dyn Backend>, String> {
    let probed = crate::probe::probe(&DockerSettings::of(setup)?)
        .as_ref()
        .map_err(|(reason, found)| kit::why_not_runnable(reason, found))?;
    Ok(Arc::new(crate::backend::backend(DockerConfig {
        setup: EngineSetup::of(setup, policy),
        endpoints: probed.endpoints.clone(),
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
fn sweep(setup: &BackendSetup) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    // Every engine configured; only one that answers is swept, one that
    // does not is reported, its containers never silently forgotten.
    let settings = DockerSettings::of(setup);
    let eps = match settings
        .as_ref()
        .map_err(Clone::clone)
        .and_then(DockerSettings::endpoints)
    {
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
                if settings.as_ref().is_ok_and(|s| s.host.is_none())
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
                    if maker.is_some_and(cordon_backend_kit::gone) {
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
    crate::DIRS.sweep_dirs(done, failures)
}

/// The `docker` backend, as a host registers it. Opt-in: used when named
/// (`--backend docker`). It sits on the `container` rung beside the native
/// one, which serves more (secrets, terminals, egress) without a daemon;
/// an operator who runs Docker chooses it.
pub fn registration() -> BackendRegistration {
    kit::engine_registration(info(), probe, build, vet, reclaim, sweep)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

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
