//! `dispose_scope` works across backends that share nothing but the
//! engine (as two cordon processes, or one restarted, would): backend B
//! disposes of the sandbox backend A made, found by its anchor's labels,
//! and nothing of it is left on the engine or the host.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_testkit::dockerd;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cordon_backend_docker::engine::{Endpoint, Engine};
use cordon_backend_docker::{DockerBackend, DockerConfig};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{
    Backend, CallerContext, Capability, ExecRequest, ExitStatus, Isolation, Router, SandboxSpec,
};

fn backend(engine: &dockerd::Dockerd, policy: Arc<Policy>) -> Arc<DockerBackend> {
    backend_over(&[engine], policy)
}

/// A backend over `engines`, in that order.
fn backend_over(engines: &[&dockerd::Dockerd], policy: Arc<Policy>) -> Arc<DockerBackend> {
    let endpoints: Vec<Endpoint> = engines
        .iter()
        .map(|e| {
            let endpoint = Endpoint::parse(&e.host()).unwrap();
            Engine::connect(&endpoint).unwrap();
            endpoint
        })
        .collect();
    Arc::new(cordon_backend_docker::backend(DockerConfig {
        setup: cordon_backend_kit::EngineSetup {
            policy,
            env: Deployment::default(),
            // Where kept residues are vetted to be: this process's TMPDIR.
            scratch: std::env::temp_dir(),
            work_dir: None,
            egress: Default::default(),
        },
        endpoints,
    }))
}

/// The tests count this process's sandbox directories in TMPDIR: one at
/// a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn caller(scope: &str, thread: &str, agent: &str) -> CallerContext {
    cordon_testkit::caller(
        scope,
        thread,
        agent,
        Identity {
            namespace: scope.into(),
            attested: true,
            ..Identity::default()
        },
    )
}

/// The (thread, agent dir) of each sandbox an engine holds.
fn anchors(engine: &dockerd::Dockerd) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = engine
        .containers()
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| l["dev.cordon.role"] == "anchor")
        .map(|l| {
            (
                l["dev.cordon.thread"].as_str().unwrap().to_string(),
                l["dev.cordon.agent-dir"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    found.sort();
    found
}

fn ours_left(engine: &dockerd::Dockerd) -> Vec<String> {
    let mine = format!("cordon-docker-{}-", std::process::id());
    let mut left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&mine))
        .collect();
    left.extend(
        engine
            .containers()
            .into_iter()
            .filter(|(_, l)| l["dev.cordon.owner"] == "cordon" && l["dev.cordon.role"] != "probed")
            .map(|(n, _)| n),
    );
    left
}

#[test]
fn another_backend_disposes_of_a_scope_by_the_engines_labels() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = dockerd::Dockerd::start("docker dispose_scope across backends") else {
        return;
    };
    let policy = Arc::new(Policy::load_default().unwrap());
    let env = Deployment::default();
    let a = backend(&engine, policy.clone());
    let b = backend(&engine, policy.clone());
    let router = Router::builder(policy, env)
        .min_isolation(Isolation::Container)
        .backend(a.clone())
        .build()
        .unwrap();
    let caller = CallerContext::new(
        || "scope-x".to_string(),
        || "thread-1".to_string(),
        || "agent".to_string(),
        || Identity {
            namespace: "scope-x".into(),
            attested: true,
            ..Identity::default()
        },
    );
    let spec = SandboxSpec::new("scoped", "host")
        .unwrap()
        .with_requires([Capability::Exec]);
    let sandbox = router.acquire(&caller, &spec).expect("acquire");
    let out = sandbox
        .exec(&ExecRequest {
            argv: ["/bin/sh", "-c", "echo x > f"].map(String::from).to_vec(),
            env: BTreeMap::new(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(30),
            max_output_bytes: 4096,
        })
        .expect("exec");
    assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    drop(sandbox);
    assert_eq!(ours_left(&engine).len(), 2, "{:?}", ours_left(&engine));
    // Another thread's scope is not touched.
    assert_eq!(b.dispose_scope("scope-x", "thread-2").unwrap(), 0);
    assert_eq!(ours_left(&engine).len(), 2);
    // B never made it; it finds it on the engine.
    assert_eq!(b.dispose_scope("scope-x", "thread-1").unwrap(), 1);
    assert_eq!(ours_left(&engine), Vec::<String>::new());
    // A's own handle is stale now; disposing of it is harmless.
    let _ = router.dispose_scope("scope-x", "thread-1");
    assert_eq!(ours_left(&engine), Vec::<String>::new());
}

/// Over two engines: a backend places a thread's two sandboxes one on
/// each (the fewest, then the configured order); another backend, sharing
/// nothing but the engines, disposes of the thread on both. With the
/// second engine stopped, `dispose_scope` disposes of what the first holds
/// and returns an error naming the second (never a bare count); once it
/// is back, the same call finds and removes what it held.
#[test]
fn dispose_scope_looks_at_every_engine_and_names_one_that_does_not_answer() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(e1) = dockerd::Dockerd::start("docker dispose_scope over two engines (1)") else {
        return;
    };
    let Some(mut e2) = dockerd::Dockerd::start("docker dispose_scope over two engines (2)") else {
        return;
    };
    let policy = Arc::new(Policy::load_default().unwrap());
    let a = backend_over(&[&e1, &e2], policy.clone());
    let b = backend_over(&[&e1, &e2], policy.clone());
    let router = Router::builder(policy, Deployment::default())
        .min_isolation(Isolation::Container)
        .backend(a.clone())
        .build()
        .unwrap();
    let spec = SandboxSpec::new("placed", "host")
        .unwrap()
        .with_requires([Capability::Exec]);
    let acquire_all = || {
        for agent in ["p", "q"] {
            drop(
                router
                    .acquire(&caller("scope-y", "t", agent), &spec)
                    .expect("acquire"),
            );
        }
    };
    acquire_all();
    let one = |t: &str, a: &str| vec![(t.to_string(), a.to_string())];
    assert_eq!(anchors(&e1), one("t", "p"));
    assert_eq!(anchors(&e2), one("t", "q"));
    assert_eq!(b.dispose_scope("scope-y", "t").unwrap(), 2);
    assert_eq!(anchors(&e1), Vec::<(String, String)>::new());
    assert_eq!(anchors(&e2), Vec::<(String, String)>::new());
    let _ = router.dispose_scope("scope-y", "t");

    acquire_all();
    e2.stop();
    let e = b.dispose_scope("scope-y", "t").unwrap_err().to_string();
    assert!(e.contains("1 disposed"), "{e}");
    assert!(
        e.contains(&e2.host()) && e.contains("did not answer"),
        "{e}"
    );
    assert_eq!(anchors(&e1), Vec::<(String, String)>::new());
    e2.restart();
    assert_eq!(anchors(&e2), one("t", "q"));
    assert_eq!(b.dispose_scope("scope-y", "t").unwrap(), 1);
    assert_eq!(anchors(&e2), Vec::<(String, String)>::new());
    let _ = router.dispose_scope("scope-y", "t");
    assert_eq!(ours_left(&e1), Vec::<String>::new());
    assert_eq!(ours_left(&e2), Vec::<String>::new());
}
