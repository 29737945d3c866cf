//! `cordon serve --config FILE`: where it listens, which policy and floor,
//! and the credentials. Every key is checked when the file loads; an
//! unknown one is an error at its position.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cordon_policy::Identity;
use cordon_sandbox::yaml;
use cordon_sandbox::Isolation;
use marked_yaml::Spanned;
use serde::Deserialize;

/// The largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Where the server listens when the file does not say: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// A loaded, checked configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The file as named, for messages.
    pub file: String,
    pub listen: SocketAddr,
    /// The policy file; `None`: `cordon:default`.
    pub policy: Option<PathBuf>,
    /// The root layer the policy must have (a file, or `cordon:NAME`):
    /// whatever the policy file says, it can only narrow this one.
    pub policy_root: Option<String>,
    /// The weakest rung the server's sandboxes may run at (`None`: the
    /// default floor, `microvm`).
    pub min_isolation: Option<Isolation>,
    /// The backends to route to, in order of preference (`None`: every
    /// registered one, strongest first); still held to the floor.
    pub backends: Option<Vec<String>>,
    pub credentials: Vec<Credential>,
    pub limits: Limits,
    pub mcp: McpConfig,
    pub sandboxes: Sandboxes,
    /// How the egress proxy resolves names and where it audits (as in the
    /// host configuration); `None`: the system's resolver, the audit log
    /// in the state directory.
    pub egress: Option<cordon_sandbox::EgressSetup>,
    /// Where granted secrets come from (never the environment); `None`: a
    /// spec naming one is refused with what to configure.
    pub secrets: Option<SecretStore>,
    /// Serve HTTPS (and require client certificates when `client_ca` is
    /// set); `None`: plain HTTP, for loopback.
    pub tls: Option<Tls>,
    /// Where snapshots are kept and each scope's quota (`snapshots:`, as
    /// in the host configuration).
    pub snapshots: cordon_host::config::SnapshotConfig,
    /// Warm pools (`pools:`).
    pub pools: Vec<crate::pools::PoolConfig>,
}

/// The server's certificate, and the client CA for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// PEM: the server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM: the CA(s) a client certificate must chain to; set, every
    /// connection must present one (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// A secret store: a directory of files, or a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretStore {
    /// `DIR/NAME` holds secret `NAME`.
    Dir(PathBuf),
    /// `COMMAND... NAME` prints secret `NAME` (exit 2: no such secret).
    Command(Vec<String>),
}

/// Where the server's sandboxes are kept, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxes {
    /// The state directory (`None`: cordon's default, `/run/cordon` for
    /// root). Servers sharing one are replicas: each serves and disposes of
    /// what another made; a restarted one serves what it made before.
    pub state_dir: Option<PathBuf>,
    /// Seconds without a request after which a sandbox is disposed of.
    pub idle_timeout: u64,
    /// Seconds after creation after which it is disposed of, busy or not.
    pub max_age: u64,
    /// Dispose of this server's sandboxes when it shuts down (default
    /// `false`: they are left to the other replicas, a restarted server,
    /// the idle timeout or `cordon sandbox gc`).
    pub dispose_on_shutdown: bool,
    /// The directories beneath which a spec's `workspace` may be (each
    /// relative to the configuration file); empty: a spec with a
    /// workspace is refused. A workspace is a host directory a caller's
    /// sandbox reads and, through `apply`, writes: only what the operator
    /// lists here.
    pub workspace_roots: Vec<PathBuf>,
    /// `on_idle: pause`: an idle sandbox is paused, not disposed of; idle
    /// as long again, its files are snapshotted and it is disposed of.
    pub on_idle_pause: bool,
}

impl Default for Sandboxes {
    fn default() -> Sandboxes {
        Sandboxes {
            state_dir: None,
            idle_timeout: 1800,
            max_age: 86_400,
            dispose_on_shutdown: false,
            workspace_roots: Vec::new(),
            on_idle_pause: false,
        }
    }
}

