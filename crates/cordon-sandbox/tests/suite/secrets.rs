//! Secrets: decided on the secret surface, delivered as read-only files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::secrets::{SECRETS_DIR, SECRET_MODE};
use cordon_sandbox::{
    ExecRequest, RouterError, SecretError, SecretName, SecretProvider, SecretValue,
};

use super::doubles::{builder, ctx, spec, Fake};

const VALUE: &str = "s3cr3t-pypi-token";

/// A host's secret store, in memory (the host's own stores are
/// `cordon_host::secrets`).
struct Store(BTreeMap<&'static str, &'static str>);

impl SecretProvider for Store {
    fn read(&self, name: &SecretName) -> Result<SecretValue, SecretError> {
        match self.0.get(name.as_str()) {
            Some(v) => Ok(SecretValue::new(v.as_bytes().to_vec())),
            None => Err(SecretError::Missing {
                name: name.to_string(),
            }),
        }
    }
}

fn store() -> Arc<Store> {
    Arc::new(Store(BTreeMap::from([
        ("team-a/pypi-token", VALUE),
        ("platform/root-key", "root"),
        ("team-b/key", "b"),
    ])))
}

fn with_secret(name: &str) -> cordon_sandbox::SandboxSpec {
    spec()
        .with_secrets([SecretName::parse(name).unwrap()])
        .unwrap()
}

#[test]
fn a_granted_secret_is_delivered_read_only_and_never_in_the_environment() {
    let vm = Fake::microvm("vm");
    let router = builder()
        .backend(vm.clone())
        .secrets(store())
        .build()
        .unwrap();
    let sb = router
        .acquire(&ctx(), &with_secret("team-a/pypi-token"))
        .unwrap();
    let fake = vm.sandbox("tenant-1").unwrap();
    let files = fake.files.lock().unwrap().clone();
    let path = format!("{SECRETS_DIR}/team-a/pypi-token");
    assert_eq!(path, "/run/cordon/secrets/team-a/pypi-token");
    let (bytes, mode) = files.get(&path).expect("secret file delivered");
    assert_eq!(bytes, VALUE.as_bytes());
    assert_eq!(*mode, SECRET_MODE);
    assert_eq!(mode & 0o222, 0, "the secret file is not writable");
    // The sandbox's environment does not hold it.
    let out = sb
        .exec(&ExecRequest {
            argv: vec!["env".into()],
            env: BTreeMap::new(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(5),
            max_output_bytes: 1 << 16,
        })
        .unwrap();
    let env = String::from_utf8(out.stdout).unwrap();
    assert!(
        env.contains("PATH="),
        "the double prints its environment: {env}"
    );
    assert!(!env.contains(VALUE), "{env}");
    // Nor does anything the backend was handed.
    for r in vm.requests.lock().unwrap().iter() {
        assert!(!r.contains(VALUE), "{r}");
    }
}

#[test]
fn a_secret_the_policy_denies_fails_the_acquire_naming_the_rule() {
    let vm = Fake::microvm("vm");
    let router = builder()
        .backend(vm.clone())
        .secrets(store())
        .build()
        .unwrap();
    let err = router
        .acquire(&ctx(), &with_secret("platform/root-key"))
        .unwrap_err();
    assert!(matches!(err, RouterError::SecretDenied { .. }));
    insta::assert_snapshot!("secret_denied_by_rule", err.to_string());
    // No allow rule matches another tenant's secret: refused too.
    let err = router
        .acquire(&ctx(), &with_secret("team-b/key"))
        .unwrap_err();
    insta::assert_snapshot!("secret_no_allow", err.to_string());
    assert_eq!(vm.acquires(), 0, "refused before any backend was reached");
}

#[test]
fn an_undetermined_secret_decision_is_a_deny() {
    // The allow rule reads a label the identity lacks: an error, so open.
    let text = r#"policy:
  secret:
    allow:
      - name: by-label
        when: identity.labels["team"] == "a"
"#;
    let policy = Arc::new(cordon_policy::Policy::load_str("p.yaml", text).unwrap());
    let router = cordon_sandbox::Router::builder(policy, super::doubles::env())
        .backend(Fake::microvm("vm"))
        .secrets(store())
        .build()
        .unwrap();
    let err = router
        .acquire(&ctx(), &with_secret("team-a/pypi-token"))
        .unwrap_err();
    assert!(matches!(err, RouterError::SecretDenied { .. }), "{err}");
    assert!(err.to_string().contains("undetermined"), "{err}");
}

#[test]
fn a_secret_missing_from_the_store_or_without_a_store_is_refused() {
    let router = builder()
        .backend(Fake::microvm("vm"))
        .secrets(store())
        .build()
        .unwrap();
    let err = router
        .acquire(&ctx(), &with_secret("team-a/absent"))
        .unwrap_err();
    insta::assert_snapshot!("secret_missing", err.to_string());
    let router = builder().backend(Fake::microvm("vm")).build().unwrap();
    let err = router
        .acquire(&ctx(), &with_secret("team-a/pypi-token"))
        .unwrap_err();
    insta::assert_snapshot!("secret_no_provider", err.to_string());
}

/// A policy that inspects `api.example.com`, lets a tenant reach it, and
/// lets `openai/key` go to it only in `authorization` under `/v1/`.
const BROKERING: &str = r#"policy:
  egress:
    inspect: [api.example.com]
    allow:
      - host == "api.example.com" || host == "other.example.com"
  secret:
    allow:
      - name: key-to-models
        when: >-
          secret.name == "openai/key" && destination.host == "api.example.com" &&
          destination.header == "authorization" && destination.path.startsWith("/v1/")
"#;

fn placeholder_spec(to: &str) -> cordon_sandbox::SandboxSpec {
    cordon_sandbox::SandboxSpec::from_yaml(
        "spec.yaml",
        &format!(
            "kind: k\nimage: i\negress_allow: [api.example.com, other.example.com]\nsecrets:\n  - {{name: openai/key, as: placeholder, to: [{to}]}}\n"
        ),
    )
    .unwrap()
}

fn brokering_router(policy: &str, vm: Arc<Fake>, value: &'static str) -> cordon_sandbox::Router {
    let policy = Arc::new(cordon_policy::Policy::load_str("p.yaml", policy).unwrap());
    cordon_sandbox::Router::builder(policy, super::doubles::env())
        .backend(vm)
        .secrets(Arc::new(Store(BTreeMap::from([("openai/key", value)]))))
        .build()
        .unwrap()
}

/// A placeholder secret: the sandbox's file holds a random placeholder
/// (the same on every acquire of that sandbox), the backend is handed the
/// value for its proxy only (never shown), and the secret's rule is
/// decided at acquire with the destination host bound (the rest of the
/// destination is the proxy's to decide per request).
#[test]
fn a_placeholder_secret_puts_a_stand_in_in_the_sandbox_and_the_value_with_its_proxy() {
    let vm = Fake::microvm("vm");
    let router = brokering_router(BROKERING, vm.clone(), "sk-live-abc\n");
    router
        .acquire(&ctx(), &placeholder_spec("api.example.com"))
        .unwrap();
    let fake = vm.sandbox("tenant-1").unwrap();
    let files = fake.files.lock().unwrap().clone();
    let (bytes, mode) = files
        .get("/run/cordon/secrets/openai/key")
        .expect("the placeholder is delivered where the value would be");
    let placeholder = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        placeholder.starts_with("cordon-secret-") && placeholder.len() == 46,
        "{placeholder}"
    );
    assert_eq!(*mode, SECRET_MODE);
    let handed = vm.requests.lock().unwrap().join("\n");
    assert!(
        handed.contains(&placeholder),
        "the backend's proxy is handed the placeholder"
    );
    assert!(
        !handed.contains("sk-live-abc"),
        "the value is never shown: {handed}"
    );
    // Another acquire of the same sandbox: the same placeholder.
    router
        .acquire(&ctx(), &placeholder_spec("api.example.com"))
        .unwrap();
    let again = vm
        .sandbox("tenant-1")
        .unwrap()
        .files
        .lock()
        .unwrap()
        .clone();
    assert_eq!(
        again.get("/run/cordon/secrets/openai/key").unwrap().0,
        placeholder.as_bytes()
    );
}

