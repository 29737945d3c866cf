//! The host's secret stores: a directory that refuses links, a command
//! answered by its exit status and bounded.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::time::Duration;

use cordon_host::secrets::{CommandSecrets, DirectorySecrets};
use cordon_sandbox::{SecretError, SecretName, SecretProvider};

fn store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("team-a")).unwrap();
    std::fs::write(dir.path().join("team-a/pypi-token"), "s3cr3t-pypi-token").unwrap();
    dir
}

#[test]
fn the_directory_store_reads_a_file_a_secret_and_knows_a_missing_one() {
    let dir = store();
    let p = DirectorySecrets::new(dir.path());
    let read = |n: &str| p.read(&SecretName::parse(n).unwrap());
    assert_eq!(
        read("team-a/pypi-token").unwrap().expose(),
        b"s3cr3t-pypi-token"
    );
    assert!(matches!(
        read("team-a/absent"),
        Err(SecretError::Missing { .. })
    ));
    std::fs::write(dir.path().join("team-a/big"), vec![0u8; (1 << 20) + 1]).unwrap();
    let err = read("team-a/big").unwrap_err().to_string();
    assert!(err.contains("larger than 1 MiB"), "{err}");
}

#[cfg(unix)]
#[test]
fn a_linked_secret_is_refused_by_the_directory_store() {
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
