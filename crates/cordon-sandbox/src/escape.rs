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
//! **Per rung.** Only one expectation differs, and it is stated here rather
//! than skipped: at [`Isolation::Process`] there is no pid namespace, so
//! the host's process list is visible by design — `host-processes` then
//! *asserts* the workload sees the host `sleep` (a probe that does not see
//! it there is not measuring what it claims) and that it cannot signal it.
//! At every other rung the workload must not see it. Rungs below `process`
//! are held to the full standard: they claim no confinement, so they fail.
//!
//! The host helper runs on the machine the kit runs on; for a backend whose
//! host is elsewhere (a remote daemon) the host-side checks would need that
//! machine, and the subject must say so rather than pass here.

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{ExecOutput, ExecRequest, ExitStatus, Sandbox, SandboxError};
use crate::conformance::{ProbeResult, Report};
use crate::isolation::Isolation;
use crate::spec::ResourceAsk;

/// Every case, in the order they run.
pub const CASES: [&str; 25] = [
    "read-host-files",
    "write-outside-work-dir",
    "exec-denied-binary",
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
/// `max_cpu_seconds` of the bounded sandbox.
pub const BOUND_CPU_SECONDS: u64 = 1;
/// `max_wall_seconds` of the bounded sandbox.
pub const BOUND_WALL_SECONDS: u64 = 3;

/// The resource asks the subject's bounded sandbox is acquired with: small,
/// so the bounds cases end in seconds.
pub fn bounded_ask() -> ResourceAsk {
    ResourceAsk {
        memory: Some(BOUND_MEMORY),
        processes: Some(BOUND_PROCESSES),
        cpu_seconds: Some(BOUND_CPU_SECONDS),
        wall_seconds: Some(BOUND_WALL_SECONDS),
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
    crate::outputs::plain_env()
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
    /// A program the subject's policy denies.
    pub denied: DeniedProgram,
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
        // No pid namespace at this rung (docs/security.md).
        Isolation::Process => HostProcessVisibility::VisibleByDesign,
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

// ---- running workloads ----

/// What one workload did.
#[derive(Debug)]
struct Ran {
    result: Result<ExecOutput, SandboxError>,
    took: Duration,
}

impl Ran {
    fn stdout(&self) -> String {
        match &self.result {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(_) => String::new(),
        }
    }
    fn all_output(&self) -> String {
        match &self.result {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => e.to_string(),
        }
    }
    fn status(&self) -> Option<ExitStatus> {
        self.result.as_ref().ok().map(|o| o.status)
    }
    /// A short account for a failure message.
    fn show(&self) -> String {
        match &self.result {
            Ok(o) => {
                let cut = |b: &[u8]| {
                    let s = String::from_utf8_lossy(b);
                    let s = s.trim();
                    if s.len() > 600 {
                        let mut end = 600;
                        while !s.is_char_boundary(end) {
                            end -= 1;
                        }
                        format!("{}…", &s[..end])
                    } else {
                        s.to_string()
                    }
                };
                format!(
                    "[{}; stdout: {:?}; stderr: {:?}]",
                    o.status,
                    cut(&o.stdout),
                    cut(&o.stderr)
                )
            }
            Err(e) => format!("[exec refused: {e}]"),
        }
    }
    /// The workload must have run to `end` (its script printed it): a case
    /// whose script never ran proves nothing.
    fn ran_to_end(&self) -> Result<(), String> {
        if self.stdout().lines().any(|l| l.trim() == "end") {
            Ok(())
        } else {
            Err(format!(
                "could not set up: the workload did not run to its end {}",
                self.show()
            ))
        }
    }
}

fn exec_in(sandbox: &dyn Sandbox, argv: Vec<String>, timeout: Duration) -> Ran {
    let started = Instant::now();
    let result = sandbox.exec(&ExecRequest {
        argv,
        env: crate::outputs::plain_env(),
        stdin: Vec::new(),
        timeout,
        max_output_bytes: 1 << 20,
    });
    Ran {
        result,
        took: started.elapsed(),
    }
}

const TIMEOUT: Duration = Duration::from_secs(20);

fn sh(s: &EscapeSubject, script: &str, args: &[&str]) -> Ran {
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        script.into(),
        "sh".into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    exec_in(&*s.sandbox, argv, TIMEOUT)
}

fn py_in(sandbox: &dyn Sandbox, code: &str) -> Ran {
    exec_in(
        sandbox,
        vec!["/usr/bin/python3".into(), "-c".into(), code.into()],
        TIMEOUT,
    )
}

fn py(s: &EscapeSubject, code: &str) -> Ran {
    py_in(&*s.sandbox, code)
}

fn setup<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("could not set up {what}: {e}"))
}

/// Lines of the workload's output that report a breach (`... REACHED`,
/// `... OPENED` and the like), for the failure message.
fn breaches(out: &str, words: &[&str]) -> Vec<String> {
    out.lines()
        .filter(|l| words.iter().any(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}

// ---- the host side ----

static NEXT: AtomicU32 = AtomicU32::new(0);

fn nonce() -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{stamp}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh host directory, removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    /// Created fresh (nothing planted is reused) with `mode`.
    fn new(parent: &Path, mode: u32) -> Result<HostDir, String> {
        let p = parent.join(format!("cordon-escape-{}", nonce()));
        std::fs::create_dir(&p).map_err(|e| format!("`{}`: {e}", p.display()))?;
        let d = HostDir(p);
        std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("`{}`: {e}", d.0.display()))?;
        Ok(d)
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn show(&self, name: &str) -> String {
        self.join(name).display().to_string()
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn plant(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("`{}`: {e}", path.display()))
}

/// A host `sleep` the kit starts as a non-root uid, with the marker in its
/// environment; killed on drop.
struct HostSleeper {
    child: Child,
    token: String,
}

impl HostSleeper {
    fn start(uid: u32) -> Result<HostSleeper, String> {
        if uid == 0 {
            return Err("could not set up the host process: its uid must not be root".into());
        }
        // A duration no other process uses, so its command line is ours.
        let token = format!("{}.{}", 3000 + NEXT.fetch_add(1, Ordering::Relaxed), 5);
        let child = Command::new("/bin/sleep")
            .arg(&token)
            .env_clear()
            .env(HOST_ENV_MARKER, HOST_ENV_VALUE)
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("could not set up the host process (`sleep` as uid {uid}): {e}")
            })?;
        let s = HostSleeper { child, token };
        // Wait until it is really `sleep` (exec done), so a probe that sees
        // nothing is not racing its start.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.pid())).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&s.token) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err("could not set up the host process: it never became `sleep`".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Alive, not stopped, not traced.
    fn unharmed(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => {}
            Ok(Some(st)) => return Err(format!("the host process was killed ({st})")),
            Err(e) => return Err(format!("cannot tell whether the host process lives: {e}")),
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .map_err(|e| format!("cannot read the host process's status: {e}"))?;
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .map(|l| l[k.len()..].trim().to_string())
                .unwrap_or_default()
        };
        let state = field("State:");
        if state.starts_with('T') || state.starts_with('t') {
            return Err(format!("the host process was stopped ({state})"));
        }
        let tracer = field("TracerPid:");
        if tracer != "0" {
            return Err(format!("the host process is traced by pid {tracer}"));
        }
        Ok(())
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- the cases ----

fn read_host_files(s: &EscapeSubject) -> Result<String, String> {
    let home = setup("the home-directory bait", HostDir::new(&s.host.home, 0o755))?;
    let open = setup(
        "the open-directory bait",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let (home_bait, open_bait) = (home.join("bait"), open.join("bait"));
    setup("the home-directory bait", plant(&home_bait, BAIT))?;
    setup("the open-directory bait", plant(&open_bait, BAIT))?;
    // What the host's /etc/shadow starts with, if the kit can read it;
    // otherwise its usual first entry.
    let shadow = std::fs::read_to_string("/etc/shadow")
        .ok()
        .and_then(|t| {
            t.lines()
                .next()
                .and_then(|l| l.split(':').next())
                .map(|u| format!("{u}:"))
        })
        .unwrap_or_else(|| "root:".into());
    let run = sh(
        s,
        "cat /etc/shadow; cat \"$1\"; cat \"$2\"; ls -a \"$3\"; cat /etc/gshadow; echo end",
        &[
            &home_bait.display().to_string(),
            &open_bait.display().to_string(),
            &home.0.display().to_string(),
        ],
    );
    run.ran_to_end()?;
    let out = run.all_output();
    if out.contains(BAIT) {
        return Err(format!("the workload read the host's bait {}", run.show()));
    }
    if run.stdout().lines().any(|l| l.starts_with(&shadow)) {
        return Err(format!("the workload read /etc/shadow {}", run.show()));
    }
    if run.stdout().lines().any(|l| l == "bait") {
        return Err(format!(
            "the workload listed the host's home-directory bait {}",
            run.show()
        ));
    }
    Ok("/etc/shadow, the home and the open-directory bait stayed unread".into())
}

fn write_outside(s: &EscapeSubject) -> Result<String, String> {
    let open = setup(
        "an open host directory",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let n = nonce();
    let targets = [
        open.join("pwned"),
        PathBuf::from(format!("/etc/cordon-escape-pwned-{n}")),
        PathBuf::from(format!("/cordon-escape-pwned-{n}")),
        s.host.open_parent.join(format!("cordon-escape-pwned-{n}")),
    ];
    let shown: Vec<String> = targets.iter().map(|p| p.display().to_string()).collect();
    // The first argument is the work dir: a write there must work, or a
    // refusal outside proves nothing (a read-only sandbox refuses both).
    let inside = format!("{}/cordon-escape-inside-{n}", s.work_dir);
    let mut args: Vec<&str> = vec![&inside];
    args.extend(shown.iter().map(String::as_str));
    let run = sh(
        s,
        "echo x > \"$1\" && rm -f -- \"$1\" && echo inside=ok; shift; for p in \"$@\"; do echo x > \"$p\"; done; echo end",
        &args,
    );
    let written: Vec<&String> = targets
        .iter()
        .zip(&shown)
        .filter(|(p, _)| p.symlink_metadata().is_ok())
        .map(|(_, s)| s)
        .collect();
    for p in &targets {
        // The host is put back; the case has already failed.
        let _ = std::fs::remove_file(p);
    }
    if !written.is_empty() {
        return Err(format!(
            "the workload created {} on the host {}",
            written
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", "),
            run.show()
        ));
    }
    run.ran_to_end()?;
    if !run.stdout().contains("inside=ok") {
        return Err(format!(
            "could not set up: the workload could not write inside its work dir `{}` either {}",
            s.work_dir,
            run.show()
        ));
    }
    Ok(format!(
        "the work dir is writable, and none of {} exists on the host",
        targets.len()
    ))
}

fn ld_so() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/lib/ld-linux-aarch64.so.1"
    } else {
        "/lib64/ld-linux-x86-64.so.2"
    }
}

fn exec_denied(s: &EscapeSubject) -> Result<String, String> {
    let d = &s.denied;
    if !Path::new(&d.path).exists() {
        return Err(format!(
            "could not set up: the denied program `{}` does not exist on the host, so refusing it proves nothing",
            d.path
        ));
    }
    // Directly, as the first command.
    let mut argv = vec![d.path.clone()];
    argv.extend(d.args.iter().cloned());
    let direct = exec_in(&*s.sandbox, argv, TIMEOUT);
    if direct.all_output().contains(&d.marker) {
        return Err(format!(
            "`{}` ran as the first command {}",
            d.path,
            direct.show()
        ));
    }
    if direct.status() == Some(ExitStatus::Code(0)) {
        return Err(format!(
            "`{}` as the first command exited 0 {}",
            d.path,
            direct.show()
        ));
    }
    // From a shell, and through the dynamic loader, which needs only read
    // access to the file it loads.
    let script = format!(
        "\"$@\"; echo direct=$?; {} \"$@\"; echo loader=$?; echo end",
        ld_so()
    );
    let mut args = vec![d.path.as_str()];
    args.extend(d.args.iter().map(String::as_str));
    let run = sh(s, &script, &args);
    run.ran_to_end()?;
    if run.stdout().contains(&d.marker) {
        return Err(format!(
            "`{}` ran from a shell or through `{}` {}",
            d.path,
            ld_so(),
            run.show()
        ));
    }
    Ok(format!(
        "`{}` did not run directly, from a shell or through the loader",
        d.path
    ))
}

fn host_processes(s: &EscapeSubject) -> Result<String, String> {
    let mut sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    let pid = sleeper.pid().to_string();
    let run = sh(
        s,
        "kill -9 \"$1\"; echo kill=$?; kill -STOP \"$1\"; echo stop=$?; \
         for f in /proc/[0-9]*/cmdline; do tr '\\000' ' ' < \"$f\" 2>/dev/null; echo; done; echo end",
        &[&pid],
    );
    let harmed = sleeper.unharmed();
    let out = run.stdout();
    harmed.map_err(|e| format!("{e} {}", run.show()))?;
    run.ran_to_end()?;
    if out.contains("kill=0") || out.contains("stop=0") {
        return Err(format!(
            "a signal to the host process was reported delivered {}",
            run.show()
        ));
    }
    let seen = out.contains(&sleeper.token);
    match (host_process_visibility(s.isolation), seen) {
        (HostProcessVisibility::VisibleByDesign, true) => Ok(format!(
            "at the `{}` rung the host process is visible by design (no pid namespace), and it was not signalled",
            s.isolation
        )),
        (HostProcessVisibility::VisibleByDesign, false) => Err(format!(
            "the `{}` rung is expected to see the host process (no pid namespace), and did not: the probe is not measuring what it claims {}",
            s.isolation,
            run.show()
        )),
        (HostProcessVisibility::Hidden, true) => Err(format!(
            "the host process (`sleep {}`) is visible at the `{}` rung",
            sleeper.token, s.isolation
        )),
        (HostProcessVisibility::Hidden, false) => {
            Ok("the host process was neither seen nor signalled".into())
        }
    }
}

/// `print(name, result, errno)` for each call, then `end`.
const PY_LIBC: &str = "import ctypes,os,struct\nlibc=ctypes.CDLL(None,use_errno=True)\ndef say(name,r): print(name,r,ctypes.get_errno(),flush=True)\n";

/// Each `name` must have been reported, with result -1.
fn all_refused(run: &Ran, names: &[&str]) -> Result<Vec<String>, String> {
    let out = run.stdout();
    let mut errnos = Vec::new();
    for name in names {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .ok_or_else(|| format!("could not set up: `{name}` was never tried {}", run.show()))?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"-1") {
            return Err(format!("`{name}` succeeded ({line}) {}", run.show()));
        }
        errnos.push(format!("{name}: errno {}", fields.get(2).unwrap_or(&"?")));
    }
    Ok(errnos)
}

fn ptrace(s: &EscapeSubject) -> Result<String, String> {
    let mut sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    // TRACEME runs in a child of the workload: where it succeeds, the
    // tracer is the workload itself (which reaps it), never the host.
    let code = format!(
        "{PY_LIBC}say('attach',libc.ptrace(16,{pid},0,0))\nsay('seize',libc.ptrace(0x4206,{pid},0,0))\nsay('vm_readv',libc.process_vm_readv({pid},0,0,0,0,0))\nc=os.fork()\nif c==0:\n    say('traceme',libc.ptrace(0,0,0,0)); os._exit(0)\nos.waitpid(c,0)\nprint('end')",
        pid = sleeper.pid()
    );
    let run = py(s, &code);
    let harmed = sleeper.unharmed();
    harmed.map_err(|e| format!("{e} {}", run.show()))?;
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["attach", "seize", "vm_readv", "traceme"])?;
    Ok(format!(
        "refused ({}); the host process is untraced",
        errnos.join(", ")
    ))
}

