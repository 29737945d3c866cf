//! egress-bench: cordon's egress proxy against a direct connection and peer
//! forward proxies, on loopback, all figures measured in the same run.
//!
//!   egress-bench serve --http 127.0.0.1:PORT --tls 127.0.0.1:443
//!   egress-bench run --http-port PORT [--tls-port 443]
//!       --target direct=direct
//!       --target tinyproxy=127.0.0.1:P1,127.0.0.1
//!       --target squid=127.0.0.1:P2,127.0.0.1
//!       --target cordon=127.0.0.1:P3,bench.test   (or cordon=missing:REASON)
//!       [--subject cordon] [--scale F] [--concurrency 32] [--bulk-mib 256]
//!
//! benches/egress/run.sh starts everything and is the way to run it; the
//! README beside it says what each figure measures.

mod client;
mod hello;
mod report;
mod upstream;

use client::{KeepAlive, Target, Upstream};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: egress-bench serve --http ADDR --tls ADDR\n       egress-bench run --http-port PORT [--tls-port PORT] --target NAME=direct|NAME=PROXY,HOST|NAME=missing:REASON ... [--subject NAME] [--scale F] [--concurrency N] [--bulk-mib N]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let code = match args.first().map(String::as_str) {
        Some("serve") => rt.block_on(serve_cmd(&args[1..])),
        Some("run") => rt.block_on(run_cmd(&args[1..])),
        _ => Err(USAGE.to_string()),
    };
    if let Err(e) = code {
        eprintln!("egress-bench: {e}");
        std::process::exit(2);
    }
}

fn flag_pairs(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let Some(name) = k.strip_prefix("--") else {
            return Err(format!("unexpected argument {k}\n{USAGE}"));
        };
        let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
        out.push((name.to_string(), v.clone()));
    }
    Ok(out)
}

async fn serve_cmd(args: &[String]) -> Result<(), String> {
    let mut http = None;
    let mut tls = None;
    for (k, v) in flag_pairs(args)? {
        let a: SocketAddr = v.parse().map_err(|e| format!("--{k} {v}: {e}"))?;
        match k.as_str() {
            "http" => http = Some(a),
            "tls" => tls = Some(a),
            _ => return Err(format!("unknown flag --{k}")),
        }
    }
    let (Some(h), Some(t)) = (http, tls) else { return Err(USAGE.into()) };
    for a in [h, t] {
        if !a.ip().is_loopback() {
            return Err(format!("{a}: the upstream listens on loopback only"));
        }
    }
    upstream::serve(h, t).await.map_err(|e| e.to_string())
}

/// A target as given on the command line: usable, or why not.
pub enum Slot {
    Ready(Target),
    Missing { name: String, why: String },
}

impl Slot {
    pub fn name(&self) -> &str {
        match self {
            Slot::Ready(t) => &t.name,
            Slot::Missing { name, .. } => name,
        }
    }
}

fn parse_target(spec: &str) -> Result<Slot, String> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| format!("--target {spec}: NAME=..."))?;
    let name = name.to_string();
    if rest == "direct" {
        return Ok(Slot::Ready(Target { name, proxy: None, host: "127.0.0.1".into() }));
    }
    if let Some(why) = rest.strip_prefix("missing:") {
        return Ok(Slot::Missing { name, why: why.to_string() });
    }
    let (addr, host) = rest.split_once(',').ok_or_else(|| format!("--target {spec}: NAME=PROXY,HOST"))?;
    let proxy: SocketAddr = addr.parse().map_err(|e| format!("--target {spec}: {e}"))?;
    if !proxy.ip().is_loopback() {
        return Err(format!("--target {spec}: proxies must be on loopback"));
    }
    Ok(Slot::Ready(Target { name, proxy: Some(proxy), host: host.to_string() }))
}

/// Run sizes, scaled by --scale (EGRESS_BENCH_SCALE in run.sh).
struct Plan {
    rounds: usize,
    tunnel_n: usize,
    new_conn_n: usize,
    keepalive_n: usize,
    rps_secs: f64,
    concurrency: usize,
    bulk_bytes: u64,
    bulk_reps: usize,
    warmup: usize,
}

impl Plan {
    fn new(scale: f64, concurrency: usize, bulk_mib: u64) -> Plan {
        let n = |base: f64| ((base * scale).round() as usize).max(4);
        Plan {
            rounds: 4,
            tunnel_n: n(2000.0),
            new_conn_n: n(2000.0),
            keepalive_n: n(4000.0),
            rps_secs: (8.0 * scale).max(0.4),
            concurrency,
            bulk_bytes: bulk_mib << 20,
            bulk_reps: ((3.0 * scale).round() as usize).max(1),
            warmup: 50,
        }
    }
}

