//! Snapshots over HTTP, within the credential's scope: take one of a live
//! sandbox (`POST /v1/sandboxes/snapshot`), make a sandbox from one
//! (`POST /v1/sandboxes` with `from`), fork (`POST /v1/sandboxes/fork`),
//! list (`GET /v1/snapshots`) and forget (`POST /v1/snapshots/forget`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_host::snapshots::{Snapshot, SnapshotStore};
use cordon_sandbox::{Capability, ErrorKind, Sandbox, SandboxSpec};
use serde::Deserialize;
use serde_json::json;

use crate::config::Credential;
use crate::refusal::{refused, Refusal};
use crate::request::{authed, who, Address, Body};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

/// Why a server without a store refuses.
const NO_STORE: &str =
    "this server keeps no snapshots (its snapshot store could not be opened at start; see its log)";

fn store(s: &Served) -> Result<(&SnapshotStore, &str), Refusal> {
    s.snapshots
        .as_ref()
        .map(|(st, d)| (st, d.as_str()))
        .ok_or_else(|| Refusal::of(ErrorKind::Unavailable, NO_STORE))
}

fn shown(s: &Snapshot) -> serde_json::Value {
    json!({
        "id": s.id, "name": s.name, "thread": s.thread, "created": s.created,
        "backend": s.backend, "files": s.files, "bytes": s.bytes,
        "kind": s.provenance.spec.kind(),
        "processes": s.processes, "memory_bytes": s.memory_bytes,
    })
}

