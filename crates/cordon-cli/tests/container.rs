//! The backend suite (`cordon_testkit::suite`) against the native
//! `container` rung (the local backend), through the real binary: its own
//! test binary, so the escape kit's look at the host's mount table sees no
//! other test's sandboxes. Without root it skips loudly; `CI=true` makes
//! that a failure.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use cordon_testkit::suite::Backend;

/// What container-rung sandboxes made with `tmp` as their TMPDIR leave:
/// their directories (`cordon-volume-KEEPER-…`), mounts and loop devices
/// of them, and the cgroups of every keeper whose directory was ever seen
/// here (its pid, kept in `keepers`).
fn residue(tmp: &Path, keepers: &RefCell<BTreeSet<u32>>) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(tmp).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(rest) = n.strip_prefix("cordon-volume-") {
            if let Some(pid) = rest.split('-').next().and_then(|p| p.parse().ok()) {
                keepers.borrow_mut().insert(pid);
            }
            out.push(format!("dir {n}"));
        }
    }
    let tag = tmp.display().to_string();
    out.extend(
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&tag))
            .map(|m| format!("mount {m}")),
    );
    if let Ok(d) = std::fs::read_dir("/sys/block") {
        for e in d.flatten() {
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file"));
            if backing.is_ok_and(|f| f.starts_with(&tag)) {
                out.push(format!("loop device {}", e.file_name().to_string_lossy()));
            }
        }
    }
    for pid in keepers.borrow().iter() {
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            out.extend(
                cordon_testkit::cgroup_dirs(Path::new(root), Some(*pid))
                    .into_iter()
                    .map(|c| format!("cgroup {}", c.display())),
            );
        }
    }
    out
}

/// A kept sandbox, up/exec/down cycles (`CORDON_CONTAINER_CYCLES`, default
/// 3), and the conformance and escape kits (with and without a route),
/// each leaving nothing.
#[test]
fn the_backend_suite_passes() {
    if !cordon_testkit::can_sandbox("container backend suite") {
        return;
    }
    let tmp = cordon_testkit::scratch("container-test-");
    // Traversable by the sandbox's init, which binds its work dir as its
    // own uid.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let keepers = RefCell::new(BTreeSet::new());
    cordon_testkit::suite::run_all(&Backend {
        name: "container",
        cordon: cordon_testkit::cordon!()
            .env("TMPDIR", tmp.path())
            .env("CORDON_STATE_DIR", tmp.path().join("state")),
        args: ["--backend", "container", "--min-isolation", "container"]
            .map(String::from)
            .to_vec(),
        image: "host",
        scratch: tmp.path().to_path_buf(),
        secrets: true,
        execs_per_cycle: 1,
        cycles: ("CORDON_CONTAINER_CYCLES", 3),
        settle: Duration::ZERO,
        conformance_cases: None,
        ports: true,
        residue: Box::new(|| residue(tmp.path(), &keepers)),
    });
}
