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

/// How long an engine has to answer whether it is there (its version) and
/// to list its containers, before it counts as not answering: short, so
/// one engine that hangs does not hold up placement on the others.
pub const ANSWER: Duration = Duration::from_secs(2);
/// How long a listing may take on an engine that answered.
const LIST: Duration = Duration::from_secs(10);

/// The docker backend's settings (`BackendSetup::engines`, under its
/// name): which engines it drives. The `cordon` binary fills them from
/// [`HOST_VAR`]; the backend reads them only from its setup, so a keeper
/// drives the engines its owner named.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSettings {
    /// `unix:///path/to/docker.sock`, several comma-separated; `None`:
    /// the local socket ([`DEFAULT_SOCKET`]).
    #[serde(default)]
    pub host: Option<String>,
}

impl DockerSettings {
    /// What a surface reads from its environment ([`HOST_VAR`]).
    pub fn from_env() -> DockerSettings {
        DockerSettings {
            host: std::env::var(HOST_VAR).ok(),
        }
    }

    /// The settings in `setup`.
    pub fn of(setup: &cordon_sandbox::BackendSetup) -> Result<DockerSettings, String> {
        setup.engines.get(crate::NAME)
    }

    /// The engines named: a comma-separated list of `unix://` endpoints,
    /// else the local socket. The same endpoint twice is refused (it would
    /// be counted twice at placement).
    pub fn endpoints(&self) -> Result<Vec<Endpoint>, String> {
        match &self.host {
            Some(h) => parse_endpoints(h),
            None => parse_endpoints(&format!("unix://{DEFAULT_SOCKET}")),
        }
    }
}

/// [`endpoints`] from the variable's value.
pub fn parse_endpoints(raw: &str) -> Result<Vec<Endpoint>, String> {
    let eps: Vec<Endpoint> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Endpoint::parse)
        .collect::<Result<_, _>>()?;
    if eps.is_empty() {
        return Err(format!(
            "`{HOST_VAR}` names no engine; set it to `unix:///path/to/docker.sock` (several: comma-separated)"
        ));
    }
    for (i, ep) in eps.iter().enumerate() {
        if eps[..i].contains(ep) {
            return Err(format!(
                "`{HOST_VAR}` names `{ep}` twice; name each engine once"
            ));
        }
    }
    Ok(eps)
}

/// Where an engine listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub socket: PathBuf,
}

impl Endpoint {
    /// A `unix:///absolute/path` endpoint. A TCP endpoint (remote, with
    /// TLS client certificates) is refused: cordon binds the host's
    /// directories (the image's, the work dir's volume, the masks) into
    /// each container, which needs the engine on the same host.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        match s.strip_prefix("unix://") {
            Some(p) if p.starts_with('/') => Ok(Endpoint {
                socket: PathBuf::from(p),
            }),
            _ if s.starts_with("tcp://") || s.starts_with("https://") || s.starts_with("http://") => Err(format!(
                "`{s}` is a remote engine, which cordon does not drive in this version: each sandbox's container binds directories of the host cordon runs on (the image's, the work dir's volume, cordon's `/etc` and masks), so the engine must be on that host; set `{HOST_VAR}` to its `unix:///path/to/docker.sock` (several engines on this host: comma-separated)"
            )),
            _ => Err(format!(
                "`{s}` is not an engine endpoint cordon drives; set `{HOST_VAR}` to `unix:///path/to/docker.sock` (several: comma-separated)"
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
            let asked = async {
                let docker = docker.negotiate_version().await?;
                let v = docker.version().await?;
                Ok::<_, bollard::errors::Error>((docker, v))
            };
            let (docker, v) = match tokio::time::timeout(ANSWER, asked).await {
                Ok(Ok(answered)) => answered,
                Ok(Err(e)) => {
                    return Err(format!(
                        "the engine at `{ep}` does not answer its API: {e}; is `dockerd` running?"
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "the engine at `{ep}` did not answer within {} s; is `dockerd` running?",
                        ANSWER.as_secs()
                    ))
                }
            };
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
        let ep = self.endpoint.clone();
        call(async move {
            let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&HashMap::from([("label".to_string(), filter)]))
                .build();
            match tokio::time::timeout(LIST, d.list_containers(Some(opts))).await {
                Ok(Ok(cs)) => Ok(cs
                    .into_iter()
                    .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
                    .collect()),
                Ok(Err(e)) => Err(format!(
                    "the engine at `{ep}` did not list its containers: {e}"
                )),
                Err(_) => Err(format!(
                    "the engine at `{ep}` did not list its containers within {} s",
                    LIST.as_secs()
                )),
            }
        })?
    }

