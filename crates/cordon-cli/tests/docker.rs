//! The `docker` backend through the real binary and a real Docker Engine
//! (Debian's `dockerd`, started by each test with a private data root and
//! socket, see `cordon_testkit::dockerd`): `cordon run --backend docker
//! --min-isolation container` works, output and exit codes come back, the
//! workload is not root, has no network, writes only its work dir and
//! `/tmp`, cannot run what the policy denies, is held to its wall, CPU and
//! memory bounds; the conformance and escape kits pass whole; a kept
//! sandbox works and is reclaimed when its keeper dies; and nothing is
//! left on the engine or the host. Without root or `dockerd` these skip
//! loudly; `CI=true` makes that a failure.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cordon_testkit::dockerd::Dockerd;
use cordon_testkit::suite::Backend;

/// The escape kit's `mount` case compares the host's mount table before
/// and after; every other test here starts containers (whose root
/// filesystems the engine mounts in the host's namespace) and volumes.
/// The kits run alone (write), the rest beside each other (read).
static KITS_ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn scratch() -> tempfile::TempDir {
    cordon_testkit::scratch("docker-test-")
}

/// `cordon ARGS` pointed at `engine`, with `tmp` as TMPDIR and its state
/// directory.
fn cordon(engine: &Dockerd, tmp: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_at(&engine.host(), tmp, args)
}

/// `cordon ARGS` pointed at the engines `hosts` (`CORDON_DOCKER_HOST`).
fn cordon_at(hosts: &str, tmp: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_for(hosts, tmp).run(args)
}

/// The `cordon` of [`cordon_at`].
fn cordon_for(hosts: &str, tmp: &Path) -> cordon_testkit::Cordon {
    cordon_testkit::cordon!()
        .env("CORDON_DOCKER_HOST", hosts)
        .env("TMPDIR", tmp)
        .env("CORDON_STATE_DIR", tmp.join("state"))
}

fn run(engine: &Dockerd, tmp: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["run", "--backend", "docker", "--min-isolation", "container"];
    all.extend_from_slice(args);
    cordon(engine, tmp, &all)
}

fn sh(engine: &Dockerd, tmp: &Path, script: &str) -> (i32, String, String) {
    run(engine, tmp, &["--", "/bin/sh", "-c", script])
}

/// What a sandbox could leave on the host: its directories in TMPDIR,
/// mounts of them, and (on the engine) containers of cordon's.
fn leftovers(engine: &Dockerd, tmp: &Path) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter_map(|n| {
            if n.starts_with("cordon-docker-") {
                Some(format!("dir {n}"))
            } else if n.starts_with(".cordon-volume-") {
                Some(format!("volume {n}"))
            } else {
                None
            }
        })
        .collect();
    let tag = tmp.display().to_string();
    left.extend(
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&tag))
            .map(|m| format!("mount {m}")),
    );
    left.extend(
        engine
            .containers()
            .into_iter()
            .filter(|(_, labels)| labels["dev.cordon.owner"] == "cordon")
            // The record that the probe's trivial container ran stays.
            .filter(|(_, labels)| labels["dev.cordon.role"] != "probed")
            .map(|(name, _)| format!("container {name}")),
    );
    left.extend(loop_devices_of(tmp));
    left
}

