//! `cordon serve` under load, on loopback and bounded in count and time
//! (issue 17): N sandboxes made across a few client threads, then M execs
//! fired at once across them, each on its own connection. Every exec is
//! answered exactly once (one answer on its connection, nothing after it)
//! with its own output and status 0, and ran exactly once (each appends its
//! id to a ledger in its sandbox, read back at the end; the server's
//! `cordon_exec_seconds_count` agrees). Then every sandbox is disposed of
//! through the API and nothing of them is left: keepers, processes, cgroup
//! directories, mounts, loop devices, records in the state directory —
//! counted while the server still runs, and again after it stops. The
//! server keeps its sandboxes as `cordon serve` does by default (a keeper
//! process each), in a state directory of the test's own.
//!
//! The latency of each exec (request written to answer read, so queueing
//! behind the other M - 1 included) is printed as p50/p90/p99/max and, with
//! `CORDON_LOAD_REPORT=FILE`, written there as JSON with every sample.
//!
//! Environment: `CORDON_LOAD_SANDBOXES` (default 50), `CORDON_LOAD_EXECS`
//! (default 500), `CORDON_LOAD_DEADLINE_SECONDS` (default 300: past it the
//! server is stopped and the test fails instead of hanging),
//! `CORDON_LOAD_REPORT`. Needs root (as tests/serve.rs); with `CI=true`
//! machine-wide counts (processes of sandbox uids, cordon cgroups, loop
//! devices, mounts) must not grow either, as in cordon-backend-local's
//! tests/leak.rs.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a failed setup step is a failed test"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cordon_testkit::in_ci;

const TOKEN: &str = "token-load";
const SCOPE: &str = "load";
/// Host uids of sandboxes start here (cordon_backend_local::FRESH_ID_BASE).
const FRESH_ID_BASE: u32 = 2_000_000_000;

fn env_n(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}=`{v}` is not a whole number"))
    })
}

fn root() -> bool {
    cordon_testkit::runs_here(
        "cordon serve under load",
        (!cordon_testkit::is_root()).then_some("its backends need root"),
    )
}

fn sha256_hex(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then up to `grace` for it to exit; its exit code.
    fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Server {
    /// SIGTERM, so the server disposes of its sandboxes; SIGKILL only if it
    /// does not stop within ten seconds.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop(Duration::from_secs(10));
        }
    }
}

fn start(dir: &Path, sandboxes: usize) -> Server {
    // Limits well above the load: this test is about the server under
    // load, not its refusals (tests/serve.rs has those).
    let config = format!(
        "listen: 127.0.0.1:0\nmin_isolation: container\nsandboxes: {{state_dir: state, dispose_on_shutdown: true}}\ncredentials:\n  - name: load\n    token_sha256: {}\n    scope: {SCOPE}\n    identity: {{namespace: {SCOPE}, name: agent, attested: true}}\nlimits: {{max_sandboxes: {}, requests_per_second: 1000000, max_connections: 100000, max_connections_per_peer: 100000, header_timeout_seconds: 3600}}\n",
        sha256_hex(TOKEN),
        sandboxes + 1
    );
    let file = dir.join("serve.yaml");
    std::fs::write(&file, config).expect("config");
    let mut child = cordon_testkit::cordon!()
        .command(["serve", "--config", file.to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cordon serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
        .to_string();
    Server { child, addr }
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: &str, deadline: Instant) -> Result<Conn, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(left)).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn {
            r: BufReader::new(s),
        })
    }

    fn send(&mut self, method: &str, path: &str, body: &str) -> Result<(), String> {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.r
            .get_mut()
            .write_all(req.as_bytes())
            .map_err(|e| format!("send: {e}"))
    }

    /// One answer: its status and body (the server answers these with a
    /// length, not chunks).
    fn answer(&mut self) -> Result<(u16, String), String> {
        let mut line = String::new();
        self.r
            .read_line(&mut line)
            .map_err(|e| format!("status line: {e}"))?;
        let status: u16 = line
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not a status line: {line:?}"))?;
        let mut length = None;
        loop {
            line.clear();
            self.r
                .read_line(&mut line)
                .map_err(|e| format!("header: {e}"))?;
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse::<usize>().ok();
                }
            }
        }
        let length = length.ok_or("an answer without Content-Length")?;
        let mut body = vec![0; length];
        self.r
            .read_exact(&mut body)
            .map_err(|e| format!("body: {e}"))?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    fn post(
        &mut self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, serde_json::Value), String> {
        self.send("POST", path, &body.to_string())?;
        let (status, text) = self.answer()?;
        let v = serde_json::from_str(&text).map_err(|e| format!("{e}: {text:?}"))?;
        Ok((status, v))
    }

    /// Hangs up its side, then reads to the end: whatever arrives is an
    /// answer no request asked for.
    fn nothing_more(mut self) -> Result<(), String> {
        let _ = self.r.get_ref().shutdown(Shutdown::Write);
        let mut rest = Vec::new();
        self.r
            .read_to_end(&mut rest)
            .map_err(|e| format!("after the answer: {e}"))?;
        if rest.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes after the one answer: {:?}",
                rest.len(),
                String::from_utf8_lossy(&rest)
            ))
        }
    }
}

/// Nearest-rank percentiles of durations, in milliseconds.
struct Latencies {
    sorted_ms: Vec<f64>,
}

impl Latencies {
    fn new(samples: &[Duration]) -> Latencies {
        let mut sorted_ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        sorted_ms.sort_by(f64::total_cmp);
        Latencies { sorted_ms }
    }

