//! Hosting the proxy in a process that is not async itself (the `cordon
//! run` process, a keeper): a small runtime of its own, and one accept
//! loop per sandbox channel.

use std::sync::Arc;

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::EgressSetup;

use crate::audit::Audit;
use crate::classify::Classifier;
use crate::proxy::{Caller, EgressChange, LiveEgress, Proxy, ProxyConfig, Timeouts};
use crate::resolve::{Dns, Resolver, StaticHosts};

/// How often this host's own addresses are read again.
const REFRESH_OWN: std::time::Duration = std::time::Duration::from_secs(10);

/// The most connections one sandbox channel serves at once.
pub const MAX_CONNECTIONS: usize = 256;

/// A proxy's configuration from a host's [`EgressSetup`] (called inside
/// the runtime: a DNS resolver needs one). `listens` are the proxy's own
/// listening addresses, never a target.
pub fn config_from_setup(
    setup: &EgressSetup,
    policy: Arc<Policy>,
    env: Deployment,
) -> Result<ProxyConfig, String> {
    Opened::open(setup, Vec::new(), policy.inspects_any())?.config(policy, env)
}

/// The runtime's worker threads: `CORDON_EGRESS_WORKERS` (1 to 64), else
/// one fewer than this machine's cores, between 1 and 4 — the proxy shares
/// the machine with the workloads it serves, and on 2 cores one worker gave
/// better latency than two at about the same bulk rate (see
/// docs/benchmarks.md).
fn workers() -> usize {
    std::env::var("CORDON_EGRESS_WORKERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().saturating_sub(1))
                .unwrap_or(1)
                .clamp(1, 4)
        })
}

/// What a proxy opens on the host, opened before it confines itself (so
/// nothing needs opening after: the audit log and the hosts file may be
/// unreadable to the uid it then runs as).
pub struct Opened {
    hosts: StaticHosts,
    audit: Audit,
    audit_bounds: cordon_sandbox::AuditBounds,
    classifier: Classifier,
    dns: Dns,
    upstreams: crate::tls::Upstreams,
}

impl Opened {
    /// Reads the hosts file, opens (creates) the audit log and reads this
    /// host's interface addresses; and this machine's trust roots when the
    /// policy inspects some host (`inspects`), and only then. `listens`:
    /// the proxy's own sockets.
    pub fn open(
        setup: &EgressSetup,
        listens: Vec<std::net::SocketAddr>,
        inspects: bool,
    ) -> Result<Opened, String> {
        let hosts = match &setup.hosts_file {
            Some(p) => StaticHosts::load(p)?,
            None => StaticHosts::default(),
        };
        let audit = match &setup.audit {
            Some(p) => Audit::open_bounded(p, &setup.audit_bounds)?,
            None => Audit::Log,
        };
        let classifier = Classifier::new(listens)
            .map_err(|e| format!("reading this host's interface addresses: {e}"))?;
        let dns = match &setup.nameservers {
            None => Dns::System,
            Some(list) if list.is_empty() => Dns::Off,
            Some(list) => Dns::Servers(list.clone()),
        };
        setup
            .audit_bounds
            .check()
            .map_err(|e| format!("the audit log's bounds: {e}"))?;
        Ok(Opened {
            hosts,
            audit,
            audit_bounds: setup.audit_bounds,
            classifier,
            dns,
            // Read now (the confined proxy may not read them later), and
            // only for a policy that inspects: a proxy that never verifies
            // an upstream holds none, and would refuse if asked to.
            upstreams: if inspects {
                crate::tls::Upstreams::load()
            } else {
                crate::tls::Upstreams::with_roots(
                    Vec::new(),
                    Some("the policy inspects no host, so no trust roots were read".into()),
                )
            },
        })
    }

    /// Starts the proxy's runtime (threads from here on) with what was
    /// opened. The system resolver's configuration is read now (reading is
    /// not restricted by the confinement).
    pub fn start(self, policy: Arc<Policy>, env: Deployment) -> Result<EgressHost, String> {
        EgressHost::start(move || self.config(policy, env))
    }

