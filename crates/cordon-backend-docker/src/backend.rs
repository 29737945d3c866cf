//! [`DockerBackend`]: the `docker` backend behind the sandbox protocol.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, Capability, CapabilitySet, Egress, Isolation,
    IsolationError, Sandbox, SandboxKey,
};

use crate::engine::Endpoint;
use crate::failed;
use crate::sandbox::DockerSandbox;

/// How a docker backend is set up.
#[derive(Clone)]
pub struct DockerConfig {
    pub policy: Arc<Policy>,
    /// The deployment the router decides in.
    pub env: Deployment,
    /// Where each sandbox's directory is made.
    pub scratch: PathBuf,
    /// The operator's work dir (`--work-dir`), owned by
    /// [`crate::WORKLOAD_ID`]; `None`: a fresh one per sandbox.
    pub work_dir: Option<PathBuf>,
    /// The engines, in the configured order: each acquire places its
    /// sandbox on one ([`crate::engine::place`]); `dispose_scope` looks
    /// at every one.
    pub endpoints: Vec<Endpoint>,
    /// How the egress proxy resolves names and where it audits.
    pub egress: cordon_sandbox::EgressSetup,
}

/// The `docker` backend.
pub struct DockerBackend {
    config: DockerConfig,
    // The sandboxes this process created (as the local backends keep
    // theirs); a kept sandbox's are found from its record and residue.
    sandboxes: Mutex<HashMap<SandboxKey, Arc<DockerSandbox>>>,
    /// The egress proxy, started on first use by a spec that names hosts.
    egress: std::sync::OnceLock<Result<Arc<dyn cordon_egress::EgressService>, String>>,
}

/// What the backend serves: commands, code, files in and declared files
/// out (from the work dir on the host), and the network through cordon's
/// egress proxy, the one route out of a sandbox whose spec names hosts.
pub fn capabilities() -> CapabilitySet {
    [
        Capability::Exec,
        Capability::RunCode,
        Capability::FilesIn,
        Capability::FilesOut,
        Capability::Network,
    ]
    .into_iter()
    .collect()
}

pub(crate) use cordon_backend_kit::stored_root;

impl DockerBackend {
    pub fn new(config: DockerConfig) -> DockerBackend {
        DockerBackend {
            config,
            sandboxes: Mutex::new(HashMap::new()),
            egress: std::sync::OnceLock::new(),
        }
    }

    /// The egress proxy, started on first use: in a confined process of
    /// its own when the setup names one (the `cordon` binary always does).
    fn egress_host(&self) -> Result<Arc<dyn cordon_egress::EgressService>, String> {
        self.egress
            .get_or_init(|| {
                cordon_egress::start_service(
                    &self.config.egress,
                    self.config.policy.clone(),
                    self.config.env.clone(),
                )
            })
            .clone()
    }

    fn registry(
        &self,
        operation: &'static str,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<SandboxKey, Arc<DockerSandbox>>>, BackendError>
    {
        self.sandboxes
            .lock()
            .map_err(|_| failed(operation, "the sandbox registry is poisoned"))
    }
}

impl Backend for DockerBackend {
    fn name(&self) -> &str {
        crate::NAME
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(Isolation::Container)
    }

    fn egress(&self) -> Egress {
        Egress::Allowlist
    }

    fn capabilities(&self) -> CapabilitySet {
        capabilities()
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        stored_root(image).map(drop)
    }

    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        if let Some(s) = self.registry("acquire")?.get(&req.key) {
            return Ok(s.clone());
        }
        let spec = &req.provenance.spec;
        if !spec.secrets().is_empty() {
            return Err(BackendError::Refused {
                operation: "acquire",
                reason: "the docker backend does not serve secrets in this version; drop the spec's `secrets`, or run on the native container rung (`--backend container`)".into(),
            });
        }
        self.materialises(spec.image())
            .map_err(|reason| BackendError::Refused {
                operation: "acquire",
                reason,
            })?;
        let allow = spec.egress_allow();
        // Started before the sandbox, so a proxy that cannot start refuses
        // the sandbox rather than leave it without its route.
        let egress = if allow.is_empty() {
            None
        } else {
            Some(self.egress_host().map_err(|e| failed("acquire", e))?)
        };
        let engine = crate::engine::place(&self.config.endpoints).map_err(|reason| {
            BackendError::Refused {
                operation: "acquire",
                reason,
            }
        })?;
        let made = Arc::new(DockerSandbox::create(&self.config, &engine, req, egress)?);
        let mut all = self.registry("acquire")?;
        // Another thread may have made one meanwhile: keep the first.
        if let Some(s) = all.get(&req.key) {
            let s = s.clone();
            drop(all);
            let _ = made.dispose();
            return Ok(s);
        }
        all.insert(req.key.clone(), made.clone());
        Ok(made)
    }

    fn dispose(&self, key: &SandboxKey) -> Result<bool, BackendError> {
        let gone = self.registry("dispose")?.remove(key);
        match gone {
            Some(s) => {
                s.dispose()?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        let mine: Vec<Arc<DockerSandbox>> = {
            let mut all = self.registry("dispose_scope")?;
            let keys: Vec<SandboxKey> = all
                .keys()
                .filter(|k| k.scope() == scope && k.thread_id() == thread_id)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| all.remove(k)).collect()
        };
        let mut n = mine.len();
        let mut failures = Vec::new();
        for s in &mine {
            if let Err(e) = s.dispose() {
                failures.push(e.to_string());
            }
        }
        // Those another cordon process made (or one that restarted): found
        // by their labels, on every engine. One that does not answer is
        // never taken for empty: it is named in the error.
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
                let residue =
                    serde_json::json!({"dir": dir, "sandbox": id, "engine": ep.to_string()});
                let keeper = crate::maker_of(id).unwrap_or(0);
                match crate::register::vet_residue(&residue, keeper) {
                    Ok(()) => {
                        let left = crate::register::reclaim_residue(&residue);
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
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failed("dispose_scope", failures.join("; ")))
        }
    }
}
