//! A sandbox's processes saved with their memory (`cordon sandbox
//! snapshot --memory`) and started again in a sandbox made from the
//! snapshot.
//!
//! gVisor holds every process of a runsc sandbox in its own kernel (the
//! sentry), so `runsc checkpoint` saves them whole — their memory, their
//! open files, the syscall filter the sentry applies — and `runsc
//! restore` starts that kernel again under a bundle cordon writes, with
//! the new sandbox's mounts, bounds and cgroup. Nothing of the host's
//! kernel state (a Landlock domain, a seccomp filter of the host's) has
//! to be rebuilt, which is why this backend saves processes and the
//! native rungs refuse to.
//!
//! This runsc (Debian's, 2022) restores only a runsc sandbox of one
//! container: a sandbox whose spec `requires: [snapshot_memory]` runs
//! every exec as a runsc sandbox of its own (no pod), and [`Execs`]
//! tracks the ones running. It saves no host socket: a sandbox with an
//! egress route (hostinet) refuses.
//!
//! What `memory/` in a snapshot holds: one directory per process, `N/`,
//! with runsc's `checkpoint.img` and cordon's `exec.json` ([`Saved`]).
//! A restored process runs detached (its output goes nowhere: it speaks
//! through files), under a wall clock that starts again at the restore,
//! and ends with the sandbox.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_backend_kit::exec::{live, ExecBounds};
use cordon_backend_kit::NEXT;
use cordon_sandbox::{ExecRequest, ExitStatus, SandboxError};
use serde::{Deserialize, Serialize};

use super::GvisorSandbox;
use crate::bundle::private_dir;
use crate::cgroup::MemoryBound;
use crate::running::{Held, Running, Target};

/// What an exec's container is made again from: the command and its
/// environment as the container ran them, and its wall-clock bound.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Saved {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub timeout_secs: u64,
}

/// Where an exec stands.
const RUNNING: u8 = 0;
const SAVING: u8 = 1;
const SAVED: u8 = 2;

struct Entry {
    saved: Saved,
    state: Arc<AtomicU8>,
    /// Set as soon as the exec's `runsc run` returned.
    ended: Arc<AtomicBool>,
}

/// The execs running now, by container id.
#[derive(Default, Clone)]
pub(crate) struct Execs(Arc<Mutex<BTreeMap<String, Entry>>>);

/// One tracked exec: untracked when it ends.
pub(crate) struct Tracked {
    execs: Execs,
    cid: String,
    state: Arc<AtomicU8>,
    ended: Arc<AtomicBool>,
}

/// What an exec whose process was saved answers.
pub(crate) const CHECKPOINTED: &str = "its processes were saved into a snapshot (`cordon sandbox snapshot --memory`) and ended here; they go on in a sandbox made from the snapshot (`cordon sandbox up --from`)";

/// Why a sandbox not made for it saves no process.
const NOT_MADE_FOR: &str = "this gvisor sandbox was not made to save its processes: its execs are containers of one pod, which this runsc cannot restore; make it with `requires: [snapshot_memory]` (`--require snapshot_memory`), which runs each exec as a runsc sandbox of its own, or take a snapshot of the files (leave `--memory` out)";

/// Why a sandbox with a route out (or ports) saves no process.
const HAS_ROUTE: &str = "this gvisor sandbox runs its workload's sockets on the host kernel (runsc's hostinet, in a namespace of its own: it has an egress route or serves ports), which `runsc checkpoint` cannot save; make the sandbox without `egress_allow` and `ports` to save its processes, or take a snapshot of the files (leave `--memory` out)";

fn lock(execs: &Execs) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
    execs.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl Execs {
    /// The containers of the execs running now (not those saved).
    pub(crate) fn running(&self) -> Vec<String> {
        lock(self)
            .iter()
            .filter(|(_, e)| e.state.load(Ordering::SeqCst) == RUNNING)
            .map(|(cid, _)| cid.clone())
            .collect()
    }

    /// Tracks the exec whose container is `cid` until it ends.
    pub(crate) fn track(&self, cid: &str, saved: Saved) -> Tracked {
        let state = Arc::new(AtomicU8::new(RUNNING));
        let ended = Arc::new(AtomicBool::new(false));
        lock(self).insert(
            cid.to_string(),
            Entry {
                saved,
                state: state.clone(),
                ended: ended.clone(),
            },
        );
        Tracked {
            execs: self.clone(),
            cid: cid.to_string(),
            state,
            ended,
        }
    }
}

