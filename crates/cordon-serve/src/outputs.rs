//! Outputs: declared outputs collected into artifacts, and fetched.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::{ErrorKind, Sandbox};
use serde_json::json;

use crate::config::Credential;
use crate::refusal::{refused, Refusal};
use crate::request::{authed, who, Address, Body};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

/// Collects the caller's sandbox's declared outputs (files out) through a
/// confined sink into a directory of the server's own: each landed file's
/// `display` line (what a model may be shown) and a handle to fetch it
/// with (`GET /v1/artifacts/HANDLE`, the same credential's scope only).
pub(crate) async fn outputs(
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
    /// `cred`'s scope can fetch, within `cred`'s artifact bounds (see
    /// `artifacts`): (display line, handle) per landed file. Blocks.
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
        self.artifacts.land(cred, sandbox, &spec)
    }
}

/// A landed file's bytes, for the credential whose scope collected it;
/// any other handle, or another scope's, is the same `404`. Fetched, it is
/// removed: a second fetch is that `404` too.
pub(crate) async fn artifact(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    axum::extract::Path(handle): axum::extract::Path<String>,
) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let served = s.clone();
    let read = tokio::task::spawn_blocking(move || served.artifacts.fetch(&cred.scope, &handle))
        .await
        .unwrap_or_else(|e| Err(Refusal::of(ErrorKind::Failed, e)));
    match read {
        Ok(bytes) => ([("content-type", "application/octet-stream")], bytes).into_response(),
        Err(r) => r.into_response(),
    }
}

/// Removes expired artifacts every so often while the server runs (each
/// collect and fetch sweeps too).
pub(crate) async fn sweep_artifacts(state: Arc<Served>) {
    let every = state.artifacts.sweep_every();
    loop {
        tokio::time::sleep(every).await;
        let s = state.clone();
        let _ = tokio::task::spawn_blocking(move || s.artifacts.sweep()).await;
    }
}
