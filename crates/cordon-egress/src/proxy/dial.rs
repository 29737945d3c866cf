//! Dialling a checked address, and the response cap it is read under.

use std::io;
use std::net::IpAddr;

use tokio::net::TcpStream;

use super::{Caller, Proxy};

impl Proxy {
    pub(super) async fn dial(&self, ip: IpAddr, port: u16) -> io::Result<TcpStream> {
        let s = tokio::time::timeout(self.cfg.timeouts.connect, TcpStream::connect((ip, port)))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        let _ = s.set_nodelay(true);
        Ok(s)
    }

    /// The policy's `max_response_bytes` for the caller.
    pub(super) fn cap(&self, caller: &Caller) -> u64 {
        self.cfg
            .policy
            .bounds_for(&caller.identity, &self.cfg.env)
            .max_response_bytes
    }
}
