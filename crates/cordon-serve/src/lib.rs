//! `cordon serve`: cordon for agent hosts over HTTP, a thin async surface
//! over the host layer (its assembly, router and typed refusals). Every
//! request is authenticated by a bearer token whose SHA-256 digest the
//! configuration holds; the credential decides the identity and scope.
//!
//! Served so far: `/healthz`, `/v1/backends`, and sandboxes (create or get,
//! exec with buffered output, dispose) addressed by the caller's thread and
//! agent dir within its credential's scope; streaming, files, outputs,
//! metrics, limits, replicas and MCP come next (issue 17, docs/serve.md).

pub mod auth;
pub mod config;
pub mod mcp;
pub mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cordon_sandbox::{CallerContext, ErrorKind, ExecRequest, Sandbox, SandboxKey, SandboxSpec};
use serde::Deserialize;
use serde_json::json;

pub use config::{ConfigError, Credential, ServeConfig};

/// What the server answers from: the configuration and what the host
/// assembly built.
pub struct Served {
    pub config: ServeConfig,
    /// The backends the host's router holds, strongest first.
    pub backends: Vec<String>,
    /// The floor every sandbox is held to.
    pub floor: cordon_sandbox::Isolation,
    /// The host assembly's router: every sandbox is acquired through it.
    pub router: cordon_sandbox::Router,
    /// The sandboxes this server made, by key (scope from the credential).
    pub live: Mutex<BTreeMap<SandboxKey, Arc<dyn Sandbox>>>,
    /// Creates in flight, by scope: counted against the sandbox cap with
    /// the live ones, so two racing creates cannot both pass it.
    pending: Mutex<BTreeMap<String, usize>>,
    /// Each credential's request budget: tokens left, and when counted.
    buckets: Mutex<BTreeMap<String, (f64, std::time::Instant)>>,
    /// Where collected outputs land, one directory per collection.
    artifacts: PathBuf,
    /// Landed files by opaque handle: the scope that collected it, and
    /// where it lies. A handle is for the host's code, never a model's.
    landed: Mutex<BTreeMap<String, (String, PathBuf)>>,
    /// Counters for `/metrics`, by scope.
    metrics: Mutex<BTreeMap<String, ScopeMetrics>>,
    /// The spec of every sandbox made through `/mcp`.
    mcp_spec: SandboxSpec,
    /// Where the router's kept sandboxes are recorded (shared by
    /// replicas); `None`: sandboxes live and die with this server.
    state: Option<cordon_host::state::StateDir>,
    /// The egress proxies' audit log, followed for `/metrics`.
    egress_audit: Option<PathBuf>,
    /// HTTPS (and mutual TLS); `None`: plain HTTP.
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// Every registered backend as this machine's probe found it at start
    /// (what `cordon doctor` shows).
    catalogue: Vec<serde_json::Value>,
}

/// What `/metrics` counts for one scope.
#[derive(Default)]
struct ScopeMetrics {
    /// Sandboxes created, by rung.
    created: BTreeMap<&'static str, u64>,
    /// Execs answered, and how their latency fell into the buckets.
    execs: u64,
    exec_seconds_sum: f64,
    exec_buckets: [u64; EXEC_BUCKETS.len()],
    /// Requests refused, by HTTP status.
    refused: BTreeMap<u16, u64>,
    /// Policy denials, by surface and deciding rule (`file:line`, a
    /// bound's key, or `none` when no allow rule matched).
    denials: BTreeMap<(&'static str, String), u64>,
    /// Bytes the egress proxy carried for this scope's sandboxes (tunnels,
    /// from the audit's `end` lines): up, and down.
    proxy_bytes: (u64, u64),
}

/// Upper bounds (seconds) of the exec latency histogram's buckets.
const EXEC_BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0];

