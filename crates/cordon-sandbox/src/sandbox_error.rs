//! [`SandboxError`], the failure of one call on a live sandbox: below both
//! the [`crate::Sandbox`] trait and the exec handle ([`crate::exec`]) that
//! report it.

use crate::capability::Capability;
use crate::error::ErrorKind;

/// A failure of one call on a live sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("this sandbox does not serve `{capability}`; pick a backend that declares it and list it in the spec's `requires`")]
    Unsupported { capability: Capability },
    #[error("`{path}` does not exist in the sandbox")]
    NotFound { path: String },
    #[error("`{path}` is refused: {reason}")]
    PathRefused { path: String, reason: String },
    /// A declared output (or a host-side write target) that is not a
    /// regular file: a directory, a FIFO, a device, a socket.
    #[error("`{path}` is a {found}, not a regular file; cordon reads and writes only regular files there")]
    NotRegularFile { path: String, found: String },
    /// The kernel lacks what confinement needs; nothing falls back to a
    /// check that can be raced.
    #[error("cannot confine `{path}`: {reason}; run on Linux 5.6 or later (`openat2`), cordon does not fall back to a racy check")]
    ConfinementUnavailable { path: String, reason: String },
    #[error("{operation} failed: {reason}")]
    Failed {
        operation: &'static str,
        reason: String,
    },
    /// The policy refuses it before anything runs: why, and the rules that
    /// decided (`file:line  source  (name)`).
    #[error("{reason}{}", rules_shown(rules))]
    Refused { reason: String, rules: Vec<String> },
    /// The sandbox cannot do it now: it is gone, stopped answering, or
    /// lacks a mechanism.
    #[error("{reason}")]
    Unavailable { reason: String },
    /// The request cannot be done as asked (reported by another process,
    /// a keeper, that said so): the caller fixes it.
    #[error("{reason}")]
    Invalid { reason: String },
}

/// How the compute guard's refusal of an exec begins ([`crate::guard`]).
pub const POLICY_REFUSES: &str = "the policy refuses `";

fn rules_shown(rules: &[String]) -> String {
    rules.iter().map(|r| format!("\n  {r}")).collect()
}

impl SandboxError {
    /// When the policy refused an exec (the compute guard): the deciding
    /// rules, `file:line` (none when no allow rule matched), read from the
    /// refusal's `rules` (a kept sandbox's keeper sends them apart from the
    /// message). For counting denials by rule.
    pub fn denied_rules(&self) -> Option<Vec<String>> {
        let SandboxError::Refused { reason, rules } = self else {
            return None;
        };
        if !reason.starts_with(POLICY_REFUSES) {
            return None;
        }
        Some(
            rules
                .iter()
                .map(String::as_str)
                .filter_map(|l| l.trim_start().strip_prefix("denied by: "))
                .map(|place| place.split("  ").next().unwrap_or(place).to_string())
                .collect(),
        )
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            SandboxError::Unsupported { .. } => ErrorKind::Invalid,
            SandboxError::NotFound { .. } => ErrorKind::NotFound,
            SandboxError::PathRefused { .. }
            | SandboxError::NotRegularFile { .. }
            | SandboxError::Invalid { .. } => ErrorKind::Invalid,
            SandboxError::ConfinementUnavailable { .. } | SandboxError::Unavailable { .. } => {
                ErrorKind::Unavailable
            }
            SandboxError::Failed { .. } => ErrorKind::Failed,
            SandboxError::Refused { .. } => ErrorKind::Refused,
        }
    }
}
