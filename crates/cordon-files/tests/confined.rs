//! The filesystem sink and the confined primitives: a link planted in the
//! landing directory, before or during a write, never carries it out.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cordon_files::confined::{ConfinedDir, Existing, WriteStep};
use cordon_files::host_dir::HostWorkDir;
use cordon_files::FsSink;
use cordon_sandbox::{Artifact, OutputSink, SandboxError, SinkError};

fn artifact(name: &str, bytes: &[u8]) -> Artifact {
    Artifact {
        name: name.into(),
        path: name.into(),
        media_type: "image/png".into(),
        bytes: bytes.to_vec(),
    }
}

/// `root/` (the sink) and `outside/` (where an escape would land).
fn scratch() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let outside = t.path().join("outside");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&outside).unwrap();
    (t, root, outside)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ---- planted before the write ----

#[test]
fn a_linked_parent_planted_before_is_refused_and_nothing_lands_outside() {
    let (_t, root, outside) = scratch();
    symlink(&outside, root.join("sub")).unwrap();
    let sink = FsSink::new(&root).unwrap();
    let e = sink.deliver(&artifact("sub/x.png", b"png")).unwrap_err();
    assert!(matches!(e, SinkError::LandingNotConfined { .. }), "{e}");
    assert!(entries(&outside).is_empty());
}

#[test]
fn a_link_at_the_destination_is_refused_by_default_and_never_followed() {
    let (_t, root, outside) = scratch();
    symlink(outside.join("created"), root.join("x.png")).unwrap();
    let sink = FsSink::new(&root).unwrap();
    let e = sink.deliver(&artifact("x.png", b"png")).unwrap_err();
    assert!(matches!(e, SinkError::Exists { .. }), "{e}");
    assert!(entries(&outside).is_empty());
    assert_eq!(
        entries(&root),
        ["x.png"],
        "the temporary file was left behind"
    );
}

#[test]
fn replace_existing_replaces_a_planted_link_instead_of_writing_through_it() {
    let (_t, root, outside) = scratch();
    std::fs::write(outside.join("victim"), b"keep").unwrap();
    symlink(outside.join("victim"), root.join("x.png")).unwrap();
    let sink = FsSink::new(&root).unwrap().replace_existing();
    sink.deliver(&artifact("x.png", b"png")).unwrap();
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");
    let meta = std::fs::symlink_metadata(root.join("x.png")).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(std::fs::read(root.join("x.png")).unwrap(), b"png");
}

#[test]
fn a_directory_at_the_destination_is_refused() {
    let (_t, root, _outside) = scratch();
    std::fs::create_dir(root.join("x.png")).unwrap();
    let sink = FsSink::new(&root).unwrap().replace_existing();
    assert!(sink.deliver(&artifact("x.png", b"png")).is_err());
}

#[test]
fn an_invalid_name_is_refused_by_the_sink_itself() {
    let (_t, root, _outside) = scratch();
    let sink = FsSink::new(&root).unwrap();
    for name in ["../x.png", "/etc/x", "a//b"] {
        let e = sink.deliver(&artifact(name, b"png")).unwrap_err();
        assert!(matches!(e, SinkError::Name { .. }), "{name}: {e}");
    }
}

// ---- planted during the write (deterministic: a step hook) ----

#[test]
fn a_parent_swapped_for_a_link_mid_write_cannot_carry_the_write_out() {
    let (_t, root, outside) = scratch();
    let (r, o) = (root.clone(), outside.clone());
    let sink = FsSink::new(&root).unwrap().with_step_hook(move |step| {
        if step == WriteStep::ParentOpen {
            std::fs::rename(r.join("sub"), r.join("sub.moved")).unwrap();
            symlink(&o, r.join("sub")).unwrap();
        }
    });
    // Either refused or landed in the directory that was opened; never outside.
    let _ = sink.deliver(&artifact("sub/x.png", b"png"));
    assert!(entries(&outside).is_empty(), "{:?}", entries(&outside));
    assert_eq!(std::fs::read(root.join("sub.moved/x.png")).unwrap(), b"png");
}

#[test]
fn a_link_planted_at_the_destination_mid_write_is_refused_and_the_temp_removed() {
    let (_t, root, outside) = scratch();
    let (r, o) = (root.clone(), outside.clone());
    let sink = FsSink::new(&root).unwrap().with_step_hook(move |step| {
        if step == WriteStep::TempWritten {
            symlink(o.join("created"), r.join("x.png")).unwrap();
        }
    });
    let e = sink.deliver(&artifact("x.png", b"png")).unwrap_err();
    assert!(matches!(e, SinkError::Exists { .. }), "{e}");
    assert!(entries(&outside).is_empty());
    assert_eq!(entries(&root), ["x.png"]);
}