/// Everything measured for one target.
#[derive(Default)]
pub struct Measured {
    pub tunnel: Vec<f64>,   // µs
    pub new_conn: Vec<f64>, // µs
    pub keep: Vec<f64>,     // µs
    pub keep_opened: u64,
    pub rps_ok: u64,
    pub rps_secs: f64,
    pub rps_opened: u64,
    pub bulk: Vec<f64>, // MiB/s
    pub errors: Vec<(String, u64, String)>, // figure, count, first error
}

impl Measured {
    fn err(&mut self, fig: &str, e: &std::io::Error) {
        if let Some(x) = self.errors.iter_mut().find(|x| x.0 == fig) {
            x.1 += 1;
        } else {
            self.errors.push((fig.to_string(), 1, e.to_string()));
        }
    }
}

const OP_TIMEOUT: Duration = Duration::from_secs(5);

async fn timed<F, T>(f: F) -> std::io::Result<T>
where
    F: std::future::Future<Output = std::io::Result<T>>,
{
    match tokio::time::timeout(OP_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "operation timed out (5 s)")),
    }
}

/// Rotates the order of targets each round so that no target always runs
/// first (or last) while the machine's load drifts.
fn order(n: usize, round: usize) -> Vec<usize> {
    (0..n).map(|i| (i + round) % n).collect()
}

