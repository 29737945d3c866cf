//! The CONNECT path: decided for each address before the `200`, then a
//! tunnel that reads the client's TLS ClientHello, dials only when it
//! names the CONNECT host, and splices with the response cap.

use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cordon_policy::{Decision, EgressFacts};
use hyper::body::Incoming;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::dial::Dialled;
use super::http::{empty, host_header_agrees, shown, Body};
use super::inspect::Inspecting;
use super::live::Generation;
use super::record::Record;
use super::{ConnCtx, Proxy};
use crate::sni::{self, Hello};
use crate::splice::{self, Moved, SpliceEnd};
use crate::target::{self, Authority, Host};

impl Proxy {
    pub(super) async fn connect(
        self: &Arc<Self>,
        ctx: &ConnCtx,
        g: &Generation,
        mut changes: tokio::sync::watch::Receiver<Arc<Generation>>,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let caller = &g.caller;
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
            query: None,
            headers: None,
        };
        // Decided for each address before the 200, so a refusal is a 403.
        let inspected = match (&ctx.ca, &a.host) {
            (Some(_), Host::Name(n)) => self.cfg.policy.inspection(n).is_some(),
            _ => false,
        };
        let checked = match self.steps(&mut r, &a, inspected).await {
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
        let ca = ctx.ca.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let owner = caller.clone();
            let r = Record {
                caller: &caller,
                budget,
                kind: "connect",
                target,
                facts,
                now,
                secrets: Vec::new(),
            };
            match hyper::upgrade::on(req).await {
                Ok(up) => match up.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        let end = Record {
                            caller: &caller,
                            budget: r.budget.clone(),
                            kind: "connect",
                            target: r.target.clone(),
                            facts: r.facts.clone(),
                            now: r.now,
                            secrets: Vec::new(),
                        };
                        let tunnel = me.tunnel(
                            r,
                            a.clone(),
                            checked,
                            parts.io.into_inner(),
                            parts.read_buf,
                            ca.map(|ca| (ca, owner)),
                        );
                        tokio::pin!(tunnel);
                        loop {
                            tokio::select! {
                                () = &mut tunnel => break,
                                _ = stopped.changed() => break,
                                // A change of allowlist: decided again for
                                // this tunnel's own target; closed unless
                                // the new generation admits it.
                                Ok(()) = changes.changed() => {
                                    let g = changes.borrow_and_update().clone();
                                    if let Err(why) = g.admits(&a, true) {
                                        me.record(&end, "end", 200, &format!(
                                            "tunnel closed: the egress allowlist changed (generation {}) and no longer admits it: {why}",
                                            g.number
                                        ), None);
                                        break;
                                    }
                                }
                            }
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

    /// `ca`: the sandbox's authority (and the caller, owned), when the
    /// policy inspects some host.
    async fn tunnel(
        self: &Arc<Self>,
        mut r: Record<'_>,
        a: Authority,
        checked: Vec<(IpAddr, Decision)>,
        mut client: TcpStream,
        early: Bytes,
        ca: Option<(Arc<crate::ca::SandboxCa>, Arc<super::Caller>)>,
    ) {
        let (hello, verdict) = self.client_hello(&a, &mut client, early).await;
        if let Err(why) = verdict {
            // The 200 is gone: closing is the refusal. Nothing was dialled.
            self.record(&r, "deny", 0, &format!("tunnel closed: {why}"), None);
            let _ = client.shutdown().await;
            return;
        }
        if let (Some((ca, caller)), Host::Name(name)) = (ca, &a.host) {
            if let Some(i) = self.cfg.policy.inspection(name) {
                let how = Inspecting {
                    ca,
                    roots: i.roots_pem.clone(),
                    caller,
                };
                return self.inspect(r, a, checked, client, hello, how).await;
            }
        }
        // Each address's `allow` line is written before it is dialled: a
        // line that cannot be written (the log failing, or the sandbox's
        // audit budget spent) closes the tunnel with nothing dialled.
        let moved = Moved::default();
        let mut up = match self.dial_recorded(&mut r, a.port, checked, 200).await {
            Dialled::Up { stream, .. } => stream,
            Dialled::Unrecorded => {
                tracing::error!(target: "cordon::egress", "tunnel to {a} closed: its audit line could not be written; nothing was dialled");
                let _ = client.shutdown().await;
                return;
            }
            Dialled::NoAnswer(failures) => {
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
            }
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
        moved.up.fetch_add(hello.len() as u64, Ordering::Relaxed);
        let reason = match splice::tunnel(&client, &up, cap, &moved).await {
            Ok(()) => "tunnel closed".to_string(),
            Err(SpliceEnd::CapExceeded) => {
                format!("response cap of {cap} bytes exceeded; the tunnel was closed")
            }
            Err(SpliceEnd::Io(e)) => {
                tracing::debug!(target: "cordon::egress", "tunnel to {}: {e}", a);
                format!("tunnel closed: {e}")
            }
        };
        self.record_end(&r, 200, &reason, &moved);
    }

    /// The client's first bytes, before anything is dialled (with what it
    /// sent along with the CONNECT, if anything), and whether they are a
    /// TLS ClientHello naming the CONNECT host: why not, if they are not.
    async fn client_hello(
        &self,
        a: &Authority,
        client: &mut TcpStream,
        early: Bytes,
    ) -> (Vec<u8>, Result<(), String>) {
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
        (hello, verdict)
    }
}
