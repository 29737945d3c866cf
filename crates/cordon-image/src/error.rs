//! [`ImageError`]: why the store refused or failed, and the helpers that
//! turn an I/O failure into one naming its step and path.

use std::io;
use std::path::{Path, PathBuf};

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{step} `{path}`: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("image store `{path}` {problem}; fix it with `{fix}`")]
    InsecureStore {
        path: PathBuf,
        problem: String,
        fix: String,
    },
    #[error("`{name}` is not an image name: use 1-64 of a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit")]
    BadName { name: String },
    #[error("`host` is the built-in image (the host's system directories); it cannot be {action}")]
    Builtin { action: &'static str },
    #[error("no image named `{name}` in `{store}`; build it with `cordon image build {name} --debootstrap` or import one with `cordon image import {name} DIR|TARBALL`")]
    NotFound { name: String, store: PathBuf },
    #[error("image `{name}` cannot be used: {reason}; build or import it again, or remove it with `cordon image rm {name}`")]
    Broken { name: String, reason: String },
    #[error("`{}`: entry `{}` is refused: {reason}", archive.display(), entry.display())]
    UnsafeEntry {
        archive: PathBuf,
        entry: PathBuf,
        reason: String,
    },
    #[error("`{}` is refused as an image: {reason}", path.display())]
    BadImage { path: PathBuf, reason: String },
    #[error("`{}` does not match its digest (expected {want}, it hashes to {got}); the image is damaged or was altered: export it again", path.display())]
    DigestMismatch {
        path: PathBuf,
        want: String,
        got: String,
    },
    #[error("`{}` is neither a directory nor a `.tar`, `.tar.gz` or `.tgz` archive{hint}", path.display())]
    UnsupportedSource { path: PathBuf, hint: String },
    #[error("`debootstrap` is not installed; install it with `apt-get install debootstrap`")]
    DebootstrapMissing,
    #[error("debootstrap failed ({status}); no image was named. Its last lines:\n{tail}")]
    DebootstrapFailed { status: String, tail: String },
    #[error("{what} `{value}` is refused: expected {help}")]
    BadOption {
        what: &'static str,
        value: String,
        help: &'static str,
    },
}

impl ImageError {
    /// Whether the error is a refusal the caller can fix (a usage error)
    /// rather than a failure of the machine.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ImageError::Io { .. } | ImageError::DebootstrapFailed { .. }
        )
    }
}

pub(crate) fn io_err<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| ImageError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn rio_err<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(rustix::io::Errno) -> ImageError + 'a {
    move |e| ImageError::Io {
        step,
        path: path.to_path_buf(),
        source: e.into(),
    }
}
