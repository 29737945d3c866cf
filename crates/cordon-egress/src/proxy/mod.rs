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
//!
//! One concern a file, each using only those listed before it (and this
//! module's types: the config, [`Proxy`], a connection's context):
//!
//! - `http`: the body type, the proxy's own answers, the `Host` check,
//!   hop-by-hop headers;
//! - `capped`: the response cap on the transport ([`Capped`]);
//! - `budget`: each sandbox channel's budget of audit bytes;
//! - `record`: the audit lines (written before anything is carried) and
//!   the refusals;
//! - `decide`: steps 2 to 5;
//! - `live`: the channel's allowlist, replaced while it serves (a
//!   generation at a time; open connections decided again on a change);
//! - `dial`: dialling a checked address once its `allow` line is written;
//! - `tunnel`: the CONNECT path; `plain`: the absolute-form HTTP path;
//! - `serve`: the listener, a connection's service, and step 0.

mod broker;
mod budget;
mod capped;
mod decide;
mod dial;
mod http;
mod inspect;
mod live;
mod plain;
mod record;
mod serve;
mod tunnel;
mod upgrade;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{AuditBounds, EgressEntry};

use crate::audit::Audit;
use crate::classify::Classifier;
use crate::resolve::Resolve;

use budget::Budget;
pub use capped::Capped;
pub use live::{EgressChange, Generation, LiveEgress};

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
    /// The sandbox's secrets brokered here: the workload holds each one's
    /// placeholder; the proxy puts the value in its place only toward
    /// where the policy allows (see `broker`).
    pub brokered: Vec<BrokeredSecret>,
}

/// A secret the proxy brokers for one sandbox. `Debug` shows no value.
#[derive(Clone)]
pub struct BrokeredSecret {
    pub name: String,
    pub placeholder: String,
    pub value: Vec<u8>,
    /// Canonical host names.
    pub to: Vec<String>,
}

impl std::fmt::Debug for BrokeredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokeredSecret")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
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
    /// The verifying TLS clients toward inspected hosts.
    pub upstreams: Arc<crate::tls::Upstreams>,
}

/// The largest request head read.
const MAX_HEAD: usize = 64 * 1024;
/// The longest URL taken: it is written (twice: `url` and `path`) in the
/// request's audit lines, which must stay well under a sandbox's burst.
const MAX_URL: usize = 8 * 1024;

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

    /// A fresh authority for `caller`'s sandbox when the policy has the
    /// proxy inspect some host; none otherwise.
    pub fn sandbox_ca(&self, caller: &Caller) -> Result<Option<Arc<crate::ca::SandboxCa>>, String> {
        if !self.cfg.policy.inspects_any() {
            return Ok(None);
        }
        let hosts: Vec<String> = self
            .cfg
            .policy
            .inspections
            .iter()
            .map(|i| i.host.clone())
            .collect();
        crate::ca::SandboxCa::new(&caller.sandbox, &hosts).map(|c| Some(Arc::new(c)))
    }
}

/// An upstream HTTP/1 connection of one client connection.
struct Upstream {
    ip: IpAddr,
    port: u16,
    send: hyper::client::conn::http1::SendRequest<http::Body>,
    /// What may still be read before the cap; reset for each response.
    left: Arc<AtomicU64>,
    exceeded: Arc<AtomicU64>,
    /// The task driving the connection: aborting it closes it.
    conn: tokio::task::AbortHandle,
}

/// One client connection's kept upstream connection.
type Slot = Arc<std::sync::Mutex<Option<Upstream>>>;

/// What one client connection is served with.
struct ConnCtx {
    /// The channel's allowlist: each request is decided by the generation
    /// current when it starts.
    live: Arc<LiveEgress>,
    /// The upstream connections this client connection opened, and where
    /// to: closed with it when a change of allowlist no longer admits one.
    opened: std::sync::Mutex<Vec<(crate::target::Authority, tokio::task::AbortHandle)>>,
    /// The channel's budget of audit lines.
    budget: Arc<Budget>,
    slot: Slot,
    /// Its place among the channel's connections, held by its tunnel too.
    permit: Arc<tokio::sync::OwnedSemaphorePermit>,
    /// Changes (errs) when the channel is stopped.
    stopped: tokio::sync::watch::Receiver<()>,
    /// The sandbox's authority, when the policy inspects some host.
    ca: Option<Arc<crate::ca::SandboxCa>>,
}
