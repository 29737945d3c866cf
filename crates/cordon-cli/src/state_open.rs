//! The state directory as every command that keeps sandboxes opens it:
//! the first time in a process, what killed keepers left is reclaimed.
//! (Below `run` and `sandbox_cmd`, which both open it.)

use std::time::Duration;

use cordon_host::keeper;
use cordon_host::state::{self, StateDir};

/// The most a command spends reclaiming dead keepers' sandboxes before it
/// does its own work (what is left, `gc` reclaims).
const RECLAIM_WITHIN: Duration = Duration::from_secs(2);

/// The sandboxes this process reclaimed when it first opened the state
/// directory (for `down`, which counts them as disposed).
static RECLAIMED: std::sync::OnceLock<Vec<state::Record>> = std::sync::OnceLock::new();

/// Opens the state directory at `path`, and the first time in this
/// process reclaims what the keepers killed since the last command left
/// ([`keeper::reclaim_dead_keepers`]): each is said on stderr, and what
/// could not be done is a warning. Every command that opens the state
/// directory opens it here, but `gc`, which reclaims all of it itself.
pub fn open_state(path: &std::path::Path) -> Result<StateDir, state::StateError> {
    let st = StateDir::open(path)?;
    RECLAIMED.get_or_init(|| {
        let done = keeper::reclaim_dead_keepers(&st, crate::registry, RECLAIM_WITHIN);
        for r in &done.records {
            eprintln!(
                "cordon: reclaimed sandbox `{}` (scope `{}`, thread `{}`): its keeper was gone",
                r.handle, r.key.scope, r.key.thread
            );
        }
        for f in &done.failures {
            eprintln!("warning: {f}");
        }
        done.records
    });
    Ok(st)
}

/// How many of the sandboxes this process reclaimed at start `pick` takes.
pub fn reclaimed_at_start(pick: impl Fn(&state::Record) -> bool) -> usize {
    RECLAIMED
        .get()
        .map_or(0, |r| r.iter().filter(|r| pick(r)).count())
}
