//! A workspace's diff and apply over a directory and an upper layer laid
//! out as overlay lays one out (the mount itself is tested in
//! cordon-linux; the whole path in cordon-cli's workspace suite).
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use cordon_files::workspace::Workspace;
use cordon_sandbox::{Change, FileKind};

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn whiteout(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::empty(),
        0,
    )
    .unwrap();
}

/// A loud skip outside CI; in CI (`CI=true`, root) a missing mechanism is
/// a failure, never a pass.
fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must run this test: {why}"
    );
    eprintln!("!!!!!!!! SKIPPED: {why} !!!!!!!!");
}

#[test]
fn diff_names_each_change_and_apply_writes_only_safe_ones_back() {
    if !rustix::process::geteuid().is_root() {
        skip("workspace diff/apply needs root (whiteouts are devices; files are handed to owners)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("project");
    let upper = t.path().join("upper");
    write(&dir.join("a.txt"), "1\n");
    write(&dir.join("same.txt"), "same\n");
    write(&dir.join("gone.txt"), "bye\n");
    write(&dir.join("old/x"), "x\n");
    write(&dir.join("theirs.txt"), "host's\n");
    std::os::unix::fs::chown(&dir, Some(1234), Some(1234)).unwrap();
    // The host's changes are those after the sandbox was made.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let ws = Workspace::new(&dir, &upper, (1234, 1234), Workspace::clock());
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(&dir.join("theirs.txt"), "host changed it\n");

    write(&upper.join("a.txt"), "2\n");
    write(&upper.join("same.txt"), "same\n");
    write(&upper.join("new/deep/n.txt"), "new\n");
    std::fs::set_permissions(
        upper.join("new/deep/n.txt"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    write(&upper.join("theirs.txt"), "sandbox's\n");
    whiteout(&upper.join("gone.txt"));
    std::fs::create_dir_all(upper.join("old")).unwrap();
    whiteout(&upper.join("old/x"));
    std::os::unix::fs::symlink("/etc/shadow", upper.join("out")).unwrap();
    std::os::unix::fs::symlink("a.txt", upper.join("in")).unwrap();

    let diff = ws.diff().unwrap();
    let seen: Vec<(&str, Change)> = diff.iter().map(|c| (c.path.as_str(), c.change)).collect();
    assert_eq!(
        seen,
        [
            ("a.txt", Change::Modified),
            ("gone.txt", Change::Removed),
            ("in", Change::Added),
            ("new", Change::Added),
            ("new/deep", Change::Added),
            ("new/deep/n.txt", Change::Added),
            ("old/x", Change::Removed),
            ("out", Change::Added),
            ("theirs.txt", Change::Modified),
        ],
        "{diff:#?}"
    );
    assert_eq!(diff[1].kind, FileKind::File);
    assert_eq!(diff[0].size, Some(2));

    let report = ws.apply(&[]).unwrap();
    let refused: Vec<&str> = report.refused.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(refused, ["out", "theirs.txt"], "{report:#?}");
    assert!(
        report.refused[0].reason.contains("out of the workspace"),
        "{report:#?}"
    );
    assert!(
        report.refused[1]
            .reason
            .contains("changed in the directory"),
        "{report:#?}"
    );
    assert_eq!(report.applied.len(), 7, "{report:#?}");
    // What was applied is there, the host's change is kept, no link out.
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "2\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("theirs.txt")).unwrap(),
        "host changed it\n"
    );
    assert!(!dir.join("gone.txt").exists() && !dir.join("old/x").exists());
    assert!(std::fs::symlink_metadata(dir.join("out")).is_err());
    assert_eq!(
        std::fs::read_link(dir.join("in")).unwrap(),
        Path::new("a.txt")
    );
    let n = std::fs::metadata(dir.join("new/deep/n.txt")).unwrap();
    assert_eq!(n.mode() & 0o7777, 0o755, "set-id bits are dropped");
    assert_eq!(
        (n.uid(), n.gid()),
        (1234, 1234),
        "new files are the directory owner's"
    );
    assert_eq!(std::fs::metadata(dir.join("new")).unwrap().uid(), 1234);

    // Applied, the diff is what is left; a second apply of a new change to
    // a file this apply wrote is not taken for the host's.
    let left: Vec<String> = ws.diff().unwrap().into_iter().map(|c| c.path).collect();
    assert_eq!(left, ["out", "theirs.txt"]);
    write(&upper.join("a.txt"), "3\n");
    let again = ws.apply(&["a.txt".to_string()]).unwrap();
    assert!(again.refused.is_empty(), "{again:#?}");
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "3\n");
    // A path with no change is said so.
    let none = ws.apply(&["nothing/here".to_string()]).unwrap();
    assert_eq!(none.refused.len(), 1);
}

#[test]
fn a_link_the_host_has_in_the_directory_is_not_followed() {
    if !rustix::process::geteuid().is_root() {
        skip("workspace apply needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("project");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("sub")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let upper = t.path().join("upper");
    let ws = Workspace::new(&dir, &upper, (0, 0), Workspace::clock());
    // The sandbox removed the link `sub` and made a directory there with
    // a file in it: applied, the link is replaced, never written through.
    write(&upper.join("sub/f"), "x");
    let report = ws.apply(&[]).unwrap();
    assert!(report.refused.is_empty(), "{report:#?}");
    assert!(
        !outside.join("f").exists(),
        "written through the host's link: {report:#?}"
    );
    assert!(std::fs::symlink_metadata(dir.join("sub")).unwrap().is_dir());
    assert_eq!(std::fs::read_to_string(dir.join("sub/f")).unwrap(), "x");
}
