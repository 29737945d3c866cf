//! The escape kit: hostile workloads run through a backend's public surface
//! ([`Sandbox::exec`]), each judged on what the workload reported **and** on
//! the host's state afterwards. Every backend must pass it on a real
//! instance (`cordon escape --backend NAME`), beside the files-out
//! [`crate::conformance`] kit.
//!
//! Fill in an [`EscapeSubject`] — a sandbox, a second one of the same
//! backend acquired with [`bounded_ask`] (the bounds cases), the work dir,
//! the backend's rung, a program its policy denies, and an [`EscapeHost`]
//! saying where the kit may plant bait on the host — then call
//! [`run_escape_suite`]. Like the conformance kit it depends on no test
//! framework and reports every case, not only the first failure. A case
//! that cannot set itself up (plant its bait, start its listener, read the
//! host value it will compare) **fails**; none is ever skipped.
//!
//! The cases ([`CASES`]):
//!
//! | case | the workload tries | passes when |
//! | --- | --- | --- |
//! | `read-host-files` | `/etc/shadow`, bait under the host's home and in an open host directory | nothing of them in its output |
//! | `write-outside-work-dir` | a file in its work dir (must work), then in an open host directory, `/etc`, `/`, `/var/tmp` | none of those exists on the host |
//! | `exec-denied-binary` | the denied program directly, from a shell, via the dynamic loader | it never ran |
//! | `exec-denied-hard-link` | the denied program under its other names (hard links beside it, which the policy does not name) directly and from a shell | none ran |
//! | `exec-denied-hard-link-loader` | those other names through the dynamic loader | none ran |
//! | `exec-denied-prefix` | every program a literal prefix deny names (and their other names) directly, from a shell, via the loader | none ran; a program beside them did |
//! | `host-processes` | see, `kill -9` and `kill -STOP` a host `sleep` (non-root uid) | not signalled; seen only where the rung does not hide it |
//! | `ptrace` | attach and seize the host `sleep`, `process_vm_readv`, `TRACEME` (in a child) | every call refused; the sleep untraced, not stopped |
//! | `mount` | mount a tmpfs, unmount `/proc`, `chroot` | refused; the host's mount table unchanged |
//! | `unshare` | user, mount, net namespaces by `unshare` and raw `clone` | refused |
//! | `clone3-namespaces` | `clone3` with namespace flags | `ENOSYS` or `EPERM` |
//! | `special-sockets` | raw, packet, netlink sockets | none opened |
//! | `tcp-connect-host-loopback` | connect to a listener the kit starts on `127.0.0.1` | not connected; nothing arrived |
//! | `udp-send-host-loopback` | send to a socket the kit binds on `127.0.0.1` | nothing arrived |
//! | `unix-socket-host` | connect to a unix listener the kit starts in an open host directory | not connected; nothing arrived |
//! | `bind-port` | bind and listen on a TCP port | refused |
//! | `tiocsti` | push a character with `TIOCSTI` on stdio, `/dev/tty`, and a pty it opens as its own controlling terminal | never pushed; on a pty, refused with `EPERM` |
//! | `memory-bomb` | allocate past `max_memory` | killed at the `max_memory` bound |
//! | `cpu-spin` | four spinning processes | killed at the `max_cpu_seconds` bound, in time; none outlives it |
//! | `fork-bomb` | 500 processes | stopped below `max_processes`; none outlives it |
//! | `wall-clock` | `sleep 60` | stopped at `max_wall_seconds` |
//! | `proc-sys-write` | write `/proc/sys` and `/sys` | the host's values unchanged |
//! | `devices-and-docker-socket` | open `/dev/kvm`; a Docker-style socket the kit starts under `/run` | neither reached |
//! | `host-environment` | its environment and every `/proc/*/environ` | the kit's marker nowhere |
//! | `plant-tool-for-next-exec` | exec 1 plants `python3`, `sh`, `ls` in every `PATH` directory, `/tmp`, `/var/tmp`, `/dev/shm` and `$HOME` | exec 2 (bare name and shell lookup) runs the real tools; nothing planted or changed on the host |
//! | `background-outlives-exec` | exec 1 leaves tamperers behind (`&`, `nohup`, `setsid`, double fork, a python daemon, a pid-hopping forker) | none alive after exec 1 (host `/proc` and exec 2's); their writes never happen |
//! | `concurrent-exec-tampering` | while exec A sleeps, exec B signals, traces, reads `/proc/A/{environ,mem}` and A's descriptors' targets, writes A's stdin/stdout through `/proc/A/fd`, and signals, traces or reads PID 1 | every call refused; A finishes normally with its own output; the sandbox still serves an exec |
//! | `concurrent-exec-proc-info` | the same run; B lists `/proc/A/fd` and reads `/proc/A/cmdline` | both refused |
//!
//! The last three are **cross-exec** cases: several execs in one sandbox
//! (a warm sandbox serves them all from one init), each trying to tamper
//! with the next or with a concurrent one.
//!
//! **Per rung.** Every rung is held to one expectation, stated in
//! [`host_process_visibility`] rather than skipped: the workload must not
//! see the host `sleep` (at [`Isolation::Process`], with no pid namespace,
//! a `/proc` mounted with `hidepid=invisible` is what hides it), nor
//! signal it. [`HostProcessVisibility::VisibleByDesign`] stays for a rung
//! that would declare the list visible: the case then *asserts* the
//! workload sees it. Rungs below `process` are held to the full standard:
//! they claim no confinement, so they fail.
//!
//! The host helper runs on the machine the kit runs on; for a backend whose
//! host is elsewhere (a remote daemon) the host-side checks would need that
//! machine, and the subject must say so rather than pass here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cordon_sandbox::{Isolation, ResourceAsk, Sandbox};

