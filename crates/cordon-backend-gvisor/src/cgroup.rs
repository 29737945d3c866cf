//! The memory cgroup cordon makes itself for each runsc sandbox.
//!
//! runsc makes a container's cgroups at the bundle's `cgroupsPath` and
//! removes them the moment the container ends, so a bound it held and the
//! count of what it killed are gone before cordon can read them: a memory
//! kill then looked like any `SIGKILL` (137). cordon therefore makes the
//! parent itself (`/ID` in the memory hierarchy), puts the memory bound
//! there, and gives runsc `/ID/workload` with no bound of its own: the
//! bound is reached at the parent, which counts the kill and outlives the
//! container until cordon removes it.

use std::path::{Path, PathBuf};

/// The leaf runsc makes under cordon's parent.
pub const LEAF: &str = "workload";

/// A memory cgroup of cordon's, holding one container's bound.
#[derive(Debug)]
pub struct MemoryBound {
    dir: PathBuf,
    v2: bool,
}

fn hierarchy() -> Result<(PathBuf, bool), String> {
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.limit_in_bytes").is_file() {
        return Ok((v1.to_path_buf(), false));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        return Ok((v2.to_path_buf(), true));
    }
    Err("no memory cgroup controller is mounted (neither cgroup v1's `/sys/fs/cgroup/memory` nor v2's `memory` in `/sys/fs/cgroup/cgroup.controllers`), so `max_memory` cannot be held; mount it".into())
}

impl MemoryBound {
    /// Makes `/ID` in the memory hierarchy with a bound of `bytes`, and
    /// reads the bound back: a bound that did not take is an error, never
    /// a container run without it.
    pub fn make(id: &str, bytes: u64) -> Result<MemoryBound, String> {
        let (root, v2) = hierarchy()?;
        let dir = root.join(id);
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot make the memory cgroup `{}`: {e}", dir.display()))?;
        let made = MemoryBound { dir, v2 };
        let (file, value) = if v2 {
            ("memory.max", bytes.to_string())
        } else {
            ("memory.limit_in_bytes", bytes.to_string())
        };
        let path = made.dir.join(file);
        std::fs::write(&path, &value)
            .map_err(|e| format!("cannot set `{}` to {value}: {e}", path.display()))?;
        let read = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read `{}` back: {e}", path.display()))?;
        // The kernel rounds down to a page; anything above what was asked
        // is a bound that did not take.
        match read.trim().parse::<u64>() {
            Ok(n) if n <= bytes => Ok(made),
            _ => Err(format!(
                "`{}` reads `{}` after cordon set {value}: the memory bound did not take",
                path.display(),
                read.trim()
            )),
        }
    }

    /// How many processes the bound has killed (`None`: unreadable).
    pub fn oom_kills(&self) -> Option<u64> {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill ")
        } else {
            ("memory.oom_control", "oom_kill ")
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
    }

    /// How often the bound refused memory (v1's `failcnt`, v2's `max`
    /// events; 0 when unreadable).
    pub fn refusals(&self) -> u64 {
        let n = if self.v2 {
            std::fs::read_to_string(self.dir.join("memory.events"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("max "))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                })
        } else {
            std::fs::read_to_string(self.dir.join("memory.failcnt"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        n.unwrap_or(0)
    }
}

impl Drop for MemoryBound {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.dir.join(LEAF));
        let _ = std::fs::remove_dir(&self.dir);
    }
}