impl Tracked {
    /// How the exec ended, as its waiter saw it: a process that was saved
    /// answers so (its `runsc run` ended 0 when the checkpoint stopped
    /// it: not the workload's exit).
    pub(crate) fn ended(
        self,
        result: Result<ExitStatus, SandboxError>,
    ) -> Result<ExitStatus, SandboxError> {
        self.ended.store(true, Ordering::SeqCst);
        // A checkpoint under way settles first (it is bounded by runsc's
        // own timeout).
        let deadline = Instant::now() + Duration::from_secs(150);
        while self.state.load(Ordering::SeqCst) == SAVING && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        lock(&self.execs).remove(&self.cid);
        if self.state.load(Ordering::SeqCst) == SAVED {
            return Err(SandboxError::Failed {
                operation: "exec",
                reason: CHECKPOINTED.into(),
            });
        }
        result
    }
}

impl GvisorSandbox {
    /// Saves every running exec into `into/N/` and ends it; how many.
    pub(super) fn checkpoint_all(&self, into: &Path) -> Result<u32, SandboxError> {
        live(&self.disposed)?;
        let Some(execs) = &self.memory else {
            return Err(SandboxError::Invalid {
                reason: NOT_MADE_FOR.into(),
            });
        };
        if self.route.is_some() {
            return Err(SandboxError::Invalid {
                reason: HAS_ROUTE.into(),
            });
        }
        let failed = |reason: String| SandboxError::Failed {
            operation: "checkpoint",
            reason,
        };
        // Awake: runsc saves a running container.
        let _awake = self.paused.awake(|p| self.freeze_all(p))?;
        let running: Vec<(String, Saved, Arc<AtomicU8>, Arc<AtomicBool>)> = lock(execs)
            .iter()
            .map(|(cid, e)| {
                (
                    cid.clone(),
                    e.saved.clone(),
                    e.state.clone(),
                    e.ended.clone(),
                )
            })
            .collect();
        let mut n = 0u32;
        for (cid, saved, state, ended) in running {
            if state
                .compare_exchange(RUNNING, SAVING, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            let dir = into.join(n.to_string());
            let done = std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| format!("`{}`: {e}", dir.display()))
                .and_then(|()| self.save_one(&cid, &dir, &ended));
            match done {
                Ok(true) => {}
                // Ended by itself meanwhile: nothing to save.
                Ok(false) => {
                    state.store(RUNNING, Ordering::SeqCst);
                    let _ = std::fs::remove_dir_all(&dir);
                    continue;
                }
                Err(e) => {
                    state.store(RUNNING, Ordering::SeqCst);
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(failed(if n == 0 {
                        e
                    } else {
                        format!("{e}; {}", self.put_back(execs, into, n))
                    }));
                }
            }
            state.store(SAVED, Ordering::SeqCst);
            let json = serde_json::to_vec(&saved).map_err(|e| failed(e.to_string()))?;
            std::fs::write(dir.join("exec.json"), json)
                .map_err(|e| failed(format!("`{}`: {e}", dir.display())))?;
            n += 1;
        }
        Ok(n)
    }

