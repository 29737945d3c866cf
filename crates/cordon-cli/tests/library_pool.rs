//! Warm pools through the Rust library (`cordon_host::pool::WarmPool`),
//! over a host the host builder makes at the container rung under
//! `cordon:default`: sandboxes in this process, and kept (a keeper each,
//! a state directory), as `cordon serve`'s pools are. Real sandboxes; it
//! needs root (a loud skip without, a failure under `CI=true`).
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cordon_host::config::{Floor, FloorSource};
use cordon_host::pool::{PoolOptions, WarmPool};
use cordon_host::roles::SelfCommands;
use cordon_host::state::StateDir;
use cordon_host::{Host, HostBuilder, Keep};
use cordon_policy::Identity;
use cordon_sandbox::{CallerContext, ExecRequest, ExitStatus, Isolation, Sandbox, SandboxSpec};

const SCOPE: &str = "lib-pool";

fn identity(name: &str) -> Identity {
    Identity {
        namespace: SCOPE.into(),
        name: name.into(),
        attested: true,
        ..Identity::default()
    }
}

fn caller(thread: &str, who: &str) -> CallerContext {
    let (thread, id) = (thread.to_string(), identity(who));
    CallerContext::new(
        || SCOPE.to_string(),
        move || thread.clone(),
        || "default".to_string(),
        move || id.clone(),
    )
}

fn host(state: Option<&Path>) -> Host {
    let bin = cordon_testkit::cordon!().bin().to_path_buf();
    let mut b = HostBuilder::builtin()
        .commands(SelfCommands::of(&bin))
        .only(Some("container".into()))
        .floor(Floor {
            rung: Isolation::Container,
            source: FloorSource::Flag,
        });
    if let Some(s) = state {
        b = b.keep(Keep {
            state: StateDir::open(s).unwrap(),
            owner: "library-pool-test".into(),
            idle_timeout: Duration::from_secs(600),
            max_age: Duration::from_secs(3600),
            on_idle_pause: None,
        });
    }
    b.build()
        .unwrap_or_else(|e| panic!("the library host: {e}"))
}

fn sh(s: &dyn Sandbox, script: &str) -> String {
    let out = s
        .exec(&ExecRequest {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: Default::default(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 16,
        })
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The case, for either host: 12 concurrent get-or-creates against a pool
/// of 4 — each caller has a sandbox of its own (no two share one), 4 of
/// them claimed, each found again at its caller's key; the pool refills;
/// another identity, or a caller that has a sandbox already, claims
/// nothing; the drain leaves nothing of the pool.
fn claims_are_never_shared_and_the_pool_refills(host: Host) {
    let router = Arc::new(host.router);
    let spec = SandboxSpec::new("run", "host").unwrap();
    let pool = Arc::new(
        WarmPool::new(PoolOptions {
            name: "lib".into(),
            spec: spec.clone(),
            identity: identity("agent"),
            scope: SCOPE.into(),
            size: 4,
            max_age: Duration::from_secs(600),
        })
        .unwrap(),
    );
    assert_eq!(pool.fill(&router, &|_| false).unwrap(), 4);
    assert_eq!(pool.ready(), 4);
    let waiting: BTreeSet<String> = pool.threads().into_iter().collect();

    let got: Vec<(String, String)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..12)
            .map(|i| {
                let (router, pool, spec) = (router.clone(), pool.clone(), spec.clone());
                s.spawn(move || {
                    let t = format!("t-{i}");
                    let sb = pool.acquire(&router, &caller(&t, "agent"), &spec).unwrap();
                    sh(&*sb, &format!("echo {i} > mine"));
                    (t, sb.id().to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: BTreeSet<&String> = got.iter().map(|(_, id)| id).collect();
    assert_eq!(
        ids.len(),
        12,
        "two callers were handed one sandbox: {got:?}"
    );
    assert_eq!(pool.claims(), 4);
    assert_eq!(pool.ready(), 0);
    for (i, (t, id)) in got.iter().enumerate() {
        let again = router.acquire(&caller(t, "agent"), &spec).unwrap();
        assert_eq!(again.id(), id, "{t} is not found at its key");
        assert_eq!(sh(&*again, "cat mine"), i.to_string(), "{t}");
    }
    // Nothing is left at the pool's keys: a dispose there finds nothing.
    for t in &waiting {
        assert_eq!(router.dispose(&pool.caller_at(t)).unwrap(), 0, "{t}");
    }

    assert_eq!(pool.fill(&router, &|_| false).unwrap(), 4);
    // Another identity is not served; a caller with a sandbox keeps it.
    assert!(pool
        .claim(&router, &caller("other", "stranger"), &spec)
        .unwrap()
        .is_none());
    assert!(pool
        .claim(&router, &caller("t-0", "agent"), &spec)
        .unwrap()
        .is_none());
    assert_eq!(pool.ready(), 4);
    assert_eq!(
        pool.acquire(&router, &caller("t-0", "agent"), &spec)
            .unwrap()
            .id(),
        got[0].1
    );
    // One claimed from the refill is a new one, and works.
    let late = pool
        .acquire(&router, &caller("late", "agent"), &spec)
        .unwrap();
    assert!(!ids.contains(&late.id().to_string()));
    assert_eq!(sh(&*late, "echo ok"), "ok");

    // The router moves a sandbox only between callers of one identity.
    let t = pool.threads()[0].clone();
    let e = router
        .rekey(&pool.caller_at(&t), &caller("stolen", "stranger"))
        .unwrap_err();
    assert!(
        matches!(e, cordon_sandbox::RouterError::Mismatch { .. }),
        "{e}"
    );
    assert_eq!(router.dispose(&caller("stolen", "stranger")).unwrap(), 0);
    // Nor out of its scope, even for its own identity.
    let (id, elsewhere) = (identity("agent"), "stolen".to_string());
    let other_scope = CallerContext::new(
        || "another-scope".to_string(),
        move || elsewhere.clone(),
        || "default".to_string(),
        move || id.clone(),
    );
    let e = router.rekey(&pool.caller_at(&t), &other_scope).unwrap_err();
    assert!(
        matches!(e, cordon_sandbox::RouterError::Mismatch { .. })
            && e.to_string().contains("scope"),
        "{e}"
    );
    assert_eq!(router.dispose(&other_scope).unwrap(), 0);

    assert_eq!(pool.drain(&router), 3);
    assert_eq!(pool.ready(), 0);
    assert_eq!(
        pool.fill(&router, &|_| false).unwrap(),
        0,
        "a drained pool refilled"
    );
    for (t, _) in got.iter().chain([&("late".to_string(), String::new())]) {
        assert_eq!(router.dispose(&caller(t, "agent")).unwrap(), 1, "{t}");
    }
}

#[test]
fn a_library_pool_in_this_process() {
    if !cordon_testkit::can_sandbox("library pool") {
        return;
    }
    claims_are_never_shared_and_the_pool_refills(host(None));
}

/// Kept: the claim moves the record, so the state directory finds every
/// caller's sandbox at its key, and none is left behind.
#[test]
fn a_library_pool_of_kept_sandboxes() {
    if !cordon_testkit::can_sandbox("library pool, kept") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&state)
        .unwrap();
    claims_are_never_shared_and_the_pool_refills(host(Some(&state)));
    let (left, _) = StateDir::open(&state).unwrap().list().unwrap();
    assert!(left.is_empty(), "{left:?}");
}