    fn at(&self, p: f64) -> f64 {
        let n = self.sorted_ms.len();
        if n == 0 {
            return f64::NAN;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank within the sample count"
        )]
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        self.sorted_ms[rank - 1]
    }

    fn line(&self) -> String {
        format!(
            "p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (min {:.1} ms, n {})",
            self.at(0.5),
            self.at(0.9),
            self.at(0.99),
            self.at(1.0),
            self.at(0.0),
            self.sorted_ms.len()
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "p50": self.at(0.5), "p90": self.at(0.9), "p99": self.at(0.99),
            "max": self.at(1.0), "min": self.at(0.0), "n": self.sorted_ms.len(),
            "samples": self.sorted_ms,
        })
    }
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc").map_or_else(
        |_| Vec::new(),
        |d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        },
    )
}

/// `(ppid, real uid, start time)` of a live process.
fn stat_of(pid: u32) -> Option<(u32, u32, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command's closing parenthesis.
    let start = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    Some((field("PPid:")?, field("Uid:")?, start))
}

/// Directories (any depth, bounded) under the cgroup roots whose name
/// starts with `cordon-`, and what is beneath them; `maker` keeps only
/// those a process of that pid made (`cordon-KEY-PID-N`).
fn cordon_cgroups(maker: Option<u32>) -> BTreeSet<String> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .flat_map(|root| cordon_testkit::cgroup_dirs(Path::new(root), maker))
        .map(|p| p.display().to_string())
        .collect()
}

/// Attached loop devices: `(device, backing file)`.
fn loop_devices() -> Vec<(String, String)> {
    let Ok(d) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    d.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            Some((name, backing.trim().to_string()))
        })
        .collect()
}

/// Whether `pid` is a keeper (cordon's `__sandbox-keeper`), of `handle`
/// when given (`--handle=HANDLE` on its command line).
fn is_keeper(pid: u32, handle: Option<&str>) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|b| *b == 0);
    let keeper = args.clone().any(|a| a == b"__sandbox-keeper");
    keeper && handle.is_none_or(|h| args.any(|a| a == format!("--handle={h}").as_bytes()))
}

/// The keeper of the sandbox `handle`: `(pid, uid, start time)`.
fn keeper_of(handle: &str) -> Option<(u32, u32, u64)> {
    pids()
        .into_iter()
        .find(|p| is_keeper(*p, Some(handle)))
        .and_then(|p| stat_of(p).map(|(_, uid, start)| (p, uid, start)))
}

fn mountinfo() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().map(String::from).collect())
        .unwrap_or_default()
}

/// What one server's sandboxes hold on this machine, found by their
/// owners' pids: the server's and each sandbox's keeper's (a sandbox's
/// volume, image and cgroups are named with the pid of the process that
/// made them, its keeper).
#[derive(Debug, Clone)]
struct Held {
    /// The owners' descendants: `(pid, uid, start time)`.
    processes: BTreeSet<(u32, u32, u64)>,
    cgroup_dirs: BTreeSet<String>,
    mounts: Vec<String>,
    loop_devices: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MachineWide {
    processes_of_sandbox_uids: usize,
    keepers: usize,
    cordon_cgroup_dirs: usize,
    mounts: usize,
    loop_devices: usize,
    id_leases: usize,
}

impl Held {
    fn take(owners: &BTreeSet<u32>) -> Held {
        let all = pids();
        let mut stats = BTreeMap::new();
        for &p in &all {
            if let Some(s) = stat_of(p) {
                stats.insert(p, s);
            }
        }
        let mut processes = BTreeSet::new();
        for (&p, &(_, uid, start)) in &stats {
            let mut q = p;
            for _ in 0..64 {
                match stats.get(&q) {
                    Some(&(pp, _, _)) if owners.contains(&pp) => {
                        processes.insert((p, uid, start));
                        break;
                    }
                    Some(&(pp, _, _)) if pp > 1 => q = pp,
                    _ => break,
                }
            }
        }
        let volumes: Vec<String> = owners
            .iter()
            .map(|p| format!("cordon-volume-{p}-"))
            .collect();
        let named = |s: &str| volumes.iter().any(|v| s.contains(v));
        Held {
            processes,
            cgroup_dirs: owners
                .iter()
                .flat_map(|p| cordon_cgroups(Some(*p)))
                .collect(),
            mounts: mountinfo().into_iter().filter(|m| named(m)).collect(),
            loop_devices: loop_devices()
                .into_iter()
                .filter(|(_, b)| named(b))
                .collect(),
        }
    }

    /// What is still held of the server's sandboxes, and of the processes
    /// seen in them earlier (by pid and start time, wherever they went).
    fn leftovers(&self, seen: &BTreeSet<(u32, u32, u64)>) -> Vec<String> {
        let mut out = Vec::new();
        if !self.processes.is_empty() {
            out.push(format!(
                "the server's and the keepers' descendants: {:?}",
                self.processes
            ));
        }
        let alive: Vec<_> = seen
            .iter()
            .filter(|(p, _, start)| stat_of(*p).is_some_and(|(_, _, s)| s == *start))
            .collect();
        if !alive.is_empty() {
            out.push(format!(
                "keepers and sandbox processes still alive: {alive:?}"
            ));
        }
        if !self.cgroup_dirs.is_empty() {
            out.push(format!("cgroup dirs: {:?}", self.cgroup_dirs));
        }
        if !self.mounts.is_empty() {
            out.push(format!("volume mounts: {:?}", self.mounts));
        }
        if !self.loop_devices.is_empty() {
            out.push(format!("loop devices: {:?}", self.loop_devices));
        }
        out
    }
}

impl MachineWide {
    fn take() -> MachineWide {
        let stats: BTreeMap<u32, (u32, u32, u64)> = pids()
            .into_iter()
            .filter_map(|p| stat_of(p).map(|s| (p, s)))
            .collect();
        MachineWide::count(&stats, &mountinfo(), &loop_devices())
    }

