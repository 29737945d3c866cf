//! Resource bounds through cgroups: one trait, a v1 and a v2 implementation,
//! dispatched by [`Cgroup`].
//!
//! The sandbox's cgroup is created *below the owner's own cgroup* in each
//! hierarchy (read from `/proc/self/cgroup`), so the owner's own limits still
//! apply to the sandbox and nothing is moved out of whatever supervises the
//! owner. On v1 the init joins by itself ([`join_self`]); on v2 the owner
//! moves it ([`CgroupManager::add`]). Processes are killed by membership: v2 writes `cgroup.kill`; v1
//! reads `cgroup.procs`, opens a pidfd for each pid, checks the pid is still
//! a member *after* the pidfd pins it, and signals through the pidfd, so a
//! reused pid outside the sandbox is never signalled.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::missing::{Mechanism, Missing};
use crate::plan::Bounds;

mod dispatch;
mod v1;
mod v2;

pub(crate) use dispatch::Cgroup;

/// What the workload ran into, as counted by the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Events {
    pub oom_kills: u64,
    pub pids_refused: u64,
}

/// A per-sandbox cgroup.
pub(crate) trait CgroupManager {
    /// Moves `pid` (an unreaped child of the caller) into the cgroup.
    fn add(&self, pid: u32) -> io::Result<()>;
    /// v1: the `tasks` file of each controller's directory, into which a
    /// single-threaded process writes `0` to join the cgroup itself (see
    /// [`join_self`]). `None` on v2, where the owner uses [`Self::add`].
    fn self_join_files(&self) -> Option<Vec<PathBuf>>;
    /// The files a process joins through by writing `0` (itself): v1 the
    /// `tasks` file of each controller, v2 `cgroup.procs`. Opened by the
    /// owner and handed to the warm init, so the kernel checks the owner's
    /// credentials (the opener's), not the init's.
    fn join_files(&self) -> Vec<PathBuf>;
    /// Every directory of this cgroup (one per v1 controller, or the one v2
    /// directory), for a record that outlives this process.
    fn dirs(&self) -> Vec<PathBuf>;
    /// CPU time used by every process that was ever in the cgroup.
    fn cpu_usage(&self) -> io::Result<Duration>;
    fn events(&self) -> io::Result<Events>;
    /// Writes the memory and process bounds (swap counts against memory
    /// where it is accounted).
    fn write_bounds(&self, bounds: &Bounds) -> io::Result<()>;
    /// Sends SIGKILL to every member, by membership (never a bare pid);
    /// a frozen cgroup is thawed first (a frozen task dies only thawed).
    fn kill_all(&self) -> io::Result<()>;
    /// Freezes every member (and every member of a cgroup below) or thaws
    /// them, returning once the kernel says it is done; an error where
    /// this machine has no freezer for the cgroup (v1 `freezer` not
    /// mounted), saying so.
    fn freeze(&self, frozen: bool) -> io::Result<()>;
    /// Removes the cgroup directories (members must be gone).
    fn remove(&self) -> io::Result<()>;
}

/// Where the hierarchies are.
#[derive(Clone, Debug)]
pub(crate) struct CgroupRoot {
    /// Usually `/sys/fs/cgroup`; a directory tree in tests.
    pub mount: PathBuf,
    /// Contents of `/proc/self/cgroup`.
    pub self_cgroup: String,
}

impl CgroupRoot {
    pub(crate) fn host() -> io::Result<Self> {
        Ok(CgroupRoot {
            mount: PathBuf::from("/sys/fs/cgroup"),
            self_cgroup: fs::read_to_string("/proc/self/cgroup")?,
        })
    }

    /// The directory of our own cgroup in the v1 hierarchy holding `controller`.
    fn v1_dir(&self, controller: &str) -> Option<PathBuf> {
        for line in self.self_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            if list.split(',').any(|c| c == controller) {
                let rel = path.trim_start_matches('/');
                for name in [list, controller] {
                    let mount = self.mount.join(name);
                    if mount.join("cgroup.procs").exists() {
                        return Some(mount.join(rel));
                    }
                }
            }
        }
        None
    }

    /// Our own cgroup in the v2 hierarchy, with the controllers it can give children.
    fn v2_dir(&self) -> Option<(PathBuf, String)> {
        let rel = self
            .self_cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))?
            .trim_start_matches('/');
        let mount = if self.mount.join("cgroup.controllers").exists() {
            self.mount.clone()
        } else {
            self.mount.join("unified")
        };
        let dir = mount.join(rel);
        let controllers = fs::read_to_string(dir.join("cgroup.controllers")).ok()?;
        Some((dir, controllers))
    }
}

