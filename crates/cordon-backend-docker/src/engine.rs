//! [`Engine`]: one Docker Engine, reached through its API over a unix
//! socket with `bollard`, on a small tokio runtime of the backend's own.
//!
//! The backend's traits are synchronous; every call here is spawned on
//! the engine's runtime and waited for on a std channel ([`Engine::call`]),
//! so it works the same from a plain thread and from inside a caller's
//! own tokio runtime (whose thread it blocks, never re-enters).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use futures_util::StreamExt;

/// The oldest Engine API cordon drives: 1.41 (Docker 20.10) is the first
/// that takes a seccomp rule's `errnoRet` and a container's cgroup
/// namespace mode.
pub const MIN_API: (usize, usize) = (1, 41);

/// The environment variable naming the engine: `unix:///path/to/docker.sock`.
pub const HOST_VAR: &str = "CORDON_DOCKER_HOST";

/// The engine's socket when [`HOST_VAR`] is not set.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// How long one API call may take before the engine counts as not
/// answering (image imports and container starts included).
const TIMEOUT_SECS: u64 = 120;

/// The engines this process is pointed at. One today (the local socket, or
/// [`HOST_VAR`]); a list so placement over several engines can come
/// without changing the callers.
pub fn endpoints() -> Result<Vec<Endpoint>, String> {
    let raw = std::env::var(HOST_VAR).unwrap_or_else(|_| format!("unix://{DEFAULT_SOCKET}"));
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Endpoint::parse)
        .collect()
}

/// Where an engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub socket: PathBuf,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        match s.strip_prefix("unix://") {
            Some(p) if p.starts_with('/') => Ok(Endpoint {
                socket: PathBuf::from(p),
            }),
            _ => Err(format!(
                "`{s}` is not an engine endpoint cordon drives; set `{HOST_VAR}` to `unix:///path/to/docker.sock` (TCP endpoints are not served in this version)"
            )),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unix://{}", self.socket.display())
    }
}

/// Checks that the engine behind `socket` sees this process's mounts: the
/// work dir's volume and the binds cordon makes for a sandbox are mounts
/// in this mount namespace, and an engine in another would bind the
/// directories beneath them instead (on the host's disk, without
/// `max_disk` or `noexec`). The engine is the socket's peer
/// (`SO_PEERCRED`).
fn same_mounts(socket: &Path) -> Result<(), String> {
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to `{}`: {e}; is `dockerd` running?",
            socket.display()
        )
    })?;
    let peer = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|e| format!("who serves `{}`: {e}", socket.display()))?;
    let pid = peer.pid.as_raw_nonzero().get();
    let ns = |p: String| std::fs::read_link(&p).map_err(|e| format!("`{p}`: {e}"));
    let theirs = ns(format!("/proc/{pid}/ns/mnt"))?;
    let ours = ns("/proc/self/ns/mnt".to_string())?;
    if theirs == ours {
        Ok(())
    } else {
        Err(format!(
            "the engine at `{}` (pid {pid}) runs in another mount namespace, so the volumes and binds cordon makes for a sandbox would not be what its containers see; run cordon in the engine's mount namespace (`nsenter -t {pid} -m`), or the engine in cordon's",
            socket.display()
        ))
    }
}

/// The backend's runtime: two worker threads, made once per process.
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-docker")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the docker backend's runtime: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A container as listed: its id and its labels.
pub type Listed = (String, HashMap<String, String>);

/// One engine, connected, its API version negotiated.
#[derive(Clone)]
pub struct Engine {
    pub endpoint: Endpoint,
    docker: Docker,
    /// The engine's own version and API version, for `doctor`.
    pub version: String,
    pub api: String,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("endpoint", &self.endpoint)
            .field("version", &self.version)
            .field("api", &self.api)
            .finish()
    }
}

/// Runs `fut` on the backend's runtime and waits for it here.
pub fn call<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| "the docker backend's runtime dropped a call".to_string())
}