    fn count(
        stats: &BTreeMap<u32, (u32, u32, u64)>,
        mounts: &[String],
        loops: &[(String, String)],
    ) -> MachineWide {
        MachineWide {
            processes_of_sandbox_uids: stats
                .values()
                .filter(|(_, uid, _)| *uid >= FRESH_ID_BASE)
                .count(),
            keepers: stats.keys().filter(|p| is_keeper(**p, None)).count(),
            cordon_cgroup_dirs: cordon_cgroups(None).len(),
            mounts: mounts.len(),
            loop_devices: loops.len(),
            id_leases: held_id_leases(),
        }
    }

    /// Growth from `before` (other processes on the machine may end
    /// meanwhile; only growth is ours to answer for).
    fn grew(&self, before: &MachineWide) -> Vec<String> {
        let pairs = [
            (
                "processes of sandbox uids (>= 2e9)",
                before.processes_of_sandbox_uids,
                self.processes_of_sandbox_uids,
            ),
            (
                "cgroup dirs named cordon-*",
                before.cordon_cgroup_dirs,
                self.cordon_cgroup_dirs,
            ),
            ("keeper processes", before.keepers, self.keepers),
            ("mounts", before.mounts, self.mounts),
            ("loop devices", before.loop_devices, self.loop_devices),
            ("uid leases", before.id_leases, self.id_leases),
        ];
        pairs
            .iter()
            .filter(|(_, b, a)| a > b)
            .map(|(what, b, a)| format!("{what}: before {b}, after {a}"))
            .collect()
    }
}

/// Waits (up to five seconds) for `check` to find nothing, then asserts it.
fn settled(what: &str, mut check: impl FnMut() -> Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = check();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = check();
    }
    assert!(
        left.is_empty(),
        "{what}, something was left behind:\n  {}",
        left.join("\n  ")
    );
}

