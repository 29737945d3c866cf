//! The bodies of the egress fuzz targets (`fuzz/`), here so the corpora can
//! also be replayed by `cargo test` (`tests/fuzz_corpus.rs`). Not API.

use crate::sni::{read_client_hello, Hello};
use crate::target::{authority, canonical_dotted_quad, Host};

/// `egress_target`: the entry of every request, the target's authority.
/// Whatever the bytes, it is parsed or refused; what is accepted is a fixed
/// point (its text form parses back to itself, a name is already
/// canonical, a dotted quad is spelled as the address prints); a refusal
/// shows at most 200 printable characters of the input.
pub fn egress_target(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(ip) = canonical_dotted_quad(raw) {
        assert_eq!(ip.to_string(), raw, "a dotted quad that is not canonical");
    }
    for default_port in [None, Some(443)] {
        match authority(raw, default_port) {
            Ok(a) => {
                let shown = a.to_string();
                match authority(&shown, None) {
                    Ok(back) => assert_eq!(back, a, "`{raw}` -> `{shown}` parses differently"),
                    Err(e) => panic!("`{raw}` was accepted as `{shown}`, which is refused: {e}"),
                }
                if let Host::Name(n) = &a.host {
                    assert_eq!(
                        cordon_policy::canon::host(n).ok().as_deref(),
                        Some(n.as_str()),
                        "an accepted name is not canonical"
                    );
                    assert!(
                        n.parse::<std::net::IpAddr>().is_err(),
                        "`{raw}` names the address `{n}` as a name"
                    );
                }
                assert_ne!(a.port, 0, "`{raw}` was accepted with port 0");
            }
            Err(e) => {
                assert!(e.raw.chars().count() <= 200, "a refusal shows too much");
                assert!(
                    !e.raw.chars().any(char::is_control),
                    "a refusal shows control characters"
                );
            }
        }
    }
}

/// `egress_sni`: the first bytes of a tunnel. Whatever the bytes, they are
/// read without panicking; a complete ClientHello reads the same whatever
/// follows it, and a server name it yields is at most 255 bytes.
pub fn egress_sni(data: &[u8]) {
    let hello = read_client_hello(data);
    if let Hello::Tls { sni } = &hello {
        if let Some(name) = sni {
            assert!(name.len() <= 255, "a server name of {} bytes", name.len());
        }
        let mut more = data.to_vec();
        more.extend_from_slice(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x00]);
        assert_eq!(
            read_client_hello(&more),
            hello,
            "bytes after the ClientHello changed how it reads"
        );
    }
}

/// The policy the interceptor's fuzz target decides with: `GET` only, and
/// never under `/admin`, for the one inspected host `api.test`.
const INSPECTED_POLICY: &str = r#"
policy:
  egress:
    allow:
      - name: get-only
        when: host == "api.test" && method == "GET"
    deny:
      - name: no-admin
        when: path.startsWith("/admin")
"#;

/// `egress_inspected`: the requests inside an inspected tunnel, over
/// HTTP/1.1 (first byte even) or HTTP/2 (odd), the rest being what the
/// workload sends once its TLS is ended. Whatever the bytes, nothing
/// panics or hangs, and every request that reaches the upstream is one
/// the policy allows: a `GET`, for `api.test`, not under `/admin`.
pub fn egress_inspected(data: &[u8]) -> usize {
    use std::sync::{Arc, Mutex, OnceLock};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    static POLICY: OnceLock<Arc<cordon_policy::Policy>> = OnceLock::new();
    let Some((&mode, sent)) = data.split_first() else {
        return 0;
    };
    let h2 = mode & 1 == 1;
    let policy = POLICY
        .get_or_init(|| {
            Arc::new(
                cordon_policy::Policy::load_str("fuzz-policy.yaml", INSPECTED_POLICY)
                    .unwrap_or_else(|d| panic!("{}", d.render())),
            )
        })
        .clone();
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 0;
    };
    let wrong: Arc<Mutex<Vec<String>>> = Arc::default();
    let reached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = (wrong.clone(), reached.clone());
    rt.block_on(async move {
        let Ok(resolver) = crate::resolve::Resolver::new(
            crate::resolve::StaticHosts::default(),
            &crate::resolve::Dns::Off,
            std::time::Duration::from_secs(1),
        ) else {
            return;
        };
        let proxy = crate::Proxy::new(crate::ProxyConfig {
            policy,
            env: cordon_policy::Deployment {
                name: "fuzz".into(),
            },
            resolver: Arc::new(resolver),
            classifier: Arc::new(crate::classify::Classifier::with_own(vec![], vec![])),
            audit: Arc::new(crate::Audit::Memory(Mutex::default())),
            timeouts: crate::Timeouts {
                header: std::time::Duration::from_secs(2),
                ..crate::Timeouts::default()
            },
            max_connections: 4,
            audit_bounds: cordon_sandbox::AuditBounds::default(),
            upstreams: Arc::new(crate::tls::Upstreams::with_roots(vec![], None)),
        });
        let caller = Arc::new(crate::Caller {
            sandbox: "fuzz".into(),
            identity: cordon_policy::Identity {
                namespace: "fuzz".into(),
                name: "fuzz".into(),
                attested: false,
                labels: Default::default(),
            },
            allow: None,
            brokered: Vec::new(),
        });
        let (mut client, proxy_side) = tokio::io::duplex(64 * 1024);
        let (to_upstream, upstream_side) = tokio::io::duplex(64 * 1024);
        tokio::spawn(fuzz_upstream(upstream_side, h2, seen));
        let served = tokio::spawn(async move {
            let _ = proxy
                .serve_inspected_plain(caller, "api.test", proxy_side, to_upstream, h2)
                .await;
        });
        let _ = client.write_all(sent).await;
        // Everything here is in memory on this one thread: once a few
        // rounds of yielding bring no answer bytes, the proxy has done
        // what the input asks (HTTP/2 drops streams still in flight at
        // the client's end, so the end waits for that).
        let mut out = Vec::new();
        let mut quiet = 0;
        while quiet < 4 {
            for _ in 0..64 {
                tokio::task::yield_now().await;
            }
            let mut b = [0u8; 16 * 1024];
            match tokio::time::timeout(std::time::Duration::ZERO, client.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    out.extend_from_slice(&b[..n]);
                    quiet = 0;
                }
                Err(_) => quiet += 1,
            }
        }
        let _ = client.shutdown().await;
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_to_end(&mut out),
        )
        .await;
        served.abort();
    });
    let wrong = wrong.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        wrong.is_empty(),
        "refused requests reached the upstream: {wrong:?}"
    );
    reached.load(std::sync::atomic::Ordering::SeqCst)
}