/// The MCP endpoint (`/mcp`).
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// The spec of every MCP sandbox (`None`: cordon's MCP spec,
    /// `cordon_serve::mcp::default_spec`).
    pub spec: Option<PathBuf>,
    /// Browser origins allowed to call `/mcp` (`scheme://host:port`);
    /// default none: a request carrying any `Origin` is refused.
    pub allowed_origins: Vec<String>,
}

/// What one caller may ask of the server; past each, a clear `413` or
/// `429`, never a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body (a file written in counts here).
    pub max_request_bytes: usize,
    /// Live sandboxes one credential may hold at once.
    pub max_sandboxes: usize,
    /// Requests a second one credential may make (a burst of twice that).
    pub requests_per_second: u32,
    /// Live MCP sessions one credential may hold at once (each is memory
    /// on the server until it is ended or idles out).
    pub max_mcp_sessions: usize,
    /// Open connections at once, from every peer together; past it a new
    /// connection is refused at once (with a `503` over plain HTTP).
    pub max_connections: usize,
    /// Open connections at once from one peer address.
    pub max_connections_per_peer: usize,
    /// How long a connection may take to send a request's headers, and
    /// how long it may sit idle between requests, before it is closed.
    pub header_timeout: std::time::Duration,
    /// How long a request may take to send its body, from its headers on.
    pub body_timeout: std::time::Duration,
    /// Landed, unfetched artifacts one credential may hold: bytes (past
    /// them a collection is `413`), files (`429`), and seconds each is
    /// kept unfetched before it is removed.
    pub max_artifact_bytes: u64,
    pub max_artifacts: u64,
    pub artifact_ttl_seconds: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request_bytes: 16 << 20,
            max_sandboxes: 16,
            requests_per_second: 50,
            max_mcp_sessions: 16,
            max_connections: 512,
            max_connections_per_peer: 64,
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(60),
            max_artifact_bytes: 256 << 20,
            max_artifacts: 64,
            artifact_ttl_seconds: 900,
        }
    }
}

/// One credential: the SHA-256 digest of a bearer token, and the identity
/// and scope every request that presents it acts as.
#[derive(Debug, Clone)]
pub struct Credential {
    pub name: String,
    pub token_sha256: [u8; 32],
    pub identity: Identity,
    pub scope: String,
    /// Sees every tenant's series in `/metrics` and lists every backend.
    pub operator: bool,
    /// When set, the token is accepted only over a mutual-TLS connection
    /// whose client certificate (its DER) has this SHA-256.
    pub client_cert_sha256: Option<[u8; 32]>,
}

