//! What travels between an acquirer, a keeper and its clients: the
//! keeper's brief (on its stdin, as JSON) and the requests and replies on
//! its socket (`SOCK_SEQPACKET`, one JSON message each, descriptors with
//! `SCM_RIGHTS`). Every shape refuses unknown fields.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_sandbox::{
    BackendSetup, ErrorKind, ExitStatus, Limits, Provenance, SandboxError, TtySize,
};
use serde::{Deserialize, Serialize};

use crate::state::KeyRecord;

/// Everything a keeper needs to build its sandbox: which registered backend,
/// the setup it is built from, and the typed provenance and limits the
/// acquirer's router decided, so the keeper parses no spec and re-derives
/// nothing. It loads the policy once (from `policy_file`) and refuses to
/// serve if its digest is not the acquirer's.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// [`cordon_sandbox::wire::WIRE_VERSION`]; another is refused.
    pub version: u32,
    pub state_dir: PathBuf,
    pub handle: String,
    pub key: KeyRecord,
    pub owner: String,
    /// A name in the keeper's registry.
    pub backend: String,
    pub setup: BackendSetup,
    /// `None`: `cordon:default`.
    pub policy_file: Option<PathBuf>,
    pub provenance: Provenance,
    pub limits: Limits,
    pub idle_timeout: u64,
    pub max_age: u64,
    /// Paused, not disposed of, when idle (and then, idle as long again,
    /// snapshotted into the store named here and disposed of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_idle_pause: Option<IdlePause>,
    /// The spec's placeholder secrets with their values, for the
    /// sandbox's egress proxy (on the keeper's stdin, never on disk).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokered: Vec<WireBrokered>,
}

/// What a keeper does when its sandbox is idle, instead of disposing of
/// it: pause it; idle as long again, take a snapshot of its files into
/// `snapshots` (when set: a store dir, with its per-scope quota), then
/// dispose of it. The snapshot is restorable later (`up --from`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdlePause {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<PathBuf>,
    #[serde(default)]
    pub quota_per_scope: u64,
}

/// A brokered secret on the keeper's brief.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireBrokered {
    pub name: String,
    pub placeholder: String,
    pub value: Vec<u8>,
    pub to: Vec<String>,
}

impl std::fmt::Debug for WireBrokered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireBrokered")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

impl WireBrokered {
    pub fn of(b: &cordon_sandbox::Brokered) -> WireBrokered {
        WireBrokered {
            name: b.name.to_string(),
            placeholder: b.placeholder.clone(),
            value: b.value.expose().to_vec(),
            to: b.to.clone(),
        }
    }

    pub fn into_brokered(self) -> Result<cordon_sandbox::Brokered, String> {
        Ok(cordon_sandbox::Brokered {
            name: cordon_sandbox::SecretName::parse(&self.name)
                .map_err(|e| format!("a brokered secret's name: {e}"))?,
            placeholder: self.placeholder,
            value: cordon_sandbox::SecretValue::new(self.value),
            to: self.to,
        })
    }
}

