//! The `gvisor` backend through the real binary and a real `runsc`:
//! `cordon run --min-isolation hardened_container` lands on it, output and
//! exit codes come back, the workload is not root, has no network but its
//! loopback, writes only its work dir and `/tmp`, cannot run what the
//! policy denies (refused before it starts, and masked inside), and leaves
//! nothing behind. Without root or `runsc` these skip loudly; `CI=true`
//! makes a missing `runsc` or root a failure (`.ci/run` installs runsc).
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cordon_testkit::suite::Backend;

const STATE_ROOT: &str = "/run/cordon/gvisor";

use cordon_testkit::can_run_gvisor as can_run;

/// The escape kit's `mount` case compares the host's mount table before
/// and after; every other test here starts sandboxes (whose directories
/// and volumes are mounted in the host's namespace). The backend suite,
/// which runs the kits, runs alone (write), the rest beside each other
/// (read).
static KITS_ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// `cordon run --min-isolation hardened_container` in a scratch TMPDIR.
fn run(tmp: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["run", "--min-isolation", "hardened_container"];
    all.extend_from_slice(args);
    cordon_testkit::cordon!().env("TMPDIR", tmp).run(all)
}

fn sh(tmp: &Path, script: &str) -> (i32, String, String) {
    run(tmp, &["--", "/bin/sh", "-c", script])
}

fn runsc_containers() -> Vec<String> {
    if !Path::new(STATE_ROOT).exists() {
        return Vec::new();
    }
    let out = Command::new("runsc")
        .args(["--root", STATE_ROOT, "list", "--quiet"])
        .output()
        .expect("runsc list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cordon-gvisor-"))
        .collect()
}

fn scratch() -> tempfile::TempDir {
    cordon_testkit::scratch("gvisor-test-")
}

#[test]
fn echo_runs_at_the_hardened_container_rung_and_leaves_nothing() {
    if !can_run("gvisor echo") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, err) = run(tmp.path(), &["--", "/bin/echo", "hi"]);
    assert_eq!((code, out.as_str()), (0, "hi\n"), "stderr: {err}");
    assert!(err.contains("running on the `gvisor` backend"), "{err}");
    // Nothing of the sandbox is left: no directory, no container of its
    // under cordon's state root, no runsc process of its.
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    let tag = tmp.path().display().to_string();
    assert!(
        !cordon_testkit::process_args()
            .iter()
            .any(|a| a.contains(&tag)),
        "a process of the sandbox is still running"
    );
    let mine: Vec<String> = runsc_containers()
        .into_iter()
        .filter(|c| c.starts_with("cordon-gvisor-"))
        .filter(|c| {
            let pid = c.split('-').nth(2).unwrap_or("");
            !Path::new(&format!("/proc/{pid}")).exists()
        })
        .collect();
    assert_eq!(mine, Vec::<String>::new(), "containers left by dead owners");
    // Nor a cgroup of a container whose owner is gone.
    let dead_cgroups: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .flat_map(|h| std::fs::read_dir(h.path()).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cordon-gvisor-"))
        .filter(|n| {
            let pid = n.split('-').nth(2).unwrap_or("");
            !Path::new(&format!("/proc/{pid}")).exists()
        })
        .collect();
    assert_eq!(dead_cgroups, Vec::<String>::new(), "cgroups left behind");
}

#[test]
fn exit_codes_come_back() {
    if !can_run("gvisor exit codes") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, _) = sh(tmp.path(), "echo out; echo err >&2; exit 7");
    assert_eq!((code, out.as_str()), (7, "out\n"));
    let (code, _, _) = sh(tmp.path(), "exit 0");
    assert_eq!(code, 0);
}

#[test]
fn the_workload_is_not_root_and_has_no_network() {
    if !can_run("gvisor uid and network") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, err) = sh(tmp.path(), "id -u; id -g");
    assert_eq!(code, 0, "{err}");
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 2, "{out}");
    assert!(ids.iter().all(|i| *i != "0"), "runs as root: {out}");
    // Interfaces: the loopback only.
    let (code, out, err) = sh(tmp.path(), "cat /proc/net/dev");
    assert_eq!(code, 0, "{err}");
    let ifaces: Vec<&str> = out
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "{out}");
    // A listener on the host's loopback cannot be reached.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (code, out, err) = run(
        tmp.path(),
        &[
            "--",
            "python3",
            "-c",
            &format!(
                "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)"
            ),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("refused"), "{out}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "the host's listener was reached"
    );
}

