//! Listening: plain HTTP or TLS, connections, graceful shutdown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::metrics::follow_audit;
use crate::outputs::sweep_artifacts;
use crate::routes::app;
use crate::served::Served;
use crate::{config, tls};

/// How long running requests (execs among them) may go on after the
/// shutdown signal before the server stops anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Binds the configured address and serves until `shutdown` resolves;
/// then stops accepting, lets running requests finish for up to
/// [`SHUTDOWN_GRACE`], and disposes of every sandbox it made.
/// `on_bound` is told the address actually bound (port 0 picks one).
pub async fn serve(
    state: Arc<Served>,
    on_bound: impl FnOnce(std::net::SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(state.config.listen).await?;
    if let Some(path) = state.egress_audit.clone() {
        tokio::spawn(follow_audit(state.clone(), path));
    }
    tokio::spawn(sweep_artifacts(state.clone()));
    on_bound(listener.local_addr()?);
    accept(state.clone(), listener, shutdown).await;
    finish(state).await
}

/// How long a client may take to finish its TLS handshake.
pub(crate) const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// How long the listener waits after a failed accept (out of descriptors,
/// most likely) before it tries again, rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The listener, plain HTTP or HTTPS: each connection counted against
/// `limits.max_connections` and `limits.max_connections_per_peer` from
/// accept until it closes (event streams included), refused at once past
/// either; over TLS its handshake within [`HANDSHAKE_WITHIN`] (a client
/// certificate required when the acceptor was built with a client CA, its
/// fingerprint in every request's extensions); then HTTP/1.1, with
/// `limits.header_timeout` for a request's headers and for the idle time
/// between requests. On `shutdown`: stop accepting, let connections
/// finish their requests for up to [`SHUTDOWN_GRACE`].
pub(crate) async fn accept(
    state: Arc<Served>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // Each connection holds a receiver: told to finish at the shutdown,
    // and waited for until the last is gone.
    let (drain, draining) = tokio::sync::watch::channel(false);
    let routes = app(state.clone());
    let limits = within_descriptors(state.config.limits, open_files_limit());
    let open = Arc::new(Connections::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(_) => {
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let Some(slot) = open.take(peer.ip(), &limits) else {
                    if state.tls.is_none() {
                        // Best effort, never waited for: the kernel's
                        // buffer of a fresh socket holds it.
                        let _ = tcp.try_write(too_many_connections().as_bytes());
                    }
                    continue;
                };
                let (tls, routes, stop, http) =
                    (state.tls.clone(), routes.clone(), draining.clone(), http.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let Some(acceptor) = tls else {
                        let service = hyper_util::service::TowerToHyperService::new(routes);
                        let conn = http
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                            .with_upgrades();
                        finishing(conn, stop).await;
                        return;
                    };
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let peer = tls::PeerCert(
                        stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(tls::fingerprint),
                    );
                    let service = hyper_util::service::TowerToHyperService::new(
                        routes.layer(axum::Extension(peer)),
                    );
                    let conn = http
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .with_upgrades();
                    finishing(conn, stop).await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(draining);
    let _ = drain.send(true);
    tokio::select! {
        () = drain.closed() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
    }
}

/// Serves one connection until it ends; once `stop` turns true, it is told
/// to finish (the request it is in, then close) and served until it has.
/// Upgradeable (a preview URL's WebSocket): an upgraded connection leaves
/// this at its upgrade, its tunnel a task of the preview's own.
async fn finishing<I, S, B>(
    conn: hyper::server::conn::http1::UpgradeableConnection<I, S>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// What a plain-HTTP connection past a connection cap is told before it
/// is closed.
fn too_many_connections() -> String {
    let body = r#"{"error":"too many open connections to this server (from this address, or in all); close idle ones, reuse one (keep-alive), or retry in a little while"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The connection caps this process can hold: at most half its
/// descriptors (`ulimit -n`) go to connections, so sandboxes, keepers and
/// the state directory keep the rest; a per-peer cap lowered in the same
/// proportion as the total, so one peer cannot take every connection the
/// lower total leaves. Said on stderr when it lowers them.
fn within_descriptors(mut limits: config::Limits, descriptors: Option<usize>) -> config::Limits {
    let Some(room) = descriptors.map(|d| (d / 2).max(1)) else {
        return limits;
    };
    if limits.max_connections > room {
        let per_peer =
            limits.max_connections_per_peer.saturating_mul(room) / limits.max_connections;
        eprintln!(
            "cordon serve: `limits.max_connections` {} is more than half this process's {} descriptors (`ulimit -n`); holding at most {room} connections, {} from one peer",
            limits.max_connections,
            descriptors.unwrap_or_default(),
            per_peer.max(1)
        );
        limits.max_connections = room;
        limits.max_connections_per_peer = per_peer.max(1);
    }
    limits.max_connections_per_peer = limits.max_connections_per_peer.min(limits.max_connections);
    limits
}

/// This process's soft limit on open descriptors, from
/// `/proc/self/limits`; `None` when unlimited or unreadable.
fn open_files_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Connections open now: in all, and by peer address.
#[derive(Default)]
struct Connections {
    open: Mutex<(usize, std::collections::HashMap<std::net::IpAddr, usize>)>,
}

/// One open connection's place, given back when it is dropped.
struct Slot {
    of: Arc<Connections>,
    peer: std::net::IpAddr,
}

impl Connections {
    /// A place for one more connection from `peer`, if neither cap is
    /// reached.
    fn take(self: &Arc<Self>, peer: std::net::IpAddr, limits: &config::Limits) -> Option<Slot> {
        let peer = peer.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, by_peer) = &mut *open;
        let mine = by_peer.entry(peer).or_default();
        if *total >= limits.max_connections || *mine >= limits.max_connections_per_peer {
            if *mine == 0 {
                by_peer.remove(&peer);
            }
            return None;
        }
        *mine += 1;
        *total += 1;
        Some(Slot {
            of: self.clone(),
            peer,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.of.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, by_peer) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = by_peer.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_peer.remove(&self.peer);
            }
        }
    }
}

/// After serving: dispose of what the configuration says, remove landed
/// artifacts.
pub(crate) async fn finish(state: Arc<Served>) -> std::io::Result<()> {
    // Kept sandboxes are left to the replicas, a restarted server, their
    // idle timeout or `cordon sandbox gc`, unless the configuration says.
    if state.state.is_none() || state.config.sandboxes.dispose_on_shutdown {
        let reclaim = state.clone();
        let _ = tokio::task::spawn_blocking(move || reclaim.dispose_all()).await;
    }
    // What was landed and not fetched goes with the server.
    state.artifacts.remove_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_take_at_most_half_the_descriptors_and_one_peer_its_share() {
        let defaults = config::Limits::default();
        let held = within_descriptors(defaults, Some(120));
        assert_eq!(
            (held.max_connections, held.max_connections_per_peer),
            (60, 7)
        );
        let held = within_descriptors(defaults, Some(1 << 20));
        assert_eq!(held, defaults);
        assert_eq!(within_descriptors(defaults, None), defaults);
        let one = within_descriptors(defaults, Some(1));
        assert_eq!((one.max_connections, one.max_connections_per_peer), (1, 1));
        assert!(open_files_limit().is_some_and(|n| n > 0));
    }
}