fn api_of(s: &str) -> Option<(usize, usize)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl Engine {
    /// Connects to `endpoint`, negotiates the API version down to the
    /// engine's, and refuses an engine older than [`MIN_API`].
    pub fn connect(endpoint: &Endpoint) -> Result<Engine, String> {
        let socket = &endpoint.socket;
        if !socket.exists() {
            return Err(format!(
                "no Docker Engine socket at `{}`; start the engine (Debian: `apt-get install docker.io`, then `dockerd`), or point `{HOST_VAR}` at its socket",
                socket.display()
            ));
        }
        same_mounts(socket)?;
        let path = socket.display().to_string();
        let docker = Docker::connect_with_unix(&path, TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
            .map_err(|e| format!("cannot reach the engine at `{endpoint}`: {e}"))?;
        let ep = endpoint.clone();
        call(async move {
            let docker = docker.negotiate_version().await.map_err(|e| {
                format!("the engine at `{ep}` does not answer its API: {e}; is `dockerd` running?")
            })?;
            let v = docker
                .version()
                .await
                .map_err(|e| format!("the engine at `{ep}` did not give its version: {e}"))?;
            let api = v.api_version.unwrap_or_default();
            match api_of(&api) {
                Some(a) if a >= MIN_API => {}
                _ => {
                    return Err(format!(
                        "the engine at `{ep}` speaks API `{api}`, older than {}.{} (Docker 20.10), the oldest cordon drives; upgrade the engine",
                        MIN_API.0, MIN_API.1
                    ))
                }
            }
            Ok(Engine {
                endpoint: ep,
                docker,
                version: v.version.unwrap_or_default(),
                api,
            })
        })?
    }

    /// The API client, for calls made inside [`call`].
    pub fn docker(&self) -> Docker {
        self.docker.clone()
    }

    /// Whether the engine has an image of this name.
    pub fn has_image(&self, name: &str) -> Result<bool, String> {
        let d = self.docker();
        let name = name.to_string();
        call(async move {
            match d.inspect_image(&name).await {
                Ok(_) => Ok(true),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(false),
                Err(e) => Err(format!("inspecting image `{name}`: {e}")),
            }
        })?
    }

    /// Imports `tar` (a root filesystem) as image `repo:tag`
    /// (`images/create?fromSrc=-`), unless the engine has it already.
    pub fn import(&self, repo: &str, tag: &str, tar: Vec<u8>) -> Result<(), String> {
        let name = format!("{repo}:{tag}");
        if self.has_image(&name)? {
            return Ok(());
        }
        let d = self.docker();
        let (repo, tag) = (repo.to_string(), tag.to_string());
        call(async move {
            let opts = bollard::query_parameters::CreateImageOptionsBuilder::default()
                .from_src("-")
                .repo(&repo)
                .tag(&tag)
                .build();
            let mut s = d.create_image(
                Some(opts),
                Some(bollard::body_full(bytes::Bytes::from(tar))),
                None,
            );
            while let Some(item) = s.next().await {
                let info = item.map_err(|e| format!("importing `{repo}:{tag}`: {e}"))?;
                if let Some(err) = info.error_detail.and_then(|d| d.message) {
                    return Err(format!("importing `{repo}:{tag}`: {err}"));
                }
            }
            Ok(())
        })??;
        if self.has_image(&name)? {
            Ok(())
        } else {
            Err(format!(
                "the engine at `{}` took the import of `{name}` but does not list it",
                self.endpoint
            ))
        }
    }

    /// The ids (and labels) of every container, running or not, whose
    /// labels include all of `labels`.
    pub fn containers(&self, labels: &[(&str, &str)]) -> Result<Vec<Listed>, String> {
        let d = self.docker();
        let filter: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        call(async move {
            let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&HashMap::from([("label".to_string(), filter)]))
                .build();
            d.list_containers(Some(opts))
                .await
                .map_err(|e| format!("listing containers: {e}"))
                .map(|cs| {
                    cs.into_iter()
                        .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
                        .collect()
                })
        })?
    }

    /// Kills and removes a container (with its anonymous volumes); one
    /// already gone is no failure.
    pub fn remove(&self, id: &str) -> Result<(), String> {
        let d = self.docker();
        let id = id.to_string();
        call(async move {
            let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            match d.remove_container(&id, Some(opts)).await {
                Ok(()) => Ok(()),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(()),
                Err(e) => Err(format!("removing container `{id}`: {e}")),
            }
        })?
    }

    /// Sends SIGKILL to a container (best effort: it may have ended).
    pub fn kill(&self, id: &str) {
        let d = self.docker();
        let id = id.to_string();
        let _ = call(async move {
            let opts = bollard::query_parameters::KillContainerOptionsBuilder::default()
                .signal("KILL")
                .build();
            let _ = d.kill_container(&id, Some(opts)).await;
        });
    }

    /// Removes every container carrying `key=value`; returns what failed.
    pub fn remove_labelled(&self, key: &str, value: &str) -> Vec<String> {
        match self.containers(&[(crate::LABEL_OWNER, crate::OWNER), (key, value)]) {
            Ok(cs) => cs
                .into_iter()
                .filter_map(|(id, _)| self.remove(&id).err())
                .collect(),
            Err(e) => vec![e],
        }
    }
}

