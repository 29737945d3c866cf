//! How a docker backend is set up.

use cordon_backend_kit::EngineSetup;

use crate::engine::Endpoint;

/// How a docker backend is set up.
#[derive(Clone)]
pub struct DockerConfig {
    /// What every engine backend is set up with; the operator's work dir
    /// is owned by [`crate::WORKLOAD_ID`].
    pub setup: EngineSetup,
    /// The engines, in the configured order: each acquire places its
    /// sandbox on one ([`crate::probe::place`]); `dispose_scope` looks
    /// at every one.
    pub endpoints: Vec<Endpoint>,
}
