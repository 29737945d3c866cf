//! Preview URLs (issue 32): `ANY /v1/sandboxes/{thread}/ports/{port}/...`
//! forwards one HTTP request to a port the caller's sandbox listens on —
//! decided by the policy's ingress surface (the port, this server's
//! listening address as `listen`, the credential's identity as `caller`)
//! in the sandbox's guard, connected inside the sandbox's own network
//! namespace. Another credential's sandbox is the `404` of a missing one.
//! The credential itself never reaches the sandbox: `Authorization` and
//! cordon's own headers are dropped from what is forwarded.
//!
//! An upgrade (a WebSocket's handshake) is forwarded with its `Upgrade`
//! and `Connection: upgrade`; when the sandbox's server switches protocols
//! (`101`), the two connections are joined byte for byte until either
//! side closes — cordon reads no frame of it.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use cordon_sandbox::{ErrorKind, PortRequest};

use crate::refusal::refused;
use crate::request::{who, Address};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

/// Headers of the caller's that never reach the sandbox: its credential,
/// cordon's addressing, and the hop-by-hop ones.
const DROPPED: [&str; 10] = [
    "authorization",
    "cordon-agent-dir",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The most upgraded (joined) preview connections one credential holds
/// open at once: once joined, a connection is past the server's own
/// connection caps, and each holds two sockets.
pub const MAX_TUNNELS_PER_CREDENTIAL: usize = 16;

/// `/v1/sandboxes/{thread}/ports/{port}/` (the tail empty).
pub(crate) async fn preview_root(
    State(s): State<Arc<Served>>,
    Path((thread, port)): Path<(String, u16)>,
    req: Request,
) -> Response {
    forward(s, thread, port, String::new(), req).await
}

/// `/v1/sandboxes/{thread}/ports/{port}/{*rest}`.
pub(crate) async fn preview(
    State(s): State<Arc<Served>>,
    Path((thread, port, rest)): Path<(String, u16, String)>,
    req: Request,
) -> Response {
    forward(s, thread, port, rest, req).await
}

async fn forward(
    s: Arc<Served>,
    thread: String,
    port: u16,
    rest: String,
    req: Request,
) -> Response {
    let cred = match who(&s, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let agent_dir = req
        .headers()
        .get("cordon-agent-dir")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("default")
        .to_string();
    let at = Address { thread, agent_dir };
    let sandbox = match live_sandbox(&s, &cred, &at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    // A WebSocket (or another upgrade): its protocol goes on, and the
    // client's side of the switch is awaited once the sandbox agrees. Its
    // place is taken first, so a credential past its cap costs no
    // decision and no connection into the sandbox.
    let upgrade = upgrade_of(req.headers());
    let place = match &upgrade {
        Some(_) => match crate::served::take_place(
            &s,
            |s| &s.tunnels,
            &cred.name,
            MAX_TUNNELS_PER_CREDENTIAL,
        ) {
            Some(p) => Some(p),
            None => {
                return crate::refusal::Refusal {
                    status: axum::http::StatusCode::TOO_MANY_REQUESTS,
                    message: format!("this credential has {MAX_TUNNELS_PER_CREDENTIAL} upgraded preview connections (WebSockets) open already; close one first"),
                }
                .into_response()
            }
        },
        None => None,
    };
    let ask = PortRequest {
        port,
        listen: s.config.listen.ip().to_string(),
        caller: cred.identity.clone(),
    };
    let opened = tokio::task::spawn_blocking(move || sandbox.open_port(&ask)).await;
    let stream = match opened {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return refused(e.kind(), &e),
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let stream = match stream
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(stream))
    {
        Ok(st) => st,
        Err(e) => {
            return refused(
                ErrorKind::Failed,
                format!("the connection into the sandbox: {e}"),
            )
        }
    };
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await {
            Ok(x) => x,
            Err(e) => return refused(ErrorKind::Failed, format!("the sandbox's server: {e}")),
        };
    tokio::spawn(conn.with_upgrades());
    let mut req = req;
    let client_side = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    parts.uri = match format!("/{rest}{query}").parse() {
        Ok(u) => u,
        Err(e) => return refused(ErrorKind::Invalid, format!("the path: {e}")),
    };
    // The headers the request's own `Connection` names are hop-by-hop
    // too (RFC 9110 §7.6.1): dropped with the fixed list.
    let named: Vec<axum::http::HeaderName> = parts
        .headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| axum::http::HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for h in named {
        parts.headers.remove(h);
    }
    for h in DROPPED {
        parts.headers.remove(h);
    }
    if let Ok(v) = format!("127.0.0.1:{port}").parse() {
        parts.headers.insert(axum::http::header::HOST, v);
    }
    if let Some(protocol) = &upgrade {
        parts
            .headers
            .insert(axum::http::header::UPGRADE, protocol.clone());
        parts.headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("upgrade"),
        );
    }
    let out = axum::http::Request::from_parts(parts, body);
    let mut resp = match sender.send_request(out).await {
        Ok(resp) => resp,
        Err(e) => {
            return refused(
                ErrorKind::Unavailable,
                format!("the sandbox's server on port {port} did not answer: {e}"),
            )
        }
    };
    if let (Some(client_side), axum::http::StatusCode::SWITCHING_PROTOCOLS) =
        (client_side, resp.status())
    {
        let sandbox_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let _place = place;
            let (Ok(client), Ok(sandbox)) = (client_side.await, sandbox_side.await) else {
                return;
            };
            let mut client = hyper_util::rt::TokioIo::new(client);
            let mut sandbox = hyper_util::rt::TokioIo::new(sandbox);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut sandbox).await;
        });
    }
    resp.map(axum::body::Body::new).into_response()
}

/// The protocol a request asks to switch to (`Upgrade`, with `upgrade`
/// among its `Connection` tokens), if any.
fn upgrade_of(headers: &axum::http::HeaderMap) -> Option<axum::http::HeaderValue> {
    let asks = headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(axum::http::header::UPGRADE).cloned())
        .flatten()
}
