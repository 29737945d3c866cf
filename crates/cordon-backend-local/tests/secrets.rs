//! Secrets at the local rungs, end to end through the router: a secret the
//! spec names and the policy grants is read by the workload at
//! `/run/cordon/secrets/NAME` at both rungs, and the workload can neither
//! write, remove nor re-mode it; a secret the policy does not grant is
//! refused before anything is made; one sandbox does not see another's
//! secrets (not at `/run/cordon/secrets`, not at their host directory); the
//! host directory is gone after dispose; a host-side write anywhere else
//! outside the work dir is still refused.
//!
//! Launching a sandbox needs root: elsewhere the tests skip loudly, and
//! with `CI=true` a machine that cannot hold the rung is a failure.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Identity};
use cordon_sandbox::{
    CallerContext, Capability, EgressSetup, ExecOutput, ExecRequest, ExitStatus, Isolation, Router,
    RouterError, Sandbox, SandboxError, SandboxSpec, SecretError, SecretName, SecretProvider,
    SecretValue,
};

/// The host's secret store, as a fixture: a file a secret under a
/// directory (a host configures `cordon_host::secrets::DirectorySecrets`,
/// which a backend's tests do not reach for).
struct StoreDir(PathBuf);

impl SecretProvider for StoreDir {
    fn read(&self, name: &SecretName) -> Result<SecretValue, SecretError> {
        std::fs::read(self.0.join(name.as_str()))
            .map(SecretValue::new)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => SecretError::Missing {
                    name: name.to_string(),
                },
                _ => SecretError::Refused {
                    name: name.to_string(),
                    reason: e.to_string(),
                },
            })
    }
}

mod common;

use common::rung_or_skip as init_or_skip;

/// A root policy (`cordon:default` grants no secret, and a layer over it
/// could only narrow): `cordon:default`'s compute and storage shape, and a
/// secret surface that grants `granted/…` only.
const POLICY: &str = r#"policy:
  compute:
    allow:
      - name: system-programs
        when: >-
          command.startsWith("/usr/") || command.startsWith("/bin/") ||
          command.startsWith("/sbin/") || command.startsWith("/lib/") ||
          command.startsWith("/lib64/")
    max_memory: 256MiB
    max_processes: 64
    max_cpu_seconds: 30
    max_wall_seconds: 60
  storage:
    allow:
      - name: system-read-execute
        when: >-
          (path.startsWith("/usr/") || path.startsWith("/lib/") ||
          path.startsWith("/lib64/") || path.startsWith("/bin/") ||
          path.startsWith("/sbin/")) && mode in ["read", "execute"]
      - name: etc-read
        when: path.startsWith("/etc/") && mode == "read"
      - name: work-dir
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
  secret:
    allow:
      - name: granted-secrets
        when: secret.name.startsWith("granted/")
"#;

struct Fixture {
    router: Router,
    parent: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn fixture(rung: Rung, init: InitProgram) -> Fixture {
    // Traversable by the sandbox's init, which binds its directories as
    // the workload's uid.
    let parent = common::work_parent("cordon-test-secrets-");
    let store = tempfile::Builder::new()
        .prefix("cordon-secret-store-")
        .tempdir()
        .unwrap();
    for (name, value) in [
        ("granted/a", "value-of-a"),
        ("granted/b", "value-of-b"),
        ("other/x", "value-of-x"),
    ] {
        let p = store.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, value).unwrap();
    }
    let mut text = POLICY.to_string();
    if rung == Rung::Process {
        // The process rung's private temporary directory is on the work
        // dir's volume, under `parent` (which `/tmp/` does not cover).
        text = text.replace(
            "  secret:\n",
            &format!("{}  secret:\n", common::process_rung_tmp(parent.path())),
        );
    }
    let policy = common::policy("secrets-test.yaml", &text);
    let backend = common::backend(
        rung,
        policy.clone(),
        parent.path(),
        init,
        EgressSetup::default(),
    );
    let floor = match rung {
        Rung::Process => Isolation::Process,
        Rung::Container => Isolation::Container,
    };
    let router = Router::builder(policy, Deployment::default())
        .min_isolation(floor)
        .backend(backend)
        .secrets(Arc::new(StoreDir(store.path().to_path_buf())))
        .build()
        .unwrap();
    Fixture {
        router,
        parent: parent.path().to_path_buf(),
        _dirs: (parent, store),
    }
}

fn caller(agent: &str) -> CallerContext {
    cordon_testkit::caller(
        "secrets",
        "thread",
        agent,
        Identity {
            namespace: "secrets-ns".into(),
            name: "secrets-workload".into(),
            ..Identity::default()
        },
    )
}

fn spec(secrets: &[&str]) -> SandboxSpec {
    SandboxSpec::new("secrets", "host")
        .unwrap()
        .with_requires([Capability::Exec])
        .with_secrets(secrets.iter().map(|s| SecretName::parse(s).unwrap()))
        .unwrap()
}

fn sh(sb: &Arc<dyn Sandbox>, script: &str) -> ExecOutput {
    let req = ExecRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: Default::default(),
        stdin: Vec::new(),
        timeout: Duration::from_secs(30),
        max_output_bytes: 1 << 20,
    };
    sb.exec(&req)
        .unwrap_or_else(|e| panic!("exec {script:?}: {e}"))
}

fn shown(o: &ExecOutput) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The host directories whose names start with `cordon-secrets-` in `parent`.
fn secret_dirs(parent: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(parent)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cordon-secrets-"))
        })
        .collect();
    v.sort();
    v
}

