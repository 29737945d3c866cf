//! The interceptor on real loopback sockets: a real HTTPS upstream with
//! its own CA (made here), the proxy inspecting its host, and a client
//! that trusts only the sandbox's CA the proxy made. Every case asserts
//! the status the client got and what reached the upstream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cordon_egress::audit::Audit;
use cordon_egress::classify::Classifier;
use cordon_egress::resolve::{Dns, Resolver, StaticHosts};
use cordon_egress::tls::Upstreams;
use cordon_egress::{Caller, Proxy, ProxyConfig, Timeouts};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{AuditBounds, EgressEntry};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const POLICY: &str = r#"
policy:
  egress:
    allow_ranges:
      - cidr: 127.0.0.0/8
        hosts: [api.test, other.test]
    allow:
      - name: api-get
        when: host == "api.test" && method == "GET"
      - name: other
        when: host == "other.test"
    deny:
      - name: no-admin
        when: host == "api.test" && path.startsWith("/admin")
      - name: no-debug-header
        when: host == "api.test" && "x-debug" in headers
      - name: no-debug-query
        when: host == "api.test" && "debug" in query
    max_response_bytes: 64KiB
  secret:
    allow:
      - name: key-to-models-only
        when: >-
          secret.name == "openai/key" && destination.host == "api.test" &&
          destination.header == "authorization" && destination.path.startsWith("/v1/")
"#;

/// The brokered secret of the tests: its value never reaches the sandbox.
const VALUE: &str = "sk-live-0123456789abcdef";
const PLACEHOLDER: &str = "cordon-secret-00112233445566778899aabbccddeeff";

/// The test's own CA and an upstream leaf for each name.
struct TestPki {
    ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn test_pki() -> TestPki {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "cordon test upstream CA");
    let cert = p.self_signed(&key).unwrap();
    TestPki {
        ca_pem: cert.pem(),
        issuer: rcgen::Issuer::new(p, key),
    }
}

fn leaf(pki: &TestPki, names: &[&str]) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let p = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .unwrap();
    let cert = p.signed_by(&key, &pki.issuer).unwrap();
    (
        vec![cert.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
}

/// What reached the upstream: one line per request, `METHOD path host`.
type Seen = Arc<Mutex<Vec<String>>>;

/// A loopback HTTPS upstream for `names`, speaking h2 and HTTP/1.1 as the
/// client's ALPN asks; it answers `hello METHOD PATH`.
async fn upstream(pki: &TestPki, names: &[&str]) -> (SocketAddr, Seen) {
    let (chain, key) = leaf(pki, names);
    let mut cfg = rustls::ServerConfig::builder_with_provider(cordon_egress::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = s2.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let svc = hyper::service::service_fn(
                    move |mut req: hyper::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            // A WebSocket-like upgrade: switched, then
                            // every byte echoed.
                            if req.headers().contains_key("upgrade") {
                                seen.lock()
                                    .unwrap()
                                    .push(format!("UPGRADE {}", req.uri().path()));
                                let on = hyper::upgrade::on(&mut req);
                                tokio::spawn(async move {
                                    let Ok(up) = on.await else { return };
                                    let (mut r, mut w) = tokio::io::split(TokioIo::new(up));
                                    let _ = tokio::io::copy(&mut r, &mut w).await;
                                });
                                let mut resp = hyper::Response::new(Full::new(Bytes::new()));
                                *resp.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
                                resp.headers_mut()
                                    .insert("upgrade", "websocket".parse().unwrap());
                                resp.headers_mut()
                                    .insert("connection", "upgrade".parse().unwrap());
                                return Ok::<_, std::convert::Infallible>(resp);
                            }
                            let host = req
                                .headers()
                                .get("host")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string)
                                .or_else(|| req.uri().authority().map(|a| a.to_string()))
                                .unwrap_or_default();
                            let auth = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            let line = format!(
                                "{} {} {} {:?} {}",
                                req.method(),
                                req.uri()
                                    .path_and_query()
                                    .map(|p| p.as_str())
                                    .unwrap_or("/"),
                                host,
                                req.version(),
                                auth
                            );
                            let body = format!("hello {} {}", req.method(), req.uri().path());
                            seen.lock().unwrap().push(line);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(body),
                            )))
                        }
                    },
                );
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, svc)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .with_upgrades()
                        .await;
                }
            });
        }
    });
    (addr, seen)
}

struct Setup {
    proxy: SocketAddr,
    ca_pem: String,
    audit: Arc<Audit>,
    policy: Arc<Policy>,
}