/// The fuzz target's upstream: notes every request the policy would not
/// have let through, and answers each `200`.
type Seen = (
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

async fn fuzz_upstream(io: tokio::io::DuplexStream, h2: bool, (wrong, reached): Seen) {
    use http_body_util::Full;
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().host().map(str::to_string))
            .unwrap_or_default();
        reached.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let ok = req.method() == hyper::Method::GET
            && host == "api.test"
            && !req.uri().path().starts_with("/admin");
        if !ok {
            wrong
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{} {} {host}", req.method(), req.uri()));
        }
        async move {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        }
    });
    let io = hyper_util::rt::TokioIo::new(io);
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io, svc)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, svc)
            .await;
    }
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/egress_target` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_egress_target_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/egress_target");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::egress_target(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    #[test]
    fn the_egress_sni_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/egress_sni");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::egress_sni(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    /// What an HTTP/2 client sends for `reqs` (method, path), captured.
    fn h2_bytes(reqs: &[(&str, &str)]) -> Vec<u8> {
        use tokio::io::AsyncReadExt as _;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let (client, mut far) = tokio::io::duplex(1 << 20);
            let (send, conn) =
                hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
                    hyper_util::rt::TokioExecutor::new(),
                    hyper_util::rt::TokioIo::new(client),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            tokio::spawn(conn);
            for (m, p) in reqs {
                let mut send = send.clone();
                let r = hyper::Request::builder()
                    .method(*m)
                    .uri(format!("https://api.test{p}"))
                    .body(http_body_util::Empty::new())
                    .unwrap_or_else(|e| panic!("{e}"));
                tokio::spawn(async move { send.send_request(r).await });
            }
            let mut out = Vec::new();
            let _ = tokio::time::timeout(std::time::Duration::from_millis(300), async {
                let mut b = [0u8; 4096];
                loop {
                    match far.read(&mut b).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => out.extend_from_slice(&b[..n]),
                    }
                }
            })
            .await;
            out
        })
    }

    /// The seeds, and what each must let through: a `GET`, not a `POST`
    /// or anything under `/admin`, nor a request fronting another host.
    fn seeds() -> Vec<(&'static str, Vec<u8>, usize)> {
        let h1 = b"GET /v1/x?a=1 HTTP/1.1\r\nHost: api.test\r\n\r\nPOST /v1/x HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\nhiGET /admin HTTP/1.1\r\nHost: api.test\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n";
        let mut one = vec![0u8];
        one.extend_from_slice(h1);
        let mut two = vec![1u8];
        two.extend_from_slice(&h2_bytes(&[
            ("GET", "/v1/x"),
            ("POST", "/v1/x"),
            ("GET", "/admin/y"),
        ]));
        vec![("h1", one, 1), ("h2", two, 1)]
    }

    /// The seeds reach the upstream exactly as the policy says (so the
    /// target does exercise the path it claims to), and every input kept
    /// in `fuzz/corpus/egress_inspected` replays.
    #[test]
    fn the_egress_inspected_seeds_and_corpus_replay() {
        for (name, data, want) in seeds() {
            assert_eq!(super::egress_inspected(&data), want, "seed {name}");
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/egress_inspected");
        if std::env::var_os("CORDON_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            for (name, data, _) in seeds() {
                std::fs::write(dir.join(format!("seed-{name}")), data)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::egress_inspected(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
