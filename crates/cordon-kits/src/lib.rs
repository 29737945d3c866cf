//! cordon's kits: hostile workloads and layouts every backend must survive
//! on a real instance, run through the backend's public surface only
//! ([`cordon_sandbox::Sandbox`]). They depend on no test framework and
//! report every case, not only the first failure; `cordon conformance` and
//! `cordon escape` run them.
//!
//! - [`conformance`] — the files-out kit every backend serving `files_out`
//!   must pass: a [`conformance::ConformanceSubject`] and
//!   [`conformance::run_files_out_conformance`].
//! - [`escape`] — the escape kit every backend must pass: an
//!   [`escape::EscapeSubject`] and [`escape::run_escape_suite`].
//!
//! They live apart from `cordon-sandbox`, the protocol, which runs nothing.

pub mod conformance;
#[cfg(target_os = "linux")]
pub mod escape;