impl Served {
    pub fn new(
        config: ServeConfig,
        backends: Vec<String>,
        floor: cordon_sandbox::Isolation,
        router: cordon_sandbox::Router,
        mcp_spec: SandboxSpec,
    ) -> Served {
        Served {
            mcp_spec,
            state: None,
            egress_audit: None,
            tls: None,
            catalogue: Vec::new(),
            config,
            backends,
            floor,
            router,
            live: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(BTreeMap::new()),
            buckets: Mutex::new(BTreeMap::new()),
            artifacts: std::env::temp_dir()
                .join(format!("cordon-serve-{}-artifacts", std::process::id())),
            landed: Mutex::new(BTreeMap::new()),
            metrics: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sandboxes are kept (by the router's kept backends) and recorded in
    /// `state`: found there by any replica, and by this server restarted.
    pub fn kept_in(mut self, state: cordon_host::state::StateDir) -> Served {
        self.state = Some(state);
        self
    }

    /// What `/v1/backends` says of every registered backend (doctor's rows).
    pub fn with_catalogue(mut self, rows: Vec<serde_json::Value>) -> Served {
        self.catalogue = rows;
        self
    }

    /// Serves HTTPS with `acceptor` (see [`tls::acceptor`]).
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Served {
        self.tls = Some(acceptor);
        self
    }

    /// Follows the egress proxies' audit log (from its end as the server
    /// starts) for `/metrics`: denials by rule and bytes carried, by scope.
    pub fn following_egress_audit(mut self, path: PathBuf) -> Served {
        self.egress_audit = Some(path);
        self
    }

    /// Counts one egress audit line under the scope of the sandbox it
    /// names (`scope/thread/agent_dir`; the longest credential scope that
    /// prefixes it, so a line names no tenant the configuration lacks).
    fn audit_line(&self, line: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return;
        };
        let Some(sandbox) = v["sandbox"].as_str() else {
            return;
        };
        let Some(scope) = self
            .config
            .credentials
            .iter()
            .map(|c| c.scope.as_str())
            .filter(|sc| sandbox.strip_prefix(sc).is_some_and(|r| r.starts_with('/')))
            .max_by_key(|sc| sc.len())
        else {
            return;
        };
        match v["verdict"].as_str() {
            Some("deny") => {
                let rules = v["rules"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| r.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                self.denied(scope, "egress", rules);
            }
            Some("end") => {
                let (up, down) = (v["bytes_up"].as_u64(), v["bytes_down"].as_u64());
                if up.is_some() || down.is_some() {
                    self.count(scope, |m| {
                        m.proxy_bytes.0 += up.unwrap_or(0);
                        m.proxy_bytes.1 += down.unwrap_or(0);
                    });
                }
            }
            _ => {}
        }
    }

    fn count(&self, scope: &str, f: impl FnOnce(&mut ScopeMetrics)) {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        f(m.entry(scope.to_string()).or_default());
    }

    /// Counts a policy denial on `surface` by `rules` (none: no allow rule
    /// matched).
    fn denied(&self, scope: &str, surface: &'static str, rules: Vec<String>) {
        let rules = if rules.is_empty() {
            vec!["none".to_string()]
        } else {
            rules
        };
        self.count(scope, |m| {
            for r in rules {
                *m.denials.entry((surface, r)).or_default() += 1;
            }
        });
    }

    /// Counts an exec refused by the compute guard.
    fn exec_refused(&self, scope: &str, e: &cordon_sandbox::SandboxError) {
        if let Some(rules) = e.denied_rules() {
            self.denied(scope, "compute", rules);
        }
    }

    fn exec_took(&self, scope: &str, seconds: f64) {
        self.count(scope, |m| {
            m.execs += 1;
            m.exec_seconds_sum += seconds;
            for (i, le) in EXEC_BUCKETS.iter().enumerate() {
                if seconds <= *le {
                    m.exec_buckets[i] += 1;
                }
            }
        });
    }

    /// Takes one request from `cred`'s budget (a token bucket refilled at
    /// `requests_per_second`, holding twice that): `false` when empty.
    fn take_token(&self, cred: &Credential) -> bool {
        let rate = f64::from(self.config.limits.requests_per_second);
        let burst = rate * 2.0;
        let now = std::time::Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = buckets.entry(cred.name.clone()).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The API's OpenAPI document, served at `/openapi.json`; a test holds
/// every path in it to the running server.
pub const OPENAPI: &str = include_str!("../openapi/openapi.json");

/// The routes.
pub fn app(state: Arc<Served>) -> Router {
    let max_body = state.config.limits.max_request_bytes;
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/openapi.json",
            get(|| async { ([("content-type", "application/json")], OPENAPI) }),
        )
        .route("/v1/backends", get(backends))
        .route("/v1/sandboxes", post(create))
        .route("/v1/sandboxes/exec", post(exec))
        .route("/v1/sandboxes/dispose", post(dispose))
        .route("/v1/sandboxes/files", post(write_file))
        .route("/v1/threads/dispose", post(dispose_thread))
        .route("/v1/sandboxes/outputs", post(outputs))
        .route("/v1/artifacts/{handle}", get(artifact))
        .route("/metrics", get(metrics))
        .merge(mcp_routes(state.clone()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_refusals,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(state)
}

/// `/mcp`: the MCP server over streamable HTTP. Each request must carry a
/// credential (checked here, before the protocol is read, and again when a
/// tool resolves its sandbox) and no `Origin` but a configured one.
fn mcp_routes(state: Arc<Served>) -> Router<Arc<Served>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let mut hosts = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    hosts.push(state.config.listen.ip().to_string());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(state.config.mcp.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(state.config.limits.max_request_bytes);
    config.sse_keep_alive = Some(Duration::from_secs(15));
    let host = Arc::new(HttpMcp {
        served: state.clone(),
    });
    let service = StreamableHttpService::new(
        move || Ok(mcp::CordonMcp::new(host.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(state, mcp_credential))
}

/// `/mcp` answers only a request with a credential (within its budget).
async fn mcp_credential(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match who(&s, req.headers()) {
        Ok(_) => next.run(req).await,
        Err(r) => *r,
    }
}

/// The header a host binds an MCP connection's thread with (default
/// `mcp`: one sandbox per credential), and its agent dir's.
pub const MCP_THREAD_HEADER: &str = "cordon-thread";
pub const MCP_AGENT_DIR_HEADER: &str = "cordon-agent-dir";

/// MCP over HTTP: each request's sandbox is the one its own credential and
/// `cordon-thread`/`cordon-agent-dir` headers name; nothing a tool call
/// carries reaches the key.
struct HttpMcp {
    served: Arc<Served>,
}

impl HttpMcp {
    fn bound(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<(Credential, Address), String> {
        let parts = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .ok_or("this request came without its HTTP headers; it is not served")?;
        let header = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let cred = auth::authenticate(&self.served.config.credentials, header)
            .cloned()
            .ok_or("this request carries no credential this server holds")?;
        let named = |h: &str, default: &str| -> Result<String, String> {
            match parts.headers.get(h) {
                None => Ok(default.to_string()),
                Some(v) => v
                    .to_str()
                    .map(str::to_string)
                    .map_err(|_| format!("the `{h}` header is not text")),
            }
        };
        Ok((
            cred,
            Address {
                thread: named(MCP_THREAD_HEADER, "mcp")?,
                agent_dir: named(MCP_AGENT_DIR_HEADER, "default")?,
            },
        ))
    }
}

impl mcp::McpHost for HttpMcp {
    fn spec(&self) -> &SandboxSpec {
        &self.served.mcp_spec
    }

    fn sandbox(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<Arc<dyn Sandbox>, String> {
        let (cred, at) = self.bound(ctx)?;
        // Held already (made by an earlier call): no acquire per tool call.
        if let Ok(c) = caller(&cred, &at).resolve() {
            let held = self
                .served
                .live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&c.key)
                .cloned();
            if let Some(h) = held {
                return Ok(h);
            }
        }
        self.served
            .get_or_create(&cred, &at, &self.served.mcp_spec)
            .map(|m| m.sandbox)
            .map_err(|r| r.message)
    }

    fn lands(&self) -> bool {
        true
    }

    fn land(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<String>, String> {
        let (cred, _) = self.bound(ctx)?;
        let landed = self
            .served
            .land_outputs(&cred, sandbox)
            .map_err(|r| r.message)?;
        Ok(landed.into_iter().map(|(display, _)| display).collect())
    }

    fn exec_failed(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        error: &cordon_sandbox::SandboxError,
    ) {
        if let Ok((cred, at)) = self.bound(ctx) {
            self.served.exec_refused(&cred.scope, error);
            // A sandbox gone under this server (disposed at a replica, its
            // keeper idled out) is looked up afresh by the next call.
            if error.denied_rules().is_none() {
                self.served.forget(&cred, &at);
            }
        }
    }
}

/// `401` with a body that says what to send; the same for a missing and a
/// wrong token.
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("www-authenticate", "Bearer")],
        Json(json!({"error": "send `Authorization: Bearer TOKEN` with a token this server's configuration holds the SHA-256 of"})),
    )
        .into_response()
}

async fn backends(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let available: Vec<serde_json::Value> = s
        .catalogue
        .iter()
        .map(|row| {
            let mut row = row.clone();
            let used = row["name"]
                .as_str()
                .is_some_and(|n| s.backends.iter().any(|b| b == n));
            row["used"] = used.into();
            row
        })
        .collect();
    Json(json!({
        "backends": s.backends,
        "available": available,
        "floor": s.floor.as_str(),
        "identity": {"namespace": cred.identity.namespace, "name": cred.identity.name},
        "scope": cred.scope,
    }))
    .into_response()
}

/// How long running requests (execs among them) may go on after the
/// shutdown signal before the server stops anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Binds the configured address and serves until `shutdown` resolves;
/// then stops accepting, lets running requests finish for up to
/// [`SHUTDOWN_GRACE`], and disposes of every sandbox it made.
/// `on_bound` is told the address actually bound (port 0 picks one).
pub async fn serve(
    state: Arc<Served>,
    on_bound: impl FnOnce(std::net::SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(state.config.listen).await?;
    if let Some(path) = state.egress_audit.clone() {
        tokio::spawn(follow_audit(state.clone(), path));
    }
    on_bound(listener.local_addr()?);
    if let Some(acceptor) = state.tls.clone() {
        serve_tls(state.clone(), listener, acceptor, shutdown).await;
        return finish(state).await;
    }
    let (signalled, told) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = signalled.send(());
    };
    let server = axum::serve(listener, app(state.clone())).with_graceful_shutdown(signal);
    let served = tokio::select! {
        r = server => r,
        () = async {
            let _ = told.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => Ok(()),
    };
    finish(state).await?;
    served
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// The HTTPS listener: each connection's handshake (a client certificate
/// required when the acceptor was built with a client CA), then HTTP/1.1
/// with the certificate's fingerprint in every request's extensions. On
/// `shutdown`: stop accepting, let connections finish their requests for
/// up to [`SHUTDOWN_GRACE`].
async fn serve_tls(
    state: Arc<Served>,
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let routes = app(state);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let (acceptor, routes, watcher) = (acceptor.clone(), routes.clone(), graceful.watcher());
                tokio::spawn(async move {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let peer = tls::PeerCert(
                        stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(tls::fingerprint),
                    );
                    let service = hyper_util::service::TowerToHyperService::new(
                        routes.layer(axum::Extension(peer)),
                    );
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
    }
}

/// After serving: dispose of what the configuration says, remove landed
/// artifacts.
async fn finish(state: Arc<Served>) -> std::io::Result<()> {
    // Kept sandboxes are left to the replicas, a restarted server, their
    // idle timeout or `cordon sandbox gc`, unless the configuration says.
    if state.state.is_none() || state.config.sandboxes.dispose_on_shutdown {
        let reclaim = state.clone();
        let _ = tokio::task::spawn_blocking(move || reclaim.dispose_all()).await;
    }
    // What was landed and not fetched goes with the server.
    let _ = std::fs::remove_dir_all(&state.artifacts);
    Ok(())
}

/// How often the egress audit log is read for new lines.
const AUDIT_POLL: Duration = Duration::from_millis(500);
/// The most read of it at once, and the longest line kept.
const AUDIT_CHUNK: u64 = 1 << 20;

/// Reads the egress audit log's new lines as they are appended (from its
/// end when the server starts; from its start again when it is truncated
/// or replaced), for `/metrics`.
async fn follow_audit(s: Arc<Served>, path: PathBuf) {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
    let mut offset = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
    let mut partial: Vec<u8> = Vec::new();
    loop {
        tokio::time::sleep(AUDIT_POLL).await;
        let Ok(mut f) = tokio::fs::File::open(&path).await else {
            continue;
        };
        let len = f.metadata().await.map_or(0, |m| m.len());
        if len < offset {
            offset = 0;
            partial.clear();
        }
        if len == offset {
            continue;
        }
        if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let Ok(n) = (&mut f).take(AUDIT_CHUNK).read_to_end(&mut buf).await else {
            continue;
        };
        offset += n as u64;
        partial.extend_from_slice(&buf);
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            s.audit_line(&line);
        }
        if partial.len() as u64 > AUDIT_CHUNK {
            partial.clear();
        }
    }
}

impl Served {
    /// Disposes of every sandbox this server made (at shutdown: they
    /// live and die with it until replicas share a state directory).
    fn dispose_all(&self) {
        let held: Vec<(SandboxKey, Arc<dyn Sandbox>)> = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *live).into_iter().collect()
        };
        let threads: std::collections::BTreeSet<(String, String)> = held
            .iter()
            .map(|(k, _)| (k.scope().to_string(), k.thread_id().to_string()))
            .collect();
        drop(held);
        for (scope, thread) in threads {
            self.router.dispose_scope(&scope, &thread);
        }
    }
}

/// The part of a sandbox's key a request names: its thread and agent dir.
/// The scope and the identity are the credential's.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Address {
    thread: String,
    #[serde(default = "default_agent_dir")]
    agent_dir: String,
}

fn default_agent_dir() -> String {
    "default".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(flatten)]
    at: Address,
    /// A spec as YAML text (docs/spec.md); default: an offline `run` spec
    /// on the host image.
    #[serde(default)]
    spec: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecBody {
    #[serde(flatten)]
    at: Address,
    argv: Vec<String>,
    #[serde(default)]
    stdin: String,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    /// Answer NDJSON events as the command writes (`stdout`/`stderr`
    /// chunks, then `exit`) instead of one document at its end. A client
    /// that hangs up kills the command.
    #[serde(default)]
    stream: bool,
}

/// The largest output kept of each stream of a buffered exec.
const MAX_OUTPUT_BYTES: u64 = 1 << 20;

fn caller(cred: &Credential, at: &Address) -> CallerContext {
    let (scope, thread, agent, id) = (
        cred.scope.clone(),
        at.thread.clone(),
        at.agent_dir.clone(),
        cred.identity.clone(),
    );
    CallerContext::new(
        move || scope.clone(),
        move || thread.clone(),
        move || agent.clone(),
        move || id.clone(),
    )
}

/// An error as the API answers it: a status from its kind and a message
/// that says what to do.
fn refused(kind: ErrorKind, message: impl std::fmt::Display) -> Response {
    Refusal::of(kind, message).into_response()
}

fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Refused => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Failed => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A body that could not be read: too large (`413`, with the limit), or
/// not JSON, or with a field the endpoint does not take (`400`).
fn bad_body(e: &axum::extract::rejection::JsonRejection) -> Response {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            Json(json!({"error": "the request body is larger than this server's `limits.max_request_bytes`; send less (a file in parts, or fewer bytes)"})),
        )
            .into_response();
    }
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": e.body_text()})),
    )
        .into_response()
}

/// A JSON body as axum hands it to a handler.
type Body<T> = Result<Json<T>, axum::extract::rejection::JsonRejection>;

/// The request's credential (within its budget) and its body, or the
/// refusal to answer: every `/v1` handler's first step.
fn authed<T>(
    s: &Served,
    headers: &HeaderMap,
    body: Body<T>,
) -> Result<(Credential, T), Box<Response>> {
    let cred = who(s, headers)?;
    match body {
        Ok(Json(b)) => Ok((cred, b)),
        Err(e) => Err(Box::new(bad_body(&e))),
    }
}

/// The caller's live sandbox at `at` (its scope, that thread and agent
/// dir), or the answer for one it has not made.
///
/// A sandbox another replica made, or this server made before a restart,
/// is found in the shared state directory and attached again (through the
/// router, which checks that it was made for this identity and policy).
async fn live_sandbox(
    s: &Arc<Served>,
    cred: &Credential,
    at: &Address,
) -> Result<Arc<dyn Sandbox>, Box<Response>> {
    let key = caller(cred, at)
        .resolve()
        .map_err(|e| Box::new(refused(ErrorKind::Invalid, e)))?
        .key;
    let held = s
        .live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if let Some(h) = held {
        // A kept sandbox whose record is gone was disposed of (by a
        // replica, its idle timeout): not handed out again.
        let gone = s
            .state
            .as_ref()
            .is_some_and(|st| !st.record_path(h.id()).exists());
        if !gone {
            return Ok(h);
        }
        s.forget(cred, at);
    }
    let (served, cred, at) = (s.clone(), cred.clone(), at.clone());
    let found = tokio::task::spawn_blocking(move || served.attach_recorded(&cred, &at)).await;
    match found {
        Ok(Ok(Some(sandbox))) => Ok(sandbox),
        Ok(Ok(None)) => Err(Box::new(no_such_sandbox())),
        Ok(Err(r)) => Err(Box::new(r.into_response())),
        Err(e) => Err(Box::new(refused(ErrorKind::Failed, e))),
    }
}

impl Served {
    /// The recorded sandbox of `cred`'s scope at `at`, attached and held;
    /// `None` when the state directory has none (or there is none). Blocks.
    fn attach_recorded(
        &self,
        cred: &Credential,
        at: &Address,
    ) -> Result<Option<Arc<dyn Sandbox>>, Refusal> {
        let Some(state) = &self.state else {
            return Ok(None);
        };
        let key = cordon_host::state::KeyRecord {
            scope: cred.scope.clone(),
            thread: at.thread.clone(),
            agent_dir: at.agent_dir.clone(),
        };
        let rec = match state.find(&key) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Refusal::of(ErrorKind::Failed, e)),
        };
        if rec.orphaned_or_expired(cordon_host::state::now()) {
            return Ok(None);
        }
        self.get_or_create(cred, at, &rec.provenance.spec)
            .map(|m| Some(m.sandbox))
    }

    /// Forgets a held sandbox that failed (its keeper gone, say): the next
    /// request finds it again, or finds it gone.
    fn forget(&self, cred: &Credential, at: &Address) {
        if let Ok(c) = caller(cred, at).resolve() {
            self.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&c.key);
        }
    }

