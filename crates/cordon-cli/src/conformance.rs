//! `cordon conformance --backend NAME`: runs the files-out conformance kit
//! (`cordon_kits::conformance`) against a real instance of a backend and
//! prints one line per probe and a final `N passed, M failed`.
//!
//! `process` and `container` (the local backends) are attacked through a
//! real sandbox: the kit plants its layouts by running `sh` inside it, as a
//! workload would, and reads through the backend's files-out surface. A
//! backend of the catalogue that is not built in this version exits
//! non-zero saying so; one that does not serve `files_out` is skipped by
//! name. `--backend host-directory` runs the kit against the host-directory
//! test subject (no isolation at all: it only proves the kit). Scratch
//! directories are removed afterwards.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_kits::conformance::{
    can_make_device_nodes, host_directory_subject, run_files_out_conformance,
};
use cordon_sandbox::catalogue::builtin_backends;
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
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let rung = match backend.name {
            "process" => Some(cordon_linux::Rung::Process),
            "container" => Some(cordon_linux::Rung::Container),
            _ => None,
        };
        if let Some(rung) = rung {
            return local::run(rung, backend.name, backend.isolation, args.scratch);
        }
    }
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

/// The local backends, attacked through a real sandbox.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod local {
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;
    use std::sync::Arc;

    use cordon_kits::conformance::{run_files_out_conformance, PosixGuestSubject};
    use cordon_linux::{InitProgram, Rung};
    use cordon_sandbox::{Capability, Isolation, SandboxSpec};

    use super::{remove_scratch, report, scratch_root, EXIT_UNAVAILABLE};
    use crate::kit::owned_dir;

    /// The policy the kit runs under: system directories to run `sh` and
    /// its tools, and the scratch root read-write — the work dir, the
    /// directory outside it where the kit plants what a link must not
    /// reach, and (at the process rung) the sandbox's temporary directory.
    fn policy_text(scratch: &Path) -> String {
        format!(
            r#"policy:
  storage:
    allow:
      - name: system
        when: (path.startsWith("/usr/") || path.startsWith("/lib/") || path.startsWith("/lib64/") || path.startsWith("/bin/") || path.startsWith("/sbin/")) && mode != "write"
      - name: config
        when: path.startsWith("/etc/") && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode != "execute"
      - name: scratch
        when: path.startsWith("{}/") && mode != "execute"
      - name: tmp
        when: path.startsWith("/tmp/") && mode != "execute"
  compute:
    allow:
      - name: programs
        when: command.startsWith("/usr/")
"#,
            scratch.display()
        )
    }

    fn unavailable(msg: impl std::fmt::Display) -> ExitCode {
        eprintln!("error: {msg}");
        ExitCode::from(EXIT_UNAVAILABLE)
    }

    pub fn run(rung: Rung, name: &str, iso: Isolation, scratch: Option<PathBuf>) -> ExitCode {
        let init = match crate::kit::init_for(rung, name) {
            Ok(i) => i,
            Err(e) => return unavailable(e),
        };
        // Not under /tmp: at the container rung the guest's /tmp is its own,
        // and the directory outside the work dir must be the same one on the
        // host and in the guest.
        let root = match scratch_root(Some(scratch.unwrap_or_else(|| PathBuf::from("/var/tmp")))) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let code = attack(rung, name, iso, init, &root);
        remove_scratch(&root);
        code
    }

    fn attack(rung: Rung, name: &str, iso: Isolation, init: InitProgram, root: &Path) -> ExitCode {
        let (work, outside) = (root.join("work"), root.join("outside"));
        if let Err(e) = owned_dir(&work).and_then(|()| owned_dir(&outside)) {
            return unavailable(format!("cannot prepare `{}`: {e}", root.display()));
        }
        let text = policy_text(root);
        let router = match crate::kit::router(rung, iso, init, "conformance.yaml", &text, &work) {
            Ok(r) => r,
            Err(e) => return unavailable(e),
        };
        let spec = match SandboxSpec::new("conformance", "host") {
            Ok(s) => s.with_requires([Capability::Exec, Capability::FilesIn, Capability::FilesOut]),
            Err(e) => return unavailable(e),
        };
        let caller = crate::kit::caller("conformance", "main");
        let sandbox = match router.acquire(&caller, &spec) {
            Ok(s) => s,
            Err(e) => return unavailable(e),
        };
        println!("conformance: `{name}` (a real sandbox at the `{iso}` rung)");
        // The work dir as the guest sees it: the container rung binds it at
        // the spec's `work_dir`; the process rung shows its host path.
        let guest_work = match rung {
            Rung::Container => spec.work_dir().to_string(),
            Rung::Process => work.display().to_string(),
        };
        let subject = PosixGuestSubject {
            name: name.to_string(),
            sandbox,
            work_dir: guest_work,
            outside_dir: outside.display().to_string(),
            device_nodes: false,
        };
        let code = report(&run_files_out_conformance(Arc::new(subject)));
        let _ = router.dispose(&caller);
        code
    }
}
