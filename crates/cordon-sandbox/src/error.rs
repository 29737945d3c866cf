//! What kind of failure an error is, across the protocol: the one mapping
//! every surface reads — the CLI to its exit codes, a server to its HTTP
//! statuses — so none of them has to tell a refusal from an outage by
//! reading a message.

use serde::{Deserialize, Serialize};

/// The kind of an error at the protocol boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The policy or the host's configuration refuses it (with why);
    /// nothing of the workload ran. HTTP 403.
    Refused,
    /// The request itself is wrong: a spec, a flag, a path, an empty
    /// command. The caller fixes it. HTTP 400.
    Invalid,
    /// What it names does not exist (a sandbox, a file in one). HTTP 404.
    NotFound,
    /// This machine or backend cannot do it now (no backend meets the
    /// floor, a mechanism is missing, the sandbox stopped answering). HTTP 503.
    Unavailable,
    /// A backend failed while doing it. HTTP 500.
    Failed,
}

impl ErrorKind {
    /// The HTTP status a server answers with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Refused => 403,
            ErrorKind::Invalid => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Unavailable => 503,
            ErrorKind::Failed => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Refused => "refused",
            ErrorKind::Invalid => "invalid",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
