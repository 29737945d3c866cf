//! Listening: plain HTTP or TLS, connections, graceful shutdown.

use super::*;

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
    if let Some(acceptor) = state.tls.clone() {
        serve_tls(state.clone(), listener, acceptor, shutdown).await;
        return finish(state).await;
    }
    let (signalled, told) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = signalled.send(());
    };
    let server = axum::serve(listener, app(state.clone())).with_graceful_shutdown(signal);
    let served = tokio::select! {
        r = server => r,
        () = async {
            let _ = told.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => Ok(()),
    };
    finish(state).await?;
    served
}

/// How long a client may take to finish its TLS handshake.
pub(crate) const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// The HTTPS listener: each connection's handshake (a client certificate
/// required when the acceptor was built with a client CA), then HTTP/1.1
/// with the certificate's fingerprint in every request's extensions. On
/// `shutdown`: stop accepting, let connections finish their requests for
/// up to [`SHUTDOWN_GRACE`].
pub(crate) async fn serve_tls(
    state: Arc<Served>,
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let routes = app(state);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let (acceptor, routes, watcher) = (acceptor.clone(), routes.clone(), graceful.watcher());
                tokio::spawn(async move {
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
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
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
