//! A sandbox's execs after its first, in its pod (see [`crate::pod`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::models::{ExecConfig, Mount as DMount};
use cordon_backend_kit::podexec;
use cordon_confine::oci::DockerNet;
use cordon_sandbox::{ExecHandle, ExecRequest, Killer, SandboxError, StdinFeed};

use super::DockerSandbox;
use crate::containers::bind;
use crate::pod::Pod;
use crate::WORKLOAD_ID;
use cordon_backend_kit::exec::{exec_failed, ExecBounds};

/// Whether the sandbox has its pod, or cannot.
#[derive(Default)]
pub(super) enum PodSlot {
    /// Not started yet (or ended: started again at the next exec).
    #[default]
    None,
    Up(Arc<Pod>),
    /// The helper does not work on this engine or host: every exec is a
    /// container of its own.
    Unavailable,
}

/// How long a pod's probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

impl DockerSandbox {
    fn net(&self) -> DockerNet {
        match (self.ports, self.proxy_port) {
            (true, _) => DockerNet::Listening,
            (false, Some(_)) => DockerNet::ProxyRoute,
            (false, None) => DockerNet::None,
        }
    }

    /// The sandbox's running pod, started when it has none (`None`: it
    /// cannot have one; the exec is a container of its own).
    pub(super) fn pod(&self, mounts: &[DMount]) -> Option<Arc<Pod>> {
        let mut slot = self.pod.lock().unwrap_or_else(|p| p.into_inner());
        match &*slot {
            PodSlot::Up(p) if p.usable() => return Some(p.clone()),
            PodSlot::Unavailable => return None,
            PodSlot::Up(p) => {
                let _ = self.engine.remove(&p.name);
            }
            PodSlot::None => {}
        }
        match self.start_pod(mounts) {
            Ok(p) => {
                let p = Arc::new(p);
                *slot = PodSlot::Up(p.clone());
                Some(p)
            }
            Err(e) => {
                tracing::warn!(
                    sandbox = %self.id,
                    "the docker backend's warm exec is not available here, so each exec is a container of its own (as confined, slower): {e}"
                );
                *slot = PodSlot::Unavailable;
                None
            }
        }
    }

    /// Starts the pod and runs the probe through its helper; on any
    /// failure, removes it and says why.
    fn start_pod(&self, mounts: &[DMount]) -> Result<Pod, String> {
        let name = format!("{}-pod", self.id);
        let helper = crate::pod::install(&self.dir)?;
        let mut mounts = mounts.to_vec();
        mounts.push(bind(&helper, Path::new(podexec::PATH), true));
        let mut labels = self.labels.clone();
        labels.insert(crate::LABEL_ROLE.to_string(), "pod".to_string());
        let env = BTreeMap::from([(
            "PATH".to_string(),
            cordon_confine::command::IMAGE_PATH.to_string(),
        )]);
        let mut body = self
            .exec_body(podexec::pause_argv(), &env, false, labels, mounts)
            .map_err(|e| e.to_string())?;
        body.attach_stdout = Some(false);
        body.attach_stderr = Some(false);
        let profile = cordon_confine::oci::docker_helper_seccomp_profile(self.net())?;
        if let Some(hc) = body.host_config.as_mut() {
            hc.security_opt = Some(vec![
                "no-new-privileges".into(),
                format!("seccomp={profile}"),
            ]);
            // The kernel refuses the exec's own `/proc` in a user
            // namespace while the pod's is partly covered; the helper
            // masks every exec's again.
            hc.masked_paths = Some(Vec::new());
            hc.readonly_paths = Some(Vec::new());
            // Each exec's count is its user namespace's RLIMIT_NPROC; the
            // pod's cgroup bounds their sum.
            let processes = self.limits.processes.saturating_mul(4).saturating_add(8);
            hc.pids_limit = Some(i64::try_from(processes).unwrap_or(i64::MAX));
        }
        let pod = Pod::start(&self.engine, &name, body).inspect_err(|_| {
            let _ = self.engine.remove(&name);
        })?;
        let probed = self.probe(&pod);
        if let Err(e) = probed {
            let _ = self.engine.remove(&name);
            return Err(e);
        }
        Ok(pod)
    }

