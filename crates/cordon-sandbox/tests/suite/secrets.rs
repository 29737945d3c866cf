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
