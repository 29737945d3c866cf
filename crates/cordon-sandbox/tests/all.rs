//! cordon-sandbox's tests, one binary. Backends are test doubles
//! (`suite::doubles`); the real backends come in later issues.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

mod suite;
