//! A volume's teardown: `discard` shuts down only a large volume of
//! cordon's own making, never anything else it is pointed at.

use std::io::Write;
use std::path::Path;

use cordon_linux::volume;

/// A mounted volume, unmounted when dropped (a failed assertion too), so a
/// test leaves no mount behind.
struct Volume(tempfile::TempDir, std::path::PathBuf);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = volume::unmount(&self.1);
    }
}

/// A volume of `size` bytes mounted at a fresh directory, or `None` (with a
/// loud skip) where this machine cannot make one.
fn a_volume(size: u64) -> Option<Volume> {
    if let Err(missing) =
        volume::probe()
            .map(|_| ())
            .and_then(|()| match rustix::process::geteuid().is_root() {
                true => Ok(()),
                false => Err("root".into()),
            })
    {
        cordon_testkit::skip("volume discard", missing);
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let at = dir.path().join("cordon-volume-test");
    std::fs::create_dir(&at).expect("mount point");
    volume::mount_volume(&at, dir.path(), size, 0).expect("mount a volume");
    Some(Volume(dir, at))
}

fn write_mib(at: &Path, name: &str, mib: usize) -> std::io::Result<()> {
    let mut f = std::fs::File::create(at.join(name))?;
    let block = vec![7u8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&block)?;
    }
    f.sync_data().or(Ok(()))
}

#[test]
fn a_large_volume_is_shut_down_before_unmount_and_a_small_one_is_not() {
    let Some(v) = a_volume(64 << 20) else {
        return;
    };
    let at = v.1.clone();
    write_mib(&at, "small", 2).expect("write");
    assert!(
        !volume::discard(&at).expect("discard"),
        "2 MiB is below the bound"
    );
    write_mib(&at, "more", 1).expect("still writable after a no-op discard");
    write_mib(&at, "large", 12).expect("write");
    // Not its mount root: left alone.
    std::fs::create_dir(at.join("sub")).expect("mkdir");
    assert!(!volume::discard(&at.join("sub")).expect("discard"));
    assert!(
        volume::discard(&at).expect("discard"),
        "15 MiB is above the bound"
    );
    assert!(
        write_mib(&at, "after", 1).is_err(),
        "a shut-down filesystem took a write"
    );
    assert!(volume::unmount(&at).expect("unmount"));
    assert!(!volume::is_mount_point(&at).expect("statx"));
}

#[test]
fn discard_leaves_anything_but_a_loop_ext4_mount_root_alone() {
    if a_volume(16 << 20).is_none() {
        return;
    }
    // The host's root (not a loop device), a tmpfs, /proc: each is
    // refused before any ioctl, and each still works afterwards.
    for p in ["/", "/proc", "/sys"] {
        assert!(!volume::discard(Path::new(p)).unwrap_or(false), "{p}");
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    nix::mount::mount(
        Some("tmpfs"),
        tmp.path(),
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=64m"),
    )
    .expect("tmpfs");
    write_mib(tmp.path(), "big", 12).expect("write");
    assert!(!volume::discard(tmp.path()).expect("discard"), "a tmpfs");
    write_mib(tmp.path(), "after", 1).expect("the tmpfs still takes writes");
    let _ = nix::mount::umount2(tmp.path(), nix::mount::MntFlags::MNT_DETACH);
    // A link to a volume is not followed.
    let Some(v) = a_volume(64 << 20) else {
        return;
    };
    let (dir, at) = (v.0.path().to_path_buf(), v.1.clone());
    write_mib(&at, "large", 12).expect("write");
    let link = dir.join("link");
    std::os::unix::fs::symlink(&at, &link).expect("symlink");
    assert!(volume::discard(&link).is_err(), "a link was followed");
    write_mib(&at, "after", 1).expect("still writable");
    assert!(volume::unmount(&at).expect("unmount"));
    write_mib(Path::new("/tmp"), ".cordon-discard-probe", 1).expect("the host's /tmp");
    let _ = std::fs::remove_file("/tmp/.cordon-discard-probe");
}
