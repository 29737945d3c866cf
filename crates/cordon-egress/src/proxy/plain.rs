//! The plain-HTTP path: an absolute-form request checked before anything
//! is looked up, sent in origin form on a kept or newly dialled upstream
//! connection whose reads count against the response cap.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cordon_policy::{Decision, EgressFacts};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;

use super::capped::Capped;
use super::dial::Dialled;
use super::http::{
    has_dot_segment, header_pairs, host_header_agrees, shown, strip_hop_by_hop, text, Body,
    BoxError,
};
use super::live::Generation;
use super::record::Record;
use super::{ConnCtx, Proxy, Slot, Upstream, MAX_HEAD, MAX_URL};
use crate::target::{self, Authority};

/// An absolute-form request's target, checked before anything is looked
/// up or dialled.
struct PlainTarget {
    a: Authority,
    /// The form sent upstream.
    origin: hyper::Uri,
    /// As written in the audit log.
    url: String,
    facts: EgressFacts,
}

impl Proxy {
    pub(super) async fn plain(
        self: &Arc<Self>,
        ctx: &ConnCtx,
        g: &Generation,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let caller = &g.caller;
        let slot = &ctx.slot;
        let uri = req.uri().clone();
        let mut r = Record::new(caller, &ctx.budget, "http", shown(&uri.to_string()));
        let t = match plain_target(&req) {
            Ok(t) => t,
            Err((status, why)) => return self.refuse(&r, status, &why, None),
        };
        r.target = t.url.clone();
        r.facts = t.facts.clone();
        let mut checked = match self.steps(&mut r, &t.a, false).await {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        let cap = self.cap(caller);
        let kept = match self
            .kept_upstream(&mut r, slot, t.a.port, &mut checked, cap)
            .await
        {
            Ok(k) => k,
            Err(resp) => return resp,
        };
        let (up, _d) = match kept {
            Some(u) => u,
            None => match self.open_upstream(&mut r, &t.a, checked, cap).await {
                Ok(u) => {
                    // Closed with this client connection when a change of
                    // allowlist no longer admits it.
                    let mut opened = ctx.opened.lock().unwrap_or_else(|p| p.into_inner());
                    opened.retain(|(_, h)| !h.is_finished());
                    opened.push((t.a.clone(), u.0.conn.clone()));
                    u
                }
                Err(resp) => return resp,
            },
        };
        self.forward(&r, slot, up, req, t, cap).await
    }

    /// The client connection's kept upstream connection, taken from `slot`
    /// when it goes to an address this request was just allowed to reach
    /// (on `port`) and is ready: that address's `allow` line is written
    /// before the request is sent on it, and the cap reset to `cap`.
    async fn kept_upstream(
        &self,
        r: &mut Record<'_>,
        slot: &Slot,
        port: u16,
        checked: &mut Vec<(IpAddr, Decision)>,
        cap: u64,
    ) -> Result<Option<(Upstream, Decision)>, hyper::Response<Body>> {
        let pooled = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut p) = pooled else {
            return Ok(None);
        };
        // Only to an address this request was just allowed to reach.
        let Some(pos) = checked.iter().position(|(ip, _)| *ip == p.ip) else {
            return Ok(None);
        };
        if p.port == port
            && !p.send.is_closed()
            && tokio::time::timeout(Duration::from_secs(1), p.send.ready())
                .await
                .is_ok_and(|r| r.is_ok())
        {
            let (_, d) = checked.swap_remove(pos);
            r.facts.ip = Some(p.ip.to_string());
            // Written before the request is sent on it.
            if !self.record(r, "allow", 0, "allowed", Some(&d)) {
                return Err(self.unrecorded(r));
            }
            p.left.store(cap, Ordering::Relaxed);
            return Ok(Some((p, d)));
        }
        Ok(None)
    }

