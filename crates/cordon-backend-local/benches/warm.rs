//! Warm sandboxes (issue 7), each figure a ratio against a peer measured in
//! the same run, interleaved round by round (this machine is noisy):
//!
//! - `exec`: `Sandbox::exec` of `/bin/true` in a warm container-rung sandbox
//!   (the `Arc<dyn Sandbox>` the router's `acquire` returns) and through the
//!   process rung (a one-shot launch per exec), against a bare fork+exec of
//!   `/bin/true`; then the warm exec taken apart (policy and plan, the start
//!   inside the sandbox, the wait and clean-up).
//! - `updown`: `acquire` + `dispose` of a container-rung sandbox through the
//!   router, against `bwrap --unshare-all ... /bin/true` and a bare
//!   fork+exec; with `CORDON_BIN` also `cordon sandbox up` + `down`.
//! - `gc` (needs `CORDON_BIN`): 100 kept sandboxes whose keepers were killed
//!   with SIGKILL, reclaimed by one `cordon sandbox gc`, against an empty
//!   `gc` and against removing as many empty cgroup directories.
//!
//! `cargo bench -p cordon-backend-local --bench warm [-- exec updown gc]`
//! (`-- profile`: warm execs only, to run under `perf`);
//! `benches/warm-sandbox.sh` builds the release `cordon` and runs all three.
//! Needs root (it builds sandboxes): without it, it says so and does nothing.
//! Environment: `ROUNDS` (exec rounds, default 300), `UPDOWN_ROUNDS`
//! (default 30), `GC_N` (default 100), `CORDON_BIN` (the `cordon` binary
//! the CLI parts drive), `CORDON_STATE_DIR` (their state directory; default
//! a fresh one under /tmp, never /run/cordon). This binary is also the
//! sandboxes' init (`harness = false`).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a failed step is a failed run"
)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(bench::INIT_ARG)) {
        cordon_linux::init_main();
    }
    bench::main();
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!("\n!!!!!!!! SKIPPED warm: sandboxes are enforced on Linux x86_64 only !!!!!!!!\n");
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bench {
    use std::collections::BTreeMap;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use cordon_backend_local::{ExecPipes, LocalBackend, LocalConfig, LocalSandbox, WorkDir};
    use cordon_linux::{InitProgram, Rung};
    use cordon_policy::{Deployment, Identity, Policy};
    use cordon_sandbox::{
        AcquireRequest, CallerContext, Capability, ExecRequest, ExitStatus, Isolation, Provenance,
        Router, Sandbox, SandboxSpec,
    };

    pub const INIT_ARG: &str = "__bench-init";
    const POLICY: &str = include_str!("../../../benches/sandbox/bench-policy.yaml");
    const BWRAP: &[&str] = &[
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "/bin/true",
    ];

    fn env_n(name: &str, default: usize) -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--list") {
            println!("warm: benchmark");
            return;
        }
        let picked: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| ["exec", "updown", "gc", "profile"].contains(a))
            .collect();
        // `profile` (never by default): warm execs only, to run under `perf`.
        let want = |s: &str| (picked.is_empty() && s != "profile") || picked.contains(&s);
        if !rustix::process::geteuid().is_root() {
            eprintln!(
                "\n!!!!!!!! SKIPPED warm: building sandboxes needs root (run as root: `cargo bench -p cordon-backend-local --bench warm`) !!!!!!!!\n"
            );
            return;
        }
        let cli = std::env::var_os("CORDON_BIN").map(PathBuf::from);
        let scratch = Scratch::new();
        let kit = Kit::new(&scratch.dir);
        if let Err(why) = kit.container.available() {
            eprintln!(
                "\n!!!!!!!! SKIPPED warm: the container rung cannot run here: {why} !!!!!!!!\n"
            );
            return;
        }
        if want("profile") {
            profile(&kit, env_n("ROUNDS", 300));
        }
        if want("exec") {
            exec_bench(&kit, env_n("ROUNDS", 300));
        }
        if want("updown") {
            updown_bench(&kit, cli.as_deref(), &scratch, env_n("UPDOWN_ROUNDS", 30));
        }
        if want("gc") {
            match cli.as_deref() {
                Some(bin) => gc_bench(bin, &scratch, env_n("GC_N", 100)),
                None => eprintln!(
                    "\n!!!!!!!! SKIPPED gc: set CORDON_BIN to a release `cordon` (benches/warm-sandbox.sh does) !!!!!!!!\n"
                ),
            }
        }
    }

    /// Directories this run owns: the parent of the fresh work dirs (0755,
    /// so the process rung's uid can reach its work dir) and the CLI's
    /// state directory. Removed at the end.
    struct Scratch {
        dir: PathBuf,
        state: PathBuf,
        own_state: bool,
    }

    impl Scratch {
        fn new() -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("cordon-warm-bench-{}", std::process::id()));
            std::fs::DirBuilder::new().mode(0o755).create(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            let (state, own_state) = match std::env::var_os("CORDON_STATE_DIR") {
                Some(s) => (PathBuf::from(s), false),
                None => (dir.join("state"), true),
            };
            assert!(
                !state.starts_with("/run/cordon"),
                "the bench never uses /run/cordon; set CORDON_STATE_DIR elsewhere"
            );
            Scratch {
                dir,
                state,
                own_state,
            }
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
            if self.own_state {
                let _ = std::fs::remove_dir_all(&self.state);
            }
        }
    }

    struct Kit {
        policy: Arc<Policy>,
        container: Arc<LocalBackend>,
        warm_router: Router,
        process_router: Router,
        spec: SandboxSpec,
    }

    fn backend(rung: Rung, policy: &Arc<Policy>, parent: &Path) -> Arc<LocalBackend> {
        let exe = std::env::current_exe().unwrap();
        Arc::new(LocalBackend::new(LocalConfig {
            rung,
            policy: policy.clone(),
            env: Deployment::default(),
            work_dir: WorkDir::Fresh {
                parent: parent.to_path_buf(),
            },
            init: InitProgram::new(exe).arg(INIT_ARG),
            egress: Default::default(),
        }))
    }

    fn router(policy: &Arc<Policy>, iso: Isolation, b: Arc<LocalBackend>) -> Router {
        Router::builder(policy.clone(), Deployment::default())
            .min_isolation(iso)
            .backend(b)
            .build()
            .unwrap()
    }

    impl Kit {
        fn new(parent: &Path) -> Kit {
            let policy = Arc::new(
                Policy::load_str("bench-policy.yaml", POLICY)
                    .map_err(|d| d.render())
                    .unwrap(),
            );
            let container = backend(Rung::Container, &policy, parent);
            let process = backend(Rung::Process, &policy, parent);
            Kit {
                warm_router: router(&policy, Isolation::Container, container.clone()),
                process_router: router(&policy, Isolation::Process, process),
                container,
                policy,
                spec: SandboxSpec::new("bench", "host")
                    .unwrap()
                    .with_requires([Capability::Exec]),
            }
        }
    }

    fn identity() -> Identity {
        Identity {
            namespace: "bench".into(),
            attested: true,
            ..Identity::default()
        }
    }

    fn caller(thread: &str) -> CallerContext {
        let t = thread.to_string();
        CallerContext::new(
            || "bench".to_string(),
            move || t.clone(),
            || "bench".to_string(),
            identity,
        )
    }

    fn true_req() -> ExecRequest {
        ExecRequest {
            argv: vec!["/bin/true".into()],
            env: BTreeMap::new(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
        }
    }

    fn time(f: impl FnOnce()) -> Duration {
        let t = Instant::now();
        f();
        t.elapsed()
    }

    fn bare_true() {
        let s = Command::new("/bin/true").status().unwrap();
        assert!(s.success());
    }

    fn bwrap_true() {
        let s = Command::new("bwrap")
            .args(BWRAP)
            .stdin(Stdio::null())
            .status()
            .expect("bwrap (apt-get install bubblewrap)");
        assert!(s.success(), "bwrap: {s}");
    }

    fn exec_ok(s: &dyn Sandbox, req: &ExecRequest) {
        let out = s.exec(req).unwrap();
        assert_eq!(
            out.status,
            ExitStatus::Code(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Per-round samples of one measure.
    struct Series {
        name: &'static str,
        s: Vec<Duration>,
    }

    impl Series {
        fn new(name: &'static str) -> Series {
            Series {
                name,
                s: Vec::new(),
            }
        }
        fn q(&self, q: f64) -> Duration {
            let mut v = self.s.clone();
            v.sort();
            let i = ((v.len() as f64 - 1.0) * q).round() as usize;
            v[i]
        }
        fn mean(&self) -> Duration {
            self.s.iter().sum::<Duration>() / u32::try_from(self.s.len()).unwrap()
        }
    }

    fn ms(d: Duration) -> String {
        let m = d.as_secs_f64() * 1e3;
        if m < 10.0 {
            format!("{m:.3} ms")
        } else {
            format!("{m:.1} ms")
        }
    }

    /// The median over rounds of `a[i] / b[i]`: robust to drift in load.
    fn paired(a: &Series, b: &Series) -> f64 {
        let mut r: Vec<f64> =
            a.s.iter()
                .zip(&b.s)
                .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
                .collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }

    fn table(title: &str, series: &[&Series], base: &Series) {
        println!("\n== {title} ({} rounds, interleaved)", base.s.len());
        println!(
            "| measure | p50 | p90 | mean | p50 / {b} p50 | paired median / {b} |",
            b = base.name
        );
        println!("| --- | --- | --- | --- | --- | --- |");
        for s in series {
            println!(
                "| {} | {} | {} | {} | {:.2}x | {:.2}x |",
                s.name,
                ms(s.q(0.5)),
                ms(s.q(0.9)),
                ms(s.mean()),
                s.q(0.5).as_secs_f64() / base.q(0.5).as_secs_f64(),
                paired(s, base)
            );
        }
    }

    /// One measure of a round: where its samples go, and how one is taken.
    type Step<'a> = (&'a mut Series, &'a mut dyn FnMut() -> Duration);

    /// Time for the sandbox's next exec to be made ahead (untimed).
    fn settle() {
        std::thread::sleep(Duration::from_millis(15));
    }

    /// Runs every closure once per round, in an order rotated each round.
    fn rounds(n: usize, steps: &mut [Step<'_>]) {
        let k = steps.len();
        for i in 0..n {
            for j in 0..k {
                let (series, f) = &mut steps[(i + j) % k];
                let d = f();
                series.s.push(d);
            }
        }
    }

    /// The sandbox the router acquired for `c`, as the backend holds it.
    fn local_of(kit: &Kit, c: &CallerContext) -> Arc<LocalSandbox> {
        let c = c.resolve().unwrap();
        let limits = kit
            .warm_router
            .ensure_policy_allows(&c.identity, &kit.spec)
            .unwrap();
        kit.container
            .acquire_local(&AcquireRequest {
                key: c.key,
                provenance: Provenance {
                    spec: kit.spec.clone(),
                    identity: c.identity,
                    policy_digest: kit.policy.digest.clone(),
                    origin: None,
                },
                limits,
                brokered: Vec::new(),
            })
            .unwrap()
    }

    /// CPU time in clock ticks (user + system) of this process, and of its
    /// reaped children, from `/proc/self/stat`.
    fn cpu_ticks() -> (u64, u64) {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let f: Vec<u64> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // Fields 14-17 (utime stime cutime cstime), counted from `state` = 3.
        (f[11] + f[12], f[13] + f[14])
    }

    /// Nanoseconds of CPU the sandbox's cgroup (init and every exec) used.
    fn sandbox_cpu_ns(dirs: &[PathBuf]) -> Option<u64> {
        dirs.iter().find_map(|d| {
            let v1 = std::fs::read_to_string(d.join("cpuacct.usage")).ok();
            let v2 = std::fs::read_to_string(d.join("cpu.stat"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("usage_usec "))
                        .and_then(|u| u.trim().parse::<u64>().ok())
                        .map(|us| (us * 1000).to_string())
                });
            v1.or(v2).and_then(|t| t.trim().parse().ok())
        })
    }

    /// Warm execs and nothing else, for `perf record` / `perf trace`; the
    /// init's pid is printed so it can be traced on its own.
    fn profile(kit: &Kit, n: usize) {
        let req = true_req();
        let c = caller("profile");
        let warm = kit.warm_router.acquire(&c, &kit.spec).unwrap();
        for _ in 0..20 {
            exec_ok(&*warm, &req);
        }
        let dirs = local_of(kit, &c).cgroup_dirs();
        let tick = 1e9 / 100.0; // USER_HZ
        let per = |x: f64| format!("{:.3} ms", x / n as f64 / 1e6);
        let (s0, c0) = cpu_ticks();
        let t = Instant::now();
        for _ in 0..n {
            bare_true();
        }
        let bare_wall = t.elapsed();
        let (s1, c1) = cpu_ticks();
        let sb0 = sandbox_cpu_ns(&dirs).unwrap_or(0);
        let t = Instant::now();
        for _ in 0..n {
            exec_ok(&*warm, &req);
        }
        let warm_wall = t.elapsed();
        let (s2, _) = cpu_ticks();
        let sb1 = sandbox_cpu_ns(&dirs).unwrap_or(0);
        println!(
            "profile: {n} each, back to back (CPU from /proc/self/stat and the sandbox's cgroup)"
        );
        println!(
            "  bare fork+exec: wall {}, CPU ours {} + child {}",
            ms(bare_wall / u32::try_from(n).unwrap()),
            per((s1 - s0) as f64 * tick),
            per((c1 - c0) as f64 * tick)
        );
        println!(
            "  warm exec:      wall {}, CPU ours {} + sandbox (init + exec) {}",
            ms(warm_wall / u32::try_from(n).unwrap()),
            per((s2 - s1) as f64 * tick),
            per(sb1.saturating_sub(sb0) as f64)
        );
        assert_eq!(kit.warm_router.dispose(&c).unwrap(), 1);
    }

    fn exec_bench(kit: &Kit, n: usize) {
        let req = true_req();
        let wc = caller("exec-warm");
        let pc = caller("exec-process");
        let warm = kit.warm_router.acquire(&wc, &kit.spec).unwrap();
        let process = kit.process_router.acquire(&pc, &kit.spec).unwrap();
        // The same warm sandbox, as the backend holds it, for the breakdown.
        let local = local_of(kit, &wc);
        assert_eq!(local.id(), warm.id(), "the breakdown uses the same sandbox");
        // The same, with nothing made ahead (`CORDON_WARM_AHEAD=off`, read
        // as a warm sandbox starts): the peer of the path made ahead.
        let oc = caller("exec-warm-off");
        let off = {
            #[expect(
                clippy::disallowed_methods,
                reason = "the bench's own process, one sandbox starting: the switch is read as a warm sandbox starts"
            )]
            let set = || std::env::set_var("CORDON_WARM_AHEAD", "off");
            #[expect(clippy::disallowed_methods, reason = "as above")]
            let unset = || std::env::remove_var("CORDON_WARM_AHEAD");
            set();
            let off = kit.warm_router.acquire(&oc, &kit.spec).unwrap();
            unset();
            off
        };
        for _ in 0..20 {
            bare_true();
            exec_ok(&*warm, &req);
            exec_ok(&*off, &req);
            exec_ok(&*process, &req);
        }
        let mut bare = Series::new("bare fork+exec");
        let mut w = Series::new("warm exec, made ahead (container rung)");
        let mut o = Series::new("warm exec, nothing made ahead");
        let mut b2b = Series::new("warm exec, made ahead, right after the last");
        let mut ob2b = Series::new("warm exec, nothing made ahead, right after the last");
        let mut p = Series::new("process rung exec (one-shot)");
        rounds(
            n,
            &mut [
                (&mut bare, &mut || time(bare_true)),
                // An agent host's next request comes after its model's
                // turn: the exec made ahead is ready by then (untimed).
                (&mut w, &mut || {
                    settle();
                    time(|| exec_ok(&*warm, &req))
                }),
                (&mut o, &mut || {
                    settle();
                    time(|| exec_ok(&*off, &req))
                }),
                (&mut b2b, &mut || {
                    exec_ok(&*warm, &req);
                    time(|| exec_ok(&*warm, &req))
                }),
                (&mut ob2b, &mut || {
                    exec_ok(&*off, &req);
                    time(|| exec_ok(&*off, &req))
                }),
                (&mut p, &mut || time(|| exec_ok(&*process, &req))),
            ],
        );
        table(
            "exec of /bin/true through Sandbox::exec",
            &[&bare, &w, &o, &b2b, &ob2b, &p],
            &bare,
        );
        assert_eq!(kit.warm_router.dispose(&oc).unwrap(), 1);

        // The warm exec taken apart: the policy check and plan; the start
        // (the exec made ahead taken — its bounds written, the request to
        // the init, the command sent what to run — until the init reports
        // it started); the wait (the exit, its report, killing the exec's
        // cgroup; its removal is the sandbox's thread's).
        let mut bare = Series::new("bare fork+exec");
        let mut whole = Series::new("Sandbox::exec, whole");
        let mut plan = Series::new("  plan_for (policy + plan)");
        let mut pipes = Series::new("  pipes");
        let mut start = Series::new("  start, until started");
        let mut wait = Series::new("  wait + cgroup clean-up");
        // Parts of it, replicated here: the exec's cgroup (made, bounded and
        // removed next to the real ones, without a process in it) and the
        // two reader threads `exec` starts for stdout and stderr.
        let mut cg = Series::new("  replica: exec cgroup mkdir + bounds + rmdir");
        let mut threads = Series::new("  replica: two reader threads, spawn + join");
        let dirs = local.cgroup_dirs();
        for i in 0..n {
            bare.s.push(time(bare_true));
            settle();
            whole.s.push(time(|| exec_ok(&*warm, &req)));
            plan.s.push(time(|| {
                local.plan_for(&req).unwrap();
            }));
            let t = Instant::now();
            let (stdio, ours) = ExecPipes::new(false).unwrap().split();
            pipes.s.push(t.elapsed());
            settle();
            let t = Instant::now();
            let started = local.start(&req, stdio).unwrap();
            start.s.push(t.elapsed());
            drop(ours);
            let t = Instant::now();
            let st = started.wait().unwrap();
            wait.s.push(t.elapsed());
            assert_eq!(st, ExitStatus::Code(0));
            cg.s.push(time(|| cgroup_replica(&dirs, i)));
            threads.s.push(time(|| {
                std::thread::scope(|s| {
                    let a = s.spawn(|| ());
                    let b = s.spawn(|| ());
                    a.join().unwrap();
                    b.join().unwrap();
                });
            }));
        }
        table(
            "warm exec, phases (start includes plan_for again)",
            &[&bare, &whole, &plan, &pipes, &start, &wait, &cg, &threads],
            &bare,
        );
        assert_eq!(kit.warm_router.dispose(&wc).unwrap(), 1);
        assert_eq!(kit.process_router.dispose(&pc).unwrap(), 1);
        assert!(
            local.cgroup_dirs().iter().all(|d| !d.exists()),
            "dispose left cgroups: {:?}",
            local.cgroup_dirs()
        );
    }

    /// What the warm path does to the cgroup tree per exec, without the
    /// process: a child of each of the sandbox's cgroup directories, its
    /// bounds written (the files that exist: v1 or v2), then removed.
    fn cgroup_replica(dirs: &[PathBuf], i: usize) {
        let made: Vec<PathBuf> = dirs
            .iter()
            .map(|d| d.join(format!("bench-replica-{i}")))
            .collect();
        for d in &made {
            std::fs::create_dir(d).unwrap();
        }
        for d in &made {
            for (file, value) in [
                ("memory.limit_in_bytes", "1073741824"),
                ("memory.memsw.limit_in_bytes", "1073741824"),
                ("memory.max", "1073741824"),
                ("memory.swap.max", "0"),
                ("pids.max", "64"),
            ] {
                let f = d.join(file);
                if f.exists() {
                    std::fs::write(&f, value).unwrap();
                }
            }
        }
        for d in &made {
            std::fs::remove_dir(d).unwrap();
        }
    }

    fn cordon(bin: &Path, state: &Path, args: &[&str]) -> String {
        let out = Command::new(bin)
            .args(args)
            .env("CORDON_STATE_DIR", state)
            .env_remove("CORDON_MIN_ISOLATION")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cordon {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn policy_file(scratch: &Scratch) -> PathBuf {
        let p = scratch.dir.join("bench-policy.yaml");
        if !p.exists() {
            std::fs::write(&p, POLICY).unwrap();
        }
        p
    }

    fn cli_up(bin: &Path, scratch: &Scratch, scope: &str, thread: &str) -> String {
        let policy = policy_file(scratch);
        cordon(
            bin,
            &scratch.state,
            &[
                "sandbox",
                "up",
                "--scope",
                scope,
                "--thread",
                thread,
                "--min-isolation",
                "container",
                "--backend",
                "container",
                "--policy",
                policy.to_str().unwrap(),
            ],
        )
    }

    fn updown_bench(kit: &Kit, cli: Option<&Path>, scratch: &Scratch, n: usize) {
        let mut bare = Series::new("bare fork+exec");
        let mut bwrap = Series::new("bwrap --unshare-all /bin/true");
        let mut lib = Series::new("library acquire + dispose");
        let mut lib_up = Series::new("  acquire");
        let mut lib_down = Series::new("  dispose");
        let mut cli_both = Series::new("cordon sandbox up + down");
        let mut cli_u = Series::new("  up");
        let mut cli_d = Series::new("  down");
        let c = caller("updown");
        let lib_round = |up: &mut Series, down: &mut Series| {
            let t = Instant::now();
            let s = kit.warm_router.acquire(&c, &kit.spec).unwrap();
            let a = t.elapsed();
            let t = Instant::now();
            assert_eq!(kit.warm_router.dispose(&c).unwrap(), 1);
            drop(s);
            let d = t.elapsed();
            up.s.push(a);
            down.s.push(d);
            a + d
        };
        let cli_round = |up: &mut Series, down: &mut Series, bin: &Path| {
            let t = Instant::now();
            let h = cli_up(bin, scratch, "bench", "updown");
            let a = t.elapsed();
            let t = Instant::now();
            assert_eq!(
                cordon(bin, &scratch.state, &["sandbox", "down", &h]),
                "disposed 1 sandbox"
            );
            let d = t.elapsed();
            up.s.push(a);
            down.s.push(d);
            a + d
        };
        for _ in 0..3 {
            bare_true();
            bwrap_true();
            lib_round(&mut Series::new(""), &mut Series::new(""));
            if let Some(bin) = cli {
                cli_round(&mut Series::new(""), &mut Series::new(""), bin);
            }
        }
        {
            let mut steps: Vec<Step<'_>> = Vec::new();
            let mut f_bare = || time(bare_true);
            let mut f_bwrap = || time(bwrap_true);
            let mut f_lib = || lib_round(&mut lib_up, &mut lib_down);
            let mut f_cli = || cli_round(&mut cli_u, &mut cli_d, cli.unwrap_or(Path::new("")));
            steps.push((&mut bare, &mut f_bare));
            steps.push((&mut bwrap, &mut f_bwrap));
            steps.push((&mut lib, &mut f_lib));
            if cli.is_some() {
                steps.push((&mut cli_both, &mut f_cli));
            }
            rounds(n, &mut steps);
        }
        let mut shown: Vec<&Series> = vec![&bare, &bwrap, &lib, &lib_up, &lib_down];
        if cli.is_some() {
            shown.extend([&cli_both, &cli_u, &cli_d]);
        }
        table("up + down of a container-rung sandbox", &shown, &bwrap);
        println!("(ratios against bwrap; bwrap p50 / bare p50 = {:.2}x)", {
            bwrap.q(0.5).as_secs_f64() / bare.q(0.5).as_secs_f64()
        });
    }

    #[derive(serde::Deserialize)]
    struct Rec {
        keeper: Keeper,
        residue: Residue,
    }

    /// What a local sandbox's record says to reclaim.
    #[derive(serde::Deserialize)]
    struct Residue {
        cgroups: Vec<PathBuf>,
    }

    #[derive(serde::Deserialize)]
    struct Keeper {
        pid: i32,
    }

    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(s) => s
                .rfind(')')
                .and_then(|i| s.get(i + 2..i + 3))
                .is_some_and(|st| st == "Z" || st == "X"),
        }
    }

    fn gc_bench(bin: &Path, scratch: &Scratch, n: usize) {
        let records = scratch.state.join("sandboxes");
        // An empty gc first: the fixed cost of one invocation.
        let gc0 = time(|| assert_eq!(cordon(bin, &scratch.state, &["sandbox", "gc"]), "0"));
        let t = Instant::now();
        let handles: Vec<String> = (0..n)
            .map(|i| cli_up(bin, scratch, "bench", &format!("gc-{i}")))
            .collect();
        let made = t.elapsed();
        let recs: Vec<Rec> = handles
            .iter()
            .map(|h| {
                let text = std::fs::read_to_string(records.join(format!("{h}.json"))).unwrap();
                serde_json::from_str(&text).unwrap()
            })
            .collect();
        for r in &recs {
            assert!(r.residue.cgroups.iter().all(|d| d.exists()));
            let pid = rustix::process::Pid::from_raw(r.keeper.pid).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !recs.iter().all(|r| gone(r.keeper.pid)) {
            assert!(
                Instant::now() < deadline,
                "keepers still alive after SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut printed = String::new();
        let gc = time(|| printed = cordon(bin, &scratch.state, &["sandbox", "gc"]));
        assert_eq!(printed, n.to_string(), "gc reclaimed every orphan");
        let left: Vec<&PathBuf> = recs
            .iter()
            .flat_map(|r| &r.residue.cgroups)
            .filter(|d| d.exists())
            .collect();
        assert!(left.is_empty(), "gc left cgroups: {left:?}");
        // The peer: as many empty cgroup directories, next to the
        // sandboxes', made and removed.
        let dirs: Vec<PathBuf> = recs
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.residue.cgroups.iter().map(move |d| {
                    d.parent()
                        .unwrap()
                        .join(format!("warm-bench-rmdir-{}-{i}", std::process::id()))
                })
            })
            .collect();
        for d in &dirs {
            std::fs::create_dir(d).unwrap();
        }
        let rmdir = time(|| {
            for d in &dirs {
                std::fs::remove_dir(d).unwrap();
            }
        });
        let per = |d: Duration| ms(d / u32::try_from(n).unwrap());
        println!("\n== gc of {n} orphaned kept sandboxes (keepers killed with SIGKILL)");
        println!("| measure | total | per sandbox |");
        println!("| --- | --- | --- |");
        println!(
            "| {n} x `cordon sandbox up` (setup, sequential) | {} | {} |",
            ms(made),
            per(made)
        );
        println!("| `cordon sandbox gc`, nothing to do | {} | |", ms(gc0));
        println!(
            "| `cordon sandbox gc`, {n} orphans | {} | {} |",
            ms(gc),
            per(gc)
        );
        println!(
            "| marginal per orphan, (gc{n} - gc0) / {n} | | {} |",
            per(gc.saturating_sub(gc0))
        );
        println!(
            "| rmdir of {} empty cgroup dirs ({} per sandbox) | {} | {} |",
            dirs.len(),
            dirs.len() / n.max(1),
            ms(rmdir),
            per(rmdir)
        );
        println!(
            "(gc {n} / rmdir peer = {:.1}x; gc printed {printed}, no recorded cgroup left)",
            gc.as_secs_f64() / rmdir.as_secs_f64()
        );
    }
}
