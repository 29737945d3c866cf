//! No leftovers after N cycles of acquire → exec → dispose at the container
//! rung (warm sandboxes), counted before and after: processes, cgroup
//! directories, mounts, namespaces, this process's descriptors and threads,
//! and the directories made under the work dir's parent.
//!
//! N is `CORDON_LEAK_CYCLES` (default 1000). Launching a sandbox needs root:
//! elsewhere the test skips loudly, and with `CI=true` a machine that cannot
//! hold the rung is a failure.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_backend_local::FRESH_ID_BASE;
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Identity};
use cordon_sandbox::{
    Backend, CallerContext, Capability, ExecRequest, ExitStatus, Isolation, Router, SandboxSpec,
};

mod common;

/// `Some(init)` when the container rung can be held here. Without it:
/// panic in CI, skip loudly elsewhere.
fn container_rung() -> Option<InitProgram> {
    common::rung_or_skip(Rung::Container, "the leak test")
}

/// `cordon:default` (masks and all), with bounds for a short round.
const POLICY: &str = r#"policy:
  extends: ["cordon:default"]
  compute:
    max_memory: 256MiB
    max_processes: 32
    max_cpu_seconds: 10
    max_wall_seconds: 30
"#;

fn caller() -> CallerContext {
    cordon_testkit::caller(
        "leak",
        "cycle",
        "agent",
        Identity {
            namespace: "leak".into(),
            attested: true,
            ..Identity::default()
        },
    )
}

/// The host uids this process's sandboxes get (workload and init), as
/// `cordon_backend_local` picks them: `FRESH_ID_BASE + (pid % 1e6) * 64 +
/// n`, the init `INIT_ID_OFFSET` above.
fn our_ids() -> BTreeSet<u32> {
    let base = FRESH_ID_BASE + (std::process::id() % 1_000_000) * 64;
    (0..64)
        .flat_map(|n| [base + n, base + n + cordon_backend_local::INIT_ID_OFFSET])
        .collect()
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// `(ppid, real uid)` of a live process.
fn status_of(pid: u32) -> Option<(u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
    };
    Some((field("PPid:")?, field("Uid:")?))
}

fn count_dir(p: &Path) -> usize {
    std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0)
}

use cordon_testkit::cgroup_dirs;

const CGROUP_ROOTS: [&str; 4] = [
    "/sys/fs/cgroup/memory",
    "/sys/fs/cgroup/pids",
    "/sys/fs/cgroup/cpuacct",
    "/sys/fs/cgroup/unified",
];
const NAMESPACES: [&str; 6] = ["mnt", "pid", "net", "user", "ipc", "uts"];

/// One look at the host. The `ours_*` fields can only change through this
/// test's sandboxes and are always held equal; the machine-wide ones are
/// held equal when `CI=true` (a quiet machine) and shown otherwise (a
/// developer's machine has other builds starting processes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    ours_processes: BTreeSet<u32>,
    ours_cgroup_dirs: BTreeSet<PathBuf>,
    ours_namespaces: BTreeSet<String>,
    /// The host mount namespace's mount points (one entry a mount).
    mounts: Vec<String>,
    self_fds: usize,
    self_threads: usize,
    work_parent_entries: usize,
    all_processes: usize,
    processes_uid_2e9: usize,
    all_cordon_cgroup_dirs: usize,
    all_namespaces: usize,
}

