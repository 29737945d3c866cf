//! Per-credential limits: the request budget ([`Buckets`]), and the lock
//! a scope's creates queue on so that none passes `limits.max_sandboxes`
//! uncounted ([`ScopeLocks`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_sandbox::ErrorKind;

use crate::refusal::Refusal;

/// Each credential's request budget: tokens left, and when counted.
#[derive(Default)]
pub(crate) struct Buckets(Mutex<BTreeMap<String, (f64, Instant)>>);

impl Buckets {
    /// Takes one request from `credential`'s budget (a token bucket
    /// refilled at `rate` a second, holding twice that): `false` when
    /// empty.
    pub(crate) fn take(&self, credential: &str, rate: f64) -> bool {
        let burst = rate * 2.0;
        let now = Instant::now();
        let mut buckets = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = buckets
            .entry(credential.to_string())
            .or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// How long a request waits for its scope's cap lock (another create of
/// the same scope, here or at a replica) before it is refused (`503`).
pub(crate) const CAP_LOCK_WAIT: Duration = Duration::from_secs(120);

/// The scopes whose cap lock a thread of this server holds, and the
/// condition a waiter waits on.
#[derive(Default)]
pub(crate) struct ScopeLocks {
    held: Mutex<std::collections::BTreeSet<String>>,
    freed: std::sync::Condvar,
}

/// One scope's cap lock in this server, held until dropped.
pub(crate) struct ScopeGuard<'a> {
    locks: &'a ScopeLocks,
    scope: String,
}

impl<'a> ScopeGuard<'a> {
    pub(crate) fn take(locks: &'a ScopeLocks, scope: &str) -> Result<ScopeGuard<'a>, Refusal> {
        let deadline = std::time::Instant::now().checked_add(CAP_LOCK_WAIT);
        let mut held = locks.held.lock().unwrap_or_else(|p| p.into_inner());
        while held.contains(scope) {
            let left = deadline
                .and_then(|d| d.checked_duration_since(std::time::Instant::now()))
                .unwrap_or_default();
            if left.is_zero() {
                return Err(Refusal::of(
                    ErrorKind::Unavailable,
                    "another create of this credential's sandboxes has run for over two minutes; try again",
                ));
            }
            held = locks
                .freed
                .wait_timeout(held, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        held.insert(scope.to_string());
        Ok(ScopeGuard {
            locks,
            scope: scope.to_string(),
        })
    }
}

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        self.locks
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.scope);
        self.locks.freed.notify_all();
    }
}
