//! A loopback HTTPS upstream with a CA of its own, made by the test: what
//! an inspected host is in the tests. Plain threads, HTTP/1.1 only (the
//! egress crate's own tests cover HTTP/2 against the interceptor).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A running upstream: its port, its CA (PEM, to name in a policy's
/// `inspect` entry), and what reached it, one line per request:
/// `METHOD TARGET` then each header as `name: value`, a blank line, the
/// body as text.
pub struct Upstream {
    pub port: u16,
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<String>>>,
}

/// Starts an upstream answering for `names`: every request is answered
/// `200` with the body `hello METHOD PATH`, but one for `/slow`, whose
/// answer streams (`first` and a newline at once, then a byte every 100 ms
/// for a minute) and which adds the line `cut /slow` to `seen` when a
/// write fails (its connection was closed).
pub fn upstream(names: &[&str]) -> Upstream {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "cordon test upstream CA");
    let ca_cert = ca.self_signed(&ca_key).expect("a CA certificate");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("a key");
    let leaf =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("leaf params")
            .signed_by(&key, &issuer)
            .expect("a leaf");
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key"),
        )
        .expect("a server config");
    let cfg = Arc::new(cfg);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming() {
            let Ok(tcp) = tcp else { continue };
            let (cfg, seen) = (cfg.clone(), s2.clone());
            std::thread::spawn(move || serve(cfg, tcp, seen));
        }
    });
    Upstream {
        port,
        ca_pem: ca_cert.pem(),
        seen,
    }
}

fn serve(cfg: Arc<rustls::ServerConfig>, tcp: std::net::TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)));
    let Ok(conn) = rustls::ServerConnection::new(cfg) else {
        return;
    };
    let mut s = rustls::StreamOwned::new(conn, tcp);
    loop {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap_or_default().to_string();
        let len: usize = lines
            .clone()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = first.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
        seen.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
            "{method} {target}\n{}\n\n{}",
            headers.join("\n"),
            String::from_utf8_lossy(&body)
        ));
        let path = target.split('?').next().unwrap_or("");
        if path == "/slow" {
            slow(&mut s, &seen);
            return;
        }
        let answer = format!("hello {method} {path}");
        if write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        )
        .is_err()
        {
            return;
        }
        let _ = s.flush();
    }
}

/// The `/slow` answer: `first` at once, then a byte every 100 ms; `cut
/// /slow` in `seen` when a write fails.
fn slow(s: &mut impl Write, seen: &Mutex<Vec<String>>) {
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nfirst\n";
    let mut sent = s.write_all(head.as_bytes()).and_then(|()| s.flush());
    for _ in 0..600 {
        if sent.is_err() {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push("cut /slow".into());
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        sent = s.write_all(b".").and_then(|()| s.flush());
    }
}