impl Snapshot {
    fn take(work_parent: &Path) -> Snapshot {
        let me = std::process::id();
        let ids = our_ids();
        let all = pids();
        let mut parents = BTreeMap::new();
        let mut uid_2e9 = 0;
        let mut ours = BTreeSet::new();
        let mut processes = 0;
        for &p in &all {
            if let Some((ppid, uid)) = status_of(p) {
                // Kernel threads (kthreadd's children) come and go on
                // their own.
                if p != 2 && ppid != 2 {
                    processes += 1;
                }
                parents.insert(p, ppid);
                if uid >= FRESH_ID_BASE {
                    uid_2e9 += 1;
                }
                if ids.contains(&uid) {
                    ours.insert(p);
                }
            }
        }
        // Our descendants too (the test harness's own threads are not
        // processes; a sandbox's stage 1 is our child).
        for &p in &all {
            let mut q = p;
            for _ in 0..64 {
                match parents.get(&q) {
                    Some(&pp) if pp == me => {
                        ours.insert(p);
                        break;
                    }
                    Some(&pp) if pp > 1 => q = pp,
                    _ => break,
                }
            }
        }
        let ns_of = |p: u32| -> Vec<String> {
            NAMESPACES
                .iter()
                .filter_map(|n| {
                    std::fs::read_link(format!("/proc/{p}/ns/{n}"))
                        .ok()
                        .map(|t| t.display().to_string())
                })
                .collect()
        };
        let mine_ns: BTreeSet<String> = ns_of(me).into_iter().collect();
        let ours_namespaces: BTreeSet<String> = ours
            .iter()
            .flat_map(|&p| ns_of(p))
            .filter(|n| !mine_ns.contains(n))
            .collect();
        let all_namespaces: BTreeSet<String> = all.iter().flat_map(|&p| ns_of(p)).collect();
        let mut ours_cg = BTreeSet::new();
        let mut all_cg = 0;
        for r in CGROUP_ROOTS {
            ours_cg.extend(cgroup_dirs(Path::new(r), Some(me)));
            all_cg += cgroup_dirs(Path::new(r), None).len();
        }
        Snapshot {
            ours_processes: ours,
            ours_cgroup_dirs: ours_cg,
            ours_namespaces,
            mounts: {
                let mut m: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.split(' ').nth(4).map(String::from))
                    .collect();
                m.sort();
                m
            },
            self_fds: count_dir(Path::new("/proc/self/fd")),
            self_threads: count_dir(Path::new("/proc/self/task")),
            work_parent_entries: count_dir(work_parent),
            all_processes: processes,
            processes_uid_2e9: uid_2e9,
            all_cordon_cgroup_dirs: all_cg,
            all_namespaces: all_namespaces.len(),
        }
    }

    /// What differs from `before`, held strictly (`strict`: the
    /// machine-wide counts too).
    fn leaks(&self, before: &Snapshot, strict: bool) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |what: &str, b: String, a: String, held: bool| {
            if held && a != b {
                out.push(format!("{what}: before {b}, after {a}"));
            }
        };
        check(
            "processes of our sandboxes' uids or our descendants",
            format!("{:?}", before.ours_processes),
            format!("{:?}", self.ours_processes),
            true,
        );
        check(
            "our cgroup dirs",
            format!("{:?}", before.ours_cgroup_dirs),
            format!("{:?}", self.ours_cgroup_dirs),
            true,
        );
        check(
            "namespaces held by our processes",
            format!("{:?}", before.ours_namespaces),
            format!("{:?}", self.ours_namespaces),
            true,
        );
        check(
            "this process's descriptors",
            before.self_fds.to_string(),
            self.self_fds.to_string(),
            true,
        );
        check(
            "this process's threads",
            before.self_threads.to_string(),
            self.self_threads.to_string(),
            true,
        );
        check(
            "entries under the work dir's parent",
            before.work_parent_entries.to_string(),
            self.work_parent_entries.to_string(),
            true,
        );
        // Machine-wide counts: only growth is ours to answer for; other
        // processes on the machine may end meanwhile.
        let mut grew = |what: &str, b: usize, a: usize| {
            if strict && a > b {
                out.push(format!("{what}: before {b}, after {a}"));
            }
        };
        grew(
            "processes (/proc entries, kernel threads aside)",
            before.all_processes,
            self.all_processes,
        );
        grew(
            "processes with uid >= 2_000_000_000",
            before.processes_uid_2e9,
            self.processes_uid_2e9,
        );
        grew(
            "cgroup dirs named cordon-*",
            before.all_cordon_cgroup_dirs,
            self.all_cordon_cgroup_dirs,
        );
        grew(
            "namespaces (distinct across /proc/*/ns)",
            before.all_namespaces,
            self.all_namespaces,
        );
        // Mounts are the machine's (the host's mount namespace): a mount
        // that is new is a leak; one that went away was another process's
        // teardown finishing (a test binary before this one), not ours to
        // answer for, and is only reported.
        let mut gone = before.mounts.clone();
        let mut new = Vec::new();
        for m in &self.mounts {
            match gone.iter().position(|g| g == m) {
                Some(i) => {
                    gone.remove(i);
                }
                None => new.push(m.clone()),
            }
        }
        if !new.is_empty() {
            out.push(format!(
                "mounts (/proc/self/mountinfo): before {}, after {}; new: {new:?}",
                before.mounts.len(),
                self.mounts.len()
            ));
        }
        if !gone.is_empty() {
            eprintln!("leak test: mounts that went away meanwhile (not this test's): {gone:?}");
        }
        out
    }
}

