//! The proxy: HTTP/1.1 `CONNECT` (authority form) and absolute-form plain
//! HTTP. For every request, in this order, so nothing is resolved or
//! dialled before it is allowed, and nothing dialled before it is recorded:
//!
//! 0. refuse it outright when its sandbox's audit budget is spent (`429`)
//!    or the last audit write failed (`503`);
//! 1. parse and normalise the target ([`crate::target`]);
//! 2. decide with the caller's allowlist and the policy (`ip` unknown):
//!    a deny ends it here;
//! 3. resolve the name ([`crate::resolve`]), bounded in time;
//! 4. classify every answer ([`crate::classify`]): one address that may
//!    not be dialled refuses the whole name;
//! 5. decide again with `ip` bound, where undetermined is deny, write the
//!    `allow` line (one that cannot be written refuses: nothing is dialled
//!    or sent), and dial the checked address, never the name;
//! 6. write what came of it on an `end` line.
//!
//! Every line is charged to its sandbox's [`Budget`] (the channel's):
//! see [`Proxy::record`].
//!
//! A tunnel answers `200` and then reads the client's first bytes before it
//! dials: a TLS ClientHello whose SNI is the CONNECT host, or the tunnel is
//! closed with nothing dialled. Bytes from upstream are counted on the
//! transport ([`Capped`]) against the policy's `max_response_bytes`.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use cordon_policy::{Decision, Deployment, EgressFacts, Identity, Policy, Request, SurfaceFacts};
use cordon_sandbox::{AuditBounds, EgressEntry};
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::audit::{rfc3339, Audit, AuditLine};
use crate::classify::Classifier;
use crate::resolve::Resolve;
use crate::sni::{self, Hello};
use crate::target::{self, Authority, Host};

/// Who is calling: known from the channel the connection arrived on,
/// never from anything the workload sends.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The sandbox's key, as shown in the audit log.
    pub sandbox: String,
    pub identity: Identity,
    /// The spec's `egress_allow`; `None`: the policy alone decides (a
    /// standalone proxy without `--allow`), and ports are 443 for tunnels
    /// and 80 for plain HTTP.
    pub allow: Option<Vec<EgressEntry>>,
}

/// Time bounds.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// One name's lookup.
    pub resolve: Duration,
    /// One TCP connect upstream.
    pub connect: Duration,
    /// The client's first bytes on a tunnel.
    pub hello: Duration,
    /// A request's head.
    pub header: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            resolve: Duration::from_secs(5),
            connect: Duration::from_secs(10),
            hello: Duration::from_secs(10),
            header: Duration::from_secs(30),
        }
    }
}

/// What a proxy is built from.
pub struct ProxyConfig {
    pub policy: Arc<Policy>,
    pub env: Deployment,
    pub resolver: Arc<dyn Resolve>,
    pub classifier: Arc<Classifier>,
    pub audit: Arc<Audit>,
    pub timeouts: Timeouts,
    /// Connections served at once per listener; more wait in the backlog.
    pub max_connections: usize,
    /// Each sandbox's budget of audit lines (the rotation in them is the
    /// audit file's, applied where it is opened).
    pub audit_bounds: AuditBounds,
}

/// The largest request head read.
const MAX_HEAD: usize = 64 * 1024;
/// The longest URL taken: it is written (twice: `url` and `path`) in the
/// request's audit lines, which must stay well under a sandbox's burst.
const MAX_URL: usize = 8 * 1024;

type Body = BoxBody<Bytes, hyper::Error>;

/// The egress proxy.
pub struct Proxy {
    cfg: ProxyConfig,
    /// The last audit write failed: requests are refused before anything
    /// (a lookup included) until a line is written again.
    audit_failing: AtomicBool,
}

impl Proxy {
    pub fn new(cfg: ProxyConfig) -> Arc<Proxy> {
        Arc::new(Proxy {
            cfg,
            audit_failing: AtomicBool::new(false),
        })
    }

