//! A deny on a program holds by file, not by name: through the real binary
//! at both rungs, on the host's own trees and on a stored image. Every
//! other name of a denied file (a hard link, beside it or elsewhere in a
//! granted tree) is refused too, directly and through the dynamic loader;
//! and a literal prefix deny (`command.startsWith(...)`) is held by
//! listing the directory it ends in, not refused.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cordon_testkit::can_sandbox;

const RUNGS: [&str; 2] = ["process", "container"];

fn ld_so() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/lib/ld-linux-aarch64.so.1"
    } else {
        "/lib64/ld-linux-x86-64.so.2"
    }
}

/// `cordon run` at `rung` under `policy` (and `env`), `sh -c script`.
fn run(
    rung: &str,
    policy: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    script: &str,
) -> (i32, String, String) {
    cordon_testkit::output(
        cordon_testkit::cordon!()
            .command(["run", "--min-isolation", rung, "--backend", rung])
            .args(["--policy", policy.to_str().unwrap()])
            .args(extra)
            .args(["--", "/bin/sh", "-c", script])
            .envs(env.iter().copied())
            .output()
            .expect("cordon run"),
    )
}

/// The system trees, the work dir and `/tmp`, plus `extra_tree` (read and
/// execute, its programs allowed) when given; `deny` is the compute deny's
/// `when`.
fn policy(dir: &Path, extra_tree: Option<&Path>, deny: &str) -> PathBuf {
    let (storage, compute) = match extra_tree {
        Some(t) => (
            format!(
                "      - name: tree\n        when: path.startsWith(\"{0}/\") && mode in [\"read\", \"execute\"]\n",
                t.display()
            ),
            format!(" || command.startsWith(\"{}/\")", t.display()),
        ),
        None => (String::new(), String::new()),
    };
    let text = format!(
        r#"policy:
  compute:
    max_memory: 256MiB
    max_wall_seconds: 20
    allow:
      - name: system-programs
        when: command.startsWith("/usr/") || command.startsWith("/bin/") || command.startsWith("/lib/") || command.startsWith("/lib64/"){compute}
    deny:
      - name: the-deny
        when: {deny}
  storage:
    allow:
      - name: system
        when: (path.startsWith("/usr/") || path.startsWith("/lib/") || path.startsWith("/lib64/") || path.startsWith("/bin/")) && mode in ["read", "execute"]
      - name: etc
        when: path.startsWith("/etc/") && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
{storage}"#
    );
    let p = dir.join("policy.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

/// The other names of `path` in its own directory (its hard links).
fn names_beside(path: &str) -> Vec<String> {
    let p = Path::new(path);
    let Ok(meta) = std::fs::metadata(p) else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.path() != p)
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        })
        .map(|e| e.path().display().to_string())
        .collect();
    names.sort();
    names
}

/// A script that tries each of `names` directly and through the loader
/// with `args`, then says `end`.
fn try_all(names: &[String], args: &str) -> String {
    let mut s = String::new();
    for n in names {
        s.push_str(&format!("{n} {args}; {} {n} {args}; ", ld_so()));
    }
    s.push_str("echo end");
    s
}

