//! The files API over HTTP: one file written into a sandbox (files in),
//! and list, stat, read, mkdir, remove and rename — each path decided by
//! the policy's storage surface in the sandbox's guard, each answered from
//! the sandbox's own files without running anything in it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::{ErrorKind, FileAnswer, FileOp};
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
    /// `truncate` (the default: made or replaced), `create` (refused when
    /// something is there) or `append`.
    #[serde(default = "default_how")]
    pub(crate) how: cordon_sandbox::WriteHow,
}

fn default_how() -> cordon_sandbox::WriteHow {
    cordon_sandbox::WriteHow::Truncate
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
    let n = bytes.len();
    let op = FileOp::Write {
        path: body.path,
        data: bytes,
        mode: body.mode,
        how: body.how,
    };
    match on_sandbox(&s, &cred, &body.at, op).await {
        Ok((path, FileAnswer::Done(_))) => Json(json!({"path": path, "bytes": n})).into_response(),
        Ok((_, other)) => odd(&other),
        Err(r) => *r,
    }
}

/// `{thread, agent_dir?, path?, depth?}`: a directory, to a depth.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListBody {
    #[serde(flatten)]
    at: Address,
    #[serde(default)]
    path: String,
    #[serde(default)]
    depth: u32,
}

/// `{thread, agent_dir?, path}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PathBody {
    #[serde(flatten)]
    at: Address,
    path: String,
}

/// `{thread, agent_dir?, path, offset?, length?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadBody {
    #[serde(flatten)]
    at: Address,
    path: String,
    #[serde(default)]
    offset: u64,
    #[serde(default = "max_read")]
    length: u64,
}

fn max_read() -> u64 {
    cordon_sandbox::files::MAX_READ_BYTES
}

/// `{thread, agent_dir?, path, recursive?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveBody {
    #[serde(flatten)]
    at: Address,
    path: String,
    #[serde(default)]
    recursive: bool,
}

/// `{thread, agent_dir?, from, to}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenameBody {
    #[serde(flatten)]
    at: Address,
    from: String,
    to: String,
}

fn entry(e: &cordon_sandbox::FileInfo) -> serde_json::Value {
    json!({
        "path": e.path,
        "kind": e.kind,
        "size": e.size,
        "mode": e.mode,
        "mtime": e.mtime,
    })
}

fn odd(a: &FileAnswer) -> Response {
    refused(
        ErrorKind::Failed,
        format!("the sandbox answered oddly: {a:?}"),
    )
}

/// `op` on the caller's live sandbox, and the path it names as the
/// workload sees it (a relative one in the work dir).
async fn on_sandbox(
    s: &Arc<Served>,
    cred: &crate::config::Credential,
    at: &Address,
    op: FileOp,
) -> Result<(String, FileAnswer), Box<Response>> {
    let sandbox = live_sandbox(s, cred, at).await?;
    let work_dir = sandbox.provenance().spec.work_dir().to_string();
    let shown = op
        .accesses()
        .first()
        .map(|(p, _)| cordon_sandbox::files::absolute(&work_dir, p))
        .unwrap_or_default();
    match tokio::task::spawn_blocking(move || sandbox.files(&op)).await {
        Ok(Ok(a)) => Ok((shown, a)),
        Ok(Err(e)) => Err(Box::new(refused(e.kind(), &e))),
        Err(e) => Err(Box::new(refused(ErrorKind::Failed, e))),
    }
}

/// A files call: the caller authenticated, its body made into the
/// operation and where (`op`), run on its live sandbox ([`on_sandbox`]).
async fn files_call<B>(
    s: &Arc<Served>,
    headers: &HeaderMap,
    body: Body<B>,
    op: impl FnOnce(B) -> (Address, FileOp),
) -> Result<(String, FileAnswer), Box<Response>> {
    let (cred, body) = authed(s, headers, body)?;
    let (at, op) = op(body);
    on_sandbox(s, &cred, &at, op).await
}

/// `POST /v1/sandboxes/files/list`: `{path, entries, truncated}`.
pub(crate) async fn list(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ListBody>,
) -> Response {
    let got = files_call(&s, &headers, body, |b| {
        let op = FileOp::List {
            path: b.path,
            depth: b.depth,
        };
        (b.at, op)
    });
    match got.await {
        Ok((path, FileAnswer::Listing { entries, truncated })) => Json(json!({
            "path": path,
            "entries": entries.iter().map(entry).collect::<Vec<_>>(),
            "truncated": truncated,
        }))
        .into_response(),
        Ok((_, other)) => odd(&other),
        Err(r) => *r,
    }
}