    /// Accepts and serves connections on `listener` for `caller` until the
    /// task is dropped; the connections and tunnels it started end with it.
    /// At most `max_connections` are open at once, tunnels included.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, caller: Arc<Caller>) {
        let permits = Arc::new(tokio::sync::Semaphore::new(self.cfg.max_connections.max(1)));
        // This channel's sandbox: its own budget of audit lines.
        let budget = Arc::new(Budget::new(&self.cfg.audit_bounds));
        // Dropped with this future: every tunnel it started watches it.
        let (_stop, stopped) = tokio::sync::watch::channel(());
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                // Reap finished connections while waiting.
                Some(_) = conns.join_next(), if !conns.is_empty() => { drop(permit); continue; }
            };
            match accepted {
                Ok((stream, _)) => {
                    let me = self.clone();
                    let ctx = ConnCtx {
                        caller: caller.clone(),
                        budget: budget.clone(),
                        slot: Arc::new(std::sync::Mutex::new(None)),
                        permit: Arc::new(permit),
                        stopped: stopped.clone(),
                    };
                    conns.spawn(async move {
                        me.serve_connection(stream, ctx).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(target: "cordon::egress", "accept: {e}");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves one client connection.
    async fn serve_connection(self: Arc<Self>, stream: TcpStream, ctx: ConnCtx) {
        let _ = stream.set_nodelay(true);
        let me = self.clone();
        let ctx = Arc::new(ctx);
        let service = hyper::service::service_fn(move |req| {
            let me = me.clone();
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(me.handle(&ctx, req).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.cfg.timeouts.header)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!(target: "cordon::egress", "client connection: {e}");
        }
    }

    async fn handle(
        self: &Arc<Self>,
        ctx: &ConnCtx,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let kind = if req.method() == Method::CONNECT {
            "connect"
        } else {
            "http"
        };
        let r = Record::new(
            &ctx.caller,
            &ctx.budget,
            kind,
            shown(&req.uri().to_string()),
        );
        if let Some(refused) = self.refused_before_anything(&r) {
            return refused;
        }
        if req.method() == Method::CONNECT {
            self.connect(ctx, req).await
        } else {
            self.plain(ctx, req).await
        }
    }

    /// Before anything of a request is parsed, looked up or carried: a
    /// sandbox whose audit budget is spent, or a proxy whose audit log
    /// cannot be written, is refused here (and says so), so neither can
    /// be used to look names up or reach anything unrecorded.
    fn refused_before_anything(&self, r: &Record<'_>) -> Option<hyper::Response<Body>> {
        if let Err(spent_now) = r.budget.admit() {
            if spent_now {
                self.note_spent(r);
            }
            return Some(budget_spent(&self.cfg.audit_bounds));
        }
        if self.audit_failing.load(Ordering::Relaxed) {
            // Tried again (a line for this refusal): one that is written
            // clears it, for the next request.
            let why = "the egress audit log cannot be written; nothing is carried or looked up until it can";
            let _ = self.record(r, "deny", 503, why, None);
            return Some(text(StatusCode::SERVICE_UNAVAILABLE, why));
        }
        None
    }

    // ---- the steps -------------------------------------------------------

    /// Writes one line of `r`'s sandbox, charged to its budget: a `deny`
    /// when the budget is spent is not written (the refusal stands, and is
    /// counted on the next line written); an `allow` is not written either,
    /// and the caller must then carry nothing; an `end` (something was
    /// carried) is always written, and its bytes are owed. Whether it was
    /// written.
    fn record(
        &self,
        r: &Record<'_>,
        verdict: &str,
        status: u16,
        reason: &str,
        d: Option<&Decision>,
    ) -> bool {
        let charge = match verdict {
            "allow" => Charge::Gate,
            "end" => Charge::Force,
            _ => Charge::Note,
        };
        let line = self.line(r, verdict, status, reason, d);
        self.write_line(r, line, charge)
    }

    fn write_line(&self, r: &Record<'_>, line: AuditLine, charge: Charge) -> bool {
        let Some(text) = Audit::encode(&line) else {
            return false;
        };
        match r.budget.take(text.len() as u64, charge) {
            Take::Refused { spent_now } => {
                if spent_now {
                    self.note_spent(r);
                }
                false
            }
            Take::Write { refused_before } => {
                if refused_before > 0 {
                    let note = self.line(
                        r,
                        "deny",
                        429,
                        &format!("{refused_before} requests of this sandbox were refused, and not recorded one by one, while its audit budget was spent"),
                        None,
                    );
                    self.write_forced(r, note);
                }
                let ok = self.cfg.audit.write_encoded(line, &text);
                self.audit_failing.store(!ok, Ordering::Relaxed);
                ok
            }
        }
    }

    /// A line written whatever the budget (its bytes are owed).
    fn write_forced(&self, r: &Record<'_>, line: AuditLine) -> bool {
        let Some(text) = Audit::encode(&line) else {
            return false;
        };
        let _ = r.budget.take(text.len() as u64, Charge::Force);
        let ok = self.cfg.audit.write_encoded(line, &text);
        self.audit_failing.store(!ok, Ordering::Relaxed);
        ok
    }

    /// Once per spell of a spent budget: says so in the log.
    fn note_spent(&self, r: &Record<'_>) {
        let b = &self.cfg.audit_bounds;
        let note = self.line(
            r,
            "deny",
            429,
            &format!(
                "this sandbox's audit budget is spent ({} bytes a second after a burst of {}): its requests are refused, and not recorded one by one, until it refills",
                b.sandbox_bytes_per_sec, b.sandbox_burst_bytes
            ),
            None,
        );
        self.write_forced(r, note);
    }

    fn line(
        &self,
        r: &Record<'_>,
        verdict: &str,
        status: u16,
        reason: &str,
        d: Option<&Decision>,
    ) -> AuditLine {
        let (rules, unknown) = match d {
            Some(d) => (
                self.places(d),
                d.unknown.iter().map(|f| f.spelling().to_string()).collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        AuditLine {
            time: rfc3339(r.now),
            now: r.now,
            sandbox: r.caller.sandbox.clone(),
            identity: r.caller.identity.clone(),
            env: self.cfg.env.name.clone(),
            kind: r.kind.to_string(),
            target: r.target.clone(),
            ip: r.facts.ip.clone(),
            verdict: verdict.to_string(),
            status,
            rules,
            unknown,
            reason: reason.to_string(),
            facts: r.facts.clone(),
            bytes_up: None,
            bytes_down: None,
        }
    }

    /// A tunnel's `end` line: why it ended and the bytes it carried.
    fn record_end(&self, r: &Record<'_>, status: u16, reason: &str, moved: &crate::splice::Moved) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut line = self.line(r, "end", status, reason, None);
        line.bytes_up = Some(moved.up.load(Relaxed));
        line.bytes_down = Some(moved.down.load(Relaxed));
        self.write_line(r, line, Charge::Force);
    }

    fn refuse(
        &self,
        r: &Record<'_>,
        status: StatusCode,
        reason: &str,
        d: Option<&Decision>,
    ) -> hyper::Response<Body> {
        self.refuse_shown(r, status, reason, reason, d)
    }

    /// A refusal whose reason for the log (`logged`, the host's: it may
    /// name the resolved address) differs from what the workload is told
    /// (`shown`, which never does).
    fn refuse_shown(
        &self,
        r: &Record<'_>,
        status: StatusCode,
        logged: &str,
        shown: &str,
        d: Option<&Decision>,
    ) -> hyper::Response<Body> {
        let _ = self.record(r, "deny", status.as_u16(), logged, d);
        text(status, shown)
    }

    /// The answer when a request's `allow` line was not written: nothing
    /// was dialled or sent.
    fn unrecorded(&self, r: &Record<'_>) -> hyper::Response<Body> {
        if r.budget.spent() {
            budget_spent(&self.cfg.audit_bounds)
        } else {
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the egress audit log cannot be written; nothing is carried or looked up until it can",
            )
        }
    }

    fn request(&self, r: &Record<'_>) -> Request {
        Request {
            identity: r.caller.identity.clone(),
            env: self.cfg.env.clone(),
            now: r.now,
            facts: SurfaceFacts::Egress(r.facts.clone()),
        }
    }

    /// Steps 2 to 5, in this order for every request: decide with `ip`
    /// unknown (only a deny stops), resolve, classify every answer, decide
    /// again for each address. The addresses that may be dialled, with the
    /// decision that allowed each, or the `403` that was answered (and
    /// audited).
    async fn steps(
        &self,
        r: &mut Record<'_>,
        a: &Authority,
    ) -> Result<Vec<(IpAddr, Decision)>, hyper::Response<Body>> {
        if let Err((why, d)) = self.first_decision(r, a) {
            return Err(self.refuse(r, StatusCode::FORBIDDEN, &why, d.as_ref()));
        }
        let ips = match self.addresses(a).await {
            Ok(ips) => ips,
            Err((logged, shown)) => {
                return Err(self.refuse_shown(r, StatusCode::FORBIDDEN, &logged, &shown, None))
            }
        };
        self.checked(r, ips)
            .map_err(|(why, d)| self.refuse(r, StatusCode::FORBIDDEN, &why, d.as_ref()))
    }

    /// Step 2: the caller's allowlist, then the policy with `ip` unknown.
    fn first_decision(
        &self,
        r: &Record<'_>,
        a: &Authority,
    ) -> Result<(), (String, Option<Decision>)> {
        match &r.caller.allow {
            Some(list) => {
                let named = match &a.host {
                    Host::Name(n) => list.iter().any(|e| e.matches(n, a.port)),
                    // Allowlist entries are names; an address never matches.
                    Host::Ip(_) => false,
                };
                if !named {
                    return Err((format!("{a} is not in the egress allowlist"), None));
                }
            }
            None => {
                let default = if r.kind == "connect" { 443 } else { 80 };
                if a.port != default {
                    return Err((
                        format!("port {} is not open: without an allowlist a tunnel goes to 443 and plain HTTP to 80", a.port),
                        None,
                    ));
                }
            }
        }
        let d = self.cfg.policy.decide(&self.request(r));
        if d.verdict == cordon_policy::decide::Verdict::Deny {
            return Err((self.why(&d), Some(d)));
        }
        Ok(())
    }

    /// The deciding rules, `file:line`.
    fn places(&self, d: &Decision) -> Vec<String> {
        d.deciding
            .iter()
            .map(|id| {
                let rule = self.cfg.policy.rule(*id);
                format!("{}:{}", rule.file, rule.line)
            })
            .collect()
    }

    fn why(&self, d: &Decision) -> String {
        if d.no_allow_matched() {
            return "no allow rule of the policy matches".into();
        }
        let places = self.places(d);
        match d.verdict {
            cordon_policy::decide::Verdict::Deny => {
                format!("denied by the policy ({})", places.join(", "))
            }
            _ => {
                let unknown: Vec<&str> = d.unknown.iter().map(|f| f.spelling()).collect();
                if unknown.is_empty() {
                    format!("the policy could not decide ({})", places.join(", "))
                } else {
                    format!(
                        "the policy's rules need {} which this request does not show ({})",
                        unknown.join(", "),
                        places.join(", ")
                    )
                }
            }
        }
    }

    /// Steps 3 and 4: the addresses that may be dialled, or why none: for
    /// the log, and for the workload (which is never told an address a
    /// name resolved to: that would make the proxy a lookup oracle).
    async fn addresses(&self, a: &Authority) -> Result<Vec<IpAddr>, (String, String)> {
        let (name, ips) = match &a.host {
            Host::Ip(ip) => (ip.to_string(), vec![*ip]),
            Host::Name(n) => match self.cfg.resolver.lookup(n).await {
                Ok(ips) => (n.clone(), ips),
                Err(e @ crate::resolve::ResolveFailure::Failed { .. }) => {
                    return Err((
                        e.to_string(),
                        format!("resolving `{n}` failed (the egress audit log says why)"),
                    ))
                }
                Err(e) => return Err((e.to_string(), e.to_string())),
            },
        };
        for ip in &ips {
            if let Err(d) = self.cfg.classifier.check(
                SocketAddr::new(*ip, a.port),
                &name,
                &self.cfg.policy.allow_ranges,
            ) {
                return Err(if a.host == Host::Ip(*ip) {
                    // The workload's own literal: nothing it did not know.
                    (format!("{d}"), format!("{d}"))
                } else {
                    (
                        format!("`{name}` resolves to {d}; the whole name is refused"),
                        format!("`{name}` resolves to an address this proxy does not dial; the whole name is refused"),
                    )
                });
            }
        }
        Ok(ips)
    }

    /// Step 5 for one address: the policy again with `ip` bound; this is
    /// the final enforcing point, so only allow passes.
    fn final_decision(
        &self,
        r: &mut Record<'_>,
        ip: IpAddr,
    ) -> Result<Decision, (String, Decision)> {
        r.facts.ip = Some(ip.to_string());
        let d = self.cfg.policy.decide(&self.request(r));
        if d.is_allowed() {
            Ok(d)
        } else {
            Err((self.why(&d), d))
        }
    }

    /// Step 5 for every address: those the policy allows with `ip` bound,
    /// in the resolver's order; none is a refusal with the last reason.
    fn checked(
        &self,
        r: &mut Record<'_>,
        ips: Vec<IpAddr>,
    ) -> Result<Vec<(IpAddr, Decision)>, Refusal> {
        let mut checked = Vec::new();
        let mut last = None;
        for ip in ips {
            match self.final_decision(r, ip) {
                Ok(d) => checked.push((ip, d)),
                Err(e) => last = Some(e),
            }
        }
        if checked.is_empty() {
            return Err(match last {
                Some((why, d)) => (why, Some(d)),
                None => ("the name has no address".to_string(), None),
            });
        }
        Ok(checked)
    }

    async fn dial(&self, ip: IpAddr, port: u16) -> io::Result<TcpStream> {
        let s = tokio::time::timeout(self.cfg.timeouts.connect, TcpStream::connect((ip, port)))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        let _ = s.set_nodelay(true);
        Ok(s)
    }

    fn cap(&self, caller: &Caller) -> u64 {
        self.cfg
            .policy
            .bounds_for(&caller.identity, &self.cfg.env)
            .max_response_bytes
    }

    // ---- CONNECT ---------------------------------------------------------

    async fn connect(
        self: &Arc<Self>,
        ctx: &ConnCtx,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let caller = &ctx.caller;
        let raw = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let mut r = Record::new(
            caller,
            &ctx.budget,
            "connect",
            shown(&req.uri().to_string()),
        );
        if req.uri().scheme().is_some() || raw.is_empty() {
            return self.refuse(
                &r,
                StatusCode::BAD_REQUEST,
                "CONNECT takes the authority form `host:port`",
                None,
            );
        }
        let a = match target::authority(&raw, None) {
            Ok(a) => a,
            Err(e) => return self.refuse(&r, StatusCode::BAD_REQUEST, &e.to_string(), None),
        };
        if let Err(why) = host_header_agrees(req.headers(), &a, None) {
            return self.refuse(&r, StatusCode::BAD_REQUEST, &why, None);
        }
        r.target = a.to_string();
        // A tunnel carries TLS (checked below); what travels inside it is
        // unknown, and so is the URL that would name it.
        r.facts = EgressFacts {
            url: None,
            scheme: Some("https".into()),
            host: Some(a.host.fact()),
            port: i64::from(a.port),
            method: None,
            path: None,
            ip: None,
        };
        // Decided for each address before the 200, so a refusal is a 403.
        let checked = match self.steps(&mut r, &a).await {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        let me = self.clone();
        let caller = caller.clone();
        let budget = ctx.budget.clone();
        let target = r.target.clone();
        let facts = r.facts.clone();
        let now = r.now;
        // The tunnel counts against the channel's connections until it
        // ends, and ends when the channel is stopped.
        let permit = ctx.permit.clone();
        let mut stopped = ctx.stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let r = Record {
                caller: &caller,
                budget,
                kind: "connect",
                target,
                facts,
                now,
            };
            match hyper::upgrade::on(req).await {
                Ok(up) => match up.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        tokio::select! {
                            () = me.tunnel(r, a, checked, parts.io.into_inner(), parts.read_buf) => {}
                            _ = stopped.changed() => {}
                        }
                    }
                    Err(_) => {
                        tracing::error!(target: "cordon::egress", "a tunnel's client is not a TCP stream")
                    }
                },
                Err(e) => tracing::debug!(target: "cordon::egress", "upgrade: {e}"),
            }
        });
        hyper::Response::new(empty())
    }

    async fn tunnel(
        &self,
        mut r: Record<'_>,
        a: Authority,
        checked: Vec<(IpAddr, Decision)>,
        mut client: TcpStream,
        early: Bytes,
    ) {
        // The client's first bytes, before anything is dialled (with what
        // it sent along with the CONNECT, if anything).
        let mut hello = early.to_vec();
        let read = tokio::time::timeout(self.cfg.timeouts.hello, async {
            let mut chunk = [0u8; 4096];
            loop {
                match sni::read_client_hello(&hello) {
                    Hello::Incomplete if hello.len() < sni::MAX_HELLO => {}
                    other => return Ok(other),
                }
                let want = (sni::MAX_HELLO - hello.len()).min(chunk.len());
                let n = client.read(&mut chunk[..want]).await?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed the tunnel before it sent a TLS ClientHello",
                    ));
                }
                hello.extend_from_slice(&chunk[..n]);
            }
        })
        .await;
        let verdict = match read {
            Err(_) => Err("the client sent no TLS ClientHello in time".to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(Hello::Tls { sni: Some(sent) })) => match (&a.host, cordon_policy::canon::host(&sent)) {
                (Host::Name(n), Ok(c)) if &c == n => Ok(()),
                _ => Err(format!(
                    "the TLS ClientHello names `{}`, not the CONNECT host `{}`",
                    shown(&sent),
                    a.host
                )),
            },
            Ok(Ok(Hello::Tls { sni: None })) => {
                Err("the TLS ClientHello names no server (SNI); a tunnel must name the host it was opened for".into())
            }
            Ok(Ok(Hello::NotTls)) => Err(if hello.starts_with(b"CONNECT ") {
                "a CONNECT inside a tunnel is refused".to_string()
            } else {
                "the tunnel does not open with TLS; plain HTTP goes to the proxy in absolute form, not through CONNECT".to_string()
            }),
            Ok(Ok(Hello::Malformed(why))) => Err(format!("the TLS ClientHello is malformed: {why}")),
            Ok(Ok(Hello::Incomplete)) => Err("the TLS ClientHello is larger than the proxy reads".into()),
        };
        if let Err(why) = verdict {
            // The 200 is gone: closing is the refusal. Nothing was dialled.
            self.record(&r, "deny", 0, &format!("tunnel closed: {why}"), None);
            let _ = client.shutdown().await;
            return;
        }
        // Each address's `allow` line is written before it is dialled: a
        // line that cannot be written (the log failing, or the sandbox's
        // audit budget spent) closes the tunnel with nothing dialled.
        let mut upstream = None;
        let mut failures = Vec::new();
        for (ip, d) in checked {
            r.facts.ip = Some(ip.to_string());
            if !self.record(&r, "allow", 200, "allowed", Some(&d)) {
                tracing::error!(target: "cordon::egress", "tunnel to {a} closed: its audit line could not be written; nothing was dialled");
                let _ = client.shutdown().await;
                return;
            }
            match self.dial(ip, a.port).await {
                Ok(s) => {
                    upstream = Some(s);
                    break;
                }
                Err(e) => failures.push(format!("{ip}: {e}")),
            }
        }
        let moved = crate::splice::Moved::default();
        let Some(mut up) = upstream else {
            self.record_end(
                &r,
                502,
                &format!(
                    "tunnel closed: no upstream address answered ({})",
                    failures.join("; ")
                ),
                &moved,
            );
            let _ = client.shutdown().await;
            return;
        };
        if up.write_all(&hello).await.is_err() {
            self.record_end(
                &r,
                200,
                "tunnel closed: the ClientHello could not be sent",
                &moved,
            );
            return;
        }
        let cap = self.cap(r.caller);
        // The hello went up before the splice.
        moved
            .up
            .fetch_add(hello.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let reason = match crate::splice::tunnel(&client, &up, cap, &moved).await {
            Ok(()) => "tunnel closed".to_string(),
            Err(crate::splice::SpliceEnd::CapExceeded) => {
                format!("response cap of {cap} bytes exceeded; the tunnel was closed")
            }
            Err(crate::splice::SpliceEnd::Io(e)) => {
                tracing::debug!(target: "cordon::egress", "tunnel to {}: {e}", a);
                format!("tunnel closed: {e}")
            }
        };
        self.record_end(&r, 200, &reason, &moved);
    }

    // ---- plain HTTP ------------------------------------------------------

    /// Dials the first checked address that answers and starts an HTTP/1
    /// client connection over it, its reads counted against `cap`.
    async fn open_upstream(
        self: &Arc<Self>,
        r: &mut Record<'_>,
        a: &Authority,
        checked: Vec<(IpAddr, Decision)>,
        cap: u64,
    ) -> Result<(Upstream, Decision), hyper::Response<Body>> {
        let mut found = None;
        let mut failures = Vec::new();
        for (ip, d) in checked {
            r.facts.ip = Some(ip.to_string());
            // Written before the address is dialled (and the request sent).
            if !self.record(r, "allow", 0, "allowed", Some(&d)) {
                return Err(self.unrecorded(r));
            }
            match self.dial(ip, a.port).await {
                Ok(s) => {
                    found = Some((ip, s, d));
                    break;
                }
                Err(e) => failures.push(format!("{ip}: {e}")),
            }
        }
        let Some((ip, stream, d)) = found else {
            let why = format!("no upstream address answered ({})", failures.join("; "));
            self.record(r, "end", 502, &why, None);
            return Err(text(
                StatusCode::BAD_GATEWAY,
                "no upstream address answered",
            ));
        };
        let left = Arc::new(AtomicU64::new(cap));
        let exceeded = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Capped::new(stream, left.clone(), exceeded.clone()));
        let (send, conn) = match hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .handshake::<_, Incoming>(io)
            .await
        {
            Ok(x) => x,
            Err(e) => {
                let why = format!("upstream: {e}");
                self.record(r, "end", 502, &why, None);
                return Err(text(StatusCode::BAD_GATEWAY, &why));
            }
        };
        {
            let me = self.clone();
            let caller = Arc::new(r.caller.clone());
            let budget = r.budget.clone();
            let exceeded = exceeded.clone();
            let target = r.target.clone();
            let facts = r.facts.clone();
            let now = r.now;
            tokio::spawn(async move {
                let _ = conn.await;
                if exceeded.load(Ordering::Relaxed) > 0 {
                    let r = Record {
                        caller: &caller,
                        budget,
                        kind: "http",
                        target,
                        facts,
                        now,
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
            },
            d,
        ))
    }

    async fn plain(
        self: &Arc<Self>,
        ctx: &ConnCtx,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let caller = &ctx.caller;
        let slot = &ctx.slot;
        let uri = req.uri().clone();
        let mut r = Record::new(caller, &ctx.budget, "http", shown(&uri.to_string()));
        if uri.to_string().len() > MAX_URL {
            return self.refuse(
                &r,
                StatusCode::URI_TOO_LONG,
                &format!("the URL is longer than {MAX_URL} bytes"),
                None,
            );
        }
        let Some(raw_auth) = uri.authority().map(|a| a.as_str().to_string()) else {
            return self.refuse(&r, StatusCode::BAD_REQUEST, "this is an egress proxy: send the request in absolute form (`GET http://host/path`), or CONNECT for https", None);
        };
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return self.refuse(
                    &r,
                    StatusCode::BAD_REQUEST,
                    "https goes through a CONNECT tunnel, not in absolute form",
                    None,
                )
            }
            _ => {
                return self.refuse(
                    &r,
                    StatusCode::BAD_REQUEST,
                    "only http:// is served in absolute form",
                    None,
                )
            }
        }
        let a = match target::authority(&raw_auth, Some(80)) {
            Ok(a) => a,
            Err(e) => return self.refuse(&r, StatusCode::BAD_REQUEST, &e.to_string(), None),
        };
        if let Err(why) = host_header_agrees(req.headers(), &a, Some(80)) {
            return self.refuse(&r, StatusCode::BAD_REQUEST, &why, None);
        }
        let raw_path = uri.path();
        if raw_path.split('/').any(|s| {
            s == "."
                || s == ".."
                || s.eq_ignore_ascii_case("%2e")
                || s.eq_ignore_ascii_case("%2e%2e")
                || s.eq_ignore_ascii_case(".%2e")
                || s.eq_ignore_ascii_case("%2e.")
        }) {
            return self.refuse(
                &r,
                StatusCode::BAD_REQUEST,
                "the path holds `.` or `..` segments; send it normalised",
                None,
            );
        }
        let path = match cordon_policy::canon::http_path(raw_path) {
            Ok(p) => p,
            Err(e) => return self.refuse(&r, StatusCode::BAD_REQUEST, &e.to_string(), None),
        };
        let method = req.method().as_str();
        if method.is_empty() || method.len() > 32 || !method.bytes().all(|b| b.is_ascii_uppercase())
        {
            return self.refuse(
                &r,
                StatusCode::BAD_REQUEST,
                "the method is not an upper-case HTTP method",
                None,
            );
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
            Err(_) => {
                return self.refuse(&r, StatusCode::BAD_REQUEST, "the path cannot be sent", None)
            }
        };
        let shown_host = a.host.to_string();
        let url = if a.port == 80 {
            format!("http://{shown_host}{path}")
        } else {
            format!("http://{shown_host}:{}{path}", a.port)
        };
        r.target = url.clone();
        r.facts = EgressFacts {
            url: Some(url),
            scheme: Some("http".into()),
            host: Some(a.host.fact()),
            port: i64::from(a.port),
            method: Some(method.to_string()),
            path: Some(path),
            ip: None,
        };
        let mut checked = match self.steps(&mut r, &a).await {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        let cap = self.cap(caller);
        let pooled = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut up = None;
        if let Some(mut p) = pooled {
            // Only to an address this request was just allowed to reach.
            if let Some(pos) = checked.iter().position(|(ip, _)| *ip == p.ip) {
                if p.port == a.port
                    && !p.send.is_closed()
                    && tokio::time::timeout(Duration::from_secs(1), p.send.ready())
                        .await
                        .is_ok_and(|r| r.is_ok())
                {
                    let (_, d) = checked.swap_remove(pos);
                    r.facts.ip = Some(p.ip.to_string());
                    // Written before the request is sent on it.
                    if !self.record(&r, "allow", 0, "allowed", Some(&d)) {
                        return self.unrecorded(&r);
                    }
                    p.left.store(cap, Ordering::Relaxed);
                    up = Some((p, d));
                }
            }
        }
        let (mut up, _d) = match up {
            Some(u) => u,
            None => match self.open_upstream(&mut r, &a, checked, cap).await {
                Ok(u) => u,
                Err(resp) => return resp,
            },
        };
        let exceeded = up.exceeded.clone();
        let (mut parts, body) = req.into_parts();
        parts.uri = origin;
        strip_hop_by_hop(&mut parts.headers);
        let host_value = if a.port == 80 {
            shown_host
        } else {
            format!("{shown_host}:{}", a.port)
        };
        if let Ok(v) = HeaderValue::from_str(&host_value) {
            parts.headers.insert(hyper::header::HOST, v);
        }
        let upstream_req = hyper::Request::from_parts(parts, body);
        match up.send.send_request(upstream_req).await {
            Ok(resp) => {
                // The answer's status, on the line after the `allow`. An
                // answer whose line cannot be written is not handed to the
                // workload (the request was recorded before it was sent).
                if !self.record(&r, "end", resp.status().as_u16(), "answered", None) {
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
                hyper::Response::from_parts(parts, body.boxed())
            }
            Err(e) => {
                let why = if exceeded.load(Ordering::Relaxed) > 0 {
                    format!("response cap of {cap} bytes exceeded")
                } else {
                    format!("upstream: {e}")
                };
                self.record(&r, "end", 502, &why, None);
                text(StatusCode::BAD_GATEWAY, &why)
            }
        }
    }
}

/// An upstream HTTP/1 connection of one client connection.
struct Upstream {
    ip: IpAddr,
    port: u16,
    send: hyper::client::conn::http1::SendRequest<Incoming>,
    /// What may still be read before the cap; reset for each response.
    left: Arc<AtomicU64>,
    exceeded: Arc<AtomicU64>,
}

/// One client connection's kept upstream connection.
type Slot = Arc<std::sync::Mutex<Option<Upstream>>>;

/// What one client connection is served with.
struct ConnCtx {
    caller: Arc<Caller>,
    /// The channel's budget of audit lines.
    budget: Arc<Budget>,
    slot: Slot,
    /// Its place among the channel's connections, held by its tunnel too.
    permit: Arc<tokio::sync::OwnedSemaphorePermit>,
    /// Changes (errs) when the channel is stopped.
    stopped: tokio::sync::watch::Receiver<()>,
}

/// Why a request is refused, and the decision that refused it if the
/// policy did.
type Refusal = (String, Option<Decision>);

/// What one request's audit line is built from.
struct Record<'c> {
    caller: &'c Caller,
    budget: Arc<Budget>,
    kind: &'static str,
    target: String,
    facts: EgressFacts,
    now: i64,
}

