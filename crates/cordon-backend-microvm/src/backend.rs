//! [`MicrovmBackend`]: gets or boots a guest per sandbox key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_backend_kit::{all_done, refused, Engine, EngineBackend, EngineSetup, Which};
use cordon_sandbox::{
    AcquireRequest, BackendError, Capability, CapabilitySet, Isolation, IsolationError,
};

use crate::probe::Machine;
use crate::sandbox::{Label, MicrovmSandbox, SandboxConfig};
use crate::vm::Accel;

/// What the backend is built with.
#[derive(Clone)]
pub struct MicrovmConfig {
    /// What every engine backend is set up with; an operator's work dir
    /// (`--work-dir`) is refused: the guest's work dir is its own (files go
    /// in and out through the channel).
    pub setup: EngineSetup,
    pub machine: Machine,
    pub init: cordon_linux::InitProgram,
}

/// The `microvm` engine: what differs from the other engines.
pub struct Microvm {
    config: MicrovmConfig,
}

/// The `microvm` backend: the kit's backend over [`Microvm`].
pub type MicrovmBackend = EngineBackend<Microvm>;

/// The `microvm` backend set up by `config`.
pub fn backend(config: MicrovmConfig) -> MicrovmBackend {
    let setup = config.setup.clone();
    EngineBackend::set_up(Microvm { config }, &setup)
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
        Capability::Ports,
        Capability::Snapshot,
        Capability::SnapshotMemory,
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

    fn admit(&self, _req: &AcquireRequest) -> Result<(), BackendError> {
        match &self.config.setup.work_dir {
            Some(d) => Err(refused("acquire", format!(
                "the microvm backend does not share a host directory (`{}`) with the guest; its work dir lives in the guest and files go in and out through cordon (files_in, files_out); drop --work-dir",
                d.display()
            ))),
            None => Ok(()),
        }
    }

    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<MicrovmSandbox, BackendError> {
        let spec = &req.provenance.spec;
        let (root, digest) =
            image_tree(spec.image(), true).map_err(|reason| refused("acquire", reason))?;
        let packed = crate::artifacts::packed_image(&self.config.machine.settings, &root, &digest)
            .map_err(|e| failed("acquire", e))?;
        let config = SandboxConfig {
            policy: self.config.setup.policy.clone(),
            env: self.config.setup.env.clone(),
            machine: self.config.machine.clone(),
            init: self.config.init.clone(),
            scratch: self.config.setup.scratch.clone(),
        };
        MicrovmSandbox::create(
            &config,
            req,
            &root,
            &packed,
            egress,
            crate::names::fresh_name(),
        )
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
        for (dir, label) in found_sandboxes(&self.config.setup.scratch) {
            if !label_is(&label, which) || held.contains(&dir) {
                continue;
            }
            failures.extend(crate::reclaim_dir(&dir));
            n += 1;
        }
        all_done(n, "dispose", failures)
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

/// The sandbox directories in `scratch` and their labels (a directory
/// without a readable label is left out: it is not known to be ours).
pub fn found_sandboxes(scratch: &Path) -> Vec<(PathBuf, Label)> {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| named_ours(p))
        .filter(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == 0)
        })
        .filter_map(|p| {
            let label = std::fs::read(p.join("sandbox.json")).ok()?;
            let label: Label = serde_json::from_slice(&label).ok()?;
            Some((p, label))
        })
        .collect()
}

/// Whether `p` is a directory this backend makes (`cordon-microvm-PID-N`).
pub fn named_ours(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::maker_of)
        .is_some()
}
