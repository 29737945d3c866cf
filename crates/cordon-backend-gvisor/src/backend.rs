//! [`GvisorBackend`]: the `gvisor` backend behind the sandbox protocol.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, Capability, CapabilitySet, Egress, Isolation,
    IsolationError, Sandbox, SandboxKey,
};

use crate::failed;
use crate::runsc::Runsc;
use crate::sandbox::GvisorSandbox;

/// How a gvisor backend is set up.
#[derive(Clone)]
pub struct GvisorConfig {
    pub policy: Arc<Policy>,
    /// The deployment the router decides in.
    pub env: Deployment,
    /// Where each sandbox's directory is made.
    pub scratch: PathBuf,
    /// The operator's work dir (`--work-dir`), owned by
    /// [`crate::WORKLOAD_ID`]; `None`: a fresh one per sandbox.
    pub work_dir: Option<PathBuf>,
    /// runsc as the probe found it running.
    pub runsc: Runsc,
    /// How the egress proxy resolves names and where it audits.
    pub egress: cordon_sandbox::EgressSetup,
}

/// The `gvisor` backend.
pub struct GvisorBackend {
    config: GvisorConfig,
    // The sandboxes this process created (as the local backends keep
    // theirs); a kept sandbox's are found from its record and residue.
    sandboxes: Mutex<HashMap<SandboxKey, Arc<GvisorSandbox>>>,
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

impl GvisorBackend {
    pub fn new(config: GvisorConfig) -> GvisorBackend {
        GvisorBackend {
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
    ) -> Result<std::sync::MutexGuard<'_, HashMap<SandboxKey, Arc<GvisorSandbox>>>, BackendError>
    {
        self.sandboxes
            .lock()
            .map_err(|_| failed(operation, "the sandbox registry is poisoned"))
    }
}

impl Backend for GvisorBackend {
    fn name(&self) -> &str {
        crate::NAME
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(Isolation::HardenedContainer)
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
        self.materialises(spec.image())
            .map_err(|reason| BackendError::Refused {
                operation: "acquire",
                reason,
            })?;
        // Started before the sandbox, so a proxy that cannot start refuses
        // the sandbox rather than leave it without its route; a spec that
        // names no hosts runs with no network at all.
        let egress = if spec.egress_allow().is_empty() {
            None
        } else {
            Some(self.egress_host().map_err(|e| failed("acquire", e))?)
        };
        let made = Arc::new(GvisorSandbox::create(&self.config, req, egress)?);
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
            // Not this process's: another's (or a restarted one's), found
            // in runsc's own listing.
            None => Ok(self.dispose_listed(|l| {
                l.get(crate::pod::SCOPE) == key.scope()
                    && l.get(crate::pod::THREAD) == key.thread_id()
                    && l.get(crate::pod::AGENT_DIR) == key.agent_dir()
            })? > 0),
        }
    }

    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        let gone: Vec<Arc<GvisorSandbox>> = {
            let mut all = self.registry("dispose_scope")?;
            let keys: Vec<SandboxKey> = all
                .keys()
                .filter(|k| k.scope() == scope && k.thread_id() == thread_id)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| all.remove(k)).collect()
        };
        for s in &gone {
            s.dispose()?;
        }
        let listed = self.dispose_listed(|l| {
            l.get(crate::pod::SCOPE) == scope && l.get(crate::pod::THREAD) == thread_id
        })?;
        Ok(gone.len() + listed)
    }
}

impl GvisorBackend {
    /// Disposes of the sandboxes runsc's listing shows (by their pause
    /// container's annotations) that `matches` picks: kills and deletes
    /// every container of each, removes its directory and volume. A
    /// listed directory is believed only when it is what this backend
    /// makes (`TMPDIR/cordon-gvisor-…`, named as the container, root's).
    fn dispose_listed(
        &self,
        matches: impl Fn(&crate::pod::Listed) -> bool,
    ) -> Result<usize, BackendError> {
        let bin = &self.config.runsc.bin;
        let listed = crate::pod::listed(bin).map_err(|e| failed("dispose", e))?;
        let scratch = self
            .config
            .scratch
            .canonicalize()
            .unwrap_or_else(|_| self.config.scratch.clone());
        let mut n = 0;
        let mut failures = Vec::new();
        for l in listed.iter().filter(|l| matches(l)) {
            let Some(sandbox) = crate::pod::sandbox_of(&l.id) else {
                continue;
            };
            let dir = l.dir();
            let named = dir.file_name().and_then(|n| n.to_str()) == Some(sandbox);
            failures.extend(crate::sandbox::remove_containers(
                bin,
                &format!("{sandbox}-"),
            ));
            if named && dir.parent() == Some(scratch.as_path()) && crate::ours(&dir) {
                if let Err(e) = crate::sandbox::remove_sandbox_dir(&dir) {
                    failures.push(e);
                }
            } else {
                failures.push(format!(
                    "`{}` (listed for `{}`) is not a sandbox directory of this backend in `{}`; its containers are gone, the directory is left alone",
                    dir.display(),
                    l.id,
                    scratch.display()
                ));
            }
            n += 1;
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failed("dispose", failures.join("; ")))
        }
    }
}
