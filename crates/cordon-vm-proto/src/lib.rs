//! The host ↔ guest channel of the microvm backend.
//!
//! One virtio-serial port (`cordon.ctl`) carries every message between
//! cordon on the host and its guest agent (`cordon-vm-agent`, PID 1 in the
//! VM). The port is a byte stream, so messages are framed:
//!
//! ```text
//! u32 BE header_len | u32 BE data_len | header (JSON of Msg) | data (raw bytes)
//! ```
//!
//! The header is a [`Msg`]; the data is the payload of the few kinds that
//! carry bytes ([`Msg::carries_data`]): stdin, output, file chunks, relayed
//! connection bytes. Both lengths are checked against [`MAX_HEADER`] and
//! [`MAX_DATA`] before anything is allocated, so a hostile peer (the guest
//! is untrusted: it runs the workload's kernel) cannot make the host
//! allocate more than one bounded frame at a time.
//!
//! [`write_frame`] writes one frame with a single `write_all`, so writers
//! that share a channel under a `Mutex` stay framed. [`FrameReader`] reads
//! frames: `Ok(None)` at a clean end between frames, [`FrameError`]
//! otherwise. After an error the stream is out of step and the reader
//! refuses to read on; the peer is then to be dropped.
//!
//! The protocol has a number, [`PROTOCOL`], which the agent names in its
//! `Ready`; the host refuses an agent that names another (an agent from
//! before the protocol was numbered names none, read as 1), before it
//! sends anything the agent might not know.
//!
//! Requests carry an id chosen by the host (`req` for setup and file
//! requests, `id` for execs, `conn` for relayed connections) that every
//! reply names, so requests can be outstanding concurrently.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The protocol this crate speaks: raised whenever a message is added or
/// changed in a way the other side would refuse. 2: `Trust`. 3: `Setup`
/// makes the plan's secrets directory, and writes go there. 4: `FilesOp`
/// (the files API) and the watch (`WatchStart`, `WatchEvent`, `WatchEnd`,
/// `WatchStop`). 5: `PortOpen` (a connection the host opens to a port
/// the workload listens on). 6: `Park` and `Unpark` (a guest saved with
/// its memory, and a copy of it restored).
pub const PROTOCOL: u32 = 6;

/// What a `Ready` without `proto` means: an agent from before the protocol
/// was numbered.
fn unnumbered() -> u32 {
    1
}

/// The CA alone, as `Trust` leaves it in its directory (beside
/// `ca-certificates.crt`, the bundle, `cordon_linux::TRUST_BUNDLE`).
pub const TRUST_CA: &str = "egress-ca.pem";

/// The largest header (JSON) a frame may have, in bytes.
pub const MAX_HEADER: u32 = 64 * 1024;
/// The largest data a frame may carry, in bytes.
pub const MAX_DATA: u32 = 256 * 1024;
/// The largest file the host writes in with one `WriteStart`, in bytes.
pub const MAX_FILE: u64 = 64 * 1024 * 1024;
/// The most entries one `List` answers with (over all its `ListReply`
/// frames); a larger directory is refused.
pub const MAX_LIST: usize = 10_000;
/// The largest answer to one `FilesOp` (its JSON, over all its
/// `FilesData` frames): a 16 MiB read, base64, with room to spare.
pub const MAX_FILES_ANSWER: u64 = 32 * 1024 * 1024;
/// The most watches open at once; a `WatchStart` past it is refused.
pub const MAX_WATCHES: usize = 16;
/// The most relayed connections open at once. The guest closes one past
/// it as it is accepted (no `ConnOpen`); a `ConnOpen` past it breaks the
/// protocol. A connection counts from its `ConnOpen` until a `ConnClose`.
pub const MAX_CONNS: usize = 256;
/// The bit every connection id the host chooses (`PortOpen`) has set, and
/// none the guest chooses (`ConnOpen`) has: the two never collide.
pub const HOST_CONN: u64 = 1 << 63;

/// One message: the header of a frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case", deny_unknown_fields)]
pub enum Msg {
    // ---- guest → host, once, first ----
    /// The agent is up and serving.
    Ready {
        /// The agent's version.
        agent: String,
        /// The guest kernel's release (`uname -r`).
        kernel: String,
        /// The protocol the agent speaks ([`PROTOCOL`]).
        #[serde(default = "unnumbered")]
        proto: u32,
    },

