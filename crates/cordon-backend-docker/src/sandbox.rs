//! [`DockerSandbox`]: one sandbox's directory on the host, its anchor
//! container on the engine, and its execs, each one container.
//!
//! The directory, `TMPDIR/cordon-docker-PID-N-STAMP/`, root's, mode 0700:
//!
//! - `rootfs/etc/` — cordon's own `/etc` files, bound read-only;
//! - `volume/` — an ext4 volume of `max_disk`: `work/` and `tmp/`, owned by
//!   [`crate::WORKLOAD_ID`];
//! - `masks/` — an empty directory and an empty file, bound over what the
//!   plan hides;
//! - `binds/K` — a bind made on the host with the rights Docker cannot set
//!   on a bind itself (`noexec`, and read-only under it): Docker binds it
//!   read-write, which keeps the flags it has. Unmounted at dispose.
//!
//! On the engine: the anchor container `cordon-docker-PID-N-STAMP` (made,
//! never started: it holds the labels), the first exec's container
//! (`…-eK`, removed when it ends), and from the second exec on the pod
//! (`…-pod`, [`crate::pod`]) every later exec runs in; an exec's container
//! again whenever the pod cannot be had.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};

use bollard::models::{ContainerCreateBody, HostConfig, Mount as DMount};
use cordon_confine::oci::{DockerNet, HostImage, Mount, MountKind};
use cordon_confine::RootedFs;
use cordon_files::host_dir::{HostSecretsDir, HostWorkDir};
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Attach, BackendError, ExecHandle, ExecRequest, ExitStatus, Killer, Limits,
    Provenance, Sandbox, SandboxError, StdinFeed,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::containers::*;
use crate::engine::{call, Engine};
use crate::residue::Residue;
use crate::{DockerConfig, WORKLOAD_ID};
use cordon_backend_kit::exec::{
    exec_failed, live, mounts_error, refused, resolved_argv, ExecBounds,
};
use cordon_backend_kit::register::serve_route;
use cordon_backend_kit::workarea::{make_masks, Acquiring, WorkArea};
use cordon_backend_kit::{failed, HostFiles, Serving, NEXT};

mod warm;

/// Why an exec asking for a terminal is refused.
const NO_TTY: &str = "the docker backend gives no terminal in this version; run without one, or at the native container rung (`--backend container`)";

/// One docker sandbox.
pub struct DockerSandbox {
    id: String,
    dir: PathBuf,
    engine: Engine,
    /// The image's skeleton on the engine (its tag).
    image: String,
    /// Where the image's tree is on the host (`/` for `host`).
    image_root: PathBuf,
    /// Its directories, bound from there as the plan grants.
    image_dirs: Vec<PathBuf>,
    volume: PathBuf,
    guest_work: String,
    provenance: Provenance,
    labels: HashMap<String, String>,
    limits: Limits,
    policy: Arc<Policy>,
    env: Deployment,
    view: RootedFs,
    files: HostFiles,
    /// The mounts the policy's plan translates to, made at the first exec.
    base: OnceLock<Result<Vec<DMount>, SandboxError>>,
    /// The port of the egress proxy's listener in the anchor's network
    /// namespace, which every exec joins; `None`: no network at all.
    proxy_port: Option<u16>,
    /// What serves that listener; ended at dispose.
    egress: Serving,
    /// Made with `requires: [ports]`: the anchor holds a network namespace
    /// of loopback only (beside the proxy's listener, with a route) which
    /// every exec joins and listens in, and a forward connects in.
    ports: bool,
    /// The anchor's network namespace, found by the first forward and
    /// held (pinned by the descriptor: the anchor lives as long as the
    /// sandbox), so a connection costs no engine round trip.
    port_netns: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    /// The egress proxy's CA the sandbox trusts (its files in `dir/trust`,
    /// bound read-only into every exec), when the policy inspects.
    trust: Option<cordon_backend_kit::trust::Trust>,
    disposed: AtomicBool,
    /// Its pause (see [`cordon_backend_kit::Pausing`]).
    paused: cordon_backend_kit::Pausing,
    /// The spec's workspace, mounted copy-on-write as the work dir.
    workspace: Option<cordon_files::workspace::Workspace>,
    /// Execs begun: the first is a container of its own.
    execs: std::sync::atomic::AtomicU64,
    /// The pod every later exec runs in (see [`crate::pod`]).
    pod: Mutex<warm::PodSlot>,
    /// The syscall table as the pod's helper installs it, made once.
    filter: OnceLock<Result<String, String>>,
}

