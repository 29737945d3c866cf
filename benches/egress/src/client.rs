//! The client side of each figure: one operation against one target.

use crate::hello::{client_hello, Ask};
use crate::upstream::SMALL_BODY;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where a client goes: straight to the upstream, or through a proxy that is
/// asked for `host` (the name the proxy resolves; `127.0.0.1` for the peers,
/// `bench.test` for cordon).
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub proxy: Option<SocketAddr>,
    pub host: String,
}

/// The upstream's ports (always on 127.0.0.1).
#[derive(Debug, Clone, Copy)]
pub struct Upstream {
    pub http_port: u16,
    pub tls_port: u16,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

async fn dial(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn upstream_addr(up: Upstream, port: u16) -> SocketAddr {
    let _ = up;
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Opens a tunnel to the TLS-ish upstream and sends the ClientHello asking
/// `ask`. Returns the stream, positioned at the upstream's first byte.
async fn tunnel(t: &Target, up: Upstream, ask: Ask) -> io::Result<TcpStream> {
    let mut s = match t.proxy {
        None => dial(upstream_addr(up, up.tls_port)).await?,
        Some(p) => {
            let mut s = dial(p).await?;
            let authority = format!("{}:{}", t.host, up.tls_port);
            let req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
            s.write_all(req.as_bytes()).await?;
            // Read the proxy's answer head byte-wise-bounded: nothing follows
            // it until the ClientHello goes out, so no upstream byte is lost.
            let mut buf = Vec::with_capacity(256);
            let mut chunk = [0u8; 512];
            loop {
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Err(bad("proxy closed during CONNECT"));
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = find(&buf, b"\r\n\r\n") {
                    if end + 4 != buf.len() {
                        return Err(bad("bytes after the CONNECT answer before the ClientHello"));
                    }
                    break;
                }
                if buf.len() > 16 * 1024 {
                    return Err(bad("CONNECT answer head too long"));
                }
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            resp.parse(&buf).map_err(|e| bad(e.to_string()))?;
            match resp.code {
                Some(c) if (200..300).contains(&c) => {}
                c => {
                    return Err(bad(format!(
                        "CONNECT refused: {:?} {}",
                        c,
                        String::from_utf8_lossy(&buf).lines().next().unwrap_or("")
                    )))
                }
            }
            s
        }
    };
    s.write_all(&client_hello(&t.host, ask)).await?;
    Ok(s)
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Figure 1: connect, CONNECT, 200, ClientHello, first upstream byte.
pub async fn tunnel_first_byte(t: &Target, up: Upstream) -> io::Result<Duration> {
    let start = Instant::now();
    let mut s = tunnel(t, up, Ask::Short).await?;
    let mut b = [0u8; 128];
    let n = s.read(&mut b).await?;
    let el = start.elapsed();
    if n == 0 {
        return Err(bad("tunnel closed before the first upstream byte"));
    }
    if b[0] != 22 {
        return Err(bad(format!("first upstream byte is {:#x}, not 0x16", b[0])));
    }
    Ok(el)
}

/// Figure 4: the whole tunnel (setup included) and `n` bytes read.
pub async fn bulk(t: &Target, up: Upstream, n: u64) -> io::Result<Duration> {
    let start = Instant::now();
    let mut s = tunnel(t, up, Ask::Bulk(n)).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    while got < n {
        let k = s.read(&mut buf).await?;
        if k == 0 {
            return Err(bad(format!("tunnel closed after {got} of {n} bytes")));
        }
        got += k as u64;
    }
    Ok(start.elapsed())
}

/// One HTTP client connection (direct or to a proxy).
pub struct HttpConn {
    s: TcpStream,
    buf: Vec<u8>,
    /// Requests answered on this connection so far.
    pub used: u32,
}

pub fn request_bytes(t: &Target, up: Upstream) -> Vec<u8> {
    match t.proxy {
        None => format!("GET /small HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", up.http_port),
        Some(_) => {
            let a = format!("{}:{}", t.host, up.http_port);
            format!("GET http://{a}/small HTTP/1.1\r\nHost: {a}\r\n\r\n")
        }
    }
    .into_bytes()
}

impl HttpConn {
    pub async fn open(t: &Target, up: Upstream) -> io::Result<HttpConn> {
        let addr = t.proxy.unwrap_or_else(|| upstream_addr(up, up.http_port));
        Ok(HttpConn { s: dial(addr).await?, buf: Vec::with_capacity(4096), used: 0 })
    }

    /// Whether the other side has already closed this idle connection (a
    /// pending EOF or reset), checked without blocking before reuse, as
    /// curl does ("Connection 0 seems to be dead").
    pub fn is_dead(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut b = [0u8; 1];
        // SAFETY: a one-byte peek into a live buffer on a socket we own.
        let n = unsafe {
            libc::recv(self.s.as_raw_fd(), b.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        // -1 with EAGAIN: open and quiet. 0: EOF. >0: bytes nobody asked
        // for. Any other error: reset.
        !(n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 8192];
        let n = self.s.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Sends `req` and reads the whole answer. Ok(true) when the connection
    /// may carry another request. A reused connection that the other side
    /// had already closed gives `ErrorKind::ConnectionAborted`, so the caller
    /// can reconnect and retry.
    pub async fn get(&mut self, req: &[u8]) -> io::Result<bool> {
        let reused = self.used > 0;
        if let Err(e) = self.s.write_all(req).await {
            return Err(if reused { io::Error::new(io::ErrorKind::ConnectionAborted, e) } else { e });
        }
        self.buf.clear();
        let (head_len, code, keep, len) = loop {
            {
                let mut headers = [httparse::EMPTY_HEADER; 48];
                let mut resp = httparse::Response::new(&mut headers);
                match resp.parse(&self.buf).map_err(|e| bad(e.to_string()))? {
                    httparse::Status::Complete(n) => {
                        let v11 = resp.version == Some(1);
                        let mut keep = v11;
                        let mut len = BodyLen::ToEof;
                        for h in resp.headers.iter() {
                            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                            if h.name.eq_ignore_ascii_case("connection")
                                || h.name.eq_ignore_ascii_case("proxy-connection")
                            {
                                if v.contains("close") {
                                    keep = false;
                                } else if v.contains("keep-alive") {
                                    keep = true;
                                }
                            } else if h.name.eq_ignore_ascii_case("content-length") {
                                if !matches!(len, BodyLen::Chunked) {
                                    len = BodyLen::Exactly(
                                        v.trim().parse().map_err(|_| bad("bad content-length"))?,
                                    );
                                }
                            } else if h.name.eq_ignore_ascii_case("transfer-encoding")
                                && v.contains("chunked")
                            {
                                len = BodyLen::Chunked;
                            }
                        }
                        if matches!(len, BodyLen::ToEof) {
                            keep = false;
                        }
                        break (n, resp.code.unwrap_or(0), keep, len);
                    }
                    httparse::Status::Partial => {}
                }
            }
            let got = self.fill().await;
            match got {
                Ok(0) | Err(_) if reused && self.buf.is_empty() => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "reused connection closed by the other side",
                    ));
                }
                Ok(0) => return Err(bad("connection closed inside the answer head")),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        };
        self.buf.drain(..head_len);
        let body_len = match len {
            BodyLen::Exactly(n) => {
                while self.buf.len() < n {
                    if self.fill().await? == 0 {
                        return Err(bad("connection closed inside the body"));
                    }
                }
                n
            }
            BodyLen::ToEof => {
                while self.fill().await? > 0 {}
                self.buf.len()
            }
            BodyLen::Chunked => self.dechunk().await?,
        };
        if code != 200 {
            return Err(bad(format!("status {code}")));
        }
        if body_len != SMALL_BODY {
            return Err(bad(format!("body of {body_len} bytes, not {SMALL_BODY}")));
        }
        self.used += 1;
        Ok(keep)
    }

    async fn dechunk(&mut self) -> io::Result<usize> {
        let mut total = 0usize;
        let mut pos = 0usize;
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                    break pos + i;
                }
                if self.fill().await? == 0 {
                    return Err(bad("closed inside a chunk size"));
                }
            };
            let line = String::from_utf8_lossy(&self.buf[pos..line_end]).to_string();
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("bad chunk size"))?;
            pos = line_end + 2;
            if size == 0 {
                // Trailers, then an empty line.
                loop {
                    let e = loop {
                        if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                            break pos + i;
                        }
                        if self.fill().await? == 0 {
                            return Err(bad("closed inside the trailers"));
                        }
                    };
                    let empty = e == pos;
                    pos = e + 2;
                    if empty {
                        return Ok(total);
                    }
                }
            }
            while self.buf.len() < pos + size + 2 {
                if self.fill().await? == 0 {
                    return Err(bad("closed inside a chunk"));
                }
            }
            total += size;
            pos += size + 2;
        }
    }
}

enum BodyLen {
    Exactly(usize),
    Chunked,
    ToEof,
}

/// Figure 2a: a new connection, one GET, the answer; the client then closes.
pub async fn get_new_conn(t: &Target, up: Upstream, req: &[u8]) -> io::Result<Duration> {
    let start = Instant::now();
    let mut c = HttpConn::open(t, up).await?;
    c.get(req).await?;
    Ok(start.elapsed())
}

/// A keep-alive client: reuses its connection while the other side lets it,
/// and opens a new one (counted in `opened`) when it does not.
pub struct KeepAlive {
    conn: Option<HttpConn>,
    pub opened: u64,
}

impl KeepAlive {
    pub fn new() -> Self {
        KeepAlive { conn: None, opened: 0 }
    }

    /// One GET, with the connection (re)opened as needed inside the timing.
    pub async fn get(&mut self, t: &Target, up: Upstream, req: &[u8]) -> io::Result<()> {
        for _attempt in 0..2 {
            if self.conn.as_ref().is_some_and(HttpConn::is_dead) {
                self.conn = None;
            }
            if self.conn.is_none() {
                self.conn = Some(HttpConn::open(t, up).await?);
                self.opened += 1;
            }
            let c = self.conn.as_mut().expect("just set");
            match c.get(req).await {
                Ok(keep) => {
                    if !keep {
                        self.conn = None;
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {
                    // The other side closed an idle connection: retry once.
                    self.conn = None;
                }
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
        Err(bad("reused connection closed twice in a row"))
    }
}
