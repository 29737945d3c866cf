//! The inspected path: a tunnel to a host the policy has the proxy
//! inspect is ended here. The proxy answers the workload's TLS with a
//! leaf of the sandbox's own authority, dials the upstream itself (the
//! checked address, its `allow` line first), verifies the upstream's
//! certificate, and then decides every request inside with `method`,
//! `path`, `url`, `query` and `headers` known, where only allow passes.
//!
//! ALPN: the upstream is offered what the workload offered (of `h2` and
//! `http/1.1`), and the workload is then given the one the upstream chose,
//! so each side speaks the same HTTP version and requests map one to one.
//!
//! `Host` (HTTP/1.1) or `:authority` (HTTP/2) must name the CONNECT host,
//! which the ClientHello's SNI already had to: a request naming another
//! site is refused, so fronting through an inspected host is closed.

use std::convert::Infallible;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use cordon_policy::{Decision, EgressFacts};
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use hyper::header::HeaderValue;
use hyper::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::budget::Budget;
use super::dial::Dialled;
use super::http::{has_dot_segment, header_pairs, shown, strip_hop_by_hop, text, Body, BoxError};
use super::record::Record;
use super::{Caller, Proxy, MAX_HEAD, MAX_URL};
use crate::ca::SandboxCa;
use crate::splice::Moved;
use crate::target::{self, Authority, Host};
use crate::tls::{H2, HTTP11};

/// What an inspected tunnel was opened with.
pub(super) struct Inspecting {
    pub(super) ca: Arc<SandboxCa>,
    /// The root layer's own roots for this host, PEM.
    pub(super) roots: Option<Arc<str>>,
    pub(super) caller: Arc<Caller>,
}

