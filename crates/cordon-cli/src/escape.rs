//! `cordon escape --backend NAME`: runs the escape kit
//! (`cordon_kits::escape`) against a real instance of a backend and
//! prints one line per case and a final `N passed, M failed`.
//!
//! The local backends (`process`, `container`) are attacked through real
//! sandboxes built as `cordon run` builds them — a policy, a
//! [`LocalBackend`], a [`Router`], an acquire — under `cordon:default`
//! with `/usr/bin/perl` (and its hard links) denied (the kit's denied
//! program). Two sandboxes are acquired: one with the policy's bounds, and
//! one with the kit's small resource asks for the bounds cases. Later
//! backends add their own arm here and run the same kit. Scratch
//! directories are removed afterwards.
//!
//! Every case runs in one of those two sandboxes, so at the container rung
//! (warm) all of them share one init and each sandbox serves many execs;
//! the cross-exec cases (`plant-tool-for-next-exec`,
//! `background-outlives-exec`, `concurrent-exec-*`) attack that reuse.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_backend_local::WORK_DIR_ID;
use cordon_kits::escape::{
    bounded_ask, run_escape_cases, run_escape_suite, DeniedProgram, EscapeHost, EscapeSubject,
    HOST_ENV_MARKER, HOST_ENV_VALUE,
};
use cordon_linux::{InitProgram, Rung};
use cordon_sandbox::catalogue::builtin_backends;
use cordon_sandbox::{Capability, Isolation, SandboxSpec};

/// Exit codes: 0 every case passed; 1 a case failed; 2 the backend name is
/// unknown; 3 the backend cannot be run here.
const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_UNAVAILABLE: u8 = 3;

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
}

pub fn run(args: EscapeArgs) -> ExitCode {
    // `host-environment` needs the kit's marker in this process's
    // environment from its start; nothing here mutates the environment, so
    // run again with it passed explicitly.
    let wants_marker = args.cases.is_empty() || args.cases.iter().any(|c| c == "host-environment");
    if wants_marker && std::env::var(HOST_ENV_MARKER).as_deref() != Ok(HOST_ENV_VALUE) {
        return again_with_marker();
    }
    let catalogue = builtin_backends();
    let Some(backend) = catalogue.iter().find(|b| b.name == args.backend) else {
        let names: Vec<String> = catalogue.iter().map(|b| format!("`{}`", b.name)).collect();
        eprintln!(
            "error: `{}` is not a backend cordon knows; name one of {}",
            args.backend,
            names.join(", ")
        );
        return ExitCode::from(EXIT_USAGE);
    };
    let rung = match backend.name {
        "process" => Rung::Process,
        "container" => Rung::Container,
        other => {
            eprintln!(
                "error: backend `{other}` is not built in this version of cordon, so no instance of it can be attacked; `cordon doctor` shows what is built"
            );
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    let init = match crate::kit::init_for(rung, backend.name) {
        Ok(i) => i,
        Err(e) => return unavailable(e),
    };
    let base = args.scratch.unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let root = base.join(format!("cordon-escape-{}-{stamp}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&root) {
        return unavailable(format!(
            "cannot make the scratch directory `{}`: {e}; pass `--scratch DIR` with a writable directory",
            root.display()
        ));
    }
    let code = attack(
        rung,
        backend.name,
        backend.isolation,
        init,
        &root,
        &args.cases,
    );
    if let Err(e) = std::fs::remove_dir_all(&root) {
        eprintln!(
            "warning: could not remove the scratch directory `{}`: {e}",
            root.display()
        );
    }
    code
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
    eprintln!("error: {msg}");
    ExitCode::from(EXIT_UNAVAILABLE)
}

/// `cordon:default` (what a newcomer's `cordon run` gets), written out
/// rather than extended (a policy that extends another can only narrow it),
/// with two changes: a deny of the kit's denied program by every name it
/// has in `/usr/bin` (`perl` and its hard links such as `perl5.36.0`: a
/// deny of one name leaves the others runnable) — and the scratch root read-write: it holds only the work dir and, at the
/// process rung, the sandbox's temporary directory (made beside the work
/// dir), which the launcher gives the workload read-write anyway.
fn policy_text(scratch: &Path, denied: &[String]) -> String {
    let names: Vec<String> = denied.iter().map(|n| format!("{n:?}")).collect();
    format!(
        r#"policy:
  compute:
    allow:
      - name: system-programs
        when: >-
          command.startsWith("/usr/") || command.startsWith("/bin/") ||
          command.startsWith("/sbin/") || command.startsWith("/lib/") ||
          command.startsWith("/lib64/")
    deny:
      - name: no-perl
        when: command in [{}]
      - name: no-privilege-tools
        when: >-
          command in ["/usr/bin/sudo", "/bin/sudo", "/usr/bin/su", "/bin/su",
          "/usr/bin/doas", "/usr/bin/pkexec", "/usr/sbin/visudo"]
    max_memory: 512MiB
    max_processes: 64
    max_cpu_seconds: 60
    max_wall_seconds: 300
  storage:
    allow:
      - name: system-read-execute
        when: >-
          (path.startsWith("/usr/") || path.startsWith("/lib/") ||
          path.startsWith("/lib64/") || path.startsWith("/bin/") ||
          path.startsWith("/sbin/")) && mode in ["read", "execute"]
      - name: etc-read
        when: path.startsWith("/etc/") && mode == "read"
      - name: work-dir
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: scratch
        when: path.startsWith("{}/") && mode in ["read", "write"]
      - name: private-tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
      - name: devices
        when: >-
          path in ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
          && mode in ["read", "write"]
    deny:
      - name: host-secrets
        when: >-
          path in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"] ||
          path.startsWith("/etc/sudoers.d/") || path.startsWith("/etc/ssh/") ||
          path.startsWith("/etc/ssl/private/")
  egress:
    allow: []
  secret:
    allow: []
"#,
        names.join(", "),
        scratch.display()
    )
}

/// `path` and every hard link to it in its directory.
fn names_of(path: &str) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let p = Path::new(path);
    let mut names = vec![path.to_string()];
    let (Ok(meta), Some(dir)) = (std::fs::metadata(p), p.parent()) else {
        return names;
    };
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let same = e
                .metadata()
                .is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev());
            let shown = e.path().display().to_string();
            if same && !names.contains(&shown) {
                names.push(shown);
            }
        }
    }
    names
}

