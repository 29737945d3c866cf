//! `cordon serve`: cordon for agent hosts over HTTP, a thin async surface
//! over the host layer (its assembly, router and typed refusals). Every
//! request is authenticated by a bearer token whose SHA-256 digest the
//! configuration holds; the credential decides the identity and scope.
//!
//! The rooms, one concern each: this file holds the shared state
//! ([`Served`]), the routes and the answers every handler shares
//! (authentication, refusals); `sandboxes` (create, attach, dispose),
//! `exec`, `files`, `outputs` (artifacts), `limits`, `metrics`, `listen`
//! (connections, TLS, shutdown) and `mcp_http` (`/mcp`; the tools
//! themselves are `mcp`'s, shared with `cordon mcp` on stdio).

pub mod auth;
pub mod config;
pub mod mcp;
pub mod tls;

mod artifacts;
mod exec;
mod files;
mod gate;
mod limits;
mod listen;
mod mcp_http;
mod metrics;
mod outputs;
mod sandboxes;

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
pub use listen::{serve, SHUTDOWN_GRACE};
pub use mcp_http::{MCP_AGENT_DIR_HEADER, MCP_THREAD_HEADER};

use exec::*;
use files::*;
use mcp_http::*;
use metrics::*;
use outputs::*;
use sandboxes::*;

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
    /// Each scope's cap lock in this server: held from a sandbox count
    /// until the sandbox is recorded, so no create passes the cap
    /// uncounted (replicas also lock the scope in the state directory).
    scope_locks: ScopeLocks,
    /// Each credential's request budget: tokens left, and when counted.
    buckets: Mutex<BTreeMap<String, (f64, std::time::Instant)>>,
    /// Where collected outputs land (a directory of the server's own, one
    /// beneath it per collection), by opaque handle, within each
    /// credential's bounds. A handle is for the host's code, never a model's.
    artifacts: artifacts::Artifacts,
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

impl Served {
    pub fn new(
        config: ServeConfig,
        backends: Vec<String>,
        floor: cordon_sandbox::Isolation,
        router: cordon_sandbox::Router,
        mcp_spec: SandboxSpec,
    ) -> Served {
        let artifacts = artifacts::Artifacts::new(std::env::temp_dir(), &config.limits);
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
            scope_locks: ScopeLocks::default(),
            buckets: Mutex::new(BTreeMap::new()),
            artifacts,
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
            gate::credential_first,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_refusals,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gate::request_shape,
        ))
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

/// The one answer for a sandbox this credential has not made: it does not
/// say whether another credential's exists.
fn no_such_sandbox() -> Response {
    refused(
        ErrorKind::NotFound,
        "no sandbox for this thread and agent dir; create it with POST /v1/sandboxes",
    )
}

/// The request's credential: else the `401` to answer. (Its budget was
/// taken before the body was read, by `gate::credential_first`.)
fn who(s: &Served, headers: &HeaderMap) -> Result<Credential, Box<Response>> {
    let header = headers.get("authorization").and_then(|v| v.to_str().ok());
    auth::authenticate(&s.config.credentials, header)
        .cloned()
        .ok_or_else(|| Box::new(unauthorized()))
}

/// A request the server answers with an error: its status and a message
/// that says what to do.
#[derive(Debug)]
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
