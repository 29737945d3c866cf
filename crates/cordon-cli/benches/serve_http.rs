//! The HTTP path (issue 17): per-exec overhead of `cordon serve` against
//! calling the library directly, in the same run, and execs per second
//! through HTTP. Container rung throughout.
//!
//! The server runs as a user gets it from a minimal configuration: its
//! sandboxes kept, a keeper process each, in a state directory (the
//! default since `sandboxes.state_dir`; here a fresh one under `/run`,
//! a tmpfs as `/run/cordon` is). The library it is held against is the
//! same: a host built in this process by the host builder `cordon serve`
//! uses (`cordon_host::HostBuilder`, `cordon:default`, the floor from the
//! config, the release `cordon` in its roles: keeper, init, egress proxy),
//! in a state directory of its own. The library without a keeper (sandboxes in this process) is
//! measured beside them, to show what the keeper costs.
//!
//! - `latency`: `/bin/true` in a warm sandbox, round by round (each round
//!   in an order of its own): the kept library's `Sandbox::exec`, `POST
//!   /v1/sandboxes/exec` to the live server on loopback over one
//!   keep-alive connection, the in-process library's `Sandbox::exec`, and
//!   two HTTP requests that run nothing (`GET /healthz`, `GET
//!   /v1/backends`: auth and JSON); then the server's own time in the
//!   exec (`cordon_exec_seconds` from `/metrics`), which splits the HTTP
//!   exec into HTTP and exec.
//! - `throughput`: K clients (`CLIENTS`, default 1,2,4,8), each with its own
//!   sandbox, execs of `/bin/true` back to back for `SECONDS` (default 3):
//!   through HTTP (a keep-alive connection each) and through the kept
//!   library (a thread each), alternated `REPEATS` times (default 3); with
//!   the CPU each side spent per exec (the server or this process, and
//!   their keepers).
//!
//! - `files` (issue 32; only when named): the files API through the
//!   library (`Sandbox::files` on the kept host's sandbox, the same call
//!   the CLI and the server make) against the same work done by
//!   `Sandbox::exec` in the sandbox: a depth-2 listing of a 10,000-file
//!   tree against `ls -laR`, a 10 MiB read against `cat`, `WRITES`
//!   (default 1,000) small files written against as many `sh -c 'cat >
//!   f'` with the bytes on stdin; `RUNS` (default 10) of each, medians.
//!
//! `benches/serve-http.sh` builds the release `cordon` and runs this with
//! it; alone: `CORDON_BIN=target/release/cordon cargo bench -p cordon-cli
//! --bench serve_http [-- latency throughput]`. `ROUNDS` (default 500).
//! Needs root (it builds sandboxes): without it, it says so and does
//! nothing. Traffic goes to loopback only.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a failed step is a failed run"
)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    bench::main();
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!(
        "\n!!!!!!!! SKIPPED serve_http: sandboxes are enforced on Linux x86_64 only !!!!!!!!\n"
    );
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "serve_http/files.rs"]
mod files;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bench {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use cordon_host::config::{Floor, FloorSource};
    use cordon_host::roles::{SelfCommands, KEEPER_ARG};
    use cordon_host::state::StateDir;
    use cordon_host::{HostBuilder, Keep};
    use cordon_policy::Identity;
    use cordon_sandbox::{
        CallerContext, ExecRequest, ExitStatus, Isolation, Router, Sandbox, SandboxSpec,
        SelfCommand,
    };

    const TOKEN: &str = "bench-token";
    const SCOPE: &str = "bench";
    /// What `cordon serve` keeps of each stream (its MAX_OUTPUT_BYTES).
    const MAX_OUTPUT_BYTES: u64 = 1 << 20;

