//! Warm pools: sandboxes the server makes ahead, under a credential's
//! identity and scope and a spec, so that a create for that spec by that
//! credential is a claim of one — rekeyed to the caller's thread, never
//! handed out twice — instead of a cold start.
//!
//! A pooled sandbox is an ordinary kept sandbox at a key of the pool's
//! own (`cordon-pool-NAME-N` threads, which no caller may name and no cap
//! counts); a claim moves its record to the caller's key
//! (`StateDir::rekey`, under both keys' locks and the scope's cap lock).
//! The pool refills in the background, one at a time, up to its size. A
//! pooled sandbox made under another policy (a server restarted with a
//! new one finds the old pool in the state directory), another spec or
//! identity, or past the pool's `max_age`, is disposed of, never claimed.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_sandbox::{Sandbox, SandboxKey, SandboxSpec};
use marked_yaml::Spanned;
use serde::Deserialize;

use crate::config::{ConfigError, Credential};
use crate::request::Address;
use crate::served::Served;

/// The threads pooled sandboxes wait at; a caller's thread may not begin so.
pub const POOL_THREAD_PREFIX: &str = "cordon-pool-";

/// `pools:` as the configuration file holds one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    name: Spanned<String>,
    spec: Spanned<String>,
    size: Spanned<String>,
    credential: Spanned<String>,
    #[serde(default)]
    max_age_seconds: Option<Spanned<String>>,
}

/// One pool, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub name: String,
    /// The spec file (relative to the configuration file).
    pub spec: std::path::PathBuf,
    pub size: usize,
    /// The credential (by name) whose identity and scope it is made under
    /// and whose creates claim from it.
    pub credential: String,
    /// A pooled sandbox older than this is replaced (default 3600).
    pub max_age: u64,
}

/// Checks `pools:`; `at` positions a refusal.
pub(crate) fn pools_of(
    raw: &[RawPool],
    base: &Path,
    credentials: &[Credential],
    at: &dyn Fn((usize, usize), String) -> ConfigError,
) -> Result<Vec<PoolConfig>, ConfigError> {
    let pos = |s: &Spanned<String>| cordon_sandbox::yaml::pos(s);
    let mut out: Vec<PoolConfig> = Vec::new();
    for p in raw {
        let name = p.name.to_string();
        if name.is_empty()
            || name.len() > 32
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(at(
                pos(&p.name),
                format!("`pools.name`: `{name}` is not 1-32 of `a-z A-Z 0-9 -`"),
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(at(
                pos(&p.name),
                format!("`pools.name`: `{name}` is given twice"),
            ));
        }
        let size = match p.size.parse::<usize>() {
            Ok(n) if (1..=64).contains(&n) => n,
            _ => {
                return Err(at(
                    pos(&p.size),
                    format!(
                        "`pools.size`: `{}` is not a whole number from 1 to 64",
                        &*p.size
                    ),
                ))
            }
        };
        let max_age = match &p.max_age_seconds {
            None => 3600,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(at(
                        pos(v),
                        format!(
                        "`pools.max_age_seconds`: `{}` is not a whole number of seconds above 0",
                        &**v
                    ),
                    ))
                }
            },
        };
        if !credentials.iter().any(|c| c.name == *p.credential) {
            return Err(at(
                pos(&p.credential),
                format!(
                    "`pools.credential`: no credential is named `{}`",
                    &*p.credential
                ),
            ));
        }
        out.push(PoolConfig {
            name,
            spec: base.join(&*p.spec),
            size,
            credential: p.credential.to_string(),
            max_age,
        });
    }
    Ok(out)
}

/// A sandbox waiting in a pool.
struct Pooled {
    sandbox: Arc<dyn Sandbox>,
    /// Where it waits (the pool credential's scope).
    at: Address,
    made: Instant,
}

