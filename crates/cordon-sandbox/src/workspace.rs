//! A workspace: a host directory a sandbox works in copy-on-write. The
//! sandbox's changes stay on its own volume until the host looks at them
//! ([`crate::Sandbox::workspace_diff`]) and writes them back
//! ([`crate::Sandbox::workspace_apply`]).

use serde::{Deserialize, Serialize};

use crate::FileKind;

/// Why a sandbox without a workspace has no diff.
pub const NO_WORKSPACE: &str = "this sandbox has no workspace: it was not made with `--workspace DIR` (or a spec's `workspace`), so there is nothing to diff or apply; collect outputs with `collect`, or make the sandbox over a workspace";

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Not in the directory; the sandbox made it.
    Added,
    /// In the directory; the sandbox's differs (contents, mode or kind).
    Modified,
    /// In the directory; the sandbox removed it.
    Removed,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Modified => "modified",
            Change::Removed => "removed",
        }
    }
}

/// One change, relative to the workspace's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceChange {
    /// Relative to the workspace (`src/main.py`).
    pub path: String,
    pub change: Change,
    /// What is there now (for `removed`: what was there).
    #[serde(with = "kind_name")]
    pub kind: FileKind,
    /// Bytes of the file now there (for `removed`: of the one removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A change `apply` did not make, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusedChange {
    pub path: String,
    pub reason: String,
}

/// What `apply` did: every change is either applied or refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyReport {
    pub applied: Vec<WorkspaceChange>,
    pub refused: Vec<RefusedChange>,
}

mod kind_name {
    use crate::FileKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(k: &FileKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match k {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FileKind, D::Error> {
        match String::deserialize(d)?.as_str() {
            "file" => Ok(FileKind::File),
            "dir" => Ok(FileKind::Dir),
            "symlink" => Ok(FileKind::Symlink),
            "other" => Ok(FileKind::Other),
            k => Err(serde::de::Error::custom(format!(
                "`{k}` is not a file kind"
            ))),
        }
    }
}
