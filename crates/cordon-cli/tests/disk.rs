//! `max_disk` and the operator's work dir, through the real `cordon`
//! binary: a sandbox that writes past its bound gets ENOSPC and the host's
//! disk does not pay; an operator's directory is mapped (its owner keeps
//! its files) and refused where the bound or the mapping cannot be held.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_testkit::can_sandbox;

/// `cordon ARGS` in the workspace's root.
fn cordon(args: &[&str]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .run(args)
}

/// A policy both rungs hold, with a small `max_disk`.
fn policy(max_disk: &str) -> tempfile::NamedTempFile {
    let text = format!(
        r#"policy:
  compute:
    max_memory: 256MiB
    max_wall_seconds: 30
    max_disk: {max_disk}
    allow:
      - name: system-programs
        when: command.startsWith("/usr/") || command.startsWith("/bin/") || command.startsWith("/lib/") || command.startsWith("/lib64/")
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
      - name: devices
        when: path in ["/dev/null", "/dev/zero"] && mode in ["read", "write"]
"#
    );
    let mut f = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("policy");
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
    f
}

fn run(rung: &str, policy: &Path, extra: &[&str], cmd: &str) -> (i32, String, String) {
    let p = policy.display().to_string();
    let mut args = vec![
        "run",
        "--min-isolation",
        rung,
        "--backend",
        rung,
        "--policy",
        &p,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "/bin/sh", "-c", cmd]);
    cordon(&args)
}

fn free_bytes(p: &Path) -> u64 {
    let s = rustix::fs::statvfs(p).expect("statvfs");
    s.f_bavail * s.f_frsize
}

/// A filesystem of `size` (a tmpfs) mounted at a new directory, unmounted
/// when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn new(size: &str) -> SmallFs {
        let at = std::env::temp_dir().join(format!(
            "cordon-disk-test-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir(&at).expect("mkdir");
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&at)
            .status()
            .expect("mount");
        assert!(ok.success(), "mounting a tmpfs at {}", at.display());
        SmallFs(at)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A directory owned by uid/gid 1000 under `parent`.
fn user_dir(parent: &Path) -> PathBuf {
    let d = parent.join("project");
    std::fs::create_dir(&d).expect("mkdir");
    std::os::unix::fs::chown(&d, Some(1000), Some(1000)).expect("chown");
    d
}

#[test]
fn a_write_past_max_disk_gets_enospc_at_both_rungs_and_the_host_disk_does_not_pay() {
    if !can_sandbox("max_disk") {
        return;
    }
    let p = policy("64MiB");
    for rung in ["container", "process"] {
        let before = free_bytes(Path::new("/tmp"));
        let (code, out, err) = run(
            rung,
            p.path(),
            &[],
            "dd if=/dev/zero of=big bs=1M count=100 2>&1; echo rc=$?; ls -l big",
        );
        let after = free_bytes(Path::new("/tmp"));
        assert_eq!(code, 0, "{rung}: {out}{err}");
        assert!(
            out.contains("No space left on device") && out.contains("rc=1"),
            "{rung}: the write was not stopped at max_disk: {out}{err}"
        );
        // The volume is sparse and gone: the host's disk is not 100 MB
        // poorer (other writers share it, so allow slack below the 100).
        assert!(
            before.saturating_sub(after) < 48 << 20,
            "{rung}: the host lost {} bytes",
            before.saturating_sub(after)
        );
    }
    // The container rung's private /tmp is held to max_disk too.
    let (code, out, err) = run(
        "container",
        p.path(),
        &[],
        "dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1; echo rc=$?",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("No space left on device") && out.contains("rc=1"),
        "/tmp: {out}{err}"
    );
}

#[test]
fn a_work_dir_on_a_filesystem_larger_than_max_disk_is_refused_with_what_to_do() {
    if !can_sandbox("max_disk work dir") {
        return;
    }
    let p = policy("64MiB");
    let dir = tempfile::tempdir_in("/var/tmp").expect("dir");
    std::os::unix::fs::chown(dir.path(), Some(1000), Some(1000)).expect("chown");
    let w = dir.path().display().to_string();
    for rung in ["container", "process"] {
        let (code, out, err) = run(rung, p.path(), &["--work-dir", &w], "echo ran");
        assert_ne!(code, 0, "{rung}: {out}{err}");
        assert!(!out.contains("ran"), "{rung}: {out}");
        assert!(
            err.contains("more than max_disk") && err.contains("omit `--work-dir`"),
            "{rung}: {err}"
        );
    }
}

#[test]
fn a_work_dir_a_user_owns_is_mapped_and_keeps_its_owner_at_both_rungs() {
    if !can_sandbox("idmapped work dir") {
        return;
    }
    let p = policy("64MiB");
    let fs = SmallFs::new("32m");
    let dir = user_dir(&fs.0);
    std::fs::write(dir.join("mine"), "the user's").expect("write");
    std::os::unix::fs::chown(dir.join("mine"), Some(1000), Some(1000)).expect("chown");
    let w = dir.display().to_string();
    for rung in ["container", "process"] {
        let made = format!("made-{rung}");
        let (code, out, err) = run(
            rung,
            p.path(),
            &["--work-dir", &w],
            &format!("cat mine && echo x > {made} && mkdir d-{rung} && echo y > d-{rung}/f && ls -ln mine"),
        );
        assert_eq!(code, 0, "{rung}: {out}{err}");
        assert!(out.contains("the user's"), "{rung}: {out}");
        for f in [
            dir.join(&made),
            dir.join(format!("d-{rung}")),
            dir.join(format!("d-{rung}/f")),
        ] {
            let m = std::fs::metadata(&f).expect("made");
            assert_eq!((m.uid(), m.gid()), (1000, 1000), "{rung}: {}", f.display());
        }
        let mine = std::fs::metadata(dir.join("mine")).expect("mine");
        assert_eq!((mine.uid(), mine.gid()), (1000, 1000), "{rung}");
    }
    // Nothing of cordon's is left in the directory, and no mount of it.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".cordon"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert_eq!(
        mounts.matches(&*fs.0.display().to_string()).count(),
        1,
        "{mounts}"
    );
}

