//! cordon-linux's integration tests: one binary, cases under `suite/`.
//!
//! These need root and kernel features. With `CI=true` they must run and
//! fail when something is missing; elsewhere they skip, loudly.

#![cfg_attr(
    all(target_os = "linux", target_arch = "x86_64"),
    expect(
        clippy::expect_used,
        reason = "test harness helpers: a failed setup step is a failed test"
    )
)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod suite;