impl<'c> Record<'c> {
    fn new(
        caller: &'c Caller,
        budget: &Arc<Budget>,
        kind: &'static str,
        target: String,
    ) -> Record<'c> {
        Record {
            caller,
            budget: budget.clone(),
            kind,
            target,
            facts: EgressFacts {
                url: None,
                scheme: None,
                host: None,
                port: 0,
                method: None,
                path: None,
                ip: None,
            },
            now: now(),
        }
    }
}

/// How a line is charged to its sandbox's budget.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Charge {
    /// An `allow`: not written when the budget is spent, and then nothing
    /// is carried.
    Gate,
    /// A `deny`: not written when the budget is spent (the refusal
    /// stands, and is counted).
    Note,
    /// Written whatever the budget (something was carried; or the note
    /// that the budget is spent); its bytes are owed.
    Force,
}

enum Take {
    /// Write it; first say how many were refused unrecorded before.
    Write { refused_before: u64 },
    /// Do not; `spent_now`: the first refusal of this spell.
    Refused { spent_now: bool },
}

/// One sandbox channel's budget of audit bytes: a bucket holding at most
/// `burst`, refilled at `rate` a second. Forced lines may take it below
/// zero; the debt is paid (by time) before anything else of the sandbox's
/// is looked up, carried or written.
struct Budget {
    rate: f64,
    burst: f64,
    state: std::sync::Mutex<BudgetState>,
}