/// A sandbox dropped without [`DockerSandbox::dispose`] still gives back
/// its containers, its volume and its directory.
impl Drop for DockerSandbox {
    fn drop(&mut self) {
        let _ = self.dispose();
    }
}

impl DockerSandbox {
    /// Makes the sandbox's directory and volume, imports the `host` image
    /// if the engine lacks it, and makes the anchor container.
    pub(crate) fn create(
        config: &DockerConfig,
        engine: &Engine,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<DockerSandbox, BackendError> {
        let acquiring = Acquiring::new(req, &config.setup, crate::NAME)?;
        let (image, image_dirs) =
            skeleton(engine, &acquiring.image_root).map_err(|e| failed("acquire", e))?;
        let made_dir = crate::DIRS.make(&config.setup.scratch)?;
        let (id, dir) = (made_dir.id.clone(), made_dir.dir.clone());
        let labels = sandbox_labels(req, &id, &dir, engine);
        let wants_secrets = !req.provenance.spec.secrets().is_empty();
        let ports = req
            .provenance
            .spec
            .requires()
            .contains(cordon_sandbox::Capability::Ports);
        let mut workspace = None;
        let mut own_tmp = None;
        let mut tmp_files = None;
        let made =
            (|| -> Result<(HostImage, RootedFs, HostWorkDir, Option<HostSecretsDir>), String> {
                let root = prepare_dir(&dir, &acquiring.guest_work)?;
                let WorkArea {
                    view,
                    files,
                    workspace: w,
                    tmp: t,
                    tmp_files: tf,
                    ..
                } = acquiring.work_area(&made_dir)?;
                workspace = w;
                own_tmp = t;
                tmp_files = Some(tf);
                // Inside the sandbox's directory (root's, 0700): no other
                // sandbox's workload, though the same uid, can reach it.
                let secrets = match wants_secrets {
                    true => Some(HostSecretsDir::make(dir.join("secrets"), WORKLOAD_ID)?),
                    false => None,
                };
                // The anchor: the sandbox's labels on the engine, which
                // `dispose_scope` and `gc` list. Made and never started,
                // unless the sandbox has an egress route or serves ports:
                // then it holds the network namespace every exec joins,
                // where the proxy's listener is and its servers listen.
                let anchor_labels: HashMap<String, String> = labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .chain([(crate::LABEL_ROLE.to_string(), "anchor".to_string())])
                    .collect();
                match (&egress, ports) {
                    (None, false) => make_anchor(engine, &id, &image, anchor_labels)?,
                    _ => start_holder(engine, &id, anchor_labels)?,
                }
                Ok((root, view, files, secrets))
            })();
        let routed = made.and_then(|(root, view, files, secrets)| {
            let Some(service) = &egress else {
                return Ok((root, view, files, secrets, None));
            };
            let port = cordon_linux::netns::random_port();
            let listener = listen_in(engine, &id, port)?;
            let serving = serve_route(&**service, listener, req)?;
            // The CA is placed before anything runs, or nothing does.
            let trust = match &serving.ca_pem {
                Some(pem) => Some(
                    cordon_backend_kit::trust::Trust::make(
                        &dir.join("trust"),
                        &acquiring.image_root,
                        pem,
                    )
                    .map_err(cordon_backend_kit::trust::unplaced)?,
                ),
                None => None,
            };
            Ok((root, view, files, secrets, Some((port, serving, trust))))
        });
        let (_, view, files, secrets, route) = match routed {
            Ok(m) => m,
            Err(e) => {
                let _ = engine.remove(&id);
                let _ = remove_sandbox_dir(&dir);
                return Err(failed("acquire", e));
            }
        };
        let (proxy_port, serving, trust) = match route {
            Some((p, s, t)) => (Some(p), Some(s), t),
            None => (None, None, None),
        };
        Ok(DockerSandbox {
            id,
            dir,
            engine: engine.clone(),
            image,
            image_root: acquiring.image_root,
            image_dirs,
            volume: made_dir.dir.join("volume"),
            guest_work: acquiring.guest_work,
            provenance: req.provenance.clone(),
            labels,
            limits: req.limits,
            policy: config.setup.policy.clone(),
            env: config.setup.env.clone(),
            view,
            files: HostFiles::new(files, secrets, WORKLOAD_ID)
                .with_tmp(own_tmp)
                .with_tmp_files(tmp_files),
            base: OnceLock::new(),
            proxy_port,
            egress: Serving::new(serving),
            ports,
            port_netns: std::sync::Mutex::new(None),
            trust,
            disposed: AtomicBool::new(false),
            paused: Default::default(),
            workspace,
            execs: Default::default(),
            pod: Default::default(),
            filter: OnceLock::new(),
        })
    }

    /// Pauses (or unpauses) every container of the sandbox; the first that
    /// fails fails the whole, saying which (those done stay so: a resume
    /// undoes them).
    fn freeze_all(&self, paused: bool) -> Result<(), SandboxError> {
        let operation = if paused { "pause" } else { "resume" };
        let failed = |reason: String| SandboxError::Failed { operation, reason };
        let listed = self
            .engine
            .containers(&[(crate::LABEL_SANDBOX, self.id.as_str())])
            .map_err(failed)?;
        for (id, _) in listed {
            self.engine.pause(&id, paused).map_err(failed)?;
        }
        Ok(())
    }

    /// Removes the sandbox's containers (anchor and any exec still there),
    /// its binds, volume and directory.
    pub fn dispose(&self) -> Result<(), BackendError> {
        if self.disposed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.egress.end();
        self.files.end_watches();
        // The anchor's namespace goes with the anchor, not with this
        // struct's last reference.
        *self.port_netns.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let failures = self.engine.remove_labelled(crate::LABEL_SANDBOX, &self.id);
        cordon_backend_kit::dirs::remove_last(&self.dir, failures)
    }

    fn base(&self) -> Result<Vec<DMount>, SandboxError> {
        self.base.get_or_init(|| self.make_base()).clone()
    }

    fn make_base(&self) -> Result<Vec<DMount>, SandboxError> {
        // Mount points outside the image are made by the engine in the
        // container's root; the scratch root only feeds the translation.
        let scratch_root = self.dir.join("rootfs");
        let masks = self.dir.join("masks");
        let mounts = cordon_confine::oci::engine_mounts(
            &self.policy,
            (
                &self.provenance.identity,
                &self.env,
                cordon_sandbox::guard::now(),
            ),
            crate::NAME,
            &self.guest_work,
            (&self.image_root, &self.image_dirs),
            &self.view,
            self.files.work().host(),
            (&scratch_root, &self.volume, &masks),
        )
        .map_err(mounts_error)?;
        let mut out: Vec<DMount> = ["passwd", "group", "hostname", "hosts", "resolv.conf"]
            .iter()
            .map(|f| {
                bind(
                    &scratch_root.join("etc").join(f),
                    &Path::new("/etc").join(f),
                    true,
                )
            })
            .collect();
        // No `/sys`, as at the native container rung: Docker's read-only
        // sysfs would show the host's devices (and other sandboxes' volume
        // images, by their loop devices' backing files). An empty
        // directory over it hides it and the cgroup mounts beneath.
        out.push(bind(&masks.join("dir"), Path::new("/sys"), true));
        for (k, m) in mounts.iter().enumerate() {
            out.push(self.docker_mount(k, m).map_err(exec_failed)?);
        }
        if let Some(secrets) = self.files.secrets() {
            out.push(bind(
                secrets.host(),
                Path::new(cordon_sandbox::secrets::SECRETS_DIR),
                true,
            ));
        }
        // Last: over whatever of the image the plan bound there.
        for (source, target, _) in self.trust.iter().flat_map(|t| t.binds()) {
            out.push(bind(&source, Path::new(target), true));
        }
        Ok(out)
    }

    /// One planned mount as Docker takes it. A bind Docker can give as
    /// planned (read-only and executable, or read-write and executable)
    /// is handed over; one that must be `noexec` is first bound on the
    /// host with its rights (`binds/K`), and that bind handed over
    /// read-write, which Docker binds without a remount, so its flags
    /// hold. Masks are empty and read-only, so `exec` says nothing there.
    fn docker_mount(&self, k: usize, m: &Mount) -> Result<DMount, String> {
        let mask = m.source.starts_with(self.dir.join("masks"));
        match m.kind {
            MountKind::ReadOnly { exec: true } => Ok(bind(&m.source, &m.destination, true)),
            MountKind::ReadOnly { exec: false } if mask => {
                Ok(bind(&m.source, &m.destination, true))
            }
            MountKind::ReadWrite { exec: true } => Ok(bind(&m.source, &m.destination, false)),
            MountKind::ReadOnly { exec: false } | MountKind::ReadWrite { exec: false } => {
                let write = matches!(m.kind, MountKind::ReadWrite { .. });
                let at = self.dir.join("binds").join(k.to_string());
                let meta = std::fs::metadata(&m.source)
                    .map_err(|e| format!("`{}`: {e}", m.source.display()))?;
                if meta.is_dir() {
                    private_dir(&at)?;
                } else {
                    std::fs::write(&at, b"")
                        .map_err(|e| format!("cannot make `{}`: {e}", at.display()))?;
                }
                cordon_linux::volume::restricted_bind(&m.source, &at, write, false)?;
                Ok(bind(&at, &m.destination, false))
            }
        }
    }

    fn start(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        live(&self.disposed)?;
        // An exec on a paused sandbox resumes it first; no pause comes
        // until it has started.
        let _awake = self.paused.awake(|p| self.freeze_all(p))?;
        let argv = resolved_argv(&self.view, req, &attach, NO_TTY)?;
        let mounts = self.base()?;
        let env = self.exec_env(req);
        if self.execs.fetch_add(1, Ordering::Relaxed) > 0 {
            if let Some(pod) = self.pod(&mounts) {
                let started =
                    self.start_in_pod(pod, req, argv.clone(), &env, attach.stdin_stream)?;
                if let Some(handle) = started {
                    return Ok(handle);
                }
            }
        }
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-e{k}", self.id);
        let with_stdin = attach.stdin_stream || !req.stdin.is_empty();
        let mut labels = self.labels.clone();
        labels.insert(crate::LABEL_ROLE.to_string(), "exec".to_string());
        let body = self.exec_body(argv, &env, with_stdin, labels, mounts)?;
        let pipe = || -> Result<(OwnedFd, OwnedFd), SandboxError> {
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| exec_failed(format!("cannot make a pipe: {e}")))
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let stdin_pipe = if with_stdin { Some(pipe()?) } else { None };
        let (stdin_r, stdin_w) = match stdin_pipe {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<Result<i64, String>>(1);
        let started = launch(
            &self.engine,
            name.clone(),
            body,
            with_stdin,
            stdin_r,
            (out_w, err_w),
            done_tx,
        );
        let (pid, cid) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(e)) | Err(e) => {
                let _ = self.engine.remove(&name);
                return Err(exec_failed(e));
            }
        };
        let stdin = match stdin_w {
            Some(w) if attach.stdin_stream => StdinFeed::Stream(Box::new(std::fs::File::from(w))),
            Some(w) => StdinFeed::Bytes(Box::new(std::fs::File::from(w)), req.stdin.clone()),
            None => StdinFeed::None,
        };
        let killed = Arc::new(AtomicBool::new(false));
        let run = Running {
            engine: self.engine.clone(),
            name: name.clone(),
            pid,
            cid,
            done: done_rx,
            // One that ended before it was seen has no CPU time to wait for.
            bounds: match ExecBounds::new(&self.limits, req, killed.clone()) {
                b if pid == 0 => b.ended_unseen(),
                b => b,
            },
        };
        let engine = self.engine.clone();
        Ok(ExecHandle::from_pipes(
            stdin,
            std::fs::File::from(out_r),
            std::fs::File::from(err_r),
            req.max_output_bytes,
            move || run.wait(),
            Killer::new(move || {
                killed.store(true, Ordering::SeqCst);
                engine.kill(&name);
            }),
        ))
    }

