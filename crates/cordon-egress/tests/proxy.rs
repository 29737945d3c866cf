//! The proxy on real loopback sockets: a real upstream that counts the
//! connections it gets, a real DNS server (UDP, on loopback) that counts
//! the queries it gets, and the proxy between. Every case asserts the
//! status, what reached the upstream and what reached the resolver.
//! Nothing leaves loopback: names resolve only through the test's own
//! static map or its own DNS server, and only `allow_ranges` in the test
//! policy opens loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_egress::audit::Audit;
use cordon_egress::classify::Classifier;
use cordon_egress::resolve::{Dns, Resolver, StaticHosts};
use cordon_egress::{Caller, EgressChange, LiveEgress, Proxy, ProxyConfig, Timeouts};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{AuditBounds, EgressEntry};
use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA, CNAME};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

const POLICY: &str = r#"
policy:
  egress:
    allow_ranges:
      - cidr: 127.0.0.0/8
        hosts: [ok.test, big.test, mixed.test, embedded.test, flip.test, dns-ok.test, redirect.test]
      - cidr: ::/0
        hosts: [embedded.test]
    allow:
      - name: test-hosts
        when: host.endsWith(".test") || host == "169.254.169.254" || host == "127.0.0.1"
    deny:
      - name: no-admin
        when: scheme == "http" && path.startsWith("/admin")
    max_response_bytes: 4KiB
"#;

// ---- upstream ------------------------------------------------------------

/// A loopback upstream that counts connections. It answers HTTP requests
/// with `body` (and `location`, if set), or, when the first byte is a TLS
/// handshake, echoes what it read back and then sends `body`.
struct Upstream {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    got: Arc<Mutex<Vec<u8>>>,
}

async fn upstream(body: Vec<u8>, location: Option<String>) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(Mutex::new(Vec::new()));
    let (c, g) = (conns.clone(), got.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            let location = location.clone();
            let g = g.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut seen = Vec::new();
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    if seen.first() == Some(&22) {
                        g.lock().unwrap().extend_from_slice(&seen);
                        let _ = s.write_all(b"HELLO-BACK:").await;
                        let _ = s.write_all(&body).await;
                        let _ = s.shutdown().await;
                        return;
                    }
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                g.lock().unwrap().extend_from_slice(&seen);
                let head = match &location {
                    Some(l) => format!("HTTP/1.1 302 Found\r\nLocation: {l}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()),
                    None => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()),
                };
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Upstream { addr, conns, got }
}

// ---- DNS -----------------------------------------------------------------

#[derive(Clone)]
enum Answer {
    Ips(Vec<IpAddr>),
    /// Answers the first query with the first list, later ones with the second.
    Flip(Vec<IpAddr>, Vec<IpAddr>),
    Cname(&'static str, Vec<IpAddr>),
    NxDomain,
    Silent,
}

struct FakeDns {
    addr: SocketAddr,
    /// (name, type) -> queries seen.
    queries: Arc<Mutex<HashMap<(String, RecordType), usize>>>,
}

impl FakeDns {
    fn count(&self, name: &str) -> usize {
        self.queries
            .lock()
            .unwrap()
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, c)| *c)
            .sum()
    }
    fn count_of(&self, name: &str, t: RecordType) -> usize {
        *self
            .queries
            .lock()
            .unwrap()
            .get(&(name.to_string(), t))
            .unwrap_or(&0)
    }
}

async fn fake_dns(zone: HashMap<&'static str, Answer>) -> FakeDns {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let queries = Arc::new(Mutex::new(HashMap::new()));
    let q2 = queries.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let Ok(msg) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let Some(q) = msg.queries().first().cloned() else {
                continue;
            };
            let name = q.name().to_ascii().trim_end_matches('.').to_string();
            let seen = {
                let mut m = q2.lock().unwrap();
                let c = m.entry((name.clone(), q.query_type())).or_insert(0);
                *c += 1;
                *c
            };
            let mut resp = Message::new();
            resp.set_id(msg.id());
            resp.set_message_type(MessageType::Response);
            resp.set_recursion_desired(true);
            resp.set_recursion_available(true);
            resp.add_query(q.clone());
            let fqdn = q.name().clone();
            let add_ips = |resp: &mut Message, owner: &Name, ips: &[IpAddr]| {
                for ip in ips {
                    let rd = match (ip, q.query_type()) {
                        (IpAddr::V4(a), RecordType::A) => RData::A(A(*a)),
                        (IpAddr::V6(a), RecordType::AAAA) => RData::AAAA(AAAA(*a)),
                        _ => continue,
                    };
                    resp.add_answer(Record::from_rdata(owner.clone(), 0, rd));
                }
            };
            match zone.get(name.as_str()) {
                None | Some(Answer::NxDomain) => {
                    resp.set_response_code(ResponseCode::NXDomain);
                }
                Some(Answer::Silent) => continue,
                Some(Answer::Ips(ips)) => add_ips(&mut resp, &fqdn, ips),
                Some(Answer::Flip(first, later)) => {
                    add_ips(&mut resp, &fqdn, if seen == 1 { first } else { later })
                }
                Some(Answer::Cname(target, ips)) => {
                    let t = Name::from_ascii(format!("{target}.")).unwrap();
                    resp.add_answer(Record::from_rdata(
                        fqdn.clone(),
                        0,
                        RData::CNAME(CNAME(t.clone())),
                    ));
                    add_ips(&mut resp, &t, ips);
                }
            }
            let _ = sock.send_to(&resp.to_vec().unwrap(), from).await;
        }
    });
    FakeDns { addr, queries }
}

// ---- the proxy ------------------------------------------------------------

