//! [`FsSink`]: the [`OutputSink`] that lands artifacts under a directory on
//! the host, with the confined primitives of [`crate::confined`]. The sink
//! protocol itself ([`OutputSink`], [`Artifact`], [`SinkError`]) is
//! `cordon_sandbox::sink`.

use std::fmt;
use std::sync::Arc;

use cordon_sandbox::sink::{default_display, ArtifactHandle};
use cordon_sandbox::{validate_artifact_name, Artifact, LandedArtifact, OutputSink, SinkError};

use crate::confined::{self, ConfinedError, WriteStep};

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
pub struct FsSink {
    root: confined::ConfinedDir,
    display: Display,
    existing: confined::Existing,
    mode: u32,
    hook: Option<Hook>,
}

impl fmt::Debug for FsSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsSink")
            .field("root", &self.root.shown())
            .field("existing", &self.existing)
            .finish_non_exhaustive()
    }
}

impl FsSink {
    /// A sink rooted at an existing directory; files land with mode `0o644`.
    pub fn new(root: &std::path::Path) -> Result<FsSink, SinkError> {
        let root = confined::ConfinedDir::open(root).map_err(|e| SinkError::Unavailable {
            reason: e.to_string(),
        })?;
        Ok(FsSink {
            root,
            display: Arc::new(default_display),
            existing: confined::Existing::Refuse,
            mode: 0o644,
            hook: None,
        })
    }

    /// A sink rooted at a directory already held open (for one the host
    /// made itself, e.g. by [`confined::ConfinedDir::make_private`]);
    /// files land with mode `0o644` unless [`FsSink::with_mode`] says.
    pub fn beneath(root: confined::ConfinedDir) -> FsSink {
        FsSink {
            root,
            display: Arc::new(default_display),
            existing: confined::Existing::Refuse,
            mode: 0o644,
            hook: None,
        }
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
        self.existing = confined::Existing::Replace;
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
