//! Which sandbox a call addresses, and on whose behalf.
//!
//! A [`SandboxKey`] has no public constructor: the only way to get one is
//! [`CallerContext::resolve`], which calls closures the host wrote over its
//! own request context. A key a caller could pass in is a key a model could
//! pass in, and that would let one conversation address another's sandbox.
//! The [`Identity`] the policy sees is read by the same call from the same
//! request — never from a spec or a tool argument.
//!
//! ```compile_fail,E0451
//! // A key cannot be written by hand.
//! let key = cordon_sandbox::SandboxKey {
//!     scope: "tenant-2".into(),
//!     thread_id: "t".into(),
//!     agent_dir: "a".into(),
//! };
//! ```

use std::fmt;
use std::sync::Arc;

use cordon_policy::Identity;

/// Addresses one warm sandbox: a tenant's scope, a conversation thread, and
/// the agent directory within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxKey {
    scope: String,
    thread_id: String,
    agent_dir: String,
}

impl SandboxKey {
    pub fn scope(&self) -> &str {
        &self.scope
    }
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }
    pub fn agent_dir(&self) -> &str {
        &self.agent_dir
    }
}

impl fmt::Display for SandboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.scope, self.thread_id, self.agent_dir)
    }
}

/// A key part or identity the host's request context could not supply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the caller context gave an empty `{part}`; the host's request context must supply it (an empty part would share one sandbox among every caller that lacks it)")]
    EmptyPart { part: &'static str },
    #[error("the caller context gave a `{part}` holding `/`, a control character or more than 256 bytes (`{value}`); the host must map its request context to a plain identifier")]
    BadPart { part: &'static str, value: String },
    #[error("the caller context gave an identity with an empty namespace; the host must set it from its authenticated request")]
    NoIdentity,
}

type Read<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// How a host tells cordon who is calling: closures over the host's own
/// request context, read at the moment of each call.
#[derive(Clone)]
pub struct CallerContext {
    scope: Read<String>,
    thread_id: Read<String>,
    agent_dir: Read<String>,
    identity: Read<Identity>,
}

impl fmt::Debug for CallerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallerContext { .. }")
    }
}

/// What one call resolved: the key and the identity, read together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub key: SandboxKey,
    pub identity: Identity,
}

fn part(name: &'static str, value: String) -> Result<String, KeyError> {
    if value.is_empty() {
        return Err(KeyError::EmptyPart { part: name });
    }
    if value.len() > 256 || value.contains('/') || value.chars().any(char::is_control) {
        return Err(KeyError::BadPart { part: name, value });
    }
    Ok(value)
}

impl CallerContext {
    /// Each closure reads the host's request context when called; none may
    /// return a value a model or a tool argument supplied. `identity.attested`
    /// in particular comes from the host's configuration of its credentials.
    pub fn new(
        scope: impl Fn() -> String + Send + Sync + 'static,
        thread_id: impl Fn() -> String + Send + Sync + 'static,
        agent_dir: impl Fn() -> String + Send + Sync + 'static,
        identity: impl Fn() -> Identity + Send + Sync + 'static,
    ) -> CallerContext {
        CallerContext {
            scope: Arc::new(scope),
            thread_id: Arc::new(thread_id),
            agent_dir: Arc::new(agent_dir),
            identity: Arc::new(identity),
        }
    }

    /// Reads the key and the identity now. Empty parts are refused rather
    /// than shared.
    pub fn resolve(&self) -> Result<Caller, KeyError> {
        let key = SandboxKey {
            scope: part("scope", (self.scope)())?,
            thread_id: part("thread_id", (self.thread_id)())?,
            agent_dir: part("agent_dir", (self.agent_dir)())?,
        };
        let identity = (self.identity)();
        if identity.namespace.is_empty() {
            return Err(KeyError::NoIdentity);
        }
        Ok(Caller { key, identity })
    }
}

/// A file-name-safe id for a key's parts (SHA-256 over their lengths and
/// bytes, hex, 24 digits): the same for the same key in every process.
pub fn key_id(scope: &str, thread: &str, agent_dir: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [scope, thread, agent_dir] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl SandboxKey {
    /// [`key_id`] of this key.
    pub fn id(&self) -> String {
        key_id(self.scope(), self.thread_id(), self.agent_dir())
    }
}
