//! Where landed outputs go: the [`OutputSink`] a host passes to
//! [`crate::collect_outputs`], and [`FsSink`], one rooted at a directory.
//!
//! cordon holds no opinion about where an artifact goes — a directory, a
//! blob container, a UI panel — which keeps that flow visible to the host's
//! own information-flow policy. A sink that lands somewhere other than a
//! filesystem writes its own [`OutputSink::deliver`] and owns the
//! equivalent of [`SinkError::LandingNotConfined`] for its destination.

use std::fmt;
use std::sync::Arc;

use crate::confined::{ConfinedError, WriteStep};
use crate::outputs::{validate_artifact_name, ArtifactNameError};

/// One output read out of a sandbox, about to be landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The landing name (valid by [`validate_artifact_name`]).
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

type Display = Arc<dyn Fn(&Artifact) -> String + Send + Sync>;
type Hook = Arc<dyn Fn(WriteStep) + Send + Sync>;

/// A sink that writes each artifact under a root directory, confined
/// beneath it on Linux with the primitives of [`crate::confined`]: parents
/// created one segment at a time beneath a descriptor of the root, the file
/// written to a temporary name with `O_CREAT | O_EXCL` and renamed into
/// place. A link planted in the root — before the run or during the write
/// — cannot carry a write out of it. By default an existing destination is
/// refused ([`SinkError::Exists`]).
///
/// The root itself is opened once, when the sink is built, and may be
/// reached through links (the host chose it); from then on a swap of the
/// root's path changes nothing.
#[cfg(target_os = "linux")]
pub struct FsSink {
    root: crate::confined::ConfinedDir,
    display: Display,
    existing: crate::confined::Existing,
    mode: u32,
    hook: Option<Hook>,
}

#[cfg(target_os = "linux")]
impl fmt::Debug for FsSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsSink")
            .field("root", &self.root.shown())
            .field("existing", &self.existing)
            .finish_non_exhaustive()
    }
}

#[cfg(target_os = "linux")]
impl FsSink {
    /// A sink rooted at an existing directory; files land with mode `0o644`.
    pub fn new(root: &std::path::Path) -> Result<FsSink, SinkError> {
        let root =
            crate::confined::ConfinedDir::open(root).map_err(|e| SinkError::Unavailable {
                reason: e.to_string(),
            })?;
        Ok(FsSink {
            root,
            display: Arc::new(default_display),
            existing: crate::confined::Existing::Refuse,
            mode: 0o644,
            hook: None,
        })
    }

    /// Words the display line (a kind introducing its artifacts).
    pub fn with_display(
        mut self,
        display: impl Fn(&Artifact) -> String + Send + Sync + 'static,
    ) -> FsSink {
        self.display = Arc::new(display);
        self
    }

    /// Replace what is already at a destination (atomically; a link there
    /// is replaced, not followed) instead of refusing.
    pub fn replace_existing(mut self) -> FsSink {
        self.existing = crate::confined::Existing::Replace;
        self
    }

    /// The mode landed files get (default `0o644`).
    pub fn with_mode(mut self, mode: u32) -> FsSink {
        self.mode = mode;
        self
    }

    /// Runs `hook` at each step of every write. For tests that plant a link
    /// mid-write deterministically; a host has no use for it.
    #[doc(hidden)]
    pub fn with_step_hook(mut self, hook: impl Fn(WriteStep) + Send + Sync + 'static) -> FsSink {
        self.hook = Some(Arc::new(hook));
        self
    }
}

#[cfg(target_os = "linux")]
impl OutputSink for FsSink {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        let name = &artifact.name;
        validate_artifact_name(name).map_err(|source| SinkError::Name {
            name: name.clone(),
            source,
        })?;
        let hook = self.hook.as_deref();
        self.root
            .write_file(name, &artifact.bytes, self.mode, self.existing, hook)
            .map_err(|e| match e {
                ConfinedError::Link { .. }
                | ConfinedError::Escapes { .. }
                | ConfinedError::NotADirectory { .. }
                | ConfinedError::NotRegular { .. } => SinkError::LandingNotConfined {
                    name: name.clone(),
                    reason: e.to_string(),
                },
                ConfinedError::Exists { .. } => SinkError::Exists { name: name.clone() },
                ConfinedError::Unavailable { .. } => SinkError::Unavailable {
                    reason: e.to_string(),
                },
                ConfinedError::Name { source, .. } => SinkError::Name {
                    name: name.clone(),
                    source,
                },
                other => SinkError::Failed {
                    name: name.clone(),
                    reason: other.to_string(),
                },
            })?;
        Ok(LandedArtifact {
            display: (self.display)(artifact),
            handle: ArtifactHandle::new(format!("{}/{name}", self.root.shown())),
        })
    }
}
