//! The host's end of the control channel to a guest agent: one framed
//! stream (`cordon-vm-proto`) over the unix socket QEMU backs the guest's
//! `cordon.ctl` port with.
//!
//! One reader thread per channel routes what the guest sends: exec output
//! and ends to their handles, file replies to their callers, relayed
//! connections to the egress relay. Nothing the guest sends is trusted:
//! every frame is bounded by the codec, every exec's output by its cap
//! (plus one frame), every read by its `max`. The first frame that breaks
//! a rule ends the channel and calls the `broken` hook, which kills the VM;
//! the host goes on. A channel that ended fails every call in flight and
//! every later one with why it ended.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_sandbox::{
    DirEntry, EventSender, ExecEnd, ExecHandle, ExecStdin, ExitStatus, FileKind, FileRead,
    FileStat, Killer, SandboxError, Stream,
};
use cordon_vm_proto::{self as proto, FrameReader, Msg};

/// What a call waits for at most before the VM is taken as hung.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

type Hook = Arc<dyn Fn(&str) + Send + Sync>;

/// One frame: its message and data.
type Frame = (Msg, Vec<u8>);

/// A relayed connection's sink: bytes from the guest, `None` at its close.
pub type ConnSink = Sender<Option<Vec<u8>>>;

/// Opens the host side of a connection the guest opened (the egress relay).
pub type ConnOpener = Arc<dyn Fn(u64) -> Option<ConnSink> + Send + Sync>;

struct ExecState {
    to: Sender<ExecMsg>,
    max: u64,
    got: [u64; 2],
}

enum ExecMsg {
    Out(Stream, Vec<u8>),
    End(Result<ExitStatus, SandboxError>),
}

#[derive(Default)]
struct Routes {
    execs: HashMap<u64, ExecState>,
    /// Each call's replies, and how many data bytes it may still get.
    calls: HashMap<u64, (Sender<Frame>, u64)>,
    conns: HashMap<u64, ConnSink>,
    /// Why the channel ended, once it has.
    ended: Option<String>,
}

/// A live channel.
pub struct Channel {
    writer: Mutex<UnixStream>,
    routes: Arc<Mutex<Routes>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn unavailable(reason: impl Into<String>) -> SandboxError {
    SandboxError::Unavailable {
        reason: reason.into(),
    }
}

impl Channel {
    /// Serves `stream` after the guest's `Ready` was read from `reader`.
    /// `broken` is called once, with why, when the guest breaks the
    /// protocol or the stream ends; `opener` takes relayed connections.
    pub fn serve(
        stream: UnixStream,
        reader: FrameReader<UnixStream>,
        broken: Hook,
        opener: Option<ConnOpener>,
    ) -> Arc<Channel> {
        let routes = Arc::new(Mutex::new(Routes::default()));
        let ch = Arc::new(Channel {
            writer: Mutex::new(stream),
            routes: routes.clone(),
            next: AtomicU64::new(1),
        });
        std::thread::spawn(move || {
            let mut reader = reader;
            let why = read_loop(&mut reader, &routes, opener.as_ref());
            // Nothing more is read or written: a guest still writing sees
            // its channel closed rather than blocking on a full socket.
            let _ = reader.get_mut().shutdown(std::net::Shutdown::Both);
            let mut r = lock(&routes);
            r.ended = Some(why.clone());
            r.execs.clear();
            r.calls.clear();
            r.conns.clear();
            drop(r);
            broken(&why);
        });
        ch
    }

    /// Why the channel ended, if it has.
    pub fn ended(&self) -> Option<String> {
        lock(&self.routes).ended.clone()
    }

    fn send(&self, msg: &Msg, data: &[u8]) -> Result<(), SandboxError> {
        if let Some(why) = self.ended() {
            return Err(unavailable(format!("the VM is gone: {why}")));
        }
        let mut w = lock(&self.writer);
        proto::write_frame(&mut *w, msg, data)
            .map_err(|e| unavailable(format!("the VM's channel: {e}")))
    }

    fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `msg` (built with a fresh request id) and waits for the
    /// replies that carry that id, until one `is_last` says it is the end.
    fn call(
        &self,
        make: impl FnOnce(u64) -> Msg,
        data: &[u8],
        max_data: u64,
        mut each: impl FnMut(Msg, Vec<u8>) -> Result<bool, SandboxError>,
    ) -> Result<(), SandboxError> {
        let req = self.id();
        let (tx, rx) = mpsc::channel();
        {
            let mut r = lock(&self.routes);
            if let Some(why) = &r.ended {
                return Err(unavailable(format!("the VM is gone: {why}")));
            }
            r.calls.insert(req, (tx, max_data));
        }
        let done = (|| {
            self.send(&make(req), data)?;
            loop {
                let (msg, bytes) = rx.recv_timeout(CALL_TIMEOUT).map_err(|e| match e {
                    mpsc::RecvTimeoutError::Timeout => unavailable(format!(
                        "the VM did not answer within {} s",
                        CALL_TIMEOUT.as_secs()
                    )),
                    mpsc::RecvTimeoutError::Disconnected => unavailable(format!(
                        "the VM is gone: {}",
                        self.ended().unwrap_or_else(|| "its channel closed".into())
                    )),
                })?;
                if let Msg::Error {
                    kind,
                    path,
                    message,
                    ..
                } = msg
                {
                    return Err(guest_error(kind, path, message));
                }
                if each(msg, bytes)? {
                    return Ok(());
                }
            }
        })();
        lock(&self.routes).calls.remove(&req);
        done
    }

    /// Hands the guest its sandbox's plan (a `cordon_linux::PlanSpec`).
    pub fn setup(&self, plan: serde_json::Value, disk_bytes: u64) -> Result<(), SandboxError> {
        self.call(
            |req| Msg::Setup {
                req,
                plan,
                disk_bytes,
            },
            &[],
            0,
            |m, _| match m {
                Msg::Done { .. } => Ok(true),
                other => Err(odd(&other)),
            },
        )
    }

    /// Writes a file in the guest.
    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        if contents.len() as u64 > proto::MAX_FILE {
            return Err(SandboxError::Refused {
                reason: format!(
                    "`{path}` is {} bytes; a file written into a microvm sandbox is at most {} bytes",
                    contents.len(),
                    proto::MAX_FILE
                ),
                rules: Vec::new(),
            });
        }
        let req = self.id();
        let (tx, rx) = mpsc::channel();
        {
            let mut r = lock(&self.routes);
            if let Some(why) = &r.ended {
                return Err(unavailable(format!("the VM is gone: {why}")));
            }
            r.calls.insert(req, (tx, 0));
        }
        let done = (|| {
            // The frames of one file go out under one lock, so another
            // writer's frames cannot interleave within them... they may,
            // and that is fine: each carries its request id.
            self.send(
                &Msg::WriteStart {
                    req,
                    path: path.to_string(),
                    mode,
                    size: contents.len() as u64,
                },
                &[],
            )?;
            for chunk in contents.chunks(proto::MAX_DATA as usize) {
                self.send(&Msg::WriteData { req }, chunk)?;
            }
            match rx.recv_timeout(CALL_TIMEOUT) {
                Ok((Msg::Done { .. }, _)) => Ok(()),
                Ok((
                    Msg::Error {
                        kind,
                        path,
                        message,
                        ..
                    },
                    _,
                )) => Err(guest_error(kind, path, message)),
                Ok((other, _)) => Err(odd(&other)),
                Err(_) => Err(unavailable(format!(
                    "the VM did not confirm `{path}`: {}",
                    self.ended().unwrap_or_else(|| "no answer".into())
                ))),
            }
        })();
        lock(&self.routes).calls.remove(&req);
        done
    }