/// Refused at acquire, before any backend: toward a host the policy does
/// not inspect (the proxy could not put the value in), toward a host the
/// secret's rule denies, and a value that cannot go in a header.
#[test]
fn a_placeholder_secret_is_refused_where_the_proxy_could_not_hold_it() {
    let vm = Fake::microvm("vm");
    let router = brokering_router(BROKERING, vm.clone(), "sk-live-abc");
    let err = router
        .acquire(&ctx(), &placeholder_spec("other.example.com"))
        .unwrap_err();
    assert!(
        matches!(err, RouterError::PlaceholderNotInspected { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("egress.inspect"), "{err}");
    let inspecting_both = BROKERING.replace(
        "inspect: [api.example.com]",
        "inspect: [api.example.com, other.example.com]",
    );
    let router = brokering_router(&inspecting_both, vm.clone(), "sk-live-abc");
    let err = router
        .acquire(&ctx(), &placeholder_spec("other.example.com"))
        .unwrap_err();
    assert!(matches!(err, RouterError::SecretDenied { .. }), "{err}");
    let router = brokering_router(BROKERING, vm.clone(), "two\nlines");
    let err = router
        .acquire(&ctx(), &placeholder_spec("api.example.com"))
        .unwrap_err();
    assert!(err.to_string().contains("no CR, LF or NUL"), "{err}");
    assert_eq!(vm.acquires(), 0, "refused before any backend was reached");
}