    // ---- sandbox setup ----
    /// Host → guest: make the work dir and start the warm sandbox. `plan`
    /// is a `cordon_linux::PlanSpec` (container rung, empty argv) as JSON.
    /// Answered by `Done` or `Error`.
    Setup {
        req: u64,
        plan: serde_json::Value,
        /// The size of the work dir's filesystem.
        disk_bytes: u64,
    },

    /// Host → guest, before `Setup`: the sandbox is to trust `ca_pem`
    /// (its egress proxy's CA, one or more PEM certificates). The agent
    /// makes the directory `dir` (absolute; new, its parents made when
    /// absent) holding the bundle `ca-certificates.crt` (the system bundle
    /// of the image at `image_root`, `/etc/ssl/certs/ca-certificates.crt`
    /// resolved inside it, then the CA) and the CA alone ([`TRUST_CA`]),
    /// read-only for all. The plan `Setup` then hands over must name `dir`
    /// as its `trust_dir`, and only then may one name a `trust_dir`.
    /// Answered by `Done` or `Error`.
    Trust {
        req: u64,
        dir: String,
        image_root: String,
        ca_pem: String,
    },

    // ---- commands ----
    /// Host → guest: run a command in the sandbox. `bounds` is a
    /// `cordon_linux::Bounds` as JSON. Answered by `Output`s then
    /// `Exited`, or by `ExecFailed` (which may follow `Output`s: the
    /// command did not start, and said why on its stderr). Its stdin stays
    /// open until `StdinEnd`: send that at once for a command without
    /// input. `argv[0]` is absolute; `env` is the whole environment.
    Exec {
        id: u64,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        bounds: serde_json::Value,
        /// Output beyond this (per stream, plus one byte to show that it
        /// was cut) is drained and dropped by the guest.
        max_output_bytes: u64,
    },
    /// Host → guest: bytes (the data) for the exec's stdin.
    Stdin { id: u64 },
    /// Host → guest: the exec's stdin ends.
    StdinEnd { id: u64 },
    /// Host → guest: kill the exec's command (its whole tree).
    Kill { id: u64 },
    /// Guest → host: bytes (the data) the exec's command wrote.
    Output { id: u64, stream: Stream },
    /// Guest → host: the exec's command ended; no frame names `id` after
    /// this.
    Exited { id: u64, status: Status },
    /// Guest → host: the exec's command did not start.
    ExecFailed { id: u64, error: String },

    // ---- files (paths are absolute guest paths) ----
    /// Host → guest: a file of `size` bytes follows in `WriteData` frames
    /// (none when `size` is 0); `size` ≤ [`MAX_FILE`]. Answered by `Done`
    /// or `Error` once `size` bytes arrived.
    WriteStart {
        req: u64,
        path: String,
        mode: u32,
        size: u64,
    },
    /// Host → guest: the next bytes (the data) of the file `req` writes.
    WriteData { req: u64 },
    /// Host → guest: `lstat`. Answered by `StatReply` or `Error`.
    Stat { req: u64, path: String },
    /// Host → guest: read a regular file, at most `max` bytes plus one.
    /// Answered by `ReadData`s then `ReadEnd`, or by `Error`.
    Read { req: u64, path: String, max: u64 },
    /// Host → guest: list a directory. Answered by `ListReply`s (the last
    /// with `more: false`) or by `Error`.
    List { req: u64, path: String },
    /// Host → guest: one operation of the files API, `op` a
    /// `cordon_sandbox::FileOp` as JSON (paths as the workload sees them),
    /// whose write carries no bytes in it: its `size` bytes follow in
    /// `WriteData` frames (none when 0; `size` ≤ [`MAX_FILE`]). Answered
    /// by `FilesData` frames (the JSON of a `cordon_sandbox::FileAnswer`,
    /// at most [`MAX_FILES_ANSWER`] bytes) then `FilesEnd`, or by `Error`.
    FilesOp {
        req: u64,
        op: serde_json::Value,
        size: u64,
    },
    /// Guest → host: the next bytes (the data) of a `FilesOp`'s answer.
    FilesData { req: u64 },
    /// Guest → host: the `FilesOp`'s answer is complete.
    FilesEnd { req: u64 },
    /// Host → guest: watch the directory `path` (as the workload sees it;
    /// beneath it too when `recursive`), at most [`MAX_WATCHES`] at once.
    /// Answered by `WatchEvent`s while it runs, then one `WatchEnd`; or by
    /// `Error` when it cannot start.
    WatchStart {
        req: u64,
        path: String,
        recursive: bool,
    },
    /// Host → guest: stop the watch `req` (answered by its `WatchEnd`).
    WatchStop { req: u64 },
    /// Guest → host: one event of the watch `req`, a
    /// `cordon_sandbox::WatchEvent` as JSON.
    WatchEvent { req: u64, event: serde_json::Value },
    /// Guest → host: the watch `req` is over, and why; nothing names it
    /// after this.
    WatchEnd { req: u64, reason: String },
    /// Guest → host: the request succeeded.
    Done { req: u64 },
    /// Guest → host: `None` when nothing is at the path.
    StatReply { req: u64, stat: Option<WireStat> },
    /// Guest → host: the next bytes (the data) of the file `req` reads.
    ReadData { req: u64 },
    /// Guest → host: the read is complete. `size` is the opened file's
    /// size (`fstat`); the `ReadData` before it carried at most `max + 1`
    /// bytes, none when `size` was already over `max` (the host's
    /// `FileRead { bytes, size }`).
    ReadEnd { req: u64, size: u64 },
    /// Guest → host: some of a directory's entries; more `ListReply`
    /// frames follow while `more` is set (a header is bounded, a directory
    /// is not: [`list_replies`] splits a listing).
    ListReply {
        req: u64,
        entries: Vec<WireEntry>,
        more: bool,
    },
    /// Guest → host: the request `req` failed (`Setup` too, with an
    /// empty `path`). `path` is the one the error names; `message` is the
    /// detail the host's `SandboxError` variant carries: `path_refused`'s
    /// reason, `not_regular_file`'s kind found, `failed`'s, `refused`'s
    /// and `unavailable`'s reason; the whole message for `not_found`.
    Error {
        req: u64,
        kind: ErrKind,
        path: String,
        message: String,
    },