#[test]
fn perl_is_denied_under_its_other_name_at_both_rungs() {
    if !can_sandbox("deny perl by file") {
        return;
    }
    let others = names_beside("/usr/bin/perl");
    if others.is_empty() {
        cordon_testkit::skip("deny perl by file", "/usr/bin/perl has no other name here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), None, r#"command == "/usr/bin/perl""#);
    let mut names = vec!["/usr/bin/perl".to_string()];
    names.extend(others);
    let script = try_all(&names, "-e 'print qq(PERL-RAN\\n)'");
    for rung in RUNGS {
        let (code, out, err) = run(rung, &p, &[], &[], &script);
        assert_eq!(code, 0, "{rung}: {err}");
        assert!(out.ends_with("end\n"), "{rung}: {out}\n{err}");
        assert!(
            !out.contains("PERL-RAN"),
            "{rung}: a name of perl ran: {out}\n{err}"
        );
    }
}

/// A fresh tree under `/var/tmp` (outside the container rung's own `/tmp`):
/// `bin/prog` and `bin/prog-two` (copies of `echo`), `bin/keep` (another
/// copy), and `lib/deep/renamed`, a hard link of `bin/prog` elsewhere in
/// the tree.
fn tree() -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix("cordon-deny-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in ["bin", "lib/deep"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
        std::fs::set_permissions(r.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let echo = std::fs::canonicalize("/bin/echo").unwrap();
    for f in ["bin/prog", "bin/prog-two", "bin/keep"] {
        std::fs::copy(&echo, r.join(f)).unwrap();
    }
    std::fs::hard_link(r.join("bin/prog"), r.join("lib/deep/renamed")).unwrap();
    t
}

#[test]
fn a_hard_link_elsewhere_in_a_granted_tree_is_denied_at_both_rungs() {
    if !can_sandbox("deny by file elsewhere in a tree") {
        return;
    }
    let t = tree();
    let r = t.path();
    let dir = tempfile::tempdir().unwrap();
    let p = policy(
        dir.path(),
        Some(r),
        &format!("command == \"{}/bin/prog\"", r.display()),
    );
    let names = [
        format!("{}/bin/prog", r.display()),
        format!("{}/lib/deep/renamed", r.display()),
    ];
    let script = format!(
        "{} KEPT-RAN; {}",
        r.join("bin/keep").display(),
        try_all(&names, "DENIED-RAN")
    );
    for rung in RUNGS {
        let (code, out, err) = run(rung, &p, &[], &[], &script);
        assert_eq!(code, 0, "{rung}: {err}");
        assert!(
            out.starts_with("KEPT-RAN\n") && out.ends_with("end\n"),
            "{rung}: {out}\n{err}"
        );
        assert!(
            !out.contains("DENIED-RAN"),
            "{rung}: a name of the denied file ran: {out}\n{err}"
        );
    }
}

#[test]
fn a_prefix_deny_is_held_not_refused_at_both_rungs() {
    if !can_sandbox("prefix deny") {
        return;
    }
    // Over the host's system trees (hundreds of thousands of entries).
    let dir = tempfile::tempdir().unwrap();
    if Path::new("/usr/bin/perl").exists() {
        let p = policy(dir.path(), None, r#"command.startsWith("/usr/bin/perl")"#);
        let mut names = vec!["/usr/bin/perl".to_string()];
        names.extend(names_beside("/usr/bin/perl"));
        let script = format!(
            "echo OTHERS-RUN; {}",
            try_all(&names, "-e 'print qq(PERL-RAN\\n)'")
        );
        for rung in RUNGS {
            let (code, out, err) = run(rung, &p, &[], &[], &script);
            assert_eq!(code, 0, "{rung}: {err}");
            assert!(
                out.starts_with("OTHERS-RUN\n") && out.ends_with("end\n"),
                "{rung}: {out}\n{err}"
            );
            assert!(!out.contains("PERL-RAN"), "{rung}: {out}\n{err}");
        }
    }
    // In a tree of its own: every program the prefix names, and the
    // other name of one of them elsewhere in the tree.
    let t = tree();
    let r = t.path();
    let p = policy(
        dir.path(),
        Some(r),
        &format!("command.startsWith(\"{}/bin/prog\")", r.display()),
    );
    let names =
        ["bin/prog", "bin/prog-two", "lib/deep/renamed"].map(|n| format!("{}/{n}", r.display()));
    let script = format!(
        "{} KEPT-RAN; {}",
        r.join("bin/keep").display(),
        try_all(&names, "DENIED-RAN")
    );
    for rung in RUNGS {
        let (code, out, err) = run(rung, &p, &[], &[], &script);
        assert_eq!(code, 0, "{rung}: {err}");
        assert!(
            out.starts_with("KEPT-RAN\n") && out.ends_with("end\n"),
            "{rung}: {out}\n{err}"
        );
        assert!(!out.contains("DENIED-RAN"), "{rung}: {out}\n{err}");
    }
}

#[test]
fn a_deny_that_names_no_directory_is_refused_with_what_would_work() {
    if !can_sandbox("unbounded deny") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), None, r#"command.endsWith("/perl")"#);
    for rung in RUNGS {
        let (code, _, err) = run(rung, &p, &[], &[], "true");
        assert_eq!(code, 125, "{rung}: {err}");
        assert!(
            err.contains("the-deny") && err.contains("startsWith") && err.contains("help:"),
            "{rung}: {err}"
        );
    }
}

#[test]
fn in_a_stored_image_perl_is_denied_under_every_name() {
    if !can_sandbox("deny by file in an image") {
        return;
    }
    let (store, name) = cordon_testkit::ci_image(&cordon_testkit::cordon!());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, format!("kind: run\nimage: {name}\n")).unwrap();
    let store_env = [("CORDON_IMAGE_STORE", store.to_str().unwrap())];
    let spec_args = ["--spec", spec.to_str().unwrap()];
    // The image's own names of perl, as the workload lists them.
    let p = policy(dir.path(), None, "command == \"/usr/bin/nothing-denied\"");
    let (code, out, err) = run(
        "container",
        &p,
        &spec_args,
        &store_env,
        "ls -i /usr/bin | awk -v i=\"$(ls -i /usr/bin/perl | cut -d' ' -f1)\" '$1 == i { print \"/usr/bin/\" $2 }'",
    );
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(names.len() >= 2, "the image's perl has one name: {out}");
    // Denied by one name, none runs.
    for deny in [
        r#"command == "/usr/bin/perl""#,
        r#"command.startsWith("/usr/bin/perl")"#,
    ] {
        let p = policy(dir.path(), None, deny);
        let script = format!(
            "echo OTHERS-RUN; {}",
            try_all(&names, "-e 'print qq(PERL-RAN\\n)'")
        );
        let (code, out, err) = run("container", &p, &spec_args, &store_env, &script);
        assert_eq!(code, 0, "{deny}: {err}");
        assert!(
            out.starts_with("OTHERS-RUN\n") && out.ends_with("end\n"),
            "{deny}: {out}\n{err}"
        );
        assert!(
            !out.contains("PERL-RAN"),
            "{deny}: a name of perl ran: {out}\n{err}"
        );
    }
}
