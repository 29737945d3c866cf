//! The `microvm` backend through the `cordon` binary: real QEMU `microvm`
//! guests (under TCG here: `/dev/kvm` opens but runs no guest, so the
//! backend declares `container`, the rung of the jail around QEMU), booted
//! from Debian's cloud kernel, cordon's initramfs and a packed image.
//!
//! Needs root, `qemu-system-x86_64`, a 6.12+ Debian cloud kernel in /boot,
//! `mkfs.erofs` and the static guest agent (`.ci/run` builds it:
//! `cargo build --profile guest -p cordon-vm-agent --target
//! x86_64-unknown-linux-gnu` with `+crt-static`). Without one of them each
//! test says `SKIPPED` and why; `CI=true` makes that a failure.
//!
//! The guests boot the CI image (Debian minbase with python3, cached in
//! `/var/cache/cordon-ci-images`, built with debootstrap on first use), and
//! `host` there resolves to that store's `default`, imported from it.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The CI image store and its image.
const STORE: &str = cordon_testkit::CI_STORE;
const IMAGE: &str = cordon_testkit::CI_IMAGE;

/// Whether the test can run; says why not, loudly, and fails under CI.
fn can_boot(case: &str) -> bool {
    let missing = cordon_testkit::microvm_missing(cordon_testkit::cordon!().bin());
    cordon_testkit::runs_here(case, missing.map(|m| format!("a microvm guest needs: {m}")))
}