struct Setup {
    proxy: SocketAddr,
    audit: Arc<Audit>,
    /// The channel's accept loop; aborting it stops the channel.
    task: tokio::task::JoinHandle<()>,
    /// The proxy and the channel's caller.
    served: (Arc<Proxy>, Caller),
    /// The channel's allowlist, replaceable while it serves.
    live: Arc<LiveEgress>,
}

async fn proxy(hosts: &[(&str, &str)], dns: Dns, allow: Option<&[&str]>) -> Setup {
    proxy_max(hosts, dns, allow, 64).await
}

async fn proxy_max(
    hosts: &[(&str, &str)],
    dns: Dns,
    allow: Option<&[&str]>,
    max_connections: usize,
) -> Setup {
    let audit = Arc::new(Audit::Memory(Mutex::new(Vec::new())));
    proxy_with(hosts, dns, allow, max_connections, audit).await
}

async fn proxy_with(
    hosts: &[(&str, &str)],
    dns: Dns,
    allow: Option<&[&str]>,
    max_connections: usize,
    audit: Arc<Audit>,
) -> Setup {
    proxy_bounded(
        hosts,
        dns,
        allow,
        max_connections,
        audit,
        AuditBounds::default(),
    )
    .await
}

async fn proxy_bounded(
    hosts: &[(&str, &str)],
    dns: Dns,
    allow: Option<&[&str]>,
    max_connections: usize,
    audit: Arc<Audit>,
    audit_bounds: AuditBounds,
) -> Setup {
    let policy = Arc::new(Policy::load_str("test-policy.yaml", POLICY).unwrap());
    let mut map = StaticHosts::default();
    for (n, ip) in hosts {
        map.insert(n, ip.parse().unwrap());
    }
    let resolver = Resolver::new(map, &dns, Duration::from_secs(1)).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let p = Proxy::new(ProxyConfig {
        policy,
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
        max_connections,
        audit_bounds,
        upstreams: Arc::new(cordon_egress::tls::Upstreams::with_roots(vec![], None)),
    });
    let caller = Caller {
        sandbox: "tenant/thread/agent".into(),
        identity: Identity {
            namespace: "team-a".into(),
            name: "bot".into(),
            attested: true,
            labels: Default::default(),
        },
        allow: allow.map(|l| l.iter().map(|e| EgressEntry::parse(e).unwrap()).collect()),
        brokered: Vec::new(),
    };
    let live = LiveEgress::new(Arc::new(caller.clone()));
    let task = tokio::spawn(p.clone().serve_live(l, live.clone(), None));
    Setup {
        proxy: addr,
        audit,
        task,
        served: (p, caller),
        live,
    }
}

impl Setup {
    /// Another sandbox's channel on the same proxy (and audit log).
    async fn another_sandbox(&self, name: &str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut caller = self.served.1.clone();
        caller.sandbox = name.to_string();
        tokio::spawn(self.served.0.clone().serve(l, Arc::new(caller), None));
        addr
    }
}