/// `POST /v1/sandboxes/files/stat`: `{path, entry}` (`entry` null when
/// nothing is there; a link is described, not followed).
pub(crate) async fn stat(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<PathBody>,
) -> Response {
    let got = files_call(&s, &headers, body, |b| {
        (b.at, FileOp::Stat { path: b.path })
    });
    match got.await {
        Ok((path, FileAnswer::Stat(e))) => {
            Json(json!({"path": path, "entry": e.as_ref().map(entry)})).into_response()
        }
        Ok((_, other)) => odd(&other),
        Err(r) => *r,
    }
}

/// `POST /v1/sandboxes/files/read`: `{path, content_base64, offset, size}`
/// (`size` the file's; fewer bytes than asked at its end or the cap).
pub(crate) async fn read(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ReadBody>,
) -> Response {
    use base64::Engine as _;
    let mut offset = 0;
    let got = files_call(&s, &headers, body, |b| {
        offset = b.offset;
        let op = FileOp::Read {
            path: b.path,
            offset: b.offset,
            len: b.length,
        };
        (b.at, op)
    });
    match got.await {
        Ok((path, FileAnswer::Read { data, size })) => Json(json!({
            "path": path,
            "offset": offset,
            "content_base64": base64::engine::general_purpose::STANDARD.encode(&data),
            "size": size,
        }))
        .into_response(),
        Ok((_, other)) => odd(&other),
        Err(r) => *r,
    }
}

/// `POST /v1/sandboxes/files/mkdir`: with its parents.
pub(crate) async fn mkdir(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<PathBody>,
) -> Response {
    let got = files_call(&s, &headers, body, |b| {
        (b.at, FileOp::Mkdir { path: b.path })
    });
    done(got.await, "made")
}

/// `POST /v1/sandboxes/files/remove`: `{path, removed}` (`false`: nothing
/// was there).
pub(crate) async fn remove(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<RemoveBody>,
) -> Response {
    let got = files_call(&s, &headers, body, |b| {
        let op = FileOp::Remove {
            path: b.path,
            recursive: b.recursive,
        };
        (b.at, op)
    });
    done(got.await, "removed")
}

/// `POST /v1/sandboxes/files/rename`: nothing at `to` is replaced.
pub(crate) async fn rename(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<RenameBody>,
) -> Response {
    let got = files_call(&s, &headers, body, |b| {
        let op = FileOp::Rename {
            from: b.from,
            to: b.to,
        };
        (b.at, op)
    });
    done(got.await, "renamed")
}

fn done(got: Result<(String, FileAnswer), Box<Response>>, what: &str) -> Response {
    match got {
        Ok((path, FileAnswer::Done(b))) => Json(json!({"path": path, what: b})).into_response(),
        Ok((_, other)) => odd(&other),
        Err(r) => *r,
    }
}

/// The most watches one credential holds open at once (each holds a
/// thread of the server's until it ends).
pub const MAX_WATCHES_PER_CREDENTIAL: usize = 8;

/// `{thread, agent_dir?, path?, recursive?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WatchBody {
    #[serde(flatten)]
    at: Address,
    #[serde(default)]
    path: String,
    #[serde(default)]
    recursive: bool,
}

/// `POST /v1/sandboxes/files/watch`: `application/x-ndjson`, one event a
/// line (`created`, `modified`, `removed`, `renamed` with `to`, `overflow`)
/// as the sandbox's files change, `{"event": "ended", "reason"}` last when
/// the sandbox goes; a client that hangs up ends it.
pub(crate) async fn watch(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<WatchBody>,
) -> Response {
    let (cred, body, sandbox) = match crate::sandboxes::authed_sandbox(&s, &headers, body).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Some(place) =
        crate::served::take_place(&s, |s| &s.watches, &cred.name, MAX_WATCHES_PER_CREDENTIAL)
    else {
        return crate::refusal::Refusal {
            status: axum::http::StatusCode::TOO_MANY_REQUESTS,
            message: format!("this credential has {MAX_WATCHES_PER_CREDENTIAL} watches open already; close one (hang up its request) first"),
        }
        .into_response();
    };
    let (path, recursive) = (body.path, body.recursive);
    let started = tokio::task::spawn_blocking(move || sandbox.watch(&path, recursive)).await;
    let mut source = match started {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => return refused(e.kind(), &e),
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(64);
    tokio::task::spawn_blocking(move || {
        let _place = place;
        loop {
            let line = match source.next(std::time::Duration::from_millis(500)) {
                cordon_sandbox::Next::Event(e) => serde_json::to_string(&e).unwrap_or_default(),
                cordon_sandbox::Next::Quiet if tx.is_closed() => return,
                cordon_sandbox::Next::Quiet => continue,
                cordon_sandbox::Next::Ended(reason) => {
                    let _ = tx.blocking_send(format!(
                        "{}\n",
                        json!({"event": "ended", "reason": reason})
                    ));
                    return;
                }
            };
            if tx.blocking_send(format!("{line}\n")).is_err() {
                return;
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

impl crate::sandboxes::Addressed for WatchBody {
    fn at(&self) -> &Address {
        &self.at
    }
}