/// Runs `f` on each of `threads` threads over its share of `0..n` (a
/// keep-alive connection each); every error is collected.
fn across<T: Send + 'static>(
    addr: &str,
    n: usize,
    threads: usize,
    deadline: Instant,
    f: impl Fn(&mut Conn, usize) -> Result<T, String> + Send + Sync + 'static,
) -> Vec<(usize, Result<T, String>)> {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (f, addr) = (f.clone(), addr.to_string());
            std::thread::spawn(move || {
                let mut conn = Conn::open(&addr, deadline);
                (t..n)
                    .step_by(threads)
                    .map(|i| {
                        let r = match &mut conn {
                            Ok(c) => f(c, i),
                            Err(e) => Err(e.clone()),
                        };
                        (i, r)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut out: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a client thread"))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// On a failed run, the sandboxes are disposed of through the state
/// directory (`cordon sandbox down`, as a replica would) before the server
/// is stopped: kept sandboxes outlive a server that has to be killed, and
/// the state directory goes with the test's temporary directory.
struct DisposeOnFailure {
    state: std::path::PathBuf,
    n: usize,
}

impl Drop for DisposeOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for i in 0..self.n {
            let _ = cordon_testkit::cordon!()
                .command([
                    "sandbox",
                    "down",
                    "--scope",
                    SCOPE,
                    "--thread",
                    &thread_of(i),
                ])
                .env("CORDON_STATE_DIR", &self.state)
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// One load test at a time: each presses the machine (two cores here), and
/// each counts what is left machine-wide, which another's sandboxes would
/// muddle.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn thread_of(i: usize) -> String {
    format!("t{i}")
}

#[test]
fn many_sandboxes_and_concurrent_execs_each_answered_once_and_nothing_left() {
    if !root() {
        return;
    }
    let _serial = one_at_a_time();
    let n = env_n("CORDON_LOAD_SANDBOXES", 50).max(1);
    let m = env_n("CORDON_LOAD_EXECS", 500);
    let limit = Duration::from_secs(env_n("CORDON_LOAD_DEADLINE_SECONDS", 300) as u64);
    let began = Instant::now();
    let deadline = began + limit;
    let dir = tempfile::tempdir().expect("dir");
    let machine_before = MachineWide::take();
    let mut server = start(dir.path(), n);
    let _cleanup = DisposeOnFailure {
        state: dir.path().join("state"),
        n,
    };
    let spid = server.pid();
    let addr = server.addr.clone();

    // Past the deadline the server is stopped: every client's connection
    // ends, and the test fails saying so rather than hanging.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
            eprintln!("serve load: past the deadline of {limit:?}; stopping the server");
            if let Ok(pid) = i32::try_from(spid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
    });
    let late = || {
        assert!(
            Instant::now() < deadline,
            "past the deadline of {limit:?} (CORDON_LOAD_DEADLINE_SECONDS)"
        );
    };

    // N sandboxes, made across four threads; each has a keeper.
    let t = Instant::now();
    let made = across(&addr, n, 4.min(n), deadline, |c, i| {
        let started = Instant::now();
        let (status, out) = c.post(
            "/v1/sandboxes",
            &serde_json::json!({"thread": thread_of(i)}),
        )?;
        let took = started.elapsed();
        match out["handle"].as_str() {
            Some(h) if status == 200 && out["rung"] == "container" => Ok((took, h.to_string())),
            _ => Err(format!("{status} {out}")),
        }
    });
    let create_wall = t.elapsed();
    let failed: Vec<_> = made.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {n} sandboxes were not made: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let made: Vec<(Duration, String)> = made.into_iter().filter_map(|(_, r)| r.ok()).collect();
    let create = Latencies::new(&made.iter().map(|(d, _)| *d).collect::<Vec<_>>());
    let keepers: BTreeSet<(u32, u32, u64)> = made
        .iter()
        .map(|(_, h)| keeper_of(h).unwrap_or_else(|| panic!("no keeper serves `{h}`")))
        .collect();
    assert_eq!(keepers.len(), n, "a keeper each: {keepers:?}");
    let owners: BTreeSet<u32> = keepers.iter().map(|(p, _, _)| *p).chain([spid]).collect();
    late();

    // While they live: the counts see each one (so a zero later means
    // gone, not unseen).
    let live = Held::take(&owners);
    let seen: BTreeSet<_> = live.processes.iter().chain(&keepers).copied().collect();
    assert!(
        live.mounts.len() >= n && live.loop_devices.len() >= n && live.cgroup_dirs.len() >= n,
        "{n} sandboxes but {} volume mounts, {} loop devices, {} cgroup dirs",
        live.mounts.len(),
        live.loop_devices.len(),
        live.cgroup_dirs.len()
    );
    assert!(
        seen.iter()
            .filter(|(_, uid, _)| *uid >= FRESH_ID_BASE)
            .count()
            >= n,
        "{n} sandboxes but these processes of sandbox uids: {seen:?}"
    );
    let leases = held_id_leases();
    assert!(
        leases >= n,
        "{n} sandboxes but {leases} held uid leases in /run/cordon-ids"
    );

    // M execs at once, each on its own connection (opened first), fired
    // together; each prints its own id and appends it to its sandbox's
    // ledger.
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let id_of = |i: usize| format!("x{i}-{nonce}");
    let gate = Arc::new(Barrier::new(m + 1));
    let t_execs = Instant::now();
    let clients: Vec<_> = (0..m)
        .map(|i| {
            let (gate, addr, id) = (gate.clone(), addr.clone(), id_of(i));
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || -> Result<(Instant, Instant), String> {
                    let conn = Conn::open(&addr, deadline);
                    gate.wait();
                    let mut conn = conn?;
                    let body = serde_json::json!({
                        "thread": thread_of(i % n),
                        "argv": ["sh", "-c", format!("echo {id}; echo {id} >> ledger")],
                        "timeout_seconds": limit.as_secs(),
                    });
                    let started = Instant::now();
                    let (status, out) = conn.post("/v1/sandboxes/exec", &body)?;
                    let answered = Instant::now();
                    conn.nothing_more()?;
                    let want = format!("{id}\n");
                    if status == 200
                        && out["status"]["code"] == 0
                        && out["stdout"] == want.as_str()
                        && out["stderr"] == ""
                    {
                        Ok((started, answered))
                    } else {
                        Err(format!("{status} {out}"))
                    }
                })
                .expect("a client thread")
        })
        .collect();
    // Every connection is open (or failed) before the first request.
    gate.wait();
    let t_fired = Instant::now();
    let ran: Vec<Result<(Instant, Instant), String>> = clients
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("the client panicked".into()))
        })
        .collect();
    let exec_wall = t_fired.elapsed();
    let connect_wall = t_fired - t_execs;
    let bad: Vec<_> = ran
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| (id_of(i), e)))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {m} execs were not answered once with their own output: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    let spans: Vec<(Instant, Instant)> = ran.iter().filter_map(|r| r.clone().ok()).collect();
    let exec = Latencies::new(&spans.iter().map(|(s, a)| *a - *s).collect::<Vec<_>>());
    // How many were in flight at once (sent, not yet answered), as the
    // clients saw it: the proof that the M were concurrent, not a queue
    // the clients made.
    let mut edges: Vec<(Instant, i64)> = spans
        .iter()
        .flat_map(|(s, a)| [(*s, 1), (*a, -1)])
        .collect();
    edges.sort();
    let peak = edges
        .iter()
        .scan(0i64, |n, (_, d)| {
            *n += d;
            Some(*n)
        })
        .max()
        .unwrap_or(0);
    late();

    // Each ran exactly once: its sandbox's ledger holds its id once.
    let ledgers = across(&addr, n, 4.min(n), deadline, |c, s| {
        let (status, out) = c.post(
            "/v1/sandboxes/exec",
            &serde_json::json!({"thread": thread_of(s), "argv": ["sh", "-c", "cat ledger 2>/dev/null; true"]}),
        )?;
        if status != 200 || out["status"]["code"] != 0 {
            return Err(format!("{status} {out}"));
        }
        let mut got: Vec<String> = out["stdout"]
            .as_str()
            .unwrap_or("")
            .lines()
            .map(String::from)
            .collect();
        got.sort();
        Ok(got)
    });
    for (s, got) in ledgers {
        let got = got.unwrap_or_else(|e| panic!("sandbox {s}'s ledger: {e}"));
        let mut want: Vec<String> = (s..m).step_by(n).map(id_of).collect();
        want.sort();
        assert_eq!(
            got, want,
            "sandbox {s} did not run its execs exactly once each"
        );
    }
    // The server counted as many execs: M, and the N ledger reads.
    let mut c = Conn::open(&addr, deadline).expect("connect");
    c.send("GET", "/metrics", "").expect("metrics");
    let (status, metrics) = c.answer().expect("metrics");
    assert_eq!(status, 200, "{metrics}");
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cordon_exec_seconds_count{{scope=\"{SCOPE}\"}} ")))
        .and_then(|v| v.trim().parse::<usize>().ok());
    assert_eq!(counted, Some(m + n), "the server's exec count:\n{metrics}");
    late();

    // Every sandbox disposed of through the API, with the server running.
    let t = Instant::now();
    let gone = across(&addr, n, 4.min(n), deadline, |c, i| {
        let (status, out) = c.post(
            "/v1/sandboxes/dispose",
            &serde_json::json!({"thread": thread_of(i)}),
        )?;
        if status == 200 && out["disposed"] == 1 {
            Ok(())
        } else {
            Err(format!("{status} {out}"))
        }
    });
    let dispose_wall = t.elapsed();
    for (i, r) in &gone {
        assert!(r.is_ok(), "sandbox {i} not disposed of: {r:?}");
    }
    // Nor any record of them in the state directory (a record, the
    // keeper's socket and log per sandbox).
    let records = dir.path().join("state/sandboxes");
    let left_in_state = || -> Vec<String> {
        std::fs::read_dir(&records).map_or_else(
            |e| vec![format!("`{}`: {e}", records.display())],
            |d| {
                d.flatten()
                    .map(|e| format!("in the state directory: {}", e.path().display()))
                    .collect()
            },
        )
    };
    settled(
        "after every sandbox was disposed of (server running)",
        || {
            let mut l = Held::take(&owners).leftovers(&seen);
            l.extend(left_in_state());
            l
        },
    );
    late();

    // The server stops cleanly with nothing to dispose of, and still
    // nothing of its sandboxes is left.
    let code = server.stop(Duration::from_secs(30));
    let _ = done_tx.send(());
    let _ = watchdog.join();
    assert_eq!(code, Some(0), "the server's exit");
    settled("after the server stopped", || {
        Held::take(&owners).leftovers(&seen)
    });
    let strict = in_ci() || std::env::var("CORDON_LOAD_STRICT").is_ok_and(|v| v == "1");
    let machine = || MachineWide::take().grew(&machine_before);
    if strict {
        settled("machine-wide (CI=true)", machine);
    } else {
        for l in machine() {
            eprintln!("note (machine-wide, held only with CI=true): {l}");
        }
    }
    let whole = began.elapsed();

    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    #[expect(clippy::cast_precision_loss, reason = "a count of execs")]
    let rate = m as f64 / exec_wall.as_secs_f64();
    let report = format!(
        "serve load: {n} sandboxes, {m} concurrent execs, container rung, {cpus} cpus, load average {}\n  create ({n} across 4 threads): {:.2} s; {}\n  connect ({m} connections): {:.2} s\n  exec ({m} at once, {peak} in flight at the peak): {:.2} s, {rate:.0} execs/s; {}\n  dispose: {:.2} s\n  whole test: {:.1} s",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        create_wall.as_secs_f64(),
        create.line(),
        connect_wall.as_secs_f64(),
        exec_wall.as_secs_f64(),
        exec.line(),
        dispose_wall.as_secs_f64(),
        whole.as_secs_f64(),
    );
    eprintln!("{report}");
    if let Some(file) = std::env::var_os("CORDON_LOAD_REPORT") {
        let json = serde_json::json!({
            "sandboxes": n, "execs": m, "rung": "container", "cpus": cpus,
            "loadavg": load.trim(),
            "create_seconds": create_wall.as_secs_f64(),
            "exec_seconds": exec_wall.as_secs_f64(),
            "execs_per_second": rate,
            "peak_in_flight": peak,
            "dispose_seconds": dispose_wall.as_secs_f64(),
            "whole_seconds": whole.as_secs_f64(),
            "create_ms": create.json(),
            "exec_ms": exec.json(),
            "summary": report,
        });
        std::fs::write(&file, format!("{json:#}\n")).expect("CORDON_LOAD_REPORT");
    }
}