/// Sends `req` and returns (status, whole response as text).
async fn send(proxy: SocketAddr, req: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn get(url: &str, host: &str) -> String {
    format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// A TLS ClientHello record naming `sni` (or none).
fn client_hello(sni: Option<&str>) -> Vec<u8> {
    let mut ext = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        let mut list = vec![0u8];
        list.extend_from_slice(&(n.len() as u16).to_be_bytes());
        list.extend_from_slice(n);
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        ext.extend_from_slice(&0u16.to_be_bytes());
        ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
        ext.extend_from_slice(&data);
    }
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1u8];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22u8, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// CONNECT, then (if 200) send `first`; returns (status, bytes after the head).
async fn tunnel(proxy: SocketAddr, target: &str, first: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
            Ok(Ok(1)) => head.push(b[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut rest = Vec::new();
    if status == 200 {
        let _ = s.write_all(first).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    } else {
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    }
    (status, rest)
}

fn last_reason(a: &Audit) -> String {
    a.lines()
        .last()
        .map(|l| l.reason.clone())
        .unwrap_or_default()
}

// ---- behaviour -------------------------------------------------------------

#[tokio::test]
async fn plain_http_to_an_allowed_host_works_and_is_audited() {
    let up = upstream(b"hello".to_vec(), None).await;
    let port = up.addr.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://ok.test:{port}/x"),
            &format!("ok.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("hello"), "{text}");
    assert_eq!(up.conns.load(Ordering::SeqCst), 1);
    let got = String::from_utf8_lossy(&up.got.lock().unwrap()).to_string();
    assert!(
        got.starts_with("GET /x HTTP/1.1\r\n"),
        "upstream got origin-form: {got}"
    );
    // The allow line, written before anything was dialled, then the
    // answer's status on an end line.
    let lines = s.audit.lines();
    let verdicts: Vec<(&str, u16)> = lines
        .iter()
        .map(|l| (l.verdict.as_str(), l.status))
        .collect();
    assert_eq!(verdicts, [("allow", 0), ("end", 200)]);
    let line = lines[0].clone();
    assert_eq!(line.ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(line.sandbox, "tenant/thread/agent");
    assert_eq!(line.identity.namespace, "team-a");
    assert_eq!(line.rules, vec!["test-policy.yaml:11".to_string()]);
}

#[tokio::test]
async fn a_name_outside_the_allowlist_is_refused_before_any_dns_query() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    let dns = fake_dns(HashMap::from([(
        "other.test",
        Answer::Ips(vec![up.addr.ip()]),
    )]))
    .await;
    let s = proxy(
        &[],
        Dns::Servers(vec![dns.addr]),
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://other.test:{port}/"),
            &format!("other.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("allowlist"), "{text}");
    assert_eq!(dns.count("other.test"), 0);
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
    // The wrong port of an allowed name is refused as well.
    let (status, _) = send(
        s.proxy,
        &get(
            &format!("http://ok.test:{}/", port + 1),
            &format!("ok.test:{}", port + 1),
        ),
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_policy_deny_names_its_rule_and_nothing_is_resolved() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    let dns = fake_dns(HashMap::from([(
        "dns-ok.test",
        Answer::Ips(vec!["127.0.0.1".parse().unwrap()]),
    )]))
    .await;
    let s = proxy(
        &[],
        Dns::Servers(vec![dns.addr]),
        Some(&[&format!("dns-ok.test:{port}")]),
    )
    .await;
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://dns-ok.test:{port}/admin/x"),
            &format!("dns-ok.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("test-policy.yaml:14"), "{text}");
    assert_eq!(dns.count("dns-ok.test"), 0);
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
    let line = s.audit.lines().pop().unwrap();
    assert_eq!(line.rules, vec!["test-policy.yaml:14".to_string()]);
    assert_eq!(line.facts.path.as_deref(), Some("/admin/x"));
    // And the same name's other paths go through, with one lookup each.
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://dns-ok.test:{port}/fine"),
            &format!("dns-ok.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(dns.count_of("dns-ok.test", RecordType::A), 1);
    assert_eq!(up.conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_an_internal_target_is_refused_when_followed() {
    let up = upstream(
        b"moved".to_vec(),
        Some("http://169.254.169.254/latest/meta-data/".into()),
    )
    .await;
    let port = up.addr.port();
    let s = proxy(
        &[
            ("redirect.test", "127.0.0.1"),
            ("internal.test", "10.0.0.7"),
        ],
        Dns::Off,
        Some(&[
            &format!("redirect.test:{port}"),
            &format!("internal.test:{port}"),
        ]),
    )
    .await;
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://redirect.test:{port}/"),
            &format!("redirect.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 302, "{text}");
    // The client follows: the metadata address is refused.
    let (status, _) = send(
        s.proxy,
        &get(
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254",
        ),
    )
    .await;
    assert_eq!(status, 403);
    // A name that resolves into private space is refused too.
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://internal.test:{port}/"),
            &format!("internal.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    // The workload is not told the address; the host's log is.
    assert!(!text.contains("10.0.0.7"), "{text}");
    assert!(last_reason(&s.audit).contains("10.0.0.7"));
    assert_eq!(up.conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_response_cap_is_counted_on_the_transport() {
    let big = vec![b'z'; 64 * 1024];
    let up = upstream(big.clone(), None).await;
    let port = up.addr.port();
    let s = proxy(
        &[("big.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("big.test:{port}")]),
    )
    .await;
    let (_, text) = send(
        s.proxy,
        &get(
            &format!("http://big.test:{port}/"),
            &format!("big.test:{port}"),
        ),
    )
    .await;
    assert!(
        text.len() < 8 * 1024,
        "got {} bytes past a 4 KiB cap",
        text.len()
    );
    // Tunnels too: the upstream answers a ClientHello with 64 KiB.
    let (status, rest) = tunnel(
        s.proxy,
        &format!("big.test:{port}"),
        &client_hello(Some("big.test")),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        rest.len() <= 4096,
        "tunnel carried {} bytes past a 4 KiB cap",
        rest.len()
    );
    assert!(!rest.is_empty(), "the tunnel carried nothing at all");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        s.audit
            .lines()
            .iter()
            .any(|l| l.verdict == "end" && l.reason.contains("cap")),
        "{:?}",
        s.audit.lines()
    );
    // The tunnel's end line counts what it carried each way: the
    // ClientHello up, and down exactly what reached the client.
    let hello = client_hello(Some("big.test")).len() as u64;
    let end = s
        .audit
        .lines()
        .into_iter()
        .find(|l| l.verdict == "end" && l.kind == "connect")
        .expect("an end line");
    assert_eq!(end.bytes_up, Some(hello), "{end:?}");
    assert_eq!(end.bytes_down, Some(rest.len() as u64), "{end:?}");
}

#[tokio::test]
async fn a_tunnel_carries_tls_for_its_own_host_only() {
    let up = upstream(b"secret".to_vec(), None).await;
    let port = up.addr.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let hello = client_hello(Some("ok.test"));
    let (status, rest) = tunnel(s.proxy, &format!("ok.test:{port}"), &hello).await;
    assert_eq!(status, 200);
    assert!(
        rest.starts_with(b"HELLO-BACK:"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(up.got.lock().unwrap().as_slice(), hello.as_slice());
    assert_eq!(up.conns.load(Ordering::SeqCst), 1);

    for (first, why) in [
        (client_hello(Some("evil.test")), "names `evil.test`"),
        (client_hello(None), "no server"),
        (
            b"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n".to_vec(),
            "does not open with TLS",
        ),
        (
            format!("CONNECT ok.test:{port} HTTP/1.1\r\n\r\n").into_bytes(),
            "CONNECT inside a tunnel",
        ),
    ] {
        let (status, rest) = tunnel(s.proxy, &format!("ok.test:{port}"), &first).await;
        assert_eq!(status, 200);
        assert!(rest.is_empty(), "{why}: the tunnel carried {rest:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            last_reason(&s.audit).contains(why),
            "{why}: {}",
            last_reason(&s.audit)
        );
    }
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        1,
        "a refused tunnel dialled upstream"
    );
}

#[tokio::test]
async fn malformed_requests_are_400_and_reach_nothing() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    let dns = fake_dns(HashMap::new()).await;
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Servers(vec![dns.addr]),
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let cases = [
        format!("GET /origin-form HTTP/1.1\r\nHost: ok.test:{port}\r\n\r\n"),
        format!("GET https://ok.test:{port}/ HTTP/1.1\r\nHost: ok.test:{port}\r\n\r\n"),
        format!("GET http://ok.test:{port}/ HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n"),
        format!("GET http://user@ok.test:{port}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://0x7f.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://2130706433:{port}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://ok.test:{port}/a/../admin HTTP/1.1\r\n\r\n"),
        "CONNECT ok.test HTTP/1.1\r\nHost: ok.test\r\n\r\n".to_string(),
        format!("CONNECT ok.test:{port} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"),
        format!("CONNECT http://ok.test:{port}/ HTTP/1.1\r\n\r\n"),
    ];
    for req in &cases {
        let (status, text) = send(s.proxy, req).await;
        assert_eq!(status, 400, "{req:?} -> {text}");
    }
    // A URL longer than an audit line holds is refused whole.
    let long = format!(
        "GET http://ok.test:{port}/{} HTTP/1.1\r\n\r\n",
        "a".repeat(9000)
    );
    let (status, text) = send(s.proxy, &long).await;
    assert_eq!(status, 414, "{text}");
    assert!(
        s.audit.lines().iter().all(|l| l.target.len() <= 300),
        "an audit line holds the long URL"
    );
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
    assert_eq!(dns.queries.lock().unwrap().len(), 0);
}

#[tokio::test]
async fn literal_addresses_are_classified_without_an_allowlist_too() {
    let up = upstream(b"x".to_vec(), None).await;
    // Policy alone decides (no allowlist): ports 443/80 only, and every
    // literal here is special-purpose or embeds one.
    let s = proxy(&[], Dns::Off, None).await;
    for t in [
        "169.254.169.254:443",
        "[::1]:443",
        "[::ffff:127.0.0.1]:443",
        "10.0.0.1:443",
        "[fd00:ec2::254]:443",
    ] {
        let (status, _) = tunnel(s.proxy, t, b"").await;
        assert_eq!(status, 403, "{t}");
    }
    // Another port than 443 is refused before anything else.
    let (status, _) = tunnel(s.proxy, &format!("127.0.0.1:{}", up.addr.port()), b"").await;
    assert_eq!(status, 403);
    assert!(
        last_reason(&s.audit).contains("port"),
        "{}",
        last_reason(&s.audit)
    );
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
}

// ---- hostile DNS ------------------------------------------------------------

#[tokio::test]
async fn hostile_dns_answers_are_refused() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let dns = fake_dns(HashMap::from([
        // Rebinding: a public-looking name answering loopback, not opened for it.
        ("rebind.test", Answer::Ips(vec![lo])),
        // Mixed: one allowed answer and one private one.
        (
            "mixed.test",
            Answer::Ips(vec![lo, "10.1.2.3".parse().unwrap()]),
        ),
        // AAAA embedding IPv4 loopback (and no A).
        (
            "embedded.test",
            Answer::Ips(vec!["::ffff:127.0.0.1".parse().unwrap()]),
        ),
        // CNAME to a name that answers the metadata address.
        (
            "cname.test",
            Answer::Cname("meta.test", vec!["169.254.169.254".parse().unwrap()]),
        ),
        ("nx.test", Answer::NxDomain),
        ("silent.test", Answer::Silent),
    ]))
    .await;
    let names = [
        "rebind.test",
        "mixed.test",
        "embedded.test",
        "cname.test",
        "nx.test",
        "silent.test",
    ];
    let allow: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let s = proxy(&[], Dns::Servers(vec![dns.addr]), Some(&allow)).await;
    for (name, why) in [
        ("rebind.test", "127.0.0.1"),
        ("mixed.test", "10.1.2.3"),
        ("embedded.test", "::ffff:127.0.0.1"),
        ("cname.test", "169.254.169.254"),
        ("nx.test", "does not exist"),
        ("silent.test", "timed out"),
    ] {
        let started = std::time::Instant::now();
        let (status, text) = send(
            s.proxy,
            &get(&format!("http://{name}:{port}/"), &format!("{name}:{port}")),
        )
        .await;
        assert_eq!(status, 403, "{name}: {text}");
        // The workload is told the name was refused, never what it
        // resolved to; the host's audit line says.
        assert!(last_reason(&s.audit).contains(why), "{name}: {text}");
        if why.contains(['.', ':']) {
            assert!(!text.contains(why), "{name}: {text}");
        } else {
            assert!(text.contains(why), "{name}: {text}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{name} took {:?}",
            started.elapsed()
        );
        assert!(dns.count(name) >= 1, "{name} never reached the resolver");
    }
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_answer_that_flips_is_asked_once_and_the_checked_address_dialled() {
    let up = upstream(b"pinned".to_vec(), None).await;
    let port = up.addr.port();
    let dns = fake_dns(HashMap::from([(
        "flip.test",
        Answer::Flip(
            vec!["127.0.0.1".parse().unwrap()],
            vec!["10.9.9.9".parse().unwrap()],
        ),
    )]))
    .await;
    let s = proxy(
        &[],
        Dns::Servers(vec![dns.addr]),
        Some(&[&format!("flip.test:{port}")]),
    )
    .await;
    let (status, text) = send(
        s.proxy,
        &get(
            &format!("http://flip.test:{port}/"),
            &format!("flip.test:{port}"),
        ),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("pinned"));
    assert_eq!(
        dns.count_of("flip.test", RecordType::A),
        1,
        "one lookup per request"
    );
    assert_eq!(up.conns.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.audit.lines().pop().unwrap().ip.as_deref(),
        Some("127.0.0.1")
    );
}

#[tokio::test]
async fn an_audit_line_replays_to_the_same_verdict() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let policy = Policy::load_str("test-policy.yaml", POLICY).unwrap();
    for path in ["/fine", "/admin"] {
        send(
            s.proxy,
            &get(
                &format!("http://ok.test:{port}{path}"),
                &format!("ok.test:{port}"),
            ),
        )
        .await;
    }
    // Every line replays: an allow (and the end after it) to allow, a
    // deny to deny.
    let lines = s.audit.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in lines {
        let text = serde_json::to_string(&line).unwrap();
        let back = cordon_egress::AuditLine::parse(&text).unwrap();
        let d = policy.decide(&back.request());
        assert_eq!(d.is_allowed(), line.verdict != "deny", "{text}");
    }
}

#[tokio::test]
async fn allowlist_names_match_after_normalisation_and_never_by_suffix() {
    let port = 8080;
    // Every name answers NXDOMAIN: a query shows the name passed the
    // allowlist; no query shows it was refused before any lookup.
    let dns = fake_dns(HashMap::new()).await;
    let s = proxy(
        &[],
        Dns::Servers(vec![dns.addr]),
        Some(&[
            &format!("*.example.test:{port}"),
            &format!("api.other.test:{port}"),
        ]),
    )
    .await;
    for (host, passes) in [
        ("sub.example.test", true),
        ("SUB.Example.TEST.", true),
        ("deep.sub.example.test", true),
        ("example.test", false),               // the apex is not `*.`
        ("sub.example.test.evil.test", false), // suffix confusion
        ("evilexample.test", false),
        ("api.other.test", true),
        ("API.OTHER.TEST", true),
        ("x.api.other.test", false), // an exact entry has no subdomains
        ("other.test", false),
    ] {
        let before: usize = dns.queries.lock().unwrap().values().sum();
        let (status, text) = send(
            s.proxy,
            &get(&format!("http://{host}:{port}/"), &format!("{host}:{port}")),
        )
        .await;
        assert_eq!(status, 403, "{host}: {text}");
        let after: usize = dns.queries.lock().unwrap().values().sum();
        if passes {
            assert!(after > before, "{host} never reached the resolver: {text}");
            assert!(text.contains("does not exist"), "{host}: {text}");
        } else {
            assert_eq!(after, before, "{host} reached the resolver");
            assert!(text.contains("allowlist"), "{host}: {text}");
        }
    }
    // What reached the resolver is the canonical name, never the spelling.
    assert!(dns.count("sub.example.test") >= 2);
    assert_eq!(dns.count("SUB.Example.TEST"), 0);
}

/// An upstream that keeps connections alive and answers every request on
/// one with `body`; counts connections and requests.
async fn keepalive_upstream(
    body: &'static [u8],
) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let reqs = Arc::new(AtomicUsize::new(0));
    let (c, q) = (conns.clone(), reqs.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let q = q.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        q.fetch_add(1, Ordering::SeqCst);
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        if s.write_all(head.as_bytes()).await.is_err()
                            || s.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    (addr, conns, reqs)
}

/// Reads one response with a Content-Length body from `s`; returns (status, body).
async fn read_response(s: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            return (0, Vec::new());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (status, body)
}

#[tokio::test]
async fn a_kept_upstream_connection_serves_only_requests_decided_for_it() {
    let (up, conns, reqs) = keepalive_upstream(b"kept").await;
    let port = up.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1"), ("dns-ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}"), &format!("dns-ok.test:{port}")]),
    )
    .await;
    let mut c = TcpStream::connect(s.proxy).await.unwrap();
    let req = |host: &str, path: &str| {
        format!("GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
    };
    for _ in 0..3 {
        c.write_all(req("ok.test", "/a").as_bytes()).await.unwrap();
        assert_eq!(read_response(&mut c).await, (200, b"kept".to_vec()));
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "one upstream connection for three requests"
    );
    // Each request is still decided in full: one the policy denies is
    // refused on the same client connection, and never reaches upstream.
    c.write_all(req("ok.test", "/admin/x").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut c).await.0, 403);
    assert_eq!(reqs.load(Ordering::SeqCst), 3);
    // Another allowed name at the same address may use it too.
    let mut c = TcpStream::connect(s.proxy).await.unwrap();
    c.write_all(req("ok.test", "/a").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut c).await.0, 200);
    c.write_all(req("dns-ok.test", "/b").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut c).await.0, 200);
    assert_eq!(reqs.load(Ordering::SeqCst), 5);
    let allowed = s
        .audit
        .lines()
        .iter()
        .filter(|l| l.verdict == "allow")
        .count();
    assert_eq!(allowed, 5, "every request has its own audit line");
}

/// An upstream that answers a ClientHello with one byte and then holds the
/// connection open, silent.
async fn holding_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if s.read(&mut buf).await.unwrap_or(0) > 0 {
                    let _ = s.write_all(b"X").await;
                }
                // Hold until the other side closes.
                while s.read(&mut buf).await.unwrap_or(0) > 0 {}
            });
        }
    });
    addr
}

/// Opens a tunnel, sends a ClientHello, reads the upstream's one byte.
async fn open_tunnel(proxy: SocketAddr, target: &str, sni: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "the proxy closed before its answer"
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s.write_all(&client_hello(Some(sni))).await.unwrap();
    let mut x = [0u8; 1];
    s.read_exact(&mut x).await.unwrap();
    assert_eq!(&x, b"X");
    s
}

#[tokio::test]
async fn stopping_a_channel_closes_its_open_tunnels() {
    let up = holding_upstream().await;
    let port = up.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let mut t = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
    // Open, and silent: a read waits.
    let mut b = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), t.read(&mut b))
            .await
            .is_err()
    );
    s.task.abort();
    let ended = tokio::time::timeout(Duration::from_secs(2), t.read(&mut b)).await;
    assert!(
        matches!(ended, Ok(Ok(0)) | Ok(Err(_))),
        "the tunnel outlived its channel: {ended:?}"
    );
}

#[tokio::test]
async fn tunnels_count_against_the_channels_connections() {
    let up = holding_upstream().await;
    let port = up.port();
    let s = proxy_max(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
        2,
    )
    .await;
    let first = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
    let _second = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
    // A third waits: the two tunnels hold both places.
    let addr = s.proxy;
    let third =
        tokio::spawn(async move { open_tunnel(addr, &format!("ok.test:{port}"), "ok.test").await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served past the bound"
    );
    drop(first);
    let third = tokio::time::timeout(Duration::from_secs(3), third).await;
    assert!(
        matches!(third, Ok(Ok(_))),
        "the third was not served once a place was free"
    );
}

#[tokio::test]
async fn nothing_reaches_upstream_before_its_audit_line_is_written() {
    let up = upstream(b"secret".to_vec(), None).await;
    let port = up.addr.port();
    let allow = format!("ok.test:{port}");
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let dns = fake_dns(HashMap::from([("dns-ok.test", Answer::Ips(vec![lo]))])).await;
    let dns_allow = format!("dns-ok.test:{port}");
    // Writes to /dev/full fail (ENOSPC): every audit line is lost.
    let full = || Arc::new(Audit::open(std::path::Path::new("/dev/full")).unwrap());
    let s = proxy_with(
        &[("ok.test", "127.0.0.1")],
        Dns::Servers(vec![dns.addr]),
        Some(&[&allow, &dns_allow]),
        64,
        full(),
    )
    .await;
    // A POST with a body: neither the connection nor a byte of it may
    // reach upstream.
    let body = "exfiltrated=yes";
    let post = format!(
        "POST http://{allow}/x HTTP/1.1\r\nHost: {allow}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, text) = send(s.proxy, &post).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("audit log"), "{text}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        0,
        "upstream was dialled before the request's audit line was written"
    );
    assert!(up.got.lock().unwrap().is_empty());
    // Once a line has failed, nothing is looked up either until one is
    // written again: DNS carries the name.
    let (status, text) = send(s.proxy, &get(&format!("http://{dns_allow}/"), &dns_allow)).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        dns.count("dns-ok.test"),
        0,
        "a name was looked up unrecorded"
    );
    // A tunnel (the first request of a fresh proxy): the TCP connect
    // waits for its line too.
    let t = proxy_with(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&allow]),
        64,
        full(),
    )
    .await;
    let (status, rest) = tunnel(t.proxy, &allow, &client_hello(Some("ok.test"))).await;
    assert_eq!(status, 200);
    assert!(rest.is_empty(), "the tunnel carried {rest:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        0,
        "upstream was dialled before the tunnel's audit line was written"
    );
    // The same requests with a log that takes lines are carried, each
    // line before what it records.
    let ok = proxy(&[("ok.test", "127.0.0.1")], Dns::Off, Some(&[&allow])).await;
    let (status, text) = send(ok.proxy, &post).await;
    assert_eq!(status, 200, "{text}");
    assert!(String::from_utf8_lossy(&up.got.lock().unwrap()).contains(body));
    let (status, rest) = tunnel(ok.proxy, &allow, &client_hello(Some("ok.test"))).await;
    assert_eq!(status, 200);
    assert!(rest.starts_with(b"HELLO-BACK:"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen: Vec<(String, String, u16)> = ok
        .audit
        .lines()
        .into_iter()
        .map(|l| (l.kind, l.verdict, l.status))
        .collect();
    let want = [
        ("http", "allow", 0),
        ("http", "end", 200),
        ("connect", "allow", 200),
        ("connect", "end", 200),
    ];
    let want: Vec<(String, String, u16)> = want
        .iter()
        .map(|(k, v, s)| (k.to_string(), v.to_string(), *s))
        .collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn a_refusal_never_tells_the_workload_a_resolved_address() {
    let up = upstream(b"x".to_vec(), None).await;
    let port = up.addr.port();
    // A name under a wildcard entry that resolves to addresses the proxy
    // does not dial: the lookup happens (docs/policy.md says so), but its
    // answer stays in the host's log.
    let dns = fake_dns(HashMap::from([(
        "c2vjcmv0.dns.test",
        Answer::Ips(vec![
            "10.9.8.7".parse().unwrap(),
            "fd00::77".parse().unwrap(),
        ]),
    )]))
    .await;
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Servers(vec![dns.addr]),
        Some(&[
            &format!("*.dns.test:{port}"),
            &format!("ok.test:{closed_port}"),
        ]),
    )
    .await;
    let name = format!("c2vjcmv0.dns.test:{port}");
    let secrets = ["10.9.8.7", "fd00::77", "fd00:0:0:0:0:0:0:77"];
    let (status, text) = send(s.proxy, &get(&format!("http://{name}/"), &name)).await;
    assert_eq!(status, 403, "{text}");
    for a in secrets {
        assert!(!text.contains(a), "the workload was told {a}: {text}");
    }
    assert!(
        last_reason(&s.audit).contains("10.9.8.7") || last_reason(&s.audit).contains("fd00::77"),
        "{}",
        last_reason(&s.audit)
    );
    // The same through CONNECT: the whole answer, head and body.
    let mut c = TcpStream::connect(s.proxy).await.unwrap();
    c.write_all(format!("CONNECT {name} HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    for a in secrets {
        assert!(!text.contains(a), "the workload was told {a}: {text}");
    }
    // An allowed address that does not answer: the 502 does not name it.
    let target = format!("ok.test:{closed_port}");
    let (status, text) = send(s.proxy, &get(&format!("http://{target}/"), &target)).await;
    assert_eq!(status, 502, "{text}");
    assert!(!text.contains("127.0.0.1"), "{text}");
    assert!(last_reason(&s.audit).contains("127.0.0.1"));
    assert_eq!(up.conns.load(Ordering::SeqCst), 0);
}

/// Every line of the audit file and its rotated copies, and their sizes.
fn audit_files(path: &std::path::Path, keep: u32) -> (Vec<cordon_egress::AuditLine>, Vec<u64>) {
    let mut lines = Vec::new();
    let mut sizes = Vec::new();
    for n in 0..=keep + 1 {
        let p = if n == 0 {
            path.to_path_buf()
        } else {
            std::path::PathBuf::from(format!("{}.{n}", path.display()))
        };
        let Ok(text) = std::fs::read_to_string(&p) else {
            sizes.push(0);
            continue;
        };
        sizes.push(text.len() as u64);
        for l in text.lines() {
            lines.push(cordon_egress::AuditLine::parse(l).unwrap());
        }
    }
    (lines, sizes)
}

#[tokio::test]
async fn a_flood_from_one_sandbox_is_capped_refused_and_the_log_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress-audit.jsonl");
    let bounds = AuditBounds {
        rotate_bytes: 64 * 1024,
        keep: 2,
        sandbox_bytes_per_sec: 1024,
        sandbox_burst_bytes: 32 * 1024,
    };
    let audit = Arc::new(Audit::open_bounded(&path, &bounds).unwrap());
    let s = proxy_bounded(&[], Dns::Off, Some(&["ok.test"]), 64, audit, bounds).await;
    // Long names, each refused by the allowlist: about 1 KiB of log each.
    let flood = |addr: SocketAddr, n: usize| async move {
        let (a, b) = ("a".repeat(50), "b".repeat(60));
        let mut statuses = HashMap::<u16, usize>::new();
        let mut said = 0;
        for i in 0..n {
            let host = format!("{i:05}{a}.{b}.{b}.flood.test");
            let (status, text) = send(addr, &get(&format!("http://{host}/"), &host)).await;
            *statuses.entry(status).or_default() += 1;
            if status == 429 && text.contains("audit budget is spent") {
                said += 1;
            }
        }
        (statuses, said)
    };
    let started = std::time::Instant::now();
    let (statuses, said) = flood(s.proxy, 600).await;
    let elapsed = started.elapsed().as_secs_f64();
    let refused = statuses.get(&429).copied().unwrap_or(0);
    assert!(refused >= 500, "{statuses:?}");
    assert_eq!(said, refused, "each 429 says why");
    let (lines, sizes) = audit_files(&path, bounds.keep);
    let total: u64 = sizes.iter().sum();
    // The burst, the rate over the flood, and the two notes about it.
    let bound = 32 * 1024 + (1024.0 * elapsed) as u64 + 4 * 1024;
    assert!(
        total <= bound,
        "{total} bytes of log from one sandbox, bound {bound}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.status == 429 && l.reason.contains("budget is spent")),
        "the log does not say the budget was spent"
    );
    // The budget refills at its rate: the sandbox is served again, and its
    // next line is preceded by one counting what was refused unrecorded.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let host = "again.test";
    let (status, text) = send(s.proxy, &get(&format!("http://{host}/"), host)).await;
    assert_eq!(status, 403, "{text}");
    let (lines, _) = audit_files(&path, bounds.keep);
    let counted = lines
        .iter()
        .find(|l| {
            l.reason
                .contains("were refused, and not recorded one by one")
        })
        .expect("a line counting the refusals");
    assert!(
        counted.reason.starts_with(&format!("{refused} requests")),
        "{}",
        counted.reason
    );
    assert!(lines.last().unwrap().target.contains("again.test"));
    // Another sandbox has a budget of its own.
    let other = s.another_sandbox("tenant/thread/other").await;
    let host = "elsewhere.test";
    let (status, text) = send(other, &get(&format!("http://{host}/"), host)).await;
    assert_eq!(status, 403, "{text}");
    // Floods from more sandboxes take the log past its rotation size: it
    // is rotated, keeps two old files, and stays bounded.
    for n in 0..4 {
        let addr = s.another_sandbox(&format!("tenant/thread/flood-{n}")).await;
        flood(addr, 100).await;
    }
    let (lines, sizes) = audit_files(&path, bounds.keep);
    assert!(sizes[1] > 0, "no rotation: {sizes:?}");
    assert_eq!(sizes[3], 0, "more old files than kept: {sizes:?}");
    for size in &sizes {
        assert!(*size <= 64 * 1024, "a file past its bound: {sizes:?}");
    }
    assert!(lines.iter().any(|l| l.sandbox == "tenant/thread/flood-3"));
}

// ---- the allowlist changed while the channel serves ----------------------

fn entries(list: &[&str]) -> Vec<EgressEntry> {
    list.iter()
        .map(|e| EgressEntry::parse(e).unwrap())
        .collect()
}

/// Whether `s` is closed within two seconds (a read ends or fails).
async fn closes(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Whether `s` stays open and silent for 300 ms.
async fn stays_open(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(300), s.read(&mut b))
        .await
        .is_err()
}

#[tokio::test]
async fn a_new_connection_is_decided_by_the_new_allowlist() {
    let up = upstream(b"hi".to_vec(), None).await;
    let port = up.addr.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1"), ("dns-ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let ok = format!("http://ok.test:{port}/");
    let other = format!("http://dns-ok.test:{port}/");
    assert_eq!(
        send(s.proxy, &get(&ok, &format!("ok.test:{port}"))).await.0,
        200
    );
    assert_eq!(
        send(s.proxy, &get(&other, &format!("dns-ok.test:{port}")))
            .await
            .0,
        403
    );
    let g = s
        .served
        .0
        .change_egress(
            &s.live,
            EgressChange::Replace(entries(&[&format!("dns-ok.test:{port}")])),
            "team-a/ops",
        )
        .unwrap();
    assert_eq!(g, 2);
    assert_eq!(s.live.current().number, 2);
    let (status, text) = send(s.proxy, &get(&ok, &format!("ok.test:{port}"))).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("not in the egress allowlist"), "{text}");
    assert_eq!(
        send(s.proxy, &get(&other, &format!("dns-ok.test:{port}")))
            .await
            .0,
        200
    );
    // One line for the change: old and new lists, and who asked.
    let lines = s.audit.lines();
    let change: Vec<_> = lines.iter().filter(|l| l.kind == "egress_allow").collect();
    assert_eq!(change.len(), 1, "{lines:?}");
    let r = &change[0].reason;
    assert_eq!(change[0].verdict, "changed");
    assert!(r.contains("generation 2"), "{r}");
    assert!(r.contains("team-a/ops"), "{r}");
    assert!(
        r.contains(&format!("[ok.test:{port}] -> [dns-ok.test:{port}]")),
        "{r}"
    );
}

#[tokio::test]
async fn an_open_tunnel_the_new_list_denies_is_closed_and_one_it_allows_stays() {
    let up = holding_upstream().await;
    let port = up.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1"), ("dns-ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}"), &format!("dns-ok.test:{port}")]),
    )
    .await;
    let mut denied = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
    let mut kept = open_tunnel(s.proxy, &format!("dns-ok.test:{port}"), "dns-ok.test").await;
    assert!(stays_open(&mut denied).await);
    s.served
        .0
        .change_egress(
            &s.live,
            EgressChange::Replace(entries(&[&format!("dns-ok.test:{port}")])),
            "test",
        )
        .unwrap();
    assert!(
        closes(&mut denied).await,
        "a tunnel the new allowlist denies stayed open"
    );
    assert!(
        stays_open(&mut kept).await,
        "a tunnel the new allowlist still admits was closed"
    );
    // Still carried: the upstream reads what is written.
    kept.write_all(b"more").await.unwrap();
    assert!(stays_open(&mut kept).await);
    let lines = s.audit.lines();
    assert!(
        lines.iter().any(|l| l.kind == "connect"
            && l.verdict == "end"
            && l.target == format!("ok.test:{port}")
            && l.reason.contains("no longer admits")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_kept_alive_connection_to_a_now_denied_host_is_closed() {
    let (up, _conns, reqs) = keepalive_upstream(b"kept").await;
    let port = up.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1"), ("dns-ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}"), &format!("dns-ok.test:{port}")]),
    )
    .await;
    let req =
        |host: &str| format!("GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
    let mut denied = TcpStream::connect(s.proxy).await.unwrap();
    denied.write_all(req("ok.test").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut denied).await, (200, b"kept".to_vec()));
    let mut kept = TcpStream::connect(s.proxy).await.unwrap();
    kept.write_all(req("dns-ok.test").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut kept).await, (200, b"kept".to_vec()));
    s.served
        .0
        .change_egress(
            &s.live,
            EgressChange::Replace(entries(&[&format!("dns-ok.test:{port}")])),
            "test",
        )
        .unwrap();
    assert!(
        closes(&mut denied).await,
        "a keep-alive connection to a host the new allowlist denies stayed open"
    );
    assert!(stays_open(&mut kept).await);
    kept.write_all(req("dns-ok.test").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut kept).await, (200, b"kept".to_vec()));
    // The now-denied host, asked on the kept connection, is refused.
    kept.write_all(req("ok.test").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut kept).await.0, 403);
    assert_eq!(reqs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_failed_replacement_closes_everything_and_refuses_new_requests() {
    let up = holding_upstream().await;
    let port = up.port();
    let s = proxy(
        &[("ok.test", "127.0.0.1")],
        Dns::Off,
        Some(&[&format!("ok.test:{port}")]),
    )
    .await;
    let mut open = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
    let err = s
        .served
        .0
        .change_egress(
            &s.live,
            EgressChange::Close("egress entry `10.0.0.1` is refused: it is an IP address".into()),
            "test",
        )
        .unwrap_err();
    assert!(
        err.contains("the last change of its egress allowlist failed"),
        "{err}"
    );
    assert!(
        closes(&mut open).await,
        "an open tunnel outlived a failed change"
    );
    // Every new request is refused, saying why and how to fix it; the old
    // list is not left in force.
    let (status, text) = tunnel(
        s.proxy,
        &format!("ok.test:{port}"),
        &client_hello(Some("ok.test")),
    )
    .await;
    assert_eq!(status, 403);
    let body = String::from_utf8_lossy(&text).to_string();
    assert!(body.contains("egress is closed"), "{body}");
    assert!(body.contains("10.0.0.1"), "{body}");
    assert!(body.contains("cordon sandbox egress"), "{body}");
    let lines = s.audit.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.kind == "egress_allow" && l.verdict == "closed"),
        "{lines:?}"
    );
    // A change that loads opens it again.
    s.served
        .0
        .change_egress(
            &s.live,
            EgressChange::Replace(entries(&[&format!("ok.test:{port}")])),
            "test",
        )
        .unwrap();
    let _again = open_tunnel(s.proxy, &format!("ok.test:{port}"), "ok.test").await;
}
