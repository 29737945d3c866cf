//! Where granted secrets come from, and where they land.
//!
//! The router decides each secret a spec names on the policy's secret
//! surface at acquire — only an allow grants; undetermined is deny — then
//! reads it from a host-side [`SecretProvider`] and writes it into the
//! sandbox as a read-only file under [`SECRETS_DIR`]. Never through the
//! environment (which every child process inherits and many tools log),
//! never through anything the model reads.
//!
//! The protocol holds what the router and a backend need: the trait, the
//! value, its errors, and where a secret lands. The concrete stores (a
//! directory of files, a command) are the host's: `cordon_host::secrets`.

use std::fmt;

use crate::spec::SecretName;

/// The guest directory granted secrets are written under: the secret
/// `team-a/db-password` is the file `/run/cordon/secrets/team-a/db-password`.
pub const SECRETS_DIR: &str = "/run/cordon/secrets";

/// The mode of a delivered secret: read-only, owner only.
pub const SECRET_MODE: u32 = 0o400;

/// The largest secret read.
pub const MAX_SECRET_BYTES: u64 = 1 << 20;

/// The guest path of a secret.
pub fn secret_path(name: &SecretName) -> String {
    format!("{SECRETS_DIR}/{name}")
}

/// A secret's bytes. `Debug` does not show them.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Vec<u8>);

impl SecretValue {
    pub fn new(bytes: Vec<u8>) -> SecretValue {
        SecretValue(bytes)
    }
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretValue({} bytes, redacted)", self.0.len())
    }
}

/// A secret brokered at the egress proxy: the workload holds
/// `placeholder` (in the secret's file), never `value`; the proxy puts the
/// value in its place only in a request to one of `to` that the policy's
/// secret surface allows with every destination fact known.
#[derive(Clone, PartialEq, Eq)]
pub struct Brokered {
    pub name: SecretName,
    pub placeholder: String,
    pub value: SecretValue,
    /// Canonical host names.
    pub to: Vec<String>,
}

impl fmt::Debug for Brokered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Brokered")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("value", &self.value)
            .field("to", &self.to)
            .finish()
    }
}

/// The prefix of every placeholder: what the proxy looks for.
pub const PLACEHOLDER_PREFIX: &str = "cordon-secret-";

/// A fresh placeholder: the prefix and 128 random bits, hex.
pub fn new_placeholder() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("the system's randomness: {e}"))?;
    Ok(format!(
        "{PLACEHOLDER_PREFIX}{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    ))
}

/// A secret that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret `{name}` is not in the secret store; add it on the host, or drop it from the spec's `secrets`")]
    Missing { name: String },
    #[error("secret `{name}` is refused by the store: {reason}")]
    Refused { name: String, reason: String },
    #[error("no secret store is configured, so secret `{name}` cannot be delivered\nhelp: give the host a secret store: `--secrets-dir DIR` (`cordon run`, `cordon sandbox up`) or `secrets: {{dir: DIR}}` (`cordon serve`'s configuration), a directory holding each secret as a file (`DIR/{name}`); a library host passes a provider to `RouterBuilder::secrets`")]
    NoProvider { name: String },
}

/// A host-side store of secrets.
pub trait SecretProvider: Send + Sync {
    fn read(&self, name: &SecretName) -> Result<SecretValue, SecretError>;
}
