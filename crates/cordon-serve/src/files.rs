//! Files in: one file written into a sandbox.

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    /// Inside the sandbox; a relative path is in its work dir.
    pub(crate) path: String,
    pub(crate) content_base64: String,
    #[serde(default = "default_mode")]
    pub(crate) mode: u32,
}

pub(crate) fn default_mode() -> u32 {
    0o644
}

/// Writes one file into a sandbox (files in), through the backend's
/// confined write path; the request size limit bounds it.
pub(crate) async fn write_file(
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