/// One inspected connection's upstream.
enum UpSend {
    H1(tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Body>>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

/// What every request of one inspected connection shares.
struct Session {
    caller: Arc<Caller>,
    budget: Arc<Budget>,
    a: Authority,
    host: String,
    ip: IpAddr,
    up: Result<UpSend, String>,
    cap: u64,
    /// An upgrade the upstream switched to, for the tunnel to carry.
    switched: super::upgrade::Switched,
}

impl Proxy {
    /// Ends the workload's TLS for an inspected host, then serves its
    /// requests. `hello` is what the workload has sent so far (its whole
    /// ClientHello, already checked to name the CONNECT host).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn inspect(
        self: &Arc<Self>,
        mut r: Record<'_>,
        a: Authority,
        checked: Vec<(IpAddr, Decision)>,
        client: TcpStream,
        hello: Vec<u8>,
        how: Inspecting,
    ) {
        let Host::Name(host) = a.host.clone() else {
            return;
        };
        let io = Prefixed {
            head: hello,
            pos: 0,
            inner: client,
        };
        let start = match tokio::time::timeout(
            self.cfg.timeouts.hello,
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.record(
                    &r,
                    "deny",
                    0,
                    &format!("tunnel closed: the workload's TLS: {e}"),
                    None,
                );
                return;
            }
            Err(_) => {
                self.record(
                    &r,
                    "deny",
                    0,
                    "tunnel closed: the workload's TLS handshake timed out",
                    None,
                );
                return;
            }
        };
        let (offered_alpn, offered_h2) = {
            let hello = start.client_hello();
            let list: Vec<Vec<u8>> = hello
                .alpn()
                .map(|i| i.map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            let h2 = list.iter().any(|p| p == H2);
            (!list.is_empty(), h2)
        };
        let moved = Arc::new(Moved::default());
        let tcp = match self.dial_recorded(&mut r, a.port, checked, 200).await {
            Dialled::Up { stream, .. } => stream,
            Dialled::Unrecorded => {
                tracing::error!(target: "cordon::egress", "inspected tunnel to {a} closed: its audit line could not be written; nothing was dialled");
                return;
            }
            Dialled::NoAnswer(failures) => {
                let why = format!(
                    "tunnel closed: no upstream address answered ({})",
                    failures.join("; ")
                );
                self.record_end(&r, 502, &why, &moved);
                return;
            }
        };
        let ip = r.facts.ip.as_deref().and_then(|s| s.parse().ok());
        let Some(ip) = ip else { return };
        let up = self
            .upstream_tls(&host, how.roots.as_deref(), offered_h2, tcp)
            .await;
        let h2 = matches!(&up, Ok((_, true)));
        let tls = match client_config(&how.ca, &host, h2, offered_alpn) {
            Ok(sc) => {
                match tokio::time::timeout(self.cfg.timeouts.hello, start.into_stream(sc)).await {
                    Ok(Ok(s)) => Ok(s),
                    Ok(Err(e)) => Err(format!("tunnel closed: the workload refused the sandbox's certificate or its TLS failed ({e}); does it trust the sandbox's CA (SSL_CERT_FILE)?")),
                    Err(_) => Err("tunnel closed: the workload's TLS handshake timed out".to_string()),
                }
            }
            Err(e) => Err(format!("tunnel closed: {e}")),
        };
        let tls = match tls {
            Ok(s) => s,
            Err(why) => {
                self.record_end(&r, 0, &why, &moved);
                return;
            }
        };
        let up = match up {
            Ok((up, h2)) => self.upstream_http(up, h2).await,
            Err(e) => Err(e),
        };
        if let Err(why) = &up {
            self.record(&r, "deny", 502, why, None);
        }
        let session = Arc::new(Session {
            caller: how.caller.clone(),
            budget: r.budget.clone(),
            a: a.clone(),
            host,
            ip,
            up,
            cap: self.cap(r.caller),
            switched: Default::default(),
        });
        let io = Counted {
            inner: tls,
            moved: moved.clone(),
        };
        let served = self.serve_inspected(io, session.clone(), h2).await;
        let reason = match (served, session.switched.take()) {
            // Still in this tunnel's task: a close of the tunnel (a change
            // of allowlist) closes the upgraded connection too.
            (Ok(()), Some(both)) => super::upgrade::carry(both, session.cap).await,
            (Ok(()), None) => "inspected tunnel closed".to_string(),
            (Err(e), _) => format!("inspected tunnel closed: {e}"),
        };
        self.record_end(&r, 200, &reason, &moved);
    }

    /// Serves the requests of one inspected connection on `io` (the
    /// workload's side, its TLS ended), each decided in [`Self::inspected`].
    async fn serve_inspected<IO>(
        self: &Arc<Self>,
        io: IO,
        session: Arc<Session>,
        h2: bool,
    ) -> Result<(), hyper::Error>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let me = self.clone();
        let service = hyper::service::service_fn(move |req| {
            let me = me.clone();
            let s = session.clone();
            async move {
                let mut resp = me.inspected(&s, req).await;
                // The connection stays up after a refusal inside (and
                // HTTP/2 has no such header); a switch keeps its
                // `Connection: upgrade`, which clients check.
                if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
                    resp.headers_mut().remove(hyper::header::CONNECTION);
                }
                Ok::<_, Infallible>(resp)
            }
        });
        let io = TokioIo::new(io);
        if h2 {
            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_header_list_size(MAX_HEAD as u32)
                .serve_connection(io, service)
                .await
        } else {
            hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(self.cfg.timeouts.header)
                .max_buf_size(MAX_HEAD)
                .serve_connection(io, service)
                .with_upgrades()
                .await
        }
    }

    /// For the fuzz target: serves `client` (plaintext, as if its TLS were
    /// ended) as an inspected connection to `host:443` at 127.0.0.1, whose
    /// upstream is `upstream` (plaintext too). Not API.
    #[doc(hidden)]
    pub async fn serve_inspected_plain<C, U>(
        self: &Arc<Self>,
        caller: Arc<Caller>,
        host: &str,
        client: C,
        upstream: U,
        h2: bool,
    ) -> Result<(), String>
    where
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let a = target::authority(&format!("{host}:443"), None).map_err(|e| e.to_string())?;
        let up = self.upstream_http(upstream, h2).await;
        let session = Arc::new(Session {
            budget: Arc::new(Budget::new(&self.cfg.audit_bounds)),
            cap: self.cap(&caller),
            caller,
            a,
            host: host.to_string(),
            ip: IpAddr::from([127, 0, 0, 1]),
            up,
            switched: Default::default(),
        });
        self.serve_inspected(client, session, h2)
            .await
            .map_err(|e| e.to_string())
    }

    /// The verified TLS connection to the upstream, and whether it chose h2.
    async fn upstream_tls(
        &self,
        host: &str,
        roots: Option<&str>,
        offer_h2: bool,
        tcp: TcpStream,
    ) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, bool), String> {
        let cfg = self.cfg.upstreams.client(roots, offer_h2)?;
        let name = rustls_pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))?;
        let s = tokio::time::timeout(
            self.cfg.timeouts.connect,
            tokio_rustls::TlsConnector::from(cfg).connect(name, tcp),
        )
        .await
        .map_err(|_| format!("the upstream `{host}` did not finish its TLS handshake in time"))?
        .map_err(|e| {
            format!("the upstream `{host}` failed TLS verification or its handshake: {e}")
        })?;
        let h2 = s.get_ref().1.alpn_protocol() == Some(H2);
        Ok((s, h2))
    }

    /// An HTTP client connection over the upstream's TLS.
    async fn upstream_http<U>(&self, up: U, h2: bool) -> Result<UpSend, String>
    where
        U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(up);
        if h2 {
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_header_list_size(MAX_HEAD as u32)
                .handshake::<_, Body>(io)
                .await
                .map_err(|e| format!("the upstream's HTTP/2: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(UpSend::H2(send))
        } else {
            let (send, conn) = hyper::client::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD)
                .handshake::<_, Body>(io)
                .await
                .map_err(|e| format!("the upstream's HTTP/1.1: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.with_upgrades().await;
            });
            Ok(UpSend::H1(tokio::sync::Mutex::new(send)))
        }
    }

    /// One request inside an inspected tunnel: checked, decided with every
    /// fact known (only allow passes), recorded, then sent.
    async fn inspected(
        &self,
        s: &Session,
        mut req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let mut r = Record::new(&s.caller, &s.budget, "https", shown(&req.uri().to_string()));
        r.target = format!("{}", s.a);
        r.facts.scheme = Some("https".into());
        r.facts.host = Some(s.host.clone());
        r.facts.port = i64::from(s.a.port);
        r.facts.ip = Some(s.ip.to_string());
        if let Some(refused) = self.refused_before_anything(&r) {
            return refused;
        }
        let t = match inspected_target(&req, &s.a) {
            Ok(t) => t,
            Err((status, why)) => return self.refuse(&r, status, &why, None),
        };
        r.target = t.url.clone();
        r.facts = t.facts;
        r.facts.ip = Some(s.ip.to_string());
        let d = self.cfg.policy.decide(&self.request(&r));
        if !d.is_allowed() {
            return self.refuse(&r, StatusCode::FORBIDDEN, &self.why(&d), Some(&d));
        }
        let up = match &s.up {
            Ok(up) => up,
            Err(why) => {
                return text(StatusCode::BAD_GATEWAY, why);
            }
        };
        // An upgrade (HTTP/1.1 only: HTTP/2 has none) was decided above
        // with the rest of the request; it goes up with its two headers.
        let upgrade = match up {
            UpSend::H1(_) => super::upgrade::asked(req.headers()),
            UpSend::H2(_) => None,
        };
        let client_side = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        if let Some(u) = upgrade.clone() {
            super::upgrade::restore(&mut parts.headers, u);
        }
        // Brokered secrets: each placeholder in a header becomes its value
        // where the policy allows; anywhere else the request is refused.
        let method = parts.method.as_str().to_string();
        let path = r.facts.path.clone().unwrap_or_default();
        match self.broker_headers(&r, &parts.uri, &mut parts.headers, &s.host, &method, &path) {
            Ok(used) => r.secrets = used,
            Err(why) => return self.refuse(&r, StatusCode::FORBIDDEN, &why, None),
        }
        if !self.record(&r, "allow", 0, "allowed", Some(&d)) {
            return self.unrecorded(&r);
        }
        let found = Arc::new(super::broker::Found::default());
        let body = super::broker::ScanBody::wrap(
            body.map_err(BoxError::from).boxed(),
            &s.caller,
            found.clone(),
        );
        let sent = match up {
            UpSend::H1(send) => {
                parts.uri = t.origin;
                parts.version = hyper::Version::HTTP_11;
                if let Ok(v) = HeaderValue::from_str(&t.authority) {
                    parts.headers.insert(hyper::header::HOST, v);
                }
                let mut send = send.lock().await;
                match send.ready().await {
                    Ok(()) => {
                        send.send_request(hyper::Request::from_parts(parts, body))
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            UpSend::H2(send) => {
                parts.uri = t.absolute;
                parts.version = hyper::Version::HTTP_2;
                parts.headers.remove(hyper::header::HOST);
                let mut send = send.clone();
                match send.ready().await {
                    Ok(()) => {
                        send.send_request(hyper::Request::from_parts(parts, body))
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match sent {
            Ok(resp)
                if resp.status() == StatusCode::SWITCHING_PROTOCOLS && client_side.is_none() =>
            {
                let why = "the upstream switched protocols for a request that asked for no upgrade";
                self.record(&r, "end", 502, why, None);
                text(StatusCode::BAD_GATEWAY, why)
            }
            Ok(mut resp) => {
                let switched = match client_side {
                    Some(client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
                        s.switched.set(client, hyper::upgrade::on(&mut resp));
                        resp.headers().get(hyper::header::UPGRADE).cloned()
                    }
                    _ => None,
                };
                if !self.record(&r, "end", resp.status().as_u16(), "answered", None) {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        "the egress audit log cannot be written; nothing is carried until it can",
                    );
                }
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if let Some(u) = switched {
                    super::upgrade::restore(&mut parts.headers, u);
                }
                let body = CapBody {
                    inner: body,
                    left: s.cap,
                    cap: s.cap,
                };
                hyper::Response::from_parts(parts, body.boxed())
            }
            Err(_) if found.hit.load(Ordering::SeqCst) => {
                let name = found.name.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let why = format!(
                    "the placeholder of secret `{}` is in the request body toward `{}`, where its value may not go; refused as an exfiltration attempt (the request was cut off)",
                    name.unwrap_or_default(),
                    s.host
                );
                self.refuse(&r, StatusCode::FORBIDDEN, &why, None)
            }
            Err(e) => {
                let why = format!("upstream: {e}");
                self.record(&r, "end", 502, &why, None);
                text(StatusCode::BAD_GATEWAY, &why)
            }
        }
    }
}

/// The workload's side of an inspected tunnel: the sandbox's leaf for
/// `host`, offering the one HTTP version the upstream chose (or none, to a
/// client that offered none).
fn client_config(
    ca: &SandboxCa,
    host: &str,
    h2: bool,
    offered_alpn: bool,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let leaf = ca.leaf(host)?;
    let mut sc = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(OneLeaf(leaf)));
    sc.alpn_protocols = match (h2, offered_alpn) {
        (true, _) => vec![H2.to_vec()],
        (false, true) => vec![HTTP11.to_vec()],
        (false, false) => Vec::new(),
    };
    Ok(Arc::new(sc))
}

/// An inspected request's target: checked, and the forms it is sent in.
struct InspectedTarget {
    /// `https://host[:port]/path?query`: the URL fact and the audit target.
    url: String,
    facts: EgressFacts,
    /// Sent to an HTTP/1.1 upstream.
    origin: hyper::Uri,
    /// Sent to an HTTP/2 upstream.
    absolute: hyper::Uri,
    /// `host[:port]`, for `Host`.
    authority: String,
}

/// Step 1 of a request inside an inspected tunnel: its authority must be
/// the tunnel's, its path normalised, its method a method.
fn inspected_target(
    req: &hyper::Request<Incoming>,
    a: &Authority,
) -> Result<InspectedTarget, (StatusCode, String)> {
    let uri = req.uri();
    if uri.to_string().len() > MAX_URL {
        return Err((
            StatusCode::URI_TOO_LONG,
            format!("the URL is longer than {MAX_URL} bytes"),
        ));
    }
    // The request's own authority: `:authority` (HTTP/2, or an absolute
    // form) and `Host`, each of which must name the tunnel's host.
    let mut named = Vec::new();
    if let Some(auth) = uri.authority() {
        named.push(auth.as_str().to_string());
    }
    let mut hosts = req.headers().get_all(hyper::header::HOST).iter();
    if let Some(h) = hosts.next() {
        if hosts.next().is_some() {
            return Err((
                StatusCode::BAD_REQUEST,
                "the request holds more than one Host header".into(),
            ));
        }
        named.push(
            h.to_str()
                .map_err(|_| {
                    (
                        StatusCode::BAD_REQUEST,
                        "the Host header is not text".to_string(),
                    )
                })?
                .to_string(),
        );
    }
    if named.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "the request names no host (no Host header or :authority)".into(),
        ));
    }
    for n in &named {
        let got = target::authority(n, Some(a.port))
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("the request's host: {e}")))?;
        if &got != a {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "the request names `{}`, not `{a}` which its tunnel and TLS name; a request goes to the host its tunnel was opened for (domain fronting is refused)",
                    shown(n)
                ),
            ));
        }
    }
    if let Some(scheme) = uri.scheme_str() {
        if scheme != "https" {
            return Err((
                StatusCode::BAD_REQUEST,
                "a request inside TLS is https".into(),
            ));
        }
    }
    let raw_path = uri.path();
    if has_dot_segment(raw_path) {
        return Err((
            StatusCode::BAD_REQUEST,
            "the path holds `.` or `..` segments; send it normalised".into(),
        ));
    }
    cordon_policy::canon::http_path(raw_path)
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    let method = req.method().as_str();
    if method.is_empty() || method.len() > 32 || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err((
            StatusCode::BAD_REQUEST,
            "the method is not an upper-case HTTP method".into(),
        ));
    }
    let host = a.host.to_string();
    let authority = if a.port == 443 {
        host.clone()
    } else {
        format!("{host}:{}", a.port)
    };
    let pq = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let pq = if pq.starts_with('/') {
        pq
    } else {
        format!("/{pq}")
    };
    let origin: hyper::Uri = pq.parse().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            "the path cannot be sent".to_string(),
        )
    })?;
    let absolute: hyper::Uri = format!("https://{authority}{pq}").parse().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            "the path cannot be sent".to_string(),
        )
    })?;
    let url = format!("https://{authority}{pq}");
    let headers = header_pairs(req.headers());
    let mut facts = EgressFacts::for_request(&url, method, &headers, true)
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    facts.host = Some(a.host.fact());
    facts.port = i64::from(a.port);
    Ok(InspectedTarget {
        url,
        facts,
        origin,
        absolute,
        authority,
    })
}

/// The workload's bytes already read (its ClientHello), then the rest.
struct Prefixed {
    head: Vec<u8>,
    pos: usize,
    inner: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.head.len() {
            let n = (self.head.len() - self.pos).min(buf.remaining());
            let from = self.pos;
            buf.put_slice(&self.head[from..from + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        d: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, d)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The workload's side, its bytes counted for the tunnel's `end` line.
struct Counted<S> {
    inner: S,
    moved: Arc<Moved>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.moved.up.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        d: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, d);
        if let Poll::Ready(Ok(n)) = &r {
            self.moved.down.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body held to the policy's `max_response_bytes`: past it
/// the body fails, and the workload sees the response cut off.
struct CapBody {
    inner: Incoming,
    left: u64,
    cap: u64,
}

impl hyper::body::Body for CapBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    let n = d.len() as u64;
                    if n > self.left {
                        let cap = self.cap;
                        self.left = 0;
                        return Poll::Ready(Some(Err(format!(
                            "response cap of {cap} bytes exceeded"
                        )
                        .into())));
                    }
                    self.left -= n;
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// The one leaf an inspected tunnel presents, whatever the SNI (which was
/// checked to be the CONNECT host before).
#[derive(Debug)]
struct OneLeaf(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneLeaf {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}