/// Loop devices whose backing file was in `tmp` (a volume's image, unlinked
/// once attached: the kernel still names it).
fn loop_devices_of(tmp: &Path) -> Vec<String> {
    let tag = tmp.display().to_string();
    std::fs::read_dir("/sys/block")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("loop"))
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("loop/backing_file"))
                        .is_ok_and(|f| f.starts_with(&tag))
                })
                .map(|e| format!("loop device {}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_command_runs_confined_and_leaves_nothing() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker run") else {
        return;
    };
    let tmp = scratch();
    let (code, out, err) = sh(&engine, tmp.path(), "id; echo hi");
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("hi\n"), "{out}");
    assert!(err.contains("running on the `docker` backend"), "{err}");
    // Not root.
    let (code, out, err) = sh(&engine, tmp.path(), "id -u; id -g");
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().all(|i| i != "0"), "runs as root: {out}");
    // Exit codes and both streams come back; stdin goes in.
    let (code, out, err) = sh(&engine, tmp.path(), "echo out; echo err >&2; exit 7");
    assert_eq!((code, out.as_str()), (7, "out\n"));
    assert!(err.contains("err\n"), "{err}");
    let out = cordon_testkit::cordon!()
        .env("CORDON_DOCKER_HOST", engine.host())
        .env("TMPDIR", tmp.path())
        .command(["run", "--backend", "docker", "--min-isolation", "container"])
        .args(["--", "/bin/cat"])
        .stdin(std::fs::File::open("/etc/hostname").unwrap())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string("/etc/hostname").unwrap()
    );
    // No network: the loopback only, and the host's loopback unreached.
    let (code, out, err) = sh(&engine, tmp.path(), "cat /proc/net/dev");
    assert_eq!(code, 0, "{err}");
    let ifaces: Vec<&str> = out
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "{out}");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (code, out, err) = run(
        &engine,
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
    // Only the work dir and /tmp are writable, and neither runs programs.
    let (code, out, err) = sh(
        &engine,
        tmp.path(),
        "pwd; echo a > f && cat f; echo b > /tmp/t && cat /tmp/t; \
         for p in /usr/x /x /etc/x /bin/x /etc/passwd; do if touch $p 2>/dev/null; then echo WROTE $p; fi; done",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/workspace\na\nb\n");
    let (code, out, _) = sh(
        &engine,
        tmp.path(),
        "cp /bin/true ./t; ./t; echo work=$?; cp /bin/true /tmp/t; /tmp/t; echo tmp=$?",
    );
    assert_eq!((code, out.as_str()), (0, "work=126\ntmp=126\n"));
    // What the policy denies is refused before it starts, and masked.
    let (code, out, err) = run(&engine, tmp.path(), &["--", "/usr/bin/su", "-c", "id"]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("the policy refuses `/usr/bin/su`"), "{err}");
    let (code, out, err) = sh(&engine, tmp.path(), "/usr/bin/su -c id; echo rc=$?");
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("rc=126"), "{out} {err}");
    // Nothing of the host's `/sys` (its devices, other sandboxes' loop
    // devices), as at the native container rung.
    let (code, out, _) = sh(
        &engine,
        tmp.path(),
        "ls -A /sys; ls /sys/block /sys/fs/cgroup 2>&1 | head -1",
    );
    assert_eq!(code, 0);
    assert!(out.contains("No such file or directory"), "{out}");
    assert!(!out.contains("loop"), "{out}");
    // No capability, no new privileges.
    let (code, out, _) = sh(
        &engine,
        tmp.path(),
        "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
    );
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"
    );
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