struct BudgetState {
    tokens: f64,
    at: std::time::Instant,
    /// Requests refused while it was spent, not yet said in the log.
    refused: u64,
    /// The current spell of being spent has been said in the log.
    noted: bool,
}

impl Budget {
    fn new(b: &AuditBounds) -> Budget {
        Budget {
            rate: b.sandbox_bytes_per_sec as f64,
            burst: b.sandbox_burst_bytes as f64,
            state: std::sync::Mutex::new(BudgetState {
                tokens: b.sandbox_burst_bytes as f64,
                at: std::time::Instant::now(),
                refused: 0,
                noted: false,
            }),
        }
    }

    fn refill(&self, s: &mut BudgetState) {
        let now = std::time::Instant::now();
        let dt = now.saturating_duration_since(s.at).as_secs_f64();
        s.at = now;
        s.tokens = (s.tokens + dt * self.rate).min(self.burst);
    }

    /// Refuses (counting it) when the budget is spent; `Err(true)` the
    /// first time in a spell.
    fn admit(&self) -> Result<(), bool> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        if s.tokens > 0.0 {
            return Ok(());
        }
        s.refused += 1;
        let first = !s.noted;
        s.noted = true;
        Err(first)
    }

    fn spent(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        s.tokens <= 0.0
    }

    fn take(&self, bytes: u64, charge: Charge) -> Take {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        if charge != Charge::Force && s.tokens <= 0.0 {
            s.refused += 1;
            let first = !s.noted;
            s.noted = true;
            return Take::Refused { spent_now: first };
        }
        s.tokens -= bytes as f64;
        if charge == Charge::Force {
            return Take::Write { refused_before: 0 };
        }
        s.noted = false;
        Take::Write {
            refused_before: std::mem::take(&mut s.refused),
        }
    }
}

