//! Placement refuses, naming each engine and why, when none answers: a
//! socket that is not there, and one whose listener never answers (held to
//! the short answer timeout, not the long one of API calls). No engine
//! and no root needed.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::time::{Duration, Instant};

use cordon_backend_docker::engine::{Endpoint, ANSWER};
use cordon_backend_docker::probe::place;

#[test]
fn no_engine_answering_refuses_naming_each_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.sock");
    let hung = dir.path().join("hung.sock");
    // Accepts connections (the kernel's backlog) and never answers.
    let _listener = std::os::unix::net::UnixListener::bind(&hung).unwrap();
    let eps: Vec<Endpoint> = [&gone, &hung]
        .iter()
        .map(|p| Endpoint::parse(&format!("unix://{}", p.display())).unwrap())
        .collect();
    let started = Instant::now();
    let e = place(&eps).unwrap_err();
    let took = started.elapsed();
    assert!(e.contains(&format!("`{}`", eps[0])), "{e}");
    assert!(e.contains("no Docker Engine socket"), "{e}");
    assert!(e.contains(&format!("`{}`", eps[1])), "{e}");
    assert!(e.contains("did not answer within"), "{e}");
    assert!(e.contains("CORDON_DOCKER_HOST"), "{e}");
    assert!(
        took < ANSWER + Duration::from_secs(3),
        "placement waited {took:?} on an engine that does not answer"
    );
}
