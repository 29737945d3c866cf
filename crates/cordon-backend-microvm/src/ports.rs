//! Ports at the microVM: a connection to a port the workload listens on
//! in the guest is opened by the guest agent (`PortOpen`, inside the
//! sandbox's network namespace there) and relayed over the channel as the
//! egress relay's connections are. The caller gets a TCP socket: one end
//! of a loopback pair made in a network namespace of the sandbox's own on
//! the host (nothing else can reach it), whose other end this relays.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use cordon_sandbox::SandboxError;

use crate::channel::{Channel, ConnSink};

/// Relays `stream` as connection `conn` of the channel: what the guest
/// sends on it is written to `stream` (its write side shut at the guest's
/// close), what `stream` reads goes to the guest, then a close — the
/// whole connection's (`full`: the egress relay's, whose far side is gone)
/// or the host's half (a forwarded port's client may still read).
pub(crate) fn relay_stream(
    ch: Weak<Channel>,
    conn: u64,
    stream: TcpStream,
    full: bool,
) -> Option<ConnSink> {
    let (tx, rx) = std::sync::mpsc::channel::<Option<Vec<u8>>>();
    let mut writer = stream.try_clone().ok()?;
    std::thread::spawn(move || {
        use std::io::Write;
        while let Ok(Some(bytes)) = rx.recv() {
            if writer.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = writer.shutdown(Shutdown::Write);
    });
    let mut reader = stream;
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let Some(ch) = ch.upgrade() else { return };
            if ch.conn_data(conn, &buf[..n]).is_err() {
                return;
            }
        }
        if let Some(ch) = ch.upgrade() {
            match full {
                true => ch.conn_close(conn),
                false => ch.conn_half_close(conn),
            }
        }
    });
    Some(tx)
}

/// The host's side of forwarded connections: a loopback listener in a
/// network namespace made for the sandbox, which holds nothing else.
pub(crate) struct PortPairs {
    ns: OwnedFd,
    listener: TcpListener,
    port: u16,
    /// One pair at a time: a connect and the accept that takes it.
    one: Mutex<()>,
}

impl PortPairs {
    pub(crate) fn make() -> Result<PortPairs, String> {
        let port = cordon_linux::netns::random_port();
        let made = cordon_linux::netns::private_with_listener(port)
            .map_err(|e| format!("making the forward's namespace: {e}"))?;
        Ok(PortPairs {
            ns: made.ns,
            listener: made.listener,
            port,
            one: Mutex::new(()),
        })
    }

    /// A connected pair: (the end this relays, the caller's).
    fn pair(&self) -> std::io::Result<(TcpStream, TcpStream)> {
        let _one = self.one.lock().unwrap_or_else(|p| p.into_inner());
        let theirs = cordon_linux::netns::connect_in(
            self.ns.as_fd(),
            SocketAddr::from(([127, 0, 0, 1], self.port)),
        )?;
        let (ours, peer) = self.listener.accept()?;
        // Nothing else is in the namespace to connect; checked all the same.
        if Some(peer) != theirs.local_addr().ok() {
            return Err(std::io::Error::other("the forward's pair did not match"));
        }
        Ok((ours, theirs))
    }
}

/// Opens `port` in the guest's sandbox through `ch`, and hands back the
/// caller's end of a pair relayed to it.
pub(crate) fn open(
    ch: &Arc<Channel>,
    pairs: &PortPairs,
    port: u16,
) -> Result<TcpStream, SandboxError> {
    let (ours, theirs) = pairs.pair().map_err(|e| SandboxError::Failed {
        operation: "port",
        reason: format!("the forward's socket pair: {e}"),
    })?;
    let conn = ch.host_conn();
    let sink = relay_stream(Arc::downgrade(ch), conn, ours, false).ok_or_else(|| {
        SandboxError::Failed {
            operation: "port",
            reason: "the forward's socket could not be shared".into(),
        }
    })?;
    ch.port_open(conn, port, sink)?;
    Ok(theirs)
}