    /// Runs the helper's probe in `pod`: the whole way an exec goes, to a
    /// command that exits 0.
    fn probe(&self, pod: &Pod) -> Result<(), String> {
        let (out_r, out_w) = pipe().map_err(|e| e.to_string())?;
        let (err_r, err_w) = pipe().map_err(|e| e.to_string())?;
        drop(out_r);
        let config = self.exec_config(podexec::probe_argv(), &BTreeMap::new(), false)?;
        let exec = crate::pod::launch(&self.engine, pod, config, None, (out_w, err_w))?;
        let code = exec.code_within(PROBE_TIMEOUT);
        let mut said = String::new();
        {
            use std::io::Read as _;
            let _ = std::fs::File::from(err_r)
                .take(4096)
                .read_to_string(&mut said);
        }
        match code {
            Ok(0) => Ok(()),
            Ok(code) => Err(format!(
                "the exec helper's probe in the pod exited {code}: {}",
                said.trim()
            )),
            Err(e) => Err(format!("the exec helper's probe in the pod: {e}")),
        }
    }

    /// The `docker exec` of the helper for `argv`: as the workload's uid,
    /// told the command's bounds, the table, the masks and whether the
    /// exec has a network namespace of its own.
    fn exec_config(
        &self,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
        with_stdin: bool,
    ) -> Result<ExecConfig, String> {
        let net = self.net();
        let filter = self
            .filter
            .get_or_init(|| {
                podexec::filter_hex(match net {
                    DockerNet::None => podexec::Net::Own,
                    DockerNet::ProxyRoute => podexec::Net::ProxyRoute,
                    DockerNet::Listening => podexec::Net::Listening,
                })
            })
            .clone()
            .map_err(|e| format!("the syscall table as one seccomp program: {e}"))?;
        let limits = podexec::Limits {
            uid: WORKLOAD_ID,
            // The helper and the exec's PID 1 count in its namespace.
            processes: self.limits.processes.saturating_add(2),
            // As at an exec's container: a second above the cgroup's
            // time, which cordon watches and kills at first.
            cpu_seconds: self.limits.cpu_seconds.saturating_add(1),
            file_bytes: self.limits.disk_bytes,
        };
        let told = podexec::Told {
            filter_hex: &filter,
            masked: cordon_confine::oci::MASKED_PROC,
            read_only: cordon_confine::oci::READONLY_PROC,
            own_net: net == DockerNet::None,
        };
        Ok(ExecConfig {
            attach_stdin: Some(with_stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(podexec::env(env, &told)),
            cmd: Some(podexec::argv(argv, &limits)),
            user: Some(format!("{WORKLOAD_ID}:{WORKLOAD_ID}")),
            working_dir: Some(self.guest_work.clone()),
            ..Default::default()
        })
    }

    /// Starts `argv` in `pod`; `None` when the engine would not start it
    /// there (the pod is marked ended; the caller runs a container).
    pub(super) fn start_in_pod(
        &self,
        pod: Arc<Pod>,
        req: &ExecRequest,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
        stdin_stream: bool,
    ) -> Result<Option<ExecHandle>, SandboxError> {
        let with_stdin = stdin_stream || !req.stdin.is_empty();
        let config = self
            .exec_config(argv, env, with_stdin)
            .map_err(cordon_backend_kit::exec::refused)?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (stdin_r, stdin_w) = match with_stdin {
            true => {
                let (r, w) = pipe()?;
                (Some(r), Some(w))
            }
            false => (None, None),
        };
        let exec = match crate::pod::launch(&self.engine, &pod, config, stdin_r, (out_w, err_w)) {
            Ok(exec) => exec,
            Err(e) => {
                // It may have started unseen: the pod goes with it, and
                // the next exec starts another.
                tracing::debug!(pod = %pod.name, "the pod did not take the exec: {e}");
                pod.end();
                let _ = self.engine.remove(&pod.name);
                return Ok(None);
            }
        };
        let stdin = match stdin_w {
            Some(w) if stdin_stream => StdinFeed::Stream(Box::new(std::fs::File::from(w))),
            Some(w) => StdinFeed::Bytes(Box::new(std::fs::File::from(w)), req.stdin.clone()),
            None => StdinFeed::None,
        };
        let killed = Arc::new(AtomicBool::new(false));
        let bounds = ExecBounds::new(&self.limits, req, killed.clone());
        let kill = exec.killer();
        let engine = self.engine.clone();
        let stop = (engine.clone(), pod.clone());
        Ok(Some(ExecHandle::from_pipes(
            stdin,
            std::fs::File::from(out_r),
            std::fs::File::from(err_r),
            req.max_output_bytes,
            move || exec.wait(&engine, &pod, bounds),
            Killer::new(move || {
                killed.store(true, Ordering::SeqCst);
                if !kill() {
                    // Nothing else ends what the exec started: the pod goes.
                    stop.1.end();
                    stop.0.kill(&stop.1.name);
                }
            }),
        )))
    }
}

fn pipe() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| exec_failed(format!("cannot make a pipe: {e}")))
}
