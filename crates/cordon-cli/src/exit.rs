//! Every exit code `cordon` uses, and the one map from an error's kind to
//! its code. Commands that run a workload (`run`, `sandbox exec`) pass its
//! own status through; cordon's own codes are chosen not to be mistaken for
//! a usual program's.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (or the workload's own 0) |
//! | 1 | a check, test, kit or doctor found problems |
//! | 2 | a usage error: a flag, a file, spec or policy that does not load |
//! | 3 | a kit's backend cannot be attacked here (not built, or cannot run on this machine) |
//! | 124 | a resource bound (memory, CPU seconds, processes, wall clock) killed the workload |
//! | 125 | cordon refused (policy, floor, host configuration) or could not start or reach the sandbox (or it is gone); nothing of the workload ran |
//! | 128+N | signal N ended the workload |

use std::fmt::Display;
use std::process::ExitCode;

use cordon_sandbox::ErrorKind;

pub const PROBLEMS: u8 = 1;
pub const USAGE: u8 = 2;
pub const KIT_UNAVAILABLE: u8 = 3;
pub const BOUND: u8 = 124;
pub const REFUSED: u8 = 125;

/// The code for an error of `kind` that ended a command before (or
/// instead of) a workload's own status.
pub fn code_for(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Invalid => USAGE,
        // A sandbox that is gone is as unreachable as one that is refused:
        // nothing ran (a server answers 404; the CLI keeps one code).
        ErrorKind::Refused | ErrorKind::NotFound | ErrorKind::Unavailable | ErrorKind::Failed => {
            REFUSED
        }
    }
}

/// An error that knows its kind.
pub trait Kinded: Display {
    fn kind(&self) -> ErrorKind;
}

impl Kinded for cordon_sandbox::SandboxError {
    fn kind(&self) -> ErrorKind {
        cordon_sandbox::SandboxError::kind(self)
    }
}

impl Kinded for cordon_sandbox::RouterError {
    fn kind(&self) -> ErrorKind {
        cordon_sandbox::RouterError::kind(self)
    }
}

impl Kinded for cordon_sandbox::SpecError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Invalid
    }
}

impl Kinded for cordon_host::HostError {
    fn kind(&self) -> ErrorKind {
        cordon_host::HostError::kind(self)
    }
}

impl Kinded for cordon_host::state::StateError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Unavailable
    }
}

impl Kinded for cordon_sandbox::CollectError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Failed
    }
}

impl Kinded for cordon_sandbox::SinkError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Invalid
    }
}

/// Prints `error: {e}` and gives the code for its kind.
pub fn fail(e: impl Kinded) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(code_for(e.kind()))
}

/// Prints `error: {msg}`; cordon refused or could not do it (125).
pub fn refuse(msg: impl Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(REFUSED)
}

/// Prints `error: {msg}`; the caller's input is wrong (2).
pub fn usage(msg: impl Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(USAGE)
}
