//! Fresh host uids/gids, one per live sandbox machine-wide: each leased by
//! an exclusive `flock` on a file of its own.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use cordon_sandbox::BackendError;

use crate::{failed, FRESH_ID_BASE, NEXT};

/// Where fresh ids are leased: one lock file per id, `flock`ed for as long
/// as a sandbox uses it.
pub const ID_LEASES: &str = "/run/cordon-ids";
/// How many fresh ids there are (`FRESH_ID_BASE ..`); the init of a warm
/// sandbox uses `id + INIT_ID_OFFSET`, which stays below `u32::MAX`.
pub const FRESH_IDS: u32 = 64_000_000;

/// A fresh host uid/gid held by one sandbox for its life. Unique across
/// every cordon process on the machine: the lease is an exclusive `flock`
/// on `ID_LEASES/<id>`, which the kernel releases when the holder closes it
/// or dies.
#[derive(Debug)]
pub struct IdLease {
    id: u32,
    path: PathBuf,
    _lock: std::fs::File,
}

impl IdLease {
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for IdLease {
    /// The lease file goes with the lease (so `ID_LEASES` holds only live
    /// ones); a waiter that locked it meanwhile finds it gone from its path
    /// and looks again.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lease_dir() -> Result<&'static Path, BackendError> {
    let dir = Path::new(ID_LEASES);
    crate::dirs::private_dir_at(dir).map_err(|e| {
        failed(
            "acquire",
            format!("cannot create `{ID_LEASES}` to lease a sandbox uid: {e}"),
        )
    })?;
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| failed("acquire", format!("`{ID_LEASES}`: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(failed(
            "acquire",
            format!("`{ID_LEASES}` must be a directory of uid {me} with mode 0700 (the sandbox uid leases); remove it and let cordon make it"),
        ));
    }
    Ok(dir)
}

/// Removes the lease files nobody holds (left by owners that were killed):
/// each is locked first, so a live lease is never touched. Returns how many.
pub fn sweep_id_leases() -> usize {
    let Ok(entries) = std::fs::read_dir(ID_LEASES) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
            && std::fs::remove_file(&path).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// Leases a fresh id, starting the search at a place derived from this
/// process (so owners rarely contend) and taking the first id nobody holds.
pub fn lease_id() -> Result<IdLease, BackendError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = lease_dir()?;
    let start = (std::process::id() % 1_000_000) * 64 + NEXT.fetch_add(1, Ordering::Relaxed) % 64;
    for k in 0..FRESH_IDS.min(100_000) {
        let id = FRESH_ID_BASE + (start + k) % FRESH_IDS;
        let path = dir.join(id.to_string());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| failed("acquire", format!("`{}`: {e}", path.display())))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // Locked a file a releasing holder had just removed: it
                // guards nothing anyone can find; try the next id.
                let held =
                    rustix::fs::fstat(&file).map_err(|e| failed("acquire", e.to_string()))?;
                match rustix::fs::stat(&path) {
                    Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => {
                        return Ok(IdLease {
                            id,
                            path,
                            _lock: file,
                        })
                    }
                    _ => continue,
                }
            }
            Err(rustix::io::Errno::WOULDBLOCK) => continue,
            Err(e) => return Err(failed("acquire", format!("`{}`: {e}", path.display()))),
        }
    }
    Err(failed(
        "acquire",
        "no free sandbox uid among the next 100000; dispose of sandboxes (`cordon sandbox gc`)",
    ))
}

#[cfg(test)]
mod lease_tests {
    use super::*;
    use crate::INIT_ID_OFFSET;

    #[test]
    fn live_sandboxes_never_share_a_fresh_uid() {
        if !rustix::process::geteuid().is_root() {
            cordon_testkit::skip("uid leases", "leasing uids needs root");
            return;
        }
        // More than one block of 64 (the first cut reused ids after 64).
        let leases: Vec<IdLease> = (0..150).map(|_| lease_id().unwrap()).collect();
        let mut ids: Vec<u32> = leases.iter().map(IdLease::id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 150, "a uid was leased twice");
        assert!(ids
            .iter()
            .all(|&i| i >= FRESH_ID_BASE && i.checked_add(INIT_ID_OFFSET).is_some()));
        // Another holder (a second open file description, as another process
        // would have) cannot take a held id.
        let held = leases[0].id();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(Path::new(ID_LEASES).join(held.to_string()))
            .unwrap();
        assert!(
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
        );
        // A sweep leaves held leases alone.
        let _ = sweep_id_leases();
        assert!(ids
            .iter()
            .all(|i| Path::new(ID_LEASES).join(i.to_string()).exists()));
        drop(leases);
        // Released: the lease files are gone with the leases.
        assert!(ids
            .iter()
            .all(|i| !Path::new(ID_LEASES).join(i.to_string()).exists()));
        assert!(
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
        );
    }
}
