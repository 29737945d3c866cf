//! How a gvisor backend is set up.

use cordon_backend_kit::EngineSetup;

use crate::runsc::Runsc;

/// How a gvisor backend is set up.
#[derive(Clone)]
pub struct GvisorConfig {
    /// What every engine backend is set up with; the operator's work dir
    /// is owned by [`crate::WORKLOAD_ID`].
    pub setup: EngineSetup,
    /// runsc as the probe found it running.
    pub runsc: Runsc,
}