    /// How many sandboxes `scope` holds: every replica's, from the state
    /// directory, when there is one; else this server's.
    /// A state directory that cannot be listed is a refusal, not a count
    /// of this server's own: the cap would fail open across replicas.
    fn held(&self, scope: &str) -> Result<usize, Refusal> {
        if let Some(state) = &self.state {
            let (records, _) = state.list().map_err(|e| {
                Refusal::of(
                    ErrorKind::Unavailable,
                    format!("cannot count this credential's sandboxes: {e}"),
                )
            })?;
            let now = cordon_host::state::now();
            return Ok(records
                .iter()
                .filter(|r| r.key.scope == scope && !r.orphaned_or_expired(now))
                .count());
        }
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        Ok(live.keys().filter(|k| k.scope() == scope).count())
    }
}

/// The one answer for a sandbox this credential has not made: it does not
/// say whether another credential's exists.
fn no_such_sandbox() -> Response {
    refused(
        ErrorKind::NotFound,
        "no sandbox for this thread and agent dir; create it with POST /v1/sandboxes",
    )
}

/// The request's credential, within its budget: else the `401` or `429`
/// to answer.
fn who(s: &Served, headers: &HeaderMap) -> Result<Credential, Box<Response>> {
    let header = headers.get("authorization").and_then(|v| v.to_str().ok());
    let cred = auth::authenticate(&s.config.credentials, header)
        .cloned()
        .ok_or_else(|| Box::new(unauthorized()))?;
    if !s.take_token(&cred) {
        return Err(Box::new(
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                Json(json!({"error": format!(
                    "more than {} requests a second from this credential; wait and retry",
                    s.config.limits.requests_per_second
                )})),
            )
                .into_response(),
        ));
    }
    Ok(cred)
}

