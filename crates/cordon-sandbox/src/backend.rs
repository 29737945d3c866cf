//! The two traits a backend implements: [`Backend`] (the provider) and
//! [`Sandbox`] (one live instance).
//!
//! # Writing a backend
//!
//! The traits are synchronous and `Send + Sync`: the backends cordon plans
//! (Linux namespaces, docker, gVisor, a microVM) are driven through
//! processes, and a host on an async runtime calls them through its
//! blocking pool (`tokio::task::spawn_blocking`).
//!
//! - **Declare the rung your weakest configuration on this machine really
//!   provides.** A VM backend on a host without hardware virtualisation does
//!   not claim `microvm`. If you cannot tell, return
//!   [`IsolationError::Unnamed`]: the router refuses you, which is right.
//! - **Declare egress honestly.** [`Backend::egress`] defaults to
//!   [`Egress::Unrestricted`], which the router refuses for every spec: a
//!   backend that never read the allowlist cannot have enforced it. Override
//!   it only with what you enforce.
//! - **Capabilities default to exec and files in**
//!   ([`CapabilitySet::default_for_backend`]); declare more only when you
//!   serve more, and fewer if you cannot serve those.
//! - **`acquire` is get-or-create.** A workload's fix-round loop calls it on
//!   every iteration; return the warm sandbox for the key when one exists, and
//!   return it with the [`Provenance`] it was *created* with (stored with the
//!   sandbox, e.g. as labels), never the one of the current request: the
//!   router compares the two and refuses a sandbox created for a different
//!   spec, identity or policy.
//! - **`dispose_scope` derives its set from your system's own state** —
//!   labels, a listing — not from this process's memory: another replica may
//!   have created the sandboxes, and one a backend forgets keeps running and
//!   billing. Both dispose methods are best effort: the router logs their
//!   failures and never fails a delete on them.
//! - **Secrets arrive as files**: the router writes each granted secret with
//!   [`Sandbox::write_file`] under [`crate::secrets::SECRETS_DIR`], mode
//!   `0o400`. Honour the mode; never copy them into an environment.
//! - **Serving `files_out`**: do not write the confinement walk or the
//!   confined open yourself. A work dir on a host directory delegates the
//!   files hooks and every host-side write to
//!   `cordon_files::host_dir::HostWorkDir`; anything else runs
//!   [`crate::confined::refuse_symlinked_parents`] with its own unconfined,
//!   no-follow stat. Then pass `cordon_kits::conformance` on a real instance.
//!   `docs/backends.md` has the whole story.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cordon_policy::Identity;

use crate::capability::{Capability, CapabilitySet};
use crate::egress::Egress;
use crate::error::ErrorKind;
use crate::exec::{Attach, ExecHandle};
pub use crate::exec::{ExecOutput, ExitStatus, Stream};
use crate::isolation::{Isolation, IsolationError};
use crate::key::SandboxKey;
pub use crate::sandbox_error::{SandboxError, POLICY_REFUSES};
use crate::spec::SandboxSpec;

/// The limits a sandbox is created with: the spec's ask, or the policy's
/// bound for the identity where the spec asks nothing. Never above the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub memory_bytes: u64,
    pub processes: u64,
    pub cpu_seconds: u64,
    pub wall_seconds: u64,
    /// Bytes the workload may write to each writable filesystem it has
    /// (`max_disk`). A record written before the bound existed reads as
    /// the built-in default.
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
}

impl Limits {
    /// The spec's `ask` where it asks, else the policy's `bounds` (an ask
    /// above a bound is refused before this: [`crate::Router::ensure_policy_allows`]).
    pub fn of(bounds: &cordon_policy::Bounds, ask: &crate::spec::ResourceAsk) -> Limits {
        Limits {
            memory_bytes: ask.memory.unwrap_or(bounds.max_memory),
            processes: ask.processes.unwrap_or(bounds.max_processes),
            cpu_seconds: ask.cpu_seconds.unwrap_or(bounds.max_cpu_seconds),
            wall_seconds: ask.wall_seconds.unwrap_or(bounds.max_wall_seconds),
            disk_bytes: ask.disk.unwrap_or(bounds.max_disk),
        }
    }

