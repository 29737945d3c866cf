//! cordon's host-side file primitives, shared by every backend that serves
//! files from a host directory.
//!
//! A workload can plant a link exactly where the host is about to read or
//! write as root; everything here opens beneath a directory descriptor with
//! `openat2` and follows no link. The protocol these serve (the
//! [`cordon_sandbox::Sandbox`] file hooks, [`cordon_sandbox::OutputSink`],
//! the confinement walk [`cordon_sandbox::confined::refuse_symlinked_parents`])
//! is `cordon-sandbox`'s; this crate is where it touches the host.
//!
//! - [`confined`] — the `openat2` primitives ([`confined::ConfinedDir`]:
//!   confined stat, bounded read, write by temporary file and rename), their
//!   error ([`confined::ConfinedError`]) and the host's no-follow stat for
//!   the walk ([`confined::host_lstat`]).
//! - [`host_dir`] — [`host_dir::HostWorkDir`] serves a sandbox's work dir
//!   from a host directory with them; [`host_dir::HostDirectorySandbox`] is
//!   the kits' unisolated test subject.
//! - [`api`] — the files API's operations beneath a confined directory:
//!   a listing to a depth with metadata, a byte range read, an append, a
//!   removal of a file or a tree, a rename.
//! - [`tree`] — a copy of a work dir into a snapshot's tree, hashed.
//! - [`through`] — a sandbox's files copied out into a host tree, and a
//!   tree copied in, through the files API alone (the microVM's guest).
//! - [`workspace`] — a workspace's changes: the diff read from its upper
//!   layer, and the apply that writes them back into its directory.
//! - [`FsSink`] — the [`cordon_sandbox::OutputSink`] that lands artifacts
//!   under a directory without following any link.
//!
//! The primitives exist only on Linux: `ConfinedDir`, `host_dir` and
//! `FsSink` are `cfg(target_os = "linux")`.

#[cfg(target_os = "linux")]
pub mod api;
pub mod confined;
#[cfg(target_os = "linux")]
pub mod host_dir;
#[cfg(target_os = "linux")]
pub mod roots;
#[cfg(target_os = "linux")]
mod sink;
#[cfg(target_os = "linux")]
pub mod through;
#[cfg(target_os = "linux")]
pub mod tree;
#[cfg(target_os = "linux")]
pub mod watch;
#[cfg(target_os = "linux")]
pub mod workspace;

#[cfg(target_os = "linux")]
pub use sink::FsSink;
