//! Secrets: decided on the secret surface, delivered as read-only files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::secrets::{SECRETS_DIR, SECRET_MODE};
use cordon_sandbox::{DirectorySecrets, ExecRequest, RouterError, SecretName};

use super::doubles::{builder, ctx, spec, Fake};

const VALUE: &str = "s3cr3t-pypi-token";

fn store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("team-a")).unwrap();
    std::fs::write(dir.path().join("team-a/pypi-token"), VALUE).unwrap();
    std::fs::create_dir_all(dir.path().join("platform")).unwrap();
    std::fs::write(dir.path().join("platform/root-key"), "root").unwrap();
    std::fs::create_dir_all(dir.path().join("team-b")).unwrap();
    std::fs::write(dir.path().join("team-b/key"), "b").unwrap();
    dir
}

fn with_secret(name: &str) -> cordon_sandbox::SandboxSpec {
    spec()
        .with_secrets([SecretName::parse(name).unwrap()])
        .unwrap()
}

#[test]
fn a_granted_secret_is_delivered_read_only_and_never_in_the_environment() {
    let dir = store();
    let vm = Fake::microvm("vm");
    let router = builder()
        .backend(vm.clone())
        .secrets(Arc::new(DirectorySecrets::new(dir.path())))
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
    let dir = store();
    let vm = Fake::microvm("vm");
    let router = builder()
        .backend(vm.clone())
        .secrets(Arc::new(DirectorySecrets::new(dir.path())))
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
    let dir = store();
    let router = cordon_sandbox::Router::builder(policy, super::doubles::env())
        .backend(Fake::microvm("vm"))
        .secrets(Arc::new(DirectorySecrets::new(dir.path())))
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
    let dir = store();
    let router = builder()
        .backend(Fake::microvm("vm"))
        .secrets(Arc::new(DirectorySecrets::new(dir.path())))
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

#[cfg(unix)]
#[test]
fn a_linked_secret_is_refused_by_the_directory_store() {
    use cordon_sandbox::SecretProvider;
    let dir = store();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("host-key"), "host").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("team-a/linked")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("host-key"),
        dir.path().join("team-a/file-link"),
    )
    .unwrap();
    let p = DirectorySecrets::new(dir.path());
    for name in ["team-a/linked/host-key", "team-a/file-link"] {
        let err = p.read(&SecretName::parse(name).unwrap()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{name}: {err}");
    }
    assert!(p
        .read(&SecretName::parse("team-a/pypi-token").unwrap())
        .is_ok());
}

#[test]
fn a_command_store_answers_by_its_exit_status_and_is_bounded() {
    use cordon_sandbox::{CommandSecrets, SecretError, SecretProvider};
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("store");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$1\" in\n  team-a/pypi-token) printf s3cr3t ;;\n  team-a/gone) exit 2 ;;\n  team-a/big) head -c 2000000 /dev/zero ;;\n  team-a/slow) exec sleep 60 ;;\n  *) echo \"no access to $1\" >&2; exit 1 ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(CommandSecrets::new(vec!["store".into()]).is_err());
    assert!(CommandSecrets::new(Vec::new()).is_err());
    let p = CommandSecrets::new(vec![script.display().to_string()]).unwrap();
    let read = |n: &str| p.read(&SecretName::parse(n).unwrap());
    assert_eq!(read("team-a/pypi-token").unwrap().expose(), b"s3cr3t");
    assert!(matches!(
        read("team-a/gone"),
        Err(SecretError::Missing { .. })
    ));
    let err = read("team-b/key").unwrap_err().to_string();
    assert!(err.contains("no access to team-b/key"), "{err}");
    let err = read("team-a/big").unwrap_err().to_string();
    assert!(err.contains("larger than 1 MiB"), "{err}");
    let started = std::time::Instant::now();
    let err = read("team-a/slow").unwrap_err().to_string();
    assert!(err.contains("did not answer within"), "{err}");
    assert!(started.elapsed() < CommandSecrets::TIMEOUT + Duration::from_secs(5));
}
