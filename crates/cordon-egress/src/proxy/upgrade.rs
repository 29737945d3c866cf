//! An HTTP/1.1 `Upgrade` (a WebSocket) inside an inspected tunnel. The
//! upgrade request is decided like every request (its `upgrade` header
//! is among the facts); an allowed one goes up with its `Upgrade` and
//! `Connection: upgrade`, and when the upstream answers `101` both sides
//! are taken over from hyper and carried byte for byte until either ends
//! — inside the tunnel's own task, so a change of allowlist that closes
//! the tunnel closes the upgraded connection with it. What the upstream
//! sends is held to the caller's response cap, as a tunnel's is.

use std::sync::Mutex;
use std::time::Duration;

use hyper::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long the other direction may go on once one has ended (a close
/// handshake's last frames), and how long the two upgrades may take.
const LINGER: Duration = Duration::from_secs(10);

/// The `Upgrade` a request asks for: its value, when its `Connection`
/// names `upgrade` (as RFC 9110 has it).
pub(super) fn asked(headers: &HeaderMap) -> Option<HeaderValue> {
    let upgrade = headers.get(UPGRADE)?.clone();
    let named = headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    named.then_some(upgrade)
}

/// Puts back the two headers hop-by-hop stripping took, for an upgrade.
pub(super) fn restore(headers: &mut HeaderMap, upgrade: HeaderValue) {
    headers.insert(UPGRADE, upgrade);
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
}

/// The two halves of a switched connection, kept for the tunnel to carry
/// once hyper has written the `101` and let go of both.
#[derive(Default)]
pub(super) struct Switched(Mutex<Option<(OnUpgrade, OnUpgrade)>>);

impl Switched {
    pub(super) fn set(&self, client: OnUpgrade, upstream: OnUpgrade) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((client, upstream));
    }

    pub(super) fn take(&self) -> Option<(OnUpgrade, OnUpgrade)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Carries a switched connection until either side ends; what ended it,
/// for the tunnel's `end` line.
pub(super) async fn carry((client, upstream): (OnUpgrade, OnUpgrade), cap: u64) -> String {
    let both = async { tokio::try_join!(client, upstream) };
    let (client, upstream) = match tokio::time::timeout(LINGER, both).await {
        Ok(Ok(both)) => both,
        Ok(Err(e)) => return format!("upgraded connection not carried: {e}"),
        Err(_) => return "upgraded connection not carried: the upgrade timed out".into(),
    };
    match relay(TokioIo::new(client), TokioIo::new(upstream), cap).await {
        Ok(()) => "upgraded connection closed".into(),
        Err(why) => why,
    }
}

/// Copies `client` to `upstream` and back until either ends (the other
/// then has [`LINGER`] to finish); past `cap` bytes from the upstream it
/// stops.
async fn relay<C, U>(client: C, upstream: U, cap: u64) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (ur, mut uw) = tokio::io::split(upstream);
    let mut capped = ur.take(cap);
    let up = async {
        let r = tokio::io::copy(&mut cr, &mut uw).await;
        let _ = uw.shutdown().await;
        r
    };
    let down = async {
        let r = tokio::io::copy(&mut capped, &mut cw).await;
        let _ = cw.shutdown().await;
        r
    };
    tokio::pin!(up, down);
    let sent = tokio::select! {
        r = &mut down => r,
        r = &mut up => {
            r.map_err(|e| format!("upgraded connection closed: {e}"))?;
            match tokio::time::timeout(LINGER, &mut down).await {
                Ok(r) => r,
                Err(_) => return Ok(()),
            }
        }
    };
    match sent {
        Ok(n) if n >= cap => Err(format!(
            "response cap of {cap} bytes exceeded; the upgraded connection was closed"
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("upgraded connection closed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_upgrade_is_asked_only_with_connection_naming_it() {
        let mut h = HeaderMap::new();
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        assert!(asked(&h).is_none());
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        assert_eq!(asked(&h).unwrap(), "websocket");
        h.insert(CONNECTION, HeaderValue::from_static("upgraded"));
        assert!(asked(&h).is_none());
    }

    #[tokio::test]
    async fn the_relay_carries_both_ways_and_stops_past_the_cap() {
        let (client, mut workload) = tokio::io::duplex(1 << 16);
        let (upstream, mut server) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client, upstream, 16));
        workload.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        server.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        server.write_all(b"pong").await.unwrap();
        workload.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
        // Past 16 bytes from the upstream: cut, said so.
        server.write_all(&[b'x'; 32]).await.unwrap();
        let end = relay.await.unwrap().unwrap_err();
        assert!(end.contains("cap of 16"), "{end}");
        let mut rest = Vec::new();
        workload.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest.len(), 12, "only the cap's bytes came down");
    }
}
