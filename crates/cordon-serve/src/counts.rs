//! What `/metrics` counts for each scope ([`ScopeMetrics`]), held in
//! [`Served`](crate::Served) and counted by `metrics`.

use std::collections::BTreeMap;

/// What `/metrics` counts for one scope.
#[derive(Default)]
pub(crate) struct ScopeMetrics {
    /// Sandboxes created, by rung.
    pub(crate) created: BTreeMap<&'static str, u64>,
    /// Execs answered, and how their latency fell into the buckets.
    pub(crate) execs: u64,
    pub(crate) exec_seconds_sum: f64,
    pub(crate) exec_buckets: [u64; EXEC_BUCKETS.len()],
    /// Requests refused, by HTTP status.
    pub(crate) refused: BTreeMap<u16, u64>,
    /// Policy denials, by surface and deciding rule (`file:line`, a
    /// bound's key, or `none` when no allow rule matched).
    pub(crate) denials: BTreeMap<(&'static str, String), u64>,
    /// Bytes the egress proxy carried for this scope's sandboxes (tunnels,
    /// from the audit's `end` lines): up, and down.
    pub(crate) proxy_bytes: (u64, u64),
}

/// Upper bounds (seconds) of the exec latency histogram's buckets.
pub(crate) const EXEC_BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0];
