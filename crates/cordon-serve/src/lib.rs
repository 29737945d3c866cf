//! `cordon serve`: cordon for agent hosts over HTTP, a thin async surface
//! over the host layer (its assembly, router and typed refusals). Every
//! request is authenticated by a bearer token whose SHA-256 digest the
//! configuration holds; the credential decides the identity and scope.
//!
//! This first slice serves `/healthz` and `/v1/backends`; sandboxes, execs,
//! files and MCP come next (issue 17, docs/serve.md).

pub mod auth;
pub mod config;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
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
}

/// The routes.
pub fn app(state: Arc<Served>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/backends", get(backends))
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