#[test]
fn wall_cpu_and_memory_bounds_kill_and_are_reported() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker bounds") else {
        return;
    };
    let tmp = scratch();
    let spec = |name: &str, resources: &str| {
        let p = tmp.path().join(name);
        std::fs::write(
            &p,
            format!("kind: run\nimage: host\nresources: {resources}\n"),
        )
        .unwrap();
        p.display().to_string()
    };
    let wall = spec("wall.yaml", "{wall_seconds: 2}");
    let started = std::time::Instant::now();
    let (code, _, err) = run(
        &engine,
        tmp.path(),
        &["--spec", &wall, "--", "/bin/sleep", "30"],
    );
    assert_ne!(code, 0);
    assert!(started.elapsed().as_secs() < 20, "{err}");
    assert!(err.contains("`max_wall_seconds` bound"), "{err}");
    let cpu = spec("cpu.yaml", "{cpu_seconds: 1, wall_seconds: 30}");
    let started = std::time::Instant::now();
    let (code, _, err) = run(
        &engine,
        tmp.path(),
        &["--spec", &cpu, "--", "/bin/sh", "-c", "while :; do :; done"],
    );
    assert_ne!(code, 0);
    assert!(started.elapsed().as_secs() < 20, "{err}");
    assert!(err.contains("`max_cpu_seconds` bound"), "{err}");
    let mem = spec("mem.yaml", "{memory: 64MiB, wall_seconds: 30}");
    let (code, _, err) = run(
        &engine,
        tmp.path(),
        &[
            "--spec",
            &mem,
            "--",
            "python3",
            "-c",
            "b = bytearray(512 << 20); print(len(b))",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("`max_memory` bound"), "{err}");
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

#[test]
fn a_kept_sandbox_works_and_gc_reclaims_one_whose_keeper_died() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker kept") else {
        return;
    };
    let tmp = scratch();
    let up = |thread: &str| {
        let (code, handle, err) = cordon(
            &engine,
            tmp.path(),
            &[
                "sandbox",
                "up",
                "--scope",
                "docker-test",
                "--thread",
                thread,
                "--backend",
                "docker",
                "--min-isolation",
                "container",
            ],
        );
        assert_eq!(code, 0, "{err}");
        handle.trim().to_string()
    };
    let handle = up("a");
    let (code, _, err) = cordon(
        &engine,
        tmp.path(),
        &[
            "sandbox",
            "exec",
            &handle,
            "--",
            "/bin/sh",
            "-c",
            "echo kept > k",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cordon(
        &engine,
        tmp.path(),
        &["sandbox", "exec", &handle, "--", "/bin/cat", "k"],
    );
    assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
    // Its anchor is on the engine, labelled with its scope and thread.
    let anchors: Vec<serde_json::Value> = engine
        .containers()
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| l["dev.cordon.role"] == "anchor")
        .collect();
    assert_eq!(anchors.len(), 1, "{anchors:?}");
    assert_eq!(anchors[0]["dev.cordon.scope"], "docker-test");
    assert_eq!(anchors[0]["dev.cordon.thread"], "a");
    let (code, _, err) = cordon(&engine, tmp.path(), &["sandbox", "down", &handle]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());

    // A keeper killed: gc reclaims its directory, volume and containers.
    let handle = up("b");
    let (code, _, err) = cordon(
        &engine,
        tmp.path(),
        &["sandbox", "exec", &handle, "--", "/bin/true"],
    );
    assert_eq!(code, 0, "{err}");
    let dirs: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cordon-docker-"))
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let keeper: u32 = dirs[0].split('-').nth(2).unwrap().parse().unwrap();
    assert!(Command::new("kill")
        .args(["-9", &keeper.to_string()])
        .status()
        .unwrap()
        .success());
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{keeper}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, _, err) = cordon(&engine, tmp.path(), &["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        leftovers(&engine, tmp.path()),
        Vec::<String>::new(),
        "{err}"
    );
}

