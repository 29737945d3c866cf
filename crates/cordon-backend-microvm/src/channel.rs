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

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_sandbox::{
    DirEntry, EventSender, ExecEnd, ExecHandle, ExecStdin, FileRead, FileStat, Killer,
    SandboxError, Stream,
};
use cordon_vm_proto::{self as proto, FrameReader, Msg};

mod convert;
mod route;
#[cfg(test)]
mod tests;
mod watch;

use convert::{guest_error, kind, odd, short};
use route::{lock, read_loop, ExecMsg, ExecState, Routes};
pub use route::{ConnOpener, ConnSink};

/// What a call waits for at most before the VM is taken as hung.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

type Hook = Arc<dyn Fn(&str) + Send + Sync>;

/// A live channel.
pub struct Channel {
    writer: Mutex<UnixStream>,
    routes: Arc<Mutex<Routes>>,
    next: AtomicU64,
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
            r.watches.clear();
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

    /// How many execs run in the guest (their ends not yet come).
    pub fn running_execs(&self) -> usize {
        lock(&self.routes).execs.len()
    }

    /// The next id this channel would give a request.
    pub fn next_id(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Ids from here on start at `first` at least: a channel to a copy of
    /// a saved guest, which may still answer the saving host's requests.
    pub fn skip_ids(&self, first: u64) {
        self.next.fetch_max(first, Ordering::Relaxed);
    }

    /// A fresh request id and the route its replies come back on (data
    /// replies held to `max_data` bytes in all), or why the channel ended.
    /// The caller takes the route down ([`Self::unroute`]) when its call is
    /// over, answered or not.
    fn route(&self, max_data: u64) -> Result<(u64, Receiver<route::Frame>), SandboxError> {
        let req = self.id();
        let (tx, rx) = mpsc::channel();
        let mut r = lock(&self.routes);
        if let Some(why) = &r.ended {
            return Err(unavailable(format!("the VM is gone: {why}")));
        }
        r.calls.insert(req, (tx, max_data));
        Ok((req, rx))
    }

    /// Takes down the route of `req` ([`Self::route`]).
    fn unroute(&self, req: u64) {
        lock(&self.routes).calls.remove(&req);
    }

    /// Parks the channel for a save of the VM: the guest answers `Park`
    /// and then sends nothing; this side sends nothing either while the
    /// [`Parked`] is held (it holds the writer: every other sender waits).
    /// So both directions stand between frames. Dropped, it unparks.
    pub fn park(&self) -> Result<Parked<'_>, SandboxError> {
        let (req, rx) = self.route(0)?;
        let mut w = lock(&self.writer);
        let answered = proto::write_frame(&mut *w, &Msg::Park { req }, &[])
            .map_err(|e| unavailable(format!("the VM's channel: {e}")))
            .and_then(|()| match rx.recv_timeout(CALL_TIMEOUT) {
                Ok((Msg::Done { .. }, _)) => Ok(()),
                Ok((other, _)) => Err(odd(&other)),
                Err(_) => Err(unavailable(format!(
                    "the VM did not park within {} s",
                    CALL_TIMEOUT.as_secs()
                ))),
            });
        self.unroute(req);
        match answered {
            Ok(()) => Ok(Parked { w: Some(w) }),
            Err(e) => {
                // It may have parked after all: let it go on.
                let _ = proto::write_frame(&mut *w, &Msg::Unpark { restored: false }, &[]);
                Err(e)
            }
        }
    }

    /// Sends `msg` (built with a fresh request id) and waits for the
    /// replies that carry that id, until one `is_last` says it is the end.
    fn call(
        &self,
        make: impl FnOnce(u64) -> Msg,
        data: &[u8],
        max_data: u64,
        each: impl FnMut(Msg, Vec<u8>) -> Result<bool, SandboxError>,
    ) -> Result<(), SandboxError> {
        self.call_writing(make, data, &[], max_data, each)
    }

