//! The listener: accepting a channel's connections (at most
//! `max_connections` at once, tunnels included), serving each with HTTP/1,
//! and step 0 of every request, before anything of it is parsed.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use super::budget::{budget_spent, Budget};
use super::http::{shown, text, Body};
use super::live::{Generation, LiveEgress};
use super::record::Record;
use super::{Caller, ConnCtx, Proxy, MAX_HEAD};

impl Proxy {
    /// Accepts and serves connections on `listener` for `caller` until the
    /// task is dropped; the connections and tunnels it started end with it.
    /// At most `max_connections` are open at once, tunnels included.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        caller: Arc<Caller>,
        ca: Option<Arc<crate::ca::SandboxCa>>,
    ) {
        self.serve_live(listener, LiveEgress::new(caller), ca).await;
    }

    /// [`Proxy::serve`] with an allowlist that [`Proxy::change_egress`]
    /// replaces while the channel serves.
    pub async fn serve_live(
        self: Arc<Self>,
        listener: TcpListener,
        live: Arc<LiveEgress>,
        ca: Option<Arc<crate::ca::SandboxCa>>,
    ) {
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
                        live: live.clone(),
                        opened: std::sync::Mutex::new(Vec::new()),
                        budget: budget.clone(),
                        slot: Arc::new(std::sync::Mutex::new(None)),
                        permit: Arc::new(permit),
                        stopped: stopped.clone(),
                        ca: ca.clone(),
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
    /// Serves one client connection. On a change of allowlist, a
    /// connection that opened an upstream connection the new generation
    /// does not admit is closed (both sides, mid-answer or kept alive);
    /// one whose upstream connections are all still admitted stays. (A
    /// tunnel watches for itself: see `tunnel.rs`.)
    async fn serve_connection(self: Arc<Self>, stream: TcpStream, ctx: ConnCtx) {
        let _ = stream.set_nodelay(true);
        let me = self.clone();
        // Subscribed before the first request: every change after any
        // request's decision is seen here.
        let mut changes = ctx.live.watch();
        let ctx = Arc::new(ctx);
        let watched = ctx.clone();
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
        tokio::pin!(conn);
        loop {
            tokio::select! {
                r = &mut conn => {
                    if let Err(e) = r {
                        tracing::debug!(target: "cordon::egress", "client connection: {e}");
                    }
                    return;
                }
                Ok(()) = changes.changed() => {
                    let g = changes.borrow_and_update().clone();
                    if !self.still_admitted(&watched, &g) {
                        return;
                    }
                }
            }
        }
    }

    /// Whether every open upstream connection `ctx` opened is admitted by
    /// `g`; those that are not are closed (and audited) here.
    fn still_admitted(&self, ctx: &ConnCtx, g: &Generation) -> bool {
        let mut opened = ctx.opened.lock().unwrap_or_else(|p| p.into_inner());
        opened.retain(|(_, h)| !h.is_finished());
        let mut all = true;
        for (a, h) in opened.iter() {
            if let Err(why) = g.admits(a, false) {
                all = false;
                h.abort();
                let mut r = Record::new(&g.caller, &ctx.budget, "http", a.to_string());
                r.target = a.to_string();
                self.record(
                    &r,
                    "end",
                    0,
                    &format!(
                        "connection closed: the egress allowlist changed (generation {}) and no longer admits it: {why}",
                        g.number
                    ),
                    None,
                );
            }
        }
        if !all {
            opened.clear();
            *ctx.slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        all
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
        // Subscribed before the generation is read: a tunnel this request
        // opens sees every change after its decision.
        let changes = ctx.live.watch();
        let g = changes.borrow().clone();
        let r = Record::new(&g.caller, &ctx.budget, kind, shown(&req.uri().to_string()));
        if let Some(refused) = self.refused_before_anything(&r) {
            return refused;
        }
        if let Some(why) = &g.closed {
            return self.refuse(&r, StatusCode::FORBIDDEN, why, None);
        }
        // Nothing is put in on these paths: a placeholder in a tunnel's
        // target (its name, then its SNI) or a plain request is refused
        // before anything is looked up.
        if let Some((b, place)) =
            super::broker::placeholder_in_request(&g.caller, req.uri(), req.headers())
        {
            let host = req.uri().host().unwrap_or("?").to_string();
            let why = super::broker::exfiltration(b, &place, &shown(&host));
            return self.refuse(&r, StatusCode::FORBIDDEN, &why, None);
        }
        if req.method() == Method::CONNECT {
            self.connect(ctx, &g, changes, req).await
        } else {
            self.plain(ctx, &g, req).await
        }
    }

    /// Before anything of a request is parsed, looked up or carried: a
    /// sandbox whose audit budget is spent, or a proxy whose audit log
    /// cannot be written, is refused here (and says so), so neither can
    /// be used to look names up or reach anything unrecorded.
    pub(super) fn refused_before_anything(&self, r: &Record<'_>) -> Option<hyper::Response<Body>> {
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
}