async fn create(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<CreateBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let spec = match &body.spec {
        Some(text) => SandboxSpec::from_yaml("spec", text),
        None => SandboxSpec::new("run", "host"),
    };
    let spec = match spec {
        Ok(s) => s,
        Err(e) => return refused(ErrorKind::Invalid, e),
    };
    let served = s.clone();
    let made = tokio::task::spawn_blocking(move || -> Response {
        match served.get_or_create(&cred, &body.at, &spec) {
            Ok(made) => Json(json!({
                "handle": made.sandbox.id(),
                "backend": made.backend,
                "rung": made.rung,
                "warnings": made.warnings,
                "thread": body.at.thread,
                "agent_dir": body.at.agent_dir,
            }))
            .into_response(),
            Err(r) => r.into_response(),
        }
    })
    .await;
    made.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

/// A request the server answers with an error: its status and a message
/// that says what to do.
pub(crate) struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn of(kind: ErrorKind, message: impl std::fmt::Display) -> Refusal {
        Refusal {
            status: status_of(kind),
            message: message.to_string(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"error": self.message}))).into_response()
    }
}

/// A sandbox got or made for a request.
pub(crate) struct Made {
    sandbox: Arc<dyn Sandbox>,
    backend: String,
    rung: &'static str,
    /// What the host should know (a backend that confines more than the
    /// spec asks, say).
    warnings: Vec<String>,
}

