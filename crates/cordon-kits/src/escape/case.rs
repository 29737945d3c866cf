//! What every case is given and held to: the [`EscapeSubject`] it attacks
//! (the backend's sandboxes, the programs its policy denies, the
//! [`EscapeHost`] where the kit may act), the bounds of the bounded
//! sandbox ([`bounded_ask`]), the bait and the host marker a case looks for
//! in what comes back, and the per-rung expectation
//! ([`host_process_visibility`]).

use std::path::PathBuf;
use std::sync::Arc;

use cordon_sandbox::{Isolation, ResourceAsk, Sandbox};

/// The environment variable the kit's process must be started with (set
/// to [`HOST_ENV_VALUE`]) for `host-environment`; the kit also passes it to
/// the host processes it starts. Its value must never reach a workload.
pub const HOST_ENV_MARKER: &str = "CORDON_ESCAPE_HOST_MARKER";
/// The value of [`HOST_ENV_MARKER`].
pub const HOST_ENV_VALUE: &str = "cordon-escape-host-env-7f3a9c";

/// What the kit plants on the host. Seeing it come back is an escape.
pub(super) const BAIT: &str = "cordon-escape-bait-5d21e8";

/// `max_processes` of the bounded sandbox.
pub const BOUND_PROCESSES: u64 = 16;
/// `max_memory` of the bounded sandbox.
pub const BOUND_MEMORY: u64 = 96 << 20;
/// `max_cpu_seconds` of the bounded sandbox: room for `python3` to start
/// and reach `max_memory` in an emulated guest (a microVM under TCG spends
/// about 3.3 CPU seconds there), so the memory bomb meets its own bound.
pub const BOUND_CPU_SECONDS: u64 = 4;
/// `max_wall_seconds` of the bounded sandbox.
pub const BOUND_WALL_SECONDS: u64 = 6;

/// The resource asks the subject's bounded sandbox is acquired with: small,
/// so the bounds cases end in seconds.
pub fn bounded_ask() -> ResourceAsk {
    ResourceAsk {
        memory: Some(BOUND_MEMORY),
        processes: Some(BOUND_PROCESSES),
        cpu_seconds: Some(BOUND_CPU_SECONDS),
        wall_seconds: Some(BOUND_WALL_SECONDS),
        disk: None,
    }
}

/// A program the subject's policy denies, and how to make it say it ran.
#[derive(Debug, Clone)]
pub struct DeniedProgram {
    /// Its absolute path, as the policy names it.
    pub path: String,
    /// Arguments that make it print `marker` on stdout.
    pub args: Vec<String>,
    pub marker: String,
}

impl DeniedProgram {
    /// `/usr/bin/perl`, for a policy that denies it.
    pub fn perl() -> DeniedProgram {
        DeniedProgram {
            path: "/usr/bin/perl".into(),
            args: vec!["-e".into(), "print qq(DENIED-PROGRAM-RAN\\n)".into()],
            marker: "DENIED-PROGRAM-RAN".into(),
        }
    }
}

/// A literal prefix the subject's policy denies
/// (`command.startsWith(prefix)`), and a program beside what it names that
/// the policy lets run.
#[derive(Debug, Clone)]
pub struct DeniedPrefix {
    pub prefix: String,
    /// A program the prefix does not name, in the same directory.
    pub control: String,
}

impl DeniedPrefix {
    /// `/usr/bin/base` (`base64`, `basename`, `basenc`, `base32`: every
    /// host has some), with `/usr/bin/cat` running beside them.
    pub fn coreutils_base() -> DeniedPrefix {
        DeniedPrefix {
            prefix: "/usr/bin/base".into(),
            control: "/usr/bin/cat".into(),
        }
    }
}

/// Where the kit may act on the host (the machine it runs on). Fresh
/// directories are made under these and removed afterwards.
#[derive(Debug, Clone)]
pub struct EscapeHost {
    /// Where the kit makes directories outside every plan, open to every
    /// uid (mode 0777), so only the sandbox — not file modes — can stop
    /// the workload there. Default `/var/tmp`.
    pub open_parent: PathBuf,
    /// The host's home for the home-directory bait. Default `/root`.
    pub home: PathBuf,
    /// Where the kit starts its Docker-style socket. Default `/run`.
    pub run_dir: PathBuf,
    /// The non-root uid the host `sleep` runs as. The sandbox's own host
    /// uid is the strongest choice: then no uid check helps, only the
    /// sandbox does.
    pub sleeper_uid: u32,
    /// The `PATH` of `plant-tool-for-next-exec`, in order: exec 1 plants
    /// there, exec 2 looks its tools up there. Default: the directories of
    /// the `PATH` every other case's workload gets.
    pub path_dirs: Vec<PathBuf>,
}

impl EscapeHost {
    pub fn new(sleeper_uid: u32) -> EscapeHost {
        EscapeHost {
            open_parent: PathBuf::from("/var/tmp"),
            home: PathBuf::from("/root"),
            run_dir: PathBuf::from("/run"),
            sleeper_uid,
            path_dirs: default_path_dirs(),
        }
    }
}

/// The directories of the `PATH` the kit's workloads get.
pub fn default_path_dirs() -> Vec<PathBuf> {
    cordon_sandbox::outputs::plain_env()
        .get("PATH")
        .map(|p| p.split(':').map(PathBuf::from).collect())
        .unwrap_or_default()
}

/// A backend under test, seen only through its public surface.
pub struct EscapeSubject {
    /// Shown in the report.
    pub name: String,
    /// The rung the backend claims; it selects the per-rung expectations.
    pub isolation: Isolation,
    pub sandbox: Arc<dyn Sandbox>,
    /// A sandbox of the same backend acquired with [`bounded_ask`].
    pub bounded: Arc<dyn Sandbox>,
    /// The work dir, as the workload sees it.
    pub work_dir: String,
    /// A program the subject's policy denies by this one name (its other
    /// names, hard links, must be refused with it).
    pub denied: DeniedProgram,
    /// A literal prefix the subject's policy denies.
    pub denied_prefix: DeniedPrefix,
    pub host: EscapeHost,
}

/// What the workload sees of a host process, per rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostProcessVisibility {
    /// The rung does not hide the host's process list by design; the case
    /// asserts the workload sees it (and cannot signal it).
    VisibleByDesign,
    /// The rung hides it.
    Hidden,
}

/// The expectation for `isolation`, stated for every rung.
pub fn host_process_visibility(isolation: Isolation) -> HostProcessVisibility {
    match isolation {
        // No pid namespace at this rung, but a `/proc` mounted with
        // `hidepid=invisible` (docs/security.md): the host's processes
        // are not listed, and the case holds it to that.
        Isolation::Process => HostProcessVisibility::Hidden,
        // Rungs below `process` claim nothing and are held to the full
        // standard, so they fail here as they should.
        Isolation::None | Isolation::Runtime => HostProcessVisibility::Hidden,
        Isolation::Container
        | Isolation::HardenedContainer
        | Isolation::Microvm
        | Isolation::Vm => HostProcessVisibility::Hidden,
    }
}
