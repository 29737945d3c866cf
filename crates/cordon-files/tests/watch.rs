//! The watcher beneath a confined directory: what it sees, what it never
//! follows, how it bounds a burst, and how it ends.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use cordon_files::watch::Watcher;
use cordon_sandbox::{Next, WatchEvent, WatchKind, WatchSource};

/// Every event until `quiet` passes with none (or `Ended`).
fn events(w: &mut Watcher, quiet: Duration) -> (Vec<WatchEvent>, Option<String>) {
    let mut out = Vec::new();
    loop {
        match w.next(quiet) {
            Next::Event(e) => out.push(e),
            Next::Quiet => return (out, None),
            Next::Ended(why) => return (out, Some(why)),
        }
    }
}

fn has(got: &[WatchEvent], kind: WatchKind, path: &str) -> bool {
    got.iter().any(|e| e.event == kind && e.path == path)
}

#[test]
fn creations_changes_removals_and_renames_are_seen_and_coalesced() {
    let t = tempfile::tempdir().unwrap();
    let mut w = Watcher::open(t.path(), "", false).unwrap();
    std::fs::write(t.path().join("a.txt"), "one").unwrap();
    for _ in 0..50 {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(t.path().join("a.txt"))
            .unwrap();
        f.write_all(b"more").unwrap();
    }
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert_eq!(
        got,
        [WatchEvent {
            event: WatchKind::Created,
            path: "a.txt".into(),
            to: None,
            dir: false
        }],
        "fifty writes within the window are one creation"
    );
    std::fs::write(t.path().join("a.txt"), "changed").unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(has(&got, WatchKind::Modified, "a.txt"), "{got:?}");
    std::fs::rename(t.path().join("a.txt"), t.path().join("b.txt")).unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].event, got[0].path.as_str(), got[0].to.as_deref()),
        (WatchKind::Renamed, "a.txt", Some("b.txt"))
    );
    std::fs::remove_file(t.path().join("b.txt")).unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(has(&got, WatchKind::Removed, "b.txt"), "{got:?}");
}

#[test]
fn a_recursive_watch_follows_new_directories_and_never_a_link() {
    let t = tempfile::tempdir().unwrap();
    let (work, outside) = (t.path().join("work"), t.path().join("outside"));
    std::fs::create_dir_all(work.join("old/deep")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("link")).unwrap();
    let mut w = Watcher::open(&work, "", true).unwrap();
    // Beneath a directory that was there at the start, and a new one
    // with its own new directory (made before its watch could be).
    std::fs::write(work.join("old/deep/f"), "x").unwrap();
    std::fs::create_dir_all(work.join("new/inner")).unwrap();
    std::fs::write(work.join("new/inner/g"), "y").unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(300));
    assert!(has(&got, WatchKind::Created, "old/deep/f"), "{got:?}");
    assert!(has(&got, WatchKind::Created, "new"), "{got:?}");
    assert!(
        has(&got, WatchKind::Created, "new/inner/g")
            || has(&got, WatchKind::Modified, "new/inner/g"),
        "{got:?}"
    );
    // The link's target is never watched.
    std::fs::write(outside.join("secret"), "s").unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(
        got.is_empty(),
        "a change outside, seen through a link: {got:?}"
    );
    // A renamed directory's files are named at its new path.
    std::fs::rename(work.join("new"), work.join("renamed")).unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(
        got.iter()
            .any(|e| e.event == WatchKind::Renamed && e.to.as_deref() == Some("renamed")),
        "{got:?}"
    );
    std::fs::write(work.join("renamed/inner/h"), "z").unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(has(&got, WatchKind::Created, "renamed/inner/h"), "{got:?}");
    // Watching a link itself is refused.
    assert!(Watcher::open(&work, "link", true).is_err());
}

/// A burst far past what a watch holds gives one `overflow` while the
/// reader is away, and the watch goes on after it; memory stays bounded
/// (the kernel's queue and `MAX_PENDING`).
#[test]
fn a_burst_overflows_once_and_the_watch_goes_on() {
    let t = tempfile::tempdir().unwrap();
    let mut w = Watcher::open(t.path(), "", false).unwrap();
    let n = std::env::var("CORDON_WATCH_BURST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000usize);
    for i in 0..n {
        std::fs::write(t.path().join(format!("f{}", i % 20_000)), [b'x'; 1]).unwrap();
    }
    let started = Instant::now();
    let (got, _) = events(&mut w, Duration::from_millis(300));
    let overflows = got
        .iter()
        .filter(|e| e.event == WatchKind::Overflow)
        .count();
    assert!(overflows >= 1, "no overflow in {} events", got.len());
    assert!(
        got.len() <= cordon_sandbox::watch::MAX_PENDING + 4,
        "{} events held",
        got.len()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    std::fs::write(t.path().join("after"), "x").unwrap();
    let (got, _) = events(&mut w, Duration::from_millis(200));
    assert!(has(&got, WatchKind::Created, "after"), "{got:?}");
}

#[test]
fn the_watch_ends_with_its_directory() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    let mut w = Watcher::open(t.path(), "d", false).unwrap();
    std::fs::remove_dir(t.path().join("d")).unwrap();
    let (_, ended) = events(&mut w, Duration::from_millis(300));
    assert!(ended.is_some(), "the watch did not end");
}