#[test]
fn the_root_is_held_open_so_swapping_the_root_path_changes_nothing() {
    let (t, root, outside) = scratch();
    let sink = FsSink::new(&root).unwrap();
    std::fs::rename(&root, t.path().join("root.moved")).unwrap();
    symlink(&outside, &root).unwrap();
    sink.deliver(&artifact("x.png", b"png")).unwrap();
    assert!(entries(&outside).is_empty());
    assert!(t.path().join("root.moved/x.png").is_file());
}

#[test]
fn nested_names_create_their_parents_and_land_with_the_mode_and_display() {
    let (_t, root, _outside) = scratch();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let sink = FsSink::new(&root)
        .unwrap()
        .with_mode(0o600)
        .with_display(|a| format!("made {}", a.name))
        .with_step_hook(move |step| s2.lock().unwrap().push(step));
    let landed = sink.deliver(&artifact("a/b/c.png", b"png")).unwrap();
    assert_eq!(landed.display, "made a/b/c.png");
    assert!(!format!("{landed:?}").contains(root.to_str().unwrap()));
    assert!(landed.handle.reveal().ends_with("root/a/b/c.png"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root.join("a/b/c.png"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        *seen.lock().unwrap(),
        [WriteStep::ParentOpen, WriteStep::TempWritten]
    );
}

// ---- the confined read ----

#[test]
fn a_confined_read_refuses_links_fifos_and_directories_and_is_bounded() {
    let (_t, root, outside) = scratch();
    std::fs::write(outside.join("secret"), b"secret").unwrap();
    symlink(outside.join("secret"), root.join("link")).unwrap();
    symlink(&outside, root.join("dirlink")).unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::process::Command::new("mkfifo")
        .arg(root.join("fifo"))
        .status()
        .unwrap();
    std::fs::write(root.join("big"), vec![b'x'; 100]).unwrap();
    std::fs::write(root.join("ok"), b"fine").unwrap();
    let dir = ConfinedDir::open(&root).unwrap();
    for rel in ["link", "dirlink/secret", "dir", "fifo", "../outside/secret"] {
        assert!(dir.read_capped(rel, 1000).is_err(), "{rel} was read");
    }
    let big = dir.read_capped("big", 10).unwrap();
    assert_eq!(big.size, 100);
    assert!(big.bytes.len() <= 11);
    let ok = dir.read_capped("ok", 4).unwrap();
    assert_eq!((ok.bytes.as_slice(), ok.size), (b"fine".as_slice(), 4));
    let st = dir.stat("link").unwrap().unwrap();
    assert_eq!(st.kind, cordon_sandbox::FileKind::Symlink);
    assert!(dir.stat("dirlink/secret").is_err());
    assert!(dir.stat("gone").unwrap().is_none());
}

#[test]
fn a_confined_write_replaces_a_link_never_follows_it() {
    let (_t, root, outside) = scratch();
    std::fs::write(outside.join("victim"), b"keep").unwrap();
    symlink(outside.join("victim"), root.join("in.txt")).unwrap();
    let dir = ConfinedDir::open(&root).unwrap();
    dir.write_file("in.txt", b"new", 0o400, Existing::Replace, None)
        .unwrap();
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");
    assert_eq!(std::fs::read(root.join("in.txt")).unwrap(), b"new");
}

// ---- a work dir served from the host ----

#[test]
fn a_work_dir_under_a_linked_ancestor_is_refused_for_stat_read_and_write() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("real/work")).unwrap();
    std::fs::write(t.path().join("real/work/out.txt"), b"x").unwrap();
    symlink(t.path().join("real"), t.path().join("via")).unwrap();
    let host = t.path().join("via/work");
    let w = HostWorkDir::new(&host, "/workspace").unwrap();
    let e = w.stat_no_follow("/workspace/out.txt").unwrap_err();
    assert!(matches!(e, SandboxError::PathRefused { .. }), "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(w.read_file("/workspace/out.txt", 10).is_err());
    assert!(w.write_file("/workspace/in.txt", b"x", 0o644).is_err());
    assert!(!t.path().join("real/work/in.txt").exists());
}

/// What a work dir served from the host says of a path names guest paths
/// only: never the host directory (a volume's, with a keeper's pid in its
/// name), nor a host directory above it.
#[test]
fn a_host_work_dir_names_no_host_path_in_its_errors() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("cordon-volume-1-1-1/work");
    std::fs::create_dir_all(host.join("d")).unwrap();
    std::fs::write(host.join("f"), b"x").unwrap();
    symlink(host.join("d"), host.join("dlink")).unwrap();
    symlink("/etc/passwd", host.join("link")).unwrap();
    let w = HostWorkDir::new(&host, "/workspace").unwrap();
    let shown = t.path().display().to_string();
    let mut errors = Vec::new();
    for p in [
        "/workspace/dlink/x",
        "/workspace/link",
        "/workspace/d",
        "/workspace/f/x",
        "/workspace/none",
    ] {
        errors.push(w.stat_no_follow(p).map(|_| ()));
        errors.push(w.read_file(p, 10).map(|_| ()));
        errors.push(w.write_file(p, b"x", 0o644));
        errors.push(w.list_dir(p, 10).map(|_| ()));
    }
    // A linked ancestor of the host directory: refused without its name.
    symlink(t.path().join("cordon-volume-1-1-1"), t.path().join("via")).unwrap();
    let via = HostWorkDir::new(t.path().join("via/work"), "/workspace").unwrap();
    errors.push(via.stat_no_follow("/workspace/f").map(|_| ()));
    errors.push(via.read_file("/workspace/f", 10).map(|_| ()));
    let errors: Vec<String> = errors
        .into_iter()
        .filter_map(|r| r.err())
        .map(|e| e.to_string())
        .collect();
    assert!(errors.len() >= 12, "{errors:?}");
    for e in &errors {
        assert!(
            !e.contains(&shown) && !e.contains("cordon-volume"),
            "a host path: {e}"
        );
    }
    assert!(
        errors.iter().any(|e| e.contains("`/workspace/dlink`")),
        "{errors:?}"
    );
}