fn attack(
    rung: Rung,
    name: &str,
    iso: Isolation,
    init: InitProgram,
    root: &Path,
    cases: &[String],
) -> ExitCode {
    let work = root.join("work");
    if let Err(e) = crate::kit::owned_dir(&work) {
        return unavailable(format!("cannot prepare `{}`: {e}", work.display()));
    }
    let text = policy_text(root, &names_of(&DeniedProgram::perl().path));
    let router = match crate::kit::router(rung, iso, init, "escape.yaml", &text, &work) {
        Ok(r) => r,
        Err(e) => return unavailable(e),
    };
    let spec = match SandboxSpec::new("escape", "host") {
        Ok(s) => s.with_requires([Capability::Exec]),
        Err(e) => return unavailable(e),
    };
    let bounded_spec = match spec.clone().with_resources(bounded_ask()) {
        Ok(s) => s,
        Err(e) => return unavailable(e),
    };
    let (main, small) = (
        crate::kit::caller("escape", "main"),
        crate::kit::caller("escape", "bounded"),
    );
    let acquired = router
        .acquire(&main, &spec)
        .and_then(|s| router.acquire(&small, &bounded_spec).map(|b| (s, b)));
    let code = match acquired {
        Err(e) => unavailable(e),
        Ok((sandbox, bounded)) => {
            println!("escape: `{name}` (real sandboxes at the `{iso}` rung)");
            let subject = EscapeSubject {
                name: name.to_string(),
                isolation: iso,
                sandbox,
                bounded,
                work_dir: work.display().to_string(),
                denied: DeniedProgram::perl(),
                // The sandbox's own host uid: no uid check can stop the
                // workload reaching it, only the sandbox.
                host: EscapeHost::new(WORK_DIR_ID),
            };
            let report = if cases.is_empty() {
                run_escape_suite(&subject)
            } else {
                let names: Vec<&str> = cases.iter().map(String::as_str).collect();
                run_escape_cases(&subject, &names)
            };
            println!("{report}");
            if report.all_passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
    };
    let _ = router.dispose(&main);
    let _ = router.dispose(&small);
    code
}
