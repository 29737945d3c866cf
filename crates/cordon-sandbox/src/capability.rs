//! What a backend can do and what a workload cannot run without.
//!
//! Silence here is a functionality claim, not a safety one: a backend that
//! declares nothing has [`CapabilitySet::DEFAULT`], exec and files in, which
//! the [`Sandbox`](crate::Sandbox) trait obliges anyway. [`ToolIdentity`]
//! is here too: the identity a host tool acts with, which the router's hard
//! stops name.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// One thing a sandbox can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Run a command.
    Exec,
    /// Run a snippet of code in an interpreter the image provides.
    RunCode,
    /// Dispatch calls out to functions in the host process (the `cordon-tools` crate).
    HostTools,
    /// Write files into the sandbox.
    FilesIn,
    /// Read declared outputs back out.
    FilesOut,
    /// Enumerate a directory inside the sandbox.
    FilesList,
    /// Reach the network (through the egress rule).
    Network,
    /// Save and restore the sandbox's state.
    Snapshot,
    /// Save the processes running in the sandbox with their memory, not
    /// only its files, and restore them running (`snapshot --memory`).
    SnapshotMemory,
    /// Make the work dir from a host directory, copy-on-write, and show
    /// and apply the changes (a spec's `workspace`).
    Workspace,
    /// Carry an identity of its own that services can authenticate.
    AttachedIdentity,
    /// Reach a port the workload listens on from the host, as the
    /// policy's ingress surface allows (`cordon sandbox port`).
    Ports,
}

impl Capability {
    pub const ALL: [Capability; 12] = [
        Capability::Exec,
        Capability::RunCode,
        Capability::HostTools,
        Capability::FilesIn,
        Capability::FilesOut,
        Capability::FilesList,
        Capability::Network,
        Capability::Snapshot,
        Capability::SnapshotMemory,
        Capability::Workspace,
        Capability::AttachedIdentity,
        Capability::Ports,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Exec => "exec",
            Capability::RunCode => "run_code",
            Capability::HostTools => "host_tools",
            Capability::FilesIn => "files_in",
            Capability::FilesOut => "files_out",
            Capability::FilesList => "files_list",
            Capability::Network => "network",
            Capability::Snapshot => "snapshot",
            Capability::SnapshotMemory => "snapshot_memory",
            Capability::Workspace => "workspace",
            Capability::AttachedIdentity => "attached_identity",
            Capability::Ports => "ports",
        }
    }

    fn spellings() -> String {
        Capability::ALL
            .iter()
            .map(|c| format!("`{}`", c.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A capability name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    #[error("`{raw}` is not a capability; write one of {valid}", valid = Capability::spellings())]
    Unknown { raw: String },
}

impl FromStr for Capability {
    type Err = CapabilityError;

    fn from_str(s: &str) -> Result<Capability, CapabilityError> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| CapabilityError::Unknown { raw: s.to_string() })
    }
}

/// A set of capabilities, iterated in declaration order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CapabilitySet(BTreeSet<Capability>);

impl CapabilitySet {
    /// What a backend that declares nothing has: exec and files in.
    pub const DEFAULT: [Capability; 2] = [Capability::Exec, Capability::FilesIn];

    pub fn empty() -> CapabilitySet {
        CapabilitySet(BTreeSet::new())
    }

    /// Exec and files in, the backend default.
    pub fn default_for_backend() -> CapabilitySet {
        CapabilitySet::DEFAULT.into_iter().collect()
    }

    pub fn contains(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }

    pub fn insert(&mut self, c: Capability) -> bool {
        self.0.insert(c)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }

    /// What `self` has that `other` does not.
    pub fn missing_from(&self, other: &CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0.difference(&other.0).copied().collect())
    }

    /// What both have.
    pub fn intersection(&self, other: &CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0.intersection(&other.0).copied().collect())
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> CapabilitySet {
        CapabilitySet(iter.into_iter().collect())
    }
}

impl fmt::Display for CapabilitySet {
    /// `` `exec`, `files_in` ``, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let parts: Vec<String> = self.0.iter().map(|c| format!("`{c}`")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// Whose authority a host tool acts with: what a tool declares (the
/// `cordon-tools` crate) and what a host may deny outright
/// ([`RouterBuilder::deny_identity`](crate::RouterBuilder::deny_identity)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolIdentity {
    /// The application's own credentials: its full authority. Not a safe
    /// option, only a declared one.
    App,
    /// The end user's delegated credentials. Declarable, not servable.
    User,
}

impl fmt::Display for ToolIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ToolIdentity::App => "app",
            ToolIdentity::User => "user",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip_and_near_misses_fail() {
        for c in Capability::ALL {
            assert_eq!(c.as_str().parse::<Capability>(), Ok(c));
        }
        for raw in ["EXEC", "files-in", "host tools", ""] {
            assert!(raw.parse::<Capability>().is_err(), "{raw:?}");
        }
    }

    #[test]
    fn missing_is_a_difference() {
        let want: CapabilitySet = [Capability::Exec, Capability::Network]
            .into_iter()
            .collect();
        let have = CapabilitySet::default_for_backend();
        assert_eq!(want.missing_from(&have).to_string(), "`network`");
        assert!(have.missing_from(&have).is_empty());
    }
}
