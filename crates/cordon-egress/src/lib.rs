//! cordon's egress proxy.
pub mod classify;
pub mod sni;