    pub fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let mut out = None;
        self.call(
            |req| Msg::Stat {
                req,
                path: path.to_string(),
            },
            &[],
            0,
            |m, _| match m {
                Msg::StatReply { stat, .. } => {
                    out = stat.map(|s| FileStat {
                        kind: kind(s.kind),
                        size: s.size,
                        mode: s.mode,
                    });
                    Ok(true)
                }
                other => Err(odd(&other)),
            },
        )?;
        Ok(out)
    }

    pub fn read(&self, path: &str, max: u64) -> Result<FileRead, SandboxError> {
        let mut bytes = Vec::new();
        let mut size = 0;
        self.call(
            |req| Msg::Read {
                req,
                path: path.to_string(),
                max,
            },
            &[],
            max.saturating_add(1),
            |m, data| match m {
                Msg::ReadData { .. } => {
                    bytes.extend_from_slice(&data);
                    Ok(false)
                }
                Msg::ReadEnd { size: s, .. } => {
                    size = s;
                    Ok(true)
                }
                other => Err(odd(&other)),
            },
        )?;
        Ok(FileRead { bytes, size })
    }

    pub fn list(&self, path: &str) -> Result<Vec<DirEntry>, SandboxError> {
        let mut out = Vec::new();
        self.call(
            |req| Msg::List {
                req,
                path: path.to_string(),
            },
            &[],
            0,
            |m, _| match m {
                Msg::ListReply { entries, more, .. } => {
                    if out.len() + entries.len() > proto::MAX_LIST {
                        return Err(SandboxError::Failed {
                            operation: "list",
                            reason: format!("`{path}` has more than {} entries", proto::MAX_LIST),
                        });
                    }
                    out.extend(entries.into_iter().map(|e| DirEntry {
                        name: e.name,
                        kind: kind(e.kind),
                    }));
                    Ok(!more)
                }
                other => Err(odd(&other)),
            },
        )?;
        Ok(out)
    }

    /// Starts an exec; its output and end arrive on the returned handle.
    #[allow(clippy::too_many_arguments)]
    pub fn exec(
        self: &Arc<Self>,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        bounds: serde_json::Value,
        max_output_bytes: u64,
        stdin: Option<Vec<u8>>,
        stream_stdin: bool,
        wall: Duration,
    ) -> Result<ExecHandle, SandboxError> {
        let id = self.id();
        let (to, from) = mpsc::channel();
        {
            let mut r = lock(&self.routes);
            if let Some(why) = &r.ended {
                return Err(unavailable(format!("the VM is gone: {why}")));
            }
            r.execs.insert(
                id,
                ExecState {
                    to,
                    max: max_output_bytes,
                    got: [0, 0],
                },
            );
        }
        let started = self.send(
            &Msg::Exec {
                id,
                argv,
                env,
                bounds,
                max_output_bytes,
            },
            &[],
        );
        if let Err(e) = started {
            lock(&self.routes).execs.remove(&id);
            return Err(e);
        }
        let killer = {
            let ch = Arc::downgrade(self);
            Killer::new(move || {
                if let Some(ch) = ch.upgrade() {
                    let _ = ch.send(&Msg::Kill { id }, &[]);
                }
            })
        };
        let stdin_w = StdinWriter {
            ch: self.clone(),
            id,
            ended: false,
        };
        let streamed = if stream_stdin {
            Some(ExecStdin::new(stdin_w))
        } else {
            let bytes = stdin.unwrap_or_default();
            std::thread::spawn(move || {
                let mut w = stdin_w;
                let _ = w.write_all(&bytes);
            });
            None
        };
        let (handle, events) = ExecHandle::channel(streamed, killer.clone());
        let ch = Arc::downgrade(self);
        std::thread::spawn(move || {
            forward(from, events, max_output_bytes, wall, &killer);
            if let Some(ch) = ch.upgrade() {
                lock(&ch.routes).execs.remove(&id);
            }
        });
        Ok(handle)
    }

    /// Sends bytes of a relayed connection to the guest.
    pub fn conn_data(&self, conn: u64, bytes: &[u8]) -> Result<(), SandboxError> {
        for chunk in bytes.chunks(proto::MAX_DATA as usize) {
            self.send(&Msg::ConnData { conn }, chunk)?;
        }
        Ok(())
    }

    /// Closes a relayed connection from the host's side.
    pub fn conn_close(&self, conn: u64) {
        lock(&self.routes).conns.remove(&conn);
        let _ = self.send(&Msg::ConnClose { conn }, &[]);
    }

    /// Asks the guest to power off (best effort).
    pub fn shutdown(&self) {
        let _ = self.send(&Msg::Shutdown {}, &[]);
    }
}

