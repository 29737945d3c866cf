//! [`Pod`]: the one runsc sandbox behind a cordon sandbox, and the names
//! and annotations that let any process find it in runsc's listing.
//!
//! A cordon sandbox is one runsc *sandbox* (a gVisor kernel, its sentry
//! and gofers), started at its second exec with a pause container
//! (`ID-pK`, `io.kubernetes.cri.container-type: sandbox`) in the root and
//! mounts every exec has, whose process is cordon's helper
//! (`crate::podexec`) reaping orphans; every later exec is one `runsc
//! exec` of the helper into it, which gives the exec a pid and mount
//! namespace and `/proc` of its own, and ends them with it. The pause
//! container carries cordon's annotations (scope, thread, agent dir, the
//! sandbox's directory), which `runsc list
//! --format=json` returns, so `dispose` and `dispose_scope` work from the
//! engine's own listing in any process.
//!
//! The memory bound and the CPU time are the runsc sandbox's: a gVisor
//! kernel is one set of host processes, so its cgroup (a parent of
//! cordon's, [`crate::cgroup`]) holds every exec in it. An exec's CPU time
//! is the sandbox's growth while it runs (concurrent execs count each
//! other's: stricter, never looser); a kill at the memory bound ends the
//! whole runsc sandbox, and the next exec starts a new one over the same
//! work dir.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cgroup::MemoryBound;
pub use crate::runsc::Listed;
use cordon_confine::oci::{Bundle, Mount};

/// runsc's multi-container annotation (the CRI's): the pod's container is
/// the runsc sandbox's first (`sandbox`).
pub const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// cordon's own annotations on a pause container.
pub use cordon_backend_kit::labels::{AGENT_DIR, DIR, SCOPE, THREAD};

/// How long `create` + `start` of the pause container may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether container `id` is a pause container (`…-pK`).
pub fn is_pause(id: &str) -> bool {
    id.rsplit_once('-').is_some_and(|(_, last)| {
        last.strip_prefix('p')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The sandbox a pause container `ID-pK` belongs to: `ID`.
pub fn sandbox_of(pause: &str) -> Option<&str> {
    is_pause(pause)
        .then(|| pause.rsplit_once('-').map(|(s, _)| s))
        .flatten()
}

/// A running runsc sandbox.
pub struct Pod {
    pub id: String,
    pub memory: MemoryBound,
    /// Set when an exec saw the runsc sandbox end (a kill at the memory
    /// bound ends it whole): the next exec starts another.
    pub dead: AtomicBool,
    /// The runsc sandbox's host process (`runsc state`), when known.
    pub pid: Option<i32>,
}

/// What a pause container is started with.
pub struct PodSpec<'a> {
    pub id: String,
    pub dir: &'a Path,
    /// The root every exec has, with the helper in it, and its mounts.
    pub root: &'a Path,
    pub mounts: Vec<Mount>,
    pub bin: &'a Path,
    pub uid: u32,
    pub memory_bytes: u64,
    pub annotations: BTreeMap<String, String>,
    /// The network namespace (`/proc/PID/fd/N`) holding the egress
    /// proxy's listener, when the sandbox has a route out; every
    /// container in the runsc sandbox shares it.
    pub netns: Option<String>,
}

/// Runs `cmd` with no stdio (a sandbox runsc starts must not hold a pipe
/// of cordon's) to its end, at most `timeout`.
pub(crate) fn quiet(cmd: &mut Command, timeout: Duration) -> Result<i32, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start `{}`: {e}",
                cmd.get_program().to_string_lossy()
            )
        })?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Ok(s.code().unwrap_or(-1)),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("runsc did not finish in {}s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for runsc: {e}")),
        }
    }
}

