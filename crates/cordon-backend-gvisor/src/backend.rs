//! [`GvisorBackend`]: the `gvisor` backend behind the sandbox protocol.

use std::sync::Arc;

use cordon_backend_kit::{all_done, failed, Engine, EngineBackend, Which};
use cordon_sandbox::{AcquireRequest, BackendError, Sandbox};

use crate::sandbox::GvisorSandbox;
use crate::GvisorConfig;

/// The `gvisor` engine: what differs from the other engines.
pub struct Gvisor {
    config: GvisorConfig,
}

/// The `gvisor` backend: the kit's backend over [`Gvisor`].
pub type GvisorBackend = EngineBackend<Gvisor>;

/// The `gvisor` backend set up by `config`.
pub fn backend(config: GvisorConfig) -> GvisorBackend {
    let setup = config.setup.clone();
    EngineBackend::set_up(Gvisor { config }, &setup)
}

impl Engine for Gvisor {
    type Sandbox = GvisorSandbox;

    // `runsc checkpoint`/`restore` save a sandbox's processes whole,
    // under the same gVisor kernel they ran in (`crate::sandbox::memory`).
    cordon_backend_kit::oci_engine_basics!(
        crate::NAME,
        crate::names::RUNG,
        cordon_sandbox::Capability::SnapshotMemory
    );

    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<GvisorSandbox, BackendError> {
        let sandbox = GvisorSandbox::create(&self.config, req, egress)?;
        // A snapshot's saved processes go on in the new sandbox, or it is
        // not made: never its files alone, claimed as the snapshot.
        if let Some(memory) = req
            .provenance
            .origin
            .as_ref()
            .and_then(|o| o.memory.as_ref())
        {
            if let Err(e) = sandbox.restore_all(memory) {
                let _ = sandbox.dispose();
                return Err(failed(
                    "acquire",
                    format!("restoring the snapshot's processes: {e}"),
                ));
            }
        }
        Ok(sandbox)
    }

    /// Another process's sandboxes (or a restarted one's), found in
    /// runsc's own listing by their pause container's annotations.
    fn dispose_found(
        &self,
        which: Which<'_>,
        held: &[Arc<GvisorSandbox>],
    ) -> Result<usize, BackendError> {
        let held: Vec<&str> = held.iter().map(|s| s.id()).collect();
        self.dispose_listed(|l| {
            which.matches(
                l.get(crate::pod::SCOPE),
                l.get(crate::pod::THREAD),
                l.get(crate::pod::AGENT_DIR),
            ) && crate::pod::sandbox_of(&l.id).is_none_or(|id| !held.contains(&id))
        })
    }
}

impl Gvisor {
    /// Disposes of the sandboxes runsc's listing shows (by their pause
    /// container's annotations) that `matches` picks: kills and deletes
    /// every container of each, removes its directory and volume. A
    /// listed directory is believed only when it is what this backend
    /// makes (`TMPDIR/cordon-gvisor-…`, named as the container, root's).
    fn dispose_listed(
        &self,
        matches: impl Fn(&crate::runsc::Listed) -> bool,
    ) -> Result<usize, BackendError> {
        let bin = &self.config.runsc.bin;
        let listed = crate::pod::listed(bin).map_err(|e| failed("dispose", e))?;
        let scratch = &self.config.setup.scratch;
        let scratch = scratch.canonicalize().unwrap_or_else(|_| scratch.clone());
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
            if named && dir.parent() == Some(scratch.as_path()) && crate::names::ours(&dir) {
                failures.extend(crate::sandbox::remove_sandbox_dir(&dir).err());
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
        all_done(n, "dispose", failures)
    }
}