fn has_word(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

/// Which generation can hold every bound here, or what is missing.
pub(crate) fn detect(root: &CgroupRoot) -> Result<Generation, Missing> {
    if let Some((_, controllers)) = root.v2_dir() {
        if ["memory", "pids", "cpu"]
            .iter()
            .all(|c| has_word(&controllers, c))
        {
            return Ok(Generation::V2);
        }
    }
    let mut missing = Missing { absent: vec![] };
    for (controller, mechanism) in [
        ("memory", Mechanism::CgroupMemory),
        ("pids", Mechanism::CgroupPids),
        ("cpuacct", Mechanism::CgroupCpuAccounting),
    ] {
        let ok = root
            .v1_dir(controller)
            .is_some_and(|d| d.join("cgroup.procs").exists());
        if !ok {
            missing.absent.push(crate::missing::Absent {
                mechanism,
                found: format!("no v1 `{controller}` hierarchy and no v2 `{controller}` controller"),
                help: format!(
                    "mount the cgroup v1 `{controller}` controller or enable it in the v2 hierarchy (cgroup.subtree_control)"
                ),
            });
        }
    }
    if missing.absent.is_empty() {
        Ok(Generation::V1)
    } else {
        Err(missing)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Generation {
    V1,
    V2,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn read(path: &Path) -> io::Result<String> {
    fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn keyed(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

fn parse_procs(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The sandbox cgroups below our own cgroup whose owner is gone: names
/// `cordon-…-PID-N` (one-shot `cordon-PID-N`, warm `cordon-KEY-PID-N`)
/// whose PID runs no more. Each entry is every directory of one name (one
/// per v1 controller, or the one v2 directory). A reused PID only hides a
/// leftover (it is then left alone), never the reverse.
pub(crate) fn orphaned_sandboxes() -> Vec<(String, Vec<PathBuf>)> {
    let Ok(root) = CgroupRoot::host() else {
        return Vec::new();
    };
    let parents: Vec<PathBuf> = ["memory", "pids", "cpuacct", "freezer"]
        .iter()
        .filter_map(|c| root.v1_dir(c))
        .chain(root.v2_dir().map(|(d, _)| d))
        .collect();
    let mut found: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
    for parent in parents {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let parts: Vec<&str> = name.split('-').collect();
            if parts.first() != Some(&"cordon") || parts.len() < 3 {
                continue;
            }
            let Some(pid) = parts[parts.len() - 2].parse::<u32>().ok() else {
                continue;
            };
            if parts[parts.len() - 1].parse::<u64>().is_err() {
                continue;
            }
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            found.entry(name).or_default().push(e.path());
        }
    }
    found.into_iter().collect()
}

/// Kills every process in the cgroup directories `dirs` and in every cgroup
/// below them (deepest first, by membership), then removes them all. For
/// reclaiming a sandbox from its record when its owner is gone. A directory
/// that is already gone is not an error.
pub(crate) fn reclaim(dirs: &[PathBuf]) -> io::Result<()> {
    fn below(dir: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    below(&e.path(), out);
                }
            }
        }
        out.push(dir.to_path_buf());
    }
    let mut first: io::Result<()> = Ok(());
    let mut keep = |r: io::Result<()>| {
        if let Err(e) = r {
            if e.kind() != io::ErrorKind::NotFound && first.is_ok() {
                first = Err(e);
            }
        }
    };
    // A paused sandbox's tasks die only thawed: every controller's
    // directory is thawed before any kill (the freezer's may come last).
    for dir in dirs {
        thaw_dir(dir);
    }
    for dir in dirs {
        let mut all = Vec::new();
        below(dir, &mut all);
        // Deepest first: a parent's procs file lists only its own members.
        for d in &all {
            let procs = d.join("cgroup.procs");
            if procs.exists() {
                keep(kill_by_membership(&procs));
            }
        }
        for d in &all {
            keep(rmdir_retry(d));
        }
    }
    first
}

/// Thaws the cgroup `dir` if it is a frozen one (v1 `freezer.state`, v2
/// `cgroup.freeze`); anything else is left as it is.
pub(super) fn thaw_dir(dir: &Path) {
    let v1 = dir.join("freezer.state");
    if v1.exists() {
        let _ = write(&v1, "THAWED");
    }
    let v2 = dir.join("cgroup.freeze");
    if v2.exists() {
        let _ = write(&v2, "0");
    }
}

/// Freezes or thaws the cgroup of `dirs` through whichever of them is a
/// freezer's (see [`crate::freeze_cgroups`]).
pub(crate) fn freeze_dirs(dirs: &[PathBuf], frozen: bool) -> io::Result<()> {
    let what = if frozen { "freezing" } else { "thawing" };
    for dir in dirs {
        let v1 = dir.join("freezer.state");
        if v1.exists() {
            let want = if frozen { "FROZEN" } else { "THAWED" };
            write(&v1, want)?;
            return wait_for(&v1, |s| s.trim() == want, what);
        }
        let v2 = dir.join("cgroup.freeze");
        if v2.exists() {
            write(&v2, if frozen { "1" } else { "0" })?;
            let want = if frozen { "frozen 1" } else { "frozen 0" };
            return wait_for(
                &dir.join("cgroup.events"),
                |s| s.lines().any(|l| l.trim() == want),
                what,
            );
        }
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this machine has no cgroup freezer for the sandbox (no v1 `freezer` mounted at /sys/fs/cgroup/freezer, no v2 `cgroup.freeze`), so it cannot be paused here; mount it",
    ))
}

/// Waits (up to 5 s) until `done` holds of the file `at`, re-read.
pub(super) fn wait_for(at: &Path, done: impl Fn(&str) -> bool, what: &str) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if done(&read(at)?) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "the kernel did not finish {what} in 5 s ({})",
                at.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Moves the calling process into the v1 cgroups whose `tasks` files are
/// `files`, by writing `0` (the calling thread) into each.
///
/// Writing a thread to `tasks` moves only that thread, so this refuses unless
/// the process has exactly one. In exchange the kernel skips the global
/// threadgroup lock that a `cgroup.procs` write takes, whose write side
/// waits for an RCU grace period.
pub(crate) fn join_self(files: &[PathBuf]) -> io::Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let threads = fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "the init has {threads} threads; joining by `tasks` needs exactly one"
        )));
    }
    for file in files {
        if !file.is_absolute() || file.file_name().is_none_or(|n| n != "tasks") {
            return Err(io::Error::other(format!(
                "{}: not a cgroup v1 `tasks` file",
                file.display()
            )));
        }
        write(file, "0")?;
    }
    Ok(())
}