    /// [`Self::call`], the request followed by `bytes` in `WriteData`
    /// frames.
    fn call_writing(
        &self,
        make: impl FnOnce(u64) -> Msg,
        data: &[u8],
        bytes: &[u8],
        max_data: u64,
        mut each: impl FnMut(Msg, Vec<u8>) -> Result<bool, SandboxError>,
    ) -> Result<(), SandboxError> {
        let (req, rx) = self.route(max_data)?;
        let done = (|| {
            self.send(&make(req), data)?;
            for chunk in bytes.chunks(proto::MAX_DATA as usize) {
                self.send(&Msg::WriteData { req }, chunk)?;
            }
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
        self.unroute(req);
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

    /// Has the guest place the sandbox's trust of `ca_pem` at `dir` (a
    /// new directory in the guest), its bundle beginning with the system
    /// bundle of the image at `image_root` in the guest; before `setup`.
    pub fn trust(&self, dir: &str, image_root: &str, ca_pem: &str) -> Result<(), SandboxError> {
        self.call(
            |req| Msg::Trust {
                req,
                dir: dir.to_string(),
                image_root: image_root.to_string(),
                ca_pem: ca_pem.to_string(),
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
        let (req, rx) = self.route(0)?;
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
        self.unroute(req);
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

    /// One operation of the files API, done in the guest by its agent
    /// (the same confined code as a host work dir's); a write's bytes go
    /// in `WriteData` frames after it.
    pub fn files(
        &self,
        op: &cordon_sandbox::FileOp,
    ) -> Result<cordon_sandbox::FileAnswer, SandboxError> {
        let failed = |reason: String| SandboxError::Failed {
            operation: "files",
            reason,
        };
        let mut head = op.clone();
        let bytes = match &mut head {
            cordon_sandbox::FileOp::Write { data, .. } => std::mem::take(data),
            _ => Vec::new(),
        };
        if bytes.len() as u64 > proto::MAX_FILE {
            return Err(SandboxError::Refused {
                reason: format!(
                    "the write is {} bytes; one written into a microvm sandbox is at most {} bytes",
                    bytes.len(),
                    proto::MAX_FILE
                ),
                rules: Vec::new(),
            });
        }
        let head = serde_json::to_value(&head).map_err(|e| failed(e.to_string()))?;
        let mut json = Vec::new();
        self.call_writing(
            |req| Msg::FilesOp {
                req,
                op: head,
                size: bytes.len() as u64,
            },
            &[],
            &bytes,
            proto::MAX_FILES_ANSWER,
            |m, data| match m {
                Msg::FilesData { .. } => {
                    json.extend_from_slice(&data);
                    Ok(false)
                }
                Msg::FilesEnd { .. } => Ok(true),
                other => Err(odd(&other)),
            },
        )?;
        serde_json::from_slice(&json).map_err(|e| failed(format!("the guest's answer: {e}")))
    }

    /// Starts a watch in the guest: its events arrive on the returned
    /// source once the agent has it running (an `Error` answers one that
    /// cannot start).
    pub fn watch(
        self: &Arc<Self>,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        let req = self.id();
        let (route, source) = watch::pair(req, self);
        {
            let mut r = lock(&self.routes);
            if let Some(why) = &r.ended {
                return Err(unavailable(format!("the VM is gone: {why}")));
            }
            r.watches.insert(req, route);
        }
        let sent = self.send(
            &Msg::WatchStart {
                req,
                path: path.to_string(),
                recursive,
            },
            &[],
        );
        if let Err(e) = sent {
            lock(&self.routes).watches.remove(&req);
            return Err(e);
        }
        Ok(Box::new(source))
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

    /// Opens connection `conn` (a [`proto::HOST_CONN`] id from
    /// [`Channel::host_conn`]) to `127.0.0.1:port` in the guest's sandbox
    /// (a forwarded port): `sink` takes what the guest sends on it (from
    /// before the guest answers: its bytes may come first). Refused, with
    /// the guest's reason, when nothing listens there.
    pub fn port_open(&self, conn: u64, port: u16, sink: ConnSink) -> Result<(), SandboxError> {
        {
            let mut r = lock(&self.routes);
            if r.conns.len() >= proto::MAX_CONNS {
                return Err(unavailable(format!(
                    "the sandbox has {} connections open already; close one first",
                    proto::MAX_CONNS
                )));
            }
            r.conns.insert(conn, sink);
        }
        let done = self.call(
            |req| Msg::PortOpen { req, conn, port },
            &[],
            0,
            |m, _| match m {
                Msg::Done { .. } => Ok(true),
                other => Err(odd(&other)),
            },
        );
        if done.is_err() {
            lock(&self.routes).conns.remove(&conn);
        }
        done
    }

    /// A connection id of the host's own ([`proto::HOST_CONN`] set).
    pub fn host_conn(&self) -> u64 {
        proto::HOST_CONN | self.id()
    }

    /// The host stops sending on `conn`; what the guest sends still comes
    /// (a half close), until its own close.
    pub fn conn_half_close(&self, conn: u64) {
        let _ = self.send(&Msg::ConnClose { conn }, &[]);
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

/// A parked channel ([`Channel::park`]): holds its writer.
pub struct Parked<'a> {
    w: Option<std::sync::MutexGuard<'a, UnixStream>>,
}

impl Parked<'_> {
    /// Lets the guest send again.
    pub fn unpark(mut self) -> Result<(), SandboxError> {
        self.send_unpark()
    }

    fn send_unpark(&mut self) -> Result<(), SandboxError> {
        match self.w.take() {
            Some(mut w) => proto::write_frame(&mut *w, &Msg::Unpark { restored: false }, &[])
                .map_err(|e| unavailable(format!("the VM's channel: {e}"))),
            None => Ok(()),
        }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        let _ = self.send_unpark();
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
        Ok(Some((
            Msg::Ready {
                agent,
                kernel,
                proto,
            },
            d,
        ))) if d.is_empty() => {
            if proto != proto::PROTOCOL {
                return Err(format!(
                    "the guest agent ({agent}) speaks protocol {proto}, this cordon speaks {}: the agent was built from other sources than this cordon; rebuild it with this cordon: {}",
                    proto::PROTOCOL,
                    crate::artifacts::BUILD_AGENT
                ));
            }
            (agent, kernel)
        }
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
