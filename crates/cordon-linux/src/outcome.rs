//! How a sandboxed run ended.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A resource bound of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Memory,
    Processes,
    Cpu,
    Wall,
}

/// How the workload's first process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
}

impl Termination {
    pub fn success(&self) -> bool {
        matches!(self, Termination::Exited(0))
    }
}

/// The result of [`crate::Running::wait`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub termination: Termination,
    /// The bound whose enforcement ended the run, if one did.
    pub killed_by: Option<Bound>,
    /// Every bound the workload ran into (a refused fork is `Processes` even
    /// when the workload then exited by itself).
    pub limits_hit: Vec<Bound>,
    /// CPU time of the whole tree, when the cgroup reported it.
    pub cpu: Option<Duration>,
    pub wall: Duration,
}

/// Cancels a running exec from another thread: the next bounds check of its
/// `wait` (every 10 ms) kills its whole tree. Cloned freely; cancelling an
/// exec that already ended does nothing.
#[derive(Clone, Debug, Default)]
pub struct Cancel(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
