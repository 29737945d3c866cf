//! Warm pools: sandboxes made ahead under one identity, one scope and one
//! spec, so that a get-or-create of that spec by that identity in that
//! scope is a claim of one — moved to the caller's key, never handed out
//! twice — instead of a cold start. The library's own, and what `cordon
//! serve`'s pools are made of.
//!
//! A pooled sandbox is an ordinary sandbox at a key of the pool's own
//! (threads `cordon-pool-NAME-…`, which a surface keeps its callers from
//! naming). A claim takes it off the queue under the queue's lock (so one
//! claim has it), moves it to the caller's key through the router
//! ([`Router::rekey`]: the backend's table, or a kept sandbox's record),
//! then acquires it there, which checks its spec, identity and policy as
//! every acquire does: one made under another policy (a kept pool a host
//! restarted with a new one) is disposed of, never handed out. An empty
//! pool falls back to a cold acquire: a pool is a latency promise, not a
//! capacity bound.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_policy::Identity;
use cordon_sandbox::{CallerContext, Router, RouterError, Sandbox, SandboxSpec};

/// The threads pooled sandboxes wait at; a surface refuses a caller's
/// thread that begins so.
pub const POOL_THREAD_PREFIX: &str = "cordon-pool-";

/// What a pool is made of.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// 1-32 of `a-z A-Z 0-9 -`: its threads are `cordon-pool-NAME-…`.
    pub name: String,
    pub spec: SandboxSpec,
    /// Whose sandboxes it makes, and the only identity a claim may have.
    pub identity: Identity,
    /// The scope they are made in, and the only scope a claim may be in.
    pub scope: String,
    /// How many it keeps made (1 to 64).
    pub size: usize,
    /// A pooled sandbox older than this is disposed of, not claimed.
    pub max_age: Duration,
}

/// A sandbox waiting in a pool.
pub struct Waiting {
    pub sandbox: Arc<dyn Sandbox>,
    /// Its thread (the pool's scope, agent dir `default`).
    pub thread: String,
    pub made: Instant,
}

/// A pool, live.
pub struct WarmPool {
    options: PoolOptions,
    fingerprint: String,
    ready: Mutex<VecDeque<Waiting>>,
    next: AtomicU64,
    claims: AtomicU64,
    stopped: AtomicBool,
}

/// Why a pool's options were refused.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 32
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!(
            "a pool's name `{name}` is not 1-32 of `a-z A-Z 0-9 -`"
        ));
    }
    Ok(())
}

impl WarmPool {
    /// A pool of `options`, empty until [`WarmPool::fill`].
    pub fn new(options: PoolOptions) -> Result<WarmPool, String> {
        check_name(&options.name)?;
        if !(1..=64).contains(&options.size) {
            return Err(format!(
                "pool `{}`: a size of {} is not from 1 to 64",
                options.name, options.size
            ));
        }
        if options.max_age.is_zero() {
            return Err(format!("pool `{}`: a max age of 0", options.name));
        }
        Ok(WarmPool {
            fingerprint: options.spec.fingerprint(),
            options,
            ready: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        })
    }

    pub fn options(&self) -> &PoolOptions {
        &self.options
    }

    /// How many wait now.
    pub fn ready(&self) -> usize {
        self.queue().len()
    }

