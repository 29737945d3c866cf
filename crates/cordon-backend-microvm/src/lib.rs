//! cordon's `microvm` backend: a QEMU `microvm` guest booted from a kernel
//! of the host's, an initramfs cordon builds (its guest agent as PID 1)
//! and the spec's image packed read-only; driven over one framed channel
//! (`cordon-vm-proto`).

#![cfg(target_os = "linux")]

pub mod jail;

/// The backend's name.
pub const NAME: &str = "microvm";
