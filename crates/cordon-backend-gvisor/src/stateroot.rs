//! What runsc's state root (`crate::STATE_ROOT`) says of a container
//! without a runsc process to ask.

use std::path::Path;

/// Whether container `id` is known gone from runsc's state root without
/// asking runsc (two runsc processes, ~40 ms here): its lock file is there,
/// which says runsc named its files as this reads them (`ID_sandbox:SID.lock`
/// beside `….state` while it exists), and its state file is not. The lock
/// runsc leaves behind is removed then. Anything else (no lock, an
/// unreadable root) is `false`: ask runsc.
pub fn gone_from_state_root(id: &str) -> bool {
    gone_in(Path::new(crate::STATE_ROOT), id)
}

fn gone_in(root: &Path, id: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(root) else {
        return false;
    };
    let prefix = format!("{id}_sandbox:");
    let mut lock = None;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) {
            continue;
        }
        if name.ends_with(".lock") {
            lock = Some(e.path());
        } else {
            // Its state, or a file of a naming this does not know.
            return false;
        }
    }
    match lock {
        Some(l) => {
            let _ = std::fs::remove_file(l);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::gone_in;

    #[test]
    fn a_container_is_gone_only_when_its_lock_says_so_and_no_state_is_left() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let put = |name: &str| {
            std::fs::write(root.path().join(name), b"").unwrap_or_else(|e| panic!("{e}"))
        };
        // Nothing of it: unknown, so runsc is asked.
        assert!(!gone_in(root.path(), "c-e1"));
        put("c-e1_sandbox:c-e1.lock");
        put("c-e1_sandbox:c-e1.state");
        assert!(!gone_in(root.path(), "c-e1"), "its state is there");
        std::fs::remove_file(root.path().join("c-e1_sandbox:c-e1.state"))
            .unwrap_or_else(|e| panic!("{e}"));
        // Another container's files say nothing of this one.
        put("c-e10_sandbox:c-p2.state");
        assert!(gone_in(root.path(), "c-e1"));
        assert!(
            !root.path().join("c-e1_sandbox:c-e1.lock").exists(),
            "the lock is removed"
        );
        // A file of a naming not known here: ask runsc.
        put("c-e3_sandbox:c-p2.json");
        put("c-e3_sandbox:c-p2.lock");
        assert!(!gone_in(root.path(), "c-e3"));
        assert!(!gone_in(&root.path().join("missing"), "c-e3"));
    }
}