/// The engine this process uses (the one endpoint [`endpoints`] names;
/// several are refused until placement over them is built).
pub fn local() -> Result<Engine, String> {
    let eps = endpoints()?;
    match eps.as_slice() {
        [one] => Engine::connect(one),
        [] => Err(format!("`{HOST_VAR}` names no engine")),
        // Never one used and the others forgotten.
        _ => Err(format!(
            "`{HOST_VAR}` names {} engines, and placement over several is not in this version; name one",
            eps.len()
        )),
    }
}

/// Where the CPU time of the cgroup that process `pid` is in can be read
/// (cgroup v1's `cpuacct.usage`, or v2's `cpu.stat`), if that cgroup is
/// container `id`'s: a process that is exiting shows the root cgroup,
/// whose time is the whole host's, never the container's.
pub fn cpu_file_of(pid: i64, id: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "cpuacct") {
            return path.contains(id).then(|| {
                Path::new("/sys/fs/cgroup/cpuacct")
                    .join(path.trim_start_matches('/'))
                    .join("cpuacct.usage")
            });
        }
    }
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    path.contains(id).then(|| {
        Path::new("/sys/fs/cgroup")
            .join(path.trim_start_matches('/'))
            .join("cpu.stat")
    })
}

/// The CPU time (ns) in a file [`cpu_file_of`] found.
pub fn cpu_nanos_in(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    if file.ends_with("cpu.stat") {
        text.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .map(|us| us.saturating_mul(1000))
    } else {
        text.trim().parse().ok()
    }
}

/// A probe's findings, once per process.
#[derive(Debug, Clone)]
pub struct Probed {
    pub engine: Engine,
    pub found: Vec<String>,
}

/// Connects, imports the `host` image and runs a trivial container, once
/// per process: what `doctor` shows and what `build` needs.
pub fn probe() -> &'static Result<Probed, (String, Vec<String>)> {
    static P: OnceLock<Result<Probed, (String, Vec<String>)>> = OnceLock::new();
    P.get_or_init(|| {
        let mut found = Vec::new();
        let eps = endpoints().map_err(|e| (e, Vec::new()))?;
        found.push(format!(
            "engine endpoint: {}",
            eps.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let unrunnable = |e: String, found: &Vec<String>| {
            let mut found = found.clone();
            found.push(e.clone());
            (e, found)
        };
        if !rustix::process::geteuid().is_root() {
            return Err(unrunnable(
                "the docker backend makes each sandbox's work dir volume and binds on the host, which needs root; run cordon as root".into(),
                &found,
            ));
        }
        let engine = local().map_err(|e| unrunnable(e, &found))?;
        found.push(format!(
            "engine: Docker {} (API {}, negotiated down from {}.{})",
            engine.version,
            engine.api,
            bollard::API_DEFAULT_VERSION.major_version,
            bollard::API_DEFAULT_VERSION.minor_version
        ));
        // A trivial container that ran is recorded on the engine (a
        // container made and never started, named for the engine's version
        // and what cordon asks of it), so later processes ask the engine
        // one question instead of running one: a changed engine or a
        // changed confinement has another name and runs it again.
        let record = crate::sandbox::probe_record(&engine).map_err(|e| unrunnable(e, &found))?;
        let recorded = engine
            .containers(&[
                (crate::LABEL_OWNER, crate::OWNER),
                (crate::LABEL_ROLE, "probed"),
                (crate::LABEL_SANDBOX, &record),
            ])
            .map_err(|e| unrunnable(e, &found))?;
        if recorded.is_empty() {
            let started = std::time::Instant::now();
            crate::sandbox::trivial(&engine).map_err(|e| {
                unrunnable(
                    format!("a trivial container did not run on the engine: {e}"),
                    &found,
                )
            })?;
            found.push(format!(
                "a trivial container ran in {} ms",
                started.elapsed().as_millis()
            ));
            // Best effort: without the record the next process runs it again.
            let _ = crate::sandbox::record_probe(&engine, &record);
        } else {
            found.push(format!(
                "a trivial container ran on this engine (recorded as `{record}`)"
            ));
        }
        Ok(Probed { engine, found })
    })
}

/// The pause between two looks at a running container.
pub const POLL: Duration = Duration::from_millis(10);