impl Served {
    /// The sandbox of `cred`'s scope at `at`, made with `spec` when it does
    /// not exist (counted against the credential's cap, with the creates in
    /// flight); one made with another spec is refused by the router. Blocks.
    pub(crate) fn get_or_create(
        &self,
        cred: &Credential,
        at: &Address,
        spec: &SandboxSpec,
    ) -> Result<Made, Refusal> {
        let caller = caller(cred, at);
        let key = caller
            .resolve()
            .map_err(|e| Refusal::of(ErrorKind::Invalid, e))?
            .key;
        // A new sandbox counts against the credential's cap, with the
        // creates in flight; getting an existing one does not.
        let exists = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&key)
            || self.state.as_ref().is_some_and(|st| {
                matches!(st.find(&cordon_host::state::KeyRecord {
                    scope: cred.scope.clone(),
                    thread: at.thread.clone(),
                    agent_dir: at.agent_dir.clone(),
                }), Ok(Some(r)) if !r.orphaned_or_expired(cordon_host::state::now()))
            });
        let reserved = {
            if exists {
                false
            } else {
                // Held across the count, so two creates cannot both pass
                // the cap (lock order: `pending`, then `live`).
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let held = self.held(&cred.scope)? + pending.get(&cred.scope).copied().unwrap_or(0);
                let cap = self.config.limits.max_sandboxes;
                if held >= cap {
                    return Err(Refusal {
                        status: StatusCode::TOO_MANY_REQUESTS,
                        message: format!(
                            "this credential holds {held} live sandboxes, its limit; dispose one (POST /v1/sandboxes/dispose) first"
                        ),
                    });
                }
                *pending.entry(cred.scope.clone()).or_default() += 1;
                true
            }
        };
        let acquired = self.router.acquire(&caller, spec);
        if reserved {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = pending.get_mut(&cred.scope) {
                *n = n.saturating_sub(1);
            }
        }
        let sandbox = acquired.map_err(|e| {
            if let Some((surface, rules)) = e.denial() {
                self.denied(&cred.scope, surface, rules);
            }
            Refusal::of(e.kind(), &e)
        })?;
        // Held before anything else can fail: a sandbox acquired is always
        // one the server can find again (and dispose of).
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, sandbox.clone());
        // The backend that just served the acquire (the same selection).
        let (backend, rung) = self
            .router
            .selected(spec)
            .map(|(name, rung)| (name.to_string(), rung.as_str()))
            .map_err(|e| Refusal::of(e.kind(), &e))?;
        if reserved {
            self.count(&cred.scope, |m| *m.created.entry(rung).or_default() += 1);
        }
        let warnings = self
            .router
            .ensure_can_serve(spec)
            .map(|w| w.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        Ok(Made {
            sandbox,
            backend,
            rung,
            warnings,
        })
    }
}