/// A configuration that does not load, positioned where it can be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read `{file}`: {reason}; name a regular file of at most 1 MiB")]
    Read { file: String, reason: String },
    #[error("{file}:{line}:{column}: {message}")]
    At {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServe {
    #[serde(default)]
    listen: Option<Spanned<String>>,
    #[serde(default)]
    policy: Option<Spanned<String>>,
    #[serde(default)]
    policy_root: Option<Spanned<String>>,
    #[serde(default)]
    min_isolation: Option<Spanned<String>>,
    #[serde(default)]
    backends: Option<Vec<Spanned<String>>>,
    credentials: Vec<RawCredential>,
    #[serde(default)]
    limits: Option<RawLimits>,
    #[serde(default)]
    mcp: Option<RawMcp>,
    #[serde(default)]
    sandboxes: Option<RawSandboxes>,
    #[serde(default)]
    egress: Option<cordon_host::config::RawEgress>,
    #[serde(default)]
    secrets: Option<RawSecrets>,
    #[serde(default)]
    tls: Option<RawTls>,
    #[serde(default)]
    snapshots: Option<cordon_host::config::RawSnapshots>,
    #[serde(default)]
    pools: Vec<crate::pools::RawPool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Spanned<String>,
    key: Spanned<String>,
    #[serde(default)]
    client_ca: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    #[serde(default)]
    dir: Option<Spanned<String>>,
    #[serde(default)]
    command: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandboxes {
    #[serde(default)]
    state_dir: Option<Spanned<String>>,
    #[serde(default)]
    idle_timeout_seconds: Option<Spanned<String>>,
    #[serde(default)]
    max_age_seconds: Option<Spanned<String>>,
    #[serde(default)]
    dispose_on_shutdown: Option<Spanned<bool>>,
    #[serde(default)]
    workspace_roots: Vec<Spanned<String>>,
    #[serde(default)]
    on_idle: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcp {
    #[serde(default)]
    spec: Option<Spanned<String>>,
    #[serde(default)]
    allowed_origins: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    max_request_bytes: Option<Spanned<String>>,
    #[serde(default)]
    max_sandboxes: Option<Spanned<String>>,
    #[serde(default)]
    requests_per_second: Option<Spanned<String>>,
    #[serde(default)]
    max_mcp_sessions: Option<Spanned<String>>,
    #[serde(default)]
    max_connections: Option<Spanned<String>>,
    #[serde(default)]
    max_connections_per_peer: Option<Spanned<String>>,
    #[serde(default)]
    header_timeout_seconds: Option<Spanned<String>>,
    #[serde(default)]
    body_timeout_seconds: Option<Spanned<String>>,
    max_artifact_bytes: Option<Spanned<String>>,
    #[serde(default)]
    max_artifacts: Option<Spanned<String>>,
    #[serde(default)]
    artifact_ttl_seconds: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    name: Spanned<String>,
    token_sha256: Spanned<String>,
    scope: Spanned<String>,
    identity: RawIdentity,
    #[serde(default)]
    operator: Option<Spanned<bool>>,
    #[serde(default)]
    client_cert_sha256: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    namespace: Spanned<String>,
    name: Spanned<String>,
    #[serde(default)]
    attested: Option<Spanned<bool>>,
    #[serde(default)]
    labels: BTreeMap<String, Spanned<String>>,
}

impl ServeConfig {
    pub fn from_file(path: &Path) -> Result<ServeConfig, ConfigError> {
        let file = path.display().to_string();
        let read = |reason: String| ConfigError::Read {
            file: file.clone(),
            reason,
        };
        let text = yaml::read_file(path, MAX_CONFIG_BYTES).map_err(read)?;
        let base = path.parent().unwrap_or(Path::new("."));
        ServeConfig::from_yaml(&file, &text, base)
    }

    /// Loads `text` (named `file`); a relative `policy` is relative to
    /// `base` (the file's directory).
    pub fn from_yaml(file: &str, text: &str, base: &Path) -> Result<ServeConfig, ConfigError> {
        let at = At(file);
        let raw: RawServe = yaml::load(text).map_err(|f| at.at((f.line, f.column), f.message))?;
        let listen = match &raw.listen {
            None => DEFAULT_LISTEN.parse().map_err(|_| at.at((1, 1), "bad default".into()))?,
            Some(l) => l.parse::<SocketAddr>().map_err(|e| {
                at.at(
                    yaml::pos(l),
                    format!("`listen`: `{}` is not an address and port ({e}); write it like `127.0.0.1:8787`", &**l),
                )
            })?,
        };
        let policy = raw.policy.as_ref().map(|p| base.join(&**p));
        let policy_root = raw.policy_root.as_ref().map(|r| {
            if r.starts_with("cordon:") {
                r.to_string()
            } else {
                base.join(&**r).display().to_string()
            }
        });
        let min_isolation = match &raw.min_isolation {
            None => None,
            Some(m) => Some(
                m.parse::<Isolation>()
                    .map_err(|e| at.at(yaml::pos(m), format!("`min_isolation`: {e}")))?,
            ),
        };
        let credentials = credentials_of(&raw, &at)?;
        let limits = match &raw.limits {
            Some(l) => limits_of(l, &at)?,
            None => Limits::default(),
        };
        let mcp = mcp_of(raw.mcp.as_ref(), base, &at)?;
        let sandboxes = sandboxes_of(raw.sandboxes.as_ref(), base, &at)?;
        let egress = match raw.egress {
            None => None,
            Some(e) => Some(
                cordon_host::config::egress_setup(file, e).map_err(|e| match e {
                    cordon_host::config::ConfigError::Structure {
                        line,
                        column,
                        message,
                        ..
                    } => at.at((line, column), message),
                    other => at.at((1, 1), other.to_string()),
                })?,
            ),
        };
        let secrets = secrets_of(raw.secrets.as_ref(), base, &at)?;
        let tls = raw.tls.as_ref().map(|t| Tls {
            cert: base.join(&*t.cert),
            key: base.join(&*t.key),
            client_ca: t.client_ca.as_ref().map(|c| base.join(&**c)),
        });
        let backends = backends_of(raw.backends.as_ref(), &at)?;
        let snapshots = match &raw.snapshots {
            None => cordon_host::config::SnapshotConfig::default(),
            Some(r) => cordon_host::config::snapshots_of(file, r).map_err(|e| match e {
                cordon_host::config::ConfigError::Structure {
                    line,
                    column,
                    message,
                    ..
                } => at.at((line, column), message),
                other => at.at((1, 1), other.to_string()),
            })?,
        };
        let pools = crate::pools::pools_of(&raw.pools, base, &credentials, &|p, m| at.at(p, m))?;
        Ok(ServeConfig {
            pools,
            snapshots,
            file: file.to_string(),
            backends,
            egress,
            secrets,
            tls,
            listen,
            policy,
            policy_root,
            min_isolation,
            credentials,
            limits,
            mcp,
            sandboxes,
        })
    }
}

/// Where a configuration error is: the file, then a position in it.
struct At<'a>(&'a str);

impl At<'_> {
    fn at(&self, (line, column): (usize, usize), message: String) -> ConfigError {
        ConfigError::At {
            file: self.0.to_string(),
            line,
            column,
            message,
        }
    }
}

/// The credentials, each checked: a digest of its own, a name of its own, a
/// scope; a certificate binding only under mutual TLS.
fn credentials_of(raw: &RawServe, at: &At<'_>) -> Result<Vec<Credential>, ConfigError> {
    if raw.credentials.is_empty() {
        return Err(at.at(
            (1, 1),
            "`credentials` is empty: nothing could call the server; add one (see docs/serve.md)"
                .into(),
        ));
    }
    let mut credentials: Vec<Credential> = Vec::new();
    for c in &raw.credentials {
        let digest =
            parse_digest(&c.token_sha256).map_err(|m| at.at(yaml::pos(&c.token_sha256), m))?;
        if credentials.iter().any(|o| o.token_sha256 == digest) {
            return Err(at.at(
                yaml::pos(&c.token_sha256),
                "this token digest is given twice; each credential needs a token of its own".into(),
            ));
        }
        if credentials.iter().any(|o| o.name == *c.name) {
            return Err(at.at(
                yaml::pos(&c.name),
                format!("credential `{}` is named twice", &*c.name),
            ));
        }
        if c.scope.is_empty() {
            return Err(at.at(
                yaml::pos(&c.scope),
                "`scope` is empty; name the tenant".into(),
            ));
        }
        credentials.push(Credential {
            name: c.name.to_string(),
            token_sha256: digest,
            scope: c.scope.to_string(),
            identity: Identity {
                namespace: c.identity.namespace.to_string(),
                name: c.identity.name.to_string(),
                attested: c.identity.attested.as_ref().is_some_and(|a| **a),
                labels: c
                    .identity
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect(),
            },
            operator: c.operator.as_ref().is_some_and(|o| **o),
            client_cert_sha256: match &c.client_cert_sha256 {
                None => None,
                Some(d) => {
                    if raw.tls.as_ref().is_none_or(|t| t.client_ca.is_none()) {
                        return Err(at.at(
                            yaml::pos(d),
                            "`client_cert_sha256` binds the token to a client certificate, which needs mutual TLS: set `tls.client_ca`".into(),
                        ));
                    }
                    Some(parse_digest(d).map_err(|m| {
                        at.at(
                            yaml::pos(d),
                            m.replace("`token_sha256`", "`client_cert_sha256`").replace(
                                "the SHA-256 of the token: `printf %s TOKEN | sha256sum`",
                                "the SHA-256 of the certificate's DER: `openssl x509 -in CERT -outform der | sha256sum`",
                            ),
                        )
                    })?)
                }
            },
        });
    }
    Ok(credentials)
}

/// `limits`, each a whole number above 0 (sizes as the policy writes them),
/// the per-peer connection cap no more than the total.
fn limits_of(l: &RawLimits, at: &At<'_>) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    let count = |v: &Spanned<String>, field: &str| -> Result<u64, ConfigError> {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(at.at(
                yaml::pos(v),
                format!("`limits.{field}`: `{}` is not a whole number above 0", &**v),
            )),
        }
    };
    if let Some(v) = &l.max_request_bytes {
        let n = cordon_policy::canon::size(v)
            .map_err(|e| at.at(yaml::pos(v), format!("`limits.max_request_bytes`: {e}")))?;
        limits.max_request_bytes = usize::try_from(n).unwrap_or(usize::MAX).max(1);
    }
    if let Some(v) = &l.max_sandboxes {
        limits.max_sandboxes = usize::try_from(count(v, "max_sandboxes")?).unwrap_or(usize::MAX);
    }
    if let Some(v) = &l.requests_per_second {
        limits.requests_per_second =
            u32::try_from(count(v, "requests_per_second")?).unwrap_or(u32::MAX);
    }
    if let Some(v) = &l.max_artifact_bytes {
        limits.max_artifact_bytes = cordon_policy::canon::size(v)
            .map_err(|e| at.at(yaml::pos(v), format!("`limits.max_artifact_bytes`: {e}")))?;
    }
    if let Some(v) = &l.max_artifacts {
        limits.max_artifacts = count(v, "max_artifacts")?;
    }
    if let Some(v) = &l.artifact_ttl_seconds {
        limits.artifact_ttl_seconds = count(v, "artifact_ttl_seconds")?;
    }
    if let Some(v) = &l.max_mcp_sessions {
        limits.max_mcp_sessions =
            usize::try_from(count(v, "max_mcp_sessions")?).unwrap_or(usize::MAX);
    }
    if let Some(v) = &l.max_connections {
        limits.max_connections =
            usize::try_from(count(v, "max_connections")?).unwrap_or(usize::MAX);
    }
    if let Some(v) = &l.max_connections_per_peer {
        limits.max_connections_per_peer =
            usize::try_from(count(v, "max_connections_per_peer")?).unwrap_or(usize::MAX);
    }
    if let Some(v) = &l.header_timeout_seconds {
        limits.header_timeout = std::time::Duration::from_secs(count(v, "header_timeout_seconds")?);
    }
    if let Some(v) = &l.body_timeout_seconds {
        limits.body_timeout = std::time::Duration::from_secs(count(v, "body_timeout_seconds")?);
    }
    if limits.max_connections_per_peer > limits.max_connections {
        match &l.max_connections_per_peer {
            // Only a total given: the default per-peer cap follows it.
            None => limits.max_connections_per_peer = limits.max_connections,
            Some(per_peer) => {
                return Err(at.at(
                    yaml::pos(per_peer),
                    format!(
                        "`limits.max_connections_per_peer` ({}) is more than `limits.max_connections` ({}); one peer could take every connection",
                        limits.max_connections_per_peer, limits.max_connections
                    ),
                ))
            }
        }
    }
    Ok(limits)
}