    /// An exec's environment: cordon's, the proxy's (for the workload's
    /// convenience only), then the request's.
    fn exec_env(&self, req: &ExecRequest) -> std::collections::BTreeMap<String, String> {
        cordon_backend_kit::workarea::exec_env(
            &self.guest_work,
            self.proxy_port,
            self.trust.is_some(),
            &req.env,
        )
    }

    /// The exec's container: the `host` image, the command, no network but
    /// the proxy's route (when there is one), the sandbox's binds and bounds.
    fn exec_body(
        &self,
        argv: Vec<String>,
        env: &std::collections::BTreeMap<String, String>,
        with_stdin: bool,
        labels: HashMap<String, String>,
        mounts: Vec<DMount>,
    ) -> Result<ContainerCreateBody, SandboxError> {
        // The anchor's namespace is joined when it holds one: the proxy's
        // listener, or the loopback a port is served on.
        let joined = self.proxy_port.is_some() || self.ports;
        let net = match (self.ports, self.proxy_port) {
            (true, _) => DockerNet::Listening,
            (false, Some(_)) => DockerNet::ProxyRoute,
            (false, None) => DockerNet::None,
        };
        Ok(ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: Some(argv),
            // The image has none; an empty one keeps it so.
            entrypoint: Some(Vec::new()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(self.guest_work.clone()),
            user: Some(format!("{WORKLOAD_ID}:{WORKLOAD_ID}")),
            // A container in another's network namespace takes its name.
            hostname: (!joined).then(|| cordon_confine::oci::HOSTNAME.to_string()),
            attach_stdin: Some(with_stdin),
            open_stdin: Some(with_stdin),
            stdin_once: Some(with_stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(match joined {
                    true => format!("container:{}", self.id),
                    false => "none".into(),
                }),
                ..host_config(mounts, &self.limits, net).map_err(refused)?
            }),
            ..Default::default()
        })
    }
}

