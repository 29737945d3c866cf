//! The HTTP both paths share: the body type, the proxy's own answers,
//! the `Host` header check, and the hop-by-hop headers never forwarded.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::StatusCode;

use crate::target::{self, Authority};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(super) type Body = BoxBody<Bytes, BoxError>;

pub(super) fn shown(s: &str) -> String {
    s.chars()
        .take(300)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub(super) fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|n: Infallible| match n {})
        .boxed()
}

pub(super) fn text(status: StatusCode, why: &str) -> hyper::Response<Body> {
    let body = format!("cordon egress: {}\n", shown(why));
    let mut resp = hyper::Response::new(
        Full::new(Bytes::from(body))
            .map_err(|n: Infallible| match n {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status != StatusCode::OK {
        resp.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A `Host` header, when present, must name the target.
pub(super) fn host_header_agrees(
    h: &HeaderMap,
    a: &Authority,
    default_port: Option<u16>,
) -> Result<(), String> {
    let mut values = h.get_all(hyper::header::HOST).iter();
    let Some(v) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err("the request holds more than one Host header".into());
    }
    let v = v
        .to_str()
        .map_err(|_| "the Host header is not text".to_string())?;
    let got = target::authority(v, default_port.or(Some(a.port)))
        .map_err(|e| format!("the Host header: {e}"))?;
    if &got != a {
        return Err(format!(
            "the Host header names `{got}`, not the target `{a}`"
        ));
    }
    Ok(())
}

pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<HeaderName> = h
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in listed {
        h.remove(n);
    }
    for n in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// A path segment `.` or `..`, plainly or percent-encoded.
pub(super) fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|s| {
        s == "."
            || s == ".."
            || s.eq_ignore_ascii_case("%2e")
            || s.eq_ignore_ascii_case("%2e%2e")
            || s.eq_ignore_ascii_case(".%2e")
            || s.eq_ignore_ascii_case("%2e.")
    })
}

/// A request's headers as the policy reads them (names lowercase, in
/// order; a value not UTF-8 is read lossily, so a rule never matches bytes
/// it was not shown).
pub(super) fn header_pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Header names whose values are credentials: written `[redacted]` in the
/// audit log (a rule still decides on the value as sent).
pub(super) fn is_credential_header(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "auth",
        "cookie",
        "token",
        "secret",
        "key",
        "session",
        "password",
        "signature",
    ];
    WORDS.iter().any(|w| name.contains(w))
}