/// `mcp`: the spec of its sandboxes (relative to `base`) and the origins
/// it accepts.
fn mcp_of(raw: Option<&RawMcp>, base: &Path, at: &At<'_>) -> Result<McpConfig, ConfigError> {
    let mut mcp = McpConfig::default();
    if let Some(m) = raw {
        mcp.spec = m.spec.as_ref().map(|p| base.join(&**p));
        for o in &m.allowed_origins {
            let ok = (o.starts_with("http://") || o.starts_with("https://"))
                && !o.ends_with('/')
                && o.split("://")
                    .nth(1)
                    .is_some_and(|h| !h.is_empty() && !h.contains('/'));
            if !ok {
                return Err(at.at(
                    yaml::pos(o),
                    format!("`mcp.allowed_origins`: `{}` is not an origin; write `scheme://host:port`, e.g. `https://app.example.com:443`", &**o),
                ));
            }
            mcp.allowed_origins.push(o.to_string());
        }
    }
    Ok(mcp)
}

/// `sandboxes`: where they are kept (relative to `base`), and for how long.
fn sandboxes_of(
    raw: Option<&RawSandboxes>,
    base: &Path,
    at: &At<'_>,
) -> Result<Sandboxes, ConfigError> {
    let mut sandboxes = Sandboxes::default();
    if let Some(r) = raw {
        let seconds = |v: &Spanned<String>, field: &str| -> Result<u64, ConfigError> {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(at.at(
                    yaml::pos(v),
                    format!(
                        "`sandboxes.{field}`: `{}` is not a whole number of seconds above 0",
                        &**v
                    ),
                )),
            }
        };
        if let Some(d) = &r.state_dir {
            sandboxes.state_dir = Some(base.join(&**d));
        }
        if let Some(v) = &r.idle_timeout_seconds {
            sandboxes.idle_timeout = seconds(v, "idle_timeout_seconds")?;
        }
        if let Some(v) = &r.max_age_seconds {
            sandboxes.max_age = seconds(v, "max_age_seconds")?;
        }
        sandboxes.dispose_on_shutdown = r.dispose_on_shutdown.as_ref().is_some_and(|d| **d);
        if let Some(o) = &r.on_idle {
            sandboxes.on_idle_pause = match o.as_str() {
                "pause" => true,
                "dispose" => false,
                other => {
                    return Err(at.at(
                        yaml::pos(o),
                        format!("`sandboxes.on_idle`: `{other}` is neither `pause` nor `dispose`"),
                    ))
                }
            };
        }
        for w in &r.workspace_roots {
            let root = base.join(&**w).canonicalize().map_err(|e| {
                at.at(
                    yaml::pos(w),
                    format!(
                        "`sandboxes.workspace_roots`: `{}`: {e}; name an existing directory",
                        &**w
                    ),
                )
            })?;
            if let Err(why) = cordon_files::workspace::refuse_system_dir(&root, "a workspace root")
            {
                return Err(at.at(yaml::pos(w), format!("`sandboxes.workspace_roots`: {why}")));
            }
            sandboxes.workspace_roots.push(root);
        }
    }
    Ok(sandboxes)
}

