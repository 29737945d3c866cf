//! Pause and resume: every process of the caller's live sandbox frozen
//! (as `cordon sandbox pause` does on the command line), or thawed.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::ErrorKind;
use serde_json::json;

use crate::refusal::refused;
use crate::request::{authed, Address, Body};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

/// `POST /v1/sandboxes/pause`: the sandbox at the body's thread and agent
/// dir (the credential's own) frozen; an exec or a file call resumes it.
pub(crate) async fn pause(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    paused(s, headers, body, true).await
}

/// `POST /v1/sandboxes/resume`: thawed (one not paused is left so).
pub(crate) async fn resume(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    paused(s, headers, body, false).await
}

async fn paused(s: Arc<Served>, headers: HeaderMap, body: Body<Address>, paused: bool) -> Response {
    let (cred, at) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let sandbox = match live_sandbox(&s, &cred, &at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let done = tokio::task::spawn_blocking(move || {
        match if paused {
            sandbox.pause()
        } else {
            sandbox.resume()
        } {
            Ok(()) => {
                // Its files outlive its keeper while paused.
                if paused {
                    s.keep_paused_files(&cred, &at, &*sandbox);
                } else {
                    s.drop_paused_files(&cred, &at, false);
                }
                Json(json!({"paused": paused})).into_response()
            }
            Err(e) => refused(e.kind(), e),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}