fn delivered_and_held(rung: Rung, test: &str) {
    let Some(init) = init_or_skip(rung, test) else {
        return;
    };
    let f = fixture(rung, init);
    let sb = f
        .router
        .acquire(&caller("a"), &spec(&["granted/a"]))
        .unwrap_or_else(|e| panic!("acquire with a granted secret: {e}"));
    // The positive: the workload reads its secret where the spec says.
    let o = sh(&sb, "cat /run/cordon/secrets/granted/a");
    assert_eq!(o.status, ExitStatus::Code(0), "{}", shown(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "value-of-a");
    // The negatives: each attempt to change it fails, and it is unchanged.
    for attack in [
        "echo x > /run/cordon/secrets/granted/a",
        "echo x >> /run/cordon/secrets/granted/a",
        "rm -f /run/cordon/secrets/granted/a",
        "chmod 0666 /run/cordon/secrets/granted/a",
        "mv /run/cordon/secrets/granted/a /run/cordon/secrets/granted/moved",
        "echo x > /run/cordon/secrets/granted/new",
        "mkdir /run/cordon/secrets/granted/d",
        "touch /run/cordon/secrets/planted",
    ] {
        let o = sh(&sb, attack);
        assert_ne!(
            o.status,
            ExitStatus::Code(0),
            "the workload changed its secret with `{attack}`: {}",
            shown(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr).to_lowercase();
        assert!(
            err.contains("read-only") || err.contains("permission denied"),
            "`{attack}` failed for another reason than EROFS/EACCES: {}",
            shown(&o)
        );
    }
    let o = sh(
        &sb,
        "cat /run/cordon/secrets/granted/a; stat -c '%a' /run/cordon/secrets/granted/a; ls -A /run/cordon/secrets/granted",
    );
    // Read-only for its group (the workload's), owned by someone else
    // (root; unmapped at the container rung), so no `chmod` of the
    // workload's could ever apply.
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "value-of-a440\na\n",
        "{}",
        shown(&o)
    );
    let o = sh(&sb, "id -u; stat -c '%u' /run/cordon/secrets/granted/a");
    let ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 2, "{}", shown(&o));
    assert_ne!(
        ids[0],
        ids[1],
        "the workload owns its secret: {}",
        shown(&o)
    );
    // Nothing of the host's `/run/cordon` (cordon's state directory as
    // root) shows beside the secrets.
    // (Landlock does not even let it list `/run/cordon`.)
    let o = sh(&sb, "ls -A /run/cordon");
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(listed.lines().all(|l| l == "secrets"), "{}", shown(&o));
    // A host-side write anywhere else outside the work dir is still refused.
    for elsewhere in [
        "/etc/planted",
        "/run/cordon/planted",
        "/run/cordon/secretsx/y",
    ] {
        let e = sb.write_file(elsewhere, b"x", 0o644).unwrap_err();
        assert!(
            matches!(e, SandboxError::PathRefused { .. }),
            "write_file `{elsewhere}`: {e}"
        );
    }
    assert!(!Path::new("/etc/planted").exists());
    let dirs = secret_dirs(&f.parent);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(f.router.dispose(&caller("a")).unwrap(), 1);
    assert!(
        secret_dirs(&f.parent).is_empty(),
        "the secrets dir outlived the sandbox: {dirs:?}"
    );
}

#[test]
fn the_process_rung_delivers_a_granted_secret_read_only() {
    delivered_and_held(
        Rung::Process,
        "the_process_rung_delivers_a_granted_secret_read_only",
    );
}

#[test]
fn the_container_rung_delivers_a_granted_secret_read_only() {
    delivered_and_held(
        Rung::Container,
        "the_container_rung_delivers_a_granted_secret_read_only",
    );
}

fn refused_and_apart(rung: Rung, test: &str) {
    let Some(init) = init_or_skip(rung, test) else {
        return;
    };
    let f = fixture(rung, init);
    // Not granted: refused before any backend is reached.
    let e = f
        .router
        .acquire(&caller("x"), &spec(&["granted/a", "other/x"]))
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(e, RouterError::SecretDenied { ref name, .. } if name == "other/x"),
        "{e}"
    );
    assert!(secret_dirs(&f.parent).is_empty());
    // Two sandboxes, one secret each: neither sees the other's.
    let a = f
        .router
        .acquire(&caller("a"), &spec(&["granted/a"]))
        .unwrap();
    let b = f
        .router
        .acquire(&caller("b"), &spec(&["granted/b"]))
        .unwrap();
    let dirs = secret_dirs(&f.parent);
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for (me, mine, theirs) in [(&a, "a", "b"), (&b, "b", "a")] {
        let o = sh(me, "ls -A /run/cordon/secrets/granted");
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("{mine}\n"));
        for d in &dirs {
            let o = sh(
                me,
                &format!(
                    "cat {}/granted/{theirs} 2>&1; ls {} 2>&1",
                    d.display(),
                    d.display()
                ),
            );
            assert!(
                !String::from_utf8_lossy(&o.stdout).contains(&format!("value-of-{theirs}")),
                "sandbox {mine} read {theirs}'s secret: {}",
                shown(&o)
            );
        }
    }
    assert_eq!(f.router.dispose(&caller("a")).unwrap(), 1);
    assert_eq!(f.router.dispose(&caller("b")).unwrap(), 1);
    assert!(secret_dirs(&f.parent).is_empty());
}

#[test]
fn the_process_rung_refuses_an_ungranted_secret_and_keeps_sandboxes_apart() {
    refused_and_apart(
        Rung::Process,
        "the_process_rung_refuses_an_ungranted_secret_and_keeps_sandboxes_apart",
    );
}

#[test]
fn the_container_rung_refuses_an_ungranted_secret_and_keeps_sandboxes_apart() {
    refused_and_apart(
        Rung::Container,
        "the_container_rung_refuses_an_ungranted_secret_and_keeps_sandboxes_apart",
    );
}
