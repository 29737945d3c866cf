//! What travels between an acquirer, a keeper and its clients: the
//! keeper's brief (on its stdin, as JSON) and the requests and replies on
//! its socket (`SOCK_SEQPACKET`, one JSON message each, descriptors with
//! `SCM_RIGHTS`). Every shape refuses unknown fields.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_sandbox::{
    BackendSetup, ErrorKind, ExitStatus, Limits, Provenance, SandboxError, TtySize,
};
use serde::{Deserialize, Serialize};

use crate::state::KeyRecord;

/// Everything a keeper needs to build its sandbox: which registered backend,
/// the setup it is built from, and the typed provenance and limits the
/// acquirer's router decided, so the keeper parses no spec and re-derives
/// nothing. It loads the policy once (from `policy_file`) and refuses to
/// serve if its digest is not the acquirer's.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// [`cordon_sandbox::wire::WIRE_VERSION`]; another is refused.
    pub version: u32,
    pub state_dir: PathBuf,
    pub handle: String,
    pub key: KeyRecord,
    pub owner: String,
    /// A name in the keeper's registry.
    pub backend: String,
    pub setup: BackendSetup,
    /// `None`: `cordon:default`.
    pub policy_file: Option<PathBuf>,
    pub provenance: Provenance,
    pub limits: Limits,
    pub idle_timeout: u64,
    pub max_age: u64,
}

/// Client → keeper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Request {
    Ping,
    /// Descriptors attached: stdin (read end), stdout and stderr (write
    /// ends). The keeper copies between them and the exec; when the
    /// connection hangs up before the exec ended, the exec is killed.
    Exec {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        timeout_secs: u64,
        /// On a terminal of the sandbox's own of this size (output all on
        /// stdout).
        #[serde(default)]
        tty: Option<TtySize>,
    },
    /// On an exec's connection, after `Exec`: its terminal's new size.
    Resize {
        size: TtySize,
    },
    Dispose,
}

/// How an exec ended, on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Status {
    Code(i32),
    Signal(i32),
    TimedOut,
    Bound(String),
}

/// Keeper → client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Reply {
    Pong {
        handle: String,
    },
    Done(Status),
    /// The exec did not run (or did not run to its end): what kind of
    /// failure, and the whole message (a refusal's rules included).
    Error {
        kind: ErrorKind,
        message: String,
    },
    Disposed,
}

pub(crate) fn status_to_wire(s: ExitStatus) -> Status {
    match s {
        ExitStatus::Code(c) => Status::Code(c),
        ExitStatus::Signal(s) => Status::Signal(s),
        ExitStatus::TimedOut => Status::TimedOut,
        ExitStatus::Bound { bound } => Status::Bound(bound.to_string()),
    }
}

pub(crate) fn status_from_wire(s: Status) -> ExitStatus {
    match s {
        Status::Code(c) => ExitStatus::Code(c),
        Status::Signal(s) => ExitStatus::Signal(s),
        Status::TimedOut => ExitStatus::TimedOut,
        Status::Bound(b) => ExitStatus::Bound {
            bound: match b.as_str() {
                "max_memory" => "max_memory",
                "max_cpu_seconds" => "max_cpu_seconds",
                "max_processes" => "max_processes",
                "max_disk" => "max_disk",
                _ => "unknown bound",
            },
        },
    }
}

pub(crate) fn error_to_wire(e: &SandboxError) -> Reply {
    Reply::Error {
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// The error a client reports for a keeper's [`Reply::Error`], of the same
/// kind.
pub(crate) fn error_from_wire(kind: ErrorKind, message: String) -> SandboxError {
    match kind {
        ErrorKind::Refused => SandboxError::Refused {
            reason: message,
            rules: Vec::new(),
        },
        ErrorKind::Unavailable => SandboxError::Unavailable { reason: message },
        ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Failed => SandboxError::Failed {
            operation: "exec",
            reason: message,
        },
    }
}