/// Client → keeper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Request {
    Ping,
    /// Descriptors attached: stdin (read end), stdout and stderr (write
    /// ends). The keeper copies between them and the exec; when the
    /// connection hangs up before the exec ended, the exec is killed.
    Exec {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        timeout_secs: u64,
        /// On a terminal of the sandbox's own of this size (output all on
        /// stdout).
        #[serde(default)]
        tty: Option<TtySize>,
    },
    /// On an exec's connection, after `Exec`: its terminal's new size.
    Resize {
        size: TtySize,
    },
    Dispose,
    /// Files, for a sandbox whose work dir is not a host directory (a
    /// microVM's lives in its guest): one descriptor attached, readable,
    /// holding exactly `len` bytes (at most [`MAX_FILE_BYTES`]).
    WriteFile {
        path: String,
        mode: u32,
        len: u64,
    },
    Stat {
        path: String,
    },
    /// One descriptor attached, writable: the keeper writes what it read
    /// there (at most `max + 1` bytes) and answers [`Reply::Read`].
    ReadFile {
        path: String,
        max: u64,
    },
    /// One descriptor attached, writable: the keeper writes the listing
    /// there as JSON and answers [`Reply::Listed`].
    ListDir {
        path: String,
    },
    /// Freeze every process of the sandbox (`true`) or thaw them.
    Pause {
        paused: bool,
    },
    /// The workspace's changes (`apply: None`), or apply those at or
    /// beneath the paths given (`Some`; empty: every one). One descriptor
    /// attached, writable: the keeper writes the changes (or the apply's
    /// report) there as JSON and answers [`Reply::Workspace`].
    Workspace {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        apply: Option<Vec<String>>,
    },
    /// One operation of the files API: one descriptor attached, holding
    /// the operation as JSON (`len` bytes, at most [`MAX_FILES_JSON`]);
    /// the keeper writes the answer there in its place and answers
    /// [`Reply::Files`].
    Files {
        len: u64,
    },
    /// Watch the directory `path` (beneath it too when `recursive`): one
    /// descriptor attached, a pipe's writing end, where the keeper writes
    /// the events, one JSON object a line (a `cordon_sandbox::WatchEvent`,
    /// or `{"event": "ended", "reason"}` last), until the watch ends or the
    /// client closes its end; answered [`Reply::Watching`] first.
    Watch {
        path: String,
        recursive: bool,
    },
    /// Open a connection to a port of the sandbox for `caller`, reached at
    /// `listen` on the host: decided by the policy's ingress surface in
    /// the keeper's guard, answered [`Reply::PortOpen`] with the connected
    /// socket attached.
    Port {
        port: u16,
        listen: String,
        caller: cordon_policy::Identity,
    },
    /// Save every process of the sandbox with its memory into `into` (a
    /// directory the client made, empty, root's), ending them there:
    /// answered [`Reply::Checkpointed`].
    Checkpoint {
        into: std::path::PathBuf,
    },
    /// Copy the sandbox's files into `into/tree` and `into/tmp` for a
    /// snapshot (a backend whose files the host cannot open): answered
    /// [`Reply::FilesCopied`].
    CopyFilesOut {
        into: std::path::PathBuf,
        room: u64,
        max_entries: usize,
    },
    /// Replace the sandbox's egress allowlist (`host[:port]` entries, read
    /// by the keeper): answered [`Reply::Egress`]. A list that does not
    /// load, or that the policy denies for the sandbox's identity, closes
    /// its egress and is answered with the error saying so.
    Egress {
        allow: Vec<String>,
        /// Set when the client's own replacement did not load (why: a bad
        /// entry, a policy deny): egress is closed with this reason, in
        /// its audit line and its refusals, and `allow` is not read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        closed: Option<String>,
        /// Who asked, for the egress audit log.
        by: String,
    },
}

/// The most bytes one file written through a keeper may hold.
pub(crate) const MAX_FILE_BYTES: u64 = 64 << 20;

/// The most bytes of JSON one files API operation may be on the way in (a
/// write's contents, base64: four thirds of [`MAX_FILE_BYTES`], and room).
pub(crate) const MAX_FILES_JSON: u64 = MAX_FILE_BYTES / 3 * 4 + (1 << 20);

/// A `stat` that did not follow links, on the wire.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireStat {
    pub kind: WireKind,
    pub size: Option<u64>,
    pub mode: u32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One directory entry, on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireEntry {
    pub name: String,
    pub kind: WireKind,
}

pub(crate) fn kind_to_wire(k: cordon_sandbox::FileKind) -> WireKind {
    match k {
        cordon_sandbox::FileKind::File => WireKind::File,
        cordon_sandbox::FileKind::Dir => WireKind::Dir,
        cordon_sandbox::FileKind::Symlink => WireKind::Symlink,
        cordon_sandbox::FileKind::Other => WireKind::Other,
    }
}

pub(crate) fn kind_from_wire(k: WireKind) -> cordon_sandbox::FileKind {
    match k {
        WireKind::File => cordon_sandbox::FileKind::File,
        WireKind::Dir => cordon_sandbox::FileKind::Dir,
        WireKind::Symlink => cordon_sandbox::FileKind::Symlink,
        WireKind::Other => cordon_sandbox::FileKind::Other,
    }
}

/// How an exec ended, on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Status {
    Code(i32),
    Signal(i32),
    TimedOut,
    Bound(String),
}

