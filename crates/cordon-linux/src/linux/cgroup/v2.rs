//! cgroup v2: one directory in the unified hierarchy. The owner moves the
//! init in; kills go through `cgroup.kill` where the kernel has it.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    keyed, kill_by_membership, read, rmdir_retry, wait_empty, write, CgroupManager, CgroupRoot,
    Events,
};
use crate::plan::Bounds;

/// v2: one directory in the unified hierarchy.
#[derive(Debug)]
pub(crate) struct V2 {
    dir: PathBuf,
}

impl V2 {
    /// Creates `name` below our own cgroup.
    pub(super) fn create(root: &CgroupRoot, name: &str) -> io::Result<V2> {
        let (parent, _) = root
            .v2_dir()
            .ok_or_else(|| io::Error::other("cgroup v2 hierarchy vanished"))?;
        let dir = parent.join(name);
        fs::create_dir(&dir)?;
        Ok(V2 { dir })
    }

    /// A child cgroup `name` (already checked to be one path component),
    /// after handing children the memory and pids controllers.
    pub(super) fn child(&self, name: &str) -> io::Result<V2> {
        write(&self.dir.join("cgroup.subtree_control"), "+memory +pids")?;
        let dir = self.dir.join(name);
        fs::create_dir(&dir)?;
        Ok(V2 { dir })
    }
}

impl CgroupManager for V2 {
    fn add(&self, pid: u32) -> io::Result<()> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    fn self_join_files(&self) -> Option<Vec<PathBuf>> {
        None
    }

    fn join_files(&self) -> Vec<PathBuf> {
        vec![self.dir.join("cgroup.procs")]
    }

    fn dirs(&self) -> Vec<PathBuf> {
        vec![self.dir.clone()]
    }

    fn cpu_usage(&self) -> io::Result<Duration> {
        let us = keyed(&read(&self.dir.join("cpu.stat"))?, "usage_usec");
        Ok(Duration::from_micros(us))
    }

    fn events(&self) -> io::Result<Events> {
        Ok(Events {
            oom_kills: keyed(&read(&self.dir.join("memory.events"))?, "oom_kill"),
            pids_refused: keyed(&read(&self.dir.join("pids.events"))?, "max"),
        })
    }

    fn freeze(&self, frozen: bool) -> io::Result<()> {
        let file = self.dir.join("cgroup.freeze");
        write(&file, if frozen { "1" } else { "0" })?;
        let want = if frozen { "frozen 1" } else { "frozen 0" };
        super::wait_for(
            &self.dir.join("cgroup.events"),
            |s| s.lines().any(|l| l.trim() == want),
            if frozen { "freezing" } else { "thawing" },
        )
    }

    fn write_bounds(&self, bounds: &Bounds) -> io::Result<()> {
        write(&self.dir.join("memory.max"), &bounds.max_memory.to_string())
            .and_then(|()| {
                let swap = self.dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")
                } else {
                    Ok(())
                }
            })
            .and_then(|()| {
                write(
                    &self.dir.join("pids.max"),
                    &bounds.max_processes.to_string(),
                )
            })
    }

    fn kill_all(&self) -> io::Result<()> {
        super::thaw_dir(&self.dir);
        let kill = self.dir.join("cgroup.kill");
        if kill.exists() {
            write(&kill, "1")?;
            wait_empty(&self.dir.join("cgroup.procs"))
        } else {
            kill_by_membership(&self.dir.join("cgroup.procs"))
        }
    }

    fn remove(&self) -> io::Result<()> {
        rmdir_retry(&self.dir)
    }
}