/// Creates, attaches and starts an exec's container, then forwards its
/// streams into `out` and waits for it, all on the engine's runtime; its end
/// goes to `done` once every byte is forwarded. Returns the start: the
/// container's first process and id.
fn launch(
    engine: &Engine,
    name: String,
    body: ContainerCreateBody,
    with_stdin: bool,
    stdin_r: Option<OwnedFd>,
    (out_w, err_w): (OwnedFd, OwnedFd),
    done_tx: std::sync::mpsc::SyncSender<Result<i64, String>>,
) -> Result<Result<(i64, String), String>, String> {
    let d = engine.docker();
    let n = name;
    call(async move {
        let opts = bollard::query_parameters::CreateContainerOptionsBuilder::default()
            .name(&n)
            .build();
        let cid = d
            .create_container(Some(opts), body)
            .await
            .map_err(|e| format!("creating the exec's container: {e}"))?
            .id;
        let aopts = bollard::query_parameters::AttachContainerOptionsBuilder::default()
            .stream(true)
            .stdin(with_stdin)
            .stdout(true)
            .stderr(true)
            .build();
        let attached = d
            .attach_container(&n, Some(aopts))
            .await
            .map_err(|e| format!("attaching to the exec's container: {e}"))?;
        d.start_container(&n, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| format!("starting the exec's container: {e}"))?;
        let pid = d
            .inspect_container(
                &n,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .ok()
            .and_then(|c| c.state?.pid)
            .unwrap_or(0);
        let bollard::container::AttachContainerResults { mut output, input } = attached;
        if let Some(r) = stdin_r {
            tokio::spawn(async move {
                let Ok(mut from) = tokio::net::unix::pipe::Receiver::from_owned_fd(r) else {
                    return;
                };
                let mut input = input;
                let _ = tokio::io::copy(&mut from, &mut input).await;
                let _ = input.shutdown().await;
            });
        }
        let forward = tokio::spawn(async move {
            let (Ok(mut out), Ok(mut err)) = (
                tokio::net::unix::pipe::Sender::from_owned_fd(out_w),
                tokio::net::unix::pipe::Sender::from_owned_fd(err_w),
            ) else {
                return;
            };
            while let Some(Ok(chunk)) = output.next().await {
                let _ = match chunk {
                    bollard::container::LogOutput::StdErr { message } => {
                        err.write_all(&message).await
                    }
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message } => {
                        out.write_all(&message).await
                    }
                    bollard::container::LogOutput::StdIn { .. } => Ok(()),
                };
            }
        });
        let w = d.clone();
        let wn = n.clone();
        tokio::spawn(async move {
            let code = match w
                .wait_container(&wn, None::<bollard::query_parameters::WaitContainerOptions>)
                .next()
                .await
            {
                Some(Ok(r)) => Ok(r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Ok(code)
                }
                Some(Err(e)) => Err(e.to_string()),
                None => Err("the engine did not say how the exec ended".into()),
            };
            // The streams end with the container; every byte is
            // forwarded before the end is reported.
            let _ = forward.await;
            let _ = done_tx.send(code);
        });
        Ok::<(i64, String), String>((pid, cid))
    })
}

