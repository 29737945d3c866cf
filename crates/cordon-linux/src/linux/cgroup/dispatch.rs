//! [`Cgroup`]: a sandbox's cgroup in either generation, dispatching to
//! [`V1`] or [`V2`] behind [`CgroupManager`]. Above both generations and
//! the shared parts they use (in `cgroup`), so nothing below it names it.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::v1::V1;
use super::v2::V2;
use super::{detect, CgroupManager, CgroupRoot, Events, Generation};
use crate::plan::Bounds;

/// A sandbox's cgroup in whichever generation this machine holds its
/// bounds with. It only dispatches: the work is in [`V1`] and [`V2`].
#[derive(Debug)]
pub(crate) enum Cgroup {
    V1(V1),
    V2(V2),
}

impl Cgroup {
    /// Creates `name` below our own cgroup and writes the bounds.
    pub(crate) fn create(root: &CgroupRoot, name: &str, bounds: &Bounds) -> io::Result<Cgroup> {
        let generation = detect(root).map_err(|m| io::Error::other(m.to_string()))?;
        let cg = match generation {
            Generation::V2 => Cgroup::V2(V2::create(root, name)?),
            Generation::V1 => Cgroup::V1(V1::create(root, name)?),
        };
        cg.limit(bounds).map(|()| cg)
    }

    /// Writes `bounds`; on failure removes the cgroup.
    fn limit(&self, bounds: &Bounds) -> io::Result<()> {
        let result = self.write_bounds(bounds);
        if result.is_err() {
            let _ = self.remove();
        }
        result
    }

    /// The generation's own cgroup, behind the trait.
    fn manager(&self) -> &dyn CgroupManager {
        match self {
            Cgroup::V1(v1) => v1,
            Cgroup::V2(v2) => v2,
        }
    }

    /// A child cgroup `name`, bounded by `bounds` when given. On v2 the
    /// parent first hands its children the memory and pids controllers
    /// (a v2 cgroup with controllers for children holds no processes, so
    /// warm sandboxes keep their init in a child of its own).
    pub(crate) fn child(&self, name: &str, bounds: Option<&Bounds>) -> io::Result<Cgroup> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(io::Error::other(format!("`{name}` is not a cgroup name")));
        }
        let child = match self {
            Cgroup::V1(v1) => Cgroup::V1(v1.child(name)?),
            Cgroup::V2(v2) => Cgroup::V2(v2.child(name)?),
        };
        match bounds {
            Some(b) => child.limit(b).map(|()| child),
            None => Ok(child),
        }
    }
}

impl CgroupManager for Cgroup {
    fn add(&self, pid: u32) -> io::Result<()> {
        self.manager().add(pid)
    }
    fn self_join_files(&self) -> Option<Vec<PathBuf>> {
        self.manager().self_join_files()
    }
    fn join_files(&self) -> Vec<PathBuf> {
        self.manager().join_files()
    }
    fn dirs(&self) -> Vec<PathBuf> {
        self.manager().dirs()
    }
    fn cpu_usage(&self) -> io::Result<Duration> {
        self.manager().cpu_usage()
    }
    fn events(&self) -> io::Result<Events> {
        self.manager().events()
    }
    fn write_bounds(&self, bounds: &Bounds) -> io::Result<()> {
        self.manager().write_bounds(bounds)
    }
    fn kill_all(&self) -> io::Result<()> {
        self.manager().kill_all()
    }
    fn freeze(&self, frozen: bool) -> io::Result<()> {
        self.manager().freeze(frozen)
    }
    fn remove(&self) -> io::Result<()> {
        self.manager().remove()
    }
}