/// `secrets`: exactly one of a directory or a command (an absolute path).
fn secrets_of(
    raw: Option<&RawSecrets>,
    base: &Path,
    at: &At<'_>,
) -> Result<Option<SecretStore>, ConfigError> {
    let secrets = match raw {
        None => None,
        Some(RawSecrets {
            dir: Some(d),
            command: None,
        }) => Some(SecretStore::Dir(base.join(&**d))),
        Some(RawSecrets {
            dir: None,
            command: Some(c),
        }) => {
            let argv: Vec<String> = c.iter().map(|a| a.to_string()).collect();
            match argv.first() {
                Some(p) if Path::new(p).is_absolute() => Some(SecretStore::Command(argv)),
                _ => {
                    return Err(at.at(
                        c.first().map_or((1, 1), yaml::pos),
                        "`secrets.command` must start with the program's absolute path, e.g. `[/usr/local/bin/get-secret]`".into(),
                    ))
                }
            }
        }
        Some(_) => {
            return Err(at.at(
                (1, 1),
                "`secrets` takes exactly one of `dir` (a directory of files) or `command` (a program that prints a secret); secrets never come from the environment".into(),
            ))
        }
    };
    Ok(secrets)
}

/// `backends`: names, each once; none at all is refused.
fn backends_of(
    raw: Option<&Vec<Spanned<String>>>,
    at: &At<'_>,
) -> Result<Option<Vec<String>>, ConfigError> {
    let backends = match raw {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(at.at(
                (1, 1),
                "`backends` is empty: nothing could serve; name backends from `cordon doctor`, or leave the key out for every one".into(),
            ))
        }
        Some(list) => {
            let mut out: Vec<String> = Vec::new();
            for b in list {
                if out.iter().any(|o| o == &**b) {
                    return Err(at.at(yaml::pos(b), format!("backend `{}` is listed twice", &**b)));
                }
                out.push(b.to_string());
            }
            Some(out)
        }
    };
    Ok(backends)
}

