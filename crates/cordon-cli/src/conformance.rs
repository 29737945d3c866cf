//! `cordon conformance --backend NAME`: runs the files-out conformance kit
//! (`cordon_sandbox::conformance`) against a real instance of a backend and
//! prints one line per probe and a final `N passed, M failed`.
//!
//! No backend of the catalogue is built in this version, so each of them
//! exits non-zero saying so; a backend that does not serve `files_out` is
//! skipped by name. `--backend host-directory` runs the kit against the
//! host-directory test subject (no isolation at all: it only proves the
//! kit), in a scratch directory that is removed afterwards.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_sandbox::catalogue::builtin_backends;
use cordon_sandbox::conformance::{
    can_make_device_nodes, host_directory_subject, run_files_out_conformance,
};
use cordon_sandbox::Capability;

/// Exit codes: 0 every probe passed (or the backend was skipped by name);
/// 1 a probe failed; 2 the backend name is unknown; 3 the backend cannot be
/// run here (not built in this version, or its instance could not start).
const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_UNAVAILABLE: u8 = 3;

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
    let catalogue = builtin_backends();
    let Some(backend) = catalogue.iter().find(|b| b.name == args.backend) else {
        let names: Vec<String> = catalogue
            .iter()
            .map(|b| format!("`{}`", b.name))
            .chain([format!("`{HOST_DIRECTORY}`")])
            .collect();
        eprintln!(
            "error: `{}` is not a backend cordon knows; name one of {}",
            args.backend,
            names.join(", ")
        );
        return ExitCode::from(EXIT_USAGE);
    };
    if !backend.capabilities.contains(Capability::FilesOut) {
        println!(
            "skipped `{}`: it does not serve `files_out`, so there is nothing to attack",
            backend.name
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "error: backend `{}` is not built in this version of cordon, so no instance of it can be attacked; `cordon doctor` shows what is built, and `--backend {HOST_DIRECTORY}` exercises the kit itself",
        backend.name
    );
    ExitCode::from(EXIT_UNAVAILABLE)
}

fn host_directory(scratch: Option<PathBuf>) -> ExitCode {
    let base = scratch.unwrap_or_else(std::env::temp_dir);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let root = base.join(format!("cordon-conformance-{}-{stamp}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&root) {
        eprintln!(
            "error: cannot make the scratch directory `{}`: {e}; pass `--scratch DIR` with a writable directory",
            root.display()
        );
        return ExitCode::from(EXIT_UNAVAILABLE);
    }
    let code = match host_directory_subject(&root, can_make_device_nodes()) {
        Err(e) => {
            eprintln!("error: cannot set up the host-directory subject: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Ok(subject) => {
            println!("conformance: `{HOST_DIRECTORY}` (the kit's test subject; no isolation)");
            let report = run_files_out_conformance(Arc::new(subject));
            println!("{report}");
            if report.all_passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
    };
    if let Err(e) = std::fs::remove_dir_all(&root) {
        eprintln!(
            "warning: could not remove the scratch directory `{}`: {e}",
            root.display()
        );
    }
    code
}