    // ---- relayed connections ----
    /// Guest → host: the workload opened a connection to the sandbox's
    /// proxy port; the host connects it to the egress proxy.
    ConnOpen { conn: u64 },
    /// Host → guest: connect to `127.0.0.1:port` in the sandbox's network
    /// namespace (a forwarded port); `Done { req }` once connected (then
    /// it is connection `conn`, relayed as the guest's own are), `Error`
    /// otherwise. The host's `conn` ids have [`HOST_CONN`] set, the
    /// guest's never do.
    PortOpen { req: u64, conn: u64, port: u16 },
    /// Both ways: bytes (the data) of the connection.
    ConnData { conn: u64 },
    /// Both ways: the sender's side of the connection is closed.
    ConnClose { conn: u64 },

    /// Host → guest: sync and power off.
    Shutdown {},

    // ---- saving the guest with its memory ----
    /// Host → guest: answer `Done` and then send nothing until `Unpark`
    /// (every frame the guest sends after `Done` waits), so that both
    /// directions stand between frames while the host saves the VM. The
    /// host itself sends nothing after `Park` but `Unpark`. While parked,
    /// the end of the channel is not the end of the session: the host
    /// that restores a copy of the VM connects anew.
    Park { req: u64 },
    /// Host → guest: send again. `restored`: this is a copy of the parked
    /// guest, made from its saved memory by a new host, which knows none
    /// of the requests in flight when it was parked (their frames go on
    /// and are dropped there, as every host drops ids it does not know);
    /// the guest then announces itself with `Ready` again, as at a boot.
    Unpark { restored: bool },
}

impl Msg {
    /// Whether frames of this kind carry data; a kind that does not, sent
    /// with data, is malformed.
    pub fn carries_data(&self) -> bool {
        matches!(
            self,
            Msg::Stdin { .. }
                | Msg::Output { .. }
                | Msg::WriteData { .. }
                | Msg::ReadData { .. }
                | Msg::FilesData { .. }
                | Msg::ConnData { .. }
        )
    }

    /// The checks a frame's header must pass beyond parsing: data only on
    /// a kind that carries it, and the protocol's bounds.
    pub fn check(&self, data_len: usize) -> Result<(), String> {
        if data_len > 0 && !self.carries_data() {
            return Err(format!(
                "a `{}` frame carries no data, this one has {data_len} bytes",
                self.kind()
            ));
        }
        match self {
            Msg::WriteStart { size, .. } | Msg::FilesOp { size, .. } if *size > MAX_FILE => Err(
                format!("a file written in is at most {MAX_FILE} bytes, this one announces {size}"),
            ),
            Msg::ListReply { entries, .. } if entries.len() > MAX_LIST => Err(format!(
                "a listing has at most {MAX_LIST} entries, this frame has {}",
                entries.len()
            )),
            _ => Ok(()),
        }
    }