#[test]
fn a_root_owned_work_dir_is_refused() {
    if !can_sandbox("root-owned work dir") {
        return;
    }
    let p = policy("64MiB");
    let fs = SmallFs::new("32m");
    let dir = fs.0.join("rootdir");
    std::fs::create_dir(&dir).expect("mkdir");
    let (code, _, err) = run(
        "container",
        p.path(),
        &["--work-dir", &dir.display().to_string()],
        "echo ran",
    );
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("owned by 0:0") && err.contains("help:"),
        "{err}"
    );
}

#[test]
fn a_work_dir_whose_filesystem_cannot_be_idmapped_is_refused_with_the_reason() {
    if !can_sandbox("work dir on overlayfs") {
        return;
    }
    let p = policy("64MiB");
    let fs = SmallFs::new("32m");
    for d in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir(fs.0.join(d)).expect("mkdir");
    }
    let opts = format!(
        "lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work",
        fs.0.display()
    );
    let merged = fs.0.join("merged");
    let ok = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .status()
        .expect("mount");
    assert!(ok.success());
    let dir = user_dir(&merged);
    let (code, out, err) = run(
        "container",
        p.path(),
        &["--work-dir", &dir.display().to_string()],
        "echo ran",
    );
    let _ = Command::new("umount").arg("-l").arg(&merged).status();
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("does not support idmapped mounts") && err.contains("help:"),
        "{err}"
    );
}

#[test]
fn gc_unmounts_the_volume_of_a_run_killed_before_it_could_dispose() {
    if !can_sandbox("volume of a killed run") {
        return;
    }
    let p = policy("64MiB");
    let pol = p.path().display().to_string();
    let mut child = cordon_testkit::cordon!()
        .command([
            "run",
            "--min-isolation",
            "process",
            "--backend",
            "process",
            "--policy",
            &pol,
            "--",
            "/bin/sh",
            "-c",
            "sleep 20",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let name = format!("/cordon-volume-{}-", child.id());
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&name)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !mounted() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(mounted(), "the run never mounted its volume");
    // The volume as made: no cache flushes (its teardown must not fsync
    // into the host's disk) and no mkfs `lost+found` at its root.
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = info
        .lines()
        .find(|l| l.contains(&name))
        .expect("the volume's line");
    let root = line.split(' ').nth(4).expect("mount point");
    assert!(line.contains("nobarrier"), "{line}");
    assert!(
        !std::path::Path::new(root).join("lost+found").exists(),
        "{root} has a lost+found"
    );
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert!(mounted(), "killed, so nothing unmounted it");
    let (code, out, err) = cordon(&["sandbox", "gc"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!mounted(), "gc left the volume mounted: {out}{err}");
}

#[test]
fn doctor_says_whether_max_disk_can_be_held() {
    let (_, out, err) = cordon(&["doctor"]);
    assert!(
        out.contains("disk bound (max_disk)") && out.contains("work dir owner mapping"),
        "{out}{err}"
    );
    // This machine has mkfs.ext4, loop devices and ext4.
    if std::path::Path::new("/dev/loop-control").exists()
        && std::path::Path::new("/usr/sbin/mkfs.ext4").exists()
    {
        assert!(out.contains("an ext4 volume of max_disk"), "{out}");
    }
}