    /// Claims served so far.
    pub fn claims(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// The prefix of its sandboxes' threads.
    pub fn thread_prefix(&self) -> String {
        format!("{POOL_THREAD_PREFIX}{}-", self.options.name)
    }

    /// Whether a get-or-create of `spec` by `identity` in `scope` is this
    /// pool's to serve: the exact spec (its canonical fingerprint), never
    /// a compatible one.
    pub fn serves(&self, identity: &Identity, scope: &str, spec: &SandboxSpec) -> bool {
        *identity == self.options.identity
            && scope == self.options.scope
            && spec.fingerprint() == self.fingerprint
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller a pooled sandbox at `thread` is made and disposed as.
    pub fn caller_at(&self, thread: &str) -> CallerContext {
        let (scope, thread, identity) = (
            self.options.scope.clone(),
            thread.to_string(),
            self.options.identity.clone(),
        );
        CallerContext::new(
            move || scope.clone(),
            move || thread.clone(),
            || "default".to_string(),
            move || identity.clone(),
        )
    }

    /// Takes in a sandbox made earlier at one of this pool's threads (a
    /// restarted server's, found in its state directory), if there is
    /// room; gives it back when there is none.
    pub fn adopt(&self, w: Waiting) -> Result<(), Waiting> {
        let mut q = self.queue();
        if q.len() >= self.options.size {
            return Err(w);
        }
        q.push_back(w);
        Ok(())
    }

    /// The threads of the sandboxes waiting now.
    pub fn threads(&self) -> Vec<String> {
        self.queue().iter().map(|w| w.thread.clone()).collect()
    }

    /// Disposes of the waiting sandboxes `stale` says must not be claimed
    /// (past the pool's max age always), then makes sandboxes up to the
    /// pool's size, one at a time; returns how many it made. A make that
    /// fails stops the pass and is returned (the pool keeps what it has).
    pub fn fill(
        &self,
        router: &Router,
        stale: &dyn Fn(&Waiting) -> bool,
    ) -> Result<usize, RouterError> {
        let old: Vec<Waiting> = {
            let mut q = self.queue();
            let (keep, old): (Vec<Waiting>, Vec<Waiting>) = q
                .drain(..)
                .partition(|w| w.made.elapsed() < self.options.max_age && !stale(w));
            q.extend(keep);
            old
        };
        for w in old {
            let _ = router.dispose(&self.caller_at(&w.thread));
        }
        let mut made = 0;
        while self.ready() < self.options.size && !self.stopped.load(Ordering::SeqCst) {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let thread = format!("{}{}-{n}", self.thread_prefix(), std::process::id());
            let sandbox = router.acquire(&self.caller_at(&thread), &self.options.spec)?;
            self.queue().push_back(Waiting {
                sandbox,
                thread,
                made: Instant::now(),
            });
            made += 1;
        }
        Ok(made)
    }

    /// A waiting sandbox moved to `caller`'s key (which must be in the
    /// pool's scope, of its identity, asking for its spec) and acquired
    /// there: `None` when the pool does not serve the call or has none
    /// left to give. A waiting one that cannot be moved or acquired is
    /// disposed of and the next tried.
    pub fn claim(
        &self,
        router: &Router,
        caller: &CallerContext,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Sandbox>>, RouterError> {
        let who = caller.resolve()?;
        if !self.serves(&who.identity, who.key.scope(), spec) {
            return Ok(None);
        }
        loop {
            let Some(w) = self.queue().pop_front() else {
                return Ok(None);
            };
            let from = self.caller_at(&w.thread);
            if w.made.elapsed() >= self.options.max_age {
                let _ = router.dispose(&from);
                continue;
            }
            match router.rekey(&from, caller) {
                Ok(()) => {}
                // The caller has a sandbox at its key already: it is
                // theirs (get-or-create), and this one waits on.
                Err(RouterError::KeyTaken { .. }) => {
                    self.queue().push_front(w);
                    return Ok(None);
                }
                Err(e) => {
                    tracing::warn!(pool = %self.options.name, thread = %w.thread, "a pooled sandbox could not be claimed: {e}");
                    let _ = router.dispose(&from);
                    continue;
                }
            }
            match router.acquire(caller, spec) {
                Ok(s) => {
                    self.claims.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(s));
                }
                Err(e) => {
                    // Made under another policy, say: never handed out.
                    tracing::warn!(pool = %self.options.name, "a claimed sandbox was refused at its new key, and is disposed of: {e}");
                    let _ = router.dispose(caller);
                }
            }
        }
    }

    /// A claim, or a cold acquire when the pool has none for the call.
    pub fn acquire(
        &self,
        router: &Router,
        caller: &CallerContext,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, RouterError> {
        match self.claim(router, caller, spec)? {
            Some(s) => Ok(s),
            None => router.acquire(caller, spec),
        }
    }

    /// Stops filling and disposes of every waiting sandbox; returns how
    /// many went.
    pub fn drain(&self, router: &Router) -> usize {
        self.stopped.store(true, Ordering::SeqCst);
        let all: Vec<Waiting> = self.queue().drain(..).collect();
        all.iter()
            .filter(|w| {
                router
                    .dispose(&self.caller_at(&w.thread))
                    .is_ok_and(|n| n > 0)
            })
            .count()
    }

    /// Whether [`WarmPool::drain`] stopped it.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}
