//! `cordon escape --backend NAME`: runs the escape kit
//! (`cordon_kits::escape`) against a real instance of a backend and
//! prints one line per case and a final `N passed, M failed`.
//!
//! Every registered backend is attacked through real sandboxes built as a
//! host builds them (`cordon_host::kits::escape`: a registration, the host
//! assembly's router, an acquire) under `cordon:default` with
//! `/usr/bin/perl` denied by that one path (the kit tries its other names)
//! and the literal prefix `/usr/bin/base` denied.
//! Two sandboxes are acquired: one with the policy's bounds, and one with
//! the kit's small resource asks for the bounds cases. A new backend is
//! attacked by registering it. Scratch directories are removed afterwards.
//!
//! Every case runs in one of those two sandboxes, so at the container rung
//! (warm) all of them share one init and each sandbox serves many execs;
//! the cross-exec cases (`plant-tool-for-next-exec`,
//! `background-outlives-exec`, `concurrent-exec-*`) attack that reuse.

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_host::kits::{KitError, KitRun};
use cordon_kits::escape::{HOST_ENV_MARKER, HOST_ENV_VALUE};

/// Exit codes: 0 every case passed; 1 a case failed; 2 the backend name is
/// unknown; 3 the backend cannot be run here.
use crate::exit::{
    KIT_UNAVAILABLE as EXIT_UNAVAILABLE, PROBLEMS as EXIT_FAILED, USAGE as EXIT_USAGE,
};

#[derive(clap::Args)]
pub struct EscapeArgs {
    /// The backend to attack: a name from `cordon doctor`.
    #[arg(long, value_name = "NAME")]
    pub backend: String,
    /// Where the scratch directory (the work dir's parent) is made
    /// (default: `/var/tmp`). It must not be under `/tmp`: at the container
    /// rung the guest's `/tmp` is its own.
    #[arg(long, value_name = "DIR", hide = true)]
    pub scratch: Option<PathBuf>,
    /// Run only these cases (repeatable; default: every case).
    #[arg(long = "case", value_name = "CASE")]
    pub cases: Vec<String>,
    /// Give the attacked sandbox a route out through cordon's egress proxy
    /// (an allowlist of one host under `.invalid`, which never resolves),
    /// so the cases also attack what the backend does to make a route.
    #[arg(long)]
    pub with_egress_route: bool,
    /// Output format: `json` prints one document (every case, passed or
    /// not, and the counts; docs/cli-json.md).
    #[arg(long, value_enum, default_value_t = crate::Format::Human)]
    pub format: crate::Format,
}

pub fn run(args: EscapeArgs) -> ExitCode {
    if args.format == crate::Format::Json {
        crate::json_out::enable();
    }
    // `host-environment` needs the kit's marker in this process's
    // environment from its start; nothing here mutates the environment, so
    // run again with it passed explicitly.
    let wants_marker = args.cases.is_empty() || args.cases.iter().any(|c| c == "host-environment");
    if wants_marker && std::env::var(HOST_ENV_MARKER).as_deref() != Ok(HOST_ENV_VALUE) {
        return again_with_marker();
    }
    let builder = crate::host_builder();
    let setup = match builder.backend_setup() {
        Ok(s) => s,
        Err(e) => return unavailable(e.to_string()),
    };
    match cordon_host::kits::escape_with(
        builder.registry(),
        &args.backend,
        &setup,
        args.scratch,
        &args.cases,
        args.with_egress_route,
    ) {
        Ok(KitRun::Report {
            backend,
            rung,
            report,
        }) => {
            if !crate::json_out::on() {
                let route = if args.with_egress_route {
                    ", the attacked one with a route through the egress proxy"
                } else {
                    ""
                };
                println!("escape: `{backend}` (real sandboxes at the `{rung}` rung{route})");
            }
            crate::conformance::report(Some((&backend, &rung)), &report)
        }
        Ok(KitRun::Skipped(why)) => crate::conformance::skipped(&why),
        Err(KitError::Unknown(e)) => crate::conformance::kit_error(EXIT_USAGE, &e),
        Err(KitError::Unavailable(e)) => unavailable(e),
    }
}

/// Runs this command again with [`HOST_ENV_MARKER`] in its environment,
/// the same arguments and stdio, and exits as it did.
fn again_with_marker() -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return unavailable(format!("cannot find the cordon binary: {e}")),
    };
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(HOST_ENV_MARKER, HOST_ENV_VALUE)
        .status();
    match status {
        Ok(s) => s
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .map_or(ExitCode::from(EXIT_FAILED), ExitCode::from),
        Err(e) => unavailable(format!("cannot run the cordon binary again: {e}")),
    }
}

fn unavailable(msg: impl std::fmt::Display) -> ExitCode {
    crate::conformance::kit_error(EXIT_UNAVAILABLE, &msg)
}