#[test]
fn only_the_work_dir_and_tmp_are_writable() {
    if !can_run("gvisor writable") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, err) = sh(
        tmp.path(),
        "pwd; echo a > f && cat f; echo b > /tmp/t && cat /tmp/t; \
         for p in /usr/x /x /etc/x /bin/x; do if touch $p 2>/dev/null; then echo WROTE $p; fi; done",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/workspace\na\nb\n");
    // The work dir holds no program that runs.
    let (code, _, _) = sh(tmp.path(), "cp /bin/true ./t && ./t");
    assert_ne!(code, 0, "a program in the work dir ran");
}

#[test]
fn what_the_policy_denies_is_refused_before_it_starts_and_masked_inside() {
    if !can_run("gvisor denied command") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, err) = run(tmp.path(), &["--", "/usr/bin/su", "-c", "id"]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("the policy refuses `/usr/bin/su`"), "{err}");
    assert!(err.contains("no-privilege-tools"), "{err}");
    // Started from inside, the same file does not run.
    let (code, out, err) = sh(tmp.path(), "/usr/bin/su -c id; echo rc=$?");
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("rc=126"), "{out} {err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn the_wall_clock_bound_kills_the_container() {
    if !can_run("gvisor timeout") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let spec = tmp.path().join("spec.yaml");
    std::fs::write(
        &spec,
        "kind: run\nimage: host\nresources: {wall_seconds: 2}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (code, _, err) = run(
        tmp.path(),
        &["--spec", spec.to_str().unwrap(), "--", "/bin/sleep", "30"],
    );
    assert_ne!(code, 0);
    assert!(started.elapsed().as_secs() < 20, "{err}");
    assert!(err.contains("`max_wall_seconds` bound"), "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn doctor_reports_gvisor_with_its_platform() {
    if !can_run("gvisor doctor") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let (_, text, _) =
        cordon_testkit::cordon!().run(["doctor", "--min-isolation", "hardened_container"]);
    let row = text
        .lines()
        .find(|l| l.starts_with("gvisor "))
        .unwrap_or_else(|| panic!("no gvisor row:\n{text}"));
    assert!(row.contains("can run"), "{row}");
    assert!(row.contains("platform: ptrace"), "{row}");
    // The egress route's wider kernel surface is said where it is chosen.
    assert!(row.contains("allowlist"), "{row}");
    assert!(row.contains("hostinet"), "{row}");
}