/// Feeds one exec's handle from what the reader routed to it, cutting each
/// stream at the cap; ends the exec once its wall clock (plus a grace for
/// the guest to say so itself) is past.
fn forward(
    from: Receiver<ExecMsg>,
    events: EventSender,
    max: u64,
    wall: Duration,
    killer: &Killer,
) {
    let mut sent = [0u64; 2];
    let mut truncated = [false; 2];
    let deadline = std::time::Instant::now() + wall + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match from.recv_timeout(left) {
            Ok(ExecMsg::Out(stream, bytes)) => {
                let i = usize::from(stream == Stream::Stderr);
                let room = max.saturating_sub(sent[i]);
                let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
                if take < bytes.len() {
                    truncated[i] = true;
                }
                if take > 0 {
                    sent[i] += take as u64;
                    if !events.output(stream, &bytes[..take]) {
                        killer.kill();
                    }
                }
            }
            Ok(ExecMsg::End(status)) => {
                events.exited(status.map(|status| ExecEnd {
                    status,
                    stdout_truncated: truncated[0],
                    stderr_truncated: truncated[1],
                }));
                return;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                killer.kill();
                events.exited(Err(unavailable(
                    "the VM did not end the command at its wall-clock bound; it was asked to kill it",
                )));
                return;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                events.exited(Err(unavailable(
                    "the VM ended before the command did (killed at a bound of the VM, or it broke its channel)",
                )));
                return;
            }
        }
    }
}

/// The exec's stdin as frames; end-of-file when dropped.
struct StdinWriter {
    ch: Arc<Channel>,
    id: u64,
    ended: bool,
}

impl Write for StdinWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(proto::MAX_DATA as usize);
        self.ch
            .send(&Msg::Stdin { id: self.id }, &buf[..n])
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e.to_string()))?;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for StdinWriter {
    fn drop(&mut self) {
        if !self.ended {
            self.ended = true;
            let _ = self.ch.send(&Msg::StdinEnd { id: self.id }, &[]);
        }
    }
}

fn kind(k: proto::Kind) -> FileKind {
    match k {
        proto::Kind::File => FileKind::File,
        proto::Kind::Dir => FileKind::Dir,
        proto::Kind::Symlink => FileKind::Symlink,
        proto::Kind::Other => FileKind::Other,
    }
}

fn odd(m: &Msg) -> SandboxError {
    SandboxError::Failed {
        operation: "microvm call",
        reason: format!("the guest answered out of turn ({})", short(m)),
    }
}

fn short(m: &Msg) -> String {
    let s = format!("{m:?}");
    s.chars().take(80).collect()
}

fn guest_error(kind: proto::ErrKind, path: String, message: String) -> SandboxError {
    match kind {
        proto::ErrKind::NotFound => SandboxError::NotFound { path },
        proto::ErrKind::PathRefused => SandboxError::PathRefused {
            path,
            reason: message,
        },
        proto::ErrKind::NotRegularFile => SandboxError::NotRegularFile {
            path,
            found: message,
        },
        proto::ErrKind::Unavailable => SandboxError::Unavailable { reason: message },
        proto::ErrKind::Refused => SandboxError::Refused {
            reason: message,
            rules: Vec::new(),
        },
        proto::ErrKind::Failed => SandboxError::Failed {
            operation: "microvm guest",
            reason: if path.is_empty() {
                message
            } else {
                format!("`{path}`: {message}")
            },
        },
    }
}

