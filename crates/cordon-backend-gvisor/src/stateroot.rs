//! What runsc's state root (`crate::STATE_ROOT`) says of a container
//! without a runsc process to ask (each costs ~20 ms here).
//!
//! runsc keeps a container's state in `ID_sandbox:SID.state` while it
//! exists; `runsc run` deletes its container (state and lock) as it ends.
//! cordon believes the file's absence only for a container whose file it
//! saw while it ran: a runsc that names its files otherwise is never seen,
//! and is asked (`runsc delete`) as before.

use std::path::{Path, PathBuf};

/// Where runsc under `root` keeps the state of `id` when `id` is a runsc
/// sandbox of its own (its sandbox id is its id).
fn own_state_in(root: &Path, id: &str) -> PathBuf {
    root.join(format!("{id}_sandbox:{id}.state"))
}

/// What was seen of one container's state file.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    root: Option<PathBuf>,
    seen: bool,
}

impl Seen {
    pub(crate) fn new() -> Seen {
        Seen::under(Path::new(crate::STATE_ROOT))
    }

    fn under(root: &Path) -> Seen {
        Seen {
            root: Some(root.to_path_buf()),
            seen: false,
        }
    }

    /// Looks once (while the container runs): whether its state is there.
    pub(crate) fn look(&mut self, id: &str) {
        if let (false, Some(root)) = (self.seen, &self.root) {
            self.seen = own_state_in(root, id).exists();
        }
    }

    /// Whether `id` is known gone: its state was seen, and is no more.
    pub(crate) fn gone(&self, id: &str) -> bool {
        match (&self.root, self.seen) {
            (Some(root), true) => !own_state_in(root, id).exists(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_is_gone_only_once_its_state_was_seen_and_is_no_more() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = root.path().join("c-e1_sandbox:c-e1.state");
        let mut seen = Seen::under(root.path());
        // Never seen: unknown, so runsc is asked.
        seen.look("c-e1");
        assert!(!seen.gone("c-e1"));
        std::fs::write(&state, b"").unwrap_or_else(|e| panic!("{e}"));
        seen.look("c-e1");
        assert!(!seen.gone("c-e1"), "its state is there");
        // Another container's state says nothing of this one.
        std::fs::write(root.path().join("c-e10_sandbox:c-e10.state"), b"")
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_file(&state).unwrap_or_else(|e| panic!("{e}"));
        assert!(seen.gone("c-e1"));
        assert!(!Seen::default().gone("c-e1"));
    }
}