    /// The proxy's configuration from what was opened (inside a runtime: a
    /// DNS resolver needs one).
    pub fn config(self, policy: Arc<Policy>, env: Deployment) -> Result<ProxyConfig, String> {
        let timeouts = Timeouts::default();
        let resolver = Resolver::new(self.hosts, &self.dns, timeouts.resolve)?;
        Ok(ProxyConfig {
            policy,
            env,
            resolver: Arc::new(resolver),
            classifier: Arc::new(self.classifier),
            audit: Arc::new(self.audit),
            timeouts,
            max_connections: MAX_CONNECTIONS,
            audit_bounds: self.audit_bounds,
            upstreams: Arc::new(self.upstreams),
        })
    }
}

/// A proxy with its own runtime.
pub struct EgressHost {
    proxy: Arc<Proxy>,
    // Dropped last: the tasks it runs hold the proxy.
    rt: tokio::runtime::Runtime,
}

/// One channel being served; dropping it stops the accept loop and every
/// connection it started.
pub struct Serving {
    task: Option<tokio::task::JoinHandle<()>>,
    ca: Option<Arc<crate::ca::SandboxCa>>,
    control: Arc<HostControl>,
}

/// Changes one served channel's allowlist.
pub struct HostControl {
    proxy: Arc<Proxy>,
    live: Arc<LiveEgress>,
}

impl HostControl {
    /// See [`Proxy::change_egress`].
    pub fn change(&self, change: EgressChange, by: &str) -> Result<u64, String> {
        self.proxy.change_egress(&self.live, change, by)
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<crate::proxy::Generation> {
        self.live.current()
    }
}

impl Serving {
    /// The sandbox's authority's certificate (PEM), when the policy has
    /// the proxy inspect some host.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca.as_deref().map(crate::ca::SandboxCa::cert_pem)
    }

    /// What changes this channel's allowlist while it serves.
    pub fn control(&self) -> Arc<HostControl> {
        self.control.clone()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

impl EgressHost {
    /// Starts the runtime and builds the proxy inside it (a DNS resolver
    /// needs one).
    pub fn start(
        build: impl FnOnce() -> Result<ProxyConfig, String>,
    ) -> Result<EgressHost, String> {
        let workers = workers();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("cordon-egress")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("starting the egress proxy's runtime: {e}"))?;
        let cfg = {
            let _in = rt.enter();
            build()?
        };
        // This host's addresses are never dialled; an interface may gain
        // one while the proxy runs, so they are read again now and then.
        let classifier = cfg.classifier.clone();
        rt.spawn(async move {
            let mut every = tokio::time::interval(REFRESH_OWN);
            every.tick().await;
            loop {
                every.tick().await;
                if let Err(e) = classifier.refresh() {
                    tracing::warn!(target: "cordon::egress", "re-reading this host's addresses: {e}; the last ones are kept");
                }
            }
        });
        Ok(EgressHost {
            proxy: Proxy::new(cfg),
            rt,
        })
    }

    /// Serves `listener` (a sandbox's channel) for `caller`.
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        caller: Caller,
    ) -> Result<Serving, String> {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the egress channel: {e}"))?;
        let _in = self.rt.enter();
        let l = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("the egress channel: {e}"))?;
        let ca = self.proxy.sandbox_ca(&caller)?;
        let live = LiveEgress::new(Arc::new(caller));
        let h = self
            .rt
            .spawn(self.proxy.clone().serve_live(l, live.clone(), ca.clone()));
        Ok(Serving {
            task: Some(h),
            ca,
            control: Arc::new(HostControl {
                proxy: self.proxy.clone(),
                live,
            }),
        })
    }

    /// Stops a channel and waits (at most `within`) until it is gone: its
    /// listener, connections and tunnels closed.
    pub fn stop(&self, mut serving: Serving, within: std::time::Duration) -> Result<(), String> {
        let Some(h) = serving.task.take() else {
            return Ok(());
        };
        h.abort();
        self.rt
            .block_on(async { tokio::time::timeout(within, h).await })
            .map(|_| ())
            .map_err(|_| format!("the channel did not stop within {within:?}"))
    }
}
