//! cgroup v1: one directory per controller (`memory`, `pids`, `cpuacct`,
//! and `freezer` where it is mounted: what pauses a sandbox).
//! The init joins by itself through each controller's `tasks` file; kills
//! are by membership through pidfds.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    keyed, kill_by_membership, read, rmdir_retry, write, CgroupManager, CgroupRoot, Events,
};
use crate::plan::Bounds;

/// v1: one directory per controller (`memory`, `pids`, `cpuacct`).
#[derive(Debug)]
pub(crate) struct V1 {
    memory: PathBuf,
    pids: PathBuf,
    cpuacct: PathBuf,
    /// `None` where this machine mounts no v1 freezer.
    freezer: Option<PathBuf>,
}

impl V1 {
    /// Creates `name` below our own cgroup in each controller's hierarchy.
    pub(super) fn create(root: &CgroupRoot, name: &str) -> io::Result<V1> {
        let dir = |c: &str| {
            root.v1_dir(c)
                .map(|d| d.join(name))
                .ok_or_else(|| io::Error::other(format!("cgroup v1 `{c}` vanished")))
        };
        V1 {
            memory: dir("memory")?,
            pids: dir("pids")?,
            cpuacct: dir("cpuacct")?,
            freezer: root.v1_dir("freezer").map(|d| d.join(name)),
        }
        .made()
    }

    /// A child cgroup `name` (already checked to be one path component).
    pub(super) fn child(&self, name: &str) -> io::Result<V1> {
        V1 {
            memory: self.memory.join(name),
            pids: self.pids.join(name),
            cpuacct: self.cpuacct.join(name),
            freezer: self.freezer.as_ref().map(|f| f.join(name)),
        }
        .made()
    }

    /// Makes every directory; on failure removes those made. The freezer
    /// is optional (it only pauses): one that cannot be made is left out,
    /// and pausing then refuses, rather than the sandbox not starting.
    fn made(mut self) -> io::Result<V1> {
        if let Some(f) = &self.freezer {
            if fs::create_dir(f).is_err() {
                self.freezer = None;
            }
        }
        for d in [&self.memory, &self.pids, &self.cpuacct] {
            if let Err(e) = fs::create_dir(d) {
                let _ = self.remove();
                return Err(io::Error::new(e.kind(), format!("{}: {e}", d.display())));
            }
        }
        Ok(self)
    }

    fn each(&self) -> Vec<&PathBuf> {
        [&self.memory, &self.pids, &self.cpuacct]
            .into_iter()
            .chain(self.freezer.as_ref())
            .collect()
    }
}

impl CgroupManager for V1 {
    fn add(&self, pid: u32) -> io::Result<()> {
        for d in self.each() {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    fn self_join_files(&self) -> Option<Vec<PathBuf>> {
        Some(self.join_files())
    }

    fn join_files(&self) -> Vec<PathBuf> {
        self.each().iter().map(|d| d.join("tasks")).collect()
    }

    fn dirs(&self) -> Vec<PathBuf> {
        self.each().into_iter().cloned().collect()
    }

    fn cpu_usage(&self) -> io::Result<Duration> {
        let ns: u64 = read(&self.cpuacct.join("cpuacct.usage"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::other("unreadable cpuacct.usage"))?;
        Ok(Duration::from_nanos(ns))
    }

    fn events(&self) -> io::Result<Events> {
        Ok(Events {
            oom_kills: keyed(&read(&self.memory.join("memory.oom_control"))?, "oom_kill"),
            pids_refused: keyed(&read(&self.pids.join("pids.events"))?, "max"),
        })
    }

    fn write_bounds(&self, bounds: &Bounds) -> io::Result<()> {
        let mem = bounds.max_memory.to_string();
        write(&self.memory.join("memory.limit_in_bytes"), &mem)
            .and_then(|()| {
                // Swap counts against the bound where it is accounted.
                let memsw = self.memory.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &mem)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| {
                write(
                    &self.pids.join("pids.max"),
                    &bounds.max_processes.to_string(),
                )
            })
    }

    fn kill_all(&self) -> io::Result<()> {
        if let Some(f) = &self.freezer {
            super::thaw_dir(f);
        }
        kill_by_membership(&self.pids.join("cgroup.procs"))
    }

    fn freeze(&self, frozen: bool) -> io::Result<()> {
        let Some(f) = &self.freezer else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this machine mounts no cgroup v1 `freezer` (at /sys/fs/cgroup/freezer), so a sandbox cannot be paused here; mount it",
            ));
        };
        let state = f.join("freezer.state");
        let want = if frozen { "FROZEN" } else { "THAWED" };
        write(&state, want)?;
        super::wait_for(
            &state,
            |s| s.trim() == want,
            if frozen { "freezing" } else { "thawing" },
        )
    }

    fn remove(&self) -> io::Result<()> {
        let mut first = Ok(());
        for d in self.each() {
            if let Err(e) = rmdir_retry(d) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}
