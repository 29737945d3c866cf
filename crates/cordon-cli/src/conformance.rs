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
    /// Output format: `json` prints one document (every probe, passed or
    /// not, and the counts; docs/cli-json.md).
    #[arg(long, value_enum, default_value_t = crate::Format::Human)]
    pub format: crate::Format,
}

pub fn run(args: ConformanceArgs) -> ExitCode {
    if args.format == crate::Format::Json {
        crate::json_out::enable();
    }
    if args.backend == HOST_DIRECTORY {
        return host_directory(args.scratch);
    }
    let builder = crate::host_builder();
    let setup = match builder.backend_setup() {
        Ok(s) => s,
        Err(e) => return kit_error(EXIT_UNAVAILABLE, &e.to_string()),
    };
    match cordon_host::kits::conformance(builder.registry(), &args.backend, &setup, args.scratch) {
        Ok(KitRun::Report {
            backend,
            rung,
            report: r,
        }) => {
            if !crate::json_out::on() {
                println!("conformance: `{backend}` (a real sandbox at the `{rung}` rung)");
            }
            report(Some((&backend, &rung)), &r)
        }
        Ok(KitRun::Skipped(why)) => skipped(&why),
        Err(KitError::Unknown(e)) => kit_error(
            EXIT_USAGE,
            &format!("{e}; or `{HOST_DIRECTORY}` for the kit's own test subject"),
        ),
        Err(KitError::Unavailable(e)) => kit_error(EXIT_UNAVAILABLE, &e),
    }
}

/// A kit that did not run: `error: ...` on stderr (and the JSON error
/// document on stdout under `--format json`).
pub fn kit_error(code: u8, msg: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    if crate::json_out::on() {
        crate::json_out::error(code, &msg.to_string());
    }
    ExitCode::from(code)
}

/// A backend the kit does not attack, said by name.
pub fn skipped(why: &str) -> ExitCode {
    if crate::json_out::on() {
        crate::json_out::emit(&serde_json::json!({"ok": true, "skipped": why}));
    } else {
        println!("skipped {why}");
    }
    ExitCode::SUCCESS
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

/// Prints a report (one line per probe and the counts, or one JSON
/// document) and maps it to the exit code; `at` is the backend and rung.
pub fn report(at: Option<(&str, &str)>, r: &cordon_kits::conformance::Report) -> ExitCode {
    if crate::json_out::on() {
        let results: Vec<_> = r
            .results
            .iter()
            .map(|p| serde_json::json!({"name": p.probe, "passed": p.passed, "detail": p.detail}))
            .collect();
        crate::json_out::emit(&serde_json::json!({
            "ok": r.all_passed(),
            "backend": at.map(|a| a.0),
            "rung": at.map(|a| a.1),
            "subject": r.subject,
            "passed": r.passed(),
            "failed": r.failed().len(),
            "results": results,
        }));
    } else {
        println!("{r}");
    }
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
        Err(e) => kit_error(
            EXIT_UNAVAILABLE,
            &format!("cannot set up the host-directory subject: {e}"),
        ),
        Ok(subject) => {
            if !crate::json_out::on() {
                println!("conformance: `{HOST_DIRECTORY}` (the kit's test subject; no isolation)");
            }
            report(
                Some((HOST_DIRECTORY, "none")),
                &run_files_out_conformance(Arc::new(subject)),
            )
        }
    };
    remove_scratch(&root);
    code
}