    /// Dials the first checked address that answers and starts an HTTP/1
    /// client connection over it, its reads counted against `cap`.
    async fn open_upstream(
        self: &Arc<Self>,
        r: &mut Record<'_>,
        a: &Authority,
        checked: Vec<(IpAddr, Decision)>,
        cap: u64,
    ) -> Result<(Upstream, Decision), hyper::Response<Body>> {
        // Each address's `allow` line is written before it is dialled (and
        // the request sent).
        let (ip, stream, d) = match self.dial_recorded(r, a.port, checked, 0).await {
            Dialled::Up { ip, stream, d } => (ip, stream, d),
            Dialled::Unrecorded => return Err(self.unrecorded(r)),
            Dialled::NoAnswer(failures) => {
                let why = format!("no upstream address answered ({})", failures.join("; "));
                self.record(r, "end", 502, &why, None);
                return Err(text(
                    StatusCode::BAD_GATEWAY,
                    "no upstream address answered",
                ));
            }
        };
        let left = Arc::new(AtomicU64::new(cap));
        let exceeded = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Capped::new(stream, left.clone(), exceeded.clone()));
        let (send, conn) = match hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .handshake::<_, Body>(io)
            .await
        {
            Ok(x) => x,
            Err(e) => {
                let why = format!("upstream: {e}");
                self.record(r, "end", 502, &why, None);
                return Err(text(StatusCode::BAD_GATEWAY, &why));
            }
        };
        let driving;
        {
            let me = self.clone();
            let caller = Arc::new(r.caller.clone());
            let budget = r.budget.clone();
            let exceeded = exceeded.clone();
            let target = r.target.clone();
            let facts = r.facts.clone();
            let now = r.now;
            driving = tokio::spawn(async move {
                let _ = conn.await;
                if exceeded.load(Ordering::Relaxed) > 0 {
                    let r = Record {
                        caller: &caller,
                        budget,
                        kind: "http",
                        target,
                        facts,
                        now,
                        secrets: Vec::new(),
                    };
                    me.record(
                        &r,
                        "end",
                        200,
                        &format!("response cap of {cap} bytes exceeded; the connection was closed"),
                        None,
                    );
                }
            });
        }
        Ok((
            Upstream {
                ip,
                port: a.port,
                send,
                left,
                exceeded,
                conn: driving.abort_handle(),
            },
            d,
        ))
    }

    /// Sends the request on `up` in origin form, its hop-by-hop headers
    /// stripped and `Host` the target's; the answer's `end` line is written
    /// before the answer is handed over, and `up` is kept in `slot` for the
    /// client's next request unless upstream said it closes.
    async fn forward(
        &self,
        r: &Record<'_>,
        slot: &Slot,
        mut up: Upstream,
        req: hyper::Request<Incoming>,
        t: PlainTarget,
        cap: u64,
    ) -> hyper::Response<Body> {
        let a = t.a;
        let exceeded = up.exceeded.clone();
        let (mut parts, body) = req.into_parts();
        parts.uri = t.origin;
        strip_hop_by_hop(&mut parts.headers);
        let shown_host = a.host.to_string();
        let host_value = if a.port == 80 {
            shown_host
        } else {
            format!("{shown_host}:{}", a.port)
        };
        if let Ok(v) = HeaderValue::from_str(&host_value) {
            parts.headers.insert(hyper::header::HOST, v);
        }
        let found = Arc::new(super::broker::Found::default());
        let body = super::broker::ScanBody::wrap(
            body.map_err(BoxError::from).boxed(),
            r.caller,
            found.clone(),
        );
        let upstream_req = hyper::Request::from_parts(parts, body);
        match up.send.send_request(upstream_req).await {
            Ok(resp) => {
                // The answer's status, on the line after the `allow`. An
                // answer whose line cannot be written is not handed to the
                // workload (the request was recorded before it was sent).
                if !self.record(r, "end", resp.status().as_u16(), "answered", None) {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        "the egress audit log cannot be written; nothing is carried until it can",
                    );
                }
                // Kept for this client's next request, unless upstream
                // said it closes.
                let closes = resp
                    .headers()
                    .get(hyper::header::CONNECTION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                if !closes {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(up);
                }
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                hyper::Response::from_parts(parts, body.map_err(BoxError::from).boxed())
            }
            Err(_) if found.hit.load(Ordering::SeqCst) => {
                let name = found.name.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let why = format!(
                    "the placeholder of secret `{}` is in the request body toward `{}`, where its value may not go; refused as an exfiltration attempt (the request was cut off)",
                    name.unwrap_or_default(),
                    a.host
                );
                self.refuse(r, StatusCode::FORBIDDEN, &why, None)
            }
            Err(e) => {
                let why = if exceeded.load(Ordering::Relaxed) > 0 {
                    format!("response cap of {cap} bytes exceeded")
                } else {
                    format!("upstream: {e}")
                };
                self.record(r, "end", 502, &why, None);
                text(StatusCode::BAD_GATEWAY, &why)
            }
        }
    }
}

