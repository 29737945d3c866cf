//! Each sandbox channel's budget of audit bytes: what a sandbox may have
//! written about it, a second and at once, before its requests are
//! refused unrecorded (see [`crate::audit`]).

use cordon_sandbox::AuditBounds;
use hyper::StatusCode;

use super::http::{text, Body};

/// How a line is charged to its sandbox's budget.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Charge {
    /// An `allow`: not written when the budget is spent, and then nothing
    /// is carried.
    Gate,
    /// A `deny`: not written when the budget is spent (the refusal
    /// stands, and is counted).
    Note,
    /// Written whatever the budget (something was carried; or the note
    /// that the budget is spent); its bytes are owed.
    Force,
}

pub(super) enum Take {
    /// Write it; first say how many were refused unrecorded before.
    Write { refused_before: u64 },
    /// Do not; `spent_now`: the first refusal of this spell.
    Refused { spent_now: bool },
}

/// One sandbox channel's budget of audit bytes: a bucket holding at most
/// `burst`, refilled at `rate` a second. Forced lines may take it below
/// zero; the debt is paid (by time) before anything else of the sandbox's
/// is looked up, carried or written.
pub(super) struct Budget {
    rate: f64,
    burst: f64,
    state: std::sync::Mutex<BudgetState>,
}

struct BudgetState {
    tokens: f64,
    at: std::time::Instant,
    /// Requests refused while it was spent, not yet said in the log.
    refused: u64,
    /// The current spell of being spent has been said in the log.
    noted: bool,
}

impl Budget {
    pub(super) fn new(b: &AuditBounds) -> Budget {
        Budget {
            rate: b.sandbox_bytes_per_sec as f64,
            burst: b.sandbox_burst_bytes as f64,
            state: std::sync::Mutex::new(BudgetState {
                tokens: b.sandbox_burst_bytes as f64,
                at: std::time::Instant::now(),
                refused: 0,
                noted: false,
            }),
        }
    }

    fn refill(&self, s: &mut BudgetState) {
        let now = std::time::Instant::now();
        let dt = now.saturating_duration_since(s.at).as_secs_f64();
        s.at = now;
        s.tokens = (s.tokens + dt * self.rate).min(self.burst);
    }

    /// Refuses (counting it) when the budget is spent; `Err(true)` the
    /// first time in a spell.
    pub(super) fn admit(&self) -> Result<(), bool> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        if s.tokens > 0.0 {
            return Ok(());
        }
        s.refused += 1;
        let first = !s.noted;
        s.noted = true;
        Err(first)
    }

    pub(super) fn spent(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        s.tokens <= 0.0
    }

    pub(super) fn take(&self, bytes: u64, charge: Charge) -> Take {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s);
        if charge != Charge::Force && s.tokens <= 0.0 {
            s.refused += 1;
            let first = !s.noted;
            s.noted = true;
            return Take::Refused { spent_now: first };
        }
        s.tokens -= bytes as f64;
        if charge == Charge::Force {
            return Take::Write { refused_before: 0 };
        }
        s.noted = false;
        Take::Write {
            refused_before: std::mem::take(&mut s.refused),
        }
    }
}

/// The answer to a sandbox whose audit budget is spent.
pub(super) fn budget_spent(b: &AuditBounds) -> hyper::Response<Body> {
    text(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "this sandbox's egress audit budget is spent ({} bytes a second after a burst of {}); nothing is carried or looked up until it refills",
            b.sandbox_bytes_per_sec, b.sandbox_burst_bytes
        ),
    )
}