async fn exec(State(s): State<Arc<Served>>, headers: HeaderMap, body: Body<ExecBody>) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let sandbox = match live_sandbox(&s, &cred, &body.at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let req = ExecRequest {
        argv: body.argv,
        env: Default::default(),
        stdin: body.stdin.into_bytes(),
        timeout: Duration::from_secs(body.timeout_seconds.unwrap_or(3600)),
        max_output_bytes: MAX_OUTPUT_BYTES,
    };
    if body.stream {
        return streamed(&s, &cred, sandbox, req).await;
    }
    let started = std::time::Instant::now();
    let ran = tokio::task::spawn_blocking(move || sandbox.exec(&req)).await;
    s.exec_took(&cred.scope, started.elapsed().as_secs_f64());
    let out = match ran {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            s.exec_refused(&cred.scope, &e);
            // A kept sandbox whose keeper went (idle timeout, disposed by
            // a replica) is looked up afresh next time.
            s.forget(&cred, &body.at);
            return refused(e.kind(), &e);
        }
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let (status, killed_by) = cordon_sandbox::exec_json::status(out.status);
    Json(json!({
        "status": status,
        "killed_by": killed_by,
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
        "stdout_truncated": out.stdout_truncated,
        "stderr_truncated": out.stderr_truncated,
    }))
    .into_response()
}