    fn env_n(name: &str, default: usize) -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--list") {
            println!("serve_http: benchmark");
            return;
        }
        let picked: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| ["latency", "throughput", "files"].contains(a))
            .collect();
        // `files` (issue 32) only when asked: benches/files-api.sh asks.
        let want = |s: &str| (picked.is_empty() && s != "files") || picked.contains(&s);
        if !rustix::process::geteuid().is_root() {
            eprintln!("\n!!!!!!!! SKIPPED serve_http: building sandboxes needs root !!!!!!!!\n");
            return;
        }
        let Some(cordon) = std::env::var_os("CORDON_BIN").map(PathBuf::from) else {
            eprintln!(
                "\n!!!!!!!! SKIPPED serve_http: set CORDON_BIN to a release `cordon` (benches/serve-http.sh does) !!!!!!!!\n"
            );
            return;
        };
        // Under /run, a tmpfs, as cordon's default state directory is.
        let dir = tempfile::Builder::new()
            .prefix("cordon-serve-bench-")
            .tempdir_in("/run")
            .unwrap();
        let server = Server::start(&cordon, dir.path());
        let kept = Library::new(
            &cordon,
            &server.config_file,
            Some(&dir.path().join("library")),
        );
        let direct = Library::new(&cordon, &server.config_file, None);
        println!(
            "library: init {} {:?}; kept in {}, keeper {} {KEEPER_ARG}",
            kept.init.path.display(),
            kept.init.args,
            dir.path().join("library").display(),
            cordon.display()
        );
        if want("latency") {
            latency(&server, &kept, &direct, env_n("ROUNDS", 500));
        }
        if want("throughput") {
            let clients: Vec<usize> = std::env::var("CLIENTS")
                .unwrap_or_else(|_| "1,2,4,8".into())
                .split(',')
                .filter_map(|c| c.trim().parse().ok())
                .collect();
            throughput(
                &server,
                &kept,
                &dir.path().join("library"),
                &clients,
                Duration::from_secs(env_n("SECONDS", 3) as u64),
                env_n("REPEATS", 3).max(1),
            );
        }
        if want("files") {
            crate::files::bench(&kept, env_n("RUNS", 10), env_n("WRITES", 1000));
        }
    }

    /// A live `cordon serve` on loopback.
    struct Server {
        child: Child,
        addr: String,
        config_file: PathBuf,
        state: PathBuf,
    }

    impl Server {
        fn start(cordon: &Path, dir: &Path) -> Server {
            // What a user gets with a minimal configuration: default policy
            // (`cordon:default`), request size, sandbox cap, idle and age
            // limits, sandboxes kept in a state directory; the floor opted
            // down to the rung that runs here, the state directory a fresh
            // one, its sandboxes disposed of when the bench stops it
            // (`dispose_on_shutdown`, which changes nothing before), and
            // the request rate raised so the bench measures execs, not
            // 429s (the bucket is checked the same way at any rate).
            let state = dir.join("server");
            let config = format!(
                "listen: 127.0.0.1:0\nmin_isolation: container\nsandboxes: {{state_dir: {}, dispose_on_shutdown: true}}\ncredentials:\n  - name: bench\n    token_sha256: {}\n    scope: {SCOPE}\n    identity: {{namespace: {SCOPE}, name: agent, attested: true}}\nlimits: {{requests_per_second: 1000000}}\n",
                state.display(),
                sha256_hex(TOKEN)
            );
            let config_file = dir.join("serve.yaml");
            std::fs::write(&config_file, &config).unwrap();
            println!(
                "== cordon serve, as configured for this run ({})",
                cordon.display()
            );
            print!("{config}");
            println!("(unset: policy cordon:default, max_request_bytes 16MiB, max_sandboxes 16, idle_timeout_seconds 1800, max_age_seconds 86400)");
            let mut child = Command::new(cordon)
                .args(["serve", "--config"])
                .arg(&config_file)
                .env_remove("CORDON_MIN_ISOLATION")
                .env_remove("CORDON_STATE_DIR")
                .env_remove("CORDON_LOG")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("cordon serve");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let addr = line
                .trim()
                .strip_prefix("listening on http://")
                .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
                .to_string();
            Server {
                child,
                addr,
                config_file,
                state,
            }
        }
    }

    impl Drop for Server {
        /// SIGTERM, so the server disposes of its sandboxes.
        fn drop(&mut self) {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = self.child.wait();
        }
    }

    fn sha256_hex(s: &str) -> String {
        let mut c = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout)[..64].to_string()
    }

    /// One keep-alive HTTP/1.1 connection.
    struct Conn {
        r: BufReader<TcpStream>,
        req: Vec<u8>,
    }

    impl Conn {
        fn open(addr: &str) -> Conn {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            Conn {
                r: BufReader::new(s),
                req: Vec::new(),
            }
        }

        /// One request and its answer (status, body); the server answers
        /// these with a length.
        fn call(&mut self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
            self.req.clear();
            let b = body.unwrap_or("");
            write!(
                self.req,
                "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            )
            .unwrap();
            self.r.get_mut().write_all(&self.req).unwrap();
            let mut line = String::new();
            self.r.read_line(&mut line).unwrap();
            let status: u16 = line.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            let mut length = 0;
            loop {
                line.clear();
                self.r.read_line(&mut line).unwrap();
                let h = line.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut out = vec![0; length];
            self.r.read_exact(&mut out).unwrap();
            (status, String::from_utf8_lossy(&out).into_owned())
        }

        fn create(&mut self, thread: &str) {
            let (status, body) = self.call(
                "POST",
                "/v1/sandboxes",
                Some(&format!("{{\"thread\":\"{thread}\"}}")),
            );
            assert_eq!(status, 200, "{body}");
        }

        /// `/bin/true` in the sandbox of `body` (prebuilt), checked.
        fn exec_true(&mut self, body: &str) {
            let (status, out) = self.call("POST", "/v1/sandboxes/exec", Some(body));
            assert!(
                status == 200 && out.contains("\"code\":0"),
                "{status} {out}"
            );
        }

        /// `cordon_exec_seconds_{sum,count}` of this scope.
        fn exec_metrics(&mut self) -> (f64, u64) {
            let (_, text) = self.call("GET", "/metrics", None);
            let find = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}{{scope=\"{SCOPE}\"}} ")))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            (
                find("cordon_exec_seconds_sum").parse().unwrap_or(0.0),
                find("cordon_exec_seconds_count").parse().unwrap_or(0),
            )
        }
    }

    fn exec_body(thread: &str) -> String {
        format!("{{\"thread\":\"{thread}\",\"argv\":[\"/bin/true\"]}}")
    }

    /// The host `cordon serve` builds, built here in-process by the same
    /// host builder (`cordon_host::HostBuilder`), over the release
    /// `cordon` in its roles.
    pub(crate) struct Library {
        router: Router,
        init: SelfCommand,
    }

    impl Library {
        /// Kept in `state` (a keeper per sandbox, as the server), or, with
        /// `None`, in this process.
        fn new(cordon: &Path, config_file: &Path, state: Option<&Path>) -> Library {
            let commands = SelfCommands::of(cordon);
            let init = commands.init.clone();
            let mut builder = HostBuilder::builtin().commands(commands).floor(Floor {
                rung: Isolation::Container,
                source: FloorSource::Config {
                    file: config_file.display().to_string(),
                },
            });
            if let Some(s) = state {
                // As the server: its state directory's audit log, its
                // defaults for idle time and age.
                builder = builder.audit_in(s).keep(Keep {
                    state: StateDir::open(s).unwrap(),
                    owner: "cordon-serve-bench".into(),
                    idle_timeout: Duration::from_secs(1800),
                    max_age: Duration::from_secs(86400),
                    on_idle_pause: None,
                });
            }
            let host = builder
                .build()
                .unwrap_or_else(|e| panic!("the library host: {e}"));
            Library {
                router: host.router,
                init,
            }
        }

        /// The sandbox of `thread`, as the server's create makes it.
        pub(crate) fn acquire(&self, thread: &str) -> Arc<dyn Sandbox> {
            let thread = thread.to_string();
            let caller = CallerContext::new(
                || SCOPE.to_string(),
                move || thread.clone(),
                || "default".to_string(),
                || Identity {
                    namespace: SCOPE.into(),
                    name: "agent".into(),
                    attested: true,
                    ..Identity::default()
                },
            );
            let spec = SandboxSpec::new("run", "host").unwrap();
            let s = self.router.acquire(&caller, &spec).expect("acquire");
            let (backend, rung) = self.router.selected(&spec).unwrap();
            assert_eq!(
                (backend, rung),
                ("container", Isolation::Container),
                "the library host picked another backend"
            );
            s
        }

        pub(crate) fn dispose(&self, thread: &str) {
            self.router.dispose_scope(SCOPE, thread);
        }
    }

    fn true_request() -> ExecRequest {
        ExecRequest {
            argv: vec!["/bin/true".into()],
            env: Default::default(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(3600),
            max_output_bytes: MAX_OUTPUT_BYTES,
        }
    }

    fn exec_lib(s: &dyn Sandbox, req: &ExecRequest) {
        let out = s.exec(req).unwrap();
        assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    }

    pub(crate) fn ms(d: f64) -> String {
        format!("{:.3} ms", d * 1e3)
    }

    /// p50, p90, mean of seconds.
    pub(crate) fn stats(v: &[f64]) -> (f64, f64, f64) {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |p: f64| {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "a rank within the sample count"
            )]
            let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
            s[i - 1]
        };
        #[expect(clippy::cast_precision_loss, reason = "a sample count")]
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        (at(0.5), at(0.9), mean)
    }

    pub(crate) fn machine_state() {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        println!(
            "machine: {cpus} cpus, kernel {}, load average {}",
            kernel.trim(),
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    fn latency(server: &Server, kept: &Library, direct: &Library, rounds: usize) {
        println!(
            "\n== latency: exec of /bin/true in a warm container-rung sandbox, {rounds} rounds, each in an order of its own"
        );
        machine_state();
        let lib = kept.acquire("latency");
        let own = direct.acquire("latency-direct");
        let mut c = Conn::open(&server.addr);
        c.create("latency");
        let body = exec_body("latency");
        let req = true_request();
        for _ in 0..20 {
            exec_lib(lib.as_ref(), &req);
            exec_lib(own.as_ref(), &req);
            c.exec_true(&body);
            c.call("GET", "/v1/backends", None);
        }
        let (sum0, n0) = c.exec_metrics();
        let names = [
            "library, kept (a keeper, as the server): Sandbox::exec",
            "HTTP POST /v1/sandboxes/exec",
            "library, in this process (no keeper): Sandbox::exec",
            "HTTP GET /healthz (no auth, no exec)",
            "HTTP GET /v1/backends (auth + JSON, no exec)",
        ];
        let mut t: [Vec<f64>; 5] = Default::default();
        // Each round in an order of its own (xorshift; a fixed rotation
        // put the same measure after an exec every time, and the first
        // request after an exec pays the server's wake-up).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..rounds {
            let mut order = [0usize, 1, 2, 3, 4];
            for i in (1..5usize).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let j = usize::try_from(x % (i as u64 + 1)).unwrap_or(0);
                order.swap(i, j);
            }
            for which in order {
                let started = Instant::now();
                match which {
                    0 => exec_lib(lib.as_ref(), &req),
                    1 => c.exec_true(&body),
                    2 => exec_lib(own.as_ref(), &req),
                    3 => {
                        let (s, _) = c.call("GET", "/healthz", None);
                        assert_eq!(s, 200);
                    }
                    _ => {
                        let (s, _) = c.call("GET", "/v1/backends", None);
                        assert_eq!(s, 200);
                    }
                }
                t[which].push(started.elapsed().as_secs_f64());
            }
        }
        let (sum1, n1) = c.exec_metrics();
        println!("| measure | p50 | p90 | mean |\n| --- | --- | --- | --- |");
        for (name, v) in names.iter().zip(&t) {
            let (p50, p90, mean) = stats(v);
            println!("| {name} | {} | {} | {} |", ms(p50), ms(p90), ms(mean));
        }
        let ratio = |a: usize, b: usize| {
            let paired: Vec<f64> = t[a].iter().zip(&t[b]).map(|(x, y)| x / y).collect();
            let (pr, _, _) = stats(&paired);
            let (a50, _, a_mean) = stats(&t[a]);
            let (b50, _, b_mean) = stats(&t[b]);
            format!(
                "p50 {:.2}x, mean {:.2}x, paired (median of per-round ratios) {pr:.2}x",
                a50 / b50,
                a_mean / b_mean
            )
        };
        println!(
            "ratio HTTP / kept library: {} (target <= 1.5x)",
            ratio(1, 0)
        );
        println!("ratio HTTP / library in this process: {}", ratio(1, 2));
        println!(
            "ratio kept library / library in this process (the keeper): {}",
            ratio(0, 2)
        );
        let (_, _, http_mean) = stats(&t[1]);
        #[expect(clippy::cast_precision_loss, reason = "an exec count")]
        let server_mean = (sum1 - sum0) / (n1 - n0).max(1) as f64;
        println!(
            "the server's own time in the exec (cordon_exec_seconds, {} execs): mean {}; so of the HTTP exec's mean {}, {} is outside the exec (request, auth, JSON, thread hand-off, loopback)",
            n1 - n0,
            ms(server_mean),
            ms(http_mean),
            ms(http_mean - server_mean)
        );
        drop((lib, own));
        kept.dispose("latency");
        direct.dispose("latency-direct");
    }

    /// CPU seconds (user + system, all threads) of a process so far.
    fn cpu_seconds(pid: &str) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let f: Vec<f64> = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        // utime and stime are fields 14 and 15 (indices 11 and 12 after
        // the command), in clock ticks (100 per second here).
        f.get(11)
            .zip(f.get(12))
            .map_or(0.0, |(u, s)| (u + s) / 100.0)
    }

    /// The pids of the keepers of the sandboxes recorded in `state`.
    fn keepers(state: &Path) -> Vec<String> {
        let handles: Vec<String> = std::fs::read_dir(state.join("sandboxes"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.strip_suffix(".json").map(String::from)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_string_lossy().into_owned();
                pid.parse::<u32>().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let arg = cmdline
                    .split(|b| *b == 0)
                    .find_map(|a| a.strip_prefix(b"--handle="))?;
                handles.iter().any(|h| h.as_bytes() == arg).then_some(pid)
            })
            .collect()
    }

    /// CPU seconds of `owner` and of the keepers of `state`.
    fn side_cpu(owner: &str, state: &Path) -> f64 {
        cpu_seconds(owner) + keepers(state).iter().map(|p| cpu_seconds(p)).sum::<f64>()
    }

    /// `clients` threads, each on a sandbox of its own, each running `one`
    /// back to back until `span` is over: how many ran.
    fn rate(clients: usize, span: Duration, one: impl Fn(usize) -> Box<dyn FnMut() + Send>) -> u64 {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..clients)
            .map(|k| {
                let mut f = one(k);
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        f();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(span);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    }

    fn throughput(
        server: &Server,
        kept: &Library,
        kept_state: &Path,
        clients: &[usize],
        span: Duration,
        repeats: usize,
    ) {
        println!(
            "\n== throughput: execs of /bin/true per second, K clients each on a warm container-rung sandbox of its own; HTTP and library alternated {repeats} times, {span:?} each"
        );
        machine_state();
        let most = clients.iter().copied().max().unwrap_or(1);
        let mut c = Conn::open(&server.addr);
        for k in 0..most {
            c.create(&format!("tp{k}"));
        }
        let sandboxes: Vec<Arc<dyn Sandbox>> =
            (0..most).map(|k| kept.acquire(&format!("tp{k}"))).collect();
        println!("| clients | HTTP execs/s | kept library execs/s | HTTP / library (execs/s) | CPU per exec: server and its keepers + HTTP client / library and its keepers |\n| --- | --- | --- | --- | --- |");
        let spid = server.child.id().to_string();
        #[expect(clippy::cast_precision_loss, reason = "an exec count")]
        let per = |cpu: f64, n: u64| ms(cpu / n.max(1) as f64);
        for &k in clients {
            let addr = server.addr.clone();
            // HTTP and library alternated `repeats` times: (execs, seconds,
            // CPU of the serving side, CPU of the HTTP client).
            let (mut h, mut l) = ((0, 0.0, 0.0, 0.0), (0, 0.0, 0.0));
            for _ in 0..repeats {
                let (s0, c0) = (side_cpu(&spid, &server.state), cpu_seconds("self"));
                let started = Instant::now();
                let n = rate(k, span, |i| {
                    let mut c = Conn::open(&addr);
                    let body = exec_body(&format!("tp{i}"));
                    Box::new(move || c.exec_true(&body))
                });
                h.1 += started.elapsed().as_secs_f64();
                h.0 += n;
                let (s1, c1) = (side_cpu(&spid, &server.state), cpu_seconds("self"));
                h.2 += s1 - s0;
                h.3 += c1 - c0;
                let l0 = side_cpu("self", kept_state);
                let started = Instant::now();
                let n = rate(k, span, |i| {
                    let s = sandboxes[i].clone();
                    let req = true_request();
                    Box::new(move || exec_lib(s.as_ref(), &req))
                });
                l.1 += started.elapsed().as_secs_f64();
                l.0 += n;
                l.2 += side_cpu("self", kept_state) - l0;
            }
            #[expect(clippy::cast_precision_loss, reason = "an exec count")]
            let (http, library) = (h.0 as f64 / h.1, l.0 as f64 / l.1);
            println!(
                "| {k} | {http:.0} | {library:.0} | {:.2} | {} + {} / {} |",
                http / library,
                per(h.2, h.0),
                per(h.3, h.0),
                per(l.2, l.0),
            );
        }
        println!("(CPU of the server's, this process's and the keepers' own threads; the sandboxes' processes, in their own cgroups, are counted on neither side)");
        drop(sandboxes);
        for k in 0..most {
            kept.dispose(&format!("tp{k}"));
        }
    }
}
