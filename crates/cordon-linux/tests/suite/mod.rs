//! Shared harness: build a plan, run it at a rung, check the host.

mod escape;
mod harden;
mod image;
mod ipc;
mod masks;
mod netns;
mod owner;
mod proxy;
mod pty;
mod refusal;
mod volume;
mod warm;
mod workdir;
mod workspace;

use std::collections::BTreeMap;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use cordon_linux::{
    Bounds, Enforcer, FsRule, Ids, InitProgram, LinuxEnforcer, Outcome, Plan, PlanSpec, Rung,
    SandboxStdio,
};

pub fn init_program() -> InitProgram {
    InitProgram::new(env!("CARGO_BIN_EXE_cordon-linux-init"))
}

/// `Some(enforcer)` when `rung` can be held here. Without it: panic in CI,
/// skip loudly elsewhere.
pub fn enforcer_for(rung: Rung, case: &str) -> Option<LinuxEnforcer> {
    let enforcer = LinuxEnforcer::new(init_program());
    match enforcer.available(rung) {
        Ok(()) => Some(enforcer),
        Err(missing) => {
            cordon_testkit::skip(
                &format!("{case} at the {rung} rung"),
                format!("this machine cannot hold it: {missing}"),
            );
            None
        }
    }
}

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A host uid/gid no other test (or test binary run) uses at the same time.
fn fresh_host_id() -> u32 {
    200_000 + (std::process::id() % 5000) * 64 + NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Hands `dir` to the sandbox's host uid. Without root this cannot work, and
/// every case that would run a sandbox skips (or fails in CI) anyway.
fn give(dir: &Path, host: u32) {
    if let Err(e) = chown(dir, Some(host), Some(host)) {
        assert!(
            !nix::unistd::geteuid().is_root(),
            "chown {}: {e}",
            dir.display()
        );
    }
}

/// One sandbox run's setup: a plan and the host directories it names.
pub struct Case {
    pub spec: PlanSpec,
    pub work: tempfile::TempDir,
    _tmp: Option<tempfile::TempDir>,
}

pub const INSIDE_ID: u32 = 1000;

fn rule(path: &str, read: bool, write: bool, execute: bool) -> FsRule {
    FsRule {
        path: PathBuf::from(path),
        read,
        write,
        execute,
    }
}

/// The system directories read-only and executable, the work dir read-write.
pub fn system_rules() -> Vec<FsRule> {
    vec![
        rule("/usr", true, false, true),
        rule("/lib", true, false, true),
        rule("/lib64", true, false, true),
        rule("/bin", true, false, true),
        rule("/sbin", true, false, true),
        rule("/etc", true, false, false),
    ]
}

/// A `python3 -c` case.
pub fn python(rung: Rung, code: &str) -> Case {
    Case::new(rung, &["/usr/bin/python3", "-c", code])
}

/// A `/bin/sh -c` case.
pub fn shell(rung: Rung, script: &str) -> Case {
    Case::new(rung, &["/bin/sh", "-c", script])
}

impl Case {
    pub fn new(rung: Rung, argv: &[&str]) -> Case {
        let host = fresh_host_id();
        let work = tempfile::tempdir().expect("work dir");
        give(work.path(), host);
        let tmp = (rung == Rung::Process).then(|| {
            let t = tempfile::tempdir().expect("tmp dir");
            give(t.path(), host);
            t
        });
        let spec = PlanSpec {
            rung,
            fs: system_rules(),
            mask_paths: vec![],
            mask_executables: vec![],
            work_dir: work.path().to_path_buf(),
            work_dir_source: None,
            image_root: None,
            tmp_dir: tmp.as_ref().map(|t| t.path().to_path_buf()),
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            bounds: Bounds {
                max_memory: 256 << 20,
                max_processes: 64,
                max_cpu_seconds: 10,
                max_wall_seconds: 20,
                max_disk: 256 << 20,
            },
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ids: Ids {
                uid: match rung {
                    Rung::Container => INSIDE_ID,
                    Rung::Process => host,
                },
                gid: match rung {
                    Rung::Container => INSIDE_ID,
                    Rung::Process => host,
                },
                host_uid: host,
                host_gid: host,
            },
            proxy_port: None,
            listen: false,
            secrets_dir: None,
            trust_dir: None,
            kvm: false,
        };
        Case {
            spec,
            work,
            _tmp: tmp,
        }
    }

    pub fn host_uid(&self) -> u32 {
        self.spec.ids.host_uid
    }

    pub fn work_dir(&self) -> &Path {
        self.work.path()
    }

    /// Runs the plan and collects the outcome and output; then checks that
    /// nothing of the sandbox is left on the host.
    pub fn run(&self, enforcer: &LinuxEnforcer) -> Run {
        let run = self
            .try_run(enforcer, SandboxStdio::piped())
            .unwrap_or_else(|e| panic!("sandbox failed: {e}"));
        no_process_left(self.host_uid());
        run
    }

    /// Runs the plan with `stdio`; `Err` when it did not start or the first
    /// command could not be executed.
    pub fn try_run(&self, enforcer: &LinuxEnforcer, stdio: SandboxStdio) -> Result<Run, String> {
        let plan = Plan::new(self.spec.clone()).map_err(|e| e.to_string())?;
        let running = enforcer.confine(&plan, stdio).map_err(|e| e.to_string())?;
        let (outcome, out, err) = running.wait_with_output().map_err(|e| e.to_string())?;
        Ok(Run {
            outcome,
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
        })
    }
}

pub struct Run {
    pub outcome: Outcome,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.outcome, self.stdout, self.stderr
        )
    }
}

/// Every process running as `host_uid` (`Name State Tgid` of each);
/// zombies too when `zombies`.
pub fn processes_of(host_uid: u32, zombies: bool) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if entry
            .file_name()
            .to_str()
            .is_none_or(|s| s.parse::<u32>().is_err())
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        };
        if field("Uid:") == Some(host_uid.to_string())
            && (zombies || field("State:").as_deref() != Some("Z"))
        {
            found.push(status.lines().take(3).collect::<Vec<_>>().join(" "));
        }
    }
    found
}

/// After a run, nothing of the sandbox may be left: no live process runs as
/// its host uid. (A killed process may linger a moment as a zombie until its
/// new parent reaps it; a zombie runs nothing and is not counted.)
pub fn no_process_left(host_uid: u32) {
    let live = || processes_of(host_uid, false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let left = live();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes of the sandbox outlived it: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A directory on the host outside every plan, writable by anyone (so only
/// the sandbox, not file modes, can stop a write).
pub fn open_host_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("cordon-host-")
        .tempdir_in("/var/tmp")
        .expect("host dir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    d
}

/// Generates a test per rung from one body: `both!(name, |rung| { ... })`.
#[macro_export]
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn container() {
                let body: fn(cordon_linux::Rung) = $body;
                body(cordon_linux::Rung::Container)
            }
            #[test]
            fn process() {
                let body: fn(cordon_linux::Rung) = $body;
                body(cordon_linux::Rung::Process)
            }
        }
    };
}