/// One VM test at a time: each boots guests under TCG on two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The CI image, built once per machine (as the sandbox tests do), with a
/// `default` beside it for specs that name `host`.
fn store() -> PathBuf {
    let (store, _) = cordon_testkit::ci_image(&cordon_testkit::cordon!());
    let have = |n: &str| store.join("names").join(format!("{n}.json")).exists();
    if !have("default") {
        let c = cordon_testkit::cordon!().env("CORDON_IMAGE_STORE", &store);
        let (code, _, err) = c.run(["image", "ls", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let root = store_root(&store, IMAGE);
        let (code, _, err) = c.run([
            "image".as_ref(),
            "import".as_ref(),
            "default".as_ref(),
            root.as_os_str(),
        ]);
        assert_eq!(code, 0, "importing `default`: {err}");
    }
    store
}

/// The root tree of a stored image.
fn store_root(store: &Path, name: &str) -> PathBuf {
    let s = cordon_image::ImageStore::open(store).unwrap();
    match s.resolve(name).unwrap() {
        cordon_image::Resolved::Stored { root, .. } => root,
        other => panic!("{other:?}"),
    }
}

/// A private directory (a state directory must be its owner's alone).
fn tmp() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

fn cordon(state: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_env(state, args, &[])
}

fn cordon_env(state: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    cordon_in(state).run_env(args, env)
}

/// `cordon` with `state` as its state directory and the CI image store.
fn cordon_in(state: &Path) -> cordon_testkit::Cordon {
    cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", state)
        .env("CORDON_IMAGE_STORE", STORE)
}

fn spec(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("spec.yaml");
    std::fs::write(&p, format!("kind: run\nimage: {IMAGE}\n{extra}")).unwrap();
    p
}

const VM: [&str; 4] = ["--backend", "microvm", "--min-isolation", "container"];

/// What a microvm sandbox leaves on the host: its directories in the
/// scratch directory, its jail's cgroups, its QEMU processes.
fn residue() -> Vec<String> {
    residue_in(&std::env::temp_dir())
}

/// [`residue`], with `scratch` as the sandboxes' TMPDIR.
fn residue_in(scratch: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(d) = std::fs::read_dir(scratch) {
        for e in d.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("cordon-microvm-") && !n.starts_with("cordon-microvm-probe") {
                out.push(format!("dir {n}"));
            }
        }
    }
    for root in [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup",
    ] {
        walk_cgroups(Path::new(root), 0, &mut out);
    }
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            let qemu =
                cmd.starts_with("qemu-system-x86_64") || cmd.contains("/qemu-system-x86_64\0");
            if qemu && cmd.contains("cordon.ctl") && cmd.contains("/cordon-microvm-") {
                out.push(format!("qemu {}", e.file_name().to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// Waits (10 s at most) until what microvm sandboxes leave is `before`
/// again: anything new is a leak.
fn settles_to(before: &[String]) {
    let until = Instant::now() + Duration::from_secs(10);
    while residue() != before && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let now = residue();
    let new: Vec<&String> = now.iter().filter(|r| !before.contains(r)).collect();
    assert!(new.is_empty(), "left behind: {new:?}");
}

fn walk_cgroups(dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > 6 {
        return;
    }
    let Ok(d) = std::fs::read_dir(dir) else {
        return;
    };
    for e in d.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("cordon-vm-cordon_microvm_") {
            out.push(format!("cgroup {}", e.path().display()));
        } else {
            walk_cgroups(&e.path(), depth + 1, out);
        }
    }
}

/// This machine's own kernel release.
fn host_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn run_with_no_image_named_boots_a_guest_kernel_of_its_own() {
    if !can_boot("microvm run") {
        return;
    }
    let _one = serial();
    let store = store();
    let state = tmp();
    let before = residue();
    // The issue's command, exactly: no spec, so the `host` image, which a
    // guest boots as the store's `default`.
    let (code, stdout, stderr) = cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", state.path())
        .env("CORDON_IMAGE_STORE", &store)
        .run([
            "run",
            "--backend",
            "microvm",
            "--min-isolation",
            "container",
            "--",
            "uname",
            "-r",
        ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let guest = stdout.trim();
    assert!(guest.ends_with("-cloud-amd64"), "{guest}");
    assert_ne!(guest, host_release(), "the guest ran the host's kernel");
    settles_to(&before);
}

#[test]
fn doctor_says_which_rung_and_why_and_the_default_floor_refuses_with_the_way_down() {
    if !can_boot("microvm doctor") {
        return;
    }
    let _one = serial();
    let state = tmp();
    let (_, out, _) = cordon(state.path(), &["doctor"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("microvm"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("can run"), "{row}");
    if row.contains("accelerator: kvm") {
        // Real KVM: the hypervisor boundary, the default floor's rung.
        assert!(row.split_whitespace().nth(1) == Some("microvm"), "{row}");
        return;
    }
    assert!(row.contains("accelerator: tcg"), "{row}");
    assert_eq!(row.split_whitespace().nth(1), Some("container"), "{row}");
    assert!(row.contains("not a security boundary"), "{row}");
    assert!(
        row.contains("--backend microvm --min-isolation container"),
        "{row}"
    );
    // `cordon run` with no flag: the default floor is `microvm`, which
    // nothing here meets; refused before anything starts, with the way down.
    let (code, _, err) = cordon(state.path(), &["run", "--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("`microvm` (container) is below the floor `microvm`"),
        "{err}"
    );
    assert!(err.contains("--min-isolation"), "{err}");
}

#[test]
fn nothing_ambient_reaches_the_guest() {
    if !can_boot("microvm ambient") {
        return;
    }
    let _one = serial();
    store();
    let dir = tmp();
    // A file on the host the guest must not see, and an environment
    // variable of cordon's own process it must not get.
    let marker = dir.path().join("host-marker");
    std::fs::write(&marker, "host").unwrap();
    let sp = spec(dir.path(), "");
    let script = format!(
        "echo IFACES $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '); \
         echo ENV $(env | cut -d= -f1 | sort | tr '\\n' ' '); \
         test -e {m} && echo HOSTPATH-SEEN; \
         test -e /var/cache/cordon-ci-images && echo STORE-SEEN; \
         ls /sys/class/net 2>/dev/null && echo SYSNET-SEEN; \
         python3 -c \"import socket; s=socket.socket(); s.settimeout(3)\ntry:\n  s.connect(('169.254.169.254', 80)); print('METADATA-REACHED')\nexcept OSError as e: print('METADATA', e.errno)\"; \
         echo end",
        m = marker.display()
    );
    let mut args = vec!["run", "-q"];
    args.extend(VM);
    args.extend(["--spec", sp.to_str().unwrap(), "--", "sh", "-c", &script]);
    let (code, out, err) = cordon_env(dir.path(), &args, &[("CORDON_TEST_HOST_SECRET", "s3cret")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("IFACES lo\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.trim_end() == "ENV HOME LANG PATH PWD"),
        "{out}"
    );
    for seen in [
        "HOSTPATH-SEEN",
        "STORE-SEEN",
        "SYSNET-SEEN",
        "METADATA-REACHED",
        "s3cret",
    ] {
        assert!(!out.contains(seen), "{seen}: {out}");
    }
    assert!(out.contains("METADATA "), "{out}");
    assert!(out.trim_end().ends_with("end"), "{out}");
}

#[test]
fn the_wall_clock_bound_ends_the_command_and_a_killed_keeper_is_reclaimed() {
    if !can_boot("microvm bounds") {
        return;
    }
    let _one = serial();
    store();
    let dir = tmp();
    let before = residue();
    let sp = spec(dir.path(), "resources:\n  wall_seconds: 3\n");
    let mut args = vec!["run", "-q"];
    args.extend(VM);
    args.extend(["--spec", sp.to_str().unwrap(), "--", "sleep", "60"]);
    let started = Instant::now();
    let (code, out, err) = cordon(dir.path(), &args);
    assert_eq!(code, 124, "{out}{err}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    // A keeper killed with SIGKILL: gc reclaims its VM from the record.
    let mut up = vec!["sandbox", "up", "-q", "--scope", "vm", "--thread", "crash"];
    up.extend(VM);
    up.extend(["--spec", sp.to_str().unwrap()]);
    let (code, h, err) = cordon(dir.path(), &up);
    assert_eq!(code, 0, "{err}");
    let h = h.trim();
    let rec = cordon_host::state::StateDir::open(dir.path())
        .unwrap()
        .read(h)
        .unwrap()
        .expect("the sandbox's record");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rec.keeper.pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while rec.keeper.alive() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!rec.keeper.alive(), "the keeper outlived SIGKILL");
    let (code, out, err) = cordon(dir.path(), &["sandbox", "gc"]);
    assert_eq!(code, 0, "{out}{err}");
    settles_to(&before);
}

/// The backend suite (`cordon_testkit::suite`) against `microvm`, guests
/// booting the CI image: a kept sandbox, a run with a secret, the
/// conformance kit (21 cases here) and the escape kit with and without a
/// route (the guest's proxy listener, the relay over the channel and the
/// host's proxy namespace all in place), and up/exec/down cycles, run
/// `CORDON_MICROVM_CYCLES` times (default 2); what a sandbox left (its
/// directory, its jail's cgroups, its QEMU) is gone within 10 s.
#[test]
fn the_backend_suite_passes() {
    if !can_boot("microvm backend suite") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let _one = serial();
    store();
    let dir = tmp();
    // The sandboxes' TMPDIR, traversable by the jail.
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755)).unwrap();
    cordon_testkit::suite::run_all(&cordon_testkit::suite::Backend {
        name: "microvm",
        cordon: cordon_in(&dir.path().join("state")).env("TMPDIR", &scratch),
        args: ["-q"].into_iter().chain(VM).map(String::from).collect(),
        image: IMAGE,
        scratch: scratch.clone(),
        secrets: true,
        execs_per_cycle: 1,
        cycles: ("CORDON_MICROVM_CYCLES", 2),
        settle: Duration::from_secs(10),
        conformance_cases: Some(21),
        ports: true,
        residue: Box::new(|| residue_in(&scratch)),
    });
}

/// `sandbox pause` at the microvm: QEMU — the whole guest — is frozen
/// through its jail's cgroup: a busy loop in the guest burns no CPU while
/// paused (the jail's `cpuacct.usage` stands still) and does again after
/// `resume`; an `exec` resumes it first; a paused guest goes at `down`
/// and leaves nothing.
#[test]
fn a_kept_guest_pauses_and_resumes_through_its_jail() {
    if !can_boot("microvm pause") {
        return;
    }
    let _one = serial();
    store();
    let dir = tmp();
    let before = residue();
    let sp = spec(dir.path(), "");
    let mut up = vec!["sandbox", "up", "-q", "--scope", "vm", "--thread", "pause"];
    up.extend(VM);
    up.extend(["--spec", sp.to_str().unwrap()]);
    let (code, h, err) = cordon(dir.path(), &up);
    assert_eq!(code, 0, "{err}");
    let h = h.trim().to_string();
    let rec = cordon_host::state::StateDir::open(dir.path())
        .unwrap()
        .read(&h)
        .unwrap()
        .expect("the sandbox's record");
    let cpuacct: PathBuf = rec.residue["cgroups"]
        .as_array()
        .expect("the jail's cgroups")
        .iter()
        .filter_map(|d| d.as_str().map(PathBuf::from))
        .find(|d| d.to_string_lossy().contains("cpuacct"))
        .expect("a cpuacct cgroup")
        .join("cpuacct.usage");
    let used = || -> u64 {
        std::fs::read_to_string(&cpuacct)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // Burning means over 100 ms of CPU in 400 ms: an idle guest's timer
    // ticks cost far less.
    let burning = || {
        let a = used();
        std::thread::sleep(Duration::from_millis(400));
        used() - a > 100_000_000
    };
    let mut busy = cordon_in(dir.path()).command([
        "sandbox",
        "exec",
        &h,
        "--",
        "/bin/sh",
        "-c",
        "while :; do :; done",
    ]);
    let mut busy = busy
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !burning() && Instant::now() < until {}
    assert!(burning(), "the guest's loop never ran");
    let c = |args: &[&str]| cordon(dir.path(), args);
    let (code, _, err) = c(&["sandbox", "pause", &h]);
    assert_eq!(code, 0, "pause: {err}");
    let a = used();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(used(), a, "QEMU ran while paused");
    let (code, _, err) = c(&["sandbox", "resume", &h]);
    assert_eq!(code, 0, "resume: {err}");
    assert!(burning(), "the guest did not go on after resume");
    let (code, _, err) = c(&["sandbox", "pause", &h]);
    assert_eq!(code, 0, "pause: {err}");
    let (code, out, err) = c(&["sandbox", "exec", &h, "--", "/bin/echo", "ran"]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    assert!(burning(), "the exec did not resume the guest");
    let (code, _, err) = c(&["sandbox", "pause", &h]);
    assert_eq!(code, 0, "pause: {err}");
    let (code, _, err) = c(&["sandbox", "down", &h]);
    assert_eq!(code, 0, "down of a paused guest: {err}");
    let until = Instant::now() + Duration::from_secs(10);
    while busy.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = busy.kill();
    let _ = busy.wait();
    settles_to(&before);
}

/// `snapshot --memory` at the microVM: the whole guest is saved (QEMU's
/// migration into a file) while a shell counts in memory, writing each
/// value to a file; the source goes on counting, and each sandbox made
/// from the snapshot (and each fork `--memory`) goes on from where the
/// guest stood — not from 1,
/// which a command started again would count from — with the files
/// written before, and what one copy writes the other does not see. A
/// copy whose machine would differ (a narrower memory bound) is refused
/// before anything boots. Nothing of the guests is left.
#[test]
fn a_guest_saved_with_its_memory_goes_on_in_each_copy() {
    if !can_boot("microvm memory snapshot") {
        return;
    }
    let _one = serial();
    store();
    let dir = tmp();
    let before = residue();
    let sp = spec(dir.path(), "resources: {memory: 64MiB}\n");
    let c = cordon_in(dir.path()).env("CORDON_SNAPSHOT_DIR", dir.path().join("snapshots"));
    let ok = |args: &[&str]| {
        let (code, out, err) = c.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.trim().to_string()
    };
    let sp = sp.to_str().unwrap();
    let up = |thread: &str, extra: &[&str]| {
        let mut a = vec![
            "sandbox", "up", "-q", "--scope", "vm-mem", "--thread", thread,
        ];
        a.extend(VM);
        a.extend(["--spec", sp]);
        a.extend_from_slice(extra);
        c.run(a)
    };
    let count = |h: &str| -> u64 {
        let (code, out, err) = c.run(["sandbox", "exec", h, "--", "cat", "count"]);
        assert_eq!(code, 0, "{err}");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("count: {out:?}"))
    };
    let (code, src, err) = up("src", &[]);
    assert_eq!(code, 0, "{err}");
    let src = src.trim().to_string();
    ok(&[
        "sandbox",
        "exec",
        &src,
        "--",
        "sh",
        "-c",
        "echo before > kept.txt",
    ]);
    let counter = {
        let c = c.clone();
        let src = src.clone();
        std::thread::spawn(move || {
            c.run([
                "sandbox",
                "exec",
                &src,
                "--timeout",
                "600",
                "--",
                "sh",
                "-c",
                "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.05; done",
            ])
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut stood = 0;
    while stood < 15 {
        assert!(Instant::now() < deadline, "the counter stood at {stood}");
        std::thread::sleep(Duration::from_millis(300));
        let (code, out, _) = c.run(["sandbox", "exec", &src, "--", "cat", "count"]);
        if code == 0 {
            stood = out.trim().parse().unwrap_or(0);
        }
    }
    let (code, snap, err) = c.run(["sandbox", "snapshot", &src, "--memory", "--name", "live"]);
    assert_eq!(code, 0, "{err}");
    assert!(snap.trim().starts_with("snap-"), "{snap}");
    assert!(err.contains(", 1 process ("), "{err}");
    // The source went on: its counter too.
    let after = count(&src);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        count(&src) > after,
        "the source's counter stopped at {after}"
    );

    // Two copies: one made from the snapshot, one a fork with memory
    // (a second snapshot, taken now, and a sandbox from it).
    let (code, a, err) = up("a", &["--from", "live"]);
    assert_eq!(code, 0, "{err}");
    let mut fork = vec!["sandbox", "fork", &src, "--count", "1", "--memory"];
    fork.extend(["--thread-prefix", "forked"]);
    fork.extend(VM);
    let b = ok(&fork);
    let copies = [a.trim().to_string(), b];
    for h in &copies {
        let first = count(h);
        assert!(
            first >= stood,
            "{h}: {first}, where the guest stood at {stood} or past"
        );
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            count(h) > first,
            "{h}: the copy's counter stopped at {first}"
        );
        assert_eq!(
            ok(&["sandbox", "exec", h, "--", "cat", "kept.txt"]),
            "before"
        );
    }
    ok(&[
        "sandbox",
        "exec",
        &copies[0],
        "--",
        "sh",
        "-c",
        "echo mine > only-a",
    ]);
    let (code, _, _) = c.run(["sandbox", "exec", &copies[1], "--", "test", "-e", "only-a"]);
    assert_ne!(code, 0, "a copy saw the other's file");
    let json = ok(&["sandbox", "snapshots", "--format", "json"]);
    assert!(json.contains("\"processes\":1"), "{json}");

    // A narrower spec: the copy would go on enforcing the plan its guest
    // was saved with, so it is refused, naming what differs.
    let narrower = dir.path().join("narrower.yaml");
    std::fs::write(
        &narrower,
        format!("kind: run\nimage: {IMAGE}\nresources: {{memory: 32MiB}}\n"),
    )
    .unwrap();
    let mut a = vec![
        "sandbox", "up", "-q", "--scope", "vm-mem", "--thread", "narrow",
    ];
    a.extend(VM);
    a.extend(["--spec", narrower.to_str().unwrap(), "--from", "live"]);
    let (code, _, err) = c.run(a);
    assert_ne!(code, 0);
    assert!(
        err.contains("`bounds`")
            && err.contains("\"max_memory\":33554432")
            && err.contains("leave `--spec` out"),
        "{err}"
    );

    for h in copies.iter().chain([&src]) {
        ok(&["sandbox", "down", h]);
    }
    let (code, _, _) = counter.join().unwrap();
    assert_ne!(code, 0, "the counter ended by itself");
    settles_to(&before);
}

/// Snapshots at the microvm: the shared case (`cordon_testkit::snapshot`),
/// the files copied out of the source guest and into each new one through
/// the guest agent's files API (`/tmp` too); `--memory` refused with the
/// reason; nothing of the five guests left behind.
#[test]
fn the_snapshot_case_passes_at_the_microvm() {
    if !can_boot("microvm snapshot") {
        return;
    }
    let _one = serial();
    store();
    let dir = tmp();
    let before = residue();
    let sp = spec(dir.path(), "");
    let c = cordon_in(dir.path()).env("CORDON_SNAPSHOT_DIR", dir.path().join("snapshots"));
    let mut sel: Vec<&str> = VM.to_vec();
    sel.extend(["--spec", sp.to_str().unwrap()]);
    cordon_testkit::snapshot::restore_and_fork(&c, "vm-snap", &sel, true, true);

    // A snapshot taken at the container rung is restored in a guest: its
    // files are files. One holding a link is refused, naming it (the
    // guest's files API makes no link), and nothing is left of the guest.
    let ok = |args: &[&str]| {
        let (code, out, err) = c.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.trim().to_string()
    };
    let sp = sp.to_str().unwrap();
    let native = ok(&[
        "sandbox",
        "up",
        "-q",
        "--scope",
        "vm-snap",
        "--thread",
        "native",
        "--backend",
        "container",
        "--min-isolation",
        "container",
        "--spec",
        sp,
    ]);
    ok(&[
        "sandbox",
        "exec",
        &native,
        "--",
        "sh",
        "-c",
        "mkdir -p d && echo from-native > d/f && ln -s d/f l",
    ]);
    ok(&["sandbox", "snapshot", &native, "--name", "linked"]);
    ok(&["sandbox", "exec", &native, "--", "rm", "l"]);
    ok(&["sandbox", "snapshot", &native, "--name", "plain"]);
    let up_vm = |thread: &str, from: &str| {
        let mut a = vec![
            "sandbox", "up", "-q", "--scope", "vm-snap", "--thread", thread,
        ];
        a.extend(sel.iter().copied());
        a.extend(["--from", from]);
        c.run(a)
    };
    let (code, _, err) = up_vm("linked", "linked");
    assert_ne!(code, 0);
    assert!(err.contains("`l`") && err.contains("link"), "{err}");
    let (code, h, err) = up_vm("plain", "plain");
    assert_eq!(code, 0, "{err}");
    let h = h.trim();
    assert_eq!(
        ok(&["sandbox", "exec", h, "--", "cat", "d/f"]),
        "from-native"
    );
    ok(&["sandbox", "down", h]);
    ok(&["sandbox", "down", &native]);
    settles_to(&before);
}