fn kill_by_membership(procs_file: &Path) -> io::Result<()> {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = parse_procs(&read(procs_file)?);
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
                continue;
            };
            // The pidfd pins one process. Only if that pid is still listed as a
            // member after pinning do we know the pinned process is ours.
            let Ok(fd) = pidfd_open(p, PidfdFlags::empty()) else {
                continue;
            };
            if parse_procs(&read(procs_file)?).contains(&pid) {
                let _ = pidfd_send_signal(&fd, Signal::KILL);
            }
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "processes remain in {} after SIGKILL",
                procs_file.display()
            )));
        }
        // A killed process leaves the list as soon as it is reaped: look
        // again soon (most are gone within a millisecond).
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn wait_empty(procs_file: &Path) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !parse_procs(&read(procs_file)?).is_empty() {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{} did not empty",
                procs_file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn rmdir_retry(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v1(dir: &Path, controllers: &[&str]) -> CgroupRoot {
        for c in controllers {
            let d = dir.join(c).join("owner");
            fs::create_dir_all(&d).unwrap();
            fs::write(dir.join(c).join("cgroup.procs"), "").unwrap();
            fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        CgroupRoot {
            mount: dir.to_path_buf(),
            self_cgroup: "4:memory:/owner\n8:pids:/owner\n2:cpuacct:/owner\n0::/\n".into(),
        }
    }

    #[test]
    fn v1_with_every_controller_is_detected_below_our_own_cgroup() {
        let t = tempfile::tempdir().unwrap();
        let root = fake_v1(t.path(), &["memory", "pids", "cpuacct"]);
        assert_eq!(detect(&root).unwrap(), Generation::V1);
        assert_eq!(
            root.v1_dir("pids").unwrap(),
            t.path().join("pids").join("owner")
        );
    }

    #[test]
    fn a_missing_controller_is_named() {
        let t = tempfile::tempdir().unwrap();
        let root = fake_v1(t.path(), &["memory", "cpuacct"]);
        let missing = detect(&root).unwrap_err();
        assert!(missing.names(Mechanism::CgroupPids));
        assert!(!missing.names(Mechanism::CgroupMemory));
    }

    #[test]
    fn v2_without_memory_controller_is_not_enough() {
        // This machine's shape: a unified mount with no memory/pids controller.
        let t = tempfile::tempdir().unwrap();
        let unified = t.path().join("unified");
        fs::create_dir_all(&unified).unwrap();
        fs::write(unified.join("cgroup.controllers"), "").unwrap();
        let root = CgroupRoot {
            mount: t.path().to_path_buf(),
            self_cgroup: "0::/\n".into(),
        };
        let missing = detect(&root).unwrap_err();
        assert!(missing.names(Mechanism::CgroupMemory));
        fs::write(unified.join("cgroup.controllers"), "cpu memory pids").unwrap();
        assert_eq!(detect(&root).unwrap(), Generation::V2);
    }

    #[test]
    fn joining_by_tasks_refuses_a_multi_threaded_process() {
        // Writing `0` to `tasks` would move only the calling thread.
        let (stop, parked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || parked.recv());
        let t = tempfile::tempdir().unwrap();
        let tasks = t.path().join("tasks");
        fs::write(&tasks, "").unwrap();
        assert!(join_self(std::slice::from_ref(&tasks)).is_err());
        assert_eq!(fs::read_to_string(&tasks).unwrap(), "");
        assert!(join_self(&[]).is_ok());
        drop(stop);
        let _ = other.join();
    }

    #[test]
    fn counters_parse() {
        assert_eq!(
            keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            3
        );
        assert_eq!(keyed("max 7\n", "max"), 7);
        assert_eq!(parse_procs("12\n 13\n\n"), vec![12, 13]);
    }
}
