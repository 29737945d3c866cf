//! cordon's sandbox protocol: the layer between an agent host and whatever
//! actually isolates a workload.
//!
//! It draws no boundary itself, holds no credentials of its own, and runs
//! nothing; it makes an unsafe backend selection fail loudly when the router
//! is built or a sandbox is acquired, instead of silently at first use.
//!
//! The main types:
//!
//! - [`Isolation`] — the ladder `none < runtime < process < container <
//!   hardened_container < microvm < vm`, parsed only from its exact
//!   spellings. [`Egress`] — how far a backend can confine the network.
//!   [`Capability`] — what a backend can do and a spec requires;
//!   [`ToolIdentity`] — whose authority a host tool acts with.
//! - [`SandboxSpec`] — what a workload asks for: image, allowlist
//!   ([`EgressEntry`]), required capabilities, its own floor, resource asks,
//!   secrets. Loaded from YAML with positioned errors.
//! - [`CallerContext`] — closures over the host's request context, the only
//!   source of a [`SandboxKey`] and of the policy's [`Identity`].
//! - [`Backend`] and [`Sandbox`] — what a backend implements (see
//!   [`backend`] for how to write one).
//! - [`Router`] — built with backends, a floor (default `microvm`) and a
//!   [`cordon_policy::Policy`]; refuses backends below the floor at
//!   construction, and at [`Router::acquire`] checks the floor, capabilities,
//!   egress, the host's hard stops, the policy's bounds, egress surface and
//!   secret surface before any backend is reached. [`Router::scope`]
//!   reclaims a conversation's sandboxes however its block ends.
//! - [`SecretProvider`] ([`secrets`]) — the host-side store the router reads
//!   a granted secret from, and where a secret lands in the sandbox.
//! - Files out ([`outputs`]): a spec's [`DeclaredOutput`]s, its `files_out`
//!   [`TransferLimits`], and the phases a collection keeps; the
//!   [`OutputSink`] the landing ones go to. [`confined`] holds the
//!   confinement walk every backend serving files uses. The host side
//!   lives in the `cordon-files` crate:
//!   the `openat2` primitives (`cordon_files::confined`), a work dir served
//!   from a host directory (`cordon_files::host_dir`), and
//!   `cordon_files::FsSink`, which lands outputs under a directory without
//!   following any link.
//! - [`registry`] — every backend a host knows, one registration each;
//!   [`exec`] — exec as a handle; [`guard`] — the compute check around
//!   every sandbox; [`error::ErrorKind`] — what kind of failure an error is.
//!   The kits every backend must pass (files-out conformance, escape) are
//!   `cordon_kits`.
//!
//! Only the protocol is here: what a backend implements and what the router
//! decides with. The host-side parts live above it, each in the crate of its
//! users, and each depends on this one, never the reverse:
//!
//! - `cordon-collect` — reading declared outputs back out in the four
//!   phases and delivering them (`collect_outputs`, `Collection`,
//!   `CallDir`); no backend needs it.
//! - `cordon-kinds` — host code for one workload (`Kind`, `codeact`,
//!   `diagram`).
//! - `cordon-tools` — host tools: declarations, the sealed surface, the one
//!   dispatch door, the argument schemas. The router's check of a surface
//!   ([`Router::admit_tools`]) takes each tool's name and identity.
//! - `cordon-host` — the host configuration file and the floor's
//!   resolution (`config`), the concrete secret stores (`secrets`), doctor's
//!   report (`catalogue`), an exec's events as JSON (`exec_json`).
//!
//! Traits are synchronous: the backends are process-driven, and a host on an
//! async runtime calls them from its blocking pool.

pub mod backend;
pub mod capability;
pub mod confined;
pub mod egress;
pub mod error;
pub mod exec;
pub mod files;
#[doc(hidden)]
pub mod fuzz;
pub mod guard;
pub mod isolation;
pub mod key;
pub mod limits;
pub mod outputs;
pub mod registry;
pub mod router;
mod router_error;
mod sandbox_error;
pub mod secrets;
pub mod sink;
pub mod spec;
pub mod watch;
pub mod wire;
pub mod workspace;
pub mod yaml;

pub use backend::{
    AcquireRequest, Backend, BackendError, DirEntry, ExecOutput, ExecRequest, ExitStatus, FileKind,
    FileRead, FileStat, HostSecretsRecord, HostWorkDirRecord, Limits, Origin, Provenance,
    ResolvedCommand, Sandbox, SandboxError, Stream, NO_FILES_SNAPSHOT, NO_MEMORY_SNAPSHOT,
    PAUSE_UNSUPPORTED,
};
pub use capability::{Capability, CapabilitySet, ToolIdentity};
pub use cordon_policy::{Deployment, Identity};
pub use egress::{Egress, EgressChange, EgressEntry, EgressEntryError, HostPattern};
pub use error::ErrorKind;
pub use exec::{
    Attach, EventSender, ExecEnd, ExecEvent, ExecHandle, ExecStdin, Killer, Resizer, StdinFeed,
    TtySize,
};
pub use files::{FileAnswer, FileInfo, FileOp, WriteHow};
pub use isolation::{Isolation, IsolationError};
pub use key::{Caller, CallerContext, KeyError, SandboxKey};
pub use limits::TransferLimits;
pub use outputs::{
    validate_artifact_name, ArtifactNameError, Collision, DeclaredOutput, Disposition, OutputError,
};
pub use registry::{
    AuditBounds, BackendRegistration, BackendSetup, EgressSetup, EngineSettings, Registry,
    SelfCommand, WorkDirView,
};
pub use router::{
    ensure_egress_allowed, Refusal, Router, RouterBuilder, RouterError, Scoped, Warning,
};
pub use secrets::{Brokered, SecretError, SecretProvider, SecretValue};
pub use sink::{Artifact, ArtifactHandle, LandedArtifact, OutputSink, SinkError};
pub use spec::{spec_json_schema, PlaceholderAsk, ResourceAsk, SandboxSpec, SecretName, SpecError};
pub use watch::{Next, PortRequest, WatchEvent, WatchKind, WatchSource};
pub use workspace::{ApplyReport, Change, RefusedChange, WorkspaceChange};
