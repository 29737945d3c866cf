//! The routes: every endpoint, and the layers every request passes.

use std::sync::Arc;

use axum::routing::{any, get, post};
use axum::Router;

use crate::egress::change_egress;
use crate::exec::exec;
use crate::files;
use crate::files::write_file;
use crate::gate;
use crate::mcp_http::mcp_routes;
use crate::metrics::{count_refusals, metrics};
use crate::outputs::{artifact, outputs};
use crate::pause::{pause, resume};
use crate::sandboxes::{backends, create, dispose, dispose_thread};
use crate::served::Served;
use crate::snapshots::{forget, fork, list as snapshots, snapshot};
use crate::workspace::{apply, diff};

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
        .route("/v1/sandboxes/files/list", post(files::list))
        .route("/v1/sandboxes/files/stat", post(files::stat))
        .route("/v1/sandboxes/files/read", post(files::read))
        .route("/v1/sandboxes/files/mkdir", post(files::mkdir))
        .route("/v1/sandboxes/files/remove", post(files::remove))
        .route("/v1/sandboxes/files/rename", post(files::rename))
        .route("/v1/sandboxes/files/watch", post(files::watch))
        .route("/v1/sandboxes/egress", post(change_egress))
        .route("/v1/sandboxes/pause", post(pause))
        .route("/v1/sandboxes/resume", post(resume))
        .route("/v1/sandboxes/diff", post(diff))
        .route("/v1/sandboxes/snapshot", post(snapshot))
        .route("/v1/sandboxes/fork", post(fork))
        .route("/v1/snapshots", get(snapshots))
        .route("/v1/snapshots/forget", post(forget))
        .route("/v1/sandboxes/apply", post(apply))
        .route("/v1/threads/dispose", post(dispose_thread))
        .route(
            "/v1/sandboxes/{thread}/ports/{port}/",
            any(crate::ports::preview_root),
        )
        .route(
            "/v1/sandboxes/{thread}/ports/{port}/{*rest}",
            any(crate::ports::preview),
        )
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
