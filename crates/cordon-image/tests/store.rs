//! The image store: content addressing, imports, refusals, and that a build
//! that died is never used.

#![expect(clippy::unwrap_used, reason = "tests: a failed step is a failed test")]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_image::{BuildStep, DebootstrapOpts, ImageError, ImageStore, Resolved};

fn scratch() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("cordon-image-test-")
        .tempdir()
        .unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn store(d: &tempfile::TempDir) -> ImageStore {
    ImageStore::open(&d.path().join("store")).unwrap()
}

fn quiet() -> impl FnMut(&str) {
    |_: &str| {}
}

/// A small tree: a file, an executable, a setuid file, a world-writable
/// directory, a symlink to a host secret and a nested directory.
fn sample_tree(at: &Path) {
    fs::create_dir_all(at.join("etc")).unwrap();
    fs::write(at.join("etc/os-release"), "ID=cordon-test\n").unwrap();
    fs::create_dir_all(at.join("usr/bin")).unwrap();
    fs::write(at.join("usr/bin/tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(at.join("usr/bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(at.join("usr/bin/suid"), "x").unwrap();
    fs::set_permissions(at.join("usr/bin/suid"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::create_dir_all(at.join("var/tmp")).unwrap();
    fs::set_permissions(at.join("var/tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", at.join("etc/secret")).unwrap();
    std::os::unix::fs::symlink("usr/bin", at.join("bin")).unwrap();
}

fn root_of(r: &Resolved) -> PathBuf {
    match r {
        Resolved::Stored { root, .. } => root.clone(),
        Resolved::Host => panic!("expected a stored image"),
    }
}

fn count(dir: &Path) -> usize {
    fs::read_dir(dir).unwrap().count()
}

#[test]
fn an_imported_directory_resolves_to_its_tree_with_links_kept_and_modes_narrowed() {
    let d = scratch();
    let src = d.path().join("src");
    sample_tree(&src);
    nix_mkfifo(&src.join("etc/fifo"));
    let s = store(&d);
    let mut warnings = Vec::new();
    let info = s
        .import("small", &src, &mut |l: &str| warnings.push(l.to_string()))
        .unwrap();
    assert!(info.digest.starts_with("sha256:") && info.digest.len() == 71);
    let root = root_of(&s.resolve("small").unwrap());
    assert_eq!(
        fs::read_to_string(root.join("etc/os-release")).unwrap(),
        "ID=cordon-test\n"
    );
    // A link is stored as a link, never followed.
    let secret = fs::symlink_metadata(root.join("etc/secret")).unwrap();
    assert!(secret.file_type().is_symlink());
    assert_eq!(
        fs::read_link(root.join("etc/secret")).unwrap(),
        PathBuf::from("/etc/shadow")
    );
    // setuid and group/other write are gone; execute bits stay.
    let mode = |p: &str| fs::symlink_metadata(root.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("usr/bin/suid"), 0o755);
    assert_eq!(mode("var/tmp"), 0o1755);
    assert_eq!(mode("usr/bin/tool"), 0o755);
    assert_eq!(mode(""), 0o755);
    // The fifo is skipped, with a warning naming it.
    assert!(!root.join("etc/fifo").exists());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("etc/fifo") && w.contains("skipped")),
        "{warnings:?}"
    );
    // Every directory down to the root is searchable by others.
    for dir in root.ancestors() {
        assert_ne!(
            fs::metadata(dir).unwrap().mode() & 0o001,
            0,
            "{}",
            dir.display()
        );
    }
    assert_eq!(count(&s.root().join("tmp")), 0);
}

fn nix_mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().unwrap().success();
    assert!(ok, "mkfifo");
}

#[test]
fn same_content_shares_one_blob_and_the_digest_ignores_times_but_not_modes() {
    let d = scratch();
    let src = d.path().join("src");
    sample_tree(&src);
    let s = store(&d);
    let a = s.import("a", &src, &mut quiet()).unwrap();
    // A newer mtime is not content.
    let f = fs::File::options()
        .write(true)
        .open(src.join("etc/os-release"))
        .unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
    drop(f);
    let b = s.import("b", &src, &mut quiet()).unwrap();
    assert_eq!(a.digest, b.digest);
    assert_eq!(count(&s.root().join("blobs")), 1);
    assert_eq!(
        root_of(&s.resolve("a").unwrap()),
        root_of(&s.resolve("b").unwrap())
    );
    // A mode bit is content.
    fs::set_permissions(
        src.join("etc/os-release"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let c = s.import("c", &src, &mut quiet()).unwrap();
    assert_ne!(a.digest, c.digest);
    // So is a link's target.
    fs::remove_file(src.join("bin")).unwrap();
    std::os::unix::fs::symlink("usr/sbin", src.join("bin")).unwrap();
    let e = s.import("e", &src, &mut quiet()).unwrap();
    assert_ne!(c.digest, e.digest);
    assert_eq!(count(&s.root().join("blobs")), 3);

    // rm keeps a blob another name uses, and removes it with the last name.
    s.rm("a").unwrap();
    assert!(matches!(s.resolve("a"), Err(ImageError::NotFound { .. })));
    assert!(s.resolve("b").is_ok());
    assert_eq!(count(&s.root().join("blobs")), 3);
    s.rm("b").unwrap();
    assert_eq!(count(&s.root().join("blobs")), 2);
    let names: Vec<String> = s.ls().unwrap().into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["c", "e"]);
    // Re-importing a name replaces it and drops the old blob.
    s.import("c", &src, &mut quiet()).unwrap();
    assert_eq!(count(&s.root().join("blobs")), 1);
}

#[test]
fn host_is_built_in_and_cannot_be_removed_or_replaced() {
    let d = scratch();
    let s = store(&d);
    assert_eq!(s.resolve("host").unwrap(), Resolved::Host);
    let rm = s.rm("host").unwrap_err();
    assert!(matches!(rm, ImageError::Builtin { .. }), "{rm}");
    let src = d.path().join("src");
    sample_tree(&src);
    assert!(matches!(
        s.import("host", &src, &mut quiet()),
        Err(ImageError::Builtin { .. })
    ));
}

#[test]
fn an_unknown_name_says_how_to_build_or_import_it() {
    let d = scratch();
    let s = store(&d);
    let e = s.resolve("py").unwrap_err().to_string();
    assert!(e.contains("cordon image build py --debootstrap"), "{e}");
    assert!(e.contains("cordon image import py"), "{e}");
    assert!(matches!(s.resolve("../x"), Err(ImageError::BadName { .. })));
}

#[test]
fn a_name_whose_entry_or_blob_is_broken_is_not_used() {
    let d = scratch();
    let src = d.path().join("src");
    sample_tree(&src);
    let s = store(&d);
    s.import("ok", &src, &mut quiet()).unwrap();
    // A half-written entry (a crash can't leave one: entries are renamed in).
    fs::write(s.root().join("names/half.json"), "{\"version\": 1, \"na").unwrap();
    let e = s.resolve("half").unwrap_err();
    assert!(matches!(e, ImageError::Broken { .. }), "{e}");
    assert!(e.to_string().contains("cordon image rm half"), "{e}");
    // An entry whose blob is gone.
    let info = s
        .ls()
        .unwrap()
        .into_iter()
        .find(|i| i.name == "ok")
        .unwrap();
    let hex = info.digest.strip_prefix("sha256:").unwrap();
    fs::remove_dir_all(s.root().join("blobs").join(format!("sha256-{hex}"))).unwrap();
    let e = s.resolve("ok").unwrap_err();
    assert!(e.to_string().contains("blob"), "{e}");
}

/// One tar entry: raw path, type, content, link target.
type TarEntry<'a> = (&'a str, tar::EntryType, &'a [u8], Option<&'a str>);

fn tar_with(entries: &[TarEntry<'_>], gz: bool, at: &Path) {
    let mut data = Vec::new();
    {
        let mut b = tar::Builder::new(&mut data);
        for (path, kind, content, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(if *kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            h.set_size(content.len() as u64);
            // Raw names: the builder's own path checks would refuse `..`.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(l) = link {
                let ln = h.as_old_mut().linkname.as_mut();
                ln[..l.len()].copy_from_slice(l.as_bytes());
            }
            h.set_cksum();
            b.append(&h, *content).unwrap();
        }
        b.finish().unwrap();
    }
    if gz {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        data = e.finish().unwrap();
    }
    fs::write(at, data).unwrap();
}

#[test]
fn tarballs_import_and_entries_that_escape_are_refused() {
    use tar::EntryType::{Directory, Regular, Symlink};
    let d = scratch();
    let s = store(&d);
    let good = d.path().join("good.tgz");
    tar_with(
        &[
            ("./", Directory, b"", None),
            ("./etc/", Directory, b"", None),
            ("./etc/os-release", Regular, b"ID=tar\n", None),
            ("./bin", Symlink, b"", Some("usr/bin")),
        ],
        true,
        &good,
    );
    s.import("tarred", &good, &mut quiet()).unwrap();
    let root = root_of(&s.resolve("tarred").unwrap());
    assert_eq!(
        fs::read_to_string(root.join("etc/os-release")).unwrap(),
        "ID=tar\n"
    );
    assert!(fs::symlink_metadata(root.join("bin"))
        .unwrap()
        .file_type()
        .is_symlink());

    let outside = d.path().join("escaped");
    let cases: [(&str, Vec<TarEntry<'_>>); 4] = [
        ("dotdot", vec![("../escaped", Regular, b"pwned", None)]),
        (
            "deep-dotdot",
            vec![("a/../../escaped", Regular, b"pwned", None)],
        ),
        (
            "absolute",
            vec![(
                // An absolute path naming the test's own scratch file.
                Box::leak(outside.to_string_lossy().into_owned().into_boxed_str()),
                Regular,
                b"pwned",
                None,
            )],
        ),
        (
            "through-a-link",
            vec![
                (
                    "x",
                    Symlink,
                    b"",
                    Some(Box::leak(
                        d.path().to_string_lossy().into_owned().into_boxed_str(),
                    )),
                ),
                ("x/escaped", Regular, b"pwned", None),
            ],
        ),
    ];
    for (name, entries) in cases {
        let t = d.path().join(format!("{name}.tar"));
        tar_with(&entries, false, &t);
        let e = s.import(name, &t, &mut quiet()).unwrap_err();
        assert!(matches!(e, ImageError::UnsafeEntry { .. }), "{name}: {e}");
        assert!(!outside.exists(), "{name} wrote outside the tree");
        assert!(
            matches!(s.resolve(name), Err(ImageError::NotFound { .. })),
            "{name}"
        );
        assert_eq!(count(&s.root().join("tmp")), 0, "{name} left its staging");
    }
    // Not a tarball at all.
    let xz = d.path().join("x.tar.xz");
    fs::write(&xz, b"\xfd7zXZ").unwrap();
    let e = s.import("xz", &xz, &mut quiet()).unwrap_err();
    assert!(e.to_string().contains("xz -d"), "{e}");
}

#[test]
fn a_store_others_can_write_or_cannot_search_is_refused_with_the_fix() {
    let d = scratch();
    let root = d.path().join("store");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
    let e = ImageStore::open(&root).unwrap_err().to_string();
    assert!(
        e.contains("writable by group or others") && e.contains("chmod go-w"),
        "{e}"
    );
    fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
    let e = ImageStore::open(&root).unwrap_err().to_string();
    assert!(e.contains("chmod o+x"), "{e}");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o711)).unwrap();
    ImageStore::open(&root).unwrap();
    // A parent others can write (without the sticky bit) is refused too.
    let open_parent = d.path().join("open");
    fs::create_dir(&open_parent).unwrap();
    fs::set_permissions(&open_parent, fs::Permissions::from_mode(0o777)).unwrap();
    let e = ImageStore::open(&open_parent.join("store"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("chmod go-w"), "{e}");
}

fn fake_debootstrap(d: &Path, body: &str) -> PathBuf {
    let p = d.join("fake-debootstrap");
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn debootstrap_output_streams_and_a_failed_build_names_nothing() {
    let d = scratch();
    let s = store(&d);
    // Its arguments: --variant=minbase --include=.. SUITE TARGET MIRROR.
    let failing = fake_debootstrap(
        d.path(),
        "echo \"I: args $*\"; mkdir -p \"$4/etc\"; echo half > \"$4/etc/os-release\"; echo 'E: Couldn'\"'\"'t download' >&2; exit 1",
    );
    let opts = DebootstrapOpts {
        include: vec!["python3".into()],
        mirror: Some("http://mirror.invalid/debian".into()),
        program: Some(failing),
        ..Default::default()
    };
    let mut lines = Vec::new();
    let e = s
        .build_debootstrap("deb", &opts, &mut |l: &str| lines.push(l.to_string()))
        .unwrap_err();
    assert!(matches!(e, ImageError::DebootstrapFailed { .. }), "{e}");
    assert!(e.to_string().contains("Couldn't download"), "{e}");
    assert!(
        lines.iter().any(
            |l| l.contains("I: args --variant=minbase --include=python3 bookworm")
                && l.ends_with("http://mirror.invalid/debian")
        ),
        "{lines:?}"
    );
    assert!(matches!(s.resolve("deb"), Err(ImageError::NotFound { .. })));
    assert_eq!(count(&s.root().join("tmp")), 0);

    let working = fake_debootstrap(
        d.path(),
        "mkdir -p \"$3/etc\" \"$3/dev\"; echo ID=fake > \"$3/etc/os-release\"; mkfifo \"$3/dev/initctl\"; echo done",
    );
    let opts = DebootstrapOpts {
        mirror: Some("http://mirror.invalid/debian".into()),
        program: Some(working),
        ..Default::default()
    };
    let info = s.build_debootstrap("deb", &opts, &mut quiet()).unwrap();
    assert_eq!(
        info.source,
        "debootstrap bookworm http://mirror.invalid/debian"
    );
    let root = root_of(&s.resolve("deb").unwrap());
    assert_eq!(
        fs::read_to_string(root.join("etc/os-release")).unwrap(),
        "ID=fake\n"
    );
    assert!(!root.join("dev/initctl").exists());

    let missing = DebootstrapOpts {
        program: Some(d.path().join("nope")),
        mirror: Some("http://mirror.invalid/debian".into()),
        ..Default::default()
    };
    let e = s
        .build_debootstrap("x", &missing, &mut quiet())
        .unwrap_err();
    assert!(e.to_string().contains("apt-get install debootstrap"), "{e}");
}

const HELPER_ENV: &str = "CORDON_IMAGE_TEST_KILL_AT";

/// Not a case by itself: the build `a_build_killed_midway_is_never_used`
/// starts (this test binary again) and SIGKILLs at a step.
#[test]
#[ignore = "helper: run by a_build_killed_midway_is_never_used"]
fn killed_build_helper() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let (step, store_root, src) = {
        let mut it = spec.splitn(3, '|');
        (
            it.next().unwrap().to_string(),
            PathBuf::from(it.next().unwrap()),
            PathBuf::from(it.next().unwrap()),
        )
    };
    let want = if step == "staged" {
        BuildStep::Staged
    } else {
        BuildStep::BlobStored
    };
    let s = ImageStore::open(&store_root)
        .unwrap()
        .with_step_hook(move |at| {
            if at == want {
                println!("AT-STEP");
                std::thread::sleep(Duration::from_secs(60));
            }
        });
    let _ = s.import("victim", &src, &mut |_: &str| {});
}

#[test]
fn a_build_killed_midway_is_never_used() {
    for step in ["staged", "blob"] {
        let d = scratch();
        let src = d.path().join("src");
        sample_tree(&src);
        let root = d.path().join("store");
        let s = ImageStore::open(&root).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "killed_build_helper", "--ignored", "--nocapture"])
            .env(
                HELPER_ENV,
                format!("{step}|{}|{}", root.display(), src.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let reached = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("AT-STEP"));
        assert!(reached, "{step}: the helper never reached the step");
        child.kill().unwrap();
        child.wait().unwrap();

        // The name is not usable, whatever was left behind.
        let e = s.resolve("victim").unwrap_err();
        assert!(matches!(e, ImageError::NotFound { .. }), "{step}: {e}");
        assert!(s.ls().unwrap().is_empty());
        match step {
            "staged" => {
                // The dead builder's staging is still there until the next open.
                assert_eq!(count(&root.join("tmp")), 1, "{step}");
                let again = ImageStore::open(&root).unwrap();
                assert_eq!(count(&root.join("tmp")), 0, "{step}: open cleans tmp");
                assert!(again.resolve("victim").is_err());
            }
            _ => {
                // The blob made it, the name did not: gc removes the orphan.
                assert_eq!(count(&root.join("blobs")), 1);
                let report = s.gc().unwrap();
                assert_eq!(report.blobs_removed, 1, "{report:?}");
                assert_eq!(count(&root.join("blobs")), 0);
            }
        }
    }
}

#[test]
fn a_build_in_progress_is_not_cleaned_by_another_open() {
    let d = scratch();
    let src = d.path().join("src");
    sample_tree(&src);
    let root = d.path().join("store");
    let r2 = root.clone();
    let s = ImageStore::open(&root).unwrap().with_step_hook(move |at| {
        if at == BuildStep::Staged {
            // Another process opens and collects meanwhile: this build's
            // staging is locked, so it stays.
            let other = ImageStore::open(&r2).unwrap();
            assert_eq!(other.gc().unwrap().tmp_removed, 0);
        }
    });
    s.import("busy", &src, &mut quiet()).unwrap();
    assert!(s.resolve("busy").is_ok());
}

#[test]
fn the_default_image_is_built_on_first_use_with_python3_and_reused() {
    let d = scratch();
    let s = store(&d);
    let calls = d.path().join("calls");
    // Counts its runs and records its arguments.
    let fake = fake_debootstrap(
        d.path(),
        &format!(
            "echo \"$*\" >> {}; mkdir -p \"$4/etc\"; echo ID=default > \"$4/etc/os-release\"",
            calls.display()
        ),
    );
    let opts = DebootstrapOpts {
        mirror: Some("http://mirror.invalid/debian".into()),
        program: Some(fake),
        ..Default::default()
    };
    let mut lines = Vec::new();
    let first = s
        .ensure_default_with(&opts, &mut |l: &str| lines.push(l.to_string()))
        .unwrap();
    assert!(lines.iter().any(|l| l.contains("first use")), "{lines:?}");
    let second = s.ensure_default_with(&opts, &mut quiet()).unwrap();
    assert_eq!(first, second);
    let runs = fs::read_to_string(&calls).unwrap();
    assert_eq!(runs.lines().count(), 1, "{runs}");
    assert!(runs.contains("--include=python3"), "{runs}");
}
