//! [`MicrovmBackend`]: gets or boots a guest per sandbox key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, Capability, CapabilitySet, Egress, Isolation,
    IsolationError, Sandbox, SandboxKey,
};

use crate::probe::Machine;
use crate::sandbox::{Label, MicrovmSandbox, SandboxConfig};
use crate::vm::Accel;

/// What the backend is built with.
#[derive(Clone)]
pub struct MicrovmConfig {
    pub policy: Arc<Policy>,
    pub env: Deployment,
    /// Where each sandbox's directory is made.
    pub scratch: PathBuf,
    /// The operator's work dir (`--work-dir`): refused, the guest's work
    /// dir is its own (files go in and out through the channel).
    pub work_dir: Option<PathBuf>,
    pub machine: Machine,
    pub init: cordon_linux::InitProgram,
    pub egress: cordon_sandbox::EgressSetup,
}

/// The `microvm` backend.
pub struct MicrovmBackend {
    config: MicrovmConfig,
    sandboxes: Mutex<HashMap<SandboxKey, Arc<MicrovmSandbox>>>,
    egress: OnceLock<Result<Arc<dyn cordon_egress::EgressService>, String>>,
}

/// What every microvm sandbox serves.
pub fn capabilities() -> CapabilitySet {
    [
        Capability::Exec,
        Capability::RunCode,
        Capability::FilesIn,
        Capability::FilesOut,
        Capability::FilesList,
        Capability::Network,
    ]
    .into_iter()
    .collect()
}

/// The rung an accelerator gives: a hypervisor boundary only under KVM;
/// under TCG what confines is the jail around QEMU, cordon's `container`
/// rung.
pub fn rung_of(accel: Accel) -> Isolation {
    match accel {
        Accel::Kvm => Isolation::Microvm,
        Accel::Tcg => Isolation::Container,
    }
}

/// The image tree and digest a spec's `image` boots: a stored image, or
/// for `host` the store's `default` image (a guest cannot be shown the
/// host's `/usr`; see docs/backends.md), built on first use.
pub fn image_tree(image: &str, build: bool) -> Result<(PathBuf, String), String> {
    let store = cordon_image::ImageStore::open(&cordon_image::ImageStore::default_root())
        .map_err(|e| format!("image `{image}`: {e}"))?;
    let resolved = if image == "host" {
        if build {
            store
                // Minutes on first use (debootstrap): said on stderr, as
                // `cordon image build` says it, so nobody waits on silence.
                .ensure_default(&mut |line: &str| eprintln!("cordon: default image: {line}"))
                .map_err(|e| {
                    format!("the `default` image the microvm backend boots for `host`: {e}")
                })?
        } else {
            match store.resolve(cordon_image::DEFAULT_IMAGE) {
                Ok(r) => r,
                // Built at the first acquire.
                Err(cordon_image::ImageError::NotFound { .. }) => {
                    return Ok((PathBuf::new(), String::new()))
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    } else {
        store.resolve(image).map_err(|e| e.to_string())?
    };
    match resolved {
        cordon_image::Resolved::Stored { root, digest, .. } => Ok((root, digest)),
        cordon_image::Resolved::Host => Err(
            "the microvm backend boots an image of cordon's store, not the host's directories"
                .into(),
        ),
    }
}

use cordon_backend_kit::failed;

impl MicrovmBackend {
    pub fn new(config: MicrovmConfig) -> MicrovmBackend {
        MicrovmBackend {
            config,
            sandboxes: Mutex::new(HashMap::new()),
            egress: OnceLock::new(),
        }
    }

    fn registry(&self) -> MutexGuard<'_, HashMap<SandboxKey, Arc<MicrovmSandbox>>> {
        self.sandboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

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

    /// Disposes of the sandboxes in the scratch directory whose label
    /// `matches` and that this process does not hold (another process's,
    /// or a crashed one's): their jail's cgroups are killed and their
    /// directories removed.
    fn dispose_found(&self, matches: impl Fn(&Label) -> bool) -> Result<usize, BackendError> {
        let mut n = 0;
        let mut failures = Vec::new();
        let held: Vec<PathBuf> = self
            .registry()
            .values()
            .map(|s| s.dir().to_path_buf())
            .collect();
        for (dir, label) in crate::found_sandboxes(&self.config.scratch) {
            if !matches(&label) || held.contains(&dir) {
                continue;
            }
            failures.extend(crate::reclaim_dir(&dir));
            n += 1;
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failed("dispose", failures.join("; ")))
        }
    }
}

impl Backend for MicrovmBackend {
    fn name(&self) -> &str {
        crate::NAME
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(rung_of(self.config.machine.accel))
    }

    fn egress(&self) -> Egress {
        Egress::Allowlist
    }

    fn capabilities(&self) -> CapabilitySet {
        capabilities()
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        image_tree(image, false).map(drop)
    }

    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        if let Some(s) = self.registry().get(&req.key) {
            return Ok(s.clone());
        }
        let spec = &req.provenance.spec;
        if !spec.secrets().is_empty() {
            return Err(BackendError::Refused {
                operation: "acquire",
                reason: "the microvm backend does not deliver secrets yet; use the `container` or `gvisor` backend for a spec that names secrets".into(),
            });
        }
        if let Some(d) = &self.config.work_dir {
            return Err(BackendError::Refused {
                operation: "acquire",
                reason: format!(
                    "the microvm backend does not share a host directory (`{}`) with the guest; its work dir lives in the guest and files go in and out through cordon (files_in, files_out); drop --work-dir",
                    d.display()
                ),
            });
        }
        let (root, digest) =
            image_tree(spec.image(), true).map_err(|reason| BackendError::Refused {
                operation: "acquire",
                reason,
            })?;
        let packed =
            crate::artifacts::packed_image(&root, &digest).map_err(|e| failed("acquire", e))?;
        let egress = if spec.egress_allow().is_empty() {
            None
        } else {
            Some(self.egress_host().map_err(|e| failed("acquire", e))?)
        };
        let config = SandboxConfig {
            policy: self.config.policy.clone(),
            env: self.config.env.clone(),
            machine: self.config.machine.clone(),
            init: self.config.init.clone(),
            scratch: self.config.scratch.clone(),
        };
        let made = Arc::new(MicrovmSandbox::create(
            &config,
            req,
            &root,
            &packed,
            egress,
            crate::fresh_name(),
        )?);
        let mut all = self.registry();
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
        let gone = self.registry().remove(key);
        match gone {
            Some(s) => {
                s.dispose()?;
                Ok(true)
            }
            None => {
                let k = key.to_string();
                Ok(self.dispose_found(|l| l.key == k)? > 0)
            }
        }
    }

    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        let gone: Vec<Arc<MicrovmSandbox>> = {
            let mut all = self.registry();
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
        let found = self.dispose_found(|l| l.scope == scope && l.thread == thread_id)?;
        Ok(gone.len() + found)
    }
}

/// Whether `p` is a directory this backend makes (`cordon-microvm-PID-N`).
pub fn named_ours(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::maker_of)
        .is_some()
}
