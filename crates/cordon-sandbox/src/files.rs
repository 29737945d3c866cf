//! The files API (issue 32): what a host asks of a sandbox's files —
//! list, stat, read a range, write, make a directory, remove, rename —
//! as one operation type every surface carries and every backend answers
//! ([`crate::Sandbox::files`]). Each operation names the paths it touches
//! and how ([`FileOp::accesses`]), which the guard decides with the
//! policy's storage surface exactly as it decides the workload's own
//! accesses ([`crate::guard`]).
//!
//! Paths are as the workload sees them: absolute within its work dir, or
//! relative to it. Answers name entries relative to the work dir.

use cordon_policy::Mode;
use serde::{Deserialize, Serialize};

use crate::backend::FileKind;

/// The most entries a listing answers (more: `truncated`).
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// The most bytes one read answers, unless the spec's `files_out` caps a
/// file lower.
pub const MAX_READ_BYTES: u64 = 16 << 20;

/// The deepest a listing goes below the directory it names.
pub const MAX_LIST_DEPTH: u32 = 32;

/// One entry: where, what, how large, its permission bits, when changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileInfo {
    /// Relative to the work dir.
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    /// Seconds since the epoch.
    pub mtime: i64,
}

/// How a write meets what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteHow {
    /// A new file; something already there is refused.
    Create,
    /// The file's contents replaced (made when absent); a link there is
    /// replaced, never followed.
    Truncate,
    /// Added to the end of an existing regular file.
    Append,
}

/// One operation on a sandbox's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FileOp {
    /// The directory `path` and, `depth` levels below it, its directories.
    List {
        path: String,
        depth: u32,
    },
    Stat {
        path: String,
    },
    /// At most `len` bytes from `offset`.
    Read {
        path: String,
        offset: u64,
        len: u64,
    },
    Write {
        path: String,
        #[serde(with = "bytes_b64")]
        data: Vec<u8>,
        mode: u32,
        how: WriteHow,
    },
    /// With its parents (`mkdir -p`).
    Mkdir {
        path: String,
    },
    /// A file or link; a directory only `recursive`ly (or empty).
    Remove {
        path: String,
        recursive: bool,
    },
    /// Nothing at `to` is replaced.
    Rename {
        from: String,
        to: String,
    },
}

/// What an operation answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FileAnswer {
    Listing {
        entries: Vec<FileInfo>,
        truncated: bool,
    },
    /// `None`: nothing there.
    Stat(Option<FileInfo>),
    Read {
        #[serde(with = "bytes_b64")]
        data: Vec<u8>,
        /// The file's size.
        size: u64,
    },
    /// `false` for a removal that found nothing.
    Done(bool),
}

impl FileOp {
    /// Every path the operation touches and how: read for a listing, a
    /// stat or a read; write for the rest (a rename writes both ends).
    pub fn accesses(&self) -> Vec<(&str, Mode)> {
        match self {
            FileOp::List { path, .. } | FileOp::Stat { path } | FileOp::Read { path, .. } => {
                vec![(path, Mode::Read)]
            }
            FileOp::Write { path, .. } | FileOp::Mkdir { path } | FileOp::Remove { path, .. } => {
                vec![(path, Mode::Write)]
            }
            FileOp::Rename { from, to } => vec![(from, Mode::Write), (to, Mode::Write)],
        }
    }

    /// The bytes a write carries.
    pub fn bytes(&self) -> Option<i64> {
        match self {
            FileOp::Write { data, .. } => i64::try_from(data.len()).ok(),
            _ => None,
        }
    }

    /// The operation's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            FileOp::List { .. } => "list",
            FileOp::Stat { .. } => "stat",
            FileOp::Read { .. } => "read",
            FileOp::Write { .. } => "write",
            FileOp::Mkdir { .. } => "mkdir",
            FileOp::Remove { .. } => "remove",
            FileOp::Rename { .. } => "rename",
        }
    }
}

/// A path as the workload sees it, absolute: `path` itself when absolute,
/// else beneath `work_dir`. Nothing is resolved (`..` stays, and the
/// confined open refuses it).
pub fn absolute(work_dir: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() || path == "." {
        work_dir.to_string()
    } else {
        format!("{}/{path}", work_dir.trim_end_matches('/'))
    }
}

/// Whether an absolute path is canonical: no empty, `.` or `..` part. The
/// policy decides on the path's text, so `/w//locked/x` or
/// `/w/x/../locked/x` must never reach a decision that a rule on
/// `/w/locked/` would have refused.
pub fn is_canonical(abs: &str) -> bool {
    abs.starts_with('/')
        && abs[1..]
            .trim_end_matches('/')
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

/// Bytes as standard base64 in JSON (a file's contents on every wire).
mod bytes_b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}
