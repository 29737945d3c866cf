//! Dialling: only an address the request was allowed to reach, and only
//! once its `allow` line is written.

use std::io;
use std::net::IpAddr;

use cordon_policy::Decision;
use tokio::net::TcpStream;

use super::record::Record;
use super::{Caller, Proxy};

/// What came of dialling a request's checked addresses.
pub(super) enum Dialled {
    /// The first address that answered, with the decision that allowed it.
    Up {
        ip: IpAddr,
        stream: TcpStream,
        d: Decision,
    },
    /// An address's `allow` line could not be written: it was not dialled,
    /// and nothing after it was.
    Unrecorded,
    /// No address answered: why, one per address.
    NoAnswer(Vec<String>),
}

impl Proxy {
    /// Dials `checked` in the resolver's order until one answers, each
    /// address's `allow` line (with `status`) written before it is dialled.
    pub(super) async fn dial_recorded(
        &self,
        r: &mut Record<'_>,
        port: u16,
        checked: Vec<(IpAddr, Decision)>,
        status: u16,
    ) -> Dialled {
        let mut failures = Vec::new();
        for (ip, d) in checked {
            r.facts.ip = Some(ip.to_string());
            if !self.record(r, "allow", status, "allowed", Some(&d)) {
                return Dialled::Unrecorded;
            }
            match self.dial(ip, port).await {
                Ok(stream) => return Dialled::Up { ip, stream, d },
                Err(e) => failures.push(format!("{ip}: {e}")),
            }
        }
        Dialled::NoAnswer(failures)
    }

    async fn dial(&self, ip: IpAddr, port: u16) -> io::Result<TcpStream> {
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