/// The proxy with `POLICY`, inspecting `inspect` (each with the test's
/// roots when `roots`), names resolving to loopback.
async fn proxy(inspect: &[&str], roots: Option<&str>, port: u16) -> Setup {
    proxy_brokering(inspect, roots, port, Vec::new()).await
}

async fn proxy_brokering(
    inspect: &[&str],
    roots: Option<&str>,
    port: u16,
    brokered: Vec<cordon_egress::BrokeredSecret>,
) -> Setup {
    // The policy names the inspected hosts (and the test's roots for
    // them) in its root layer, as a deployment would.
    let dir = tempfile::tempdir().unwrap();
    let entries: Vec<String> = inspect
        .iter()
        .map(|h| match roots {
            Some(_) => format!("{{host: {h}, ca: ./upstream-ca.pem}}"),
            None => h.to_string(),
        })
        .collect();
    if let Some(pem) = roots {
        std::fs::write(dir.path().join("upstream-ca.pem"), pem).unwrap();
    }
    let text = POLICY.replace(
        "  egress:\n",
        &format!("  egress:\n    inspect: [{}]\n", entries.join(", ")),
    );
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, text).unwrap();
    let policy: Arc<Policy> =
        Arc::new(Policy::load_file(&file).unwrap_or_else(|d| panic!("{}", d.render())));
    assert_eq!(policy.inspects_any(), !inspect.is_empty());
    let mut map = StaticHosts::default();
    for n in ["api.test", "other.test"] {
        map.insert(n, "127.0.0.1".parse().unwrap());
    }
    let resolver = Resolver::new(map, &Dns::Off, Duration::from_secs(1)).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let audit = Arc::new(Audit::Memory(Mutex::default()));
    let p = Proxy::new(ProxyConfig {
        policy: policy.clone(),
        env: Deployment {
            name: "test".into(),
        },
        resolver: Arc::new(resolver),
        classifier: Arc::new(Classifier::with_own(vec![], vec![addr])),
        audit: audit.clone(),
        timeouts: Timeouts {
            resolve: Duration::from_secs(1),
            connect: Duration::from_secs(2),
            hello: Duration::from_secs(2),
            header: Duration::from_secs(5),
        },
        max_connections: 64,
        audit_bounds: AuditBounds::default(),
        // "System" roots that vouch for no test upstream: only the
        // policy's own roots can.
        upstreams: Arc::new(Upstreams::with_roots(
            CertificateDer::pem_slice_iter(test_pki().ca_pem.as_bytes())
                .map(Result::unwrap)
                .collect(),
            None,
        )),
    });
    let caller = Caller {
        sandbox: "tenant/thread/agent".into(),
        identity: Identity {
            namespace: "team-a".into(),
            name: "bot".into(),
            attested: true,
            labels: Default::default(),
        },
        allow: Some(vec![
            EgressEntry::parse(&format!("api.test:{port}")).unwrap(),
            EgressEntry::parse(&format!("other.test:{port}")).unwrap(),
        ]),
        brokered,
    };
    let ca = p.sandbox_ca(&caller).unwrap();
    let ca_pem = ca
        .as_ref()
        .map(|c| c.cert_pem().to_string())
        .unwrap_or_default();
    tokio::spawn(p.clone().serve(l, Arc::new(caller), ca));
    Setup {
        proxy: addr,
        ca_pem,
        audit,
        policy,
    }
}

/// A TLS connection through the proxy to `host:port`, trusting only
/// `trust` (PEM), offering `alpn`.
async fn through(
    s: &Setup,
    host: &str,
    port: u16,
    trust: &str,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut tcp = TcpStream::connect(s.proxy).await.unwrap();
    tcp.write_all(
        format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut b).await.unwrap() == 0 {
            return Err(format!("proxy closed: {}", String::from_utf8_lossy(&head)));
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head);
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(trust.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(cordon_egress::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(host.to_string()).unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())
}

/// Requests on one connection: (status, body, x-cordon-denied) each.
async fn requests(
    tls: tokio_rustls::client::TlsStream<TcpStream>,
    reqs: Vec<hyper::Request<Full<Bytes>>>,
) -> Vec<(u16, String, Option<String>)> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let mut out = Vec::new();
    if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        for r in reqs {
            out.push(answer(send.send_request(r).await).await);
        }
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        for r in reqs {
            if send.ready().await.is_err() {
                out.push((0, "connection closed".into(), None));
                continue;
            }
            out.push(answer(send.send_request(r).await).await);
        }
    }
    out
}

async fn answer(
    r: Result<hyper::Response<hyper::body::Incoming>, hyper::Error>,
) -> (u16, String, Option<String>) {
    match r {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let denied = resp
                .headers()
                .get("x-cordon-denied")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            (status, String::from_utf8_lossy(&body).to_string(), denied)
        }
        Err(e) => (0, e.to_string(), None),
    }
}

