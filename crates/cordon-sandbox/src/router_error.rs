//! What the router refuses with: the error of an acquire or a dispose, each
//! backend's refusals, and the field of the spec a bound names.

use crate::backend::{BackendError, SandboxError};
use crate::capability::CapabilitySet;
use crate::capability::ToolIdentity;
use crate::isolation::{Isolation, IsolationError};
use crate::key::{KeyError, SandboxKey};
use crate::secrets::SecretError;
use cordon_policy::Bound;
use std::fmt;

/// Why one backend cannot serve one spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Below the effective floor.
    BelowFloor { rung: Isolation, floor: Isolation },
    /// Lacks capabilities the spec requires.
    Missing { capabilities: CapabilitySet },
    /// Cannot confine egress at all (or declared nothing, which reads the same).
    EgressUnrestricted,
    /// Cannot materialise the spec's image.
    Image { image: String, reason: String },
    /// The snapshot's processes were saved by another backend, in its
    /// own form.
    SavedBy { backend: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BelowFloor { rung, floor } => {
                write!(
                    f,
                    "its rung `{rung}` is below the effective floor `{floor}`"
                )
            }
            Refusal::Missing { capabilities } => {
                write!(f, "it does not declare {capabilities}")
            }
            Refusal::EgressUnrestricted => f.write_str(
                "its egress is `unrestricted` (or undeclared), so it cannot hold any allowlist",
            ),
            Refusal::Image { image, reason } => {
                write!(f, "it cannot run the image `{image}`: {reason}")
            }
            Refusal::SavedBy { backend } => write!(
                f,
                "the snapshot's processes were saved by `{backend}`, in its own form, and only `{backend}` starts them again (name it with `--backend {backend}`, or restore a snapshot of the files)"
            ),
        }
    }
}

/// Each backend the router holds and why it cannot serve, in the host's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals(pub Vec<(String, Vec<Refusal>)>);

impl fmt::Display for Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, why) in &self.0 {
            let why: Vec<String> = why.iter().map(ToString::to_string).collect();
            write!(f, "\n  - `{name}`: {}", why.join("; "))?;
        }
        Ok(())
    }
}

/// A router that is refused, or a sandbox it will not hand out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    #[error("a router needs at least one backend; give it the backends this host may use, strongest first")]
    NoBackends,
    #[error("two backends are named `{name}`; give each a distinct name so refusals and `cordon doctor` can tell them apart")]
    DuplicateBackend { name: String },
    #[error("backend `{backend}` declares `{rung}`, below this host's floor `{floor}`; give the router only backends at `{floor}` or stronger, or lower the floor explicitly where that boundary is enough (`--min-isolation {rung}`, `min_isolation: {rung}` or `CORDON_MIN_ISOLATION={rung}`)")]
    BelowFloor {
        backend: String,
        rung: Isolation,
        floor: Isolation,
    },
    #[error("backend `{backend}` is refused against the floor `{floor}`: {source}")]
    UnnamedRung {
        backend: String,
        floor: Isolation,
        source: IsolationError,
    },
    #[error(transparent)]
    Caller { source: KeyError },
    #[error("spec `{kind}` requires {capabilities}, which this host denies (`denied_capabilities`); drop it from the spec's `requires`, or change the host's configuration")]
    DeniedCapability {
        kind: String,
        capabilities: CapabilitySet,
    },
    /// A dispose that did not dispose of everything it found: what went,
    /// and why the rest did not. Never reported as a success.
    #[error("{disposed} disposed, and not all: {}\nhelp: the sandboxes left keep running; dispose again, or run `cordon sandbox gc`", failures.join("; "))]
    NotDisposed {
        disposed: usize,
        failures: Vec<String>,
    },
    #[error("no backend can serve spec `{kind}` under the floor `{floor}`:{refusals}\nchange the spec, or give the router a backend that passes every check; cordon does not fall back to a weaker one")]
    NoBackendQualifies {
        kind: String,
        floor: Isolation,
        refusals: Refusals,
    },
    #[error(
        "spec `{kind}` asks for `{field}` of {shown}, above the policy's `{key}` of {max} for identity `{identity}`; ask for at most {max}, or have the policy raised",
        field = ask_field(*bound),
        shown = bound.show(*asked),
        key = bound.key(),
        max = bound.show(*limit)
    )]
    AboveBound {
        kind: String,
        bound: Bound,
        asked: u64,
        limit: u64,
        identity: String,
    },
    #[error("egress entry `{entry}` of spec `{kind}` is denied by the policy for identity `{identity}`: {why}; drop the entry, or have the policy allow it")]
    EgressDenied {
        kind: String,
        entry: String,
        identity: String,
        why: String,
        /// The deciding rules, `file:line` (none: no rule allowed it).
        rules: Box<[String]>,
    },
    #[error("secret `{name}` of spec `{kind}` is refused by the policy for identity `{identity}`: {why}; drop it from the spec's `secrets`, or have the policy grant it")]
    SecretDenied {
        kind: String,
        name: String,
        identity: String,
        why: String,
        /// The deciding rules, `file:line` (none: no rule granted it).
        rules: Box<[String]>,
    },
    #[error("secret `{name}` of spec `{kind}` is asked for as a placeholder toward `{host}`, which the policy does not inspect: the egress proxy could neither see its requests nor put the value in them; add `{host}` to `egress.inspect` in the root policy, or ask for the secret as a file")]
    PlaceholderNotInspected {
        kind: String,
        name: String,
        host: String,
    },
    #[error(transparent)]
    Secret { source: SecretError },
    #[error("sandbox `{key}` exists but was created for a different {what}; it is not handed back: dispose of it (`Router::dispose` or the scope) to create a new one, or use another `agent_dir`")]
    Mismatch { key: SandboxKey, what: String },
    /// A warm pool's claim found a sandbox at the caller's key already:
    /// nothing was moved (the caller keeps theirs).
    #[error("sandbox `{key}` exists already; no other is moved to its key")]
    KeyTaken { key: String },
    /// A warm pool's claim could not move the sandbox.
    #[error("sandbox `{from}` could not be moved to `{to}`: {reason}")]
    Rekey {
        /// The keys, as they print.
        from: String,
        to: String,
        reason: String,
    },
    #[error("backend `{backend}`: {source}; it is not retried on another backend")]
    Backend {
        backend: String,
        source: BackendError,
    },
    #[error("backend `{backend}` could not deliver secret `{name}`: {source}; the sandbox is left without it and not handed out")]
    Delivery {
        backend: String,
        name: String,
        source: SandboxError,
    },
    #[error("host tools are denied on this host (`denied_capabilities` holds `host_tools`); register none, or change the host's configuration")]
    ToolsDenied,
    #[error("host tool `{tool}` acts as `{identity}`, which this host denies (`denied_identities`); unregister it, or change the host's configuration")]
    ToolIdentityDenied {
        tool: String,
        identity: ToolIdentity,
    },
}