/// A pool, live.
pub struct Pool {
    pub config: PoolConfig,
    pub spec: SandboxSpec,
    /// `spec`'s fingerprint, taken once (a create compares with it).
    fingerprint: String,
    /// Whether the state directory was looked through for this pool's
    /// sandboxes of an earlier run (once, at the first tending).
    adopted: std::sync::atomic::AtomicBool,
    ready: Mutex<VecDeque<Pooled>>,
    next: std::sync::atomic::AtomicU64,
    /// Claims served, for `/metrics`.
    pub claims: std::sync::atomic::AtomicU64,
}

impl Pool {
    pub fn new(config: PoolConfig, spec: SandboxSpec) -> Pool {
        Pool {
            config,
            fingerprint: spec.fingerprint(),
            adopted: std::sync::atomic::AtomicBool::new(false),
            spec,
            ready: Mutex::new(VecDeque::new()),
            next: std::sync::atomic::AtomicU64::new(0),
            claims: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many wait now.
    pub fn ready(&self) -> usize {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn thread_prefix(&self) -> String {
        format!("{POOL_THREAD_PREFIX}{}-", self.config.name)
    }

    /// Whether a create of `spec` by `cred` is this pool's to serve.
    pub(crate) fn serves(&self, cred: &Credential, spec: &SandboxSpec) -> bool {
        cred.name == self.config.credential && spec.fingerprint() == self.fingerprint
    }

    /// One waiting sandbox, taken (never to be taken again).
    fn take(&self) -> Option<Pooled> {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }
}

impl Served {
    /// The pool that serves a create of `spec` by `cred`, if any.
    pub(crate) fn pool_for(&self, cred: &Credential, spec: &SandboxSpec) -> Option<&Arc<Pool>> {
        self.pools.iter().find(|p| p.serves(cred, spec))
    }

    /// A pooled sandbox moved to `key` (the caller's, which has none):
    /// `None` when the pool is empty or every one it held had gone. The
    /// caller holds the scope's cap lock.
    pub(crate) fn claim(
        &self,
        pool: &Pool,
        cred: &Credential,
        key: &SandboxKey,
    ) -> Option<Arc<dyn Sandbox>> {
        let state = self.state.as_ref()?;
        while let Some(p) = pool.take() {
            let from = cordon_host::state::KeyRecord {
                scope: cred.scope.clone(),
                thread: p.at.thread.clone(),
                agent_dir: p.at.agent_dir.clone(),
            };
            let to = cordon_host::state::KeyRecord {
                scope: key.scope().to_string(),
                thread: key.thread_id().to_string(),
                agent_dir: key.agent_dir().to_string(),
            };
            match state.rekey(p.sandbox.id(), &from, &to) {
                Ok(rec) => {
                    pool.claims
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match cordon_host::keeper::KeptSandbox::new(state.clone(), rec) {
                        Ok(s) => return Some(Arc::new(s)),
                        Err(e) => {
                            tracing::warn!(pool = %pool.config.name, "a claimed sandbox could not be attached: {e}")
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(pool = %pool.config.name, handle = p.sandbox.id(), "a pooled sandbox could not be claimed: {e}");
                    let _ = self.router.dispose(&crate::request::caller(cred, &p.at));
                }
            }
        }
        None
    }

    /// Stops refilling and disposes of every pooled sandbox (at shutdown,
    /// when the server disposes of what it made).
    pub(crate) fn drain_pools(&self) {
        self.pools_stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for pool in &self.pools {
            let Some(cred) = self
                .config
                .credentials
                .iter()
                .find(|c| c.name == pool.config.credential)
            else {
                continue;
            };
            while let Some(p) = pool.take() {
                if let Err(e) = self.router.dispose(&crate::request::caller(cred, &p.at)) {
                    tracing::warn!(pool = %pool.config.name, "at shutdown: {e}");
                }
            }
        }
    }

    /// Fills each pool to its size, drops what must not be claimed, and
    /// adopts (or drains) what a previous run of this server left in the
    /// state directory. One pass; [`run_pools`] repeats it.
    pub fn tend_pools(&self) {
        for pool in &self.pools {
            self.tend(pool);
        }
    }

    fn tend(&self, pool: &Pool) {
        let Some(cred) = self
            .config
            .credentials
            .iter()
            .find(|c| c.name == pool.config.credential)
        else {
            return;
        };
        let max_age = Duration::from_secs(pool.config.max_age);
        // Stale or gone: out.
        let stale: Vec<Pooled> = {
            let mut ready = pool.ready.lock().unwrap_or_else(|p| p.into_inner());
            let (keep, stale): (Vec<Pooled>, Vec<Pooled>) = ready.drain(..).partition(|p| {
                p.made.elapsed() < max_age
                    && self
                        .state
                        .as_ref()
                        .is_none_or(|st| st.record_path(p.sandbox.id()).exists())
            });
            ready.extend(keep);
            stale
        };
        for p in stale {
            let _ = self.router.dispose(&crate::request::caller(cred, &p.at));
        }
        // What an earlier run left is looked for once, not at every pass
        // (each look reads every record in the state directory).
        if !pool.adopted.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.adopt_or_drain(pool, cred);
        }
        while pool.ready() < pool.config.size
            && !self.pools_stopped.load(std::sync::atomic::Ordering::SeqCst)
        {
            let n = pool.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let at = Address {
                thread: format!("{}{}-{n}", pool.thread_prefix(), std::process::id()),
                agent_dir: "default".into(),
            };
            let caller = crate::request::caller(cred, &at);
            match self.router.acquire(&caller, &pool.spec) {
                Ok(sandbox) => pool
                    .ready
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(Pooled {
                        sandbox,
                        at,
                        made: Instant::now(),
                    }),
                Err(e) => {
                    tracing::warn!(pool = %pool.config.name, "a pooled sandbox could not be made: {e}");
                    return;
                }
            }
        }
    }

    /// Pooled sandboxes of this pool in the state directory that this run
    /// does not hold: the same spec, identity and policy are taken into
    /// the pool; any other is disposed of (a pool made under an older
    /// policy is drained, not served).
    fn adopt_or_drain(&self, pool: &Pool, cred: &Credential) {
        let Some(state) = &self.state else { return };
        let Ok((records, _)) = state.list() else {
            return;
        };
        let held: Vec<String> = pool
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| p.sandbox.id().to_string())
            .collect();
        let prefix = pool.thread_prefix();
        for rec in records {
            if rec.key.scope != cred.scope
                || !rec.key.thread.starts_with(&prefix)
                || held.contains(&rec.handle)
            {
                continue;
            }
            let at = Address {
                thread: rec.key.thread.clone(),
                agent_dir: rec.key.agent_dir.clone(),
            };
            let same = rec.provenance.policy_digest == self.policy_digest
                && rec.provenance.spec.fingerprint() == pool.fingerprint
                && rec.provenance.identity == cred.identity
                && rec.provenance.origin.is_none()
                && !rec.orphaned_or_expired(cordon_host::state::now());
            if same && pool.ready() < pool.config.size {
                if let Ok(s) = cordon_host::keeper::KeptSandbox::new(state.clone(), rec.clone()) {
                    pool.ready
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(Pooled {
                            sandbox: Arc::new(s),
                            at,
                            made: Instant::now(),
                        });
                    continue;
                }
            }
            tracing::info!(pool = %pool.config.name, handle = %rec.handle, "draining a pooled sandbox made under another policy, spec or identity");
            let _ = self.router.dispose(&crate::request::caller(cred, &at));
        }
    }
}

/// Tends the pools every `every` until the server stops (a thread of its
/// own: each pass blocks on sandbox starts).
pub fn run_pools(served: Arc<Served>, every: Duration) {
    if served.pools.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        while !served
            .pools_stopped
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            served.tend_pools();
            std::thread::sleep(every);
        }
    });
}