/// 64 hexadecimal digits: a token's SHA-256 (`sha256sum` of the token).
fn parse_digest(raw: &str) -> Result<[u8; 32], String> {
    let bad = || {
        format!(
            "`token_sha256` must be 64 hexadecimal digits (the SHA-256 of the token: `printf %s TOKEN | sha256sum`), not `{}`",
            raw.chars().take(80).collect::<String>()
        )
    };
    if raw.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(raw.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(limits: &str) -> Result<ServeConfig, ConfigError> {
        let text = format!(
            "credentials:\n  - name: a\n    token_sha256: {}\n    scope: a\n    identity: {{namespace: a, name: agent}}\nlimits: {limits}\n",
            "0".repeat(64)
        );
        ServeConfig::from_yaml("serve.yaml", &text, Path::new("."))
    }

    #[test]
    fn connection_session_and_timeout_limits_load_and_are_checked() {
        let l = load("{max_mcp_sessions: 3, max_connections: 9, max_connections_per_peer: 2, header_timeout_seconds: 4, body_timeout_seconds: 5}")
            .unwrap_or_else(|e| panic!("{e}"))
            .limits;
        assert_eq!(
            (
                l.max_mcp_sessions,
                l.max_connections,
                l.max_connections_per_peer,
                l.header_timeout,
                l.body_timeout
            ),
            (
                3,
                9,
                2,
                std::time::Duration::from_secs(4),
                std::time::Duration::from_secs(5)
            )
        );
        // A total alone lowers the default per-peer cap with it.
        let l = load("{max_connections: 4}")
            .unwrap_or_else(|e| panic!("{e}"))
            .limits;
        assert_eq!((l.max_connections, l.max_connections_per_peer), (4, 4));
        for (bad, says) in [
            ("{max_mcp_sessions: 0}", "`limits.max_mcp_sessions`: `0`"),
            (
                "{header_timeout_seconds: 0}",
                "`limits.header_timeout_seconds`",
            ),
            (
                "{body_timeout_seconds: soon}",
                "`limits.body_timeout_seconds`",
            ),
            ("{max_connections: -1}", "`limits.max_connections`"),
            (
                "{max_connections: 4, max_connections_per_peer: 5}",
                "one peer could take every connection",
            ),
            ("{max_connexions: 4}", "unknown field"),
        ] {
            let e = load(bad).map(|_| ()).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.starts_with("serve.yaml:"),
                "{bad}: {e}"
            );
        }
    }
}
