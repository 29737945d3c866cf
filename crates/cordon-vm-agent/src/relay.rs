//! The sandbox's one route out: connections the workload makes to its
//! proxy port (the listener the warm sandbox's init made in the sandbox's
//! network namespace) are relayed over the channel to the host, which
//! connects each to its egress proxy. The guest has no network of its own.
//!
//! Per connection: `ConnOpen`, then `ConnData` both ways, and a `ConnClose`
//! from each side when it stops sending (a half close: the other direction
//! goes on until its own `ConnClose`).
//!
//! A forwarded port's connections run the other way: the host asks
//! (`PortOpen`), the agent connects to the workload's port inside the
//! sandbox's network namespace, and the connection is relayed the same
//! way from then on ([`Relay::adopt`]).

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cordon_vm_proto::{Msg, HOST_CONN, MAX_CONNS, MAX_DATA};

use crate::console::say;
use crate::feed::{Feed, Refused};
use crate::out::Out;

struct Conn {
    /// Bytes from the host to the workload.
    feed: Feed,
    stream: TcpStream,
    /// The host sent `ConnClose`.
    host_closed: bool,
    /// The workload's side ended (our `ConnClose` went).
    guest_closed: bool,
}

impl Conn {
    /// A connection just opened: the host's bytes fed to `writer` (its
    /// write side shut once the host closes), both sides open.
    fn open(stream: TcpStream, writer: TcpStream) -> Conn {
        Conn {
            feed: Feed::spawn(writer, |w: TcpStream| {
                let _ = w.shutdown(Shutdown::Write);
            }),
            stream,
            host_closed: false,
            guest_closed: false,
        }
    }
}

type Conns = Arc<Mutex<HashMap<u64, Conn>>>;

fn lock(c: &Conns) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Clone)]
pub(crate) struct Relay {
    conns: Conns,
    stopped: Arc<AtomicBool>,
    out: Arc<Out>,
}

impl Relay {
    /// Relays the connections the host opens (`PortOpen`), and with a
    /// `listener` (the proxy port's) accepts the workload's on it from now
    /// on.
    pub(crate) fn start(listener: Option<TcpListener>, out: Arc<Out>) -> Relay {
        let conns: Conns = Arc::default();
        let stopped = Arc::new(AtomicBool::new(false));
        if let Some(listener) = listener {
            let (c, s, o) = (conns.clone(), stopped.clone(), out.clone());
            std::thread::spawn(move || accept(listener, o, c, s));
        }
        Relay {
            conns,
            stopped,
            out,
        }
    }

    /// Takes `stream` (connected to the workload's port for the host's
    /// `PortOpen` `req`) as connection `conn`: known before the host is
    /// told (`Done`), relayed from then on. `Err`: why it was not.
    pub(crate) fn adopt(&self, req: u64, conn: u64, stream: TcpStream) -> Result<(), String> {
        if conn & HOST_CONN == 0 {
            return Err(format!("connection {conn} is not an id the host chooses"));
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err("the sandbox is stopping".into());
        }
        let (Ok(writer), Ok(reader)) = (stream.try_clone(), stream.try_clone()) else {
            return Err("the connection could not be shared".into());
        };
        {
            let mut conns = lock(&self.conns);
            if conns.len() >= MAX_CONNS {
                return Err(format!(
                    "the sandbox has {MAX_CONNS} connections open already; close one first"
                ));
            }
            if conns.contains_key(&conn) {
                return Err(format!("connection {conn} is open already"));
            }
            conns.insert(conn, Conn::open(stream, writer));
        }
        if !self.out.send(&Msg::Done { req }, &[]) {
            return Ok(());
        }
        let (out, conns) = (self.out.clone(), self.conns.clone());
        std::thread::spawn(move || pump(reader, conn, &out, &conns));
        Ok(())
    }

    /// Bytes from the host for `conn`'s workload side.
    pub(crate) fn data(&self, conn: u64, data: Vec<u8>) {
        let mut conns = lock(&self.conns);
        let Some(c) = conns.get_mut(&conn) else {
            return;
        };
        match c.feed.push(data) {
            Ok(()) | Err(Refused::Closed) => {}
            Err(Refused::Full) => {
                say!("connection {conn}: the workload does not read; it is closed");
                let _ = c.stream.shutdown(Shutdown::Both);
                c.feed.close();
            }
        }
    }

    /// The host stops sending on `conn`: the workload reads its end once
    /// what is queued is written.
    pub(crate) fn close(&self, conn: u64) {
        let mut conns = lock(&self.conns);
        let Some(c) = conns.get_mut(&conn) else {
            return;
        };
        c.feed.close();
        c.host_closed = true;
        if c.guest_closed {
            conns.remove(&conn);
        }
    }

    /// Closes every connection; accepted ones from now on are dropped.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for (_, mut c) in lock(&self.conns).drain() {
            c.feed.close();
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: TcpListener, out: Arc<Out>, conns: Conns, stopped: Arc<AtomicBool>) {
    let next = AtomicU64::new(1);
    for stream in listener.incoming() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                say!("accepting on the proxy port: {e}");
                continue;
            }
        };
        if lock(&conns).len() >= MAX_CONNS {
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        let (Ok(writer), Ok(reader)) = (stream.try_clone(), stream.try_clone()) else {
            continue;
        };
        let conn = next.fetch_add(1, Ordering::SeqCst);
        // INVARIANT: the connection is known before the host hears of it,
        // so its first `ConnData` finds it.
        lock(&conns).insert(conn, Conn::open(stream, writer));
        if !out.send(&Msg::ConnOpen { conn }, &[]) {
            return;
        }
        let (out, conns) = (out.clone(), conns.clone());
        std::thread::spawn(move || pump(reader, conn, &out, &conns));
    }
}

/// The workload's bytes on `conn` to the host, then `ConnClose`.
fn pump(mut stream: TcpStream, conn: u64, out: &Out, conns: &Conns) {
    let mut buf = vec![0u8; MAX_DATA as usize];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if !out.send(&Msg::ConnData { conn }, &buf[..n]) {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    out.send(&Msg::ConnClose { conn }, &[]);
    let mut conns = lock(conns);
    if let Some(c) = conns.get_mut(&conn) {
        c.guest_closed = true;
        if c.host_closed {
            conns.remove(&conn);
        }
    }
}
