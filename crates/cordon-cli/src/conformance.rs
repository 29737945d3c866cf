//! `cordon conformance --backend NAME`: runs the files-out conformance kit
//! (`cordon_kits::conformance`) against a real instance of a backend and
//! prints one line per probe and a final `N passed, M failed`.
//!
//! Every registered backend is attacked through a real sandbox
//! (`cordon_host::kits::conformance`): the kit plants its layouts by
//! running `sh` inside it, as a workload would, and reads through the
//! backend's files-out surface. A backend that is not built in this
//! version exits non-zero saying so; one that does not serve `files_out`
//! is skipped by name. `--backend host-directory` runs the kit against the host-directory
//! test subject (no isolation at all: it only proves the kit). Scratch
//! directories are removed afterwards.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_host::kits::{KitError, KitRun};
use cordon_kits::conformance::{
    can_make_device_nodes, host_directory_subject, run_files_out_conformance,
};

/// Exit codes: 0 every probe passed (or the backend was skipped by name);
/// 1 a probe failed; 2 the backend name is unknown; 3 the backend cannot be
/// run here (not built in this version, or its instance could not start).
use crate::exit::{
    KIT_UNAVAILABLE as EXIT_UNAVAILABLE, PROBLEMS as EXIT_FAILED, USAGE as EXIT_USAGE,
};

/// The test subject's name.
const HOST_DIRECTORY: &str = "host-directory";

#[derive(clap::Args)]
pub struct ConformanceArgs {
    /// The backend to attack: a name from `cordon doctor`, or
    /// `host-directory` for the kit's own test subject (no isolation).
    #[arg(long, value_name = "NAME")]
    pub backend: String,
    /// Where the host-directory subject makes its scratch directory
    /// (default: the system's temporary directory).
    #[arg(long, value_name = "DIR", hide = true)]
    pub scratch: Option<PathBuf>,
}

pub fn run(args: ConformanceArgs) -> ExitCode {
    if args.backend == HOST_DIRECTORY {
        return host_directory(args.scratch);
    }
    let setup = match crate::run::backend_setup(String::new(), None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    match cordon_host::kits::conformance(&crate::registry(), &args.backend, &setup, args.scratch) {
        Ok(KitRun::Report {
            backend,
            rung,
            report: r,
        }) => {
            println!("conformance: `{backend}` (a real sandbox at the `{rung}` rung)");
            report(&r)
        }
        Ok(KitRun::Skipped(why)) => {
            println!("skipped {why}");
            ExitCode::SUCCESS
        }
        Err(KitError::Unknown(e)) => {
            eprintln!("error: {e}; or `{HOST_DIRECTORY}` for the kit's own test subject");
            ExitCode::from(EXIT_USAGE)
        }
        Err(KitError::Unavailable(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// A fresh scratch directory under `scratch` (or the temporary directory).
fn scratch_root(scratch: Option<PathBuf>) -> Result<PathBuf, ExitCode> {
    let base = scratch.unwrap_or_else(std::env::temp_dir);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let root = base.join(format!("cordon-conformance-{}-{stamp}", std::process::id()));
    match std::fs::create_dir(&root) {
        Ok(()) => Ok(root),
        Err(e) => {
            eprintln!(
                "error: cannot make the scratch directory `{}`: {e}; pass `--scratch DIR` with a writable directory",
                root.display()
            );
            Err(ExitCode::from(EXIT_UNAVAILABLE))
        }
    }
}

fn remove_scratch(root: &std::path::Path) {
    if let Err(e) = std::fs::remove_dir_all(root) {
        eprintln!(
            "warning: could not remove the scratch directory `{}`: {e}",
            root.display()
        );
    }
}

/// Prints a report and maps it to the exit code.
fn report(r: &cordon_kits::conformance::Report) -> ExitCode {
    println!("{r}");
    if r.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

fn host_directory(scratch: Option<PathBuf>) -> ExitCode {
    let root = match scratch_root(scratch) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let code = match host_directory_subject(&root, can_make_device_nodes()) {
        Err(e) => {
            eprintln!("error: cannot set up the host-directory subject: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Ok(subject) => {
            println!("conformance: `{HOST_DIRECTORY}` (the kit's test subject; no isolation)");
            report(&run_files_out_conformance(Arc::new(subject)))
        }
    };
    remove_scratch(&root);
    code
}