    /// The kind's name, as on the wire (`t`).
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Ready { .. } => "ready",
            Msg::Setup { .. } => "setup",
            Msg::Trust { .. } => "trust",
            Msg::Exec { .. } => "exec",
            Msg::Stdin { .. } => "stdin",
            Msg::StdinEnd { .. } => "stdin_end",
            Msg::Kill { .. } => "kill",
            Msg::Output { .. } => "output",
            Msg::Exited { .. } => "exited",
            Msg::ExecFailed { .. } => "exec_failed",
            Msg::WriteStart { .. } => "write_start",
            Msg::WriteData { .. } => "write_data",
            Msg::Stat { .. } => "stat",
            Msg::Read { .. } => "read",
            Msg::List { .. } => "list",
            Msg::FilesOp { .. } => "files_op",
            Msg::FilesData { .. } => "files_data",
            Msg::FilesEnd { .. } => "files_end",
            Msg::WatchStart { .. } => "watch_start",
            Msg::WatchStop { .. } => "watch_stop",
            Msg::WatchEvent { .. } => "watch_event",
            Msg::WatchEnd { .. } => "watch_end",
            Msg::Done { .. } => "done",
            Msg::StatReply { .. } => "stat_reply",
            Msg::ReadData { .. } => "read_data",
            Msg::ReadEnd { .. } => "read_end",
            Msg::ListReply { .. } => "list_reply",
            Msg::Error { .. } => "error",
            Msg::ConnOpen { .. } => "conn_open",
            Msg::PortOpen { .. } => "port_open",
            Msg::ConnData { .. } => "conn_data",
            Msg::ConnClose { .. } => "conn_close",
            Msg::Shutdown {} => "shutdown",
            Msg::Park { .. } => "park",
            Msg::Unpark { .. } => "unpark",
        }
    }
}

/// Which of a command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a command ended (`cordon_linux::Outcome`, as the host reports it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case", deny_unknown_fields)]
pub enum Status {
    /// It exited with this code.
    Code { code: i32 },
    /// A signal ended it.
    Signal { signal: i32 },
    /// Its wall-clock bound ran out.
    TimedOut,
    /// Another bound ended it (`memory`, `processes`, `cpu`, …).
    Bound { bound: String },
}

/// What is at a path (`lstat`: a link is not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// A `Stat` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireStat {
    pub kind: Kind,
    /// `None` when the guest could not tell.
    pub size: Option<u64>,
    pub mode: u32,
}

/// One entry of a `List` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireEntry {
    pub name: String,
    pub kind: Kind,
}

/// Why a request failed (the host's `SandboxError` variants that a guest
/// can name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrKind {
    NotFound,
    PathRefused,
    NotRegularFile,
    Unavailable,
    Failed,
    Refused,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading the channel failed: {0}")]
    Io(#[from] io::Error),
    #[error("a frame header of {0} bytes is larger than the {MAX_HEADER} allowed")]
    HeaderTooLarge(u32),
    #[error("a frame's data of {0} bytes is larger than the {MAX_DATA} allowed")]
    DataTooLarge(u32),
    #[error("a malformed frame: {0}")]
    Malformed(String),
    #[error("the channel ended in the middle of a frame")]
    Truncated,
}

/// Writes one frame: `msg` as the header, `data` as its data. Refuses
/// (`InvalidInput`, nothing written) data larger than [`MAX_DATA`], a
/// header larger than [`MAX_HEADER`], and data on a kind that carries none.
/// The frame goes out in one `write_all`, then the writer is flushed.
pub fn write_frame(w: &mut impl Write, msg: &Msg, data: &[u8]) -> io::Result<()> {
    let frame = encode(msg, data)?;
    w.write_all(&frame)?;
    w.flush()
}

/// One frame's bytes (see [`write_frame`]).
pub fn encode(msg: &Msg, data: &[u8]) -> io::Result<Vec<u8>> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let data_len = u32::try_from(data.len())
        .ok()
        .filter(|n| *n <= MAX_DATA)
        .ok_or_else(|| invalid(format!("{} bytes of data in one frame", data.len())))?;
    msg.check(data.len()).map_err(invalid)?;
    let header = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let header_len = u32::try_from(header.len())
        .ok()
        .filter(|n| *n <= MAX_HEADER)
        .ok_or_else(|| {
            invalid(format!(
                "a `{}` header of {} bytes",
                msg.kind(),
                header.len()
            ))
        })?;
    let mut frame = Vec::with_capacity(8 + header.len() + data.len());
    frame.extend_from_slice(&header_len.to_be_bytes());
    frame.extend_from_slice(&data_len.to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(data);
    Ok(frame)
}