fn status(s: proto::Status) -> ExitStatus {
    match s {
        proto::Status::Code { code } => ExitStatus::Code(code),
        proto::Status::Signal { signal } => ExitStatus::Signal(signal),
        proto::Status::TimedOut => ExitStatus::TimedOut,
        proto::Status::Bound { bound } => ExitStatus::Bound {
            bound: match bound.as_str() {
                "max_memory" => "max_memory",
                "max_cpu_seconds" => "max_cpu_seconds",
                "max_processes" => "max_processes",
                "max_disk" => "max_disk",
                _ => "a bound of the sandbox",
            },
        },
    }
}

/// Reads until the stream ends or the guest breaks a rule; returns why.
fn read_loop(
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
        Msg::ReadData { req } => {
            if let Some((tx, left)) = r.calls.get_mut(&req) {
                if data.len() as u64 > *left {
                    return Err(format!("read {req} sent more than it was asked for"));
                }
                *left -= data.len() as u64;
                let _ = tx.send((Msg::ReadData { req }, data));
            }
        }
        Msg::ConnOpen { conn } => {
            no_data(&data)?;
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

/// Reads the guest's first frame, which must be `Ready`, within `deadline`.
pub fn await_ready(
    stream: &UnixStream,
    deadline: Duration,
) -> Result<(FrameReader<UnixStream>, String, String), String> {
    let r = stream
        .try_clone()
        .map_err(|e| format!("the channel socket: {e}"))?;
    r.set_read_timeout(Some(deadline))
        .map_err(|e| format!("the channel socket: {e}"))?;
    let mut reader = FrameReader::new(r);
    let first = reader.read();
    let (agent, kernel) = match first {
        Ok(Some((Msg::Ready { agent, kernel }, d))) if d.is_empty() => (agent, kernel),
        Ok(Some((other, _))) => {
            return Err(format!(
                "the guest's first frame was not `ready` ({})",
                short(&other)
            ))
        }
        Ok(None) => return Err("the guest closed its channel before it was ready".into()),
        Err(e) => return Err(format!("no `ready` from the guest: {e}")),
    };
    reader
        .get_mut()
        .set_read_timeout(None)
        .map_err(|e| format!("the channel socket: {e}"))?;
    Ok((reader, agent, kernel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A host channel over a socket pair; the test plays the guest.
    fn pair() -> (
        Arc<Channel>,
        UnixStream,
        Arc<AtomicBool>,
        Arc<Mutex<String>>,
    ) {
        let (host, guest) = UnixStream::pair().unwrap();
        let mut g = guest.try_clone().unwrap();
        proto::write_frame(
            &mut g,
            &Msg::Ready {
                agent: "test".into(),
                kernel: "6.1-test".into(),
            },
            &[],
        )
        .unwrap();
        let (reader, agent, kernel) = await_ready(&host, Duration::from_secs(5)).unwrap();
        assert_eq!((agent.as_str(), kernel.as_str()), ("test", "6.1-test"));
        let killed = Arc::new(AtomicBool::new(false));
        let why = Arc::new(Mutex::new(String::new()));
        let (k, w) = (killed.clone(), why.clone());
        let ch = Channel::serve(
            host,
            reader,
            Arc::new(move |reason: &str| {
                *w.lock().unwrap() = reason.to_string();
                k.store(true, Ordering::SeqCst);
            }),
            None,
        );
        (ch, guest, killed, why)
    }

    /// The id of the next `Exec` the host sends the fake guest.
    fn next_exec(guest: &UnixStream) -> u64 {
        let mut r = FrameReader::new(guest.try_clone().unwrap());
        loop {
            if let Some((Msg::Exec { id, .. }, _)) = r.read().unwrap() {
                return id;
            }
        }
    }

    fn wait_for(flag: &AtomicBool) {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !flag.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < until, "the hook was not called");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A connection the host cannot open (its proxy unreachable) is closed
    /// on the guest's side through the channel itself, as the egress relay
    /// does, and the channel goes on serving: the opener runs without the
    /// routes the reader holds.
    #[test]
    fn a_connection_the_host_cannot_open_is_closed_and_the_channel_goes_on() {
        let (host, guest) = UnixStream::pair().unwrap();
        let mut g = guest.try_clone().unwrap();
        proto::write_frame(
            &mut g,
            &Msg::Ready {
                agent: "test".into(),
                kernel: "6.1-test".into(),
            },
            &[],
        )
        .unwrap();
        let (reader, _, _) = await_ready(&host, Duration::from_secs(5)).unwrap();
        let slot: Arc<std::sync::OnceLock<std::sync::Weak<Channel>>> = Arc::default();
        let s = slot.clone();
        let opener: ConnOpener = Arc::new(move |conn| {
            if let Some(ch) = s.get().and_then(std::sync::Weak::upgrade) {
                ch.conn_close(conn);
            }
            None
        });
        let ch = Channel::serve(host, reader, Arc::new(|_: &str| {}), Some(opener));
        let _ = slot.set(Arc::downgrade(&ch));
        guest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut r = FrameReader::new(guest.try_clone().unwrap());
        proto::write_frame(&mut g, &Msg::ConnOpen { conn: 7 }, &[]).unwrap();
        match r.read() {
            Ok(Some((Msg::ConnClose { conn: 7 }, _))) => {}
            other => panic!("the guest's side was not closed: {other:?}"),
        }
        let stat = {
            let ch = ch.clone();
            std::thread::spawn(move || ch.stat("/work/x"))
        };
        let req = match r.read() {
            Ok(Some((Msg::Stat { req, .. }, _))) => req,
            other => panic!("the channel stopped serving: {other:?}"),
        };
        proto::write_frame(&mut g, &Msg::StatReply { req, stat: None }, &[]).unwrap();
        assert!(matches!(stat.join().unwrap(), Ok(None)));
        assert_eq!(ch.ended(), None);
    }

    /// A guest that opens more relayed connections at once than the
    /// protocol allows ends its VM: each would cost the host a socket and
    /// threads.
    #[test]
    fn connections_past_the_cap_end_the_vm() {
        let (host, guest) = UnixStream::pair().unwrap();
        let mut g = guest.try_clone().unwrap();
        proto::write_frame(
            &mut g,
            &Msg::Ready {
                agent: "test".into(),
                kernel: "6.1-test".into(),
            },
            &[],
        )
        .unwrap();
        let (reader, _, _) = await_ready(&host, Duration::from_secs(5)).unwrap();
        let sinks = Arc::new(Mutex::new(Vec::new()));
        let held = sinks.clone();
        let opener: ConnOpener = Arc::new(move |_| {
            let (tx, rx) = mpsc::channel();
            held.lock().unwrap().push(rx);
            Some(tx)
        });
        let killed = Arc::new(AtomicBool::new(false));
        let why = Arc::new(Mutex::new(String::new()));
        let (k, w) = (killed.clone(), why.clone());
        let _ch = Channel::serve(
            host,
            reader,
            Arc::new(move |reason: &str| {
                *w.lock().unwrap() = reason.to_string();
                k.store(true, Ordering::SeqCst);
            }),
            Some(opener),
        );
        for conn in 1..=proto::MAX_CONNS as u64 {
            proto::write_frame(&mut g, &Msg::ConnOpen { conn }, &[]).unwrap();
        }
        // Closing one makes room for another.
        proto::write_frame(&mut g, &Msg::ConnClose { conn: 1 }, &[]).unwrap();
        let next = proto::MAX_CONNS as u64 + 1;
        proto::write_frame(&mut g, &Msg::ConnOpen { conn: next }, &[]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!killed.load(Ordering::SeqCst), "{}", why.lock().unwrap());
        proto::write_frame(&mut g, &Msg::ConnOpen { conn: next + 1 }, &[]).unwrap();
        wait_for(&killed);
        assert!(
            why.lock().unwrap().contains("at once"),
            "{}",
            why.lock().unwrap()
        );
        assert_eq!(sinks.lock().unwrap().len(), proto::MAX_CONNS + 1);
    }

    #[test]
    fn garbage_from_the_guest_ends_its_vm_and_fails_what_waits() {
        let (ch, mut guest, killed, why) = pair();
        let waiting = {
            let ch = ch.clone();
            std::thread::spawn(move || ch.stat("/work/x"))
        };
        std::thread::sleep(Duration::from_millis(50));
        guest.write_all(&[0xff; 64]).unwrap();
        wait_for(&killed);
        assert!(
            why.lock().unwrap().contains("framing"),
            "{}",
            why.lock().unwrap()
        );
        let got = waiting.join().unwrap();
        assert!(
            matches!(got, Err(SandboxError::Unavailable { .. })),
            "{got:?}"
        );
        // Every later call is refused with why, at once.
        let later = ch.stat("/work/y").unwrap_err().to_string();
        assert!(later.contains("the VM is gone"), "{later}");
    }

    #[test]
    fn output_past_its_cap_ends_the_vm() {
        let (ch, mut guest, killed, why) = pair();
        let h = ch
            .exec(
                vec!["/bin/true".into()],
                BTreeMap::new(),
                serde_json::json!({}),
                10,
                None,
                false,
                Duration::from_secs(30),
            )
            .unwrap();
        // Read the guest's side until the Exec arrives, to learn its id.
        let id = next_exec(&guest);
        let chunk = vec![b'x'; proto::MAX_DATA as usize];
        for _ in 0..4 {
            if proto::write_frame(
                &mut guest,
                &Msg::Output {
                    id,
                    stream: proto::Stream::Stdout,
                },
                &chunk,
            )
            .is_err()
            {
                break;
            }
        }
        wait_for(&killed);
        assert!(
            why.lock().unwrap().contains("cap"),
            "{}",
            why.lock().unwrap()
        );
        let out = h.wait();
        assert!(out.is_err(), "{out:?}");
    }

    #[test]
    fn a_message_only_the_host_sends_ends_the_vm() {
        let (_ch, mut guest, killed, why) = pair();
        proto::write_frame(&mut guest, &Msg::Kill { id: 1 }, &[]).unwrap();
        wait_for(&killed);
        assert!(
            why.lock().unwrap().contains("only the host"),
            "{}",
            why.lock().unwrap()
        );
    }

    #[test]
    fn a_read_larger_than_asked_ends_the_vm() {
        let (ch, guest, killed, _) = pair();
        let reading = {
            let ch = ch.clone();
            std::thread::spawn(move || ch.read("/work/f", 4))
        };
        let mut r = FrameReader::new(guest.try_clone().unwrap());
        let req = loop {
            if let Some((Msg::Read { req, .. }, _)) = r.read().unwrap() {
                break req;
            }
        };
        let mut g = guest;
        proto::write_frame(&mut g, &Msg::ReadData { req }, b"0123456789").unwrap();
        wait_for(&killed);
        assert!(reading.join().unwrap().is_err());
    }

    #[test]
    fn output_within_the_cap_is_cut_and_marked() {
        let (ch, mut guest, killed, _) = pair();
        let h = ch
            .exec(
                vec!["/bin/echo".into()],
                BTreeMap::new(),
                serde_json::json!({}),
                4,
                None,
                false,
                Duration::from_secs(30),
            )
            .unwrap();
        let id = next_exec(&guest);
        let out = Msg::Output {
            id,
            stream: proto::Stream::Stdout,
        };
        proto::write_frame(&mut guest, &out, b"hello").unwrap();
        proto::write_frame(
            &mut guest,
            &Msg::Exited {
                id,
                status: proto::Status::Code { code: 3 },
            },
            &[],
        )
        .unwrap();
        let got = h.wait().unwrap();
        assert_eq!(got.stdout, b"hell");
        assert!(got.stdout_truncated);
        assert_eq!(got.status, ExitStatus::Code(3));
        assert!(!killed.load(Ordering::SeqCst));
    }
}