    /// The limit a policy bound (`max_memory`, ...) names, if it is one.
    pub fn named(&self, bound: &str) -> Option<u64> {
        Some(match bound {
            "max_memory" => self.memory_bytes,
            "max_processes" => self.processes,
            "max_cpu_seconds" => self.cpu_seconds,
            "max_wall_seconds" => self.wall_seconds,
            "max_disk" => self.disk_bytes,
            _ => return None,
        })
    }
}

fn default_disk_bytes() -> u64 {
    cordon_policy::Bounds::DEFAULT.max_disk
}

/// What a sandbox was created for. A backend stores it with the sandbox and
/// returns the stored one on every later acquire. Its wire form (serde) is
/// what a kept sandbox's record holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub spec: SandboxSpec,
    pub identity: Identity,
    /// [`cordon_policy::Policy::digest`] of the policy in force at creation.
    pub policy_digest: String,
    /// The snapshot the sandbox was made from (its work dir the snapshot's
    /// files, copy-on-write); `None`: a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// A snapshot a sandbox is made from: its id, and the tree of its files
/// on this host (in cordon's snapshot store), which the backend mounts
/// read-only beneath the new sandbox's writable work dir.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    pub snapshot: String,
    pub tree: std::path::PathBuf,
    /// The processes the snapshot holds with their memory (`snapshot
    /// --memory`), as the backend that took them wrote them: the new
    /// sandbox starts them again where they stood. `None`: files only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<std::path::PathBuf>,
    /// The backend that saved [`Self::memory`], in its own form: the only
    /// one that starts the processes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_of: Option<String>,
    /// The snapshot's copy of the sandbox's `/tmp`, when it took one: the
    /// new sandbox's `/tmp` starts as a copy of it. `None`: an empty one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<std::path::PathBuf>,
}

/// Everything a backend needs to get or create a sandbox. It has no
/// environment: nothing the router hands over travels in one.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub key: SandboxKey,
    pub provenance: Provenance,
    pub limits: Limits,
    /// The spec's secrets asked for as placeholders, with their values:
    /// for the sandbox's egress proxy only (never the sandbox).
    pub brokered: Vec<crate::secrets::Brokered>,
}

/// A failure inside a backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("{operation} failed: {reason}")]
    Failed {
        operation: &'static str,
        reason: String,
    },
    #[error("the backend is unavailable on this machine: {reason}")]
    Unavailable { reason: String },
    /// The backend refuses the request (a policy or configuration it
    /// holds), saying why; nothing was created.
    #[error("{operation} refused: {reason}")]
    Refused {
        operation: &'static str,
        reason: String,
    },
    /// What was asked cannot be done as asked (a spec's work dir on a
    /// path the launcher provides, say); the caller fixes the request.
    #[error("{operation} refused: {reason}")]
    Invalid {
        operation: &'static str,
        reason: String,
    },
}

impl BackendError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            BackendError::Failed { .. } => ErrorKind::Failed,
            BackendError::Unavailable { .. } => ErrorKind::Unavailable,
            BackendError::Refused { .. } => ErrorKind::Refused,
            BackendError::Invalid { .. } => ErrorKind::Invalid,
        }
    }

    /// The error of `operation` of the kind `kind`, saying `reason`: how a
    /// failure that crossed a process (a keeper's) keeps its kind. A kind
    /// with no variant of its own (`NotFound`) is a failure.
    pub fn of_kind(kind: ErrorKind, operation: &'static str, reason: String) -> BackendError {
        match kind {
            ErrorKind::Refused => BackendError::Refused { operation, reason },
            ErrorKind::Invalid => BackendError::Invalid { operation, reason },
            ErrorKind::Unavailable => BackendError::Unavailable { reason },
            ErrorKind::NotFound | ErrorKind::Failed => BackendError::Failed { operation, reason },
        }
    }
}

/// A program resolved where it will run: `command` with directory links
/// resolved, `command_target` with every link resolved (`/bin/su` is
/// `/usr/bin/su`). The policy's `command` is decided over both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCommand {
    pub command: String,
    pub command_target: String,
}

/// A provider of sandboxes.
pub trait Backend: Send + Sync {
    /// A short name for errors and `cordon doctor`, unique within a router.
    fn name(&self) -> &str;

