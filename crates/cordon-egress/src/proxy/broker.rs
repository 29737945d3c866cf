//! Brokered secrets: a sandbox holds placeholders, never values. In a
//! request inside an inspected tunnel the proxy puts a secret's value in
//! place of its placeholder in a header — only toward one of the hosts the
//! spec named for it, and only where the policy's secret surface allows
//! with every destination fact known (host, method, path, header name).
//! A placeholder anywhere else — another host, a URL, a body, a tunnel's
//! or a plain request's target, a header the policy does not allow — is
//! refused and audited as an attempt to send the secret out. The value
//! never appears in an audit line or an error: those name the secret.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use cordon_policy::{Destination, Request, SecretFacts, SurfaceFacts};
use hyper::body::Frame;
use hyper::header::{HeaderMap, HeaderValue};

use super::http::{Body, BoxError};
use super::record::Record;
use super::{BrokeredSecret, Caller, Proxy};

/// The first of `caller`'s placeholders found in `text`.
pub(super) fn placeholder_in<'c>(caller: &'c Caller, text: &[u8]) -> Option<&'c BrokeredSecret> {
    caller.brokered.iter().find(|b| placeholder_in_one(b, text))
}

fn placeholder_in_one(b: &BrokeredSecret, text: &[u8]) -> bool {
    let p = b.placeholder.as_bytes();
    !p.is_empty() && text.windows(p.len()).any(|w| w == p)
}

/// The first placeholder in a request's target or headers: for the paths
/// where nothing is ever substituted (a tunnel not inspected, plain HTTP).
pub(super) fn placeholder_in_request<'c>(
    caller: &'c Caller,
    uri: &hyper::Uri,
    headers: &HeaderMap,
) -> Option<(&'c BrokeredSecret, String)> {
    if caller.brokered.is_empty() {
        return None;
    }
    if let Some(b) = placeholder_in(caller, uri.to_string().as_bytes()) {
        return Some((b, "the request's target".to_string()));
    }
    for (k, v) in headers {
        if let Some(b) = placeholder_in(caller, v.as_bytes()) {
            return Some((b, format!("the `{k}` header")));
        }
    }
    None
}

/// Why an attempt was refused, as the workload and the log are told.
pub(super) fn exfiltration(b: &BrokeredSecret, place: &str, host: &str) -> String {
    format!(
        "the placeholder of secret `{}` was sent in {place} toward `{host}`, where its value may not go; refused as an exfiltration attempt",
        b.name
    )
}

impl Proxy {
    /// The secret surface for one use of `b`: only an allow puts the
    /// value in.
    fn may_send(
        &self,
        r: &Record<'_>,
        b: &BrokeredSecret,
        host: &str,
        method: &str,
        path: &str,
        header: &str,
    ) -> bool {
        if !b.to.iter().any(|h| h == host) {
            return false;
        }
        let d = self.cfg.policy.decide(&Request {
            identity: r.caller.identity.clone(),
            env: self.cfg.env.clone(),
            now: r.now,
            facts: SurfaceFacts::Secret(SecretFacts {
                name: b.name.clone(),
                destination: Some(Destination {
                    host: host.to_string(),
                    method: Some(method.to_string()),
                    path: Some(path.to_string()),
                    header: Some(header.to_string()),
                }),
            }),
        });
        d.is_allowed()
    }