/// A kept sandbox's execs after the first run in one warm container (its
/// pod), each through cordon's helper: a pid, mount, IPC and network
/// namespace of its own (it is PID 1's child there and sees no other
/// exec's processes), state in the work dir carries over, and what an exec
/// leaves running is gone when it ends. An exec killed at its wall clock
/// is reported as that bound and takes what it started with it (a `setsid`
/// daemon and a background child), and the pod serves the next exec.
#[test]
fn warm_execs_are_namespaces_of_their_own_in_one_pod_and_nothing_outlives_them() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker warm execs") else {
        return;
    };
    let tmp = scratch();
    let c = |args: &[&str]| cordon(&engine, tmp.path(), args);
    let (code, handle, err) = c(&[
        "sandbox",
        "up",
        "--scope",
        "docker-warm",
        "--thread",
        "w",
        "--backend",
        "docker",
        "--min-isolation",
        "container",
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    let mut namespaces = Vec::new();
    for round in 0..3 {
        let (code, out, err) = c(&[
            "sandbox",
            "exec",
            &handle,
            "--",
            "/bin/sh",
            "-c",
            "echo $$; ls /proc | grep -c '^[0-9]'; echo x >> rounds; wc -l < rounds; \
             readlink /proc/self/ns/net /proc/self/ns/ipc | tr '\\n' ' '; echo; sleep 60 &",
        ]);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        // The first exec is a container of its own (the command its PID
        // 1); in the pod, PID 1 of the exec's namespace is cordon's helper.
        let pid = if round == 0 { "1" } else { "2" };
        assert_eq!(lines[0], pid, "round {round}: {out}");
        let seen: u32 = lines[1].parse().unwrap();
        assert!(
            seen <= 4,
            "round {round}: an exec sees {seen} processes: {out}"
        );
        assert_eq!(lines[2], (round + 1).to_string(), "{out}");
        namespaces.push(lines[3].to_string());
    }
    let pods: Vec<String> = engine
        .containers()
        .into_iter()
        .filter(|(_, l)| l["dev.cordon.role"] == "pod")
        .map(|(name, _)| name.trim_start_matches('/').to_string())
        .collect();
    assert_eq!(pods.len(), 1, "one pod per sandbox: {pods:?}");
    // The pod's own namespaces (its helper's, read on the host) are not
    // an exec's: each exec in it had a network and IPC namespace of its
    // own. (Two execs one after the other may be given the same numbers:
    // the kernel reuses a freed namespace's.)
    let inspected: serde_json::Value = engine
        .get(&format!("/containers/{}/json", pods[0]))
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let pod_pid = inspected["State"]["Pid"].as_i64().unwrap_or(0);
    assert!(pod_pid > 0, "the pod is not running: {inspected}");
    let pod_ns: String = ["net", "ipc"]
        .iter()
        .map(|n| {
            let link = std::fs::read_link(format!("/proc/{pod_pid}/ns/{n}")).unwrap();
            format!("{} ", link.display())
        })
        .collect();
    for (round, ns) in namespaces.iter().enumerate().skip(1) {
        for (theirs, ours) in pod_ns.split_whitespace().zip(ns.split_whitespace()) {
            assert_ne!(
                theirs, ours,
                "round {round}: the exec shares the pod's namespace ({pod_ns} / {ns})"
            );
        }
    }
    let top = |id: &str| -> Vec<String> {
        let listed: serde_json::Value = engine
            .get(&format!("/containers/{id}/top"))
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        listed["Processes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string())
            .collect()
    };
    // Nothing of the three execs is left in the pod: its helper only.
    let only_pause = |id: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = top(id);
            if left.len() == 1 && left[0].contains("podexec pause") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pod holds what execs left: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    only_pause(&pods[0]);
    let started = std::time::Instant::now();
    let (code, _, err) = c(&[
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
    only_pause(&pods[0]);
    let (code, out, err) = c(&["sandbox", "exec", &handle, "--", "/bin/cat", "rounds"]);
    assert_eq!((code, out.lines().count()), (0, 3), "{err}");
    let (code, _, err) = c(&["sandbox", "down", &handle]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

/// The backend suite (`cordon_testkit::suite`) against `docker`, on an
/// engine of its own: a kept sandbox, the conformance and escape kits
/// whole (with and without a route), and up/exec/down cycles, run `CORDON_DOCKER_CYCLES`
/// times (default 5; CI sets more), nothing accumulating on the engine or
/// the host.
#[test]
fn the_backend_suite_passes() {
    let _alone = KITS_ALONE.write().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker backend suite") else {
        return;
    };
    let tmp = scratch();
    cordon_testkit::suite::run_all(&Backend {
        name: "docker",
        cordon: cordon_for(&engine.host(), tmp.path()),
        args: ["--backend", "docker", "--min-isolation", "container"]
            .map(String::from)
            .to_vec(),
        image: "host",
        scratch: tmp.path().to_path_buf(),
        secrets: true,
        execs_per_cycle: 1,
        cycles: ("CORDON_DOCKER_CYCLES", 5),
        conformance_cases: None,
        ports: true,
        settle: Duration::ZERO,
        residue: Box::new(|| leftovers(&engine, tmp.path())),
    });
}

#[test]
fn doctor_reports_the_engine_and_a_missing_one_is_refused_with_the_fix() {
    let tmp = scratch();
    let (code, _, err) = cordon_testkit::cordon!()
        .env(
            "CORDON_DOCKER_HOST",
            format!("unix://{}/none.sock", tmp.path().display()),
        )
        .env("TMPDIR", tmp.path())
        .run([
            "run",
            "--backend",
            "docker",
            "--min-isolation",
            "container",
            "--",
            "/bin/true",
        ]);
    assert_ne!(code, 0);
    assert!(err.contains("no Docker Engine socket"), "{err}");
    assert!(err.contains("CORDON_DOCKER_HOST"), "{err}");
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker doctor") else {
        return;
    };
    let (_, out, _) = cordon(
        &engine,
        tmp.path(),
        &["doctor", "--min-isolation", "container"],
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("docker "))
        .unwrap_or_else(|| panic!("no docker row:\n{out}"));
    assert!(row.contains("can run"), "{row}");
    assert!(row.contains("API 1.4"), "{row}");
    assert!(row.contains("a trivial container ran"), "{row}");
    // An engine that would not see cordon's mounts (another mount
    // namespace) is refused: it would bind the directories beneath them.
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "--"])
        .arg(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "run",
            "--backend",
            "docker",
            "--min-isolation",
            "container",
            "--",
            "/bin/true",
        ])
        .env("CORDON_DOCKER_HOST", engine.host())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("another mount namespace"), "{err}");
    // Recorded on the engine: the next process asks instead of running it.
    let (_, out, _) = cordon(
        &engine,
        tmp.path(),
        &["doctor", "--min-isolation", "container"],
    );
    let row = out.lines().find(|l| l.starts_with("docker ")).unwrap();
    assert!(row.contains("recorded as `cordon-docker-probed-"), "{row}");
}

