//! `cordon serve`: cordon for agent hosts over HTTP, a thin async surface
//! over the host layer (its assembly, router and typed refusals). Every
//! request is authenticated by a bearer token whose SHA-256 digest the
//! configuration holds; the credential decides the identity and scope.
//!
//! The rooms, one concern each (this file only names them): `routes`
//! ([`app`], every endpoint and the layers every request passes); `served`
//! the state every handler answers from ([`Served`]); `request` and
//! `refusal` what every handler shares (the credential and body it reads
//! first; the answers with an error); `gate` (what every request passes
//! before its body is read), `sandboxes` (create, attach, dispose),
//! `exec`, `files`, `egress` (a live sandbox's allowlist replaced), `outputs` (collected, and fetched) and `artifacts`
//! (where they land, within each credential's bounds), `limits` (the
//! request budget, the sandbox cap's lock), `metrics` (`/metrics`, the
//! egress audit follower) and `counts` (what it counts), `listen`
//! (connections, TLS, shutdown) and `mcp_http` (`/mcp`; the tools
//! themselves are `mcp`'s, shared with `cordon mcp` on stdio).
//!
//! Handlers depend on `request` and `served`; `served` only on rooms that
//! hold no handler (`config`, `artifacts`, `limits`, `counts`, and
//! through them `refusal`), never back.

pub mod auth;
pub mod config;
pub mod mcp;
pub mod tls;

mod artifacts;
mod counts;
mod egress;
mod exec;
mod files;
mod gate;
mod limits;
mod listen;
mod mcp_files;
mod mcp_http;
mod metrics;
mod outputs;
mod pause;
pub mod paused_files;
pub mod pools;
mod ports;
mod refusal;
mod request;
mod routes;
mod sandboxes;
mod served;
mod snapshots;
mod workspace;

pub use config::{ConfigError, Credential, ServeConfig};
pub use listen::{serve, SHUTDOWN_GRACE};
pub use mcp_http::{MCP_AGENT_DIR_HEADER, MCP_THREAD_HEADER};
pub use routes::{app, OPENAPI};
pub use served::Served;
