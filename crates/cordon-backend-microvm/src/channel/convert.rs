//! The guest's answers as the host's values: file kinds, exit statuses,
//! and errors (a guest's error kind, or an answer out of turn).

use cordon_sandbox::{ExitStatus, FileKind, SandboxError};
use cordon_vm_proto::{self as proto, Msg};

pub(super) fn kind(k: proto::Kind) -> FileKind {
    match k {
        proto::Kind::File => FileKind::File,
        proto::Kind::Dir => FileKind::Dir,
        proto::Kind::Symlink => FileKind::Symlink,
        proto::Kind::Other => FileKind::Other,
    }
}

pub(super) fn odd(m: &Msg) -> SandboxError {
    SandboxError::Failed {
        operation: "microvm call",
        reason: format!("the guest answered out of turn ({})", short(m)),
    }
}

pub(super) fn short(m: &Msg) -> String {
    let s = format!("{m:?}");
    s.chars().take(80).collect()
}

pub(super) fn guest_error(kind: proto::ErrKind, path: String, message: String) -> SandboxError {
    match kind {
        proto::ErrKind::NotFound => SandboxError::NotFound { path },
        proto::ErrKind::PathRefused => SandboxError::PathRefused {
            path,
            reason: message,
        },
        proto::ErrKind::NotRegularFile => SandboxError::NotRegularFile {
            path,
            found: message,
        },
        proto::ErrKind::Unavailable => SandboxError::Unavailable { reason: message },
        proto::ErrKind::Refused => SandboxError::Refused {
            reason: message,
            rules: Vec::new(),
        },
        proto::ErrKind::Failed => SandboxError::Failed {
            operation: "microvm guest",
            reason: if path.is_empty() {
                message
            } else {
                format!("`{path}`: {message}")
            },
        },
    }
}

pub(super) fn status(s: proto::Status) -> ExitStatus {
    match s {
        proto::Status::Code { code } => ExitStatus::Code(code),
        proto::Status::Signal { signal } => ExitStatus::Signal(signal),
        proto::Status::TimedOut => ExitStatus::TimedOut,
        proto::Status::Bound { bound } => ExitStatus::Bound {
            bound: match bound.as_str() {
                "max_memory" => "max_memory",
                "max_cpu_seconds" => "max_cpu_seconds",
                "max_processes" => "max_processes",
                "max_disk" => "max_disk",
                _ => "a bound of the sandbox",
            },
        },
    }
}
