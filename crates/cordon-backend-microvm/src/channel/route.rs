//! What the guest sends, routed by the channel's one reader thread: exec
//! output and ends to their handles, replies to their calls, relayed
//! connections to their sinks. The first frame that breaks a rule ends the
//! channel, with why.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use cordon_sandbox::{ExitStatus, SandboxError, Stream};
use cordon_vm_proto::{self as proto, FrameReader, Msg};

use super::convert::{short, status};

/// One frame: its message and data.
pub(super) type Frame = (Msg, Vec<u8>);

/// A relayed connection's sink: bytes from the guest, `None` at its close.
pub type ConnSink = Sender<Option<Vec<u8>>>;

/// Opens the host side of a connection the guest opened (the egress relay).
pub type ConnOpener = Arc<dyn Fn(u64) -> Option<ConnSink> + Send + Sync>;

pub(super) struct ExecState {
    pub(super) to: Sender<ExecMsg>,
    pub(super) max: u64,
    pub(super) got: [u64; 2],
}

pub(super) enum ExecMsg {
    Out(Stream, Vec<u8>),
    End(Result<ExitStatus, SandboxError>),
}

#[derive(Default)]
pub(super) struct Routes {
    pub(super) execs: HashMap<u64, ExecState>,
    /// Each call's replies, and how many data bytes it may still get.
    pub(super) calls: HashMap<u64, (Sender<Frame>, u64)>,
    pub(super) conns: HashMap<u64, ConnSink>,
    pub(super) watches: HashMap<u64, super::watch::WatchRoute>,
    /// Why the channel ended, once it has.
    pub(super) ended: Option<String>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads until the stream ends or the guest breaks a rule; returns why.
pub(super) fn read_loop(
    reader: &mut FrameReader<UnixStream>,
    routes: &Mutex<Routes>,
    opener: Option<&ConnOpener>,
) -> String {
    loop {
        let (msg, data) = match reader.read() {
            Ok(Some(f)) => f,
            Ok(None) => return "the guest closed its channel".into(),
            Err(e) => return format!("the guest broke the channel's framing: {e}"),
        };
        if let Err(why) = route(msg, data, routes, opener) {
            return format!("the guest broke the protocol: {why}");
        }
    }
}

fn route(
    msg: Msg,
    data: Vec<u8>,
    routes: &Mutex<Routes>,
    opener: Option<&ConnOpener>,
) -> Result<(), String> {
    let mut r = lock(routes);
    match msg {
        // A watch that could not start.
        Msg::Error { req, .. } if r.watches.contains_key(&req) => {
            no_data(&data)?;
            if let (
                Some(w),
                Msg::Error {
                    kind,
                    path,
                    message,
                    ..
                },
            ) = (r.watches.remove(&req), msg)
            {
                w.end(super::convert::guest_error(kind, path, message).to_string());
            }
        }
        Msg::Output { id, stream } => {
            let stream = match stream {
                proto::Stream::Stdout => Stream::Stdout,
                proto::Stream::Stderr => Stream::Stderr,
            };
            let Some(e) = r.execs.get_mut(&id) else {
                // An exec the host already let go of (killed, timed out).
                return Ok(());
            };
            let i = usize::from(stream == Stream::Stderr);
            e.got[i] = e.got[i].saturating_add(data.len() as u64);
            if e.got[i] > e.max.saturating_add(1 + proto::MAX_DATA as u64) {
                return Err(format!("exec {id} sent more output than its cap"));
            }
            let _ = e.to.send(ExecMsg::Out(stream, data));
        }
        Msg::Exited { id, status: s } => {
            no_data(&data)?;
            if let Some(e) = r.execs.remove(&id) {
                let _ = e.to.send(ExecMsg::End(Ok(status(s))));
            }
        }
        Msg::ExecFailed { id, error } => {
            no_data(&data)?;
            if let Some(e) = r.execs.remove(&id) {
                let _ = e.to.send(ExecMsg::End(Err(SandboxError::Failed {
                    operation: "exec",
                    reason: format!("the guest could not start it: {error}"),
                })));
            }
        }
        Msg::ListReply {
            req, more: true, ..
        } => {
            no_data(&data)?;
            if let Some((tx, _)) = r.calls.get(&req) {
                let _ = tx.send((msg, data));
            }
        }
        Msg::Done { req }
        | Msg::StatReply { req, .. }
        | Msg::ReadEnd { req, .. }
        | Msg::ListReply { req, .. }
        | Msg::Error { req, .. } => {
            no_data(&data)?;
            if let Some((tx, _)) = r.calls.remove(&req) {
                let _ = tx.send((msg, data));
            }
        }
        Msg::WatchEvent { req, event } => {
            no_data(&data)?;
            if let Some(w) = r.watches.get(&req) {
                w.event(event)?;
            }
        }
        Msg::WatchEnd { req, reason } => {
            no_data(&data)?;
            if let Some(w) = r.watches.remove(&req) {
                w.end(reason);
            }
        }
        Msg::FilesEnd { req } => {
            no_data(&data)?;
            if let Some((tx, _)) = r.calls.remove(&req) {
                let _ = tx.send((msg, data));
            }
        }
        Msg::ReadData { req } | Msg::FilesData { req } => {
            if let Some((tx, left)) = r.calls.get_mut(&req) {
                if data.len() as u64 > *left {
                    return Err(format!("read {req} sent more than it was asked for"));
                }
                *left -= data.len() as u64;
                let _ = tx.send((msg, data));
            }
        }
        Msg::ConnOpen { conn } => {
            no_data(&data)?;
            if conn & proto::HOST_CONN != 0 {
                return Err(format!("connection {conn} has an id only the host chooses"));
            }
            if r.conns.contains_key(&conn) {
                return Err(format!("connection {conn} opened twice"));
            }
            // Each open connection holds a socket and two threads here;
            // the agent never has more open than this (it counts a
            // connection until both sides closed it, longer than here).
            if r.conns.len() >= proto::MAX_CONNS {
                return Err(format!(
                    "more than {} relayed connections open at once",
                    proto::MAX_CONNS
                ));
            }
            // The opener runs without the routes held: it connects (which
            // may take a while, and exec output must not wait for it), and
            // when it cannot it closes the guest's side through this
            // channel, which takes them. Nothing else adds `conn` in the
            // meantime: only this reader routes the guest's frames.
            drop(r);
            if let Some(sink) = opener.and_then(|o| o(conn)) {
                lock(routes).conns.insert(conn, sink);
            }
            return Ok(());
        }
        Msg::ConnData { conn } => {
            if let Some(sink) = r.conns.get(&conn) {
                let _ = sink.send(Some(data));
            }
        }
        Msg::ConnClose { conn } => {
            no_data(&data)?;
            if let Some(sink) = r.conns.remove(&conn) {
                let _ = sink.send(None);
            }
        }
        other => return Err(format!("a message only the host sends ({})", short(&other))),
    }
    Ok(())
}

fn no_data(data: &[u8]) -> Result<(), String> {
    if data.is_empty() {
        Ok(())
    } else {
        Err("data on a message that carries none".into())
    }
}
