//! Workspaces: a caller's sandbox's changes to its project directory
//! (as `cordon sandbox diff` shows them), and writing them back (`apply`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::ErrorKind;
use serde::Deserialize;
use serde_json::json;

use crate::refusal::refused;
use crate::request::{authed, Address, Body};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

/// `POST /v1/sandboxes/diff`: the changes of the caller's sandbox at the
/// body's thread and agent dir, `{"changes": [...]}`.
pub(crate) async fn diff(
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
    let done = tokio::task::spawn_blocking(move || match sandbox.workspace_diff() {
        Ok(changes) => Json(json!({"changes": changes})).into_response(),
        Err(e) => refused(e.kind(), e),
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    /// Only the changes at or beneath these paths (relative to the
    /// workspace); absent or empty: every change.
    #[serde(default)]
    pub(crate) paths: Vec<String>,
}

/// `POST /v1/sandboxes/apply`: the changes written back into the
/// workspace, `{"applied": [...], "refused": [{path, reason}]}` (200 even
/// when some are refused: each says why; `ok` is false then).
pub(crate) async fn apply(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ApplyBody>,
) -> Response {
    let (_, body, sandbox) = match crate::sandboxes::authed_sandbox(&s, &headers, body).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let done = tokio::task::spawn_blocking(move || match sandbox.workspace_apply(&body.paths) {
        Ok(r) => {
            Json(json!({"ok": r.refused.is_empty(), "applied": r.applied, "refused": r.refused}))
                .into_response()
        }
        Err(e) => refused(e.kind(), e),
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

impl crate::sandboxes::Addressed for ApplyBody {
    fn at(&self) -> &Address {
        &self.at
    }
}