impl Pod {
    /// Creates and starts the pause container; on any failure, removes
    /// what it made and says what runsc said.
    pub fn start(spec: PodSpec<'_>) -> Result<Pod, String> {
        let memory = MemoryBound::make(&spec.id, spec.memory_bytes)?;
        let started = (|| {
            let mut config = Bundle {
                root: spec.root,
                argv: crate::podexec::pause_argv(),
                env: BTreeMap::from([(
                    "PATH".to_string(),
                    cordon_confine::command::IMAGE_PATH.to_string(),
                )]),
                cwd: "/".into(),
                uid: spec.uid,
                gid: spec.uid,
                mounts: spec.mounts,
                memory_bytes: None,
                processes: 16,
                cpu_seconds: u64::MAX,
                file_bytes: 0,
                cgroup: format!("/{}/{}", spec.id, crate::cgroup::LEAF),
            }
            .config();
            // The pause process is cordon's; each exec's helper installs
            // the table on its command (`crate::podexec`), which a
            // filter here would refuse its namespaces and mounts.
            if let Some(linux) = config["linux"].as_object_mut() {
                linux.remove("seccomp");
            }
            let mut annotations = spec.annotations.clone();
            annotations.insert(CONTAINER_TYPE.into(), "sandbox".into());
            config["annotations"] = json!(annotations);
            if let Some(path) = &spec.netns {
                crate::runsc::name_netns(&mut config, path)?;
            }
            std::fs::write(spec.dir.join("config.json"), config.to_string())
                .map_err(|e| format!("cannot write the pause container's bundle: {e}"))?;
            let log = spec.dir.join("runsc.log");
            for step in ["create", "start"] {
                let net = match spec.netns {
                    Some(_) => crate::runsc::Network::ProxyRoute,
                    None => crate::runsc::Network::None,
                };
                let mut cmd = crate::runsc::command(spec.bin, &log, net);
                cmd.arg(step);
                if step == "create" {
                    cmd.arg("--bundle").arg(spec.dir);
                }
                cmd.arg(&spec.id);
                match quiet(&mut cmd, START_TIMEOUT)? {
                    0 => {}
                    code => {
                        return Err(format!(
                            "`runsc {step}` of the sandbox exited {code}: {}",
                            crate::runsc::runsc_error(&log).unwrap_or_default()
                        ))
                    }
                }
            }
            Ok(())
        })();
        match started {
            Ok(()) => {
                let pid = crate::runsc::state_pid(spec.bin, &spec.id);
                Ok(Pod {
                    id: spec.id,
                    memory,
                    dead: AtomicBool::new(false),
                    pid,
                })
            }
            Err(e) => {
                let _ = crate::runsc::delete(spec.bin, &spec.id);
                crate::runsc::remove_cgroups(&spec.id);
                Err(e)
            }
        }
    }

    /// Whether the runsc sandbox can take another exec: not seen to end,
    /// and its host process (a `runsc-sandbox`) still there — one killed
    /// from outside is noticed here, and the next exec starts another.
    pub fn alive(&self) -> bool {
        if self.dead.load(Ordering::SeqCst) {
            return false;
        }
        match self.pid {
            Some(pid) => std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"runsc-sandbox")),
            None => true,
        }
    }

    /// Kills and deletes the pause container (and with it the runsc
    /// sandbox and whatever still ran in it), and removes its cgroups.
    pub fn stop(&self, bin: &Path) -> Result<(), String> {
        self.dead.store(true, Ordering::SeqCst);
        crate::runsc::kill(bin, &self.id);
        let r = crate::runsc::delete(bin, &self.id);
        crate::runsc::remove_cgroups(&self.id);
        r
    }
}

impl Listed {
    pub fn get(&self, key: &str) -> &str {
        self.annotations.get(key).map_or("", String::as_str)
    }

    /// The sandbox's directory, as the annotation names it.
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(self.get(DIR))
    }
}

/// The pause containers of this backend in runsc's listing.
pub fn listed(bin: &Path) -> Result<Vec<Listed>, String> {
    Ok(crate::runsc::list_json(bin)?
        .into_iter()
        .filter(|l| l.id.starts_with(crate::PREFIX) && is_pause(&l.id))
        .filter(|l| l.get(CONTAINER_TYPE) == "sandbox")
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_containers_are_told_from_execs() {
        assert!(is_pause("cordon-gvisor-1-2-3-p4"));
        assert!(!is_pause("cordon-gvisor-1-2-3-e4"));
        assert!(!is_pause("cordon-gvisor-1-2-3-p"));
        assert_eq!(
            sandbox_of("cordon-gvisor-1-2-3-p4"),
            Some("cordon-gvisor-1-2-3")
        );
        assert_eq!(sandbox_of("cordon-gvisor-1-2-3-e4"), None);
    }
}