    /// Kills and removes a container (with its anonymous volumes); one
    /// already gone is no failure.
    pub fn remove(&self, id: &str) -> Result<(), String> {
        let d = self.docker();
        let id = id.to_string();
        let ep = self.endpoint.clone();
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
                Err(e) => Err(format!("removing container `{id}` on `{ep}`: {e}")),
            }
        })?
    }

    /// Pauses (the engine's cgroup freezer) or unpauses a container; one
    /// gone, not running, or already so is no failure.
    pub fn pause(&self, id: &str, paused: bool) -> Result<(), String> {
        let d = self.docker();
        let id = id.to_string();
        let ep = self.endpoint.clone();
        call(async move {
            let done = if paused {
                d.pause_container(&id).await
            } else {
                d.unpause_container(&id).await
            };
            match done {
                Ok(()) => Ok(()),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => Ok(()),
                // One that has ended, or was never paused (the engine says
                // so with a 500 in some versions): nothing to do.
                Err(bollard::errors::Error::DockerResponseServerError { message, .. })
                    if ["is not paused", "is not running", "is already paused"]
                        .iter()
                        .any(|m| message.contains(m)) =>
                {
                    Ok(())
                }
                Err(e) => Err(format!(
                    "{} container `{id}` on `{ep}`: {e}",
                    if paused { "pausing" } else { "unpausing" }
                )),
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

/// Connects to each endpoint, in the configured order: the engine, or
/// why it does not answer.
pub fn reach(eps: &[Endpoint]) -> Vec<(Endpoint, Result<Engine, String>)> {
    eps.iter()
        .map(|ep| (ep.clone(), Engine::connect(ep)))
        .collect()
}

/// The live cordon sandboxes on `engine`: its anchors.
pub fn live_sandboxes(engine: &Engine) -> Result<usize, String> {
    engine
        .containers(&[
            (crate::LABEL_OWNER, crate::OWNER),
            (crate::LABEL_ROLE, "anchor"),
        ])
        .map(|cs| cs.len())
}

/// Where the CPU time of the cgroup that process `pid` is in can be read
/// (cgroup v1's `cpuacct.usage`, or v2's `cpu.stat`), if that cgroup is
/// container `id`'s: a process that is exiting shows the root cgroup,
/// whose time is the whole host's, never the container's.
pub fn cpu_file_of(pid: i64, id: &str) -> Option<PathBuf> {
    cgroup_file_of(pid, id, ("cpuacct", "cpuacct.usage"), "cpu.stat")
}

/// The file `v1` (controller, file) or, on a unified hierarchy, `v2` of
/// the cgroup process `pid` is in, if that cgroup is container `id`'s.
pub fn cgroup_file_of(pid: i64, id: &str, v1: (&str, &str), v2: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == v1.0) {
            return path.contains(id).then(|| {
                Path::new("/sys/fs/cgroup")
                    .join(v1.0)
                    .join(path.trim_start_matches('/'))
                    .join(v1.1)
            });
        }
    }
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    path.contains(id).then(|| {
        Path::new("/sys/fs/cgroup")
            .join(path.trim_start_matches('/'))
            .join(v2)
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

/// The pause between two looks at a running container.
pub const POLL: Duration = Duration::from_millis(10);
