//! `egress-inspect-bench`: the two ends of `benches/egress-inspect.sh`.
//!
//! - `serve`: a loopback HTTPS upstream (rustls, HTTP/1.1, keep-alive) on
//!   one thread. `GET /small` is answered with a 64-byte body; `GET
//!   /bulk/N` with N bytes, written 256 KiB at a time.
//! - `run`: the client, on one thread. It reaches the upstream through each
//!   target (direct, or a `CONNECT` through a proxy, then TLS to the name
//!   the target says) and prints a markdown table (see the README).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SMALL: usize = 64;
const CHUNK: usize = 256 * 1024;
const TIMEOUT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let r = match args.first().map(String::as_str) {
        Some("serve") => rt.block_on(serve(&args[1..])),
        Some("run") => rt.block_on(run(&args[1..])),
        _ => Err("usage: egress-inspect-bench serve|run [--flag value]...".into()),
    };
    if let Err(e) = r {
        eprintln!("egress-inspect-bench: {e}");
        std::process::exit(1);
    }
}

/// `--name value` pairs; a name may repeat.
fn flags(args: &[String]) -> Res<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let k = k
            .strip_prefix("--")
            .ok_or_else(|| format!("`{k}` is not a flag"))?;
        let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
        out.push((k.to_string(), v.clone()));
    }
    Ok(out)
}

fn flag(f: &[(String, String)], k: &str) -> Option<String> {
    f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn num<T: std::str::FromStr>(f: &[(String, String)], k: &str, d: T) -> Res<T> {
    match flag(f, k) {
        None => Ok(d),
        Some(v) => v.parse().map_err(|_| format!("--{k} {v}: not a number")),
    }
}

fn loopback(a: SocketAddr) -> Res<SocketAddr> {
    if a.ip().is_loopback() {
        Ok(a)
    } else {
        Err(format!("{a} is not loopback: this bench stays on loopback"))
    }
}

// --- the upstream ----------------------------------------------------------

async fn serve(args: &[String]) -> Res<()> {
    let f = flags(args)?;
    let cert = flag(&f, "cert").ok_or("--cert PEM")?;
    let key = flag(&f, "key").ok_or("--key PEM")?;
    let port_file = flag(&f, "port-file").ok_or("--port-file FILE")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .map_err(|e| format!("{cert}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{cert}: {e}"))?;
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("{key}: {e}"))?;
    #[allow(deprecated)] // ring has no post-quantum groups; both ends use it alike
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    std::fs::write(&port_file, format!("{port}\n")).map_err(|e| e.to_string())?;
    let bulk: Arc<[u8]> = vec![b'b'; CHUNK].into();
    loop {
        let Ok((tcp, _)) = l.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, bulk) = (acceptor.clone(), bulk.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = answer(tls, bulk).await;
            }
        });
    }
}

async fn answer(
    mut s: tokio_rustls::server::TlsStream<TcpStream>,
    bulk: Arc<[u8]>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    loop {
        // One request head (the client sends no bodies).
        let (used, path, close) = loop {
            let mut h = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut h);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let close = req.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("connection")
                            && h.value.eq_ignore_ascii_case(b"close")
                    }) || req.version == Some(0);
                    break (n, req.path.unwrap_or("/").to_string(), close);
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Ok(()),
            }
            let n = s.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        buf.drain(..used);
        let conn = if close { "close" } else { "keep-alive" };
        if let Some(n) = path.strip_prefix("/bulk/") {
            let mut left: usize = n.parse().unwrap_or(0);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {left}\r\nconnection: {conn}\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await?;
            while left > 0 {
                let k = left.min(CHUNK);
                s.write_all(&bulk[..k]).await?;
                left -= k;
            }
        } else {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {SMALL}\r\nconnection: {conn}\r\n\r\n{}",
                "s".repeat(SMALL)
            );
            s.write_all(head.as_bytes()).await?;
        }
        s.flush().await?;
        if close {
            let _ = s.shutdown().await;
            return Ok(());
        }
    }
}