/// Sandbox uid leases held now: files of `/run/cordon-ids` some process
/// holds a `flock` on (`/proc/locks`, read without taking a lock). A file
/// whose holder was killed stays until `cordon sandbox gc` sweeps it; it
/// leases no uid, and another test's killed keeper may leave one while
/// this test runs, so only held ones are counted.
fn held_id_leases() -> usize {
    use std::os::unix::fs::MetadataExt as _;
    let inodes: BTreeSet<u64> = std::fs::read_dir("/run/cordon-ids")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok().map(|m| m.ino()))
                .collect()
        })
        .unwrap_or_default();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let locked: BTreeSet<u64> = locks
        .lines()
        .filter(|l| l.contains("FLOCK"))
        .filter_map(|l| {
            // `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`
            l.split_whitespace()
                .find(|f| f.matches(':').count() == 2)
                .and_then(|dev| dev.rsplit(':').next()?.parse().ok())
        })
        .collect();
    inodes.intersection(&locked).count()
}

/// The sandboxes recorded in `state` whose keeper still runs (what the
/// `max_sandboxes` cap counts): their handles.
fn live_records(state: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(state.join("sandboxes")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let handle = name.strip_suffix(".json").filter(|h| !h.starts_with('.'))?;
            let rec: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            let pid = u32::try_from(rec["keeper"]["pid"].as_u64()?).ok()?;
            let start = rec["keeper"]["start"].as_u64()?;
            let alive = stat_of(pid).is_some_and(|(_, _, s)| s == start);
            alive.then(|| handle.to_string())
        })
        .collect()
}

