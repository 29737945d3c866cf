//! Where a sandbox made from a snapshot may be made: a snapshot holding
//! processes goes only to the backend that saved them.

use crate::{Capability, CapabilitySet, Origin};

use crate::router_error::Refusal;

/// Why the backend `name` (declaring `caps`) may not make a sandbox from
/// `origin`, if it may not. Saved processes start again only where the
/// backend restores them as confined as they were made (it declares
/// `snapshot_memory`) and in the form it saved them in (each backend has
/// its own: only the one that saved them); anywhere else they would be
/// left out, and the sandbox not the snapshot it claims to be.
pub(super) fn refusal(
    origin: Option<&Origin>,
    name: &str,
    caps: &CapabilitySet,
) -> Option<Refusal> {
    let o = origin.filter(|o| o.memory.is_some())?;
    if !caps.contains(Capability::SnapshotMemory) {
        return Some(Refusal::Missing {
            capabilities: [Capability::SnapshotMemory].into_iter().collect(),
        });
    }
    o.memory_of
        .as_ref()
        .filter(|b| *b != name)
        .map(|b| Refusal::SavedBy { backend: b.clone() })
}