fn mount_table() -> Result<String, String> {
    std::fs::read_to_string("/proc/1/mountinfo")
        .map_err(|e| format!("could not set up: cannot read the host's mount table: {e}"))
}

fn mount(s: &EscapeSubject) -> Result<String, String> {
    let before = mount_table()?;
    let run = py(
        s,
        &format!(
            "{PY_LIBC}say('mount',libc.mount(b'none',os.getcwd().encode(),b'tmpfs',0,None))\nsay('bind',libc.mount(b'/',b'/tmp',None,4096,None))\nsay('umount',libc.umount2(b'/proc',2))\nsay('chroot',libc.chroot(b'/tmp'))\nprint('end')"
        ),
    );
    let after = mount_table()?;
    if before != after {
        return Err(format!("the host's mount table changed {}", run.show()));
    }
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["mount", "bind", "umount", "chroot"])?;
    Ok(format!(
        "refused ({}); the host's mount table is unchanged",
        errnos.join(", ")
    ))
}

fn unshare(s: &EscapeSubject) -> Result<String, String> {
    // Raw clone(2) with CLONE_NEWUSER: a child that appears exits at once.
    let run = py(
        s,
        &format!(
            "{PY_LIBC}say('unshare_user',libc.unshare(0x10000000))\nsay('unshare_mount',libc.unshare(0x00020000))\nsay('unshare_net',libc.unshare(0x40000000))\nr=libc.syscall(56,0x10000000|17,0,0,0,0)\nif r==0: os._exit(0)\nsay('clone_user',-1 if r<0 else r)\nprint('end')"
        ),
    );
    run.ran_to_end()?;
    let errnos = all_refused(
        &run,
        &["unshare_user", "unshare_mount", "unshare_net", "clone_user"],
    )?;
    Ok(format!("refused ({})", errnos.join(", ")))
}