    /// After a checkpoint that failed part way: the `n` processes already
    /// saved (and ended) into `into` are started again here, detached, so
    /// none is lost with the snapshot that is not made. Says what became
    /// of them.
    fn put_back(&self, execs: &Execs, into: &Path, n: u32) -> String {
        let mut lost = Vec::new();
        for i in 0..n {
            let dir = into.join(i.to_string());
            let back = std::fs::read(dir.join("exec.json"))
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_slice::<Saved>(&t).map_err(|e| e.to_string()))
                .and_then(|saved| self.restore_one(execs, &dir, saved));
            if let Err(e) = back {
                lost.push(format!("process {i}: {e}"));
            }
        }
        if lost.is_empty() {
            format!("the {n} process(es) saved before it were started again in this sandbox, detached (their execs had ended)")
        } else {
            format!(
                "of the {n} process(es) saved before it, these could not be started again and are lost: {}",
                lost.join("; ")
            )
        }
    }

    /// `runsc checkpoint` of the exec's container `cid` into `dir`:
    /// `Ok(false)` when the exec ended by itself first. One still starting
    /// (tracked, its container not running yet) is waited for, a while:
    /// it is not taken for ended, and not left out of the snapshot.
    fn save_one(&self, cid: &str, dir: &Path, ended: &AtomicBool) -> Result<bool, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let err = match crate::runsc::checkpoint(&self.runsc.bin, cid, dir) {
                Ok(()) => return Ok(true),
                Err(e) => e,
            };
            if ended.load(Ordering::SeqCst) {
                return Ok(false);
            }
            match crate::runsc::status(&self.runsc.bin, cid).as_deref() {
                None | Some("created") if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None | Some("created") => {
                    return Err(format!(
                        "exec container `{cid}` did not start running within 10 s, so it could not be saved ({err}); take the snapshot again"
                    ))
                }
                _ => return Err(err),
            }
        }
    }

    /// Starts again each process saved in `from` (a snapshot's `memory/`),
    /// in this new sandbox; `Err` when any did not come back running.
    pub(crate) fn restore_all(&self, from: &Path) -> Result<u32, String> {
        let Some(execs) = &self.memory else {
            return Err(format!(
                "the snapshot holds processes, and this sandbox's spec does not `require` `{}`",
                cordon_sandbox::Capability::SnapshotMemory
            ));
        };
        if self.route.is_some() {
            return Err(HAS_ROUTE.into());
        }
        let mut dirs: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(from)
            .map_err(|e| format!("`{}`: {e}", from.display()))?
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((n, e.path()))
            })
            .collect();
        dirs.sort();
        for (_, dir) in &dirs {
            let text = std::fs::read(dir.join("exec.json"))
                .map_err(|e| format!("`{}`: {e}", dir.display()))?;
            let saved: Saved = serde_json::from_slice(&text)
                .map_err(|e| format!("`{}`: {e}", dir.join("exec.json").display()))?;
            self.restore_one(execs, dir, saved)?;
        }
        Ok(dirs.len() as u32)
    }

    /// `runsc restore` of one saved process as a new container of this
    /// sandbox, with its own memory cgroup and the bounds an exec has; a
    /// thread holds them until it ends (or the sandbox does).
    fn restore_one(&self, execs: &Execs, image: &Path, saved: Saved) -> Result<(), String> {
        let mounts = self.exec_mounts().map_err(|e| e.to_string())?;
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let cid = format!("{}-e{k}", self.id);
        let exec_dir = self.dir.join(format!("exec-{k}"));
        private_dir(&exec_dir)?;
        let made = (|| {
            let held = MemoryBound::make(&cid, self.limits.memory_bytes).map(Held::Own)?;
            let config = self.exec_config(&cid, saved.argv.clone(), saved.env.clone(), mounts)?;
            std::fs::write(exec_dir.join("config.json"), config.to_string())
                .map_err(|e| format!("cannot write the bundle: {e}"))?;
            Ok::<_, String>(held)
        })();
        let held = match made {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(e);
            }
        };
        let log = exec_dir.join("runsc.log");
        // `restore --detach` returns once the process runs again (or
        // failed); `runsc wait` then holds it as an exec's `runsc run`
        // would, for the bounds and the clean-up.
        let mut cmd: Command =
            crate::runsc::command(&self.runsc.bin, &log, crate::runsc::Network::None);
        cmd.args(["restore", "--detach", "--image-path"])
            .arg(image)
            .arg("--bundle")
            .arg(&exec_dir)
            .arg(&cid);
        // No stdio of cordon's: the sandbox it leaves running would hold
        // a pipe open for ever.
        let restored = crate::pod::quiet(&mut cmd, Duration::from_secs(60));
        let waiter = match restored {
            Ok(0) => Command::new(&self.runsc.bin)
                .arg("--root")
                .arg(crate::STATE_ROOT)
                .args(["wait", &cid])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start `{}`: {e}", self.runsc.bin.display())),
            Ok(code) => Err(format!(
                "`runsc restore` of `{}` exited {code}: {}",
                image.display(),
                crate::runsc::runsc_error(&log).unwrap_or_else(|| "runsc said no more".into())
            )),
            Err(e) => Err(format!("`runsc restore` of `{}`: {e}", image.display())),
        };
        let child = match waiter {
            Ok(c) => c,
            Err(e) => {
                crate::runsc::kill(&self.runsc.bin, &cid);
                let _ = crate::runsc::delete(&self.runsc.bin, &cid);
                crate::runsc::remove_cgroups(&cid);
                let _ = std::fs::remove_dir_all(&exec_dir);
                return Err(e);
            }
        };
        let req = ExecRequest {
            argv: saved.argv.clone(),
            env: BTreeMap::new(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(saved.timeout_secs),
            max_output_bytes: 0,
        };
        let run = Running {
            child,
            cid: cid.clone(),
            state: crate::stateroot::Seen::new(),
            unsettled: crate::running::Unsettled::none(),
            target: Target::Container,
            exec_dir,
            log,
            bin: self.runsc.bin.clone(),
            bounds: ExecBounds::new(&self.limits, &req, Arc::new(AtomicBool::new(false))),
            cpu_at_start: 0,
            kills_at_start: held.memory().oom_kills().unwrap_or(0),
            refusals_at_start: held.memory().refusals(),
            held,
            relay_done: crate::running::RelayEnd::new(),
        };
        let tracked = execs.track(&cid, saved);
        std::thread::spawn(move || {
            let _ = tracked.ended(run.wait());
        });
        Ok(())
    }
}
