//! `dispose_scope` works across backends that share nothing but the
//! engine (as two cordon processes, or one restarted, would): backend B
//! disposes of the sandbox backend A made, found by its anchor's labels,
//! and nothing of it is left on the engine or the host.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

#[path = "../../cordon-cli/tests/common/dockerd.rs"]
mod dockerd;

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
    let endpoint = Endpoint::parse(&engine.host()).unwrap();
    Engine::connect(&endpoint).unwrap();
    Arc::new(DockerBackend::new(DockerConfig {
        policy,
        env: Deployment::default(),
        // Where kept residues are vetted to be: this process's TMPDIR.
        scratch: std::env::temp_dir(),
        work_dir: None,
        endpoints: vec![endpoint],
        egress: Default::default(),
    }))
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