fn clone3(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        &format!(
            "{PY_LIBC}args=struct.pack('11Q',0x10000000|0x20000|0x40000000,0,0,0,17,0,0,0,0,0,0)\nr=libc.syscall(435,args,88)\nif r==0: os._exit(0)\nsay('clone3',-1 if r<0 else r)\nprint('end')"
        ),
    );
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["clone3"])?;
    let out = run.stdout();
    // ENOSYS (so the C library falls back to clone, whose flags a filter
    // reads) or EPERM; anything else (EINVAL: the kernel parsed the
    // arguments) means the call reached the kernel unfiltered.
    if out.contains("clone3 -1 38") || out.contains("clone3 -1 1\n") {
        Ok(format!("refused ({})", errnos.join(", ")))
    } else {
        Err(format!(
            "clone3 was refused, but not with ENOSYS or EPERM: the kernel saw it {}",
            run.show()
        ))
    }
}

fn special_sockets(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        "import socket\nfor name,fam,typ,proto in [('raw',socket.AF_INET,socket.SOCK_RAW,1),('raw6',socket.AF_INET6,socket.SOCK_RAW,58),('packet',socket.AF_PACKET,socket.SOCK_RAW,0),('netlink',socket.AF_NETLINK,socket.SOCK_RAW,0),('netlink_route',socket.AF_NETLINK,socket.SOCK_DGRAM,0)]:\n    try:\n        socket.socket(fam,typ,proto); print(name,'OPENED')\n    except OSError as e: print(name,'refused',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let open = breaches(&run.stdout(), &["OPENED"]);
    if !open.is_empty() {
        return Err(format!("opened: {} {}", open.join("; "), run.show()));
    }
    Ok("raw, packet and netlink sockets were all refused".into())
}

/// Whether anything arrived: `Ok(true)` when it did.
fn arrived<T>(r: std::io::Result<T>) -> Result<bool, String> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(format!("could not check the host listener: {e}")),
    }
}

