//! Warm pools: sandboxes the server makes ahead, under a credential's
//! identity and scope and a spec, so that a create for that spec by that
//! credential is a claim of one — rekeyed to the caller's thread, never
//! handed out twice — instead of a cold start.
//!
//! The pool itself is the library's ([`cordon_host::pool::WarmPool`]):
//! a pooled sandbox is an ordinary kept sandbox at a key of the pool's
//! own (`cordon-pool-NAME-N` threads, which no caller may name and no cap
//! counts); a claim moves its record to the caller's key (the router's
//! rekey, the kept backend's `StateDir::rekey`, under both keys' locks,
//! while the server holds the scope's cap lock). Here: the configuration,
//! the background refill, and what a restarted server finds of an
//! earlier run's pool in the state directory — adopted, or disposed of
//! when made under another policy, spec or identity, or past the pool's
//! `max_age`, never claimed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_host::pool::{PoolOptions, Waiting, WarmPool};
use cordon_sandbox::{Sandbox, SandboxKey, SandboxSpec};
use marked_yaml::Spanned;
use serde::Deserialize;

use crate::config::{ConfigError, Credential};
use crate::request::Address;
use crate::served::Served;

/// The threads pooled sandboxes wait at; a caller's thread may not begin so.
pub use cordon_host::pool::POOL_THREAD_PREFIX;

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
        if let Err(e) = cordon_host::pool::check_name(&name) {
            return Err(at(pos(&p.name), format!("`pools.name`: {e}")));
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

/// A pool, live: the library's, under one credential.
pub struct Pool {
    pub config: PoolConfig,
    pub warm: WarmPool,
    /// Whether the state directory was looked through for this pool's
    /// sandboxes of an earlier run (once, at the first tending).
    adopted: std::sync::atomic::AtomicBool,
}

impl Pool {
    /// The pool `config` names, of `spec`, under its credential (one of
    /// `credentials`).
    pub fn new(
        config: PoolConfig,
        spec: SandboxSpec,
        credentials: &[Credential],
    ) -> Result<Pool, String> {
        let cred = credentials
            .iter()
            .find(|c| c.name == config.credential)
            .ok_or_else(|| format!("no credential is named `{}`", config.credential))?;
        let warm = WarmPool::new(PoolOptions {
            name: config.name.clone(),
            spec,
            identity: cred.identity.clone(),
            scope: cred.scope.clone(),
            size: config.size,
            max_age: Duration::from_secs(config.max_age),
        })?;
        Ok(Pool {
            config,
            warm,
            adopted: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// How many wait now.
    pub fn ready(&self) -> usize {
        self.warm.ready()
    }

    /// Whether a create of `spec` by `cred` is this pool's to serve.
    pub(crate) fn serves(&self, cred: &Credential, spec: &SandboxSpec) -> bool {
        cred.name == self.config.credential && self.warm.serves(&cred.identity, &cred.scope, spec)
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
        let at = Address {
            thread: key.thread_id().to_string(),
            agent_dir: key.agent_dir().to_string(),
        };
        let caller = crate::request::caller(cred, &at);
        match pool
            .warm
            .claim(&self.router, &caller, &pool.warm.options().spec)
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(pool = %pool.config.name, "a claim failed, and a cold create serves it: {e}");
                None
            }
        }
    }

    /// Stops refilling and disposes of every pooled sandbox (at shutdown,
    /// when the server disposes of what it made).
    pub(crate) fn drain_pools(&self) {
        self.pools_stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for pool in &self.pools {
            pool.warm.drain(&self.router);
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
        if self.pools_stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // What an earlier run left is looked for once, not at every pass
        // (each look reads every record in the state directory).
        if !pool.adopted.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.adopt_or_drain(pool);
        }
        // Gone from the state directory (disposed of from elsewhere): out.
        let gone = |w: &Waiting| {
            self.state
                .as_ref()
                .is_some_and(|st| !st.record_path(w.sandbox.id()).exists())
        };
        if let Err(e) = pool.warm.fill(&self.router, &gone) {
            tracing::warn!(pool = %pool.config.name, "a pooled sandbox could not be made: {e}");
        }
    }

    /// Pooled sandboxes of this pool in the state directory that this run
    /// does not hold: the same spec, identity and policy are taken into
    /// the pool; any other is disposed of (a pool made under an older
    /// policy is drained, not served).
    fn adopt_or_drain(&self, pool: &Pool) {
        let Some(state) = &self.state else { return };
        let Ok((records, _)) = state.list() else {
            return;
        };
        let held = pool.warm.threads();
        let prefix = pool.warm.thread_prefix();
        let scope = &pool.warm.options().scope;
        for rec in records {
            if rec.key.scope != *scope
                || !rec.key.thread.starts_with(&prefix)
                || held.contains(&rec.key.thread)
            {
                continue;
            }
            let at = pool.warm.caller_at(&rec.key.thread);
            let same = rec.provenance.policy_digest == self.policy_digest
                && pool
                    .warm
                    .serves(&rec.provenance.identity, scope, &rec.provenance.spec)
                && rec.key.agent_dir == "default"
                && rec.provenance.origin.is_none()
                && !rec.orphaned_or_expired(cordon_host::state::now());
            if same {
                if let Ok(s) = cordon_host::keeper::KeptSandbox::new(state.clone(), rec.clone()) {
                    let waiting = Waiting {
                        sandbox: Arc::new(s),
                        thread: rec.key.thread.clone(),
                        made: Instant::now(),
                    };
                    if pool.warm.adopt(waiting).is_ok() {
                        continue;
                    }
                }
            }
            tracing::info!(pool = %pool.config.name, handle = %rec.handle, "draining a pooled sandbox made under another policy, spec or identity");
            let _ = self.router.dispose(&at);
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