#[test]
fn acquire_exec_dispose_cycles_leave_nothing_behind() {
    let Some(init) = container_rung() else {
        return;
    };
    let cycles: usize = std::env::var("CORDON_LEAK_CYCLES")
        .ok()
        .map(|v| v.parse().expect("CORDON_LEAK_CYCLES is a number"))
        .unwrap_or(1000);
    let parent = common::work_parent("cordon-leak-");
    let policy = common::policy("leak.yaml", POLICY);
    let backend = common::backend(
        Rung::Container,
        policy.clone(),
        parent.path(),
        init,
        Default::default(),
    );
    let router = Router::builder(policy, Deployment::default())
        .min_isolation(Isolation::Container)
        .backend(backend.clone())
        .build()
        .unwrap();
    let spec = SandboxSpec::new("leak", "host")
        .unwrap()
        .with_requires([Capability::Exec]);
    let caller = caller();
    let key = caller.resolve().unwrap().key;
    let exec = ExecRequest {
        argv: ["/bin/sh", "-c", "echo x > f; sleep 0 &"]
            .map(String::from)
            .to_vec(),
        env: BTreeMap::new(),
        stdin: Vec::new(),
        timeout: Duration::from_secs(20),
        max_output_bytes: 4096,
    };
    let cycle = || {
        let sandbox = router.acquire(&caller, &spec).expect("acquire");
        let out = sandbox.exec(&exec).expect("exec");
        assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
        drop(sandbox);
        assert!(backend.dispose(&key).expect("dispose"), "nothing disposed");
    };
    // One cycle first: what the first sandbox sets up once per process
    // (the event threads' runtime, lazily opened files) is not a leak.
    cycle();
    // Dispose returns once the sandbox's cgroups are gone; its last
    // processes may still be exiting, and the exec's reader threads (with
    // their pipe ends) may still be ending: settle before counting too,
    // until two counts 50 ms apart agree (a "before" taken while one of
    // those threads lived made the "after" look one thread and one
    // descriptor short).
    let settled = Instant::now() + Duration::from_secs(5);
    let mut last: Option<Snapshot> = None;
    let before = loop {
        let s = Snapshot::take(parent.path());
        let steady = last
            .as_ref()
            .is_some_and(|l| l.self_threads == s.self_threads && l.self_fds == s.self_fds);
        if (s.ours_processes.is_empty() && steady) || Instant::now() > settled {
            break s;
        }
        last = Some(s);
        std::thread::sleep(Duration::from_millis(50));
    };
    let started = Instant::now();
    for _ in 0..cycles {
        cycle();
    }
    let took = started.elapsed();
    let strict =
        cordon_testkit::in_ci() || std::env::var("CORDON_LEAK_STRICT").is_ok_and(|v| v == "1");
    // A short settle for the kernel to reap and remove.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (after, leaks) = loop {
        let after = Snapshot::take(parent.path());
        let leaks = after.leaks(&before, strict);
        if leaks.is_empty() || Instant::now() > deadline {
            break (after, leaks);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "leak: {cycles} cycles in {:.1}s ({:.1} ms/cycle); strict machine-wide counts: {strict}\nbefore: {before:?}\nafter:  {after:?}",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / cycles.max(1) as f64
    );
    assert!(
        leaks.is_empty(),
        "after {cycles} cycles something was left behind:\n  {}",
        leaks.join("\n  ")
    );
    // Shown when not held: a developer's machine runs other things.
    if !strict {
        for l in after.leaks(&before, true) {
            eprintln!("note (machine-wide, not held outside CI): {l}");
        }
    }
}
