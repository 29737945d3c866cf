//! Every exit code `cordon` uses, and the one map from an error's kind to
//! its code. Commands that run a workload (`run`, `sandbox exec`) pass its
//! own status through, and every failure of cordon's own is then 124 or
//! 125 (a usage error too, like `env` and `timeout` do), so an agent host
//! can always tell the workload's status from cordon's: 124 and 125 are
//! cordon's, anything else is the workload's. The other commands run no
//! workload and keep 1 and 2 for their findings and usage errors.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (or the workload's own 0) |
//! | 1 | a check, test, kit or doctor found problems (never from `run` or `sandbox exec`) |
//! | 2 | a usage error: a flag, a file, spec or policy that does not load (`run` and `sandbox exec`: 125) |
//! | 3 | a kit's backend cannot be attacked here (not built, or cannot run on this machine) |
//! | 124 | a resource bound (memory, CPU seconds, processes, wall clock) killed the workload |
//! | 125 | cordon refused (policy, floor, host configuration) or could not start or reach the sandbox (or it is gone); nothing of the workload ran |
//! | 128+N | signal N ended the workload |

use std::fmt::Display;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use cordon_sandbox::ErrorKind;

pub const PROBLEMS: u8 = 1;
pub const USAGE: u8 = 2;
pub const KIT_UNAVAILABLE: u8 = 3;
pub const BOUND: u8 = 124;
pub const REFUSED: u8 = 125;

static WORKLOAD_STATUS: AtomicBool = AtomicBool::new(false);

/// Marks this process as one whose exit code is a workload's own status
/// (`run`, `sandbox exec`): from here on a usage error is 125, not 2.
pub fn passing_workload_status() {
    WORKLOAD_STATUS.store(true, Ordering::Relaxed);
}

/// Whether this process passes a workload's status through.
pub fn passes_workload_status() -> bool {
    WORKLOAD_STATUS.load(Ordering::Relaxed)
}

/// The code of a usage error in this process (2, or 125 where the exit
/// code is a workload's).
pub fn usage_code() -> u8 {
    if passes_workload_status() {
        REFUSED
    } else {
        USAGE
    }
}

/// The code for an error of `kind` that ended a command before (or
/// instead of) a workload's own status.
pub fn code_for(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Invalid => usage_code(),
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
        match self {
            cordon_host::state::StateError::NotAHandle(_) => ErrorKind::Invalid,
            _ => ErrorKind::Unavailable,
        }
    }
}

impl Kinded for cordon_collect::CollectError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Failed
    }
}

impl Kinded for cordon_sandbox::SinkError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Invalid
    }
}

/// Prints `error: {msg}` (and, under `--format json`, the error line on
/// stdout); gives `code`.
fn report(code: u8, msg: &dyn Display) -> ExitCode {
    eprintln!("error: {msg}");
    if crate::json_out::on() {
        crate::json_out::error(code, &msg.to_string());
    }
    ExitCode::from(code)
}

/// Prints `error: {e}` and gives the code for its kind.
pub fn fail(e: impl Kinded) -> ExitCode {
    report(code_for(e.kind()), &e)
}

/// Prints `error: {msg}`; cordon refused or could not do it (125).
pub fn refuse(msg: impl Display) -> ExitCode {
    report(REFUSED, &msg)
}

/// Prints `error: {msg}`; the caller's input is wrong (2, or 125 where
/// the exit code is a workload's).
pub fn usage(msg: impl Display) -> ExitCode {
    report(usage_code(), &msg)
}

/// `cordon run` / `cordon sandbox exec`, from the raw arguments: the
/// commands whose exit code is a workload's own status (known before the
/// arguments are parsed, so a parse error is coded by the same rule).
pub fn is_workload_command(args: &[std::ffi::OsString]) -> bool {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    word(1) == Some("run") || (word(1) == Some("sandbox") && word(2) == Some("exec"))
}

/// A failed parse of the arguments: clap's message, a hint where a
/// workload command's command was given without `--`, and the code (0 for
/// `--help` and `--version`).
pub fn parse_failed(e: &clap::Error, args: &[std::ffi::OsString]) -> ExitCode {
    let _ = e.print();
    if e.exit_code() == 0 {
        return ExitCode::SUCCESS;
    }
    if passes_workload_status() && e.kind() == clap::error::ErrorKind::UnknownArgument {
        if let Some(clap::error::ContextValue::String(arg)) =
            e.get(clap::error::ContextKind::InvalidArg)
        {
            if !arg.starts_with('-') {
                // From the arguments already read (std::env::args would panic
                // on one that is not UTF-8).
                let form = if args.get(1).and_then(|a| a.to_str()) == Some("run") {
                    "cordon run [OPTIONS] --"
                } else {
                    "cordon sandbox exec [OPTIONS] HANDLE --"
                };
                eprintln!(
                    "help: the command goes after `--`, which ends cordon's own options: `{form} {arg} ...`"
                );
            }
        }
    }
    ExitCode::from(usage_code())
}