// --- the client ------------------------------------------------------------

/// One way to the upstream.
struct Target {
    name: String,
    /// The proxy to `CONNECT` through; none: straight to the upstream.
    proxy: Option<SocketAddr>,
    /// The `CONNECT` authority's host.
    connect_host: String,
    /// The TLS server name (and `Host`).
    sni: String,
    tls: tokio_rustls::TlsConnector,
}

struct Conn {
    s: tokio_rustls::client::TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl Target {
    /// `NAME,PROXY|-,CONNECT_HOST,SNI,CA_PEM`.
    fn parse(spec: &str) -> Res<Target> {
        let p: Vec<&str> = spec.split(',').collect();
        let [name, proxy, connect_host, sni, ca] = p[..] else {
            return Err(format!(
                "--target {spec}: NAME,PROXY|-,CONNECT_HOST,SNI,CA_PEM"
            ));
        };
        let proxy = match proxy {
            "-" => None,
            a => Some(loopback(
                a.parse().map_err(|_| format!("{a}: not ADDR:PORT"))?,
            )?),
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{ca}: {e}"))? {
            roots
                .add(c.map_err(|e| format!("{ca}: {e}"))?)
                .map_err(|e| format!("{ca}: {e}"))?;
        }
        #[allow(deprecated)] // ring has no post-quantum groups; both ends use it alike
    let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        // Every new connection pays full handshakes, through every target.
        cfg.resumption = rustls::client::Resumption::disabled();
        Ok(Target {
            name: name.to_string(),
            proxy,
            connect_host: connect_host.to_string(),
            sni: sni.to_string(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        })
    }

    async fn connect(&self, upstream: SocketAddr) -> Res<Conn> {
        tokio::time::timeout(TIMEOUT, self.connect_inner(upstream))
            .await
            .map_err(|_| "connect: timed out".to_string())?
    }

    async fn connect_inner(&self, upstream: SocketAddr) -> Res<Conn> {
        fn e(w: &'static str) -> impl Fn(std::io::Error) -> String {
            move |x| format!("{w}: {x}")
        }
        let mut tcp = TcpStream::connect(self.proxy.unwrap_or(upstream))
            .await
            .map_err(e("tcp connect"))?;
        tcp.set_nodelay(true).map_err(e("nodelay"))?;
        if self.proxy.is_some() {
            let auth = format!("{}:{}", self.connect_host, upstream.port());
            tcp.write_all(format!("CONNECT {auth} HTTP/1.1\r\nHost: {auth}\r\n\r\n").as_bytes())
                .await
                .map_err(e("CONNECT"))?;
            // Byte by byte: nothing past the answer's head may be eaten.
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if tcp.read(&mut b).await.map_err(e("CONNECT answer"))? == 0 {
                    return Err(format!(
                        "CONNECT: closed after {:?}",
                        String::from_utf8_lossy(&head)
                    ));
                }
                head.push(b[0]);
                if head.len() > 8192 {
                    return Err("CONNECT: answer head too long".into());
                }
            }
            let line = String::from_utf8_lossy(&head);
            if !line.starts_with("HTTP/1.1 2") && !line.starts_with("HTTP/1.0 2") {
                return Err(format!("CONNECT refused: {}", line.lines().next().unwrap_or("")));
            }
        }
        let name = ServerName::try_from(self.sni.clone()).map_err(|e| e.to_string())?;
        let s = self.tls.connect(name, tcp).await.map_err(e("TLS"))?;
        Ok(Conn {
            s,
            buf: Vec::with_capacity(8192),
        })
    }
}

impl Conn {
    /// Sends `GET path` and reads the whole answer; its body's length.
    async fn get(&mut self, host: &str, port: u16, path: &str) -> Res<usize> {
        tokio::time::timeout(
            if path.starts_with("/bulk") { TIMEOUT * 30 } else { TIMEOUT },
            self.get_inner(host, port, path),
        )
        .await
        .map_err(|_| format!("GET {path}: timed out"))?
    }