/// gVisor is opt-in: a `container` floor's default order passes over it
/// (it serves no terminals, egress or stored images yet); naming it uses it.
#[test]
fn a_container_floor_lands_on_the_container_rung_unless_gvisor_is_named() {
    if !can_run("gvisor opt-in") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let cordon = {
        let c = cordon_testkit::cordon!().env("TMPDIR", tmp.path());
        move |args: &[&str]| {
            let (code, _, err) = c.run(args);
            (code, err)
        }
    };
    let (code, err) = cordon(&["run", "--min-isolation", "container", "--", "/bin/true"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("running on the `container` backend"), "{err}");
    let (code, err) = cordon(&[
        "run",
        "--min-isolation",
        "container",
        "--backend",
        "gvisor",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("running on the `gvisor` backend"), "{err}");
}

/// The container rung's syscall denials hold inside the gVisor sandbox
/// too (an OCI `linux.seccomp` runsc loads with `--oci-seccomp`): no
/// `ptrace`, no new user namespace, no netlink socket.
#[test]
fn the_seccomp_denials_hold_inside() {
    if !can_run("gvisor seccomp") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let script = "import ctypes, socket\n\
                  libc = ctypes.CDLL(None, use_errno=True)\n\
                  print('traceme', libc.ptrace(0, 0, 0, 0))\n\
                  print('unshare_user', libc.unshare(0x10000000))\n\
                  try:\n    socket.socket(16, socket.SOCK_RAW, 0)\n    print('netlink OPENED')\n\
                  except OSError:\n    print('netlink refused')\n";
    let (code, out, err) = run(tmp.path(), &["--", "python3", "-c", script]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out, "traceme -1\nunshare_user -1\nnetlink refused\n",
        "{err}"
    );
}

/// A kept gVisor sandbox serves several execs over one work dir; when its
/// keeper is killed, `sandbox gc` reclaims its directory, volume and
/// containers from the record.
#[test]
fn a_kept_sandbox_whose_keeper_died_is_reclaimed_by_gc() {
    if !can_run("gvisor kept and gc") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let cordon = {
        let c = cordon_testkit::cordon!().env("TMPDIR", tmp.path());
        move |args: &[&str]| c.run(args)
    };
    let (code, handle, err) = cordon(&[
        "sandbox",
        "up",
        "--scope",
        "gvisor-test",
        "--thread",
        &format!("t{}", std::process::id()),
        "--min-isolation",
        "hardened_container",
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    let (code, _, err) = cordon(&[
        "sandbox",
        "exec",
        &handle,
        "--",
        "/bin/sh",
        "-c",
        "echo kept > k",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cordon(&["sandbox", "exec", &handle, "--", "/bin/cat", "k"]);
    assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
    let dirs = leftovers(tmp.path());
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // The second exec ran in the sandbox's running runsc sandbox (its
    // pause container), which runsc's listing shows with cordon's
    // annotations while the sandbox lives.
    let listed = Command::new("runsc")
        .args(["--root", STATE_ROOT, "list", "--format=json"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let pod = format!("\"id\":\"{}-p", dirs[0]);
    assert!(
        listed.contains(&pod),
        "no pause container of `{}`: {listed}",
        dirs[0]
    );
    assert!(
        listed.contains("\"dev.cordon.scope\":\"gvisor-test\""),
        "{listed}"
    );
    let keeper: i32 = dirs[0].split('-').nth(2).unwrap().parse().unwrap();
    let killed = Command::new("kill")
        .args(["-9", &keeper.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{keeper}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, _, err) = cordon(&["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new(), "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&dirs[0]), "the volume is still mounted");
    assert!(
        !runsc_containers().iter().any(|c| c.starts_with(&dirs[0])),
        "a container of the sandbox is left"
    );
}

/// `max_cpu_seconds` is held from the host (gVisor ignores `RLIMIT_CPU`):
/// a busy loop is killed at the bound and reported as such.
#[test]
fn the_cpu_bound_kills_a_busy_loop() {
    if !can_run("gvisor cpu bound") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let spec = tmp.path().join("spec.yaml");
    std::fs::write(
        &spec,
        "kind: run\nimage: host\nresources: {cpu_seconds: 1, wall_seconds: 30}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (code, _, err) = run(
        tmp.path(),
        &[
            "--spec",
            spec.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            "while :; do :; done",
        ],
    );
    assert_ne!(code, 0);
    assert!(started.elapsed().as_secs() < 20, "{err}");
    assert!(err.contains("`max_cpu_seconds` bound"), "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// Debian's runsc refuses `AT_NO_AUTOMOUNT` in `statx`/`newfstatat`
/// (EINVAL), which coreutils passes on every stat; the sandbox preloads
/// cordon's shim that clears it, so `ls -l` and `stat` work.
#[test]
fn coreutils_stat_works_inside() {
    if !can_run("gvisor stat") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let (code, out, err) = sh(
        tmp.path(),
        "ls -d /; stat -c '%U %a' /tmp; ls -l /usr >/dev/null && echo listed",
    );
    assert_eq!(
        (code, out.as_str()),
        (0, "/\ncordon 700\nlisted\n"),
        "{err}"
    );
}

/// A workload that allocates past `max_memory` is killed and reported as
/// killed at that bound (cordon's own parent cgroup holds the bound and
/// its kill count outlives the container), and no cgroup is left.
#[test]
fn the_memory_bound_kills_and_is_reported() {
    if !can_run("gvisor memory bound") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let spec = tmp.path().join("spec.yaml");
    std::fs::write(
        &spec,
        "kind: run\nimage: host\nresources: {memory: 64MiB}\n",
    )
    .unwrap();
    let (code, out, err) = run(
        tmp.path(),
        &[
            "--spec",
            spec.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            "x=[]\nfor i in range(64): x.append(b'1'*(8<<20))\nprint('ALLOCATED')",
        ],
    );
    assert_ne!(code, 0);
    assert!(!out.contains("ALLOCATED"), "{out}");
    assert!(err.contains("`max_memory` bound"), "{err}");
    // Under the bound, the same workload runs.
    let (code, out, err) = run(
        tmp.path(),
        &[
            "--spec",
            spec.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            "x=b'1'*(16<<20)\nprint('fits')",
        ],
    );
    assert_eq!((code, out.as_str()), (0, "fits\n"), "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// The CLI bound to a scratch TMPDIR: (exit code, stdout, stderr).
type Cli = Box<dyn Fn(&[&str]) -> (i32, String, String)>;

/// A kept sandbox at the `hardened_container` rung in a scratch TMPDIR (kept
/// alive by the returned directory): the CLI bound to it, and its handle.
fn kept(scope: &str, thread: &str) -> (tempfile::TempDir, Cli, String) {
    let tmp = scratch();
    let c = cordon_testkit::cordon!().env("TMPDIR", tmp.path());
    let cordon: Cli = Box::new(move |args: &[&str]| c.run(args));
    let (code, handle, err) = cordon(&[
        "sandbox",
        "up",
        "--scope",
        scope,
        "--thread",
        thread,
        "--min-isolation",
        "hardened_container",
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    (tmp, cordon, handle)
}

/// A kept sandbox's execs after the first are containers in one running
/// runsc sandbox: each has a pid namespace of its own (it is PID 1's
/// child there, and sees no other exec), state in the work dir carries
/// over, and what an exec leaves running is gone when it ends.
#[test]
fn warm_execs_are_namespaces_of_their_own_in_one_runsc_sandbox() {
    if !can_run("gvisor warm execs") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let thread = format!("w{}", std::process::id());
    let (tmp, cordon, handle) = kept("gvisor-warm", &thread);
    for round in 0..3 {
        let (code, out, err) = cordon(&[
            "sandbox",
            "exec",
            &handle,
            "--",
            "/bin/sh",
            "-c",
            "echo $$; ls /proc | grep -c '^[0-9]'; echo x >> rounds; wc -l < rounds; sleep 60 &",
        ]);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        // The first exec is a runsc sandbox of its own (the command its
        // PID 1); in the pod, PID 1 of the exec's namespace is cordon's
        // helper and the command its child (as at the container rung).
        let pid = if round == 0 { "1" } else { "2" };
        assert_eq!(
            lines[0], pid,
            "round {round}: the exec is not where it should be in its own namespace: {out}"
        );
        // PID 1, itself and `ls` (and `grep`): nothing of the earlier rounds.
        let seen: u32 = lines[1].parse().unwrap();
        assert!(seen <= 4, "an exec sees {seen} processes: {out}");
        assert_eq!(lines[2], (round + 1).to_string(), "{out}");
    }
    let (code, _, err) = cordon(&[
        "sandbox",
        "down",
        "--scope",
        "gvisor-warm",
        "--thread",
        &thread,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// An exec in the pod (`runsc exec` of cordon's helper) killed at its wall
/// clock is reported as that bound, and takes everything it started with
/// it — a `setsid` daemon and a background child among them — while the
/// pod's own helper stays and serves the next exec.
#[test]
fn a_warm_exec_killed_at_its_wall_clock_takes_what_it_started_with_it() {
    if !can_run("gvisor warm exec timeout") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let thread = format!("t{}", std::process::id());
    let (tmp, cordon, handle) = kept("gvisor-kill", &thread);
    // The first exec is a runsc sandbox of its own; the pod starts here.
    for _ in 0..2 {
        let (code, _, err) = cordon(&["sandbox", "exec", &handle, "--", "/bin/true"]);
        assert_eq!(code, 0, "{err}");
    }
    // This sandbox's pod, by the thread its annotations carry.
    let listed = Command::new("runsc")
        .args(["--root", STATE_ROOT, "list", "--format=json"])
        .output()
        .expect("runsc list");
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let pod = listed
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["annotations"]["dev.cordon.thread"] == thread.as_str())
        .and_then(|c| c["id"].as_str())
        .unwrap_or_else(|| panic!("no pod of this sandbox in runsc's listing: {listed}"))
        .to_string();
    let ps = |pod: &str| {
        let out = Command::new("runsc")
            .args(["--root", STATE_ROOT, "ps", pod])
            .output()
            .expect("runsc ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        ps(&pod).iter().any(|l| l.contains("podexec")),
        "the pod does not run cordon's helper: {:?}",
        ps(&pod)
    );
    let started = std::time::Instant::now();
    let (code, _, err) = cordon(&[
        "sandbox",
        "exec",
        "--timeout",
        "2",
        &handle,
        "--",
        "/bin/sh",
        "-c",
        "setsid /bin/sleep 300 & /bin/sleep 301 & /bin/sleep 302",
    ]);
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("`max_wall_seconds` bound"), "{err}");
    assert!(started.elapsed().as_secs() < 20, "{err}");
    // Only the pod's helper is left (the kill ends the exec's namespace;
    // give the sentry a moment to reap it).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = ps(&pod);
        if left.len() == 1 && left[0].contains("podexec") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed exec left processes in the pod: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out, err) = cordon(&["sandbox", "exec", &handle, "--", "/bin/echo", "next"]);
    assert_eq!((code, out.trim()), (0, "next"), "{err}");
    let (code, _, err) = cordon(&[
        "sandbox",
        "down",
        "--scope",
        "gvisor-kill",
        "--thread",
        &thread,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// A kept sandbox's runsc sandbox that ends — killed at the memory bound
/// by a warm exec, or killed from outside — is replaced at the next exec,
/// over the same work dir.
#[test]
fn a_warm_sandbox_survives_the_end_of_its_runsc_sandbox() {
    if !can_run("gvisor pod restart") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let spec = tmp.path().join("spec.yaml");
    std::fs::write(
        &spec,
        "kind: run\nimage: host\nresources: {memory: 96MiB}\n",
    )
    .unwrap();
    let cordon = {
        let c = cordon_testkit::cordon!().env("TMPDIR", tmp.path());
        move |args: &[&str]| c.run(args)
    };
    let thread = format!("r{}", std::process::id());
    let (code, handle, err) = cordon(&[
        "sandbox",
        "up",
        "--scope",
        "gvisor-restart",
        "--thread",
        &thread,
        "--min-isolation",
        "hardened_container",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    let exec = |script: &str| cordon(&["sandbox", "exec", &handle, "--", "/bin/sh", "-c", script]);
    assert_eq!(exec("echo one > f").0, 0);
    assert_eq!(exec("echo two >> f").0, 0); // in the pod
                                            // Killed at the memory bound inside the pod: reported so.
    let (code, out, err) = cordon(&[
        "sandbox",
        "exec",
        &handle,
        "--",
        "python3",
        "-c",
        "x=[]\nfor i in range(64): x.append(b'1'*(8<<20))\nprint('ALLOCATED')",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("ALLOCATED"), "{out}");
    assert!(err.contains("`max_memory` bound"), "{err}");
    let (code, out, err) = exec("cat f");
    assert_eq!((code, out.as_str()), (0, "one\ntwo\n"), "{err}");
    // Its runsc sandbox killed from outside: the next exec gets another.
    let dirs = leftovers(tmp.path());
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let pods: Vec<String> = runsc_containers()
        .into_iter()
        .filter(|c| c.starts_with(&format!("{}-p", dirs[0])))
        .collect();
    assert_eq!(pods.len(), 1, "{pods:?}");
    let state = Command::new("runsc")
        .args(["--root", STATE_ROOT, "state", &pods[0]])
        .output()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, out, err) = exec("cat f");
    assert_eq!((code, out.as_str()), (0, "one\ntwo\n"), "{err}");
    let (code, _, err) = cordon(&[
        "sandbox",
        "down",
        "--scope",
        "gvisor-restart",
        "--thread",
        &thread,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    assert!(
        !runsc_containers().iter().any(|c| c.starts_with(&dirs[0])),
        "a container of the sandbox is left"
    );
}

/// An image of cordon's store runs: its directories are bound from the
/// store as the policy's plan grants (a directory the plan does not reach,
/// like the image's `/root`, is empty), `/etc` is cordon's own, the first
/// exec and a warm one (a container in the sandbox's pod, whose pause
/// container is cordon's) both run the image's programs; a name the store
/// lacks is refused with the store's message; nothing is left behind.
#[test]
fn an_image_from_cordons_store_runs_as_the_plan_grants() {
    if !can_run("gvisor stored image") {
        return;
    }
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let root = tmp.path().join("mini-root");
    let made = Command::new("/bin/sh")
        .arg("-c")
        .arg(
            r#"set -e; R="$1"; mkdir -p "$R/usr/bin" "$R/usr/lib" "$R/usr/lib64" "$R/etc" "$R/root"
            ln -s usr/bin "$R/bin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"
            for b in dash cat id; do cp /usr/bin/$b "$R/usr/bin/"
              for l in $(ldd /usr/bin/$b | grep -o '/[^ ]*'); do
                d="$R/usr$(dirname "${l#/usr}")"; mkdir -p "$d"; cp -L "$l" "$d/"; done; done
            ln -s dash "$R/usr/bin/sh"; echo mini > "$R/usr/lib/marker"; echo secret > "$R/root/secret"
            echo image-passwd > "$R/etc/passwd""#,
        )
        .arg("sh")
        .arg(&root)
        .status()
        .unwrap();
    assert!(made.success());
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let state = tmp.path().join("state");
    let cordon = {
        let c = cordon_testkit::cordon!()
            .env("CORDON_IMAGE_STORE", &store)
            .env("CORDON_STATE_DIR", &state)
            .env("TMPDIR", tmp.path());
        move |args: &[&str]| c.run(args)
    };
    let (code, _, err) = cordon(&["image", "import", "mini", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let spec = tmp.path().join("mini.yaml");
    std::fs::write(&spec, "kind: run\nimage: mini\n").unwrap();
    let script =
        "cat /usr/lib/marker; id -u; cat /root/secret 2>/dev/null || echo unseen; cat /etc/passwd";
    let check = |out: &str| {
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 3, "{out}");
        assert_eq!(lines[0], "mini");
        assert_ne!(lines[1], "0");
        assert_eq!(lines[2], "unseen");
        // cordon's own `/etc/passwd`, never the image's.
        assert!(!out.contains("image-passwd"), "{out}");
        assert!(lines[3..].iter().any(|l| l.starts_with("cordon:")), "{out}");
    };
    let (code, out, err) = cordon(&[
        "run",
        "--min-isolation",
        "hardened_container",
        "--spec",
        spec.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("running on the `gvisor` backend"), "{err}");
    check(&out);
    // A kept sandbox: the second exec is a container in the pod.
    let (code, out, err) = cordon(&[
        "sandbox",
        "up",
        "--scope",
        "img",
        "--thread",
        "t",
        "--min-isolation",
        "hardened_container",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "up: {err}");
    let handle = out.trim().to_string();
    for _ in 0..2 {
        let (code, out, err) = cordon(&["sandbox", "exec", &handle, "--", "/bin/sh", "-c", script]);
        assert_eq!(code, 0, "exec: {err}");
        check(&out);
    }
    let (code, _, err) = cordon(&["sandbox", "down", &handle]);
    assert_eq!(code, 0, "down: {err}");
    std::fs::write(&spec, "kind: run\nimage: absent\n").unwrap();
    let (code, _, err) = cordon(&[
        "run",
        "--min-isolation",
        "hardened_container",
        "--spec",
        spec.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("absent"), "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// What gvisor sandboxes made with `tmp` as their TMPDIR leave: their
/// directories; and, of every sandbox whose directory was ever seen here
/// (its name, kept in `seen`), a mount, a container under cordon's runsc
/// root, a cgroup, a runsc process.
fn residue(tmp: &Path, seen: &RefCell<BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for d in leftovers(tmp) {
        out.push(format!("dir {d}"));
        seen.borrow_mut().insert(d);
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let containers = runsc_containers();
    let ps = cordon_testkit::process_args().join("\n");
    for name in seen.borrow().iter() {
        if mounts.contains(name.as_str()) {
            out.push(format!("a mount of {name}"));
        }
        for c in containers.iter().filter(|c| c.starts_with(name.as_str())) {
            out.push(format!("container {c}"));
        }
        for root in [
            "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/cpuacct",
            "/sys/fs/cgroup/pids",
        ] {
            let walk = Command::new("find")
                .args([root, "-maxdepth", "3", "-type", "d", "-name"])
                .arg(format!("{name}*"))
                .output()
                .unwrap();
            out.extend(
                String::from_utf8_lossy(&walk.stdout)
                    .lines()
                    .map(|c| format!("cgroup {c}")),
            );
        }
        if ps.contains(name.as_str()) {
            out.push(format!("a process of {name}"));
        }
    }
    out
}

/// The backend suite (`cordon_testkit::suite`) against `gvisor`: a kept
/// sandbox, the conformance kit (files out over an operator's work dir,
/// as the kit gives one) and the escape kit with and without a route,
/// and up/exec/down cycles of up, two execs (the second starts the
/// sandbox's runsc sandbox, its pod), down, `CORDON_GVISOR_CYCLES` times
/// (default 3; `.ci/run` sets more).
#[test]
fn the_backend_suite_passes() {
    if !can_run("gvisor backend suite") {
        return;
    }
    let _alone = KITS_ALONE.write().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let seen = RefCell::new(BTreeSet::new());
    cordon_testkit::suite::run_all(&Backend {
        name: "gvisor",
        cordon: cordon_testkit::cordon!()
            .env("TMPDIR", tmp.path())
            .env("CORDON_STATE_DIR", tmp.path().join("state")),
        args: vec!["--min-isolation".into(), "hardened_container".into()],
        image: "host",
        scratch: tmp.path().to_path_buf(),
        secrets: true,
        execs_per_cycle: 2,
        cycles: ("CORDON_GVISOR_CYCLES", 3),
        conformance_cases: None,
        ports: true,
        settle: Duration::ZERO,
        residue: Box::new(|| residue(tmp.path(), &seen)),
    });
}

/// `sandbox pause` at the gvisor backend: runsc pauses each runsc sandbox
/// of it (the first exec's own and the pod); `resume` and an `exec` thaw
/// them; a paused sandbox goes at `down` and leaves nothing.
#[test]
fn a_kept_sandbox_pauses_and_resumes_through_runsc() {
    let _shared = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    if !can_run("gvisor pause") {
        return;
    }
    let tmp = scratch();
    let state = tmp.path().join("state");
    let c = cordon_testkit::cordon!()
        .env("TMPDIR", tmp.path())
        .env("CORDON_STATE_DIR", &state);
    let (code, handle, err) = c.run([
        "sandbox",
        "up",
        "--scope",
        "gvisor-pause",
        "--thread",
        "p",
        "--min-isolation",
        "hardened_container",
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    let rec = cordon_host::state::StateDir::open(&state)
        .unwrap()
        .read(&handle)
        .unwrap()
        .expect("the sandbox's record");
    let work = rec
        .host_work_dir
        .as_ref()
        .expect("a host work dir")
        .host
        .clone();
    let busy = cordon_testkit::pause::BusyLoop::start(&c, &handle, &work);
    cordon_testkit::pause::pause_resume_and_an_exec_thaw(&c, &handle, &busy);
    let (code, _, err) = c.run(["sandbox", "down", &handle]);
    assert_eq!(code, 0, "down of a paused sandbox: {err}");
    busy.reap();
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    // Every runsc container of it begins with the prefix its residue
    // records (another test's beside it do not).
    let prefix = rec.residue["containers"]
        .as_str()
        .expect("a prefix")
        .to_string();
    assert!(!prefix.is_empty());
    let left: Vec<String> = runsc_containers()
        .into_iter()
        .filter(|c| c.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "runsc containers left: {left:?}");
}

/// A workspace at gVisor: the gofer serves the copy-on-write work dir; the
/// shared case (`cordon_testkit::workspace`) holds diff and apply.
#[test]
fn the_workspace_case_passes_at_gvisor() {
    let _shared = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    if !can_run("gvisor workspace") {
        return;
    }
    let tmp = scratch();
    let c = cordon_testkit::cordon!()
        .env("TMPDIR", tmp.path())
        .env("CORDON_STATE_DIR", tmp.path().join("state"));
    cordon_testkit::workspace::diff_then_apply(
        &c,
        &[
            "--scope",
            "gvisor-ws",
            "--thread",
            "w",
            "--min-isolation",
            "hardened_container",
        ],
    );
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// Snapshots at gVisor: the shared case (`cordon_testkit::snapshot`).
#[test]
fn the_snapshot_case_passes_at_gvisor() {
    let _shared = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    if !can_run("gvisor snapshot") {
        return;
    }
    let tmp = scratch();
    let c = cordon_testkit::cordon!()
        .env("TMPDIR", tmp.path())
        .env("CORDON_STATE_DIR", tmp.path().join("state"))
        .env("CORDON_SNAPSHOT_DIR", tmp.path().join("snapshots"));
    cordon_testkit::snapshot::restore_and_fork(
        &c,
        "gvisor-snap",
        &["--min-isolation", "hardened_container"],
        true,
        false,
    );
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// `snapshot --memory` at gVisor: a Python process's in-memory counter
/// (written to a file every 50 ms) is saved with its memory; in the
/// source it ends (its exec answers so), and in each sandbox made from
/// the snapshot it goes on from where it stood — not from 1, which a
/// process started again would count from. The sandbox must be made for
/// it (`--require snapshot_memory`); one with an egress route refuses.
#[test]
fn a_processs_memory_goes_on_after_a_memory_snapshot_is_restored() {
    let _shared = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    if !can_run("gvisor memory snapshot") {
        return;
    }
    let tmp = scratch();
    let c = cordon_testkit::cordon!()
        .env("TMPDIR", tmp.path())
        .env("CORDON_STATE_DIR", tmp.path().join("state"))
        .env("CORDON_SNAPSHOT_DIR", tmp.path().join("snapshots"));
    let ok = |args: &[&str]| {
        let (code, out, err) = c.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.trim().to_string()
    };
    let count = |h: &str| -> u64 {
        ok(&["sandbox", "exec", h, "--", "cat", "count"])
            .parse()
            .unwrap()
    };
    let up = |thread: &str, extra: &[&str]| {
        let mut args = vec![
            "sandbox",
            "up",
            "--scope",
            "mem",
            "--thread",
            thread,
            "--min-isolation",
            "hardened_container",
            "-q",
        ];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let src = up("src", &["--require", "snapshot_memory"]);
    let counter = "import time\ni = 0\nwhile True:\n    i += 1\n    open('count.tmp', 'w').write(str(i))\n    __import__('os').rename('count.tmp', 'count')\n    time.sleep(0.05)\n";
    let exec = {
        let c = c.clone();
        let src = src.clone();
        let counter = counter.to_string();
        std::thread::spawn(move || {
            c.run([
                "sandbox",
                "exec",
                &src,
                "--timeout",
                "120",
                "--",
                "python3",
                "-c",
                &counter,
            ])
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c
        .run(["sandbox", "exec", &src, "--", "test", "-e", "count"])
        .0
        != 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the counter never wrote"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let snap = ok(&["sandbox", "snapshot", &src, "--memory", "--name", "live"]);
    assert!(snap.starts_with("snap-"), "{snap}");
    let (code, _, err) = exec.join().unwrap();
    assert_ne!(code, 0, "the saved exec claimed an exit of its own: {err}");
    assert!(err.contains("were saved into a snapshot"), "{err}");
    let at_snapshot = count(&src);
    assert!(at_snapshot >= 10, "the counter stood at {at_snapshot}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        count(&src),
        at_snapshot,
        "the saved process ran on in the source"
    );

    // Two sandboxes from it: each counts on from where it stood.
    let a = up("a", &["--from", "live"]);
    let b = up("b", &["--from", "live"]);
    std::thread::sleep(Duration::from_millis(1000));
    for h in [&a, &b] {
        let first = count(h);
        assert!(first > at_snapshot, "{h}: {first} after {at_snapshot}");
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            count(h) > first,
            "{h}: the restored counter stopped at {first}"
        );
    }
    let json = ok(&["sandbox", "snapshots", "--format", "json"]);
    assert!(json.contains("\"processes\":1"), "{json}");

    // Not made for it: refused with the reason, nothing ended.
    let plain = up("plain", &[]);
    let (code, _, err) = c.run(["sandbox", "snapshot", &plain, "--memory"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("requires: [snapshot_memory]"), "{err}");
    for h in [&src, &a, &b, &plain] {
        ok(&["sandbox", "down", h]);
    }
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    // Nor a process: no runsc sandbox, restored or not, nor its gofer
    // (their arguments name their logs in this test's directory).
    let tag = tmp.path().display().to_string();
    let running = || {
        cordon_testkit::process_args()
            .into_iter()
            .filter(|l| l.contains(&tag))
            .collect::<Vec<_>>()
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !running().is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(running(), Vec::<String>::new(), "left running");
}