    /// The rung the backend's weakest configuration on this machine provides.
    fn isolation(&self) -> Result<Isolation, IsolationError>;

    /// How far the backend can confine egress. Silence is read as
    /// [`Egress::Unrestricted`], and refused.
    fn egress(&self) -> Egress {
        Egress::Unrestricted
    }

    /// What the backend can do. Silence is exec and files in.
    fn capabilities(&self) -> CapabilitySet {
        CapabilitySet::default_for_backend()
    }

    /// Whether the backend can materialise the image `image` names (an
    /// entry of cordon's image store, or the built-in `host`), and if not,
    /// why. The router never selects a backend that refuses a spec's image.
    /// Silence accepts every name (test backends that run no image).
    fn materialises(&self, image: &str) -> Result<(), String> {
        let _ = image;
        Ok(())
    }

    /// Gets the sandbox for `req.key`, creating it when none exists.
    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError>;

    /// Disposes of the sandbox for `key`; `Ok(false)` when there was none.
    fn dispose(&self, key: &SandboxKey) -> Result<bool, BackendError>;

    /// Disposes of every sandbox of a scope and thread, found from the
    /// backend's own system state; returns how many.
    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError>;

    /// Moves the sandbox this backend holds at `from` to the key `to`,
    /// where it holds none: a warm pool's claim ([`crate::Router::rekey`]).
    /// Nothing of the sandbox changes but the key it is found by. The
    /// default refuses ([`NO_REKEY`]).
    fn rekey(&self, from: &SandboxKey, to: &SandboxKey) -> Result<Rekeyed, BackendError> {
        let _ = (from, to);
        Err(BackendError::Refused {
            operation: "rekey",
            reason: NO_REKEY.into(),
        })
    }
}

/// What a [`Backend::rekey`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rekeyed {
    /// The sandbox is found at the new key now.
    Moved,
    /// This backend holds nothing at the old key.
    NotHeld,
    /// The new key holds a sandbox already: nothing was moved (a pool's
    /// claim then leaves the caller theirs).
    KeyTaken,
}

/// [`Backend::rekey`] over a backend's table of the sandboxes it holds:
/// the entry at `from` moved to `to`, unless `to` holds one.
pub fn rekey_in<S>(
    table: &mut std::collections::HashMap<SandboxKey, S>,
    from: &SandboxKey,
    to: &SandboxKey,
) -> Rekeyed {
    if !table.contains_key(from) {
        return Rekeyed::NotHeld;
    }
    if table.contains_key(to) {
        return Rekeyed::KeyTaken;
    }
    if let Some(s) = table.remove(from) {
        table.insert(to.clone(), s);
    }
    Rekeyed::Moved
}

/// Why a backend that cannot move a sandbox to another key refuses.
pub const NO_REKEY: &str = "this backend cannot move a sandbox to another key, so a warm pool over it cannot hand one out; use it without a pool";

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    /// Each of stdout and stderr is cut at this many bytes.
    pub max_output_bytes: u64,
}

/// The type of a path, as seen without following a final link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// A `stat` that did not follow links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub kind: FileKind,
    /// `None` when the backend could not tell; a caller that caps transfers
    /// refuses rather than guesses.
    pub size: Option<u64>,
    pub mode: u32,
}

/// What a bounded [`Sandbox::read_file`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// At most the cap plus one byte.
    pub bytes: Vec<u8>,
    /// The size of the opened file (`fstat` on the descriptor read from).
    pub size: u64,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

/// One live sandbox.
///
/// `exec` and `write_file` are what every sandbox serves. The `stat`,
/// `read_file` and `list_dir` hooks serve declared outputs (`files_out`,
/// `files_list`) and default to [`SandboxError::Unsupported`]. Paths are
/// absolute guest paths; a backend serving them from a host directory uses
/// `cordon_files::host_dir::HostWorkDir` rather than its own walk.
pub trait Sandbox: Send + Sync {
    /// The backend's own identifier for this instance.
    fn id(&self) -> &str;

    /// What this sandbox was created for (see [`Provenance`]).
    fn provenance(&self) -> &Provenance;