/// A listing as `ListReply` frames, each header within [`MAX_HEADER`]
/// (the last has `more: false`; an empty listing is one frame).
pub fn list_replies(req: u64, entries: Vec<WireEntry>) -> Vec<Msg> {
    // A budget well under MAX_HEADER leaves room for the frame's own
    // fields; an entry's encoded size is measured, not guessed (a name of
    // control characters grows sixfold as JSON).
    const BUDGET: usize = (MAX_HEADER as usize) / 2;
    let mut out = Vec::new();
    let mut chunk = Vec::new();
    let mut used = 0;
    for e in entries {
        let size = serde_json::to_vec(&e).map_or(BUDGET, |b| b.len() + 1);
        if !chunk.is_empty() && used + size > BUDGET {
            out.push(std::mem::take(&mut chunk));
            used = 0;
        }
        used += size;
        chunk.push(e);
    }
    out.push(chunk);
    let last = out.len() - 1;
    out.into_iter()
        .enumerate()
        .map(|(i, entries)| Msg::ListReply {
            req,
            entries,
            more: i != last,
        })
        .collect()
}

/// Reads frames from a byte stream (wrap a raw descriptor in a
/// `BufReader`; the reader reads exactly one frame's bytes per frame).
pub struct FrameReader<R: Read> {
    r: R,
    failed: bool,
}

impl<R: Read> FrameReader<R> {
    pub fn new(r: R) -> Self {
        FrameReader { r, failed: false }
    }

    /// The next frame; `Ok(None)` when the stream ends cleanly between
    /// frames. After an error every further call fails too: the stream is
    /// out of step.
    pub fn read(&mut self) -> Result<Option<(Msg, Vec<u8>)>, FrameError> {
        if self.failed {
            return Err(FrameError::Malformed(
                "the channel is out of step after an earlier error".into(),
            ));
        }
        let got = self.read_one();
        if got.is_err() {
            self.failed = true;
        }
        got
    }

    fn read_one(&mut self) -> Result<Option<(Msg, Vec<u8>)>, FrameError> {
        let mut lens = [0u8; 8];
        let mut have = 0;
        while have < lens.len() {
            match self.r.read(&mut lens[have..]) {
                Ok(0) if have == 0 => return Ok(None),
                Ok(0) => return Err(FrameError::Truncated),
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
        let header_len = u32::from_be_bytes([lens[0], lens[1], lens[2], lens[3]]);
        let data_len = u32::from_be_bytes([lens[4], lens[5], lens[6], lens[7]]);
        // INVARIANT: both lengths are checked before anything is allocated.
        if header_len > MAX_HEADER {
            return Err(FrameError::HeaderTooLarge(header_len));
        }
        if data_len > MAX_DATA {
            return Err(FrameError::DataTooLarge(data_len));
        }
        let header = self.exact(header_len)?;
        let data = self.exact(data_len)?;
        let msg: Msg = serde_json::from_slice(&header)
            .map_err(|e| FrameError::Malformed(format!("header: {e}")))?;
        msg.check(data.len()).map_err(FrameError::Malformed)?;
        Ok(Some((msg, data)))
    }

    fn exact(&mut self, len: u32) -> Result<Vec<u8>, FrameError> {
        let mut buf = vec![0u8; len as usize];
        self.r.read_exact(&mut buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                FrameError::Truncated
            } else {
                FrameError::Io(e)
            }
        })?;
        Ok(buf)
    }

    /// The stream underneath.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.r
    }
}

/// The body of the `vm_frames` fuzz target (`fuzz/`): frames are decoded
/// from `bytes` until the end or an error; none panics, and every decoded
/// frame encodes to a frame that decodes to the same message and data,
/// byte for byte on the second round.
#[doc(hidden)]
pub fn fuzz_decode(bytes: &[u8]) {
    let mut frames = FrameReader::new(bytes);
    while let Ok(Some((msg, data))) = frames.read() {
        // A decoded header may encode larger than it came (`1e5` as
        // `100000.0`), so an encoding refused for size is not a finding.
        let Ok(once) = encode(&msg, &data) else {
            continue;
        };
        let back = match FrameReader::new(&once[..]).read() {
            Ok(Some(f)) => f,
            other => panic!("an encoded frame does not decode: {other:?}"),
        };
        assert_eq!(back.1, data, "data changed on its way round");
        let twice = encode(&back.0, &back.1).unwrap_or_default();
        assert_eq!(once, twice, "a frame changed on its way round");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
