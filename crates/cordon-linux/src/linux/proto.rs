//! Messages between the owner and the init program, one JSON object per line.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::outcome::Termination;

/// Owner → init, on the plan pipe.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Control {
    /// The plan (always the first line).
    Plan(Box<crate::plan::Plan>),
    /// Right after the plan, to stage 1 or the process-rung init: the cgroup
    /// `tasks` files (v1) to write `0` into before doing anything else.
    /// Empty when the owner has already moved the init (v2).
    Join(Vec<std::path::PathBuf>),
    /// Container rung: the owner has written uid_map/gid_map.
    Mapped,
}

/// Init → owner, on the report pipe.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Report {
    /// Stage 1 has unshared its namespaces and waits for the id maps.
    Unshared,
    /// Every layer is in place; the workload is being started.
    Started,
    /// A setup step failed; nothing of the workload ran.
    Failed { step: String, error: String },
    /// Container rung: the workload (child of PID 1) ended.
    Exited(Termination),
}

pub(crate) fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one message; `Ok(None)` at end of stream.
pub(crate) fn recv<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Owner → warm init, on the control socket (one packet each).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum WarmRequest {
    /// Start a command. Descriptors attached, in order: stdin, stdout,
    /// stderr (none when `tty` is set), then `joins` cgroup files (opened by
    /// the owner) that the new process writes `0` into before anything else.
    Exec {
        id: u64,
        argv: Vec<String>,
        /// The complete environment; nothing is inherited.
        env: std::collections::BTreeMap<String, String>,
        joins: usize,
        /// A terminal of the exec's own devpts instance, of this size, as
        /// the command's stdio and controlling terminal.
        #[serde(default)]
        tty: Option<super::pty::TtySize>,
    },
}

/// Warm init → owner, on the control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum WarmEvent {
    /// Every layer is in place and the command is starting. For an exec
    /// with a `tty`, the terminal's master is attached (the only
    /// descriptor the init ever sends).
    Started { id: u64 },
    /// The command did not start (the reason also went to its stderr).
    Failed { id: u64, error: String },
    /// The command's first process ended.
    Exited { id: u64, termination: Termination },
}

/// Init (stage 1) → owner, once, with one descriptor attached: on the
/// handover socket (one-shot) or as the first packet on the control socket
/// (warm).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Handover {
    /// The TCP listener on `127.0.0.1:port` of the sandbox's network
    /// namespace; the init kept no copy.
    ProxyListener { port: u16 },
}