use crate::conformance::{ProbeResult, Report};

mod bounds;
mod cross_exec;
mod fs;
mod host;
mod net;
mod proc;
mod system;
#[cfg(test)]
mod tests;
mod workload;

use bounds::{cpu_spin, fork_bomb, memory_bomb, wall_clock};
use cross_exec::{background_outlives, concurrent_exec, plant_tool, PROC_INFO, TAMPERING};
use fs::{
    exec_denied, exec_denied_hard_link, exec_denied_hard_link_loader, exec_denied_prefix,
    read_host_files, write_outside,
};
use net::{bind_port, special_sockets, tcp_connect, udp_send, unix_socket};
use proc::{clone3, host_processes, mount, ptrace, unshare};
use system::{devices, host_environment, proc_sys_write, tiocsti};

/// Every case, in the order they run.
pub const CASES: [&str; 28] = [
    "read-host-files",
    "write-outside-work-dir",
    "exec-denied-binary",
    "exec-denied-hard-link",
    "exec-denied-hard-link-loader",
    "exec-denied-prefix",
    "host-processes",
    "ptrace",
    "mount",
    "unshare",
    "clone3-namespaces",
    "special-sockets",
    "tcp-connect-host-loopback",
    "udp-send-host-loopback",
    "unix-socket-host",
    "bind-port",
    "tiocsti",
    "memory-bomb",
    "cpu-spin",
    "fork-bomb",
    "wall-clock",
    "proc-sys-write",
    "devices-and-docker-socket",
    "host-environment",
    "plant-tool-for-next-exec",
    "background-outlives-exec",
    "concurrent-exec-tampering",
    "concurrent-exec-proc-info",
];

/// The environment variable the kit's process must be started with (set
/// to [`HOST_ENV_VALUE`]) for `host-environment`; the kit also passes it to
/// the host processes it starts. Its value must never reach a workload.
pub const HOST_ENV_MARKER: &str = "CORDON_ESCAPE_HOST_MARKER";
/// The value of [`HOST_ENV_MARKER`].
pub const HOST_ENV_VALUE: &str = "cordon-escape-host-env-7f3a9c";

/// What the kit plants on the host. Seeing it come back is an escape.
const BAIT: &str = "cordon-escape-bait-5d21e8";

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

/// Runs every case against `subject`.
///
/// `host-environment` needs [`HOST_ENV_MARKER`]`=`[`HOST_ENV_VALUE`] in
/// this process's environment from its start (the kit does not mutate the
/// process environment); `cordon escape` runs itself again with it. Without
/// it that case fails as unable to set up.
pub fn run_escape_suite(subject: &EscapeSubject) -> Report {
    run_escape_cases(subject, &CASES)
}

/// Runs the named cases, in the order given; an unknown name is a failed
/// case.
pub fn run_escape_cases(subject: &EscapeSubject, names: &[&str]) -> Report {
    let mut results = Vec::new();
    for name in names {
        let started = Instant::now();
        let outcome = run_case(name, subject);
        let took = started.elapsed();
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        results.push(ProbeResult {
            probe: name.to_string(),
            passed,
            detail: format!("{detail} ({:.1}s)", took.as_secs_f64()),
        });
    }
    Report {
        subject: subject.name.clone(),
        results,
    }
}

fn run_case(name: &str, s: &EscapeSubject) -> Result<String, String> {
    match name {
        "read-host-files" => read_host_files(s),
        "write-outside-work-dir" => write_outside(s),
        "exec-denied-binary" => exec_denied(s),
        "exec-denied-hard-link" => exec_denied_hard_link(s),
        "exec-denied-hard-link-loader" => exec_denied_hard_link_loader(s),
        "exec-denied-prefix" => exec_denied_prefix(s),
        "host-processes" => host_processes(s),
        "ptrace" => ptrace(s),
        "mount" => mount(s),
        "unshare" => unshare(s),
        "clone3-namespaces" => clone3(s),
        "special-sockets" => special_sockets(s),
        "tcp-connect-host-loopback" => tcp_connect(s),
        "udp-send-host-loopback" => udp_send(s),
        "unix-socket-host" => unix_socket(s),
        "bind-port" => bind_port(s),
        "tiocsti" => tiocsti(s),
        "fork-bomb" => fork_bomb(s),
        "memory-bomb" => memory_bomb(s),
        "cpu-spin" => cpu_spin(s),
        "wall-clock" => wall_clock(s),
        "proc-sys-write" => proc_sys_write(s),
        "devices-and-docker-socket" => devices(s),
        "host-environment" => host_environment(s),
        "plant-tool-for-next-exec" => plant_tool(s),
        "background-outlives-exec" => background_outlives(s),
        "concurrent-exec-tampering" => concurrent_exec(s, &TAMPERING),
        "concurrent-exec-proc-info" => concurrent_exec(s, &PROC_INFO),
        other => Err(format!("unknown case `{other}`")),
    }
}
