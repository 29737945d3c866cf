//! [`MicrovmBackend`]: gets or boots a guest per sandbox key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_backend_kit::{Engine, EngineBackend, Which};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, BackendError, Capability, CapabilitySet, Isolation, IsolationError,
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

/// The `microvm` engine: what differs from the other engines.
pub struct Microvm {
    config: MicrovmConfig,
}

/// The `microvm` backend: the kit's backend over [`Microvm`].
pub type MicrovmBackend = EngineBackend<Microvm>;

/// The `microvm` backend set up by `config`.
pub fn backend(config: MicrovmConfig) -> MicrovmBackend {
    let (policy, env, egress) = (
        config.policy.clone(),
        config.env.clone(),
        config.egress.clone(),
    );
    EngineBackend::new(Microvm { config }, policy, env, egress)
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

impl Engine for Microvm {
    type Sandbox = MicrovmSandbox;

    fn name(&self) -> &str {
        crate::NAME
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(rung_of(self.config.machine.accel))
    }

    fn capabilities(&self) -> CapabilitySet {
        capabilities()
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        image_tree(image, false).map(drop)
    }

    fn admit(&self, req: &AcquireRequest) -> Result<(), BackendError> {
        if !req.provenance.spec.secrets().is_empty() {
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
        Ok(())
    }

    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<MicrovmSandbox, BackendError> {
        let spec = &req.provenance.spec;
        let (root, digest) =
            image_tree(spec.image(), true).map_err(|reason| BackendError::Refused {
                operation: "acquire",
                reason,
            })?;
        let packed =
            crate::artifacts::packed_image(&root, &digest).map_err(|e| failed("acquire", e))?;
        let config = SandboxConfig {
            policy: self.config.policy.clone(),
            env: self.config.env.clone(),
            machine: self.config.machine.clone(),
            init: self.config.init.clone(),
            scratch: self.config.scratch.clone(),
        };
        MicrovmSandbox::create(&config, req, &root, &packed, egress, crate::fresh_name())
    }

    fn dispose(&self, sandbox: &MicrovmSandbox) -> Result<(), BackendError> {
        sandbox.dispose()
    }

    /// The sandboxes in the scratch directory whose label `which` names
    /// and that this process does not hold (another process's, or a
    /// crashed one's): their jail's cgroups are killed and their
    /// directories removed.
    fn dispose_found(
        &self,
        which: Which<'_>,
        held: &[Arc<MicrovmSandbox>],
    ) -> Result<usize, BackendError> {
        let mut n = 0;
        let mut failures = Vec::new();
        let held: Vec<PathBuf> = held.iter().map(|s| s.dir().to_path_buf()).collect();
        for (dir, label) in crate::found_sandboxes(&self.config.scratch) {
            if !label_is(&label, which) || held.contains(&dir) {
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

/// Whether a sandbox's label is one `which` names. A label records its
/// key whole (`scope/thread/agent_dir`): a key's dispose matches it whole.
fn label_is(label: &Label, which: Which<'_>) -> bool {
    match which.agent_dir {
        Some(agent_dir) => {
            label.scope == which.scope
                && label.thread == which.thread
                && label
                    .key
                    .strip_prefix(&format!("{}/{}/", which.scope, which.thread))
                    == Some(agent_dir)
        }
        None => label.scope == which.scope && label.thread == which.thread,
    }
}

/// Whether `p` is a directory this backend makes (`cordon-microvm-PID-N`).
pub fn named_ours(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::maker_of)
        .is_some()
}
