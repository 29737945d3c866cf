//! cordon's `microvm` backend: a QEMU `microvm` guest per sandbox, booted
//! from a kernel of the host's, an initramfs cordon builds (its guest agent
//! as PID 1, `cordon-vm-agent`) and the spec's image packed read-only,
//! driven over one framed channel (`cordon-vm-proto`).
//!
//! - [`probe`] finds QEMU, the guest kernel and the agent, builds the
//!   initramfs ([`artifacts`]) and decides the accelerator by booting a
//!   guest under KVM: KVM only when that guest answered. Under KVM the
//!   backend declares `microvm`; under TCG (an emulator, not a security
//!   boundary) it declares `container`, what its jail gives.
//! - [`vm`] boots one guest inside [`jail`] (cordon's Linux enforcer around
//!   the QEMU process) with a deadline and one retry.
//! - [`channel`] is the host's end of the control channel: exec, files,
//!   relayed egress connections; every size bounded, and a guest that
//!   breaks a rule ends its own VM.
//! - [`MicrovmBackend`] and [`MicrovmSandbox`] serve the backend traits:
//!   the host decides (command resolution, the policy's plan translated
//!   over the image), the agent enforces it in the guest with cordon's
//!   container rung.
//! - [`register::registration`] is what a host adds to its registry.
//! - The names the backend gives what it makes ([`NAME`], [`PREFIX`],
//!   [`jail_name`]) are `names.rs`'s, a leaf every module names them
//!   through; what a sandbox records for its cleanup and the cleanup
//!   ([`Residue`], [`reclaim`]) are `residue.rs`'s.

#![cfg(target_os = "linux")]

pub mod artifacts;
mod backend;
pub mod channel;
pub mod jail;
mod names;
mod ports;
pub mod probe;
mod qmp;
pub mod register;
mod residue;
pub mod sandbox;
pub mod vm;

pub use backend::{
    backend, capabilities, found_sandboxes, image_tree, rung_of, Microvm, MicrovmBackend,
    MicrovmConfig,
};
pub use names::{jail_name, maker_of, DIRS, NAME, PREFIX};
pub use register::registration;
pub use residue::{reclaim, reclaim_dir, Residue};
pub use sandbox::{Label, MicrovmSandbox};
