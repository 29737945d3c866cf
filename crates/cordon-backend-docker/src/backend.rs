//! [`DockerBackend`]: the `docker` backend behind the sandbox protocol.

use std::sync::Arc;

use cordon_backend_kit::{all_done, refused, Engine, EngineBackend, Which};
use cordon_sandbox::{AcquireRequest, BackendError, Sandbox};

use crate::sandbox::DockerSandbox;
use crate::DockerConfig;

/// The `docker` engine: what differs from the other engines.
pub struct Docker {
    config: DockerConfig,
}

/// The `docker` backend: the kit's backend over [`Docker`].
pub type DockerBackend = EngineBackend<Docker>;

/// The `docker` backend set up by `config`.
pub fn backend(config: DockerConfig) -> DockerBackend {
    let setup = config.setup.clone();
    EngineBackend::set_up(Docker { config }, &setup)
}

impl Engine for Docker {
    type Sandbox = DockerSandbox;

    cordon_backend_kit::oci_engine_basics!(crate::NAME, crate::names::RUNG);

    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<DockerSandbox, BackendError> {
        let engine = crate::probe::place(&self.config.endpoints)
            .map_err(|reason| refused("acquire", reason))?;
        DockerSandbox::create(&self.config, &engine, req, egress)
    }

    /// Those another cordon process made (or one that restarted): found
    /// by their labels, on every engine. One that does not answer is never
    /// taken for empty: it is named in the error.
    fn dispose_found(
        &self,
        which: Which<'_>,
        held: &[Arc<DockerSandbox>],
    ) -> Result<usize, BackendError> {
        let (scope, thread_id) = (which.scope, which.thread);
        let held: Vec<&str> = held.iter().map(|s| s.id()).collect();
        let mut n = 0;
        let mut failures = Vec::new();
        let mut unanswered = Vec::new();
        for (ep, reached) in crate::engine::reach(&self.config.endpoints) {
            let listed = reached.and_then(|engine| {
                engine.containers(&[
                    (crate::LABEL_OWNER, crate::OWNER),
                    (crate::LABEL_ROLE, "anchor"),
                    (crate::LABEL_SCOPE, scope),
                    (crate::LABEL_THREAD, thread_id),
                ])
            });
            let others = match listed {
                Ok(others) => others,
                Err(e) => {
                    unanswered.push(format!("`{ep}` ({e})"));
                    continue;
                }
            };
            for (_, labels) in others {
                let (Some(id), Some(dir)) = (
                    labels.get(crate::LABEL_SANDBOX),
                    labels.get(crate::LABEL_DIR),
                ) else {
                    continue;
                };
                let agent_dir = labels
                    .get(crate::LABEL_AGENT_DIR)
                    .map_or("", String::as_str);
                if !which.matches(scope, thread_id, agent_dir) || held.contains(&id.as_str()) {
                    continue;
                }
                let residue =
                    serde_json::json!({"dir": dir, "sandbox": id, "engine": ep.to_string()});
                let keeper = crate::DIRS.maker_of(id).unwrap_or(0);
                match crate::residue::vet_residue(&residue, keeper) {
                    Ok(()) => {
                        let left = crate::residue::reclaim_residue(&residue);
                        if left.is_empty() {
                            n += 1;
                        }
                        failures.extend(left);
                    }
                    Err(e) => failures.push(format!("sandbox `{id}` left alone: {e}")),
                }
            }
        }
        if !unanswered.is_empty() {
            failures.push(format!(
                "{n} disposed; the engine{} {} did not answer, so {} sandboxes of scope `{scope}` thread `{thread_id}` (if any) are left: run `dispose_scope` again (or `cordon sandbox gc`) once it answers",
                if unanswered.len() == 1 { "" } else { "s" },
                unanswered.join(", "),
                if unanswered.len() == 1 { "its" } else { "their" },
            ));
        }
        all_done(n, "dispose_scope", failures)
    }
}