fn req(method: &str, uri: &str, host: Option<&str>, h2: bool) -> hyper::Request<Full<Bytes>> {
    req_with(method, uri, host, h2, &[])
}

fn req_with(
    method: &str,
    uri: &str,
    host: Option<&str>,
    h2: bool,
    headers: &[(&str, &str)],
) -> hyper::Request<Full<Bytes>> {
    let mut b = hyper::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if h2 {
        b = b.version(hyper::Version::HTTP_2);
    }
    if let Some(h) = host {
        b = b.header("host", h);
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

/// Over HTTP/1.1 and HTTP/2 alike: GET passes, POST is refused by the
/// GET-only rule, `/admin` by the path rule, a fronted Host or authority
/// is refused; nothing refused reaches the upstream.
#[tokio::test]
async fn each_request_inside_an_inspected_tunnel_is_decided() {
    let pki = test_pki();
    let (up, seen) = upstream(&pki, &["api.test", "other.test"]).await;
    let port = up.port();
    let s = proxy(&["api.test"], Some(&pki.ca_pem), port).await;
    assert!(s.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let auth = format!("api.test:{port}");

    for h2 in [false, true] {
        seen.lock().unwrap().clear();
        let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
        let tls = through(&s, "api.test", port, &s.ca_pem, alpn)
            .await
            .unwrap();
        let (host, base) = if h2 {
            (None, format!("https://{auth}"))
        } else {
            (Some(auth.as_str()), String::new())
        };
        let got = requests(
            tls,
            vec![
                req("GET", &format!("{base}/v1/models?x=1"), host, h2),
                req("POST", &format!("{base}/v1/models"), host, h2),
                req("GET", &format!("{base}/admin/users"), host, h2),
                req_with(
                    "GET",
                    &format!("{base}/v1/a"),
                    host,
                    h2,
                    &[("X-Debug", "1")],
                ),
                req("GET", &format!("{base}/v1/a?debug=%31"), host, h2),
                req_with(
                    "GET",
                    &format!("{base}/v1/b"),
                    host,
                    h2,
                    &[("authorization", "Bearer not-for-the-log")],
                ),
            ],
        )
        .await;
        assert_eq!(got[0].0, 200, "h2={h2}: {got:?}");
        assert_eq!(got[0].1, "hello GET /v1/models");
        assert_eq!(
            got[1].0, 403,
            "POST under a GET-only rule, h2={h2}: {got:?}"
        );
        assert!(got[1].2.is_some(), "x-cordon-denied on a refusal: {got:?}");
        assert_eq!(got[2].0, 403, "a path rule, h2={h2}: {got:?}");
        assert!(
            got[2].1.contains("no-admin"),
            "the deciding rule is named: {got:?}"
        );
        assert_eq!(got[3].2.as_deref(), Some("rule=no-debug-header"), "{got:?}");
        assert_eq!(got[4].2.as_deref(), Some("rule=no-debug-query"), "{got:?}");
        assert_eq!(got[5].0, 200, "{got:?}");
        let body: serde_json::Value = serde_json::from_str(&got[1].1).unwrap();
        assert_eq!(body["surface"], "egress");
        assert!(
            body["fix"].as_str().unwrap().contains("allow rule"),
            "{body}"
        );
        let seen_now = seen.lock().unwrap().clone();
        assert_eq!(
            seen_now.len(),
            2,
            "only the allowed GETs reached upstream: {seen_now:?}"
        );
        assert!(
            seen_now[1].ends_with("Bearer not-for-the-log"),
            "{seen_now:?}"
        );
        assert!(
            seen_now[0].starts_with("GET /v1/models?x=1 "),
            "{seen_now:?}"
        );
        if h2 {
            assert!(
                seen_now[0].contains("HTTP/2.0"),
                "h2 end to end: {seen_now:?}"
            );
        } else {
            assert!(seen_now[0].contains("HTTP/1.1"), "{seen_now:?}");
        }
    }

    // Fronting: the tunnel and SNI say api.test, the request another host.
    seen.lock().unwrap().clear();
    let other = format!("other.test:{port}");
    let tls = through(&s, "api.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let got = requests(tls, vec![req("GET", "/", Some(&other), false)]).await;
    assert_eq!(got[0].0, 403, "a fronted Host: {got:?}");
    assert!(got[0].1.contains("fronting"), "{got:?}");
    let tls = through(&s, "api.test", port, &s.ca_pem, &[b"h2"])
        .await
        .unwrap();
    let got = requests(
        tls,
        vec![req("GET", &format!("https://{other}/"), None, true)],
    )
    .await;
    assert_eq!(got[0].0, 403, "a fronted :authority: {got:?}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing fronted reached upstream"
    );

    // The audit log has each inspected request with its method and path,
    // and each decision line replays (`cordon policy explain --facts`) to
    // the verdict the proxy reached: every policy-decided request, allowed
    // or refused by a rule.
    let lines = s.audit.lines();
    let policy = s.policy.clone();
    let mut replayed = 0;
    for line in lines
        .iter()
        .filter(|l| l.kind == "https" && !l.rules.is_empty())
    {
        let text = serde_json::to_string(line).unwrap();
        let back = cordon_egress::AuditLine::parse(&text).unwrap();
        let d = policy.decide(&back.request());
        assert_eq!(d.is_allowed(), line.verdict == "allow", "{text}");
        replayed += 1;
    }
    assert!(replayed >= 4, "{replayed} lines replayed");
    assert!(
        lines.iter().any(|l| l.kind == "https"
            && l.verdict == "deny"
            && l.facts.method.as_deref() == Some("POST")
            && l.facts.path.as_deref() == Some("/v1/models")),
        "the refused POST is audited with its method and path"
    );
    let text = lines
        .iter()
        .map(|l| serde_json::to_string(l).unwrap())
        .collect::<String>();
    assert!(
        text.contains("[redacted]"),
        "the credential header is named, its value not"
    );
    assert!(
        !text.contains("not-for-the-log"),
        "no credential value in the audit log"
    );
}

/// The upstream's certificate is verified: without the policy's roots for
/// the host (and no system root vouching for it) nothing is carried.
#[tokio::test]
async fn an_upstream_the_proxy_cannot_verify_is_refused() {
    let pki = test_pki();
    let (up, seen) = upstream(&pki, &["api.test"]).await;
    let port = up.port();
    let s = proxy(&["api.test"], None, port).await;
    let tls = through(&s, "api.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let got = requests(
        tls,
        vec![req("GET", "/", Some(&format!("api.test:{port}")), false)],
    )
    .await;
    assert_eq!(got[0].0, 502, "{got:?}");
    assert!(got[0].1.contains("failed TLS verification"), "{got:?}");
    assert!(seen.lock().unwrap().is_empty());
}

/// A host not inspected keeps the plain tunnel: the client talks TLS to
/// the upstream itself (and the sandbox's CA vouches for nothing there).
#[tokio::test]
async fn a_host_not_inspected_keeps_its_tunnel() {
    let pki = test_pki();
    let (up, seen) = upstream(&pki, &["other.test"]).await;
    let port = up.port();
    let s = proxy(&["api.test"], Some(&pki.ca_pem), port).await;
    assert!(
        through(&s, "other.test", port, &s.ca_pem, &[b"http/1.1"])
            .await
            .is_err(),
        "the sandbox's CA vouches for no host it does not inspect"
    );
    let tls = through(&s, "other.test", port, &pki.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let got = requests(
        tls,
        vec![req("GET", "/", Some(&format!("other.test:{port}")), false)],
    )
    .await;
    assert_eq!(got[0].0, 200, "{got:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// No two sandboxes share an authority.
#[tokio::test]
async fn two_sandboxes_get_two_authorities() {
    let a = proxy(&["api.test"], None, 443).await;
    let b = proxy(&["api.test"], None, 443).await;
    assert_ne!(a.ca_pem, b.ca_pem);
}

/// A brokered secret: the placeholder becomes the value only in the
/// `authorization` header of a request to `api.test` under `/v1/` (the
/// policy's secret rule); anywhere else — another header, another path,
/// another allowed host, a query string, a body, a tunnel's name — the
/// request is refused and audited, and the value is in no audit line and
/// no answer.
#[tokio::test]
async fn a_brokered_secret_goes_only_where_the_policy_lets_it() {
    let pki = test_pki();
    let (up, seen) = upstream(&pki, &["api.test", "other.test"]).await;
    let port = up.port();
    let s = proxy_brokering(
        &["api.test", "other.test"],
        Some(&pki.ca_pem),
        port,
        vec![cordon_egress::BrokeredSecret {
            name: "openai/key".into(),
            placeholder: PLACEHOLDER.into(),
            value: VALUE.as_bytes().to_vec(),
            to: vec!["api.test".into()],
        }],
    )
    .await;
    let bearer = format!("Bearer {PLACEHOLDER}");
    let auth = format!("api.test:{port}");
    let tls = through(&s, "api.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let got = requests(
        tls,
        vec![
            req_with(
                "GET",
                "/v1/models",
                Some(&auth),
                false,
                &[("authorization", &bearer)],
            ),
            req_with(
                "GET",
                "/v2/models",
                Some(&auth),
                false,
                &[("authorization", &bearer)],
            ),
            req_with(
                "GET",
                "/v1/models",
                Some(&auth),
                false,
                &[("x-api-key", PLACEHOLDER)],
            ),
            req(
                "GET",
                &format!("/v1/models?k={PLACEHOLDER}"),
                Some(&auth),
                false,
            ),
        ],
    )
    .await;
    assert_eq!(got[0].0, 200, "{got:?}");
    for (i, what) in [
        (1, "another path"),
        (2, "another header"),
        (3, "a query string"),
    ] {
        assert_eq!(got[i].0, 403, "{what}: {got:?}");
        assert!(got[i].1.contains("exfiltration"), "{what}: {got:?}");
    }
    // Another allowed, inspected host: in a header, and in a body.
    let other = format!("other.test:{port}");
    let tls = through(&s, "other.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let mut body_req = req("POST", "/upload", Some(&other), false);
    *body_req.body_mut() = Full::new(Bytes::from(format!("data={PLACEHOLDER}&x=1")));
    let got2 = requests(
        tls,
        vec![req_with(
            "GET",
            "/",
            Some(&other),
            false,
            &[("authorization", &bearer)],
        )],
    )
    .await;
    assert_eq!(got2[0].0, 403, "{got2:?}");
    let tls = through(&s, "other.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let got3 = requests(tls, vec![body_req]).await;
    assert_eq!(got3[0].0, 403, "a placeholder in a body: {got3:?}");
    // A tunnel named with the placeholder: refused before any lookup.
    let named = format!("{PLACEHOLDER}.api.test");
    let refused = through(&s, &named, port, &s.ca_pem, &[b"http/1.1"]).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("403")),
        "{:?}",
        refused.err()
    );

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "only the allowed use reached an upstream: {seen:?}"
    );
    assert!(
        seen[0].ends_with(&format!("Bearer {VALUE}")),
        "the upstream got the value: {seen:?}"
    );
    assert!(seen.iter().all(|l| !l.contains(PLACEHOLDER)));
    // The audit log names the secret, never its value.
    let text: String = s
        .audit
        .lines()
        .iter()
        .map(|l| serde_json::to_string(l).unwrap())
        .collect();
    assert!(!text.contains(VALUE), "the value is in the audit log");
    assert!(
        text.contains(r#""secrets":["openai/key"]"#),
        "the use is audited by name"
    );
    assert!(
        text.matches("exfiltration").count() >= 6,
        "each attempt is audited: {text}"
    );
    for answer in got.iter().chain(&got2).chain(&got3) {
        assert!(
            !answer.1.contains(VALUE),
            "an answer holds the value: {answer:?}"
        );
    }
}

/// Sends an upgrade request for `path` on `tls` and reads the answer's
/// head: its status line.
async fn upgrade(
    tls: &mut tokio_rustls::client::TlsStream<TcpStream>,
    auth: &str,
    path: &str,
) -> String {
    tls.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {auth}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tls.read(&mut b).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).to_string()
}

/// A WebSocket upgrade inside an inspected tunnel is decided at its
/// request: one the policy allows is switched and carried both ways (the
/// upstream echoes); one it denies (`/admin`) is refused with the 403 an
/// agent can act on, and never reaches the upstream.
#[tokio::test]
async fn an_upgrade_is_decided_at_its_request_and_carried_when_allowed() {
    let pki = test_pki();
    let (up, seen) = upstream(&pki, &["api.test"]).await;
    let port = up.port();
    let s = proxy(&["api.test"], Some(&pki.ca_pem), port).await;
    let auth = format!("api.test:{port}");

    let mut tls = through(&s, "api.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let head = upgrade(&mut tls, &auth, "/ws").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // What a WebSocket client checks of the switch: both headers.
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(lower.contains("connection: upgrade"), "{head}");
    for msg in [&b"ping"[..], &b"a longer frame of bytes"[..]] {
        tls.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_exact(&mut back))
            .await
            .expect("the echo came back")
            .unwrap();
        assert_eq!(back, msg);
    }
    drop(tls);

    let mut tls = through(&s, "api.test", port, &s.ca_pem, &[b"http/1.1"])
        .await
        .unwrap();
    let head = upgrade(&mut tls, &auth, "/admin/ws").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("x-cordon-denied: rule=no-admin"), "{head}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, ["UPGRADE /ws"], "only the allowed upgrade went up");
}
