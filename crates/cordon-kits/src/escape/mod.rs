//! The escape kit: hostile workloads run through a backend's public surface
//! ([`Sandbox::exec`](cordon_sandbox::Sandbox::exec)), each judged on what
//! the workload reported **and** on the host's state afterwards. Every
//! backend must pass it on a real instance (`cordon escape --backend
//! NAME`), beside the files-out [`crate::conformance`] kit.
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
//! | `concurrent-exec-sysv-ipc` | while exec A holds a System V shared-memory segment and message queue under a key only this run knows, exec B looks them up by it | B finds neither |
//!
//! The last four are **cross-exec** cases: several execs in one sandbox
//! (a warm sandbox serves them all from one init), each trying to tamper
//! with the next or with a concurrent one.
//!
//! **Per rung.** Every rung is held to one expectation, stated in
//! [`host_process_visibility`] rather than skipped: the workload must not
//! see the host `sleep` (at
//! [`Isolation::Process`](cordon_sandbox::Isolation::Process), with no pid
//! namespace, a `/proc` mounted with `hidepid=invisible` is what hides it),
//! nor signal it. [`HostProcessVisibility::VisibleByDesign`] stays for a rung
//! that would declare the list visible: the case then *asserts* the
//! workload sees it. Rungs below `process` are held to the full standard:
//! they claim no confinement, so they fail.
//!
//! The host helper runs on the machine the kit runs on; for a backend whose
//! host is elsewhere (a remote daemon) the host-side checks would need that
//! machine, and the subject must say so rather than pass here.

use std::time::Instant;

use crate::conformance::{ProbeResult, Report};

mod bounds;
mod case;
mod cross_exec;
mod cross_ipc;
mod fs;
mod host;
mod net;
mod proc;
mod system;
#[cfg(test)]
mod tests;
mod workload;

pub use case::{
    bounded_ask, default_path_dirs, host_process_visibility, DeniedPrefix, DeniedProgram,
    EscapeHost, EscapeSubject, HostProcessVisibility, BOUND_CPU_SECONDS, BOUND_MEMORY,
    BOUND_PROCESSES, BOUND_WALL_SECONDS, HOST_ENV_MARKER, HOST_ENV_VALUE,
};

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
pub const CASES: [&str; 29] = [
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
    "concurrent-exec-sysv-ipc",
];

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
        "concurrent-exec-sysv-ipc" => cross_ipc::concurrent_sysv_ipc(s),
        other => Err(format!("unknown case `{other}`")),
    }
}