    async fn get_inner(&mut self, host: &str, port: u16, path: &str) -> Res<usize> {
        let e = |x: std::io::Error| format!("GET: {x}");
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\naccept: */*\r\n\r\n");
        self.s.write_all(req.as_bytes()).await.map_err(e)?;
        self.s.flush().await.map_err(e)?;
        let mut tmp = vec![0u8; CHUNK];
        let (used, len) = loop {
            let mut h = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut h);
            match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    if resp.code != Some(200) {
                        return Err(format!(
                            "GET {path}: status {:?}: {}",
                            resp.code,
                            String::from_utf8_lossy(&self.buf[n..])
                        ));
                    }
                    let len = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                        .ok_or_else(|| format!("GET {path}: no content-length"))?;
                    break (n, len);
                }
                Ok(httparse::Status::Partial) => {}
                Err(x) => return Err(format!("GET {path}: bad answer: {x}")),
            }
            let n = self.s.read(&mut tmp).await.map_err(e)?;
            if n == 0 {
                return Err(format!("GET {path}: closed before the answer"));
            }
            self.buf.extend_from_slice(&tmp[..n]);
        };
        self.buf.drain(..used);
        let have = self.buf.len().min(len);
        self.buf.drain(..have);
        let mut left = len - have;
        while left > 0 {
            let want = left.min(tmp.len());
            let n = self.s.read(&mut tmp[..want]).await.map_err(e)?;
            if n == 0 {
                return Err(format!("GET {path}: closed with {left} bytes to go"));
            }
            left -= n;
        }
        Ok(len)
    }
}

#[derive(Default)]
struct Figures {
    keepalive: Vec<u64>,
    newconn: Vec<u64>,
    reqs: u64,
    rps_secs: f64,
    bulk: Vec<f64>,
    errors: Vec<String>,
}

fn pct(v: &mut [u64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i] as f64 / 1000.0)
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

async fn run(args: &[String]) -> Res<()> {
    let f = flags(args)?;
    let upstream: SocketAddr = loopback(
        flag(&f, "upstream")
            .ok_or("--upstream 127.0.0.1:PORT")?
            .parse()
            .map_err(|_| "--upstream: not ADDR:PORT")?,
    )?;
    let keepalive: usize = num(&f, "keepalive", 4000)?;
    let newconn: usize = num(&f, "newconn", 400)?;
    let seconds: f64 = num(&f, "seconds", 8.0)?;
    let concurrency: usize = num(&f, "concurrency", 8)?;
    let bulk_mib: usize = num(&f, "bulk-mib", 256)?;
    let bulk_runs: usize = num(&f, "bulk-runs", 3)?;
    let rounds: usize = num(&f, "rounds", 4)?;
    let mut targets = Vec::new();
    for (k, v) in &f {
        if k == "target" {
            targets.push(Target::parse(v)?);
        }
    }
    if targets.is_empty() {
        return Err("no --target".into());
    }
    let port = upstream.port();
    // Preflight: one of each, and a warm-up; a target that fails is left
    // out with its error.
    let mut live = Vec::new();
    let mut figs: Vec<Figures> = Vec::new();
    for t in targets {
        let r: Res<()> = async {
            let mut c = t.connect(upstream).await?;
            for _ in 0..50 {
                c.get(&t.sni, port, "/small").await?;
            }
            c.get(&t.sni, port, "/bulk/1048576").await?;
            Ok(())
        }
        .await;
        match r {
            Ok(()) => {
                live.push(t);
                figs.push(Figures::default());
            }
            Err(e) => eprintln!("== {}: left out, preflight failed: {e}", t.name),
        }
    }
    let targets = live;
    let n = targets.len();
    let order = |round: usize| (0..n).map(move |i| (i + round) % n);

    eprintln!("== keep-alive GET: {keepalive} per target");
    for round in 0..rounds {
        for i in order(round) {
            let t = &targets[i];
            let per = keepalive / rounds;
            let mut c = match t.connect(upstream).await {
                Ok(c) => c,
                Err(e) => {
                    figs[i].errors.push(e);
                    continue;
                }
            };
            for _ in 0..20 {
                let _ = c.get(&t.sni, port, "/small").await;
            }
            for _ in 0..per {
                let t0 = Instant::now();
                match c.get(&t.sni, port, "/small").await {
                    Ok(_) => figs[i].keepalive.push(t0.elapsed().as_nanos() as u64),
                    Err(e) => {
                        figs[i].errors.push(e);
                        match t.connect(upstream).await {
                            Ok(n) => c = n,
                            Err(e) => {
                                figs[i].errors.push(e);
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    eprintln!("== new connection per GET: {newconn} per target");
    for round in 0..rounds {
        for i in order(round) {
            let t = &targets[i];
            for _ in 0..newconn / rounds {
                let t0 = Instant::now();
                let r = async {
                    let mut c = t.connect(upstream).await?;
                    c.get(&t.sni, port, "/small").await
                }
                .await;
                match r {
                    Ok(_) => figs[i].newconn.push(t0.elapsed().as_nanos() as u64),
                    Err(e) => figs[i].errors.push(e),
                }
            }
        }
    }

    eprintln!("== req/s, {concurrency} keep-alive clients, {seconds} s per target");
    for round in 0..rounds {
        for i in order(round) {
            let t = Arc::new(targets[i].clone_light());
            let block = Duration::from_secs_f64(seconds / rounds as f64);
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..concurrency {
                let t = t.clone();
                tasks.push(tokio::spawn(async move {
                    let mut done = 0u64;
                    let mut c = t.connect(upstream).await?;
                    while t0.elapsed() < block {
                        c.get(&t.sni, port, "/small").await?;
                        done += 1;
                    }
                    Ok::<u64, String>(done)
                }));
            }
            for task in tasks {
                match task.await {
                    Ok(Ok(d)) => figs[i].reqs += d,
                    Ok(Err(e)) => figs[i].errors.push(e),
                    Err(e) => figs[i].errors.push(e.to_string()),
                }
            }
            figs[i].rps_secs += t0.elapsed().as_secs_f64();
        }
    }

    eprintln!("== bulk: {bulk_mib} MiB x {bulk_runs} per target");
    let bytes = bulk_mib * 1024 * 1024;
    for run in 0..bulk_runs {
        for i in order(run) {
            let t = &targets[i];
            let r = async {
                let mut c = t.connect(upstream).await?;
                c.get(&t.sni, port, "/small").await?;
                let t0 = Instant::now();
                let got = c.get(&t.sni, port, &format!("/bulk/{bytes}")).await?;
                Ok::<f64, String>(got as f64 / 1048576.0 / t0.elapsed().as_secs_f64())
            }
            .await;
            match r {
                Ok(m) => figs[i].bulk.push(m),
                Err(e) => figs[i].errors.push(e),
            }
        }
    }

    report(&targets, &mut figs, concurrency);
    Ok(())
}

impl Target {
    /// The same target for another task (the TLS connector is shared).
    fn clone_light(&self) -> Target {
        Target {
            name: self.name.clone(),
            proxy: self.proxy,
            connect_host: self.connect_host.clone(),
            sni: self.sni.clone(),
            tls: self.tls.clone(),
        }
    }
}

fn report(targets: &[Target], figs: &mut [Figures], concurrency: usize) {
    let col = |name: &str| targets.iter().position(|t| t.name == name);
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let fmt = |v: Option<f64>| match v {
        None => "–".to_string(),
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    };
    let mut rows: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let ka50: Vec<Option<f64>> = figs.iter_mut().map(|f| pct(&mut f.keepalive, 0.5)).collect();
    let ka99: Vec<Option<f64>> = figs.iter_mut().map(|f| pct(&mut f.keepalive, 0.99)).collect();
    let nc50: Vec<Option<f64>> = figs.iter_mut().map(|f| pct(&mut f.newconn, 0.5)).collect();
    let nc99: Vec<Option<f64>> = figs.iter_mut().map(|f| pct(&mut f.newconn, 0.99)).collect();
    let rps: Vec<Option<f64>> = figs
        .iter()
        .map(|f| (f.rps_secs > 0.0).then(|| f.reqs as f64 / f.rps_secs))
        .collect();
    let bulk: Vec<Option<f64>> = figs.iter_mut().map(|f| median(&mut f.bulk)).collect();
    let direct = col("direct");
    let added = |v: &[Option<f64>]| -> Vec<Option<f64>> {
        v.iter()
            .map(|x| Some(x.as_ref()? - v[direct?]?))
            .collect()
    };
    rows.push(("1. keep-alive GET, p50 (µs)".into(), ka50.clone()));
    rows.push(("1. same, p99 (µs)".into(), ka99.clone()));
    rows.push(("1. added over direct, p50 (µs)".into(), added(&ka50)));
    rows.push(("1. added over direct, p99 (µs)".into(), added(&ka99)));
    rows.push(("2. new connection + GET, p50 (µs)".into(), nc50.clone()));
    rows.push(("2. same, p99 (µs)".into(), nc99.clone()));
    rows.push(("2. added over direct, p50 (µs)".into(), added(&nc50)));
    rows.push((format!("3. req/s, {concurrency} keep-alive clients"), rps.clone()));
    rows.push(("4. bulk, one response, MiB/s (median)".into(), bulk.clone()));
    let (ins, mitm, tun) = (col("inspect"), col("mitmproxy"), col("tunnel"));
    let ratio = |v: &[Option<f64>], a: Option<usize>, b: Option<usize>| -> Option<f64> {
        Some(v[a?]? / v[b?]?)
    };
    let diff = |v: &[Option<f64>], a: Option<usize>, b: Option<usize>| -> Option<f64> {
        Some(v[a?]? - v[b?]?)
    };
    println!(
        "| figure | {} | inspect / mitmproxy | inspect − tunnel |",
        names.join(" | ")
    );
    println!("|---|{}---:|---:|", "---:|".repeat(names.len()));
    for (label, v) in &rows {
        let cells: Vec<String> = v.iter().map(|x| fmt(*x)).collect();
        println!(
            "| {label} | {} | {} | {} |",
            cells.join(" | "),
            fmt(ratio(v, ins, mitm)),
            fmt(diff(v, ins, tun))
        );
    }
    let errs: Vec<String> = figs.iter().map(|f| f.errors.len().to_string()).collect();
    println!("| errors | {} | | |", errs.join(" | "));
    println!();
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not measured",
    };
    let r = ratio(&rps, ins, mitm);
    println!(
        "- inspected req/s ≥ 3× mitmproxy's: {} ({})",
        fmt(r),
        verdict(r.map(|r| r >= 3.0))
    );
    let a = ratio(&added(&ka50), ins, mitm);
    println!(
        "- added keep-alive latency (p50 over direct) ≤ 0.5× mitmproxy's: {} ({})",
        fmt(a),
        verdict(a.map(|a| a <= 0.5))
    );
    let a99 = ratio(&added(&ka99), ins, mitm);
    let an = ratio(&added(&nc50), ins, mitm);
    println!(
        "  (the same at p99: {}; per new connection, p50: {})",
        fmt(a99),
        fmt(an)
    );
    let d = diff(&ka50, ins, tun);
    println!(
        "- inspection adds ≤ 1 ms p50 per keep-alive request over the tunnel: {} µs ({})",
        fmt(d),
        verdict(d.map(|d| d <= 1000.0))
    );
    for (t, f) in targets.iter().zip(figs.iter()) {
        if let Some(e) = f.errors.first() {
            eprintln!("== {}: {} errors, the first: {e}", t.name, f.errors.len());
        }
    }
}
