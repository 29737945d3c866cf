//! What every request passes before a handler reads a byte of its body:
//! headers that must come once come once, the body has a deadline, and
//! the credential (within its budget) is checked first.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::ErrorKind;
use serde_json::json;

use crate::mcp_http::{MCP_AGENT_DIR_HEADER, MCP_THREAD_HEADER};
use crate::refusal::refused;
use crate::request::who;
use crate::served::Served;

/// Served without a credential (`GET` only).
const PUBLIC: [&str; 2] = ["/healthz", "/openapi.json"];

/// Headers a request may carry at most once: where two disagree, one
/// check could read the first and another layer (a proxy, rmcp) the last.
const ONCE: [&str; 9] = [
    "host",
    "authorization",
    "origin",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    MCP_THREAD_HEADER,
    MCP_AGENT_DIR_HEADER,
];

/// The outermost check: a header given twice is `400`, a request whose
/// target names another authority than its `Host` is `400`, and the body
/// must arrive within `limits.body_timeout` of the headers (past it the
/// read fails, the handler answers and the connection is closed).
pub(crate) async fn request_shape(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    for name in ONCE {
        if req.headers().get_all(name).iter().nth(1).is_some() {
            return refused(
                ErrorKind::Invalid,
                format!("the `{name}` header is given more than once; send it once"),
            );
        }
    }
    // An absolute-form target (`POST http://other/mcp`) carries an
    // authority of its own: it must be the `Host` the checks read.
    if let Some(authority) = req.uri().authority() {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| h.eq_ignore_ascii_case(authority.as_str())) {
            return refused(
                ErrorKind::Invalid,
                "the request target names another host than the `Host` header; send a path (`/mcp`), not a URL",
            );
        }
    }
    let deadline = tokio::time::Instant::now() + s.config.limits.body_timeout;
    let req = req.map(|body| {
        axum::body::Body::new(Deadline {
            inner: body,
            at: Box::pin(tokio::time::sleep_until(deadline)),
        })
    });
    next.run(req).await
}

/// Every request but the public ones needs a credential within its
/// budget, checked here: before any extractor reads the body, so a caller
/// without one cannot make the server read (or wait for) a byte of it.
///
/// INVARIANT: this layer is on every route (`app`), and it is the only
/// place a request is counted against its credential's budget; handlers
/// authenticate again (`who`), which costs a hash.
pub(crate) async fn credential_first(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.method() == axum::http::Method::GET && PUBLIC.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let cred = match who(&s, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let rate = f64::from(s.config.limits.requests_per_second);
    if !s.buckets.take(&cred.name, rate) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            Json(json!({"error": format!(
                "more than {} requests a second from this credential; wait and retry",
                s.config.limits.requests_per_second
            )})),
        )
            .into_response();
    }
    next.run(req).await
}

/// A request body that fails once its deadline passes, however slowly
/// its bytes still trickle in.
struct Deadline {
    inner: axum::body::Body,
    at: Pin<Box<tokio::time::Sleep>>,
}

/// The error a body past its deadline fails with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within `limits.body_timeout_seconds`; send it faster, or in smaller parts")]
struct TooSlow;

impl axum::body::HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.at.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(TooSlow.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