    /// Puts each brokered value in place of its placeholder in `headers`
    /// of an inspected request to `host`, where allowed. The names put in,
    /// or why the request is refused (a placeholder in the URL, or in a
    /// header where its value may not go).
    pub(super) fn broker_headers(
        &self,
        r: &Record<'_>,
        uri: &hyper::Uri,
        headers: &mut HeaderMap,
        host: &str,
        method: &str,
        path: &str,
    ) -> Result<Vec<String>, String> {
        let caller = r.caller;
        if caller.brokered.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(b) = placeholder_in(caller, uri.to_string().as_bytes()) {
            return Err(exfiltration(b, "the URL", host));
        }
        let mut used: Vec<String> = Vec::new();
        let names: Vec<hyper::header::HeaderName> = headers.keys().cloned().collect();
        for name in names {
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            let mut rewritten = Vec::with_capacity(values.len());
            let mut changed = false;
            for v in values {
                // Each secret once, on the value as sent: a value put in is
                // never scanned again.
                let sent = v.as_bytes();
                let mut bytes = sent.to_vec();
                for b in &caller.brokered {
                    if placeholder_in_one(b, sent) {
                        if !self.may_send(r, b, host, method, path, name.as_str()) {
                            return Err(exfiltration(b, &format!("the `{name}` header"), host));
                        }
                        bytes = replace_all(&bytes, b.placeholder.as_bytes(), &b.value);
                        if !used.contains(&b.name) {
                            used.push(b.name.clone());
                        }
                        changed = true;
                    }
                }
                rewritten.push(bytes);
            }
            if changed {
                headers.remove(&name);
                for bytes in rewritten {
                    let v = HeaderValue::from_bytes(&bytes).map_err(|_| {
                        format!("a brokered secret's value cannot be sent in the `{name}` header (it holds bytes a header may not)")
                    })?;
                    headers.append(name.clone(), v);
                }
            }
        }
        Ok(used)
    }
}

/// `hay` with every `from` replaced by `to`.
fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// What a request body's scan found: set when a placeholder went by.
#[derive(Default)]
pub(super) struct Found {
    pub(super) hit: AtomicBool,
    pub(super) name: Mutex<Option<String>>,
}

/// A request body passed through, streamed, and watched for any of the
/// sandbox's placeholders (across chunk boundaries): one ends the body
/// with an error there, so the request upstream is cut off before the
/// rest, and `found` says which secret.
pub(super) struct ScanBody {
    inner: Body,
    placeholders: Vec<(String, Vec<u8>)>,
    /// The last bytes seen, to find a placeholder split between chunks.
    tail: Vec<u8>,
    found: Arc<Found>,
}

impl ScanBody {
    /// `inner` as is when the sandbox brokers nothing.
    pub(super) fn wrap(inner: Body, caller: &Caller, found: Arc<Found>) -> Body {
        use http_body_util::BodyExt as _;
        if caller.brokered.is_empty() {
            return inner;
        }
        ScanBody {
            inner,
            placeholders: caller
                .brokered
                .iter()
                .map(|b| (b.name.clone(), b.placeholder.as_bytes().to_vec()))
                .collect(),
            tail: Vec::new(),
            found,
        }
        .boxed()
    }
}

impl hyper::body::Body for ScanBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let Poll::Ready(Some(Ok(frame))) = polled else {
            return polled;
        };
        if let Some(d) = frame.data_ref() {
            let mut window = std::mem::take(&mut self.tail);
            window.extend_from_slice(d);
            let hit = self
                .placeholders
                .iter()
                .find(|(_, p)| window.windows(p.len()).any(|w| w == p.as_slice()))
                .map(|(n, _)| n.clone());
            if let Some(name) = hit {
                self.found.hit.store(true, Ordering::SeqCst);
                *self.found.name.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
                return Poll::Ready(Some(Err(format!(
                    "the placeholder of secret `{name}` is in the request body; refused as an exfiltration attempt"
                )
                .into())));
            }
            let keep = self
                .placeholders
                .iter()
                .map(|(_, p)| p.len().saturating_sub(1))
                .max()
                .unwrap_or(0);
            let from = window.len().saturating_sub(keep);
            self.tail = window[from..].to_vec();
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_covers_every_occurrence_and_nothing_else() {
        assert_eq!(replace_all(b"a PH b PH", b"PH", b"v"), b"a v b v");
        assert_eq!(replace_all(b"PPH", b"PH", b"v"), b"Pv");
        assert_eq!(replace_all(b"none", b"PH", b"v"), b"none");
    }
}
