//! The isolation ladder: a claim about the boundary a backend draws.
//!
//! A rung is ordered weakest to strongest, so a floor is a comparison. A
//! string names a rung only in one of the seven exact spellings; anything
//! else is refused, never guessed, because nothing here can tell on which
//! side of a floor an unknown boundary falls.

use std::fmt;
use std::str::FromStr;

/// How strong a boundary a backend draws, weakest first. The derived order
/// is the ladder's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isolation {
    /// No boundary: the workload runs in the host process with the host's
    /// authority.
    None,
    /// A software boundary inside the host process (a restricted
    /// interpreter, a WASM runtime's fault isolation).
    Runtime,
    /// A separate OS process: its own address space, sharing the kernel and
    /// the filesystem with the host. A real boundary, if a thin one.
    Process,
    /// Shared-kernel namespaces and cgroups.
    Container,
    /// Syscalls intercepted by a userspace kernel (gVisor-class).
    HardenedContainer,
    /// A hypervisor boundary with a minimal or absent guest OS and no ambient
    /// identity reachable from inside. The default floor.
    Microvm,
    /// A dedicated, full VM provisioned for the workload.
    Vm,
}

impl Isolation {
    /// Every rung, weakest first.
    pub const ALL: [Isolation; 7] = [
        Isolation::None,
        Isolation::Runtime,
        Isolation::Process,
        Isolation::Container,
        Isolation::HardenedContainer,
        Isolation::Microvm,
        Isolation::Vm,
    ];

    /// The floor a host gets when it configures none.
    pub const DEFAULT_FLOOR: Isolation = Isolation::Microvm;

    /// The one spelling of this rung.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Runtime => "runtime",
            Isolation::Process => "process",
            Isolation::Container => "container",
            Isolation::HardenedContainer => "hardened_container",
            Isolation::Microvm => "microvm",
            Isolation::Vm => "vm",
        }
    }

    /// The valid spellings, weakest first, for error messages.
    pub fn spellings() -> String {
        Isolation::ALL
            .iter()
            .map(|i| format!("`{}`", i.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rung that cannot be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsolationError {
    /// A string that is not one of the seven spellings.
    #[error("{}", unknown_rung(raw))]
    Unknown { raw: String },
    /// A backend that cannot say which rung its weakest configuration on
    /// this machine provides.
    #[error(
        "the rung cannot be named: {reason}; a backend declares the rung its weakest configuration on this machine actually provides"
    )]
    Unnamed { reason: String },
}

/// `` `contaner` is not an isolation rung; did you mean `container`? ... ``
fn unknown_rung(raw: &str) -> String {
    // A word too short to have been meant as one of them gets no guess.
    let guess = (raw.chars().count() >= 3)
        .then(|| cordon_policy::vocab::did_you_mean(raw, Isolation::ALL.iter().map(|i| i.as_str())))
        .flatten()
        .map(|g| format!(" (did you mean `{g}`?)"))
        .unwrap_or_default();
    format!(
        "`{raw}` is not an isolation rung{guess}; write one of {} (weakest to strongest, exact spelling)",
        Isolation::spellings()
    )
}

impl FromStr for Isolation {
    type Err = IsolationError;

    /// Exactly the seven spellings: no case folding, no trimming, no aliases.
    fn from_str(s: &str) -> Result<Isolation, IsolationError> {
        Isolation::ALL
            .into_iter()
            .find(|i| i.as_str() == s)
            .ok_or_else(|| IsolationError::Unknown { raw: s.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_rung_gets_a_suggestion_and_nonsense_does_not() {
        for (raw, want) in [
            ("contaner", "container"),
            ("Container", "container"),
            ("microVM", "microvm"),
        ] {
            let e = raw.parse::<Isolation>().expect_err(raw).to_string();
            assert!(e.contains(&format!("did you mean `{want}`?")), "{e}");
            assert!(e.contains("write one of `none`"), "{e}");
        }
        let e = "sandboxy"
            .parse::<Isolation>()
            .expect_err("nonsense")
            .to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn the_ladder_is_ordered_weakest_first() {
        for pair in Isolation::ALL.windows(2) {
            assert!(pair[0] < pair[1], "{} !< {}", pair[0], pair[1]);
        }
        assert!(Isolation::Runtime < Isolation::Process);
        assert!(Isolation::Process < Isolation::Container);
    }

    #[test]
    fn every_spelling_round_trips() {
        for i in Isolation::ALL {
            assert_eq!(i.as_str().parse::<Isolation>(), Ok(i));
        }
    }

    #[test]
    fn near_misses_are_refused() {
        for raw in [
            "",
            "MICROVM",
            "Microvm",
            " microvm",
            "microvm ",
            "micro_vm",
            "micro-vm",
            "hardened-container",
            "gvisor",
            "proc",
            "VM",
            "none\n",
        ] {
            assert!(raw.parse::<Isolation>().is_err(), "{raw:?} was accepted");
        }
    }
}
