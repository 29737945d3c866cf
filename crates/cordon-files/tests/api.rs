//! The files API's operations (`cordon_files::api`) on a real directory
//! where the "workload" has planted links out of it: each operation does
//! what it says inside, and no link is ever followed out — the outside
//! files are read, written, listed and removed by none of them.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken fixture

use std::path::Path;

use cordon_files::confined::{ConfinedDir, ConfinedError};
use cordon_sandbox::FileKind;

struct Fixture {
    _t: tempfile::TempDir,
    work: std::path::PathBuf,
    outside: std::path::PathBuf,
}

/// `work/` with files, a directory, and links out to `outside/` (a
/// directory holding `secret`) and to `outside/secret` itself.
fn fixture() -> Fixture {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("work");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(work.join("d/e")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "outside\n").unwrap();
    std::fs::write(work.join("a.txt"), "0123456789").unwrap();
    std::fs::write(work.join("d/b.txt"), "bee\n").unwrap();
    std::fs::write(work.join("d/e/c.txt"), "sea\n").unwrap();
    std::os::unix::fs::symlink(&outside, work.join("out-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), work.join("out-file")).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("d/inner-out")).unwrap();
    Fixture {
        _t: t,
        work,
        outside,
    }
}

fn outside_intact(f: &Fixture) {
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret")).unwrap(),
        "outside\n",
        "a file outside the directory changed"
    );
    let names: Vec<_> = std::fs::read_dir(&f.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
}

fn dir(p: &Path) -> ConfinedDir {
    ConfinedDir::open(p).unwrap()
}

#[test]
fn a_listing_goes_to_its_depth_with_metadata_and_never_into_a_link() {
    let f = fixture();
    let d = dir(&f.work);
    let top = d.list_tree("", 0, 100).unwrap();
    let names: Vec<&str> = top.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["a.txt", "d", "out-dir", "out-file"]);
    let a = &top.entries[0];
    assert_eq!(
        (a.kind, a.size, a.mode & 0o777 != 0),
        (FileKind::File, 10, true)
    );
    assert!(a.mtime > 1_600_000_000, "{a:?}");
    assert_eq!(top.entries[2].kind, FileKind::Symlink);

    let all = d.list_tree("", 5, 100).unwrap();
    let names: Vec<&str> = all.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        names,
        [
            "a.txt",
            "d",
            "d/b.txt",
            "d/e",
            "d/e/c.txt",
            "d/inner-out",
            "out-dir",
            "out-file"
        ],
        "a link was descended, or an entry is missing"
    );
    assert!(!all.truncated);
    let one = d.list_tree("d", 0, 100).unwrap();
    assert_eq!(one.entries.len(), 3);
    // Capped: the rest is said to be cut, not silently dropped.
    let capped = d.list_tree("", 5, 3).unwrap();
    assert_eq!((capped.entries.len(), capped.truncated), (3, true));
    // Through a link: refused.
    let e = d.list_tree("out-dir", 1, 100);
    assert!(matches!(e, Err(ConfinedError::Link { .. })), "{e:?}");
    assert!(d.list_tree("../outside", 0, 100).is_err());
}

#[test]
fn a_range_is_read_and_a_link_or_a_fifo_is_refused() {
    let f = fixture();
    let d = dir(&f.work);
    assert_eq!(d.read_range("a.txt", 3, 4).unwrap(), (b"3456".to_vec(), 10));
    assert_eq!(d.read_range("a.txt", 8, 100).unwrap(), (b"89".to_vec(), 10));
    assert_eq!(d.read_range("a.txt", 50, 4).unwrap(), (Vec::new(), 10));
    assert!(matches!(
        d.read_range("out-file", 0, 100),
        Err(ConfinedError::Link { .. })
    ));
    assert!(matches!(
        d.read_range("out-dir/secret", 0, 100),
        Err(ConfinedError::Link { .. })
    ));
    assert!(matches!(
        d.read_range("d", 0, 100),
        Err(ConfinedError::NotRegular { .. })
    ));
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.work.join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    // A FIFO with no writer would block a plain open for ever.
    assert!(matches!(
        d.read_range("fifo", 0, 10),
        Err(ConfinedError::NotRegular { .. })
    ));
}

#[test]
fn an_append_lands_in_the_file_and_never_through_a_link() {
    let f = fixture();
    let d = dir(&f.work);
    d.append("d/b.txt", b"more\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(f.work.join("d/b.txt")).unwrap(),
        "bee\nmore\n"
    );
    assert!(matches!(
        d.append("out-file", b"pwned\n"),
        Err(ConfinedError::Link { .. })
    ));
    assert!(matches!(
        d.append("out-dir/secret", b"pwned\n"),
        Err(ConfinedError::Link { .. })
    ));
    assert!(matches!(
        d.append("new.txt", b"x"),
        Err(ConfinedError::NotFound { .. })
    ));
    outside_intact(&f);
}

#[test]
fn a_removal_takes_links_themselves_and_a_tree_without_following_one() {
    let f = fixture();
    let d = dir(&f.work);
    assert!(d.remove("out-file", false).unwrap());
    assert!(!f.work.join("out-file").exists() && f.outside.join("secret").exists());
    // Not empty: refused without `recursive`.
    assert!(d.remove("d", false).is_err());
    assert!(f.work.join("d/b.txt").exists());
    // Through a link: refused.
    assert!(matches!(
        d.remove("out-dir/secret", false),
        Err(ConfinedError::Link { .. })
    ));
    // The tree goes, its inner link with it; what the link named stays.
    assert!(d.remove("d", true).unwrap());
    assert!(!f.work.join("d").exists());
    assert!(!d.remove("d", true).unwrap(), "nothing there is Ok(false)");
    assert!(d.remove("", true).is_err(), "the directory itself");
    assert!(d.remove(".", true).is_err(), "the directory itself");
    assert!(
        d.remove("out-dir", true).unwrap(),
        "a link to a directory is removed itself"
    );
    outside_intact(&f);
    assert!(f.work.join("a.txt").exists());
}

#[test]
fn a_rename_stays_beneath_replaces_nothing_and_moves_a_link_itself() {
    let f = fixture();
    let d = dir(&f.work);
    d.rename("a.txt", "d/e/a2.txt").unwrap();
    assert_eq!(
        std::fs::read_to_string(f.work.join("d/e/a2.txt")).unwrap(),
        "0123456789"
    );
    assert!(matches!(
        d.rename("d/b.txt", "d/e/c.txt"),
        Err(ConfinedError::Exists { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(f.work.join("d/e/c.txt")).unwrap(),
        "sea\n"
    );
    // Into or out of a link's directory: refused.
    assert!(matches!(
        d.rename("d/b.txt", "out-dir/b.txt"),
        Err(ConfinedError::Link { .. })
    ));
    assert!(matches!(
        d.rename("out-dir/secret", "stolen"),
        Err(ConfinedError::Link { .. })
    ));
    assert!(d.rename("d/b.txt", "../escaped").is_err());
    // A link is moved itself.
    d.rename("out-file", "d/moved-link").unwrap();
    assert!(std::fs::symlink_metadata(f.work.join("d/moved-link"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(matches!(
        d.rename("missing", "x"),
        Err(ConfinedError::NotFound { .. })
    ));
    outside_intact(&f);
}