#[test]
fn a_host_work_dir_refuses_paths_outside_it() {
    let t = tempfile::tempdir().unwrap();
    let w = HostWorkDir::new(t.path(), "/workspace").unwrap();
    for p in [
        "/etc/passwd",
        "/workspace",
        "/workspace/../etc",
        "/workspacex/a",
    ] {
        assert!(w.stat_no_follow(p).is_err(), "{p}");
        assert!(w.write_file(p, b"x", 0o644).is_err(), "{p}");
    }
    w.write_file("/workspace/a/b.txt", b"x", 0o644).unwrap();
    let st = w.stat_no_follow("/workspace/a/b.txt").unwrap().unwrap();
    assert_eq!(st.size, Some(1));
    assert!(w.stat_no_follow("/workspace/none/b.txt").unwrap().is_none());
}

// ---- listing ----

#[test]
fn a_listing_names_links_as_links_and_follows_none() {
    let (_t, root, outside) = scratch();
    std::fs::write(outside.join("secret"), b"s").unwrap();
    std::fs::write(root.join("a"), b"a").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/inner"), b"i").unwrap();
    symlink(&outside, root.join("out")).unwrap();
    let work = HostWorkDir::new(&root, "/work").unwrap();
    let mut got = work.list_dir("/work", 100).unwrap();
    got.sort_by(|a, b| a.name.cmp(&b.name));
    let shown: Vec<_> = got.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    use cordon_sandbox::FileKind::*;
    assert_eq!(shown, [("a", File), ("d", Dir), ("out", Symlink)]);
    let inner = work.list_dir("/work/d", 100).unwrap();
    assert_eq!(inner.len(), 1);
    // Listing through the link is refused, never the outside's entries.
    let e = work.list_dir("/work/out", 100).unwrap_err();
    assert!(matches!(e, SandboxError::PathRefused { .. }), "{e:?}");
    let e = work.list_dir("/work/a", 100).unwrap_err();
    assert!(!matches!(e, SandboxError::NotFound { .. }), "{e:?}");
    let e = work.list_dir("/work/none", 100).unwrap_err();
    assert!(matches!(e, SandboxError::NotFound { .. }), "{e:?}");
    assert!(work.list_dir("/elsewhere", 100).is_err());
    // One past the cap shows a directory larger than it.
    assert_eq!(work.list_dir("/work", 1).unwrap().len(), 2);
}