/// A new sandbox at `at` made from the snapshot `from` (the credential's
/// scope's), with its spec (or `spec`, which must match it).
pub(crate) async fn create_from(
    s: Arc<Served>,
    cred: Credential,
    at: Address,
    spec: Option<String>,
    from: &str,
) -> Response {
    let from = from.to_string();
    let done = tokio::task::spawn_blocking(move || -> Response {
        let made = restore(&s, &cred, &at, spec.as_deref(), &from);
        match made {
            Ok((made, snap)) => Json(json!({
                "handle": made.sandbox.id(),
                "backend": made.backend,
                "rung": made.rung,
                "warnings": made.warnings,
                "thread": at.thread,
                "agent_dir": at.agent_dir,
                "snapshot": snap,
            }))
            .into_response(),
            Err(r) => r.into_response(),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

fn restore(
    s: &Served,
    cred: &Credential,
    at: &Address,
    spec: Option<&str>,
    from: &str,
) -> Result<(crate::sandboxes::Made, String), Refusal> {
    let (st, digest) = store(s)?;
    let snap = st
        .find(from, &cred.scope)
        .map_err(|e| Refusal::of(ErrorKind::NotFound, e))?;
    let spec = match spec {
        Some(text) => {
            SandboxSpec::from_yaml("spec", text).map_err(|e| Refusal::of(ErrorKind::Invalid, e))?
        }
        None => snap.provenance.spec.clone(),
    }
    .requiring(Capability::Snapshot);
    SnapshotStore::check_restore(&snap, &spec, &cred.identity, digest)
        .map_err(|e| Refusal::of(ErrorKind::Refused, e))?;
    let made = s.get_or_create_from(cred, at, &spec, st.origin(&snap))?;
    Ok((made, snap.id))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SnapshotBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Processes and memory too (where the backend saves them; refused,
    /// saying why, elsewhere).
    #[serde(default)]
    pub(crate) memory: bool,
}

fn take(
    s: &Served,
    cred: &Credential,
    at: &Address,
    sandbox: &dyn Sandbox,
    name: Option<&str>,
    capture: cordon_host::snapshots::Capture,
) -> Result<Snapshot, Refusal> {
    let (st, _) = store(s)?;
    let backend = s
        .router
        .selected(&sandbox.provenance().spec)
        .map(|(n, _)| n.to_string())
        .unwrap_or_default();
    st.take(sandbox, &backend, &cred.scope, &at.thread, name, capture)
        .map(|(snap, _)| snap)
        .map_err(|e| Refusal::of(ErrorKind::Refused, e))
}

/// `POST /v1/sandboxes/snapshot`: the caller's sandbox's files captured.
pub(crate) async fn snapshot(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<SnapshotBody>,
) -> Response {
    let (cred, body, sandbox) = match crate::sandboxes::authed_sandbox(&s, &headers, body).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let done = tokio::task::spawn_blocking(move || {
        let capture = if body.memory {
            cordon_host::snapshots::Capture::Memory
        } else {
            cordon_host::snapshots::Capture::Files
        };
        match take(
            &s,
            &cred,
            &body.at,
            &*sandbox,
            body.name.as_deref(),
            capture,
        ) {
            Ok(snap) => Json(shown(&snap)).into_response(),
            Err(r) => r.into_response(),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    pub(crate) count: u32,
    /// The new sandboxes' threads: `PREFIX-1`..`PREFIX-N` (default: the
    /// source's thread and `-fork`).
    #[serde(default)]
    pub(crate) thread_prefix: Option<String>,
    /// Fork the running processes too (a snapshot with `memory`).
    #[serde(default)]
    pub(crate) memory: bool,
}

/// `POST /v1/sandboxes/fork`: a snapshot of the caller's sandbox and
/// `count` sandboxes made from it, each counted against the credential's
/// cap.
pub(crate) async fn fork(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ForkBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if body.count == 0 || body.count > 64 {
        return refused(ErrorKind::Invalid, "`count` is 1 to 64");
    }
    let sandbox = match live_sandbox(&s, &cred, &body.at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let done = tokio::task::spawn_blocking(move || -> Response {
        let snap = match take(
            &s,
            &cred,
            &body.at,
            &*sandbox,
            None,
            if body.memory {
                cordon_host::snapshots::Capture::Memory
            } else {
                cordon_host::snapshots::Capture::Files
            },
        ) {
            Ok(x) => x,
            Err(r) => return r.into_response(),
        };
        let prefix = body
            .thread_prefix
            .clone()
            .unwrap_or_else(|| format!("{}-fork", body.at.thread));
        let mut forks = Vec::new();
        for i in 1..=body.count {
            let at = Address {
                thread: format!("{prefix}-{i}"),
                agent_dir: body.at.agent_dir.clone(),
            };
            match restore(&s, &cred, &at, None, &snap.id) {
                Ok((made, _)) => {
                    forks.push(json!({"thread": at.thread, "handle": made.sandbox.id()}))
                }
                Err(r) => {
                    let mut doc = json!({"error": r.message, "snapshot": snap.id, "forks": forks});
                    doc["error"] = format!("fork {i} of {}: {}", body.count, r.message).into();
                    return (r.status, Json(doc)).into_response();
                }
            }
        }
        Json(json!({"snapshot": snap.id, "forks": forks})).into_response()
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

/// `GET /v1/snapshots`: the credential's scope's snapshots.
pub(crate) async fn list(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    match store(&s) {
        Ok((st, _)) => {
            let v: Vec<serde_json::Value> = st
                .list()
                .iter()
                .filter(|x| x.scope == cred.scope)
                .map(shown)
                .collect();
            Json(json!({"snapshots": v})).into_response()
        }
        Err(r) => r.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForgetBody {
    pub(crate) snapshot: String,
}

/// `POST /v1/snapshots/forget`: one of the credential's scope's removed.
pub(crate) async fn forget(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ForgetBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    match store(&s) {
        Ok((st, _)) => match st.remove(&body.snapshot, &cred.scope) {
            Ok(x) => Json(json!({"removed": x.id})).into_response(),
            Err(e) => refused(ErrorKind::NotFound, e),
        },
        Err(r) => r.into_response(),
    }
}

impl crate::sandboxes::Addressed for SnapshotBody {
    fn at(&self) -> &Address {
        &self.at
    }
}