/// The `max_sandboxes` cap under races (issue 28, item 4): two replicas
/// sharing a state directory, six clients creating, disposing of and
/// exec'ing in three threads' sandboxes at once, with a cap of two. A
/// create for a thread whose sandbox a dispose removes meanwhile, or two
/// replicas' creates at once, must not pass the cap: sampled all along
/// (records whose keeper runs), the count never exceeds it. Afterwards
/// nothing is left: no record, no keeper, no lock file.
#[test]
fn the_sandbox_cap_holds_under_create_and_dispose_races_across_replicas() {
    if !root() {
        return;
    }
    let _serial = one_at_a_time();
    const CAP: usize = 2;
    const THREADS: usize = 3;
    let churn = Duration::from_secs(env_n("CORDON_LOAD_RACE_SECONDS", 10) as u64);
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    // Two replicas of one configuration: one state directory, cap CAP.
    let one = start(dir.path(), CAP - 1);
    let two = start(dir.path(), CAP - 1);
    let _cleanup = DisposeOnFailure {
        state: state.clone(),
        n: THREADS,
    };
    let addrs = [one.addr.clone(), two.addr.clone()];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, state) = (stop.clone(), state.clone());
        std::thread::spawn(move || {
            let (mut peak, mut over) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let live = live_records(&state);
                peak = peak.max(live.len());
                if live.len() > CAP && over.len() < 5 {
                    over.push(live);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (peak, over)
        })
    };
    let began = Instant::now();
    let clients: Vec<_> = (0..6u64)
        .map(|c| {
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                let mut seed = c.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let (mut statuses, mut odd) = (BTreeMap::<u16, usize>::new(), Vec::new());
                let mut handles = BTreeSet::new();
                while began.elapsed() < churn {
                    let r = next();
                    let addr = &addrs[(r % 2) as usize];
                    let thread = thread_of(((r >> 8) % THREADS as u64) as usize);
                    let (path, body) = match (r >> 16) % 3 {
                        0 => ("/v1/sandboxes", serde_json::json!({"thread": thread})),
                        1 => (
                            "/v1/sandboxes/dispose",
                            serde_json::json!({"thread": thread}),
                        ),
                        _ => (
                            "/v1/sandboxes/exec",
                            serde_json::json!({"thread": thread, "argv": ["true"]}),
                        ),
                    };
                    let got = Conn::open(addr, Instant::now() + Duration::from_secs(120))
                        .and_then(|mut conn| conn.post(path, &body));
                    match got {
                        Ok((status, out)) => {
                            *statuses.entry(status).or_default() += 1;
                            if let Some(h) = out["handle"].as_str() {
                                handles.insert(h.to_string());
                            }
                            // An exec racing a dispose of its sandbox may
                            // find it ending (its init gone, a pipe broken)
                            // or gone (its keeper's socket removed by the
                            // other replica): that exec's failure, not the
                            // cap's.
                            let racing = path.ends_with("/exec")
                                && [500, 503].contains(&status)
                                && out["error"].as_str().is_some_and(|e| {
                                    e.contains("exec failed") || e.contains("does not answer")
                                });
                            if ![200, 404, 429].contains(&status) && !racing && odd.len() < 5 {
                                odd.push(format!("{path} {status} {out}"));
                            }
                        }
                        Err(e) if odd.len() < 5 => odd.push(format!("{path}: {e}")),
                        Err(_) => {}
                    }
                }
                (statuses, odd, handles)
            })
        })
        .collect();
    let mut statuses = BTreeMap::<u16, usize>::new();
    let mut odd = Vec::new();
    let mut handles = BTreeSet::new();
    for c in clients {
        let (s, o, h) = c.join().expect("a client");
        handles.extend(h);
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
        odd.extend(o);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (peak, over) = sampler.join().expect("the sampler");
    eprintln!("cap race: statuses {statuses:?}, peak {peak} live of a cap of {CAP}");
    assert!(
        over.is_empty(),
        "more live sandboxes than the cap of {CAP}: {over:?} (statuses {statuses:?})"
    );
    assert!(
        odd.is_empty(),
        "answers other than 200, 404, 429 (and execs of a sandbox being disposed of): {odd:?}"
    );
    assert!(
        statuses.contains_key(&429) && statuses.contains_key(&200),
        "the race never reached the cap: {statuses:?}"
    );
    // Every thread's sandbox goes (through either replica), then nothing
    // of them is left: records, keepers, lock files.
    for i in 0..THREADS {
        let mut conn =
            Conn::open(&addrs[i % 2], Instant::now() + Duration::from_secs(120)).expect("connect");
        let (status, out) = conn
            .post(
                "/v1/threads/dispose",
                &serde_json::json!({"thread": thread_of(i)}),
            )
            .expect("dispose");
        assert_eq!(status, 200, "{out}");
    }
    settled("after the race, every thread disposed of", || {
        let mut left: Vec<String> = ["sandboxes", "locks"]
            .iter()
            .flat_map(|sub| {
                std::fs::read_dir(state.join(sub))
                    .map(|d| {
                        d.flatten()
                            .map(|e| format!("in the state directory: {}", e.path().display()))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            })
            .collect();
        left.extend(
            handles
                .iter()
                .filter_map(|h| keeper_of(h).map(|(p, _, _)| format!("keeper {p} of `{h}`"))),
        );
        left
    });
}

/// A server of one credential with `limits` (YAML flow mapping entries),
/// keeping its sandboxes in `dir/state`.
fn start_limited(dir: &Path, limits: &str) -> Server {
    let config = format!(
        "listen: 127.0.0.1:0\nmin_isolation: container\nsandboxes: {{state_dir: state, dispose_on_shutdown: true}}\ncredentials:\n  - name: load\n    token_sha256: {}\n    scope: {SCOPE}\n    identity: {{namespace: {SCOPE}, name: agent, attested: true}}\nlimits: {{{limits}}}\n",
        sha256_hex(TOKEN),
    );
    let file = dir.join("serve.yaml");
    std::fs::write(&file, config).expect("config");
    let mut child = cordon_testkit::cordon!()
        .command(["serve", "--config", file.to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cordon serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
        .to_string();
    Server { child, addr }
}

/// A TCP connection to `addr` from the loopback address `source`.
fn connect_from(source: &str, addr: &str) -> TcpStream {
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    let from: std::net::SocketAddr = format!("{source}:0").parse().expect("an address");
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&from.into()).expect("bind");
    s.connect(&to.into()).expect("connect");
    s.into()
}

/// One request on a fresh connection (`Connection: close`): the status and
/// the raw answer.
fn once(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}

/// Whether a connection the server holds is still open after `wait`: it
/// has neither answered nor closed it.
fn still_open(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).expect("timeout");
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// Runs `n` copies of `f` at once (released together), each with its
/// index; their results in order.
fn all_at_once<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let (f, barrier) = (f.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    hs.into_iter()
        .map(|h| h.join().expect("a client"))
        .collect()
}

/// Issue 28: the per-credential limits hold under load, each pressed past
/// its bound at once, and nothing is left behind.
/// - **Connections**: forty silent connections from one peer — at most
///   `max_connections_per_peer` stay open, the rest are refused — while a
///   credentialed request from another peer is served.
/// - **MCP sessions**: ten initializes at once with a cap of four make
///   exactly four sessions, the rest `429`; ending them frees the places.
/// - **Artifact bytes**: six collections at once of a 40 KiB output with a
///   96 KiB budget land at most two; the rest are `413` and leave nothing;
///   a fetch removes what it fetched.
/// - **Sandboxes**: eight creates at once for eight threads with a cap of
///   two make at most two.
/// - **Nothing left**: after the disposes and the server's stop, no record,
///   keeper, lock file, artifact or cgroup of its keepers.
#[test]
fn per_credential_limits_hold_under_load_and_nothing_is_left() {
    if !root() {
        return;
    }
    let _serial = one_at_a_time();
    const PER_PEER: usize = 12;
    const SESSIONS: usize = 4;
    const CAP: usize = 2;
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    let machine_before = MachineWide::take();
    let mut server = start_limited(
        dir.path(),
        &format!(
            "max_sandboxes: {CAP}, requests_per_second: 1000000, max_mcp_sessions: {SESSIONS}, max_connections: 256, max_connections_per_peer: {PER_PEER}, header_timeout_seconds: 30, max_artifact_bytes: 96KiB, max_artifacts: 8, artifact_ttl_seconds: 600"
        ),
    );
    let _cleanup = DisposeOnFailure {
        state: state.clone(),
        n: 8,
    };
    let addr = server.addr.clone();

    // Connections: forty silent ones from 127.0.0.1, all at once.
    let a = addr.clone();
    let mut silent: Vec<TcpStream> = all_at_once(40, move |_| connect_from("127.0.0.1", &a));
    std::thread::sleep(Duration::from_millis(500));
    let open = silent
        .iter_mut()
        .map(|s| still_open(s, Duration::from_millis(100)))
        .filter(|open| *open)
        .count();
    assert!(
        (1..=PER_PEER).contains(&open),
        "{open} of 40 silent connections from one peer are held (cap {PER_PEER})"
    );
    let mut other = connect_from("127.0.0.2", &addr);
    write!(
        other,
        "GET /v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    other
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = other.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "another peer was not served while one held its connections: {answer:?}"
    );
    // The server frees a connection's slot when it sees the peer close:
    // wait for it to close its side of each, or the initializes below
    // would meet the per-peer cap these still held (a 503, not a 429).
    for mut s in silent {
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = std::io::copy(&mut s, &mut std::io::sink());
    }
    // Its slot goes in the same step that closes the socket; a moment's
    // margin for the thread that does it.
    std::thread::sleep(Duration::from_millis(100));

    // MCP sessions: ten initializes at once, a cap of four.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"load","version":"1"}}}"#;
    let mcp_headers =
        "Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-06-18\r\n";
    let a = addr.clone();
    let made = all_at_once(10, move |_| once(&a, "POST", "/mcp", mcp_headers, init));
    let sessions: Vec<String> = made
        .iter()
        .filter(|(status, _)| *status == 200)
        .filter_map(|(_, answer)| {
            answer.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_string())
            })
        })
        .collect();
    let refused = made.iter().filter(|(status, _)| *status == 429).count();
    assert_eq!(
        (sessions.len(), refused),
        (SESSIONS, 10 - SESSIONS),
        "ten initializes at once under a cap of {SESSIONS}: {:?}",
        made.iter().map(|(s, _)| *s).collect::<Vec<_>>()
    );
    for id in &sessions {
        let (status, answer) = once(
            &addr,
            "DELETE",
            "/mcp",
            &format!("{mcp_headers}Mcp-Session-Id: {id}\r\n"),
            "",
        );
        assert!(status < 300, "ending a session: {answer}");
    }
    let (status, answer) = once(&addr, "POST", "/mcp", mcp_headers, init);
    assert_eq!(status, 200, "a session after the others ended: {answer}");
    let freed = answer
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .expect("a session id");
    let (status, _) = once(
        &addr,
        "DELETE",
        "/mcp",
        &format!("{mcp_headers}Mcp-Session-Id: {freed}\r\n"),
        "",
    );
    assert!(status < 300);

    // Artifact bytes: one sandbox with a 40 KiB declared output, collected
    // six times at once under a 96 KiB budget.
    let spec = "kind: report\nimage: host\ndeclared_outputs:\n  - {path: out/blob, media_type: application/octet-stream}\nfiles_out: {max_bytes_per_file: 64KiB, max_total_bytes: 64KiB, max_files: 1}\n";
    let mut c = Conn::open(&addr, Instant::now() + Duration::from_secs(120)).expect("conn");
    let (status, out) = c
        .post(
            "/v1/sandboxes",
            &serde_json::json!({"thread": thread_of(0), "spec": spec}),
        )
        .expect("create");
    assert_eq!(status, 200, "{out}");
    let (status, out) = c
        .post(
            "/v1/sandboxes/exec",
            &serde_json::json!({"thread": thread_of(0), "argv": ["sh", "-c", "mkdir -p out && head -c 40960 /dev/zero > out/blob"]}),
        )
        .expect("exec");
    assert_eq!(
        (status, &out["status"]),
        (200, &serde_json::json!({"code": 0})),
        "{out}"
    );
    let a = addr.clone();
    let body = serde_json::json!({"thread": thread_of(0)}).to_string();
    let collected = all_at_once(6, move |_| {
        once(&a, "POST", "/v1/sandboxes/outputs", "", &body)
    });
    let landed: Vec<String> = collected
        .iter()
        .filter(|(s, _)| *s == 200)
        .filter_map(|(_, answer)| {
            let body = answer.split_once("\r\n\r\n")?.1;
            let v: serde_json::Value = serde_json::from_str(body).ok()?;
            v["landed"][0]["handle"].as_str().map(str::to_string)
        })
        .collect();
    let too_big = collected.iter().filter(|(s, _)| *s == 413).count();
    assert!(
        (1..=2).contains(&landed.len()) && landed.len() + too_big == 6,
        "six 40 KiB collections at once under 96 KiB: {:?}",
        collected.iter().map(|(s, _)| *s).collect::<Vec<_>>()
    );
    for h in &landed {
        let path = format!("/v1/artifacts/{h}");
        let (status, answer) = once(&addr, "GET", &path, "", "");
        assert_eq!(status, 200, "{answer}");
        assert!(
            answer.len() > 40960,
            "a short artifact: {} bytes",
            answer.len()
        );
        let (status, _) = once(&addr, "GET", &path, "", "");
        assert_eq!(status, 404, "a fetched artifact is fetched once");
    }
    // The budget is free again: a collection lands.
    let (status, out) = c
        .post(
            "/v1/sandboxes/outputs",
            &serde_json::json!({"thread": thread_of(0)}),
        )
        .expect("collect");
    assert_eq!(status, 200, "{out}");
    let handle = out["landed"][0]["handle"]
        .as_str()
        .expect("a handle")
        .to_string();
    let (status, _) = once(&addr, "GET", &format!("/v1/artifacts/{handle}"), "", "");
    assert_eq!(status, 200);

    // Sandboxes: eight creates at once, for eight threads, under a cap of
    // two (one is held already).
    let a = addr.clone();
    let creates = all_at_once(8, move |i| {
        let body = serde_json::json!({"thread": thread_of(i + 1)}).to_string();
        once(&a, "POST", "/v1/sandboxes", "", &body).0
    });
    let made = creates.iter().filter(|s| **s == 200).count();
    assert_eq!(
        made,
        CAP - 1,
        "eight creates at once with {CAP} allowed and one held: {creates:?}"
    );
    assert!(
        creates.iter().all(|s| *s == 200 || *s == 429),
        "{creates:?}"
    );
    let live = live_records(&state);
    assert!(live.len() <= CAP, "{} live sandboxes: {live:?}", live.len());
    eprintln!(
        "limits under load: {open} of 40 silent connections held (cap {PER_PEER}); {} of 10 MCP sessions made (cap {SESSIONS}); {} of 6 collections landed, {too_big} refused 413; {made} of 8 creates made (cap {CAP}, one held)",
        sessions.len(),
        landed.len()
    );
    let keepers: Vec<u32> = live
        .iter()
        .filter_map(|h| keeper_of(h).map(|(k, _, _)| k))
        .collect();

    // Nothing left: every thread disposed of, then the server stopped.
    for i in 0..9 {
        let (status, out) = c
            .post(
                "/v1/threads/dispose",
                &serde_json::json!({"thread": thread_of(i)}),
            )
            .expect("dispose");
        assert_eq!(status, 200, "{out}");
    }
    drop(c);
    assert_eq!(server.stop(Duration::from_secs(30)), Some(0));
    settled("after the limits' load", || {
        let mut left = live_records(&state);
        left.extend(
            keepers
                .iter()
                .filter(|p| stat_of(**p).is_some())
                .map(|p| format!("keeper {p}")),
        );
        for k in &keepers {
            left.extend(cordon_cgroups(Some(*k)));
        }
        if let Ok(locks) = std::fs::read_dir(state.join("locks")) {
            left.extend(
                locks
                    .flatten()
                    .map(|e| format!("lock {}", e.path().display())),
            );
        }
        left
    });
    if in_ci() {
        settled("machine-wide after the limits' load", || {
            MachineWide::take().grew(&machine_before)
        });
    }
}