/// Keeper → client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Reply {
    Pong {
        handle: String,
    },
    Done(Status),
    /// The exec did not run (or did not run to its end): what kind of
    /// failure, and the message; a refusal's deciding rules (`file:line`
    /// and what they say) travel apart from it in `rules`, as they are
    /// held, so a client counts denials by rule without parsing text.
    Error {
        kind: ErrorKind,
        message: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<String>,
    },
    Disposed,
    /// The files API's answer is in the attached descriptor: `len` bytes
    /// of JSON.
    Files {
        len: u64,
    },
    /// A files-API read's answer: the bytes, raw (`len` of them), in the
    /// attached descriptor; `size` is the file's.
    FileRead {
        size: u64,
        len: u64,
    },
    /// The watch runs: its events come on the attached pipe.
    Watching,
    /// The connection to the port: the socket is attached.
    PortOpen,
    /// `processes` were saved.
    Checkpointed {
        processes: u32,
    },
    /// What the copy left out.
    FilesCopied {
        skipped: Vec<String>,
    },
    Written,
    Stat {
        stat: Option<WireStat>,
    },
    /// `len` bytes were written to the attached descriptor; `size` is the
    /// opened file's.
    Read {
        size: u64,
        len: u64,
    },
    /// `len` bytes of JSON (a list of [`WireEntry`]) were written to the
    /// attached descriptor.
    Listed {
        len: u64,
    },
    /// The egress allowlist generation now in force.
    Egress {
        generation: u64,
    },
    /// The sandbox is now paused (`true`) or running.
    Paused {
        paused: bool,
    },
    /// `len` bytes of JSON (the changes, or the apply's report) were
    /// written to the attached descriptor.
    Workspace {
        len: u64,
    },
}

pub(crate) fn status_to_wire(s: ExitStatus) -> Status {
    match s {
        ExitStatus::Code(c) => Status::Code(c),
        ExitStatus::Signal(s) => Status::Signal(s),
        ExitStatus::TimedOut => Status::TimedOut,
        ExitStatus::Bound { bound } => Status::Bound(bound.to_string()),
    }
}

pub(crate) fn status_from_wire(s: Status) -> ExitStatus {
    match s {
        Status::Code(c) => ExitStatus::Code(c),
        Status::Signal(s) => ExitStatus::Signal(s),
        Status::TimedOut => ExitStatus::TimedOut,
        Status::Bound(b) => ExitStatus::Bound {
            bound: match b.as_str() {
                "max_memory" => "max_memory",
                "max_cpu_seconds" => "max_cpu_seconds",
                "max_processes" => "max_processes",
                "max_disk" => "max_disk",
                _ => "unknown bound",
            },
        },
    }
}

pub(crate) fn error_to_wire(e: &SandboxError) -> Reply {
    match e {
        SandboxError::Refused { reason, rules } => Reply::Error {
            kind: e.kind(),
            message: reason.clone(),
            rules: rules.clone(),
        },
        _ => Reply::Error {
            kind: e.kind(),
            message: e.to_string(),
            rules: Vec::new(),
        },
    }
}

/// The error a client reports for a keeper's [`Reply::Error`], of the same
/// kind.
pub(crate) fn error_from_wire(
    kind: ErrorKind,
    message: String,
    rules: Vec<String>,
) -> SandboxError {
    match kind {
        ErrorKind::Refused => SandboxError::Refused {
            reason: message,
            rules,
        },
        ErrorKind::Unavailable => SandboxError::Unavailable { reason: message },
        // Of the caller's making (an unsupported attach, say): kept so,
        // not reported as the keeper's failure (`500`).
        ErrorKind::Invalid => SandboxError::Invalid { reason: message },
        ErrorKind::NotFound | ErrorKind::Failed => SandboxError::Failed {
            operation: "exec",
            reason: message,
        },
    }
}

/// A file operation's error as the client reports it: the kinds a caller
/// tells apart for files keep their variant (a missing path, a refused
/// one).
pub(crate) fn file_error_from_wire(
    kind: ErrorKind,
    message: String,
    rules: Vec<String>,
    path: &str,
) -> SandboxError {
    match kind {
        ErrorKind::NotFound => SandboxError::NotFound {
            path: path.to_string(),
        },
        ErrorKind::Invalid => SandboxError::PathRefused {
            path: path.to_string(),
            reason: message,
        },
        ErrorKind::Failed => {
            // The keeper's message is the whole error (`remove failed:
            // …`): its operation kept, not named twice.
            const OPERATIONS: [&str; 9] = [
                "list", "stat", "read", "write", "mkdir", "remove", "rename", "file", "files",
            ];
            match message
                .split_once(" failed: ")
                .and_then(|(op, rest)| Some((OPERATIONS.iter().find(|o| **o == op)?, rest)))
            {
                Some((operation, rest)) => SandboxError::Failed {
                    operation,
                    reason: rest.to_string(),
                },
                None => SandboxError::Failed {
                    operation: "file",
                    reason: message,
                },
            }
        }
        _ => error_from_wire(kind, message, rules),
    }
}