/// The answer to a sandbox whose audit budget is spent.
fn budget_spent(b: &AuditBounds) -> hyper::Response<Body> {
    text(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "this sandbox's egress audit budget is spent ({} bytes a second after a burst of {}); nothing is carried or looked up until it refills",
            b.sandbox_bytes_per_sec, b.sandbox_burst_bytes
        ),
    )
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn shown(s: &str) -> String {
    s.chars()
        .take(300)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|n: Infallible| match n {})
        .boxed()
}

fn text(status: StatusCode, why: &str) -> hyper::Response<Body> {
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
fn host_header_agrees(
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

fn strip_hop_by_hop(h: &mut HeaderMap) {
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

/// An upstream transport whose reads are counted: past `cap` bytes it
/// fails, which closes the connection. The cap is here, on the socket,
/// so no path through any HTTP library can miss it.
pub struct Capped<S> {
    inner: S,
    left: Arc<AtomicU64>,
    exceeded: Arc<AtomicU64>,
}

impl<S> Capped<S> {
    /// `left` is what may still be read; whoever holds it may reset it
    /// between responses.
    pub fn new(inner: S, left: Arc<AtomicU64>, exceeded: Arc<AtomicU64>) -> Capped<S> {
        Capped {
            inner,
            left,
            exceeded,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let left = self.left.load(Ordering::Relaxed);
        if left == 0 {
            // One byte more than the cap is the proof it was exceeded;
            // read at most one to learn it (or EOF, which is fine).
            let mut one = [0u8; 1];
            let mut probe = ReadBuf::new(&mut one);
            return match Pin::new(&mut self.inner).poll_read(cx, &mut probe) {
                Poll::Ready(Ok(())) if probe.filled().is_empty() => Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    self.exceeded.store(1, Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::other("the response cap was exceeded")))
                }
                other => other,
            };
        }
        let limit = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(buf.remaining());
        let window = buf.initialize_unfilled_to(limit);
        let mut sub = ReadBuf::new(window);
        let res = Pin::new(&mut self.inner).poll_read(cx, &mut sub);
        let n = sub.filled().len();
        buf.advance(n);
        self.left.fetch_sub(n as u64, Ordering::Relaxed);
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
