//! cordon-kits' tests, one binary: each kit against the host-directory test
//! subject and against deliberately unsafe variants of it.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

mod suite;
