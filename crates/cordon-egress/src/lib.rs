//! cordon's egress proxy: the one route out of a sandbox.
//!
//! A library whoever owns a sandbox hosts ([`EgressHost`] for owners that
//! are not async themselves), and `cordon proxy` standalone. Decide
//! (the policy, the caller's allowlist) and enforce (resolve, classify,
//! dial the checked address, count bytes on the transport) are kept apart:
//! the policy crate decides, this crate enforces.

pub mod audit;
pub mod ca;
pub mod child;
pub mod classify;
#[doc(hidden)]
pub mod fuzz;
mod host;
mod proxy;
pub mod resolve;
pub mod sni;
mod splice;
pub mod target;
pub mod tls;

pub use audit::{Audit, AuditLine};
pub use child::{
    child_main, start_service, ChannelControl, ChildServing, ConfineFn, EgressService, ProxyChild,
    Served,
};
pub use host::{config_from_setup, EgressHost, HostControl, Opened, Serving, MAX_CONNECTIONS};
pub use proxy::{
    BrokeredSecret, Caller, Capped, EgressChange, Generation, LiveEgress, Proxy, ProxyConfig,
    Timeouts,
};
