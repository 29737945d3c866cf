//! Where landed outputs go: the [`OutputSink`] a host passes to
//! `cordon_collect::collect_outputs`. `FsSink`, one rooted at a directory, lives
//! in the `cordon-files` crate (`cordon_files::FsSink`) with the host-side
//! primitives it lands files with.
//!
//! cordon holds no opinion about where an artifact goes — a directory, a
//! blob container, a UI panel — which keeps that flow visible to the host's
//! own information-flow policy. A sink that lands somewhere other than a
//! filesystem writes its own [`OutputSink::deliver`] and owns the
//! equivalent of [`SinkError::LandingNotConfined`] for its destination.

use std::fmt;

use crate::outputs::ArtifactNameError;

/// One output read out of a sandbox, about to be landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The landing name (valid by [`crate::validate_artifact_name`]).
    pub name: String,
    /// The declared path it was read from, relative to `work_dir`.
    pub path: String,
    /// As declared; never sniffed from `bytes`.
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// The host's own reference to a landed artifact (a path, a blob URL). It
/// has no `Display`, and its `Debug` hides it: nothing renders it into a
/// transcript a model reads.
#[derive(Clone, PartialEq, Eq)]
pub struct ArtifactHandle(String);

impl ArtifactHandle {
    pub fn new(reference: impl Into<String>) -> ArtifactHandle {
        ArtifactHandle(reference.into())
    }
    /// For the host only.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ArtifactHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArtifactHandle(<host reference>)")
    }
}

/// What a sink did with an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandedArtifact {
    /// The one line a model may see about this artifact.
    pub display: String,
    /// The host's reference; never rendered.
    pub handle: ArtifactHandle,
}

/// A landing that is refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    #[error(
        "landing `{name}` is not confined to the sink's root: {reason}; nothing was written there"
    )]
    LandingNotConfined { name: String, reason: String },
    #[error("landing name `{name}` is refused: {source}")]
    Name {
        name: String,
        source: ArtifactNameError,
    },
    #[error("something already exists at `{name}` in the sink; land each round in a fresh directory, or build the sink with `replace_existing`")]
    Exists { name: String },
    #[error(
        "the sink cannot confine its writes: {reason}; cordon does not fall back to a racy check"
    )]
    Unavailable { reason: String },
    #[error("landing `{name}` failed: {reason}")]
    Failed { name: String, reason: String },
}

/// Where landed artifacts go. One method: deliver one artifact, say what
/// the model may see, keep the host's reference.
pub trait OutputSink: Send + Sync {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError>;
}

/// The default display line: name, media type and size.
pub fn default_display(artifact: &Artifact) -> String {
    format!(
        "landed `{}` ({}, {} bytes)",
        artifact.name,
        artifact.media_type,
        artifact.bytes.len()
    )
}
