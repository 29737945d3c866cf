//! `cordon serve`: cordon for agent hosts over HTTP, a thin async surface
//! over the host layer (its assembly, router and typed refusals). Every
//! request is authenticated by a bearer token whose SHA-256 digest the
//! configuration holds; the credential decides the identity and scope.
//!
//! The rooms, one concern each: this file holds the routes ([`app`]);
//! `served` the state every handler answers from ([`Served`]); `request`
//! and `refusal` what every handler shares (the credential and body it
//! reads first; the answers with an error); `gate` (what every request
//! passes before its body is read), `sandboxes` (create, attach, dispose),
//! `exec`, `files`, `outputs` (collected, and fetched) and `artifacts`
//! (where they land, within each credential's bounds), `limits` (the
//! request budget, the sandbox cap's lock), `metrics` (`/metrics`, the
//! egress audit follower) and `counts` (what it counts), `listen`
//! (connections, TLS, shutdown) and `mcp_http` (`/mcp`; the tools
//! themselves are `mcp`'s, shared with `cordon mcp` on stdio).
//!
//! Handlers depend on `request` and `served`; `served` only on rooms that
//! hold no handler (`config`, `artifacts`, `limits`, `counts`, and
//! through them `refusal`), never back.

pub mod auth;
pub mod config;
pub mod mcp;
pub mod tls;

mod artifacts;
mod counts;
mod exec;
mod files;
mod gate;
mod limits;
mod listen;
mod mcp_http;
mod metrics;
mod outputs;
mod refusal;
mod request;
mod sandboxes;
mod served;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

pub use config::{ConfigError, Credential, ServeConfig};
pub use listen::{serve, SHUTDOWN_GRACE};
pub use mcp_http::{MCP_AGENT_DIR_HEADER, MCP_THREAD_HEADER};
pub use served::Served;

use exec::exec;
use files::write_file;
use mcp_http::mcp_routes;
use metrics::{count_refusals, metrics};
use outputs::{artifact, outputs};
use sandboxes::{backends, create, dispose, dispose_thread};

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