fn tcp_connect(s: &EscapeSubject) -> Result<String, String> {
    let l = setup("a TCP listener", TcpListener::bind("127.0.0.1:0"))?;
    setup("a TCP listener", l.set_nonblocking(true))?;
    let port = setup("a TCP listener", l.local_addr())?.port();
    let run = py(
        s,
        &format!(
            "import socket\ntry:\n    c=socket.create_connection(('127.0.0.1',{port}),timeout=2); c.sendall(b'{BAIT}'); print('tcp REACHED')\nexcept OSError as e: print('tcp refused',e.errno)\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(100));
    if arrived(l.accept())? {
        return Err(format!(
            "a connection arrived at the host's listener on 127.0.0.1:{port} {}",
            run.show()
        ));
    }
    run.ran_to_end()?;
    if run.stdout().contains("REACHED") {
        return Err(format!("the workload connected {}", run.show()));
    }
    Ok(format!("nothing reached 127.0.0.1:{port} on the host"))
}

fn udp_send(s: &EscapeSubject) -> Result<String, String> {
    let u = setup("a UDP socket", UdpSocket::bind("127.0.0.1:0"))?;
    setup("a UDP socket", u.set_nonblocking(true))?;
    let port = setup("a UDP socket", u.local_addr())?.port();
    let run = py(
        s,
        &format!(
            "import socket\ntry:\n    k=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n    for i in range(3): k.sendto(b'{BAIT}',('127.0.0.1',{port}))\n    print('udp sent')\nexcept OSError as e: print('udp refused',e.errno)\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 64];
    if arrived(u.recv(&mut buf))? {
        return Err(format!(
            "a datagram arrived at the host's socket on 127.0.0.1:{port} {}",
            run.show()
        ));
    }
    run.ran_to_end()?;
    // A send inside the sandbox's own network namespace may "succeed"; what
    // matters is that nothing reached the host.
    Ok(format!("nothing reached 127.0.0.1:{port} on the host"))
}

fn unix_listener(dir: &HostDir, name: &str) -> Result<UnixListener, String> {
    let path = dir.join(name);
    let l = setup("a unix listener", UnixListener::bind(&path))?;
    setup("a unix listener", l.set_nonblocking(true))?;
    setup(
        "a unix listener",
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)),
    )?;
    Ok(l)
}

const PY_UNIX: &str = "import socket,sys\ndef conn(name,p):\n    try:\n        k=socket.socket(socket.AF_UNIX); k.connect(p); print(name,'REACHED',flush=True)\n    except OSError as e: print(name,'refused',e.errno,flush=True)\n";

fn unix_socket(s: &EscapeSubject) -> Result<String, String> {
    let dir = setup(
        "an open host directory",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let l = unix_listener(&dir, "host.sock")?;
    let path = dir.show("host.sock");
    let run = py(s, &format!("{PY_UNIX}conn('unix',{path:?})\nprint('end')"));
    std::thread::sleep(Duration::from_millis(50));
    if arrived(l.accept())? {
        return Err(format!("a connection arrived at `{path}` {}", run.show()));
    }
    run.ran_to_end()?;
    if run.stdout().contains("REACHED") {
        return Err(format!("the workload connected to `{path}` {}", run.show()));
    }
    Ok(format!("nothing reached `{path}`"))
}

fn bind_port(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        "import socket\nfor name,fam,addr in [('tcp4',socket.AF_INET,('127.0.0.1',0)),('tcp4_any',socket.AF_INET,('0.0.0.0',0)),('tcp6',socket.AF_INET6,('::1',0))]:\n    try:\n        k=socket.socket(fam); k.bind(addr); k.listen(); print(name,'BOUND',k.getsockname()[1])\n    except OSError as e: print(name,'refused',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let bound = breaches(&run.stdout(), &["BOUND"]);
    if !bound.is_empty() {
        return Err(format!("bound: {} {}", bound.join("; "), run.show()));
    }
    Ok("no port could be bound".into())
}

fn tiocsti(s: &EscapeSubject) -> Result<String, String> {
    // stdio, the controlling terminal, and a pty of the workload's own made
    // the controlling terminal of a new session (so the kernel's own
    // check, which refuses a terminal that is not the caller's, passes and
    // only a filter can refuse): the ioctl must be refused on any terminal
    // it can reach.
    let run = py(
        s,
        "import fcntl,termios,os\ndef push(name,fd):\n    try:\n        fcntl.ioctl(fd,termios.TIOCSTI,b'X'); print(name,'PUSHED',flush=True)\n    except OSError as e: print(name,'refused',e.errno,flush=True)\nfor fd in (0,1,2): push('stdio%d'%fd,fd)\ntry:\n    t=os.open('/dev/tty',os.O_RDWR); push('tty',t)\nexcept OSError as e: print('tty absent',e.errno)\ntry:\n    m,sl=os.openpty()\n    name=os.ttyname(sl)\n    pid=os.fork()\n    if pid==0:\n        os.setsid(); t=os.open(name,os.O_RDWR); push('pty',t); os._exit(0)\n    os.waitpid(pid,0)\nexcept OSError as e: print('pty absent',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let out = run.stdout();
    let pushed = breaches(&out, &["PUSHED"]);
    if !pushed.is_empty() {
        return Err(format!(
            "pushed a keystroke: {} {}",
            pushed.join("; "),
            run.show()
        ));
    }
    // On a pty it opened itself, the refusal must be the filter's (EPERM),
    // not a terminal's own answer.
    if let Some(line) = out.lines().find(|l| l.starts_with("pty refused")) {
        if line != "pty refused 1" {
            return Err(format!(
                "TIOCSTI on the workload's own pty was refused, but not with EPERM ({line}): the call reached the terminal {}",
                run.show()
            ));
        }
    }
    let reached: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("tty ") || l.starts_with("pty "))
        .collect();
    Ok(format!("never pushed ({})", reached.join(", ")))
}

fn bounded(s: &EscapeSubject, code: &str) -> Ran {
    py_in(&*s.bounded, code)
}

/// Live (not zombie) host processes whose command line holds `token`,
/// after a grace of two seconds for the sandbox's teardown.
fn survivors(token: &str) -> Vec<u32> {
    let scan = || {
        let mut left = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return left;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains(token) {
                continue;
            }
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if !zombie {
                left.push(pid);
            }
        }
        left
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = scan();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fails when processes of the workload outlived its exec (and kills
/// them, as the host's cleanup: the case has already failed).
fn none_survive(token: &str, run: &Ran) -> Result<(), String> {
    let left = survivors(token);
    if left.is_empty() {
        return Ok(());
    }
    for pid in &left {
        let _ = Command::new("/bin/kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    Err(format!(
        "{} process(es) of the workload outlived it on the host: {left:?} {}",
        left.len(),
        run.show()
    ))
}

fn fork_bomb(s: &EscapeSubject) -> Result<String, String> {
    // The children sleep (and are capped at 500) so an unconfined subject
    // does not take the host down with it. The token marks its processes
    // on the host.
    let token = format!("cordon-escape-fork-{}", nonce());
    let run = bounded(
        s,
        &format!("# {token}\nimport os,time\nn=0\nfor i in range(500):\n    try:\n        if os.fork()==0:\n            time.sleep(20); os._exit(0)\n        n+=1\n    except OSError: break\nprint('forked',n,flush=True)\nprint('end',flush=True)"
        ),
    );
    none_survive(&token, &run)?;
    let forked: Option<u64> = run.stdout().lines().find_map(|l| {
        l.strip_prefix("forked ")
            .and_then(|n| n.trim().parse().ok())
    });
    match (forked, run.status()) {
        (Some(n), _) if n >= BOUND_PROCESSES => Err(format!(
            "forked {n} processes under max_processes {BOUND_PROCESSES} {}",
            run.show()
        )),
        (Some(n), _) if run.took > Duration::from_secs(10) => Err(format!(
            "forked {n}, but the sleeping children kept the run alive for {:.1}s {}",
            run.took.as_secs_f64(),
            run.show()
        )),
        (Some(n), _) => Ok(format!(
            "stopped after {n} forks under max_processes {BOUND_PROCESSES}"
        )),
        (
            None,
            Some(ExitStatus::Bound {
                bound: "max_processes",
            }),
        ) => Ok("killed at the `max_processes` bound".into()),
        (None, _) => Err(format!(
            "could not set up: the fork bomb never reported {}",
            run.show()
        )),
    }
}

fn memory_bomb(s: &EscapeSubject) -> Result<String, String> {
    // Stops by itself at 1 GiB, so an unconfined subject survives it.
    let run = bounded(
        s,
        "x=[]\nprint('start',flush=True)\nfor i in range(128): x.append(b'\\x01'*(8<<20))\nprint('ALLOCATED',len(x)*8,'MiB',flush=True)",
    );
    if !run.stdout().contains("start")
        && run.status()
            != Some(ExitStatus::Bound {
                bound: "max_memory",
            })
    {
        return Err(format!(
            "could not set up: the workload did not start {}",
            run.show()
        ));
    }
    if run.stdout().contains("ALLOCATED") {
        return Err(format!(
            "allocated 1 GiB under max_memory {} MiB {}",
            BOUND_MEMORY >> 20,
            run.show()
        ));
    }
    match run.status() {
        Some(ExitStatus::Bound {
            bound: "max_memory",
        }) => Ok("killed at the `max_memory` bound".into()),
        _ => Err(format!(
            "stopped, but not reported as the `max_memory` bound {}",
            run.show()
        )),
    }
}

fn cpu_spin(s: &EscapeSubject) -> Result<String, String> {
    // Four spinners: a per-process limit would let them use four times the
    // bound. Each gives up after 20 s of wall time on its own.
    let token = format!("cordon-escape-spin-{}", nonce());
    let run = bounded(
        s,
        &format!("# {token}\nimport os,time\nprint('start',flush=True)\nfor i in range(3):\n    if os.fork()==0: break\nt=time.time()\nwhile time.time()-t<20: pass\nprint('SPUN',flush=True)"
        ),
    );
    none_survive(&token, &run)?;
    if run.stdout().contains("SPUN") {
        return Err(format!(
            "spun for 20 s under max_cpu_seconds {BOUND_CPU_SECONDS} {}",
            run.show()
        ));
    }
    match run.status() {
        Some(ExitStatus::Bound {
            bound: "max_cpu_seconds",
        }) if run.took < Duration::from_secs(BOUND_WALL_SECONDS + 2) => Ok(format!(
            "killed at the `max_cpu_seconds` bound after {:.1}s",
            run.took.as_secs_f64()
        )),
        _ => Err(format!(
            "not stopped at the `max_cpu_seconds` bound ({:.1}s) {}",
            run.took.as_secs_f64(),
            run.show()
        )),
    }
}

fn wall_clock(s: &EscapeSubject) -> Result<String, String> {
    // The request's own timeout is far above the bound: what stops it must
    // be the sandbox's `max_wall_seconds`.
    let run = exec_in(
        &*s.bounded,
        vec!["/bin/sleep".into(), "60".into()],
        Duration::from_secs(30),
    );
    match run.status() {
        Some(ExitStatus::TimedOut) if run.took < Duration::from_secs(BOUND_WALL_SECONDS + 3) => {
            Ok(format!(
                "stopped at the `max_wall_seconds` bound after {:.1}s",
                run.took.as_secs_f64()
            ))
        }
        _ => Err(format!(
            "not stopped at max_wall_seconds {BOUND_WALL_SECONDS} ({:.1}s) {}",
            run.took.as_secs_f64(),
            run.show()
        )),
    }
}

const HOST_KNOBS: [&str; 4] = [
    "/proc/sys/kernel/hostname",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/kernel/core_pattern",
    "/sys/class/net/lo/tx_queue_len",
];

fn proc_sys_write(s: &EscapeSubject) -> Result<String, String> {
    let mut before = Vec::new();
    for k in HOST_KNOBS {
        before.push(setup(
            &format!("the host value `{k}`"),
            std::fs::read_to_string(k),
        )?);
    }
    let run = sh(
        s,
        "echo cordon-pwned > /proc/sys/kernel/hostname; echo 1 > /proc/sys/vm/overcommit_memory; echo '|/bin/false' > /proc/sys/kernel/core_pattern; echo 77 > /sys/class/net/lo/tx_queue_len; echo end",
        &[],
    );
    let mut changed = Vec::new();
    for (k, was) in HOST_KNOBS.iter().zip(&before) {
        let now = std::fs::read_to_string(k).unwrap_or_default();
        if &now != was {
            // Put the host back; the case has already failed.
            let _ = std::fs::write(k, was);
            changed.push(format!("`{k}` ({:?} -> {:?})", was.trim(), now.trim()));
        }
    }
    if !changed.is_empty() {
        return Err(format!(
            "the workload changed {} {}",
            changed.join(", "),
            run.show()
        ));
    }
    run.ran_to_end()?;
    Ok(format!("{} host values unchanged", HOST_KNOBS.len()))
}

fn devices(s: &EscapeSubject) -> Result<String, String> {
    if !Path::new("/dev/kvm").exists() {
        return Err(
            "could not set up: this host has no `/dev/kvm`, so refusing it proves nothing".into(),
        );
    }
    let dir = setup(
        "a Docker-style socket directory",
        HostDir::new(&s.host.run_dir, 0o777),
    )?;
    let l = unix_listener(&dir, "docker.sock")?;
    let path = dir.show("docker.sock");
    let run = py(
        s,
        &format!(
            "{PY_UNIX}import os\nfor p in ['/dev/kvm','/dev/mem','/dev/kmsg']:\n    try: os.open(p,os.O_RDWR); print(p,'OPENED')\n    except OSError as e: print(p,'refused',e.errno)\nconn('docker',{path:?})\nconn('docker_std','/var/run/docker.sock')\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(50));
    if arrived(l.accept())? {
        return Err(format!("a connection arrived at `{path}` {}", run.show()));
    }
    run.ran_to_end()?;
    let b = breaches(&run.stdout(), &["OPENED", "REACHED"]);
    if !b.is_empty() {
        return Err(format!("reached: {} {}", b.join("; "), run.show()));
    }
    Ok(format!("`/dev/kvm` and `{path}` were not reached"))
}

fn host_environment(s: &EscapeSubject) -> Result<String, String> {
    if std::env::var(HOST_ENV_MARKER).as_deref() != Ok(HOST_ENV_VALUE) {
        return Err(format!(
            "could not set up: the marker is not in the kit's environment; start the kit's process with `{HOST_ENV_MARKER}={HOST_ENV_VALUE}`"
        ));
    }
    // A host process started with the marker in its environment: the
    // workload must not read it through /proc either.
    let _sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    let run = sh(
        s,
        "env; for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < \"$f\" 2>/dev/null; done; echo end",
        &[],
    );
    run.ran_to_end()?;
    if run.all_output().contains(HOST_ENV_VALUE) {
        return Err(format!(
            "the host's `{HOST_ENV_MARKER}` reached the workload {}",
            run.show()
        ));
    }
    Ok("the host's environment did not reach the workload".into())
}

// ---- cross-exec cases: one exec against the next, or a concurrent one ----

/// What a planted tool prints when it runs.
const PLANTED: &str = "cordon-escape-planted-tool-3b9e";
/// The tools exec 1 plants, and what the real ones print in exec 2.
const TOOLS: [&str; 3] = ["python3", "sh", "ls"];

/// One exec with its own environment and standard input.
fn exec_with(
    sandbox: &dyn Sandbox,
    argv: Vec<String>,
    env: std::collections::BTreeMap<String, String>,
    stdin: &[u8],
    timeout: Duration,
) -> Ran {
    let started = Instant::now();
    let result = sandbox.exec(&ExecRequest {
        argv,
        env,
        stdin: stdin.to_vec(),
        timeout,
        max_output_bytes: 1 << 20,
    });
    Ran {
        result,
        took: started.elapsed(),
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

/// Inode, size and modification time of a host entry.
type HostEntry = (u64, u64, i64, i64);

/// What the host holds at `p` (not following a link): `None` when nothing.
fn host_entry(p: &Path) -> Option<HostEntry> {
    use std::os::unix::fs::MetadataExt;
    p.symlink_metadata()
        .ok()
        .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

fn plant_tool(s: &EscapeSubject) -> Result<String, String> {
    let dirs = &s.host.path_dirs;
    if dirs.is_empty() {
        return Err("could not set up: no PATH directories to plant in".into());
    }
    let path = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let env = std::collections::BTreeMap::from([("PATH".to_string(), path.clone())]);
    // Every place exec 1 plants in, as the host sees it before: a PATH
    // directory is the host's own at the local rungs (the image is the
    // host's); `/tmp`, `/var/tmp`, `/dev/shm` and `$HOME` too where the
    // rung does not give the workload its own.
    let mut plant_dirs: Vec<PathBuf> = dirs.clone();
    for extra in ["/tmp", "/var/tmp", "/dev/shm"] {
        if !plant_dirs.iter().any(|d| d == Path::new(extra)) {
            plant_dirs.push(PathBuf::from(extra));
        }
    }
    let n = nonce();
    let sibling = format!("cordon-escape-plant-{n}");
    let mut watched: Vec<(PathBuf, Option<HostEntry>)> = Vec::new();
    for d in dirs {
        for t in TOOLS {
            let p = d.join(t);
            watched.push((p.clone(), host_entry(&p)));
        }
        let p = d.join(&sibling);
        watched.push((p.clone(), host_entry(&p)));
    }
    // Exec 1: in each directory, plant each tool where none is (noclobber:
    // the real one is never overwritten, so a broken sandbox does not
    // break the host); where one is, open it for appending without
    // writing (a breach, harmlessly); and a fresh sibling, which proves the
    // directory writable. `$HOME` is planted in too (the work dir: allowed,
    // but not on PATH).
    let script = format!(
        "set -C\nm={PLANTED}\nsib=$1; shift\nfor d in \"$@\" ${{HOME:+\"$HOME\"}}; do\n  for t in {tools}; do\n    p=\"$d/$t\"\n    if [ -e \"$p\" ] || [ -L \"$p\" ]; then\n      if true 2>/dev/null >>\"$p\"; then echo \"$p OPENED-FOR-WRITE\"; fi\n    elif printf '#!/bin/sh\\necho %s\\n' \"$m\" 2>/dev/null >\"$p\" && /bin/chmod 755 \"$p\" 2>/dev/null; then\n      echo \"$p PLANTED\"\n    fi\n  done\n  if true 2>/dev/null >\"$d/$sib\"; then echo \"$d/$sib PLANTED\"; fi\ndone\necho end",
        tools = TOOLS.join(" ")
    );
    let mut argv = strings(&["/bin/sh", "-c", &script, "sh", &sibling]);
    argv.extend(plant_dirs.iter().map(|d| d.display().to_string()));
    argv.push(s.work_dir.clone());
    let first = exec_with(&*s.sandbox, argv, env.clone(), b"", TIMEOUT);
    // The host afterwards: nothing new where nothing was, nothing changed
    // where something was.
    let mut changed = Vec::new();
    for (p, before) in &watched {
        if host_entry(p) != *before {
            changed.push((p, before.is_none()));
        }
    }
    // Exec 2: the tools by bare name (the backend resolves it) and from a
    // shell (PATH lookup inside the sandbox).
    let bare = exec_with(
        &*s.sandbox,
        strings(&["python3", "-c", "print('real-python3', 6*7)"]),
        env.clone(),
        b"",
        TIMEOUT,
    );
    let second = exec_with(
        &*s.sandbox,
        strings(&[
            "/bin/sh",
            "-c",
            "python3 -c \"print('real-python3', 6*7)\"; ls -d /; sh -c 'echo real-sh'; echo end",
        ]),
        env,
        b"",
        TIMEOUT,
    );
    // Exec 1's leftovers in places the workload may write (its work dir,
    // its own /tmp) are cleaned by a third exec.
    let _ = exec_in(
        &*s.sandbox,
        vec![
            "/bin/sh".into(),
            "-c".into(),
            "for d in \"$3\" ${HOME:+\"$HOME\"} /tmp /var/tmp /dev/shm; do for t in python3 sh ls; do p=\"$d/$t\"; if grep -qs \"$1\" \"$p\"; then rm -f \"$p\"; fi; done; rm -f \"$d/$2\"; done".into(),
            "sh".into(),
            PLANTED.into(),
            sibling.clone(),
            s.work_dir.clone(),
        ],
        TIMEOUT,
    );
    for (p, new) in &changed {
        if *new {
            // Put the host back; the case has already failed.
            let _ = std::fs::remove_file(p);
        }
    }
    let changed: Vec<String> = changed
        .iter()
        .map(|(p, _)| format!("`{}`", p.display()))
        .collect();
    let ran_planted = [&bare, &second]
        .iter()
        .any(|r| r.all_output().contains(PLANTED));
    if !changed.is_empty() {
        return Err(format!(
            "exec 1 changed the host's {}{} {}",
            changed.join(", "),
            if ran_planted {
                ", and exec 2 ran the planted tool"
            } else {
                ""
            },
            first.show()
        ));
    }
    for (what, run) in [("bare name", &bare), ("shell lookup", &second)] {
        if run.all_output().contains(PLANTED) {
            return Err(format!(
                "exec 2 ran the tool exec 1 planted ({what}) {}; exec 1: {}",
                run.show(),
                first.show()
            ));
        }
    }
    first.ran_to_end()?;
    second.ran_to_end()?;
    let out = second.stdout();
    let real = out.contains("real-python3 42")
        && out.lines().any(|l| l == "/")
        && out.contains("real-sh")
        && bare.stdout().contains("real-python3 42");
    if !real {
        return Err(format!(
            "could not set up: exec 2 did not run the real tools {} {}",
            bare.show(),
            second.show()
        ));
    }
    let reached = breaches(&first.stdout(), &["PLANTED", "OPENED-FOR-WRITE"]);
    let on_path: Vec<&String> = reached
        .iter()
        .filter(|l| {
            dirs.iter()
                .any(|d| l.starts_with(&format!("{}/", d.display())))
        })
        .collect();
    if !on_path.is_empty() {
        return Err(format!(
            "exec 1 wrote into PATH directories exec 2 did not read from: {}",
            on_path
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(format!(
        "exec 2 ran the real {}; nothing planted in {} PATH directories (exec 1 wrote only off PATH: {})",
        TOOLS.join(", "),
        dirs.len(),
        if reached.is_empty() {
            "nowhere".to_string()
        } else {
            reached
                .iter()
                .map(|l| l.trim_end_matches(" PLANTED").to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))
}

/// How long a tamperer waits before it acts: well after its exec ended.
const TAMPER_DELAY_SECONDS: u64 = 1;
/// The tamperer: ignores the polite signals, writes its file after the
/// delay, then stays alive (as itself, so its command line keeps the
/// token) for 30 s.
const TAMPERER: &str = "trap '' HUP TERM INT; sleep 1; echo tampered > \"$1\"; i=0; while [ $i -lt 30 ]; do sleep 1; i=$((i+1)); done";
/// The ways exec 1 leaves a tamperer behind.
const TAMPER_WAYS: [&str; 7] = [
    "amp",
    "subshell",
    "nohup",
    "setsid",
    "double-fork",
    "daemon",
    "hopper",
];
/// A tamperer that changes pid all the time (fork, parent exits) so that
/// a kill by membership races it; it gives up after 5 s on its own.
const HOPPER: &str = "import os,sys,time\nt=time.time()\nif os.fork(): os._exit(0)\nos.setsid()\nn=os.open('/dev/null',os.O_RDWR)\nfor f in (0,1,2): os.dup2(n,f)\ndone=False\nwhile time.time()-t<5:\n    if os.fork(): os._exit(0)\n    if not done and time.time()-t>1:\n        open(sys.argv[1],'w').write('tampered'); done=True";

fn background_outlives(s: &EscapeSubject) -> Result<String, String> {
    let token = format!("cordon-escape-bg-{}", nonce());
    // Exec 1: every way at once, each with its own file; the daemon is
    // python (fork, setsid, fork, standard streams to /dev/null).
    let daemon = "import os,sys,time,signal\nfor g in (signal.SIGHUP,signal.SIGTERM,signal.SIGINT): signal.signal(g,signal.SIG_IGN)\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\nn=os.open('/dev/null',os.O_RDWR)\nfor f in (0,1,2): os.dup2(n,f)\ntime.sleep(1)\nopen(sys.argv[1],'w').write('tampered')\ntime.sleep(30)";
    // Each tamperer's file is `PREFIX-WAY-TOKEN` in the work dir (the
    // exec's working directory, which it reports: the path the sandbox's
    // file surface answers for).
    let script = "t=$1; T=$2; D=$3; w=\"$PWD/$4\"\n\
         echo \"cwd=$PWD\"\n\
         exec </dev/null >/dev/null 2>&1\n\
         /bin/sh -c \"$T\" bg \"$w-amp-$t\" \"$t\" &\n\
         ( /bin/sh -c \"$T\" bg \"$w-subshell-$t\" \"$t\" ) &\n\
         nohup /bin/sh -c \"$T\" bg \"$w-nohup-$t\" \"$t\" &\n\
         setsid /bin/sh -c \"$T\" bg \"$w-setsid-$t\" \"$t\" &\n\
         ( ( /bin/sh -c \"$T\" bg \"$w-double-fork-$t\" \"$t\" & ) & )\n\
         python3 -c \"$D\" \"$w-daemon-$t\" \"$t\"\n\
         python3 -c \"$5\" \"$w-hopper-$t\" \"$t\"\n\
         exit 0";
    let prefix = "cordon-escape-tamper";
    let first = exec_in(
        &*s.sandbox,
        strings(&[
            "/bin/sh", "-c", script, "sh", &token, TAMPERER, daemon, prefix, HOPPER,
        ]),
        TIMEOUT,
    );
    // Well past the tamperers' delay.
    std::thread::sleep(Duration::from_secs(TAMPER_DELAY_SECONDS) + Duration::from_millis(1500));
    // The host: no tamperer alive, no file written.
    let alive = survivors(&token);
    let cwd = first
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("cwd=").map(str::to_string))
        .unwrap_or_else(|| s.work_dir.clone());
    let mut written = Vec::new();
    for w in TAMPER_WAYS {
        let found = s
            .sandbox
            .stat_no_follow(&format!("{cwd}/{prefix}-{w}-{token}"))
            .map_err(|e| format!("could not check the work dir from the host side: {e}"));
        if let Err(e) = found {
            none_survive(&token, &first)?;
            return Err(e);
        }
        if matches!(found, Ok(Some(_))) {
            written.push(w.to_string());
        }
    }
    // Exec 2: what it sees of them (the token in two halves, so its own
    // command line does not hold it), then it cleans up the files.
    let (t1, t2) = token.split_at(token.len() / 2);
    let second = exec_in(
        &*s.sandbox,
        strings(&[
            "/bin/sh",
            "-c",
            "t=\"$1$2\"; for f in /proc/[0-9]*/cmdline; do if tr '\\000' ' ' < \"$f\" 2>/dev/null | grep -q -- \"$t\"; then echo \"ALIVE $f\"; fi; done; for f in \"$3\"-*-\"$t\"; do [ -e \"$f\" ] && echo \"WRITTEN $f\"; rm -f \"$f\"; done; echo end",
            "sh",
            t1,
            t2,
            prefix,
        ]),
        TIMEOUT,
    );
    let outlived = if alive.is_empty() {
        Ok(())
    } else {
        // Kills them: the host's cleanup (the case has already failed).
        none_survive(&token, &first)
    };
    match (outlived, written.is_empty()) {
        (Ok(()), true) => {}
        (Ok(()), false) => {
            return Err(format!(
                "a tamperer left behind by exec 1 wrote after it ended ({}) {}",
                written.join(", "),
                first.show()
            ))
        }
        (Err(e), true) => return Err(e),
        (Err(e), false) => {
            return Err(format!(
                "{e}; and they wrote after it ended ({})",
                written.join(", ")
            ))
        }
    }
    second.ran_to_end()?;
    let seen = breaches(&second.stdout(), &["ALIVE", "WRITTEN"]);
    if !seen.is_empty() {
        return Err(format!(
            "exec 2 saw exec 1's tamperers: {} {}",
            seen.join("; "),
            second.show()
        ));
    }
    if first.status() != Some(ExitStatus::Code(0)) {
        return Err(format!(
            "could not set up: exec 1 did not start its tamperers {}",
            first.show()
        ));
    }
    Ok(format!(
        "none of {} tamperers ({}) outlived exec 1; none wrote",
        TAMPER_WAYS.len(),
        TAMPER_WAYS.join(", ")
    ))
}

/// How long the concurrent sleeper sleeps before it reads its stdin.
const SLEEPER_SECONDS: u64 = 4;

/// What `concurrent-exec-tampering` judges: every way to act on the
/// sleeper or PID 1.
const TAMPERING: [&str; 19] = [
    "environ",
    "mem",
    "fd_link",
    "seize",
    "vm_readv",
    "kill0",
    "pidfd_signal0",
    "init_environ",
    "init_mem",
    "init_fd_list",
    "init_fd_link",
    "init_seize",
    "init_vm_readv",
    "init_kill0",
    "init_pidfd_signal0",
    "stdout_write",
    "stdin_write",
    "stop",
    "kill9",
];
/// What `concurrent-exec-proc-info` judges: what a concurrent exec reads
/// of the sleeper without acting on it.
const PROC_INFO: [&str; 2] = ["fd_list", "cmdline"];

/// Exec A sleeps (its pid in a file in the work dir) while exec B tries
/// everything on it and on PID 1; `judged` names the calls that must have
/// been refused; A must finish normally whatever B reports.
fn concurrent_exec(s: &EscapeSubject, judged: &[&str]) -> Result<String, String> {
    let token = format!("cordon-escape-sleeper-{}", nonce());
    let stdin = format!("stdin-of-the-sleeper-{}\n", nonce());
    let (t1, t2) = token.split_at(token.len() / 2);
    // B: find A through /proc (and PID 1), then try everything on both.
    // Each line is `name result errno`, as `all_refused` reads it. PID 1
    // gets only signal 0, a seize (released when B exits) and reads, so an
    // unconfined subject does not harm its host's init.
    let attacker = format!(
        "{PY_LIBC}import sys,time,signal\n\
tok=sys.argv[1]+sys.argv[2]\nme=os.getpid()\n\
def find():\n    for d in os.listdir('/proc'):\n        if d.isdigit() and int(d)!=me:\n            try:\n                if tok in open('/proc/%s/cmdline'%d,'rb').read().replace(b'\\0',b' ').decode(): return int(d)\n            except (OSError,ValueError): pass\n    return None\n\
pid=None\nt=time.time()\nwhile pid is None and time.time()-t<{find}:\n    pid=find()\n    if pid is None: time.sleep(0.05)\n\
if pid is None:\n    print('invisible' if sys.argv[1] in open('/proc/self/cmdline','rb').read().decode(errors='replace') else 'nofind'); sys.exit(0)\n\
inits=(('',pid),) if os.getppid()==1 else (('',pid),('init_',1))\n\
if os.getppid()==1: print('init_own',flush=True)\n\
def op(name,f):\n    try:\n        f(); print(name,0,0,flush=True)\n    except OSError as e: print(name,-1,e.errno,flush=True)\n\
def rd(p): open(p,'rb').read(64)\n\
def wr(p):\n    fd=os.open(p,os.O_WRONLY|os.O_NONBLOCK)\n    try: os.write(fd,b'{BAIT}\\n')\n    finally: os.close(fd)\n\
def seize(p):\n    if libc.ptrace(0x4206,p,0,0)!=0: raise OSError(ctypes.get_errno(),'seize')\n\
def vm(p):\n    b=ctypes.create_string_buffer(8)\n    l=(ctypes.c_void_p*2)(ctypes.cast(b,ctypes.c_void_p),8)\n    r=(ctypes.c_void_p*2)(0x400000,8)\n    if libc.process_vm_readv(p,l,1,r,1,0)<0:\n        e=ctypes.get_errno()\n        if e!=14: raise OSError(e,'vm')\n\
def sig(p,n): os.kill(p,n)\n\
def pidfd(p):\n    fd=os.pidfd_open(p)\n    try: signal.pidfd_send_signal(fd,0)\n    finally: os.close(fd)\n\
def cmdline(p):\n    if tok not in open('/proc/%d/cmdline'%p,'rb').read().replace(b'\\0',b' ').decode(): raise OSError(0,'no token')\n\
if sys.argv[3]=='info':\n    op('fd_list',lambda: os.listdir('/proc/%d/fd'%pid)); op('cmdline',lambda: cmdline(pid)); print('end'); sys.exit(0)\n\
for pre,p in inits:\n\
\x20   op(pre+'environ',lambda: rd('/proc/%d/environ'%p))\n\
\x20   op(pre+'mem',lambda: os.close(os.open('/proc/%d/mem'%p,os.O_RDONLY)))\n\
\x20   op(pre+'fd_list',lambda: os.listdir('/proc/%d/fd'%p))\n\
\x20   op(pre+'fd_link',lambda: os.readlink('/proc/%d/fd/1'%p))\n\
\x20   op(pre+'seize',lambda: seize(p))\n\
\x20   op(pre+'vm_readv',lambda: vm(p))\n\
\x20   op(pre+'kill0',lambda: sig(p,0))\n\
\x20   op(pre+'pidfd_signal0',lambda: pidfd(p))\n\
op('stdout_write',lambda: wr('/proc/%d/fd/1'%pid))\n\
op('stdin_write',lambda: wr('/proc/%d/fd/0'%pid))\n\
op('stop',lambda: sig(pid,signal.SIGSTOP))\n\
try: os.kill(pid,signal.SIGCONT)\nexcept OSError: pass\n\
op('kill9',lambda: sig(pid,signal.SIGKILL))\n\
print('end')",
        find = SLEEPER_SECONDS
    );
    // Only reads for the information case, so its judgment is not hidden
    // behind the sleeper's own.
    let mode = if judged == PROC_INFO { "info" } else { "all" };
    let env = crate::outputs::plain_env();
    let (sleeper, attack) = std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            exec_with(
                &*s.sandbox,
                strings(&[
                    "/bin/sh",
                    "-c",
                    &format!("echo $$ > \".$1.pid\"; sleep {SLEEPER_SECONDS}; rm -f \".$1.pid\"; cat; echo sleeper-done"),
                    "sh",
                    &token,
                ]),
                env.clone(),
                stdin.as_bytes(),
                TIMEOUT,
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let b = exec_with(
            &*s.sandbox,
            strings(&["/usr/bin/python3", "-c", &attacker, t1, t2, mode]),
            env.clone(),
            b"",
            TIMEOUT,
        );
        let a = a.join().unwrap_or_else(|_| Ran {
            result: Err(SandboxError::Failed {
                operation: "exec",
                reason: "the sleeper's thread panicked".into(),
            }),
            took: Duration::ZERO,
        });
        (a, b)
    });
    // The host afterwards: neither exec left anything, and the sandbox
    // (its init) still serves an exec.
    none_survive(&token, &sleeper)?;
    let after = exec_in(
        &*s.sandbox,
        strings(&["/bin/sh", "-c", "echo still-serving"]),
        TIMEOUT,
    );
    let sleeper_out = sleeper.stdout();
    if sleeper.all_output().contains(BAIT) {
        return Err(format!(
            "exec B wrote into the sleeper's stdin or stdout {}; B: {}",
            sleeper.show(),
            attack.show()
        ));
    }
    let finished = sleeper.status() == Some(ExitStatus::Code(0))
        && sleeper_out.contains("sleeper-done")
        && sleeper_out.contains(stdin.trim());
    if !finished {
        return Err(format!(
            "the sleeper did not finish normally {}; B: {}",
            sleeper.show(),
            attack.show()
        ));
    }
    if !after.stdout().contains("still-serving") {
        return Err(format!(
            "the sandbox no longer serves an exec after B's attempts {}; B: {}",
            after.show(),
            attack.show()
        ));
    }
    if attack.stdout().contains("nofind") {
        return Err(format!(
            "could not set up: exec B never found the sleeper in /proc {}",
            attack.show()
        ));
    }
    if attack.status() == Some(ExitStatus::Code(0))
        && attack.stdout().lines().any(|l| l == "invisible")
    {
        // B reads its own /proc entry but no process holds the sleeper's
        // token: the sleeper is in another pid namespace.
        return Ok(
            "exec B cannot see the sleeper at all (each exec has a pid namespace and /proc of its own); the sleeper finished normally"
                .to_string(),
        );
    }
    attack.ran_to_end()?;
    // B's PID 1 is its own exec's init (a pid namespace per exec), not the
    // sandbox's: the init probes do not apply.
    let judged: Vec<&str> = if attack.stdout().lines().any(|l| l == "init_own") {
        judged
            .iter()
            .copied()
            .filter(|n| !n.starts_with("init_"))
            .collect()
    } else {
        judged.to_vec()
    };
    let errnos = all_refused(&attack, &judged)?;
    Ok(format!(
        "exec B was refused ({}); the sleeper finished normally",
        errnos.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    //! The kit can fail: an unconfined subject (the host-directory sandbox,
    //! whose exec runs on the host) fails each case below for the escape
    //! itself, not for a set-up problem.
    use super::*;
    use crate::backend::Provenance;
    use crate::host_dir::HostDirectorySandbox;
    use crate::spec::SandboxSpec;

    fn unconfined(root: &Path) -> EscapeSubject {
        let work = root.join("work");
        std::fs::create_dir(&work).unwrap();
        let provenance = Provenance {
            spec: SandboxSpec::new("escape", "host-directory")
                .unwrap()
                .with_work_dir(work.to_str().unwrap())
                .unwrap(),
            identity: cordon_policy::Identity::default(),
            policy_digest: String::new(),
        };
        let sandbox: Arc<dyn Sandbox> =
            Arc::new(HostDirectorySandbox::new(&work, provenance).unwrap());
        EscapeSubject {
            name: "unconfined".into(),
            // Claims a real rung, so it is held to that rung's standard.
            isolation: Isolation::Container,
            sandbox: sandbox.clone(),
            bounded: sandbox,
            work_dir: work.display().to_string(),
            denied: DeniedProgram::perl(),
            // Bait and listeners under the test's own directory, so the
            // proof needs no root.
            host: EscapeHost {
                open_parent: root.to_path_buf(),
                home: root.to_path_buf(),
                run_dir: root.to_path_buf(),
                sleeper_uid: 65534,
                path_dirs: test_path(root),
            },
        }
    }

    /// A `PATH` under the test's own directory: an open directory first
    /// (what a writable system directory would be), then one holding links
    /// to the real tools, so planting never touches the host's own.
    fn test_path(root: &Path) -> Vec<PathBuf> {
        let open = root.join("plant-bin");
        let real = root.join("real-bin");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::create_dir(&real).unwrap();
        for (name, target) in [
            ("python3", "/usr/bin/python3"),
            ("sh", "/bin/sh"),
            ("ls", "/bin/ls"),
        ] {
            std::os::unix::fs::symlink(target, real.join(name)).unwrap();
        }
        vec![open, real]
    }

    /// The cross-exec cases can fail: against the unconfined subject exec 1
    /// plants a tool exec 2 runs, its tamperers outlive it, and a
    /// concurrent exec writes into the sleeper's output.
    #[test]
    fn an_unconfined_subject_fails_the_cross_exec_cases() {
        let dir = tempfile::tempdir().unwrap();
        let subject = unconfined(dir.path());
        let cases: [(&str, &[&str]); 4] = [
            (
                "plant-tool-for-next-exec",
                &["exec 1 changed the host's", "exec 2 ran the planted tool"],
            ),
            (
                "background-outlives-exec",
                &["outlived it on the host", "they wrote after it ended"],
            ),
            (
                "concurrent-exec-tampering",
                &["exec B wrote into the sleeper's stdin or stdout"],
            ),
            ("concurrent-exec-proc-info", &["`fd_list` succeeded"]),
        ];
        let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
        let report = run_escape_cases(&subject, &names);
        eprintln!("{report}");
        assert_eq!(report.results.len(), cases.len(), "{report}");
        for (r, (name, why)) in report.results.iter().zip(cases) {
            assert_eq!(r.probe, name);
            assert!(
                !r.passed,
                "`{name}` passed against an unconfined subject:\n{report}"
            );
            assert!(
                why.iter().all(|w| r.detail.contains(w)),
                "`{name}` failed, but not for the escape (expected {why:?}): {}",
                r.detail
            );
        }
        // The planted tool was removed from the host again.
        assert!(!dir.path().join("plant-bin/python3").exists());
    }

    #[test]
    fn an_unconfined_subject_fails_the_cases_for_the_escape_itself() {
        let dir = tempfile::tempdir().unwrap();
        let subject = unconfined(dir.path());
        let cases = [
            ("read-host-files", "read the host's bait"),
            ("write-outside-work-dir", "the workload created"),
            ("exec-denied-binary", "ran as the first command"),
            ("tcp-connect-host-loopback", "a connection arrived"),
            ("unix-socket-host", "a connection arrived"),
            ("bind-port", "bound: tcp4 BOUND"),
            ("tiocsti", "pushed a keystroke: pty PUSHED"),
        ];
        let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
        let report = run_escape_cases(&subject, &names);
        assert_eq!(report.results.len(), cases.len(), "{report}");
        for (r, (name, why)) in report.results.iter().zip(cases) {
            assert_eq!(r.probe, name);
            assert!(
                !r.passed,
                "`{name}` passed against an unconfined subject:\n{report}"
            );
            assert!(
                r.detail.contains(why) && !r.detail.starts_with("could not set up"),
                "`{name}` failed, but not for the escape (expected {why:?}): {}",
                r.detail
            );
        }
        assert!(!report.all_passed());
        assert!(report
            .to_string()
            .ends_with(&format!("0 passed, {} failed", cases.len())));
    }

    /// As root the kit can start its host `sleep` as another uid; then the
    /// process cases are proved too.
    #[test]
    fn as_root_an_unconfined_subject_fails_the_host_process_cases() {
        if !crate::conformance::can_make_device_nodes() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and this proof needs root"
            );
            eprintln!("\n!!!!!!!! SKIPPED the host-process proof: it needs root (CI=true makes this a failure) !!!!!!!!\n");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let subject = unconfined(dir.path());
        // An attach leaves the host process stopped (judged first); a
        // subject that detached cleanly is caught by the calls succeeding.
        let cases: [(&str, &[&str]); 2] = [
            ("host-processes", &["the host process was killed"]),
            ("ptrace", &["the host process was stopped", "succeeded"]),
        ];
        let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
        let report = run_escape_cases(&subject, &names);
        for (r, (name, why)) in report.results.iter().zip(cases) {
            assert!(
                !r.passed,
                "`{name}` passed against an unconfined subject:\n{report}"
            );
            assert!(
                why.iter().any(|w| r.detail.contains(w)),
                "`{name}`: {}",
                r.detail
            );
        }
    }

    #[test]
    fn a_case_that_cannot_set_up_fails_rather_than_skips() {
        let dir = tempfile::tempdir().unwrap();
        let mut subject = unconfined(dir.path());
        subject.host.open_parent = dir.path().join("missing");
        subject.denied.path = "/nonexistent/denied".into();
        let report = run_escape_cases(
            &subject,
            &["unix-socket-host", "exec-denied-binary", "no-such-case"],
        );
        assert_eq!(report.passed(), 0, "{report}");
        assert_eq!(report.results.len(), 3);
    }

    #[test]
    fn only_the_process_rung_sees_host_processes_by_design() {
        for iso in Isolation::ALL {
            let expected = if iso == Isolation::Process {
                HostProcessVisibility::VisibleByDesign
            } else {
                HostProcessVisibility::Hidden
            };
            assert_eq!(host_process_visibility(iso), expected, "{iso}");
        }
    }
}