    /// Starts a command and returns at once with a handle: its stdin (with
    /// [`Attach::stdin_stream`]), its output as events, `wait` and `kill`.
    /// Dropping the handle before the exec ended kills it. Each of stdout
    /// and stderr is cut at `req.max_output_bytes`. A backend driving pipes
    /// builds the handle with [`ExecHandle::from_pipes`]; one that can only
    /// run a command whole returns [`ExecHandle::finished`] (and refuses
    /// `stdin_stream` with [`SandboxError::Unsupported`]).
    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError>;

    /// Runs a command to its end (stdin: the request's bytes).
    fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.start_exec(req, Attach::default())?.wait()
    }

    /// Runs a command like [`Sandbox::exec`], handing its output to `sink`
    /// as it arrives (within the same caps), for a host that shows it live.
    /// The returned [`ExecOutput`] holds the same bytes.
    fn exec_streaming(
        &self,
        req: &ExecRequest,
        sink: &(dyn Fn(Stream, &[u8]) + Sync),
    ) -> Result<ExecOutput, SandboxError> {
        self.start_exec(req, Attach::default())?
            .wait_streaming(sink)
    }

    /// Writes a file (creating parents) with `mode`; an absolute guest path.
    /// The guest may have planted a link exactly where the host writes: a
    /// backend writing into a host directory goes through
    /// `cordon_files::host_dir::HostWorkDir::write_file`, never
    /// `std::fs::write`.
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError>;

    /// Stats a path without following a final link; `Ok(None)` when it (or
    /// a parent) is absent. A path with a symlinked parent — the work dir's
    /// own ancestors included — is refused ([`SandboxError::PathRefused`]):
    /// run [`crate::confined::refuse_symlinked_parents`] with an unconfined
    /// no-follow stat rather than writing that walk yourself.
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let _ = path;
        Err(SandboxError::Unsupported {
            capability: Capability::FilesOut,
        })
    }

    /// Reads a regular file, bounded: opens `path` without following any
    /// link, refuses anything but a regular file (a FIFO must not hang the
    /// host), takes [`FileRead::size`] from the *opened* file, and returns at
    /// most `max_bytes + 1` bytes — one past the cap, so the caller sees a
    /// file that grew after it was stat-ed. It may return no bytes when the
    /// opened file is already larger than `max_bytes`. Never trust a size
    /// read earlier: the path may have been swapped since.
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        let _ = (path, max_bytes);
        Err(SandboxError::Unsupported {
            capability: Capability::FilesOut,
        })
    }

    /// Lists a directory.
    fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, SandboxError> {
        let _ = path;
        Err(SandboxError::Unsupported {
            capability: Capability::FilesList,
        })
    }

    /// The work dir as a host directory, when it is one: a client in
    /// another process (of a kept sandbox) then serves files in and out
    /// from it with `cordon_files::host_dir::HostWorkDir`, as this sandbox
    /// does.
    /// `None`: files go only through this sandbox's own methods.
    fn host_work_dir(&self) -> Option<HostWorkDirRecord> {
        None
    }

    /// What must be cleaned up if the process holding this sandbox dies
    /// without disposing of it (cgroups, directories, a container's id), in
    /// the form the backend's registration's `reclaim` reads. Recorded
    /// when a keeper starts serving the sandbox.
    fn residue(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Resolves a program (an absolute path, or a bare name looked up in
    /// the workload's `PATH`) in this sandbox's own filesystem, links
    /// resolved: what the compute guard decides on before every exec
    /// ([`crate::guard`]). The default refuses — a backend that cannot say
    /// what will run cannot have the policy's compute surface held for it.
    fn resolve_command(&self, program: &str) -> Result<ResolvedCommand, SandboxError> {
        Err(SandboxError::Refused {
            reason: format!(
                "cannot check `{program}` against the policy: this backend does not resolve commands (its author implements `Sandbox::resolve_command`)"
            ),
            rules: Vec::new(),
        })
    }

    /// Changes this live sandbox's egress allowlist (a kept sandbox's
    /// `cordon sandbox egress`): [`crate::EgressChange::Replace`] makes the
    /// list a new generation at once — new connections decided by it, open
    /// ones it does not admit closed — and answers the generation's number;
    /// [`crate::EgressChange::Close`] (the replacement did not load) closes
    /// egress and answers why, as an error. `by`: who asked, for the audit
    /// log. The policy's check of the entries for this sandbox's identity
    /// is the guard's ([`crate::guard`]), as at acquire. The default
    /// refuses: a backend without a live egress channel cannot change one.
    fn change_egress(&self, change: crate::EgressChange, by: &str) -> Result<u64, SandboxError> {
        let _ = (change, by);
        Err(SandboxError::Invalid {
            reason: "this sandbox's egress cannot be changed while it lives: its backend has no live egress channel, or it was made without an egress route (a spec with no `egress_allow`); make a sandbox whose spec names the hosts".into(),
        })
    }

    /// Freezes every process of this live sandbox: none runs or uses CPU
    /// until [`Sandbox::resume`] (or an exec, which resumes it first);
    /// their memory stays charged to the sandbox's bound and its files
    /// stay. Idempotent. The default refuses: a backend that cannot freeze
    /// a sandbox says so, and nothing is stopped halfway.
    fn pause(&self) -> Result<(), SandboxError> {
        Err(SandboxError::Invalid {
            reason: PAUSE_UNSUPPORTED.into(),
        })
    }

    /// Thaws what [`Sandbox::pause`] froze. Idempotent (a sandbox not
    /// paused is left as it is). The default refuses, as `pause`'s.
    fn resume(&self) -> Result<(), SandboxError> {
        Err(SandboxError::Invalid {
            reason: PAUSE_UNSUPPORTED.into(),
        })
    }

    /// What the sandbox changed in its workspace (a host directory it
    /// works in copy-on-write), path by path, against the directory as it
    /// is now. The default refuses: a sandbox made without a workspace has
    /// nothing to diff ([`crate::workspace::NO_WORKSPACE`]).
    fn workspace_diff(&self) -> Result<Vec<crate::WorkspaceChange>, SandboxError> {
        Err(SandboxError::Invalid {
            reason: crate::workspace::NO_WORKSPACE.into(),
        })
    }

    /// Writes the sandbox's changes back into its workspace's directory
    /// (those at or beneath `only`'s paths; every change when empty),
    /// through confined operations: no link followed, nothing written
    /// outside the directory, a change whose path the host changed since
    /// the sandbox saw it refused (per path, the others applied).
    fn workspace_apply(&self, only: &[String]) -> Result<crate::ApplyReport, SandboxError> {
        let _ = only;
        Err(SandboxError::Invalid {
            reason: crate::workspace::NO_WORKSPACE.into(),
        })
    }

    /// One operation of the files API ([`crate::files`]) on this sandbox's
    /// files, confined to what its plan lets the workload itself touch and
    /// following no link, none of it running the workload's programs. The
    /// policy's storage decision is the guard's ([`crate::guard`]), made
    /// before this is called. The default refuses: a backend that cannot
    /// serve them does not declare `files_list`.
    fn files(&self, op: &crate::FileOp) -> Result<crate::FileAnswer, SandboxError> {
        let _ = op;
        Err(SandboxError::Unsupported {
            capability: Capability::FilesList,
        })
    }

    /// Watches the directory `path` (as the workload sees it; beneath it
    /// too when `recursive`) for changes ([`crate::watch`]), following no
    /// link. The policy's decision is the guard's, made before this is
    /// called. The default refuses, as [`Self::files`] does.
    fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn crate::WatchSource>, SandboxError> {
        let _ = (path, recursive);
        Err(SandboxError::Unsupported {
            capability: Capability::FilesList,
        })
    }

    /// A connection to `port` on the sandbox's own loopback, made inside
    /// its network namespace (or its guest): ingress only, no route out.
    /// The policy's ingress decision is the guard's
    /// ([`crate::guard`], [`crate::PortRequest`]), made before this. The
    /// default refuses: a backend that cannot does not declare `ports`.
    fn open_port(&self, req: &crate::PortRequest) -> Result<std::net::TcpStream, SandboxError> {
        let _ = req;
        Err(SandboxError::Unsupported {
            capability: Capability::Ports,
        })
    }

    /// Saves every process running in this sandbox, with its memory, into
    /// the directory `into` (which exists, empty, root's) in the backend's
    /// own form. At gvisor they end here (an exec so taken answers that it
    /// was checkpointed); the microVM saves its whole guest, which goes
    /// on. Returns how many were saved (none running: 0, and the
    /// snapshot holds files only). A sandbox made from the snapshot
    /// ([`Origin::memory`]) starts them again where they stood. The
    /// default refuses ([`NO_MEMORY_SNAPSHOT`]): a backend that cannot
    /// restore a process as confined as it was made never saves one.
    fn checkpoint(&self, into: &std::path::Path) -> Result<u32, SandboxError> {
        let _ = into;
        Err(SandboxError::Invalid {
            reason: NO_MEMORY_SNAPSHOT.into(),
        })
    }

    /// Copies this sandbox's files — its work dir into `into/tree`, its
    /// own `/tmp`, where it has one, into `into/tmp` (neither exists yet;
    /// `into` is root's) — for a snapshot, at most `room` bytes and
    /// `max_entries` entries together. Only a backend whose files the host
    /// cannot open ([`Sandbox::host_work_dir`] is `None`) is asked; the
    /// host copies the others itself. Returns what was left out, by the
    /// path the workload knows it by. The default refuses
    /// ([`NO_FILES_SNAPSHOT`]).
    fn copy_files_out(
        &self,
        into: &std::path::Path,
        room: u64,
        max_entries: usize,
    ) -> Result<Vec<String>, SandboxError> {
        let _ = (into, room, max_entries);
        Err(SandboxError::Invalid {
            reason: NO_FILES_SNAPSHOT.into(),
        })
    }

    /// True only when every exec of this sandbox is checked by a
    /// [`crate::guard`] elsewhere — a kept sandbox, whose keeper guards it.
    /// The router then does not guard it twice.
    fn guarded_downstream(&self) -> bool {
        false
    }
}

/// Why a sandbox whose files neither the host nor its backend can copy
/// has no snapshot.
pub const NO_FILES_SNAPSHOT: &str = "this sandbox's backend keeps its files where this host cannot copy them and offers no copy of its own, so it has no snapshot; the container rung, docker, gvisor and microvm do";

/// Why a sandbox whose backend cannot save its processes refuses
/// `snapshot --memory`.
pub const NO_MEMORY_SNAPSHOT: &str = "`--memory` (processes and memory, not only files) is refused: at the container and process rungs and at docker a checkpoint tool could not restore the sandbox's Landlock domains and seccomp filters faithfully, so a restored process would run less confined than it was made; gVisor saves them (`runsc checkpoint`) for a sandbox made with `requires: [snapshot_memory]`, and the microVM saves its whole guest (QEMU's migration into a file). Take a snapshot of the files (leave `--memory` out), or make the sandbox at gvisor (with that requirement) or at microvm";

/// Why a sandbox whose backend cannot freeze it is not paused.
pub const PAUSE_UNSUPPORTED: &str = "this sandbox's backend cannot pause it (cordon's container, docker, gvisor and microvm backends do); leave it running, or make it at one of those";

/// A sandbox's work dir on the host (see [`Sandbox::host_work_dir`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostWorkDirRecord {
    /// The directory on the host.
    pub host: std::path::PathBuf,
    /// The same directory as the workload sees it.
    pub guest: String,
    /// The uid/gid files written in are given, when the backend wants one.
    pub owner: Option<u32>,
    /// The sandbox's secrets directory on the host, when it was given
    /// secrets: a client in another process writes them there (see
    /// `cordon_files::host_dir::HostSecretsDir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<HostSecretsRecord>,
    /// The sandbox's own `/tmp` on the host, when it has one beside a
    /// fresh work dir (on the same volume): what a snapshot captures with
    /// the work dir. `None`: no `/tmp` of its own to capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<std::path::PathBuf>,
}

/// A sandbox's secrets directory on the host (see [`HostWorkDirRecord`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSecretsRecord {
    /// The directory on the host, seen read-only at
    /// [`crate::secrets::SECRETS_DIR`] in the sandbox.
    pub host: std::path::PathBuf,
    /// The group the workload runs as: what reads the secrets.
    pub gid: u32,
}

impl fmt::Debug for dyn Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox").field("id", &self.id()).finish()
    }
}