impl RouterError {
    /// The kind of failure, for exit codes and HTTP statuses.
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            RouterError::NoBackends
            | RouterError::DuplicateBackend { .. }
            | RouterError::BelowFloor { .. }
            | RouterError::UnnamedRung { .. } => ErrorKind::Invalid,
            RouterError::Caller { .. } => ErrorKind::Invalid,
            RouterError::DeniedCapability { .. }
            | RouterError::AboveBound { .. }
            | RouterError::EgressDenied { .. }
            | RouterError::SecretDenied { .. }
            | RouterError::PlaceholderNotInspected { .. }
            | RouterError::Mismatch { .. }
            | RouterError::KeyTaken { .. }
            | RouterError::ToolsDenied
            | RouterError::ToolIdentityDenied { .. } => ErrorKind::Refused,
            RouterError::NoBackendQualifies { .. } => ErrorKind::Unavailable,
            RouterError::Secret { .. }
            | RouterError::Delivery { .. }
            | RouterError::NotDisposed { .. }
            | RouterError::Rekey { .. } => ErrorKind::Failed,
            RouterError::Backend { source, .. } => source.kind(),
        }
    }

    /// When the policy refused: the surface (`egress`, `compute`,
    /// `secret`) and the rules that decided (`file:line`; a bound's key for
    /// a resource ask; none when no rule allowed it). For counting denials
    /// by surface and rule.
    pub fn denial(&self) -> Option<(&'static str, Vec<String>)> {
        match self {
            RouterError::AboveBound { bound, .. } => {
                Some(("compute", vec![bound.key().to_string()]))
            }
            RouterError::EgressDenied { rules, .. } => Some(("egress", rules.to_vec())),
            RouterError::SecretDenied { rules, .. } => Some(("secret", rules.to_vec())),
            _ => None,
        }
    }
}

/// The spec field that asks for what `bound` limits.
fn ask_field(bound: Bound) -> &'static str {
    match bound {
        Bound::MaxMemory => "resources.memory",
        Bound::MaxProcesses => "resources.processes",
        Bound::MaxCpuSeconds => "resources.cpu_seconds",
        Bound::MaxWallSeconds => "resources.wall_seconds",
        Bound::MaxResponseBytes => "max_response_bytes",
        Bound::MaxDisk => "resources.disk",
    }
}

impl From<KeyError> for RouterError {
    fn from(source: KeyError) -> RouterError {
        RouterError::Caller { source }
    }
}

/// An egress refusal's reason, with the way out when the root is
/// `cordon:default` and nothing allowed the entry (that root allows no
/// egress, and no later layer can widen it).
pub(crate) fn with_egress_hint(why: String, policy: &cordon_policy::Policy) -> String {
    let default = cordon_policy::resolve::DEFAULT_NAME;
    let root_is_default = policy.layers.first().is_some_and(|l| &*l.origin == default);
    if root_is_default && why.starts_with("no allow rule") {
        format!("{why} (the root `{default}` allows no egress, and later layers only narrow: extend `cordon:spec-egress` instead, which allows the hosts a spec names)")
    } else {
        why
    }
}