/// Step 1 of an absolute-form request: its URL, authority, `Host` header,
/// path and method checked; or the status and reason it is refused with.
fn plain_target(req: &hyper::Request<Incoming>) -> Result<PlainTarget, (StatusCode, String)> {
    let uri = req.uri();
    if uri.to_string().len() > MAX_URL {
        return Err((
            StatusCode::URI_TOO_LONG,
            format!("the URL is longer than {MAX_URL} bytes"),
        ));
    }
    let Some(raw_auth) = uri.authority().map(|a| a.as_str().to_string()) else {
        return Err((StatusCode::BAD_REQUEST, "this is an egress proxy: send the request in absolute form (`GET http://host/path`), or CONNECT for https".into()));
    };
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err((
                StatusCode::BAD_REQUEST,
                "https goes through a CONNECT tunnel, not in absolute form".into(),
            ))
        }
        _ => {
            return Err((
                StatusCode::BAD_REQUEST,
                "only http:// is served in absolute form".into(),
            ))
        }
    }
    let a = match target::authority(&raw_auth, Some(80)) {
        Ok(a) => a,
        Err(e) => return Err((StatusCode::BAD_REQUEST, e.to_string())),
    };
    if let Err(why) = host_header_agrees(req.headers(), &a, Some(80)) {
        return Err((StatusCode::BAD_REQUEST, why));
    }
    let raw_path = uri.path();
    if has_dot_segment(raw_path) {
        return Err((
            StatusCode::BAD_REQUEST,
            "the path holds `.` or `..` segments; send it normalised".into(),
        ));
    }
    let path = match cordon_policy::canon::http_path(raw_path) {
        Ok(p) => p,
        Err(e) => return Err((StatusCode::BAD_REQUEST, e.to_string())),
    };
    let method = req.method().as_str();
    if method.is_empty() || method.len() > 32 || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err((
            StatusCode::BAD_REQUEST,
            "the method is not an upper-case HTTP method".into(),
        ));
    }
    // The form sent upstream, checked before anything is looked up or
    // dialled.
    let origin: hyper::Uri = match uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into())
        .parse()
    {
        Ok(u) => u,
        Err(_) => return Err((StatusCode::BAD_REQUEST, "the path cannot be sent".into())),
    };
    let shown_host = a.host.to_string();
    let url = if a.port == 80 {
        format!("http://{shown_host}{path}")
    } else {
        format!("http://{shown_host}:{}{path}", a.port)
    };
    // As the policy reads a plain request: the canonical URL (no query),
    // the query and the headers known.
    let with_query = match uri.query() {
        Some(q) => format!("{url}?{q}"),
        None => url.clone(),
    };
    let mut facts =
        EgressFacts::for_request(&with_query, method, &header_pairs(req.headers()), false)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    facts.host = Some(a.host.fact());
    facts.port = i64::from(a.port);
    Ok(PlainTarget {
        a,
        origin,
        url,
        facts,
    })
}
