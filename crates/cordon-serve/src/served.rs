//! The shared state every handler answers from: [`Served`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_sandbox::{Sandbox, SandboxKey, SandboxSpec};

use crate::artifacts::Artifacts;
use crate::config::ServeConfig;
use crate::counts::ScopeMetrics;
use crate::limits::{Buckets, ScopeLocks};

/// What the server answers from: the configuration and what the host
/// assembly built.
pub struct Served {
    pub config: ServeConfig,
    /// The backends the host's router holds, strongest first.
    pub backends: Vec<String>,
    /// The floor every sandbox is held to.
    pub floor: cordon_sandbox::Isolation,
    /// The host assembly's router: every sandbox is acquired through it.
    pub router: cordon_sandbox::Router,
    /// The sandboxes this server made, by key (scope from the credential).
    pub live: Mutex<BTreeMap<SandboxKey, Arc<dyn Sandbox>>>,
    /// Each scope's cap lock in this server: held from a sandbox count
    /// until the sandbox is recorded, so no create passes the cap
    /// uncounted (replicas also lock the scope in the state directory).
    pub(crate) scope_locks: ScopeLocks,
    /// Each credential's request budget: tokens left, and when counted.
    pub(crate) buckets: Buckets,
    /// Where collected outputs land (a directory of the server's own, one
    /// beneath it per collection), by opaque handle, within each
    /// credential's bounds. A handle is for the host's code, never a model's.
    pub(crate) artifacts: Artifacts,
    /// Counters for `/metrics`, by scope.
    pub(crate) metrics: Mutex<BTreeMap<String, ScopeMetrics>>,
    /// The spec of every sandbox made through `/mcp`.
    pub(crate) mcp_spec: SandboxSpec,
    /// Where the router's kept sandboxes are recorded (shared by
    /// replicas); `None`: sandboxes live and die with this server.
    pub(crate) state: Option<cordon_host::state::StateDir>,
    /// The egress proxies' audit log, followed for `/metrics`.
    pub(crate) egress_audit: Option<PathBuf>,
    /// HTTPS (and mutual TLS); `None`: plain HTTP.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    /// Every registered backend as this machine's probe found it at start
    /// (what `cordon doctor` shows).
    pub(crate) catalogue: Vec<serde_json::Value>,
    /// The snapshot store and the digest of the policy in force (a
    /// restore is checked against it); `None`: snapshots are refused.
    pub(crate) snapshots: Option<(cordon_host::snapshots::SnapshotStore, String)>,
    /// Warm pools (`pools:`), live.
    pub(crate) pools: Vec<std::sync::Arc<crate::pools::Pool>>,
    /// Set at shutdown: the pools are not refilled again.
    pub(crate) pools_stopped: std::sync::atomic::AtomicBool,
    /// The sandboxes this server paused (their keys' ids, to their
    /// scopes): their files are kept, and `/metrics` counts them.
    pub(crate) paused_keys: Mutex<BTreeMap<String, String>>,
    /// Keys whose sandboxes the start-up reclaim found dead: found again
    /// from their paused files, if they were paused.
    pub(crate) resurrectable: Mutex<std::collections::BTreeSet<String>>,
    /// The digest of the policy the router holds (pools are drained of
    /// sandboxes made under another).
    pub(crate) policy_digest: String,
    /// Watches open, by credential name (each holds a thread).
    pub(crate) watches: Places,
    /// Preview connections joined after an upgrade (a WebSocket's), by
    /// credential name: past the connection caps, each holds two sockets.
    pub(crate) tunnels: Places,
}

/// Long-lived things open, counted by credential name, each kind bounded.
#[derive(Default)]
pub(crate) struct Places(Mutex<BTreeMap<String, usize>>);

/// One credential's place among the things of one kind it holds open,
/// given back on drop.
pub(crate) struct Place {
    served: Arc<Served>,
    name: String,
    of: fn(&Served) -> &Places,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut w = (self.of)(&self.served)
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = w.get_mut(&self.name) {
            *n = n.saturating_sub(1);
        }
    }
}

/// A place for credential `name` among what `of` counts, if it holds
/// fewer than `max`.
pub(crate) fn take_place(
    s: &Arc<Served>,
    of: fn(&Served) -> &Places,
    name: &str,
    max: usize,
) -> Option<Place> {
    let mut w = of(s).0.lock().unwrap_or_else(|p| p.into_inner());
    let n = w.entry(name.to_string()).or_default();
    if *n >= max {
        return None;
    }
    *n += 1;
    Some(Place {
        served: s.clone(),
        name: name.to_string(),
        of,
    })
}

impl Served {
    pub fn new(
        config: ServeConfig,
        backends: Vec<String>,
        floor: cordon_sandbox::Isolation,
        router: cordon_sandbox::Router,
        mcp_spec: SandboxSpec,
    ) -> Served {
        let artifacts = Artifacts::new(std::env::temp_dir(), &config.limits);
        Served {
            mcp_spec,
            state: None,
            egress_audit: None,
            tls: None,
            catalogue: Vec::new(),
            snapshots: None,
            pools: Vec::new(),
            pools_stopped: std::sync::atomic::AtomicBool::new(false),
            paused_keys: Mutex::new(Default::default()),
            resurrectable: Mutex::new(Default::default()),
            policy_digest: String::new(),
            watches: Places::default(),
            tunnels: Places::default(),
            config,
            backends,
            floor,
            router,
            live: Mutex::new(BTreeMap::new()),
            scope_locks: ScopeLocks::default(),
            buckets: Buckets::default(),
            artifacts,
            metrics: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sandboxes are kept (by the router's kept backends) and recorded in
    /// `state`: found there by any replica, and by this server restarted.
    pub fn kept_in(mut self, state: cordon_host::state::StateDir) -> Served {
        self.state = Some(state);
        self
    }

    /// Snapshots are kept in `store`; a restore must be under the policy
    /// whose digest is `policy_digest` (the one the router holds).
    pub fn with_snapshots(
        mut self,
        store: cordon_host::snapshots::SnapshotStore,
        policy_digest: String,
    ) -> Served {
        self.snapshots = Some((store, policy_digest));
        self
    }

    /// The keys the start-up reclaim found dead ([`crate::paused_files`]).
    pub fn with_reclaimed(self, keys: Vec<String>) -> Served {
        self.resurrectable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys);
        self
    }

    /// Keeps the warm pools `pools` (with their specs, loaded) for the
    /// policy whose digest is `policy_digest`.
    pub fn with_pools(mut self, pools: Vec<crate::pools::Pool>, policy_digest: String) -> Served {
        self.pools = pools.into_iter().map(std::sync::Arc::new).collect();
        self.policy_digest = policy_digest;
        self
    }

    /// What `/v1/backends` says of every registered backend (doctor's rows).
    pub fn with_catalogue(mut self, rows: Vec<serde_json::Value>) -> Served {
        self.catalogue = rows;
        self
    }

    /// Serves HTTPS with `acceptor` (see [`crate::tls::acceptor`]).
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Served {
        self.tls = Some(acceptor);
        self
    }

    /// Follows the egress proxies' audit log (from its end as the server
    /// starts) for `/metrics`: denials by rule and bytes carried, by scope.
    pub fn following_egress_audit(mut self, path: PathBuf) -> Served {
        self.egress_audit = Some(path);
        self
    }
}
