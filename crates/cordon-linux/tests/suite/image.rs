//! The container rung running a stored image (`Plan::image_root`): the
//! workload sees the image's files and not the host's, the image is
//! read-only whatever the rules grant, the work dir comes from
//! `work_dir_source`, and no host path a rule names is bound in.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_linux::{FsRule, Rung};

use super::*;

const MARKER: &str = "ID=cordon-test-image";

/// Copies `bin` and the shared libraries `ldd` names into `img`, each at
/// the path the loader asks for (real directories, no links).
fn copy_with_libs(img: &Path, bins: &[&str]) {
    let mut files: Vec<PathBuf> = bins.iter().map(PathBuf::from).collect();
    for bin in bins {
        let out = Command::new("ldd").arg(bin).output().expect("ldd");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let path = line
                .split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from);
            if let Some(p) = path {
                files.push(p);
            }
        }
    }
    for f in files {
        let to = img.join(f.strip_prefix("/").expect("absolute"));
        fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        if !to.exists() {
            fs::copy(&f, &to).unwrap_or_else(|e| panic!("copy {}: {e}", f.display()));
        }
    }
}

/// A tiny image: `sh`, `cat`, `touch`, `ls` and their libraries under
/// `/bin`, `/lib`, `/lib64`; `/etc/os-release` with [`MARKER`]; an
/// `/etc/shadow` readable by anyone (the mask must still hide it); a
/// top-level link to the host's `/etc`.
pub fn tiny_image() -> tempfile::TempDir {
    let img = tempfile::Builder::new()
        .prefix("cordon-image-")
        .tempdir_in("/var/tmp")
        .expect("image dir");
    fs::set_permissions(img.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    copy_with_libs(
        img.path(),
        &["/bin/sh", "/bin/cat", "/usr/bin/touch", "/bin/ls"],
    );
    let etc = img.path().join("etc");
    fs::create_dir_all(&etc).expect("etc");
    fs::write(etc.join("os-release"), format!("{MARKER}\n")).expect("os-release");
    fs::write(etc.join("shadow"), "root:image-secret-hash:::::::\n").expect("shadow");
    fs::set_permissions(etc.join("shadow"), fs::Permissions::from_mode(0o644)).expect("chmod");
    std::os::unix::fs::symlink("/etc", img.path().join("hostetc")).expect("link");
    for d in ["proc", "sys", "dev", "tmp", "run"] {
        fs::create_dir_all(img.path().join(d)).expect("mkdir");
    }
    // Every directory readable and searchable by the sandbox's uid.
    let out = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(img.path())
        .status()
        .expect("chmod");
    assert!(out.success());
    img
}

/// A container-rung `sh -c` case over `img`, its work dir at `/workspace`.
fn in_image(img: &Path, script: &str) -> Case {
    let mut case = shell(Rung::Container, script);
    case.spec.image_root = Some(img.to_path_buf());
    case.spec.work_dir_source = Some(case.work.path().to_path_buf());
    case.spec.work_dir = PathBuf::from("/workspace");
    case
}

fn ok(run: &Run) {
    assert!(
        matches!(
            run.outcome.termination,
            cordon_linux::Termination::Exited(0)
        ),
        "{run:?}"
    );
}

#[test]
fn the_workload_sees_the_image_and_not_the_host() {
    let Some(enforcer) = enforcer_for(Rung::Container, "image root") else {
        return;
    };
    let img = tiny_image();
    let case = in_image(
        img.path(),
        "cat /etc/os-release; \
         test -e /usr/bin/python3 && echo BREACH-host-usr; \
         test -e /etc/passwd && echo BREACH-host-etc; \
         cat /etc/shadow; \
         test -e /hostetc/passwd && echo BREACH-link-to-host; \
         ls /; echo END",
    );
    let run = case.run(&enforcer);
    ok(&run);
    assert!(run.stdout.contains(MARKER), "{run:?}");
    assert!(!run.stdout.contains("BREACH"), "{run:?}");
    // The mask still covers the image's own shadow file.
    assert!(!run.stdout.contains("image-secret-hash"), "{run:?}");
    // proc/sys/dev/tmp/run of the image are not bound; the sandbox's own
    // /proc, /dev, /tmp are there, and no /sys or /run.
    assert!(
        !run.stdout.lines().any(|l| l == "sys" || l == "run"),
        "{run:?}"
    );
    assert!(run.stdout.contains("END"), "{run:?}");
}

#[test]
fn the_image_is_read_only_even_where_a_rule_grants_write() {
    let Some(enforcer) = enforcer_for(Rung::Container, "image read-only") else {
        return;
    };
    let img = tiny_image();
    let mut case = in_image(
        img.path(),
        "touch /etc/pwned && echo BREACH-etc; touch /bin/pwned && echo BREACH-bin; \
         touch /pwned && echo BREACH-root; echo END",
    );
    // Landlock would allow these writes; only the read-only mounts stop them.
    for p in ["/etc", "/bin"] {
        case.spec.fs.push(FsRule {
            path: PathBuf::from(p),
            read: true,
            write: true,
            execute: p == "/bin",
        });
    }
    let run = case.run(&enforcer);
    assert!(!run.stdout.contains("BREACH"), "{run:?}");
    assert!(run.stderr.contains("Read-only file system"), "{run:?}");
    assert!(run.stdout.contains("END"), "{run:?}");
    for p in ["etc/pwned", "bin/pwned", "pwned"] {
        assert!(
            !img.path().join(p).exists(),
            "{p} was written into the image"
        );
    }
}

#[test]
fn the_work_dir_source_appears_at_workspace_and_is_writable() {
    let Some(enforcer) = enforcer_for(Rung::Container, "image work dir") else {
        return;
    };
    let img = tiny_image();
    let case = in_image(
        img.path(),
        "cat /workspace/in.txt; echo out > /workspace/out.txt; pwd",
    );
    fs::write(case.work.path().join("in.txt"), "from-host\n").expect("write");
    give_file(&case.work.path().join("in.txt"), case.host_uid());
    let run = case.run(&enforcer);
    ok(&run);
    assert!(run.stdout.contains("from-host"), "{run:?}");
    assert!(run.stdout.contains("/workspace"), "{run:?}");
    assert_eq!(
        fs::read_to_string(case.work.path().join("out.txt")).expect("out.txt"),
        "out\n"
    );
    // The work dir is not also shown at its host path.
    assert!(
        !img.path().join("workspace").exists(),
        "mount point left in the image"
    );
}

fn give_file(p: &Path, host: u32) {
    let _ = std::os::unix::fs::chown(p, Some(host), Some(host));
}

#[test]
fn a_host_path_a_rule_grants_is_not_visible_in_an_image_sandbox() {
    let Some(enforcer) = enforcer_for(Rung::Container, "image host path") else {
        return;
    };
    let host = open_host_dir();
    fs::write(host.path().join("secret"), "host-secret\n").expect("secret");
    fs::set_permissions(
        host.path().join("secret"),
        fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let grant = FsRule {
        path: host.path().to_path_buf(),
        read: true,
        write: true,
        execute: false,
    };
    let script = format!(
        "cat {0}/secret; test -e {0} && echo BREACH-visible; echo END",
        host.path().display()
    );
    // With the host image the same rule shows it: the rule really grants.
    let mut control = shell(Rung::Container, &script);
    control.spec.fs.push(grant.clone());
    let run = control.run(&enforcer);
    assert!(run.stdout.contains("host-secret"), "control: {run:?}");

    let img = tiny_image();
    let mut case = in_image(img.path(), &script);
    case.spec.fs.push(grant);
    let run = case.run(&enforcer);
    assert!(!run.stdout.contains("host-secret"), "{run:?}");
    assert!(!run.stdout.contains("BREACH"), "{run:?}");
    assert!(run.stdout.contains("END"), "{run:?}");
}

#[test]
fn a_work_dir_through_a_link_of_the_image_is_refused() {
    let Some(enforcer) = enforcer_for(Rung::Container, "image work dir link") else {
        return;
    };
    let img = tiny_image();
    // `/hostetc` links to `/etc`: resolved before pivot_root, a mount there
    // would land on the host's /etc (in the sandbox's mount namespace).
    let mut case = in_image(img.path(), "echo BREACH");
    case.spec.work_dir = PathBuf::from("/hostetc/w");
    let err = case
        .try_run(&enforcer, cordon_linux::SandboxStdio::piped())
        .map(|r| format!("{r:?}"))
        .expect_err("a work dir through an image link must be refused");
    assert!(err.contains("symlink"), "{err}");
}

#[test]
fn the_host_image_binds_the_work_dir_from_its_source() {
    let Some(enforcer) = enforcer_for(Rung::Container, "host image work dir source") else {
        return;
    };
    let mut case = shell(
        Rung::Container,
        "echo hi > /workspace/f && cat /workspace/f; pwd",
    );
    case.spec.work_dir_source = Some(case.work.path().to_path_buf());
    case.spec.work_dir = PathBuf::from("/workspace");
    let hidden = case.work.path().display().to_string();
    case.spec.argv[2].push_str(&format!(
        "; test -e {hidden} && echo BREACH-host-path; true"
    ));
    let run = case.run(&enforcer);
    ok(&run);
    assert!(run.stdout.contains("hi"), "{run:?}");
    assert!(!run.stdout.contains("BREACH"), "{run:?}");
    assert_eq!(
        fs::read_to_string(case.work.path().join("f")).expect("f"),
        "hi\n"
    );
}
