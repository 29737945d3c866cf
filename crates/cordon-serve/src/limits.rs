//! Per-credential limits: the request budget.

use super::*;

impl Served {
    /// Takes one request from `cred`'s budget (a token bucket refilled at
    /// `requests_per_second`, holding twice that): `false` when empty.
    pub(crate) fn take_token(&self, cred: &Credential) -> bool {
        let rate = f64::from(self.config.limits.requests_per_second);
        let burst = rate * 2.0;
        let now = std::time::Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = buckets.entry(cred.name.clone()).or_insert((burst, now));
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
