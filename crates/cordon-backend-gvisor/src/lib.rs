//! cordon's `gvisor` backend: the `hardened_container` rung, gVisor
//! (`runsc`) over OCI bundles cordon builds itself: a sandbox's first exec
//! is a runsc sandbox of its own, every later one a `runsc exec` of
//! cordon's helper into the sandbox's running runsc sandbox ([`pod`]),
//! which gives the exec a pid and mount namespace of its own
//! (`podexec.rs`, the kit's `podexec.c`).
//!
//! - [`runsc`] finds the binary, reads its version and probes — once per
//!   process, by really running a trivial container on the `ptrace`
//!   platform — whether this machine runs it ([`runsc::probe`]); it also
//!   drives `run`, `kill`, `delete` and `list` under cordon's own state
//!   root ([`STATE_ROOT`]).
//! - [`oci`] writes a bundle's `config.json`: the process (argv, env,
//!   cwd, a non-root uid, rlimits), the mounts (the image's directories
//!   read-only — the `host` image's, or a stored image's from cordon's
//!   store — cordon's own `/etc`, the work dir and `/tmp`
//!   read-write on one volume, masks) and the memory bound as a cgroup.
//! - [`GvisorBackend`] (`backend.rs`) acquires a [`GvisorSandbox`]
//!   (`sandbox.rs`): a directory holding the root, a volume of `max_disk`
//!   for the work dir and `/tmp`, and one bundle per exec; every exec is
//!   one `runsc run`, checked first against the compute surface (the
//!   router's compute guard asks [`cordon_sandbox::Sandbox::resolve_command`]
//!   here) and confined by the policy's storage plan, translated by
//!   `cordon_confine::translate` into mounts and masks.
//! - [`cgroup`] makes the memory cgroup that holds `max_memory` above the
//!   one runsc makes, so a kill at the bound is still counted after runsc
//!   removed its own; the sandbox's root preloads a stat shim
//!   (`shim/noautomount.c`) for a gap of this runsc (see `sandbox.rs`).
//! - The container rung's syscall deny table goes into every exec's bundle
//!   as `linux.seccomp`, which runsc loads inside its sandbox
//!   (`--oci-seccomp`); an exec in the pod gets it as one seccomp program
//!   its helper installs.
//! - [`register::registration`] is what a host adds to its registry.
//! - The names the backend goes by and leaves on the host ([`NAME`],
//!   [`PREFIX`], [`STATE_ROOT`]) are `names.rs`'s, a leaf every module
//!   names them through; [`GvisorConfig`] is `config.rs`'s.
//!
//! Egress is the `allowlist` kind: a spec that names no hosts runs with no
//! network (`--network=none`, gVisor's own loopback only); one that names
//! hosts runs with `--network=host` inside a network namespace cordon
//! makes holding only `lo` and the egress proxy's listener (see
//! `sandbox.rs`, `Route`, and `docs/security.md` for what that costs: the
//! workload's sockets are then the host kernel's, in that namespace).

#![cfg(target_os = "linux")]

mod backend;
mod bundle;
pub mod cgroup;
mod config;
mod names;
pub mod pod;
mod podexec;
pub mod register;
pub mod runsc;
/// The OCI pieces, shared with every OCI-shaped backend.
pub use cordon_confine::oci;
mod running;
mod sandbox;
mod stateroot;

pub use backend::{backend, Gvisor, GvisorBackend};
pub use config::GvisorConfig;
pub use names::{DIRS, NAME, PREFIX, STATE_ROOT, SUMMARY, WORKLOAD_ID};
pub use register::registration;
pub use sandbox::GvisorSandbox;