/// One exec's container under way.
struct Running {
    engine: Engine,
    name: String,
    /// Its first process on the host (0: it ended before it was seen).
    pid: i64,
    /// Its full id, which its cgroup's path holds.
    cid: String,
    done: Receiver<Result<i64, String>>,
    bounds: ExecBounds,
}

impl Running {
    /// Waits for the container to end, holding the wall clock and the CPU
    /// bound from the host; then removes it.
    fn wait(mut self) -> Result<ExitStatus, SandboxError> {
        let mut cpu_file: Option<PathBuf> = None;
        let ended = loop {
            if cpu_file.is_none() && self.pid > 0 {
                cpu_file = crate::engine::cpu_file_of(self.pid, &self.cid);
            }
            let cpu = cpu_file.as_deref().and_then(crate::engine::cpu_nanos_in);
            if let Some(end) = self.bounds.over(cpu, &self.name) {
                self.stop();
                return end;
            }
            // Woken the moment the engine says the exec ended; the bounds
            // are looked at again every `POLL`.
            match self.done.recv_timeout(crate::engine::POLL) {
                Ok(r) => break r,
                Err(RecvTimeoutError::Disconnected) => {
                    break Err("the engine's wait for the exec was lost".into())
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        };
        let oom = self.oom_killed();
        let _ = self.engine.remove(&self.name);
        match ended {
            _ if oom => Ok(ExitStatus::Bound {
                bound: "max_memory",
            }),
            // `RLIMIT_CPU`'s signals (SIGXCPU, then SIGKILL at the hard
            // limit), should the cgroup's time not have been seen first.
            Ok(152) => Ok(ExitStatus::Bound {
                bound: "max_cpu_seconds",
            }),
            Ok(code) => Ok(ExitStatus::Code(i32::try_from(code).unwrap_or(-1))),
            Err(e) => Err(exec_failed(e)),
        }
    }

    fn oom_killed(&self) -> bool {
        let d = self.engine.docker();
        let n = self.name.clone();
        call(async move {
            d.inspect_container(
                &n,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .ok()
            .and_then(|c| c.state?.oom_killed)
            .unwrap_or(false)
        })
        .unwrap_or(false)
    }

    fn stop(&self) {
        self.engine.kill(&self.name);
        let _ = self.engine.remove(&self.name);
    }
}

/// The labels a sandbox's containers carry on the engine: whose it is, and
/// where its directory is, so any cordon process finds and reclaims it.
fn sandbox_labels(
    req: &AcquireRequest,
    id: &str,
    dir: &Path,
    engine: &Engine,
) -> HashMap<String, String> {
    HashMap::from([
        (crate::LABEL_OWNER.to_string(), crate::OWNER.to_string()),
        (crate::LABEL_SANDBOX.to_string(), id.to_string()),
        (crate::LABEL_SCOPE.to_string(), req.key.scope().to_string()),
        (
            crate::LABEL_THREAD.to_string(),
            req.key.thread_id().to_string(),
        ),
        (
            crate::LABEL_AGENT_DIR.to_string(),
            req.key.agent_dir().to_string(),
        ),
        (
            crate::LABEL_MAKER.to_string(),
            std::process::id().to_string(),
        ),
        (crate::LABEL_DIR.to_string(), dir.display().to_string()),
        (crate::LABEL_ENGINE.to_string(), engine.endpoint.to_string()),
    ])
}

/// The sandbox directory's root (cordon's `/etc`, an empty resolver
/// configuration), its masks and its binds directory.
fn prepare_dir(dir: &Path, guest_work: &str) -> Result<HostImage, String> {
    let root = HostImage::prepare(&dir.join("rootfs"))?;
    root.write_etc(WORKLOAD_ID, WORKLOAD_ID, guest_work)?;
    // Docker binds the host's resolver configuration unless one
    // is bound: cordon's is empty (no network, nothing to ask).
    std::fs::write(root.rootfs.join("etc/resolv.conf"), b"")
        .map_err(|e| format!("cannot write `/etc/resolv.conf` of the root: {e}"))?;
    make_masks(&dir.join("masks"))?;
    private_dir(&dir.join("binds"))?;
    Ok(root)
}

pub(crate) use cordon_backend_kit::remove_sandbox_dir;

impl Sandbox for DockerSandbox {
    cordon_backend_kit::host_sandbox!(start, view, files);

    /// Through the engine: every container of the sandbox (its anchor and
    /// each exec's) paused by the engine's cgroup freezer.
    fn workspace_diff(&self) -> Result<Vec<cordon_sandbox::WorkspaceChange>, SandboxError> {
        cordon_backend_kit::workspace::diff(self.workspace.as_ref())
    }

    fn workspace_apply(
        &self,
        only: &[String],
    ) -> Result<cordon_sandbox::ApplyReport, SandboxError> {
        cordon_backend_kit::workspace::apply(self.workspace.as_ref(), only)
    }

    fn pause(&self) -> Result<(), SandboxError> {
        live(&self.disposed)?;
        self.paused.set(true, |p| self.freeze_all(p))
    }
    fn resume(&self) -> Result<(), SandboxError> {
        live(&self.disposed)?;
        self.paused.set(false, |p| self.freeze_all(p))
    }

    /// Through the proxy serving its route: replaces the allowlist (new
    /// connections are decided by the new generation, open ones it denies
    /// are closed) or closes egress; a sandbox with no route refuses.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        self.egress.change(change, by)
    }

    /// Inside the anchor's network namespace, which every exec of a
    /// sandbox made with `requires: [ports]` joins; refused otherwise.
    fn open_port(
        &self,
        req: &cordon_sandbox::PortRequest,
    ) -> Result<std::net::TcpStream, SandboxError> {
        live(&self.disposed)?;
        if !self.ports {
            return Err(SandboxError::Unsupported {
                capability: cordon_sandbox::Capability::Ports,
            });
        }
        let failed = |reason: String| SandboxError::Failed {
            operation: "port",
            reason,
        };
        let ns = {
            let mut held = self.port_netns.lock().unwrap_or_else(|p| p.into_inner());
            if held.is_none() {
                *held =
                    Some(crate::containers::anchor_netns(&self.engine, &self.id).map_err(failed)?);
            }
            held.as_ref()
                .map(|fd| fd.try_clone().map_err(|e| failed(e.to_string())))
                .transpose()?
        };
        cordon_backend_kit::ports::connect(ns, req.port)
    }

    fn residue(&self) -> serde_json::Value {
        serde_json::to_value(Residue {
            dir: self.dir.clone(),
            sandbox: self.id.clone(),
            engine: self.engine.endpoint.to_string(),
        })
        .unwrap_or_default()
    }
}
