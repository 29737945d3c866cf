//! A workspace: the host's directory underneath, the sandbox's changes on
//! its own volume — never in the directory, and never past the volume.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;

use cordon_linux::{volume, workspace};

/// What the workload runs as here.
const TO: u32 = 61_234;

struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = workspace::unmount_workspace(&self.0);
        let _ = volume::unmount(&self.0);
    }
}

fn as_workload(script: &str) -> std::process::Output {
    std::process::Command::new("sh")
        .args(["-c", script])
        .uid(TO)
        .gid(TO)
        .output()
        .expect("run sh")
}

#[test]
fn changes_land_in_the_upper_layer_within_the_volume_and_never_in_the_directory() {
    if let Err(missing) = volume::probe().and_then(|_| {
        if rustix::process::geteuid().is_root() {
            Ok(String::new())
        } else {
            Err("root".into())
        }
    }) {
        cordon_testkit::skip("workspace mount", missing);
        return;
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join("project");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.py"), "print(1)\n").unwrap();
    std::fs::write(dir.join("private"), "root only\n").unwrap();
    std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.join("gone"), "x").unwrap();
    let vol = scratch.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    volume::mount_volume(&vol, scratch.path(), 16 << 20, TO).expect("volume");
    let _held = Mounted(vol.clone());
    std::fs::create_dir(vol.join("work")).unwrap();
    std::os::unix::fs::chown(vol.join("work"), Some(TO), Some(TO)).unwrap();
    let l = workspace::mount_workspace(&dir, &vol, (0, 0), TO).expect("mount the workspace");
    let work = &l.merged;

    // DIR's owner (root here) shows as the workload: it reads a 0600 file.
    let m = std::fs::metadata(work.join("private")).unwrap();
    assert_eq!(m.uid(), TO, "the owner is mapped");
    let out = as_workload(&format!(
        "cat {w}/private && echo 2 >> {w}/src/main.py && echo new > {w}/added && rm {w}/gone",
        w = work.display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "root only\n");
    // Nothing reached the directory.
    assert_eq!(
        std::fs::read_to_string(dir.join("src/main.py")).unwrap(),
        "print(1)\n"
    );
    assert!(!dir.join("added").exists());
    assert!(dir.join("gone").exists());
    // The upper layer holds the changes (and a whiteout for the removal).
    assert_eq!(
        std::fs::read_to_string(l.upper.join("src/main.py")).unwrap(),
        "print(1)\n2\n"
    );
    assert!(l.upper.join("added").exists());
    let w = std::fs::symlink_metadata(l.upper.join("gone")).unwrap();
    assert_eq!((w.mode() & 0o170000, w.rdev()), (0o020000, 0), "a whiteout");
    // The lower layer is read-only even to root.
    assert!(std::fs::write(l.lower.join("x"), "x").is_err());
    // The workload cannot reach the layers themselves.
    let out = as_workload(&format!("ls {}", l.upper.display()));
    assert!(!out.status.success(), "the layers are root's");
    // Writing past the volume fails inside it, whatever DIR's filesystem holds.
    let out = as_workload(&format!(
        "dd if=/dev/zero of={}/big bs=1M count=64 2>&1; sync",
        work.display()
    ));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("No space left"), "{said}");
    assert!(!dir.join("big").exists());
    assert!(!Path::new(&dir).join("big").exists());
}
