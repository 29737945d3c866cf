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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cordon_sandbox::{
    CallerContext, ErrorKind, ExecRequest, ExitStatus, Sandbox, SandboxKey, SandboxSpec,
};
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
}

impl Served {
    pub fn new(
        config: ServeConfig,
        backends: Vec<String>,
        floor: cordon_sandbox::Isolation,
        router: cordon_sandbox::Router,
    ) -> Served {
        Served {
            config,
            backends,
            floor,
            router,
            live: Mutex::new(BTreeMap::new()),
        }
    }
}

/// The routes.
pub fn app(state: Arc<Served>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/backends", get(backends))
        .route("/v1/sandboxes", post(create))
        .route("/v1/sandboxes/exec", post(exec))
        .route("/v1/sandboxes/dispose", post(dispose))
        .with_state(state)
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
    let header = headers.get("authorization").and_then(|v| v.to_str().ok());
    let Some(cred) = auth::authenticate(&s.config.credentials, header) else {
        return unauthorized();
    };
    Json(json!({
        "backends": s.backends,
        "floor": s.floor.as_str(),
        "identity": {"namespace": cred.identity.namespace, "name": cred.identity.name},
        "scope": cred.scope,
    }))
    .into_response()
}

/// Binds the configured address and serves until `shutdown` resolves.
/// `on_bound` is told the address actually bound (port 0 picks one).
pub async fn serve(
    state: Arc<Served>,
    on_bound: impl FnOnce(std::net::SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(state.config.listen).await?;
    on_bound(listener.local_addr()?);
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The part of a sandbox's key a request names: its thread and agent dir.
/// The scope and the identity are the credential's.
#[derive(Deserialize)]
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
    let status = match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Refused => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Failed => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(json!({"error": message.to_string()}))).into_response()
}

/// The one answer for a sandbox this credential has not made: it does not
/// say whether another credential's exists.
fn no_such_sandbox() -> Response {
    refused(
        ErrorKind::NotFound,
        "no sandbox for this thread and agent dir; create it with POST /v1/sandboxes",
    )
}

fn authed(s: &Served, headers: &HeaderMap) -> Option<Credential> {
    let header = headers.get("authorization").and_then(|v| v.to_str().ok());
    auth::authenticate(&s.config.credentials, header).cloned()
}

async fn create(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(cred) = authed(&s, &headers) else {
        return unauthorized();
    };
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => return refused(ErrorKind::Invalid, e.body_text()),
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
        let caller = caller(&cred, &body.at);
        let key = match caller.resolve() {
            Ok(c) => c.key,
            Err(e) => return refused(ErrorKind::Invalid, e),
        };
        let sandbox = match served.router.acquire(&caller, &spec) {
            Ok(s) => s,
            Err(e) => return refused(e.kind(), &e),
        };
        let rung = served
            .router
            .selected_rung(&spec)
            .map(|r| r.as_str())
            .unwrap_or("unknown");
        let backend = served
            .router
            .selected_backend(&spec)
            .map(str::to_string)
            .unwrap_or_default();
        let handle = sandbox.id().to_string();
        served
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, sandbox);
        Json(json!({
            "handle": handle,
            "backend": backend,
            "rung": rung,
            "thread": body.at.thread,
            "agent_dir": body.at.agent_dir,
        }))
        .into_response()
    })
    .await;
    made.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

async fn exec(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Result<Json<ExecBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(cred) = authed(&s, &headers) else {
        return unauthorized();
    };
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => return refused(ErrorKind::Invalid, e.body_text()),
    };
    let key = match caller(&cred, &body.at).resolve() {
        Ok(c) => c.key,
        Err(e) => return refused(ErrorKind::Invalid, e),
    };
    let sandbox = s
        .live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let Some(sandbox) = sandbox else {
        return no_such_sandbox();
    };
    let req = ExecRequest {
        argv: body.argv,
        env: Default::default(),
        stdin: body.stdin.into_bytes(),
        timeout: Duration::from_secs(body.timeout_seconds.unwrap_or(3600)),
        max_output_bytes: MAX_OUTPUT_BYTES,
    };
    if body.stream {
        return streamed(sandbox, req);
    }
    let ran = tokio::task::spawn_blocking(move || sandbox.exec(&req)).await;
    let out = match ran {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return refused(e.kind(), &e),
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let (status, killed_by) = status_json(out.status);
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
    body: Result<Json<Address>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(cred) = authed(&s, &headers) else {
        return unauthorized();
    };
    let Json(at) = match body {
        Ok(b) => b,
        Err(e) => return refused(ErrorKind::Invalid, e.body_text()),
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

/// How an exec ended, as the API says it: the status, and the bound that
/// killed it if one did.
fn status_json(status: ExitStatus) -> (serde_json::Value, Option<&'static str>) {
    match status {
        ExitStatus::Code(c) => (json!({"code": c}), None),
        ExitStatus::Signal(n) => (json!({"signal": n}), None),
        ExitStatus::TimedOut => (
            json!({"killed": "max_wall_seconds"}),
            Some("max_wall_seconds"),
        ),
        ExitStatus::Bound { bound } => (json!({"killed": bound}), Some(bound)),
    }
}

/// A chunk of output: text when it is UTF-8, else base64.
fn output_line(stream: cordon_sandbox::Stream, bytes: &[u8]) -> String {
    use base64::Engine as _;
    let name = match stream {
        cordon_sandbox::Stream::Stdout => "stdout",
        cordon_sandbox::Stream::Stderr => "stderr",
    };
    let v = match std::str::from_utf8(bytes) {
        Ok(text) => json!({"event": name, "data": text}),
        Err(_) => json!({
            "event": name,
            "data_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
        }),
    };
    format!("{v}\n")
}

/// A streamed exec: NDJSON lines as the command writes, `exit` last. The
/// command is driven on a blocking thread; when the client goes away (the
/// body is dropped) the exec is killed at once, not at its next output.
fn streamed(sandbox: Arc<dyn Sandbox>, req: ExecRequest) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(cordon_sandbox::exec::EVENTS_IN_FLIGHT);
    let mut handle = match sandbox.start_exec(&req, cordon_sandbox::Attach::streamed_stdin()) {
        Ok(h) => h,
        Err(e) => return refused(e.kind(), &e),
    };
    let killer = handle.killer();
    let watcher = tx.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended = done.clone();
    tokio::spawn(async move {
        watcher.closed().await;
        if !ended.load(std::sync::atomic::Ordering::SeqCst) {
            killer.kill();
        }
    });
    let stdin = req.stdin;
    tokio::task::spawn_blocking(move || {
        if let Some(mut input) = handle.take_stdin() {
            use std::io::Write as _;
            let _ = input.write_all(&stdin);
        }
        while let Some(ev) = handle.next_event() {
            let line = match ev {
                cordon_sandbox::ExecEvent::Output(stream, bytes) => output_line(stream, &bytes),
                cordon_sandbox::ExecEvent::Exited(Ok(end)) => {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    let (status, killed_by) = status_json(end.status);
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
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(line), rx))
    });
    (
        [("content-type", "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}