async fn dispose(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    let (cred, at) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || -> Response {
        let caller = caller(&cred, &at);
        let key = match caller.resolve() {
            Ok(c) => c.key,
            Err(e) => return refused(ErrorKind::Invalid, e),
        };
        let held = served
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        drop(held);
        match served.router.dispose(&caller) {
            Ok(n) => Json(json!({"disposed": n})).into_response(),
            Err(e) => refused(ErrorKind::Invalid, e),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

/// A streamed exec: NDJSON lines as the command writes, `exit` last. The
/// command is driven on a blocking thread; when the client goes away (the
/// body is dropped) the exec is killed at once, not at its next output.
async fn streamed(
    s: &Served,
    cred: &Credential,
    sandbox: Arc<dyn Sandbox>,
    req: ExecRequest,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(cordon_sandbox::exec::EVENTS_IN_FLIGHT);
    // Starting an exec blocks (a keeper's round trip, an init's fork): not
    // on the async runtime's threads.
    let started = {
        let req = req.clone();
        tokio::task::spawn_blocking(move || {
            sandbox.start_exec(&req, cordon_sandbox::Attach::streamed_stdin())
        })
        .await
    };
    let mut handle = match started {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            s.exec_refused(&cred.scope, &e);
            return refused(e.kind(), &e);
        }
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Dropped with the response body: at its end, or when the client hangs
    // up, whichever comes first; in the second case the exec is killed at
    // once. (It holds no sender: the body ends when the exec's thread does.)
    let guard = KillUnlessDone {
        killer: handle.killer(),
        done: done.clone(),
    };
    let stdin = req.stdin;
    tokio::task::spawn_blocking(move || {
        if let Some(mut input) = handle.take_stdin() {
            use std::io::Write as _;
            let _ = input.write_all(&stdin);
        }
        while let Some(ev) = handle.next_event() {
            let line = match ev {
                cordon_sandbox::ExecEvent::Output(stream, bytes) => {
                    format!(
                        "{}\n",
                        cordon_sandbox::exec_json::output_event(stream, &bytes)
                    )
                }
                cordon_sandbox::ExecEvent::Exited(Ok(end)) => {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    let (status, killed_by) = cordon_sandbox::exec_json::status(end.status);
                    format!(
                        "{}\n",
                        json!({
                            "event": "exit",
                            "status": status,
                            "killed_by": killed_by,
                            "stdout_truncated": end.stdout_truncated,
                            "stderr_truncated": end.stderr_truncated,
                        })
                    )
                }
                cordon_sandbox::ExecEvent::Exited(Err(e)) => {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    format!("{}\n", json!({"event": "error", "error": e.to_string()}))
                }
            };
            if tx.blocking_send(line).is_err() {
                break; // the client went away; dropping the handle kills it
            }
        }
    });
    let body = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(line), (rx, guard)))
    });
    (
        [("content-type", "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBody {
    #[serde(flatten)]
    at: Address,
    /// Inside the sandbox; a relative path is in its work dir.
    path: String,
    content_base64: String,
    #[serde(default = "default_mode")]
    mode: u32,
}

fn default_mode() -> u32 {
    0o644
}

/// Writes one file into a sandbox (files in), through the backend's
/// confined write path; the request size limit bounds it.
async fn write_file(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<FileBody>,
) -> Response {
    use base64::Engine as _;
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let bytes = match base64::engine::general_purpose::STANDARD.decode(&body.content_base64) {
        Ok(b) => b,
        Err(e) => return refused(ErrorKind::Invalid, format!("`content_base64`: {e}")),
    };
    if body.mode & !0o777 != 0 {
        return refused(
            ErrorKind::Invalid,
            "`mode` takes permission bits only (at most 0o777, 511)",
        );
    }
    let sandbox = match live_sandbox(&s, &cred, &body.at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let path = if body.path.starts_with('/') {
        body.path
    } else {
        format!("{}/{}", sandbox.provenance().spec.work_dir(), body.path)
    };
    let n = bytes.len();
    let mode = body.mode;
    let shown = path.clone();
    let wrote = tokio::task::spawn_blocking(move || sandbox.write_file(&path, &bytes, mode)).await;
    match wrote {
        Ok(Ok(())) => Json(json!({"path": shown, "bytes": n})).into_response(),
        Ok(Err(e)) => refused(e.kind(), &e),
        Err(e) => refused(ErrorKind::Failed, e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadBody {
    thread: String,
}

/// Disposes of every sandbox of the credential's scope and one thread
/// (each agent dir's): the count.
async fn dispose_thread(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ThreadBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if body.thread.is_empty() {
        return refused(ErrorKind::Invalid, "`thread` is empty");
    }
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || {
        let held: Vec<_> = {
            let mut live = served.live.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<SandboxKey> = live
                .keys()
                .filter(|k| k.scope() == cred.scope && k.thread_id() == body.thread)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| live.remove(k)).collect()
        };
        drop(held);
        served.router.dispose_scope(&cred.scope, &body.thread)
    })
    .await;
    match done {
        Ok(n) => Json(json!({"disposed": n})).into_response(),
        Err(e) => refused(ErrorKind::Failed, e),
    }
}

/// 128 random bits as hex: an artifact's handle.
fn random_handle() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Collects the caller's sandbox's declared outputs (files out) through a
/// confined sink into a directory of the server's own: each landed file's
/// `display` line (what a model may be shown) and a handle to fetch it
/// with (`GET /v1/artifacts/HANDLE`, the same credential's scope only).
async fn outputs(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    let (cred, at) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let sandbox = match live_sandbox(&s, &cred, &at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || -> Response {
        match served.land_outputs(&cred, &*sandbox) {
            Ok(landed) => {
                let landed: Vec<_> = landed
                    .into_iter()
                    .map(|(display, handle)| json!({"display": display, "handle": handle}))
                    .collect();
                Json(json!({"landed": landed})).into_response()
            }
            Err(r) => r.into_response(),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

impl Served {
    /// Collects `sandbox`'s declared outputs through a confined sink into a
    /// directory of the server's own, each under a fresh handle only
    /// `cred`'s scope can fetch: (display line, handle) per landed file.
    /// Blocks.
    pub(crate) fn land_outputs(
        &self,
        cred: &Credential,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<(String, String)>, Refusal> {
        let spec = sandbox.provenance().spec.clone();
        if spec.declared_outputs().is_empty() {
            return Err(Refusal::of(
                ErrorKind::Invalid,
                "the sandbox's spec declares no outputs; create it with a spec naming `declared_outputs` and `files_out`",
            ));
        }
        let failed = |e: String| Refusal::of(ErrorKind::Failed, e);
        let dir = self
            .artifacts
            .join(random_handle().map_err(|e| failed(e.to_string()))?);
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("the artifacts directory: {e}")))?;
        let sink = cordon_files::FsSink::new(&dir).map_err(|e| failed(e.to_string()))?;
        let got = cordon_sandbox::collect_outputs(sandbox, &spec, Some(&sink))
            .map_err(|e| failed(e.to_string()))?;
        let mut landed = Vec::new();
        let mut table = self.landed.lock().unwrap_or_else(|p| p.into_inner());
        for a in &got.landed {
            let handle =
                random_handle().map_err(|_| failed("no randomness for a handle".into()))?;
            table.insert(
                handle.clone(),
                (cred.scope.clone(), PathBuf::from(a.handle.reveal())),
            );
            landed.push((a.display.clone(), handle));
        }
        Ok(landed)
    }
}

/// A landed file's bytes, for the credential whose scope collected it;
/// any other handle, or another scope's, is the same `404`.
async fn artifact(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    axum::extract::Path(handle): axum::extract::Path<String>,
) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let found = s
        .landed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&handle)
        .filter(|(scope, _)| *scope == cred.scope)
        .map(|(_, path)| path.clone());
    let Some(path) = found else {
        return refused(ErrorKind::NotFound, "no artifact by that handle");
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([("content-type", "application/octet-stream")], bytes).into_response(),
        Err(e) => refused(ErrorKind::Failed, format!("the artifact: {e}")),
    }
}

/// Prometheus text: a tenant's credential sees its own scope's series, an
/// operator's sees every scope's (the series name tenants).
async fn metrics(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    use std::fmt::Write as _;
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let m = s.metrics.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    let shown = m
        .iter()
        .filter(|(scope, _)| cred.operator || **scope == cred.scope);
    let _ = writeln!(out, "# TYPE cordon_sandboxes_created_total counter");
    let _ = writeln!(out, "# TYPE cordon_exec_seconds histogram");
    let _ = writeln!(out, "# TYPE cordon_requests_refused_total counter");
    let _ = writeln!(out, "# TYPE cordon_policy_denials_total counter");
    let _ = writeln!(out, "# TYPE cordon_egress_bytes_total counter");
    for (scope, v) in shown {
        let scope = scope.replace(['\\', '"', '\n'], "_");
        for (rung, n) in &v.created {
            let _ = writeln!(
                out,
                "cordon_sandboxes_created_total{{scope=\"{scope}\",rung=\"{rung}\"}} {n}"
            );
        }
        for (i, le) in EXEC_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "cordon_exec_seconds_bucket{{scope=\"{scope}\",le=\"{le}\"}} {}",
                v.exec_buckets[i]
            );
        }
        let _ = writeln!(
            out,
            "cordon_exec_seconds_bucket{{scope=\"{scope}\",le=\"+Inf\"}} {}",
            v.execs
        );
        let _ = writeln!(
            out,
            "cordon_exec_seconds_sum{{scope=\"{scope}\"}} {}",
            v.exec_seconds_sum
        );
        let _ = writeln!(
            out,
            "cordon_exec_seconds_count{{scope=\"{scope}\"}} {}",
            v.execs
        );
        for (status, n) in &v.refused {
            let _ = writeln!(
                out,
                "cordon_requests_refused_total{{scope=\"{scope}\",status=\"{status}\"}} {n}"
            );
        }
        for ((surface, rule), n) in &v.denials {
            let rule = rule.replace(['\\', '"', '\n'], "_");
            let _ = writeln!(
                out,
                "cordon_policy_denials_total{{scope=\"{scope}\",surface=\"{surface}\",rule=\"{rule}\"}} {n}"
            );
        }
        let (up, down) = v.proxy_bytes;
        if up + down > 0 {
            let _ = writeln!(
                out,
                "cordon_egress_bytes_total{{scope=\"{scope}\",direction=\"up\"}} {up}"
            );
            let _ = writeln!(
                out,
                "cordon_egress_bytes_total{{scope=\"{scope}\",direction=\"down\"}} {down}"
            );
        }
    }
    ([("content-type", "text/plain; version=0.0.4")], out).into_response()
}

/// Counts each refused request (4xx, 5xx) under the scope of the credential
/// it presented, for `/metrics`; a request without a valid one is counted
/// nowhere (it names no tenant).
async fn count_refusals(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let cred = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| auth::authenticate(&s.config.credentials, Some(h)));
    // A token bound to a client certificate is good only over a mutual-TLS
    // connection that presented that very certificate.
    if let Some(bound) = cred.and_then(|c| c.client_cert_sha256) {
        let presented = req.extensions().get::<tls::PeerCert>().and_then(|p| p.0);
        let same = presented
            .is_some_and(|p| bool::from(subtle::ConstantTimeEq::ct_eq(&p[..], &bound[..])));
        if !same {
            return unauthorized();
        }
    }
    let scope = cred.map(|c| c.scope.clone());
    let response = next.run(req).await;
    let status = response.status().as_u16();
    if let (Some(scope), true) = (scope, status >= 400) {
        s.count(&scope, |m| *m.refused.entry(status).or_default() += 1);
    }
    response
}

/// Kills an exec when dropped before it ended.
struct KillUnlessDone {
    killer: cordon_sandbox::Killer,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for KillUnlessDone {
    fn drop(&mut self) {
        if !self.done.load(std::sync::atomic::Ordering::SeqCst) {
            self.killer.kill();
        }
    }
}
