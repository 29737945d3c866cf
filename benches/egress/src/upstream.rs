//! The upstream servers every target ends at: a tiny HTTP/1.1 server and a
//! "TLS-ish" server that reads one ClientHello record and answers with bytes.

use crate::hello::{parse_ask, Ask};
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Size of the body of `GET /small`.
pub const SMALL_BODY: usize = 64;

/// The answer to the tunnel-setup figure: a 5-byte handshake record header
/// and a short payload (a stand-in for a ServerHello).
pub fn short_answer() -> Vec<u8> {
    let payload = [0x02u8; 59];
    let mut v = vec![22, 3, 3, 0, payload.len() as u8];
    v.extend_from_slice(&payload);
    v
}

pub async fn serve(http: SocketAddr, tls: SocketAddr) -> io::Result<()> {
    let h = TcpListener::bind(http).await?;
    let t = TcpListener::bind(tls).await?;
    eprintln!("upstream: http on {http}, tls-ish on {tls}");
    let a = tokio::spawn(accept_loop(h, false));
    let b = tokio::spawn(accept_loop(t, true));
    let _ = tokio::try_join!(a, b);
    Ok(())
}

async fn accept_loop(l: TcpListener, tls: bool) {
    loop {
        let (s, _) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and the like: back off rather than spin.
                eprintln!("upstream accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = s.set_nodelay(true);
        tokio::spawn(async move {
            let r = if tls { tls_conn(s).await } else { http_conn(s).await };
            if let Err(e) = r {
                if e.kind() != io::ErrorKind::ConnectionReset
                    && e.kind() != io::ErrorKind::BrokenPipe
                    && e.kind() != io::ErrorKind::UnexpectedEof
                {
                    eprintln!("upstream conn ({}): {e}", if tls { "tls" } else { "http" });
                }
            }
        });
    }
}

async fn tls_conn(mut s: TcpStream) -> io::Result<()> {
    let mut hdr = [0u8; 5];
    s.read_exact(&mut hdr).await?;
    if hdr[0] != 22 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "first record is not a handshake"));
    }
    let len = u16::from_be_bytes([hdr[3], hdr[4]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await?;
    let ask = parse_ask(&payload).map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m))?;
    match ask {
        Ask::Short => s.write_all(&short_answer()).await?,
        Ask::Bulk(mut n) => {
            let buf = vec![0x5au8; 256 * 1024];
            while n > 0 {
                let k = n.min(buf.len() as u64) as usize;
                s.write_all(&buf[..k]).await?;
                n -= k as u64;
            }
        }
    }
    s.shutdown().await?;
    // Wait for the client to close, so the tunnel ends from the client side.
    let mut sink = [0u8; 1024];
    while s.read(&mut sink).await? > 0 {}
    Ok(())
}

/// HTTP/1.1 with keep-alive; answers every GET with a 64-byte body (404 for a
/// path other than /small, so a proxy that mangles the path shows as errors).
async fn http_conn(mut s: TcpStream) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let body = [b'x'; SMALL_BODY];
    let mut out = Vec::with_capacity(256);
    loop {
        // Read until one full request head is buffered.
        let (consumed, close, ok) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let mut close = req.version == Some(0);
                    for h in req.headers.iter() {
                        if h.name.eq_ignore_ascii_case("connection") {
                            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                            if v.contains("close") {
                                close = true;
                            } else if v.contains("keep-alive") {
                                close = false;
                            }
                        }
                    }
                    break (n, close, req.path == Some("/small"));
                }
                Ok(httparse::Status::Partial) => {
                    let mut chunk = [0u8; 4096];
                    let k = s.read(&mut chunk).await?;
                    if k == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&chunk[..k]);
                }
                Err(e) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                }
            }
        };
        buf.drain(..consumed);
        out.clear();
        out.extend_from_slice(if ok { b"HTTP/1.1 200 OK\r\n" } else { b"HTTP/1.1 404 Not Found\r\n" });
        out.extend_from_slice(b"Content-Type: text/plain\r\nContent-Length: ");
        out.extend_from_slice(SMALL_BODY.to_string().as_bytes());
        out.extend_from_slice(if close { b"\r\nConnection: close\r\n\r\n" } else { b"\r\n\r\n" });
        out.extend_from_slice(&body);
        s.write_all(&out).await?;
        if close {
            s.shutdown().await?;
            return Ok(());
        }
    }
}