/// An image of cordon's store runs: its directories are bound from the
/// store as the policy's plan grants (so a directory the plan does not
/// reach, like the image's `/root`, is empty), and a name the store lacks
/// is refused with the fix.
#[test]
fn an_image_from_cordons_store_runs_as_the_plan_grants() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker stored image") else {
        return;
    };
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
            ln -s dash "$R/usr/bin/sh"; echo mini > "$R/usr/lib/marker"; echo secret > "$R/root/secret""#,
        )
        .arg("sh")
        .arg(&root)
        .status()
        .unwrap();
    assert!(made.success());
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let cordon_store = {
        let c = cordon_testkit::cordon!()
            .env("CORDON_DOCKER_HOST", engine.host())
            .env("CORDON_IMAGE_STORE", &store)
            .env("TMPDIR", tmp.path());
        move |args: &[&str]| c.run(args)
    };
    let (code, _, err) = cordon_store(&["image", "import", "mini", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let spec = tmp.path().join("mini.yaml");
    std::fs::write(&spec, "kind: run\nimage: mini\n").unwrap();
    let (code, out, err) = cordon_store(&[
        "run",
        "--backend",
        "docker",
        "--min-isolation",
        "container",
        "--spec",
        spec.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        "cat /usr/lib/marker; id -u; cat /root/secret 2>/dev/null || echo unseen",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "mini");
    assert_ne!(lines[1], "0");
    assert_eq!(lines[2], "unseen");
    std::fs::write(&spec, "kind: run\nimage: absent\n").unwrap();
    let (code, _, err) = cordon_store(&[
        "run",
        "--backend",
        "docker",
        "--min-isolation",
        "container",
        "--spec",
        spec.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("absent"), "{err}");
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

/// A spec that names hosts gets one route out: cordon's egress proxy,
/// listening in the sandbox's network namespace (the anchor's, which every
/// exec joins). A named host is reached through it, another is refused
/// (403), nothing is reached without it, the audit names who asked, and
/// nothing listens inside.
#[test]
fn a_spec_with_an_allowlist_reaches_it_through_the_proxy_and_nothing_else() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker egress") else {
        return;
    };
    let tmp = scratch();
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in upstream.incoming() {
            let Ok(mut s) = s else { continue };
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    let p = tmp.path();
    std::fs::write(
        p.join("policy.yaml"),
        cordon_testkit::policy::loopback_egress("", "", ""),
    )
    .unwrap();
    std::fs::write(p.join("hosts"), "127.0.0.1 ok.test other.test\n").unwrap();
    std::fs::write(
        p.join("spec.yaml"),
        format!("kind: egress-test\nimage: host\negress_allow:\n  - \"ok.test:{port}\"\n"),
    )
    .unwrap();
    std::fs::write(
        p.join("config.yaml"),
        format!(
            "egress:\n  nameservers: []\n  hosts_file: {}\n  audit: {}\n",
            p.join("hosts").display(),
            p.join("audit.jsonl").display()
        ),
    )
    .unwrap();
    let with = |cmd: &[&str]| {
        let mut args = vec![
            "--policy".to_string(),
            p.join("policy.yaml").display().to_string(),
            "--spec".into(),
            p.join("spec.yaml").display().to_string(),
            "--config".into(),
            p.join("config.yaml").display().to_string(),
            "--identity".into(),
            "namespace=team-a".into(),
            "--".into(),
        ];
        args.extend(cmd.iter().map(|s| s.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&engine, p, &argv)
    };
    let ok = format!("http://ok.test:{port}/x");
    let (code, out, err) = with(&["/usr/bin/curl", "-sS", "-f", "--max-time", "10", &ok]);
    assert_eq!((code, out.as_str()), (0, "hello"), "{err}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let other = format!("http://other.test:{port}/x");
    let (code, _, err) = with(&["/usr/bin/curl", "-sS", "-f", "--max-time", "10", &other]);
    assert_eq!(code, 22, "{err}");
    let direct = format!("http://127.0.0.1:{port}/x");
    let (code, _, _) = with(&[
        "/usr/bin/env",
        "-u",
        "http_proxy",
        "-u",
        "HTTP_PROXY",
        "/usr/bin/curl",
        "-sS",
        "--max-time",
        "5",
        &direct,
    ]);
    assert_ne!(code, 0);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Nothing listens inside a sandbox with a route.
    let (code, out, err) = with(&[
        "/usr/bin/python3",
        "-c",
        "import socket\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ntry:\n    s.listen(); print('LISTENING')\nexcept OSError as e: print('refused', e.errno)",
    ]);
    assert_eq!((code, out.as_str()), (0, "refused 1\n"), "{err}");
    let audit = std::fs::read_to_string(p.join("audit.jsonl")).unwrap();
    // The decisions (an allowed request's `end` line, after it, left out).
    let lines: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["verdict"] != "end")
        .collect();
    assert_eq!(lines.len(), 2, "{audit}");
    assert_eq!(lines[0]["verdict"], "allow");
    assert_eq!(lines[1]["verdict"], "deny");
    assert!(lines.iter().all(|l| l["identity"]["namespace"] == "team-a"));
    assert_eq!(leftovers(&engine, p), Vec::<String>::new());
}

/// A `cordon run` killed mid-exec leaves its anchor, its exec's container
/// (still running) and its directory with the volume; `cordon sandbox gc`
/// sweeps them, since their maker is gone.
#[test]
fn gc_sweeps_what_a_killed_run_left() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(engine) = Dockerd::start("docker sweep") else {
        return;
    };
    let tmp = scratch();
    let mut child = cordon_for(&engine.host(), tmp.path())
        .command(["run", "--backend", "docker", "--min-isolation", "container"])
        .args(["--", "/bin/sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until its exec's container runs.
    let started = std::time::Instant::now();
    while !engine
        .containers()
        .iter()
        .any(|(_, l)| l["dev.cordon.role"] == "exec")
    {
        assert!(started.elapsed().as_secs() < 60, "the exec never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !leftovers(&engine, tmp.path()).is_empty(),
        "a killed run left nothing to sweep"
    );
    let (code, _, err) = cordon(&engine, tmp.path(), &["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        leftovers(&engine, tmp.path()),
        Vec::<String>::new(),
        "{err}"
    );
}

/// The sandboxes an engine holds, as its own socket lists them: each
/// anchor's (thread, agent dir), and that its label names this engine.
fn anchors_on(engine: &Dockerd) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = engine
        .containers()
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| l["dev.cordon.role"] == "anchor")
        .map(|l| {
            assert_eq!(l["dev.cordon.engine"], engine.host().as_str(), "{l}");
            (
                l["dev.cordon.thread"].as_str().unwrap().to_string(),
                l["dev.cordon.agent-dir"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    found.sort();
    found
}

fn pair(thread: &str, agent: &str) -> (String, String) {
    (thread.to_string(), agent.to_string())
}

/// Two engines (separate data roots and sockets) behind one
/// `CORDON_DOCKER_HOST`: new sandboxes go to the engine with the fewest,
/// the configured order breaking ties, so four land two on each; one
/// `down --scope` disposes of a thread's sandboxes on both; with one engine
/// gone, `doctor` names it, a new sandbox lands on the other though that
/// one holds more, `down` of a sandbox there (by handle, or its thread's
/// scope) exits 125 naming the engine instead of counting it gone, and
/// `gc` reports it as not swept; restarted on the same data root and
/// socket, `gc` finds and removes what it held.
#[test]
fn sandboxes_are_placed_over_two_engines_and_found_on_each() {
    let _alone = KITS_ALONE.read().unwrap_or_else(|e| e.into_inner());
    let Some(a) = Dockerd::start("docker over two engines (A)") else {
        return;
    };
    let Some(mut b) = Dockerd::start("docker over two engines (B)") else {
        return;
    };
    let tmp = scratch();
    let hosts = format!("{},{}", a.host(), b.host());
    let cordon = |args: &[&str]| cordon_at(&hosts, tmp.path(), args);
    let up = |thread: &str, agent: &str| {
        let (code, handle, err) = cordon(&[
            "sandbox",
            "up",
            "--scope",
            "two",
            "--thread",
            thread,
            "--agent-dir",
            agent,
            "--backend",
            "docker",
            "--min-isolation",
            "container",
        ]);
        assert_eq!(code, 0, "{err}");
        handle.trim().to_string()
    };

    // Placement: A (a tie, the configured order), B, A, B.
    let mut handles = Vec::new();
    for (thread, agent) in [("x", "p"), ("x", "q"), ("y", "p"), ("y", "q")] {
        handles.push(up(thread, agent));
    }
    assert_eq!(anchors_on(&a), [pair("x", "p"), pair("y", "p")]);
    assert_eq!(anchors_on(&b), [pair("x", "q"), pair("y", "q")]);
    // The one on B runs there.
    let (code, out, err) = cordon(&["sandbox", "exec", &handles[1], "--", "/bin/echo", "on b"]);
    assert_eq!((code, out.as_str()), (0, "on b\n"), "{err}");

    // One thread's sandboxes, one on each engine, disposed at once.
    let (code, out, err) = cordon(&["sandbox", "down", "--scope", "two", "--thread", "x"]);
    assert_eq!((code, out.trim()), (0, "disposed 2 sandboxes"), "{err}");
    assert_eq!(anchors_on(&a), [pair("y", "p")]);
    assert_eq!(anchors_on(&b), [pair("y", "q")]);
    // A tie again (A first), then B with the fewer.
    up("w", "p");
    let on_b = up("w", "q");
    assert_eq!(anchors_on(&a), [pair("w", "p"), pair("y", "p")]);
    assert_eq!(anchors_on(&b), [pair("w", "q"), pair("y", "q")]);
    // A tie: A. Now A holds three, B two.
    up("v", "p");

    // B goes away.
    b.stop();
    let (_, out, _) = cordon(&["doctor", "--min-isolation", "container"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("docker "))
        .unwrap_or_else(|| panic!("no docker row:\n{out}"));
    assert!(row.contains("can run"), "{row}");
    assert!(
        row.contains(&format!("engine `{}` does not answer", b.host())),
        "{row}"
    );
    // A new sandbox lands on A, though A holds more: B is skipped.
    up("z", "p");
    assert_eq!(
        anchors_on(&a),
        [
            pair("v", "p"),
            pair("w", "p"),
            pair("y", "p"),
            pair("z", "p")
        ]
    );
    // A sandbox on B, by its handle: reported, not a success.
    let (code, out, err) = cordon(&["sandbox", "down", &on_b]);
    assert_eq!(code, 125, "{out}{err}");
    assert!(
        err.contains(&b.host()) && err.contains("did not answer"),
        "{err}"
    );
    let (code, out, err) = cordon(&["sandbox", "down", "--scope", "two", "--thread", "w"]);
    assert_eq!((code, out.trim()), (0, "disposed 1 sandbox"), "{err}");
    // Thread y has a sandbox on each: A's goes, B's is reported, never
    // counted as disposed in silence.
    let (code, out, err) = cordon(&["sandbox", "down", "--scope", "two", "--thread", "y"]);
    assert_eq!(code, 125, "{out}{err}");
    assert!(err.contains(&b.host()), "{err}");
    assert!(err.contains("did not answer"), "{err}");
    assert_eq!(anchors_on(&a), [pair("v", "p"), pair("z", "p")]);
    // gc says B was not swept.
    let (code, _, err) = cordon(&["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "the docker engine at `{}` was not swept",
            b.host()
        )),
        "{err}"
    );

    // B is back, with the sandbox it held: gc finds and removes it.
    b.restart();
    assert_eq!(anchors_on(&b), [pair("w", "q"), pair("y", "q")]);
    let (code, _, err) = cordon(&["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(anchors_on(&b), Vec::<(String, String)>::new(), "{err}");
    for thread in ["v", "z"] {
        let (code, out, err) = cordon(&["sandbox", "down", "--scope", "two", "--thread", thread]);
        assert_eq!((code, out.trim()), (0, "disposed 1 sandbox"), "{err}");
    }
    assert_eq!(leftovers(&a, tmp.path()), Vec::<String>::new());
    assert_eq!(leftovers(&b, tmp.path()), Vec::<String>::new());
}

/// `sandbox pause` at the docker backend: the engine pauses every
/// container of the sandbox; `resume` and an `exec` thaw them; a paused
/// sandbox goes at `down` and leaves nothing.
#[test]
fn a_kept_sandbox_pauses_and_resumes_through_the_engine() {
    let Some(engine) = Dockerd::start("docker pause") else {
        return;
    };
    let tmp = scratch();
    let c = cordon_for(&engine.host(), tmp.path());
    let (code, handle, err) = c.run([
        "sandbox",
        "up",
        "--scope",
        "docker-pause",
        "--thread",
        "p",
        "--backend",
        "docker",
        "--min-isolation",
        "container",
    ]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_string();
    let rec = cordon_host::state::StateDir::open(&tmp.path().join("state"))
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
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

/// A workspace at Docker: the container binds the copy-on-write work dir;
/// the shared case (`cordon_testkit::workspace`) holds diff and apply.
#[test]
fn the_workspace_case_passes_at_docker() {
    let Some(engine) = Dockerd::start("docker workspace") else {
        return;
    };
    let tmp = scratch();
    let c = cordon_for(&engine.host(), tmp.path());
    cordon_testkit::workspace::diff_then_apply(
        &c,
        &[
            "--scope",
            "docker-ws",
            "--thread",
            "w",
            "--backend",
            "docker",
            "--min-isolation",
            "container",
        ],
    );
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}

/// Snapshots at Docker: the shared case (`cordon_testkit::snapshot`).
#[test]
fn the_snapshot_case_passes_at_docker() {
    let Some(engine) = Dockerd::start("docker snapshot") else {
        return;
    };
    let tmp = scratch();
    let c = cordon_for(&engine.host(), tmp.path())
        .env("CORDON_SNAPSHOT_DIR", tmp.path().join("snapshots"));
    cordon_testkit::snapshot::restore_and_fork(
        &c,
        "docker-snap",
        &["--backend", "docker", "--min-isolation", "container"],
        true,
        false,
    );
    assert_eq!(leftovers(&engine, tmp.path()), Vec::<String>::new());
}