/// The body of the `keeper_wire` fuzz target (`fuzz/`), here so the corpus
/// can also be replayed by `cargo test`. Not API.
///
/// Whatever the bytes, each frame the keeper reads (a client's [`Request`],
/// its brief [`Launch`]) and each a client reads (a keeper's [`Reply`])
/// either decodes or is refused; a decoded frame encodes to bytes that
/// decode to the same frame, and a reply maps to its status or error.
#[doc(hidden)]
pub fn fuzz_frames(data: &[u8]) {
    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(data: &[u8]) -> Option<T> {
        let msg: T = serde_json::from_slice(data).ok()?;
        let once = match serde_json::to_vec(&msg) {
            Ok(b) => b,
            Err(e) => panic!("a decoded frame does not encode: {e}"),
        };
        let back: T = match serde_json::from_slice(&once) {
            Ok(m) => m,
            Err(e) => panic!(
                "an encoded frame does not decode: {e}\n{}",
                String::from_utf8_lossy(&once)
            ),
        };
        let twice = serde_json::to_vec(&back).unwrap_or_default();
        assert_eq!(once, twice, "a frame changed on its way round");
        Some(msg)
    }
    let _ = round_trip::<Request>(data);
    let _ = round_trip::<Launch>(data);
    match round_trip::<Reply>(data) {
        Some(Reply::Done(s)) => {
            let _ = status_from_wire(s);
        }
        Some(Reply::Error {
            kind,
            message,
            rules,
        }) => {
            let e = error_from_wire(kind, message, rules);
            let _ = error_to_wire(&e);
        }
        _ => {}
    }
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/keeper_wire` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_keeper_wire_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/keeper_wire");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::fuzz_frames(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    /// The seeds are frames the keeper and its clients really exchange (a
    /// seed that stopped decoding would seed nothing useful).
    #[test]
    fn every_seed_is_a_frame() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/keeper_wire");
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                continue;
            }
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let ok = serde_json::from_slice::<super::Request>(&data).is_ok()
                || serde_json::from_slice::<super::Reply>(&data).is_ok();
            if let (false, Err(e)) = (ok, serde_json::from_slice::<super::Launch>(&data)) {
                panic!("{} is no frame ({e} as a brief)", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_crosses_the_wire_with_its_rules_apart_from_its_message() {
        let e = SandboxError::Refused {
            reason: format!("{}/usr/bin/perl`", cordon_sandbox::backend::POLICY_REFUSES),
            rules: vec!["denied by: p.yaml:7  true  (no-perl)".into()],
        };
        let bytes = serde_json::to_vec(&error_to_wire(&e)).unwrap_or_default();
        let Ok(Reply::Error {
            kind,
            message,
            rules,
        }) = serde_json::from_slice::<Reply>(&bytes)
        else {
            panic!("not an error reply: {}", String::from_utf8_lossy(&bytes));
        };
        assert!(!message.contains("denied by"), "{message}");
        let back = error_from_wire(kind, message, rules);
        assert_eq!(back.to_string(), e.to_string());
        assert_eq!(back.denied_rules(), Some(vec!["p.yaml:7".to_string()]));
        // Any other error: the whole message, no rules.
        let other = SandboxError::Unavailable {
            reason: "gone".into(),
        };
        let Reply::Error { rules, message, .. } = error_to_wire(&other) else {
            panic!("not an error reply");
        };
        assert!(rules.is_empty());
        assert_eq!(message, "gone");
    }

    #[test]
    fn every_kind_but_not_found_crosses_the_wire_as_itself() {
        for kind in [
            ErrorKind::Refused,
            ErrorKind::Invalid,
            ErrorKind::Unavailable,
            ErrorKind::Failed,
        ] {
            let back = error_from_wire(kind, "why".into(), Vec::new());
            assert_eq!(back.kind(), kind, "{back}");
        }
        let unsupported = SandboxError::Unsupported {
            capability: cordon_sandbox::Capability::FilesList,
        };
        let Reply::Error {
            kind,
            message,
            rules,
        } = error_to_wire(&unsupported)
        else {
            panic!("not an error reply");
        };
        assert_eq!(
            error_from_wire(kind, message, rules).kind(),
            ErrorKind::Invalid
        );
    }
}