async fn run_cmd(args: &[String]) -> Result<(), String> {
    let mut up = Upstream { http_port: 0, tls_port: 443 };
    let mut slots = Vec::new();
    let mut subject = None;
    let mut scale: f64 = std::env::var("EGRESS_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let mut concurrency = 32usize;
    let mut bulk_mib = 256u64;
    for (k, v) in flag_pairs(args)? {
        let bad = |e: &dyn std::fmt::Display| format!("--{k} {v}: {e}");
        match k.as_str() {
            "http-port" => up.http_port = v.parse().map_err(|e| bad(&e))?,
            "tls-port" => up.tls_port = v.parse().map_err(|e| bad(&e))?,
            "target" => slots.push(parse_target(&v)?),
            "subject" => subject = Some(v),
            "scale" => scale = v.parse().map_err(|e| bad(&e))?,
            "concurrency" => concurrency = v.parse().map_err(|e| bad(&e))?,
            "bulk-mib" => bulk_mib = v.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag --{k}\n{USAGE}")),
        }
    }
    if up.http_port == 0 || slots.is_empty() {
        return Err(USAGE.into());
    }
    if scale.is_nan() || scale <= 0.0 {
        return Err("--scale must be > 0".into());
    }
    let subject = subject.unwrap_or_else(|| slots.last().expect("non-empty").name().to_string());
    let plan = Plan::new(scale, concurrency, bulk_mib);
    let started = Instant::now();

    // Preflight: one of each operation per target; a target that fails is
    // reported with its error and left out of the figures.
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut ready: Vec<Target> = Vec::new();
    for s in &slots {
        let Slot::Ready(t) = s else { continue };
        let req = client::request_bytes(t, up);
        let check = async {
            timed(client::tunnel_first_byte(t, up)).await.map_err(|e| format!("tunnel: {e}"))?;
            timed(client::get_new_conn(t, up, &req)).await.map_err(|e| format!("GET: {e}"))?;
            timed(client::bulk(t, up, 1 << 20)).await.map_err(|e| format!("bulk 1 MiB: {e}"))?;
            Ok::<(), String>(())
        };
        match check.await {
            Ok(()) => ready.push(t.clone()),
            Err(e) => {
                eprintln!("preflight {}: {e}", t.name);
                failed.push((t.name.clone(), e));
            }
        }
    }
    let mut m: Vec<Measured> = ready.iter().map(|_| Measured::default()).collect();
    let names: Vec<&str> = ready.iter().map(|t| t.name.as_str()).collect();
    eprintln!("targets: {}; scale {scale}", names.join(", "));

    // Figure 1: tunnel setup to first byte.
    eprintln!("figure 1: CONNECT tunnel setup to first byte, {} per target", plan.tunnel_n);
    for t in &ready {
        for _ in 0..plan.warmup {
            let _ = timed(client::tunnel_first_byte(t, up)).await;
        }
    }
    for r in 0..plan.rounds {
        for i in order(ready.len(), r) {
            let t = &ready[i];
            for _ in 0..plan.tunnel_n / plan.rounds {
                match timed(client::tunnel_first_byte(t, up)).await {
                    Ok(d) => m[i].tunnel.push(d.as_secs_f64() * 1e6),
                    Err(e) => m[i].err("1 tunnel", &e),
                }
            }
        }
    }

    // Figure 2a: GET on a new connection each time.
    eprintln!("figure 2a: GET small, new connection each, {} per target", plan.new_conn_n);
    let reqs: Vec<Vec<u8>> = ready.iter().map(|t| client::request_bytes(t, up)).collect();
    for (i, t) in ready.iter().enumerate() {
        for _ in 0..plan.warmup {
            let _ = timed(client::get_new_conn(t, up, &reqs[i])).await;
        }
    }
    for r in 0..plan.rounds {
        for i in order(ready.len(), r) {
            let t = &ready[i];
            for _ in 0..plan.new_conn_n / plan.rounds {
                match timed(client::get_new_conn(t, up, &reqs[i])).await {
                    Ok(d) => m[i].new_conn.push(d.as_secs_f64() * 1e6),
                    Err(e) => m[i].err("2a new-conn GET", &e),
                }
            }
        }
    }

    // Figure 2b: GET on a keep-alive connection (reopened when the proxy
    // closes it; the reopening is inside the timing).
    eprintln!("figure 2b: GET small, keep-alive, {} per target", plan.keepalive_n);
    for r in 0..plan.rounds {
        for i in order(ready.len(), r) {
            let t = &ready[i];
            let mut ka = KeepAlive::new();
            for _ in 0..plan.warmup.min(10) {
                let _ = timed(ka.get(t, up, &reqs[i])).await;
            }
            let before = ka.opened;
            for _ in 0..plan.keepalive_n / plan.rounds {
                let s = Instant::now();
                match timed(ka.get(t, up, &reqs[i])).await {
                    Ok(()) => m[i].keep.push(s.elapsed().as_secs_f64() * 1e6),
                    Err(e) => m[i].err("2b keep-alive GET", &e),
                }
            }
            m[i].keep_opened += ka.opened - before;
        }
    }

    // Figure 3: requests per second, `concurrency` keep-alive clients.
    eprintln!(
        "figure 3: {} concurrent clients, {:.1} s per target",
        plan.concurrency, plan.rps_secs
    );
    let block = Duration::from_secs_f64(plan.rps_secs / plan.rounds as f64);
    for r in 0..plan.rounds {
        for i in order(ready.len(), r) {
            let (ok, secs, opened, errs) = rps_block(&ready[i], up, &reqs[i], plan.concurrency, block).await;
            m[i].rps_ok += ok;
            m[i].rps_secs += secs;
            m[i].rps_opened += opened;
            for e in errs {
                m[i].err("3 concurrent GET", &e);
            }
        }
    }

    // Figure 4: bulk through a CONNECT tunnel.
    eprintln!(
        "figure 4: {} MiB through a tunnel, {} time(s) per target",
        plan.bulk_bytes >> 20,
        plan.bulk_reps
    );
    for r in 0..plan.bulk_reps {
        for i in order(ready.len(), r) {
            let f = client::bulk(&ready[i], up, plan.bulk_bytes);
            match tokio::time::timeout(Duration::from_secs(300), f).await {
                Ok(Ok(d)) => m[i].bulk.push((plan.bulk_bytes as f64 / (1 << 20) as f64) / d.as_secs_f64()),
                Ok(Err(e)) => m[i].err("4 bulk", &e),
                Err(_) => m[i].err("4 bulk", &std::io::Error::new(std::io::ErrorKind::TimedOut, "300 s")),
            }
        }
    }
    eprintln!("measured in {:.0} s", started.elapsed().as_secs_f64());

    let spec = report::Spec {
        concurrency: plan.concurrency,
        bulk_mib: plan.bulk_bytes >> 20,
        tunnel_n: plan.tunnel_n,
        new_conn_n: plan.new_conn_n,
        keepalive_n: plan.keepalive_n,
        rps_secs: plan.rps_secs,
        bulk_reps: plan.bulk_reps,
        scale,
    };
    print!("{}", report::render(&spec, &slots, &ready, &m, &failed, &subject));
    Ok(())
}

/// `n` clients, each a keep-alive loop, for `dur`. Returns answered
/// requests, the seconds until the last client stopped, connections opened
/// and the errors.
async fn rps_block(
    t: &Target,
    up: Upstream,
    req: &[u8],
    n: usize,
    dur: Duration,
) -> (u64, f64, u64, Vec<std::io::Error>) {
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let t = t.clone();
        let req = req.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut ka = KeepAlive::new();
            let mut ok = 0u64;
            let mut errs = Vec::new();
            while Instant::now() < deadline {
                match timed(ka.get(&t, up, &req)).await {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        errs.push(e);
                        if errs.len() > 100 {
                            break;
                        }
                        // Do not spin on a refusing proxy.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            (ok, ka.opened, errs)
        }));
    }
    let mut ok = 0;
    let mut opened = 0;
    let mut errs = Vec::new();
    for h in tasks {
        let (o, c, e) = h.await.expect("client task");
        ok += o;
        opened += c;
        errs.extend(e);
    }
    (ok, start.elapsed().as_secs_f64(), opened, errs)
}
