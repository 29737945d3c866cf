//! `cordon sandbox`: warm sandboxes driven from separate invocations of the
//! real binary — the proof that nothing lives only in one process's memory.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;
use std::process::Command;

use cordon_testkit::can_sandbox;

fn cordon(state: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_env(state, args, &[])
}

/// Runs cordon with `env` added; returns (code, stdout, stderr).
fn cordon_env(state: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", state)
        .run_env(args, env)
}

fn up(state: &Path, scope: &str, thread: &str) -> String {
    let (code, out, err) = cordon(
        state,
        &[
            "sandbox",
            "up",
            "--scope",
            scope,
            "--thread",
            thread,
            "--min-isolation",
            "container",
        ],
    );
    assert_eq!(code, 0, "up: {err}");
    out.trim().to_string()
}

fn cgroups_named(handle_prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for base in [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
    ] {
        fn walk(d: &Path, needle: &str, out: &mut Vec<String>, depth: usize) {
            if depth > 6 {
                return;
            }
            if let Ok(rd) = std::fs::read_dir(d) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if name.contains(needle) {
                            out.push(e.path().display().to_string());
                        }
                        walk(&e.path(), needle, out, depth + 1);
                    }
                }
            }
        }
        walk(Path::new(base), handle_prefix, &mut found, 0);
    }
    found
}

fn record(state: &Path, handle: &str) -> cordon_host::state::Record {
    cordon_host::state::StateDir::open(state)
        .unwrap()
        .read(handle)
        .unwrap()
        .expect("the sandbox's record")
}

/// The host work dir a local sandbox's record names.
fn work_of(rec: &cordon_host::state::Record) -> std::path::PathBuf {
    rec.host_work_dir
        .as_ref()
        .expect("a host work dir")
        .host
        .clone()
}

/// The cgroups a local sandbox's record names (its residue).
fn cgroups_of(rec: &cordon_host::state::Record) -> Vec<std::path::PathBuf> {
    serde_json::from_value::<cordon_backend_local::register::Residue>(rec.residue.clone())
        .expect("a local residue")
        .cgroups
}

/// Kills the keeper of `rec` with SIGKILL and waits until it is gone.
fn kill_keeper(rec: &cordon_host::state::Record) {
    let pid = nix::unistd::Pid::from_raw(rec.keeper.pid as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rec.keeper.alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!rec.keeper.alive(), "the keeper outlived SIGKILL");
}

#[test]
fn a_sandbox_lives_across_invocations_and_down_leaves_nothing() {
    if !can_sandbox("sandbox up/exec/down") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "s-life", "t1");
    assert!(h.starts_with("container-"), "{h}");
    let (c, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "echo round1 > note; id -u",
        ],
    );
    assert_eq!((c, out.trim()), (0, "1000"), "{err}");
    let local = dir.path().join("in.txt");
    std::fs::write(&local, "from-host").unwrap();
    let (c, _, err) = cordon(
        &state,
        &["sandbox", "put", &h, local.to_str().unwrap(), "in.txt"],
    );
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "cat note in.txt",
        ],
    );
    assert_eq!((c, out.as_str()), (0, "round1\nfrom-host"), "{err}");
    // The same key gives the same sandbox.
    assert_eq!(up(&state, "s-life", "t1"), h);
    let rec = record(&state, &h);
    let work = work_of(&rec).display().to_string();
    let cgroups: Vec<String> = cgroups_of(&rec)
        .iter()
        .map(|c| c.display().to_string())
        .collect();
    assert!(!cgroups.is_empty() && cgroups.iter().all(|c| Path::new(c).exists()));
    let (c, out, _) = cordon(&state, &["sandbox", "ls"]);
    assert!(c == 0 && out.contains(&h) && out.contains("live"), "{out}");
    let (c, out, err) = cordon(
        &state,
        &["sandbox", "down", "--scope", "s-life", "--thread", "t1"],
    );
    assert_eq!((c, out.trim()), (0, "disposed 1 sandbox"), "{err}");
    assert!(!Path::new(&work).exists(), "work dir removed");
    assert!(
        cgroups.iter().all(|c| !Path::new(c).exists()),
        "cgroups removed"
    );
    assert!(!state.join("sandboxes").join(format!("{h}.json")).exists());
    let (c, _, err) = cordon(&state, &["sandbox", "exec", &h, "--", "/bin/true"]);
    assert_eq!(c, 125, "exec after down is refused: {err}");
}

#[test]
fn two_processes_racing_for_one_key_get_one_sandbox() {
    if !can_sandbox("sandbox up race") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let s1 = state.clone();
    let s2 = state.clone();
    let a = std::thread::spawn(move || up(&s1, "s-race", "t"));
    let b = std::thread::spawn(move || up(&s2, "s-race", "t"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!(a, b, "one sandbox for one key");
    let records = std::fs::read_dir(state.join("sandboxes"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .count();
    assert_eq!(records, 1);
    let (c, out, _) = cordon(&state, &["sandbox", "down", &a]);
    assert_eq!((c, out.trim()), (0, "disposed 1 sandbox"));
}

#[test]
fn a_killed_keeper_is_found_and_reclaimed_by_gc() {
    if !can_sandbox("sandbox gc after kill -9") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "s-gc", "t");
    let (c, _, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "sleep 300 >/dev/null 2>&1 &",
        ],
    );
    assert_eq!(c, 0, "{err}");
    let rec = record(&state, &h);
    let work = work_of(&rec).display().to_string();
    let cg_name = cgroups_of(&rec)[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(!cgroups_named(&cg_name).is_empty());
    kill_keeper(&rec);
    // Straight to gc: any other command would reclaim it first (see
    // `a_killed_keepers_cgroups_and_volume_go_at_the_next_command_without_gc`).
    let (c, out, err) = cordon(&state, &["sandbox", "gc"]);
    assert_eq!((c, out.trim()), (0, "1"), "{err}");
    assert!(
        cgroups_named(&cg_name).is_empty(),
        "{:?}",
        cgroups_named(&cg_name)
    );
    assert!(!Path::new(&work).exists());
    let (_, out, _) = cordon(&state, &["sandbox", "gc"]);
    assert_eq!(out.trim(), "0");
}

/// The loop devices whose backing file is a volume image the process
/// `maker` made (`.cordon-volume-PID-N.img`, unlinked once attached, so
/// the kernel shows it `(deleted)`), as `loopN: FILE`.
fn loop_devices_of(maker: u32) -> Vec<String> {
    let needle = format!("/.cordon-volume-{maker}-");
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let file = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            file.contains(&needle)
                .then(|| format!("{}: {}", e.file_name().to_string_lossy(), file.trim()))
        })
        .collect()
}

/// Whether `path` is a mount point in this process's mount namespace.
fn mounted_at(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path))
}

/// A keeper killed with SIGKILL leaves its sandbox's cgroups, its work dir
/// volume's mount and the loop device under that volume's deleted image.
/// The next cordon command that opens the state directory (here `ls`)
/// reclaims them, without `gc`; a live keeper's sandbox beside it is left
/// alone.
#[test]
fn a_killed_keepers_cgroups_and_volume_go_at_the_next_command_without_gc() {
    if !can_sandbox("the next command reclaims a killed keeper's residue") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "s-next", "killed");
    let other = up(&state, "s-next", "live");
    let (c, _, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "sleep 300 >/dev/null 2>&1 &",
        ],
    );
    assert_eq!(c, 0, "{err}");
    let rec = record(&state, &h);
    let live = record(&state, &other);
    let work = work_of(&rec).display().to_string();
    let cgroups: Vec<String> = cgroups_of(&rec)
        .iter()
        .map(|c| c.display().to_string())
        .collect();
    assert!(!cgroups.is_empty() && cgroups.iter().all(|c| Path::new(c).exists()));
    // The work dir is in a volume of its own, mounted at the residue's
    // `cordon-volume-…` directory.
    let volume =
        serde_json::from_value::<cordon_backend_local::register::Residue>(rec.residue.clone())
            .unwrap()
            .dirs
            .iter()
            .find(|d| {
                d.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("cordon-volume-"))
            })
            .expect("a volume in the residue")
            .display()
            .to_string();
    assert!(work.starts_with(&volume), "{work} in {volume}");
    assert!(mounted_at(&volume), "the volume is mounted: {volume}");
    assert_eq!(
        loop_devices_of(rec.keeper.pid).len(),
        1,
        "the volume's loop device"
    );
    kill_keeper(&rec);
    // Killed: nothing of it went by itself.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(cgroups.iter().all(|c| Path::new(c).exists()));
    assert!(mounted_at(&volume));
    assert_eq!(loop_devices_of(rec.keeper.pid).len(), 1);

    // Beside it, a record whose keeper is gone too but whose residue names
    // what cordon did not make (a directory with a canary): left alone,
    // and said.
    let canary = tempfile::Builder::new()
        .prefix("cordon-work-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(canary.path().join("canary"), b"keep me").unwrap();
    let gone = {
        let mut c = Command::new("/bin/true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        cordon_host::state::ProcessId { pid, start: 1 }
    };
    let forged_rec = forged(
        "container-forged-next",
        gone,
        serde_json::json!({"cgroups": [], "dirs": [canary.path()]}),
    );
    cordon_host::state::StateDir::open(&state)
        .unwrap()
        .write(&forged_rec)
        .unwrap();

    let (c, out, err) = cordon(&state, &["sandbox", "ls"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains(&h) && out.contains(&other), "{out}");
    assert!(
        err.contains(&h) && err.contains("keeper was gone"),
        "ls says what it reclaimed: {err}"
    );
    assert!(
        err.contains("warning: record `container-forged-next` left alone"),
        "{err}"
    );
    assert!(canary.path().join("canary").exists());
    assert!(out.contains("container-forged-next"), "{out}");
    let left: Vec<&String> = cgroups.iter().filter(|c| Path::new(c).exists()).collect();
    assert!(left.is_empty(), "cgroups left: {left:?}");
    assert!(
        !mounted_at(&volume),
        "the volume is still mounted at {volume}"
    );
    assert!(!Path::new(&volume).exists());
    // The loop device is freed when the last user of its filesystem goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !loop_devices_of(rec.keeper.pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(loop_devices_of(rec.keeper.pid), Vec::<String>::new());
    assert!(!state.join("sandboxes").join(format!("{h}.json")).exists());
    // The live keeper's sandbox is untouched, and still serves.
    assert!(live.keeper.alive());
    assert!(cgroups_of(&live).iter().all(|c| c.exists()));
    let (c, out, err) = cordon(
        &state,
        &["sandbox", "exec", &other, "--", "/bin/echo", "ok"],
    );
    assert_eq!((c, out.trim()), (0, "ok"), "{err}");
    // Only the live one and the forged one are recorded.
    let (records, _) = cordon_host::state::StateDir::open(&state)
        .unwrap()
        .list()
        .unwrap();
    let mut handles: Vec<&str> = records.iter().map(|r| r.handle.as_str()).collect();
    handles.sort_unstable();
    let mut want = [other.as_str(), "container-forged-next"];
    want.sort_unstable();
    assert_eq!(handles, want);
    let (c, _, err) = cordon(&state, &["sandbox", "down", &other]);
    assert_eq!(c, 0, "{err}");
}

#[test]
fn an_idle_sandbox_disposes_of_itself() {
    if !can_sandbox("sandbox idle timeout") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (code, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "s-idle",
            "--thread",
            "t",
            "--idle-timeout",
            "1",
            "--min-isolation",
            "container",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h = out.trim().to_string();
    let rec = record(&state, &h);
    let work = work_of(&rec).display().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while state.join("sandboxes").join(format!("{h}.json")).exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        !state.join("sandboxes").join(format!("{h}.json")).exists(),
        "idle sandbox still recorded"
    );
    assert!(!Path::new(&work).exists());
}

/// A keeper asked to end (SIGTERM, as a service manager stops it) disposes
/// of its sandbox on the way out — its record, work dir and cgroups gone —
/// with no `cordon sandbox gc`.
#[test]
fn a_keeper_asked_to_end_disposes_of_its_sandbox() {
    if !can_sandbox("keeper SIGTERM") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "s-term", "t");
    let rec = record(&state, &h);
    let work = work_of(&rec);
    let cgroups = cgroups_of(&rec);
    assert!(work.exists() && !cgroups.is_empty(), "{work:?} {cgroups:?}");
    let pid = nix::unistd::Pid::from_raw(rec.keeper.pid as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while rec.keeper.alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!rec.keeper.alive(), "the keeper outlived SIGTERM");
    assert!(
        !state.join("sandboxes").join(format!("{h}.json")).exists(),
        "the sandbox is still recorded"
    );
    assert!(!work.exists(), "its work dir is left: {work:?}");
    let left: Vec<_> = cgroups.iter().filter(|c| c.exists()).collect();
    assert!(left.is_empty(), "its cgroups are left: {left:?}");
}

#[test]
fn a_state_directory_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (c, _, err) = cordon(&state, &["sandbox", "ls"]);
    assert_eq!(c, 125);
    assert!(
        err.contains("lets group or others in") && err.contains("chmod 700"),
        "{err}"
    );
}

#[test]
fn a_restarted_owner_adopts_or_reclaims_what_it_made() {
    use cordon_host::keeper::{KeptBackend, KeptConfig, OnRestart, KEEPER_ARG};
    use cordon_host::state::StateDir;
    if !can_sandbox("restart re-adoption") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // The first owner (one CLI process) makes a sandbox and exits.
    let h = up(&state, "s-restart", "t");
    let work = record(&state, &h)
        .host_work_dir
        .expect("a host work dir")
        .host
        .display()
        .to_string();
    // A restarted owner under the same name, built as a host would.
    let owner = |name: &str| {
        let policy = std::sync::Arc::new(cordon_policy::Policy::load_default().unwrap());
        KeptBackend::new(
            &cordon_host::builtin_registry(),
            "container",
            cordon_sandbox::BackendSetup {
                deployment: String::new(),
                init: Some(cordon_sandbox::SelfCommand {
                    path: env!("CARGO_BIN_EXE_cordon").into(),
                    args: vec!["__sandbox-init".into()],
                }),
                work_dir: None,
                scratch: std::env::temp_dir(),
                egress: Default::default(),
                engines: Default::default(),
            },
            policy,
            KeptConfig {
                state: StateDir::open(&state).unwrap(),
                keeper: cordon_sandbox::SelfCommand {
                    path: env!("CARGO_BIN_EXE_cordon").into(),
                    args: vec![KEEPER_ARG.into()],
                },
                policy_file: None,
                idle_timeout: std::time::Duration::from_secs(60),
                max_age: std::time::Duration::from_secs(600),
                owner: name.to_string(),
                on_idle_pause: None,
            },
        )
        .unwrap()
    };
    // Another owner's sandboxes are not its business.
    assert_eq!(owner("someone-else").recover(OnRestart::Reclaim), (0, 0));
    let me = owner("cordon-sandbox-cli");
    assert_eq!(me.recover(OnRestart::Adopt), (1, 0));
    let (c, out, _) = cordon(
        &state,
        &["sandbox", "exec", &h, "--", "/bin/echo", "adopted"],
    );
    assert_eq!((c, out.trim()), (0, "adopted"));
    assert_eq!(me.recover(OnRestart::Reclaim), (0, 1));
    assert!(!Path::new(&work).exists());
    assert!(!state.join("sandboxes").join(format!("{h}.json")).exists());
}

#[test]
fn a_stored_image_runs_at_the_container_rung_and_its_own_files_are_denied() {
    if !can_sandbox("image run") {
        return;
    }
    let (store, name) = cordon_testkit::ci_image(&cordon_testkit::cordon!());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, format!("kind: run\nimage: {name}\n")).unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "policy:\n  extends: [\"cordon:default\"]\n  compute:\n    deny:\n      - name: no-perl\n        when: command in [\"/usr/bin/perl\", \"/usr/bin/perl5.36.0\"]\n",
    )
    .unwrap();
    let run = |rung: &str, script: &str| {
        cordon_testkit::output(
            cordon_testkit::cordon!()
                .command(["run", "--min-isolation", rung, "--backend", rung])
                .args([
                    "--spec",
                    spec.to_str().unwrap(),
                    "--policy",
                    policy.to_str().unwrap(),
                ])
                .args(["--", "/bin/sh", "-c", script])
                .env("CORDON_IMAGE_STORE", &store)
                .output()
                .expect("cordon run"),
        )
    };
    let (c, out, err) = run(
        "container",
        "grep -c bookworm /etc/os-release; python3 -c 'print(6*7)'; pwd; touch /usr/x 2>&1 | grep -c Read-only; perl -e 1 2>/dev/null; echo perl=$?",
    );
    assert_eq!(c, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].parse::<u32>().unwrap_or(0) >= 1, "{out}");
    assert_eq!(&lines[1..], ["42", "/workspace", "1", "perl=127"], "{out}");
    // The process rung sees the host's files: it refuses the image.
    let (c, _, err) = run("process", "true");
    assert_eq!(c, 125);
    assert!(
        err.contains("cannot run the image") && err.contains("container rung"),
        "{err}"
    );
}

#[test]
fn collect_lands_the_declared_outputs_through_the_sink_and_nothing_else() {
    if !can_sandbox("sandbox collect") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let spec = dir.path().join("spec.yaml");
    std::fs::write(
        &spec,
        "kind: report\nimage: host\ndeclared_outputs:\n  - path: out/report.txt\n    media_type: text/plain\nfiles_out: {max_bytes_per_file: 1KiB, max_total_bytes: 4KiB, max_files: 2}\n",
    )
    .unwrap();
    let (c, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "s-collect",
            "--thread",
            "t",
            "--min-isolation",
            "container",
            "--spec",
            spec.to_str().unwrap(),
        ],
    );
    assert_eq!(c, 0, "{err}");
    let h = out.trim().to_string();
    let (c, _, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "mkdir -p out && echo findings > out/report.txt && echo secret > other.txt",
        ],
    );
    assert_eq!(c, 0, "{err}");
    let to = dir.path().join("landed");
    std::fs::create_dir(&to).unwrap();
    let (c, _, err) = cordon(
        &state,
        &["sandbox", "collect", &h, "--to", to.to_str().unwrap()],
    );
    assert_eq!(c, 0, "{err}");
    let landed: Vec<String> = walk_names(&to);
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert!(landed[0].ends_with("report.txt"), "{landed:?}");
    // An output that turns into a link to a host file is refused, not followed.
    let (c, _, _) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "/bin/sh",
            "-c",
            "rm out/report.txt && ln -s /etc/hostname out/report.txt",
        ],
    );
    assert_eq!(c, 0);
    let to2 = dir.path().join("landed2");
    std::fs::create_dir(&to2).unwrap();
    let (c, _, err) = cordon(
        &state,
        &["sandbox", "collect", &h, "--to", to2.to_str().unwrap()],
    );
    assert_ne!(c, 0, "a link is refused: {err}");
    assert!(walk_names(&to2).is_empty());
    cordon(&state, &["sandbox", "down", &h]);
}

fn walk_names(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk_names(&e.path()));
            } else {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

#[test]
fn the_process_rung_does_not_grant_the_hosts_shared_tmp() {
    if !can_sandbox("process rung /tmp") {
        return;
    }
    let probe = format!("/tmp/cordon-shared-probe-{}", std::process::id());
    let out = cordon_testkit::cordon!()
        .command([
            "run",
            "--backend",
            "process",
            "--min-isolation",
            "process",
            "--",
        ])
        .args([
            "/bin/sh",
            "-c",
            &format!("echo x > {probe}; echo shared=$?; echo y > \"$TMPDIR/f\" && echo own=0"),
        ])
        .env_remove("CORDON_MIN_ISOLATION")
        .output()
        .expect("cordon run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("own=0"), "{stdout}");
    assert!(
        stdout.contains("shared=") && !stdout.contains("shared=0"),
        "{stdout}"
    );
    assert!(
        !Path::new(&probe).exists(),
        "the workload wrote into the host's /tmp"
    );
}

#[test]
fn dispose_scope_from_another_process_reclaims_after_the_keeper_is_killed() {
    if !can_sandbox("dispose_scope after kill -9") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let a = up(&state, "s-scope", "t1");
    let b = up(&state, "s-scope", "t3");
    let c = up(&state, "s-scope", "t2");
    assert_ne!(a, b);
    let rec = record(&state, &a);
    let work = work_of(&rec).display().to_string();
    let cgroups: Vec<String> = cgroups_of(&rec)
        .iter()
        .map(|c| c.display().to_string())
        .collect();
    kill_keeper(&rec);
    // A new process disposes of thread t1, whose keeper is dead; the
    // scope's other threads are left alone.
    let (code, out, err) = cordon(
        &state,
        &["sandbox", "down", "--scope", "s-scope", "--thread", "t1"],
    );
    assert_eq!((code, out.trim()), (0, "disposed 1 sandbox"), "{err}");
    let (_, out, _) = cordon(&state, &["sandbox", "ls"]);
    assert!(
        !out.contains(&a) && out.contains(&b) && out.contains(&c),
        "{out}"
    );
    assert!(!Path::new(&work).exists());
    assert!(cgroups.iter().all(|c| !Path::new(c).exists()));
    cordon(&state, &["sandbox", "down", &b]);
    cordon(&state, &["sandbox", "down", &c]);
}

#[test]
fn gc_reclaims_the_cgroups_of_a_run_killed_before_it_could_dispose() {
    if !can_sandbox("gc after a killed run") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut run = cordon_testkit::cordon!()
        .command([
            "run",
            "--min-isolation",
            "container",
            "--",
            "/bin/sleep",
            "60",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cordon run");
    let pid = run.id();
    // Its sandbox's cgroup is named after it.
    let needle = format!("-{pid}-");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cgroups_named(&needle).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!cgroups_named(&needle).is_empty(), "no cgroup for the run");
    run.kill().unwrap();
    run.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, _, err) = cordon(&state, &["sandbox", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no record named"), "{err}");
    assert!(
        cgroups_named(&needle).is_empty(),
        "{:?}",
        cgroups_named(&needle)
    );
}

#[test]
fn a_keeper_that_stops_answering_is_replaced_not_waited_on_forever() {
    if !can_sandbox("a hung keeper") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "s-hung", "t");
    let pid = record(&state, &h).keeper.pid as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGSTOP).unwrap();
    let started = std::time::Instant::now();
    let h2 = up(&state, "s-hung", "t");
    assert!(started.elapsed() < std::time::Duration::from_secs(40));
    assert_ne!(h2, h, "the hung sandbox is reclaimed and a new one made");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists() || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.contains(") Z ")
        }
    );
    let (c, out, _) = cordon(&state, &["sandbox", "down", &h2]);
    assert_eq!((c, out.trim()), (0, "disposed 1 sandbox"));
}

/// Runs cordon with `input` on its stdin (closed after it).
fn cordon_with_stdin(state: &Path, args: &[&str], input: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    let mut child = cordon_testkit::cordon!()
        .command(args)
        .env("CORDON_STATE_DIR", state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run cordon");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A command that does not read its input ends before it is all
    // written: a broken pipe here is not a failure.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sandbox_exec_passes_its_stdin_through() {
    if !can_sandbox("sandbox_exec_passes_its_stdin_through") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "stdin", "t1");
    let (code, out, err) = cordon_with_stdin(
        &state,
        &["sandbox", "exec", &h, "--", "wc", "-l"],
        b"a\nb\n",
    );
    assert_eq!((code, out.trim()), (0, "2"), "stderr: {err}");
    // No input at all is end-of-file, not a hang.
    let (code, out, err) =
        cordon_with_stdin(&state, &["sandbox", "exec", &h, "--", "wc", "-c"], b"");
    assert_eq!((code, out.trim()), (0, "0"), "stderr: {err}");
    // A command that never reads its stdin is not held up by it.
    let (code, out, _) = cordon_with_stdin(
        &state,
        &["sandbox", "exec", &h, "--", "echo", "ignored"],
        &vec![b'x'; 1 << 20],
    );
    assert_eq!((code, out.trim()), (0, "ignored"));
    cordon(
        &state,
        &["sandbox", "down", "--scope", "stdin", "--thread", "t1"],
    );
}

#[test]
fn run_passes_its_stdin_through_at_both_rungs() {
    if !can_sandbox("run_passes_its_stdin_through_at_both_rungs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    for rung in ["container", "process"] {
        let (code, out, err) = cordon_with_stdin(
            &state,
            &[
                "run",
                "--min-isolation",
                rung,
                "--backend",
                rung,
                "--",
                "python3",
                "-",
            ],
            b"print(6*7)\n",
        );
        assert_eq!((code, out.trim()), (0, "42"), "{rung}: {err}");
    }
}

/// The processes (pid, command line) whose command line contains `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(token) && !cmd.contains("cordon") {
                found.push(format!("{name}: {cmd}"));
            }
        }
    }
    found
}

#[test]
fn killing_a_sandbox_exec_client_kills_its_exec_within_a_second() {
    if !can_sandbox("killing_a_sandbox_exec_client_kills_its_exec_within_a_second") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "clientkill", "t1");
    // A sleep with a duration nobody else uses, so it can be found by name.
    let token = "600.4242";
    let mut client = cordon_testkit::cordon!()
        .command(["sandbox", "exec", &h, "--", "sleep", token])
        .env("CORDON_STATE_DIR", &state)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while processes_with(token).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleep never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    client.kill().unwrap(); // SIGKILL: the client gets no chance to clean up
    client.wait().unwrap();
    let killed = std::time::Instant::now();
    while !processes_with(token).is_empty() {
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(1),
            "the exec outlived its client by a second: {:?}",
            processes_with(token)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The sandbox itself is still there for the next exec.
    let (code, out, err) = cordon(&state, &["sandbox", "exec", &h, "--", "echo", "still"]);
    assert_eq!((code, out.trim()), (0, "still"), "{err}");
    cordon(
        &state,
        &["sandbox", "down", "--scope", "clientkill", "--thread", "t1"],
    );
}

/// Runs cordon with `CORDON_LOG=debug`; returns (code, stdout, stderr).
fn cordon_logged(state: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_env(state, args, &[("CORDON_LOG", "debug")])
}

fn count(log: &str, event: &str) -> usize {
    log.lines().filter(|l| l.contains(event)).count()
}

/// The `spec=` fingerprint a provenance event names.
fn provenance_of(log: &str, event: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("cordon::provenance") && l.contains(event))
        .unwrap_or_else(|| panic!("no `{event}` provenance event in:\n{log}"));
    line.split_whitespace()
        .filter(|w| w.starts_with("spec=") || w.starts_with("kind=") || w.starts_with("policy="))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn up_loads_the_policy_and_parses_the_spec_once_per_process() {
    if !can_sandbox("up_loads_the_policy_and_parses_the_spec_once_per_process") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "kind: job\nimage: host\nrequires: [exec]\n").unwrap();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies/agent.yaml");
    let (code, out, err) = cordon_logged(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "once",
            "--thread",
            "t1",
            "--min-isolation",
            "container",
            "--spec",
            spec.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--identity",
            "namespace=team-a",
            "--identity",
            "attested=true",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h = out.trim().to_string();
    // `agent.yaml` extends `cordon:default`: one load assembles both layers.
    assert_eq!(count(&err, "loading a policy"), 1, "up:\n{err}");
    // The spec file, once; the keeper's record is read back in its wire
    // form (which is checked like a file: one more parse, of that record).
    assert_eq!(count(&err, "parsing a spec spec=\""), 2, "up:\n{err}");
    assert_eq!(
        count(&err, &format!("parsing a spec spec=\"{}\"", spec.display())),
        1,
        "up:\n{err}"
    );
    // The keeper: one policy load (the digest is then compared), the spec
    // only in its wire form, once.
    let keeper = std::fs::read_to_string(state.join("sandboxes").join(format!("{h}.log"))).unwrap();
    assert_eq!(count(&keeper, "loading a policy"), 1, "keeper:\n{keeper}");
    assert_eq!(count(&keeper, "parsing a spec"), 1, "keeper:\n{keeper}");
    assert_eq!(count(&keeper, "(wire form)"), 1, "keeper:\n{keeper}");
    cordon(
        &state,
        &["sandbox", "down", "--scope", "once", "--thread", "t1"],
    );
}

#[test]
fn exec_on_a_sandbox_made_without_a_spec_reports_what_up_created() {
    if !can_sandbox("exec_on_a_sandbox_made_without_a_spec_reports_what_up_created") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (code, out, up_log) = cordon_logged(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "prov",
            "--thread",
            "t1",
            "--min-isolation",
            "container",
        ],
    );
    assert_eq!(code, 0, "{up_log}");
    let h = out.trim().to_string();
    let (code, _, exec_log) = cordon_logged(&state, &["sandbox", "exec", &h, "--", "true"]);
    assert_eq!(code, 0, "{exec_log}");
    let created = provenance_of(&up_log, "created");
    assert!(created.contains("kind=\"run\""), "{created}");
    assert_eq!(provenance_of(&exec_log, "attached"), created);
    // And the record holds exactly the spec `cordon run`'s path builds.
    let rec = record(&state, &h);
    assert_eq!(
        rec.provenance.spec,
        cordon_sandbox::SandboxSpec::new("run", "host").unwrap()
    );
    cordon(
        &state,
        &["sandbox", "down", "--scope", "prov", "--thread", "t1"],
    );
}

#[test]
fn sandbox_exec_with_a_terminal_gives_python_its_prompt() {
    if !can_sandbox("sandbox_exec_with_a_terminal_gives_python_its_prompt") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let h = up(&state, "tty", "t1");
    // Piped input (not a terminal here). Python's REPL switches the
    // terminal to raw mode itself, so a ^D sent before that is lost: the
    // input ends with its own `exit()`.
    let (code, out, err) = cordon_with_stdin(
        &state,
        &["sandbox", "exec", "-t", &h, "--", "python3"],
        b"print(6*7)\nexit()\n",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(">>> "), "no interactive prompt: {out:?}");
    assert!(out.contains("42\r\n"), "{out:?}");
    // Its own devpts instance, of the default size, and a real terminal.
    let (code, out, err) = cordon_with_stdin(
        &state,
        &[
            "sandbox",
            "exec",
            "-t",
            &h,
            "--",
            "sh",
            "-c",
            "tty; stty size; test -t 0 && echo tty-in",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("/dev/pts/0\r\n24 80\r\ntty-in"), "{out:?}");
    // Without -t there is no terminal at all.
    let (code, out, _) = cordon_with_stdin(
        &state,
        &[
            "sandbox",
            "exec",
            &h,
            "--",
            "sh",
            "-c",
            "test -t 0 || echo no-tty",
        ],
        b"",
    );
    assert_eq!((code, out.trim()), (0, "no-tty"));
    cordon(
        &state,
        &["sandbox", "down", "--scope", "tty", "--thread", "t1"],
    );
}

/// A process of ours that a forged record may name: `sleep 600`.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Bystander {
        Bystander(Command::new("/bin/sleep").arg("600").spawn().unwrap())
    }
    fn id(&self) -> cordon_host::state::ProcessId {
        let pid = self.0.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let start = rest.split_whitespace().nth(19).unwrap().parse().unwrap();
        cordon_host::state::ProcessId { pid, start }
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A record as a sandbox would leave it, naming `keeper` and `residue`.
fn forged(
    handle: &str,
    keeper: cordon_host::state::ProcessId,
    residue: serde_json::Value,
) -> cordon_host::state::Record {
    cordon_host::state::Record {
        version: cordon_sandbox::wire::WIRE_VERSION,
        handle: handle.into(),
        key: cordon_host::state::KeyRecord {
            scope: format!("scope-{handle}"),
            thread: "t".into(),
            agent_dir: "a".into(),
        },
        owner: "cordon-sandbox".into(),
        backend: "container".into(),
        keeper,
        // Long past any maximum age: gc takes it.
        created: 0,
        idle_timeout: 60,
        max_age: 60,
        provenance: cordon_sandbox::Provenance {
            spec: cordon_sandbox::SandboxSpec::new("run", "host").unwrap(),
            identity: cordon_policy::Identity::default(),
            policy_digest: "forged".into(),
            origin: None,
        },
        host_work_dir: None,
        residue,
    }
}

/// `gc` and `down` check what a record names before they act: a keeper
/// pid that is some other process is not signalled, a "work dir" that is
/// not one cordon made is not removed, "cgroups" that are not cordon's
/// are neither emptied of their processes nor removed. Each such record
/// is left in place and reported.
#[test]
fn gc_and_down_act_on_nothing_a_forged_record_names() {
    if !can_sandbox("forged records") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state");
    let state = cordon_host::state::StateDir::open(&state_path).unwrap();
    // Someone else's process, named as a keeper.
    let mut victim = Bystander::start();
    // A directory with a canary, outside anything cordon makes.
    let canary_dir = tempfile::Builder::new()
        .prefix("cordon-work-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(canary_dir.path().join("canary"), b"keep me").unwrap();
    // A "cgroup" that is a plain directory listing a bystander as its member.
    let mut member = Bystander::start();
    let fake_cgroup = tempfile::tempdir().unwrap();
    std::fs::write(
        fake_cgroup.path().join("cgroup.procs"),
        format!("{}\n", member.0.id()),
    )
    .unwrap();
    // A real cgroup that is not one of cordon's sandboxes.
    let real_cgroup = ["pids", "unified", ""]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c))
        .find(|d| d.join("cgroup.procs").exists())
        .unwrap()
        .join(format!("not-cordon-{}", std::process::id()));
    std::fs::create_dir(&real_cgroup).unwrap();
    let _remove = RemoveDir(real_cgroup.clone());
    // A keeper long gone (a reaped child), so only the residue is at stake.
    let gone = {
        let mut c = Command::new("/bin/true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        cordon_host::state::ProcessId { pid, start: 1 }
    };
    let residue = serde_json::json!({
        "cgroups": [fake_cgroup.path(), &real_cgroup],
        "dirs": [canary_dir.path()],
    });
    let records = [
        forged(
            "container-forged-keeper",
            victim.id(),
            serde_json::json!({"cgroups": [], "dirs": []}),
        ),
        forged("container-forged-residue", gone, residue),
    ];
    for r in &records {
        state.write(r).unwrap();
    }
    // Every way it was acted on, so one run shows them all.
    let check = |what: &str, victim: &mut Bystander, member: &mut Bystander| {
        let mut wrong = Vec::new();
        if !victim.alive() {
            wrong.push("killed the process a record named as its keeper".to_string());
        }
        if !member.alive() {
            wrong.push("killed a member of a forged cgroup".to_string());
        }
        if !canary_dir.path().join("canary").exists() {
            wrong.push("removed a directory cordon did not make".to_string());
        }
        if !real_cgroup.exists() {
            wrong.push("removed a cgroup that is not cordon's".to_string());
        }
        for r in &records {
            if !state.read(&r.handle).is_ok_and(|r| r.is_some()) {
                wrong.push(format!("dropped the record `{}`", r.handle));
            }
        }
        let _ = std::fs::create_dir(&real_cgroup);
        assert!(wrong.is_empty(), "{what}: {wrong:?}");
    };
    let (code, out, err) = cordon(&state_path, &["sandbox", "gc"]);
    check("gc", &mut victim, &mut member);
    assert_eq!((code, out.trim()), (0, "0"), "{err}");
    assert!(
        err.contains("is not the keeper of `container-forged-keeper`"),
        "{err}"
    );
    assert!(err.contains("left alone"), "{err}");
    for r in &records {
        let (code, _, err) = cordon(&state_path, &["sandbox", "down", &r.handle]);
        check("down", &mut victim, &mut member);
        assert_ne!(code, 0, "down of a forged record: {err}");
        assert!(err.contains("left alone") && err.contains("help:"), "{err}");
    }
}

/// Removes the cgroup directory when dropped (a failing test too).
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The example specs load, and the chart example runs as its comment and
/// docs/quickstart.md say: the script goes in, the chart comes back through
/// `collect` and lands on this machine.
#[test]
fn the_example_specs_check_and_the_chart_example_lands_its_chart() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let examples = root.join("examples/specs");
    let mut specs: Vec<String> = std::fs::read_dir(&examples)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    specs.sort();
    assert!(specs.len() >= 3, "{specs:?}");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut args = vec!["spec", "check"];
    args.extend(specs.iter().map(String::as_str));
    let (code, out, err) = cordon(&state, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        specs.len(),
        "{out}"
    );
    if !can_sandbox("the chart example") {
        return;
    }
    let chart = examples.join("chart.yaml");
    let (code, h, err) = cordon(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "examples",
            "--thread",
            "chart",
            "--min-isolation",
            "container",
            "--quiet",
            "--spec",
            chart.to_str().unwrap(),
        ],
    );
    assert_eq!((code, err.as_str()), (0, ""), "up");
    let h = h.trim().to_string();
    // As docs/quickstart.md does it: the script in, run, the chart out.
    let script = examples.join("chart.py");
    let (code, out, err) = cordon(
        &state,
        &["sandbox", "put", &h, script.to_str().unwrap(), "chart.py"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cordon(
        &state,
        &["sandbox", "exec", &h, "--", "python3", "chart.py"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("chart.png: "), "{out}");
    let landed = dir.path().join("landed");
    let (code, _, err) = cordon(
        &state,
        &["sandbox", "collect", &h, "--to", landed.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("make it first (`mkdir -p"), "{err}");
    std::fs::create_dir(&landed).unwrap();
    let (code, out, err) = cordon(
        &state,
        &["sandbox", "collect", &h, "--to", landed.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    let png = std::fs::read(landed.join("out/chart.png")).expect("the chart landed");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 100,
        "{out}"
    );
    let (code, out, _) = cordon(&state, &["sandbox", "down", &h]);
    assert_eq!((code, out.trim()), (0, "disposed 1 sandbox"));
}

/// A spec that does not load: the position, the line, a caret and exit 1.
#[test]
fn spec_check_positions_what_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: x\nimage: host\nresources:\n  memory: lots\n").unwrap();
    let (code, out, err) = cordon(
        &dir.path().join("state"),
        &["spec", "check", bad.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("bad.yaml:4:11: error: `resources.memory`")
            && err.contains(" 4 |   memory: lots\n")
            && err.contains("|           ^"),
        "{err}"
    );
    let (code, out, _) = cordon(
        &dir.path().join("state"),
        &["spec", "check", "--format", "json", bad.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(v["ok"], false);
    assert_eq!(v["diagnostics"][0]["line"], 4);
}

/// Every line `--format json` prints parses, and carries what a program
/// driving the CLI needs: handle, backend, rung and floor; the output as
/// it came; the exit code; the error and its code.
#[test]
fn the_json_outputs_parse_and_carry_what_a_program_needs() {
    if !can_sandbox("--format json") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let lines = |out: &str| -> Vec<serde_json::Value> {
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let (code, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "up",
            "--format",
            "json",
            "--scope",
            "json",
            "--thread",
            "t1",
            "--min-isolation",
            "container",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let up = &lines(&out)[0];
    assert_eq!(up["ok"], true);
    assert_eq!(up["backend"], "container");
    assert_eq!(up["rung"], "container");
    assert_eq!(up["floor"]["source"], "flag");
    assert_eq!(up["floor"]["below_default"], true);
    assert!(
        !err.contains("below the default floor"),
        "the notice is the field: {err}"
    );
    let h = up["handle"].as_str().expect("a handle").to_string();
    let (code, out, _) = cordon(&state, &["sandbox", "--format", "json", "ls"]);
    assert_eq!(code, 0);
    let ls = &lines(&out)[0];
    let me = ls["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["handle"] == h.as_str())
        .expect("listed");
    assert_eq!(
        (me["state"].as_str(), me["scope"].as_str()),
        (Some("live"), Some("json"))
    );
    let (code, out, err) = cordon(
        &state,
        &[
            "sandbox",
            "exec",
            "--format",
            "json",
            &h,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; printf '\\377' >&2; exit 3",
        ],
    );
    assert_eq!(code, 3, "{out}{err}");
    let ev = lines(&out);
    assert_eq!(ev[0]["event"], "sandbox");
    // Chunks come as the pipe gives them: text, or base64 for a chunk that
    // is not UTF-8. Together they are the bytes the workload wrote.
    let bytes = |stream: &str| -> Vec<u8> {
        use base64::Engine as _;
        ev.iter()
            .filter(|e| e["event"] == stream)
            .flat_map(|e| match (e["data"].as_str(), e["data_base64"].as_str()) {
                (Some(t), None) => t.as_bytes().to_vec(),
                (None, Some(b)) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .expect("base64"),
                other => panic!("a chunk with neither or both: {other:?}"),
            })
            .collect()
    };
    assert_eq!(bytes("stdout"), b"out\n");
    assert_eq!(bytes("stderr"), b"err\n\xff", "{out}");
    assert!(
        ev.iter().any(|e| e["data_base64"].is_string()),
        "a chunk that is not UTF-8 comes as base64: {out}"
    );
    let last = ev.last().unwrap();
    assert_eq!(
        (last["event"].as_str(), last["exit_code"].as_u64()),
        (Some("exit"), Some(3))
    );
    assert_eq!(last["status"]["code"], 3);
    assert!(last["killed_by"].is_null());
    // cordon's own failure: one error line, its code, the message.
    let (code, out, _) = cordon(
        &state,
        &["sandbox", "exec", "--format", "json", "nope", "--", "true"],
    );
    assert_eq!(code, 125);
    let e = &lines(&out)[0];
    assert_eq!(
        (e["event"].as_str(), e["ok"].as_bool()),
        (Some("error"), Some(false))
    );
    assert_eq!(e["exit_code"], 125);
    assert!(
        e["error"].as_str().unwrap().contains("no sandbox `nope`"),
        "{out}"
    );
    let (code, out, _) = cordon(&state, &["sandbox", "down", "--format", "json", &h]);
    assert_eq!(code, 0);
    assert_eq!(lines(&out)[0]["disposed"], 1);
    let (code, out, _) = cordon(&state, &["sandbox", "gc", "--format", "json"]);
    assert_eq!(code, 0);
    assert_eq!(lines(&out)[0]["disposed"], 0);
}

/// An OCI image layout holding `/bin/true` and the libraries it loads,
/// copied from this machine: one layer, and a config with a run config.
fn tiny_oci_layout(at: &Path) {
    use sha2::Digest;
    fn sha(b: &[u8]) -> String {
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }
    let mut data = Vec::new();
    {
        let mut b = tar::Builder::new(&mut data);
        let mut add = |path: &str, content: &[u8], mode: u32, dir: bool| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(if dir {
                tar::EntryType::Directory
            } else {
                tar::EntryType::Regular
            });
            h.set_mode(mode);
            h.set_size(content.len() as u64);
            h.set_cksum();
            b.append_data(&mut h, path, content).unwrap();
        };
        for d in ["bin", "lib", "lib/x86_64-linux-gnu", "lib64", "srv"] {
            add(d, b"", 0o755, true);
        }
        let host = |p: &str| std::fs::read(p).unwrap();
        add("bin/true", &host("/usr/bin/true"), 0o755, false);
        add(
            "lib/x86_64-linux-gnu/libc.so.6",
            &host("/lib/x86_64-linux-gnu/libc.so.6"),
            0o755,
            false,
        );
        add(
            "lib64/ld-linux-x86-64.so.2",
            &host("/lib64/ld-linux-x86-64.so.2"),
            0o755,
            false,
        );
        b.finish().unwrap();
    }
    let blobs = at.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |b: &[u8]| {
        let h = sha(b);
        std::fs::write(blobs.join(&h), b).unwrap();
        format!("sha256:{h}")
    };
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "User": "65534", "WorkingDir": "/srv", "Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha(&data))]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": put(&data), "size": data.len()}],
    }))
    .unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(&manifest), "size": manifest.len()}
    ]});
    std::fs::write(at.join("index.json"), index.to_string()).unwrap();
    std::fs::write(at.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[test]
fn an_imported_oci_image_runs_at_the_container_rung() {
    if !can_sandbox("oci image run") {
        return;
    }
    if !Path::new("/lib64/ld-linux-x86-64.so.2").exists() {
        cordon_testkit::skip("oci image run", "not an x86_64 glibc host");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The store's parents must be searchable by the sandbox's mapped uid.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let store = dir.path().join("store");
    let layout = dir.path().join("layout");
    tiny_oci_layout(&layout);
    let cordon = |args: &[&str]| {
        cordon_testkit::output(
            cordon_testkit::cordon!()
                .command(args)
                .env("CORDON_IMAGE_STORE", &store)
                .env("CORDON_STATE_DIR", dir.path().join("state"))
                .output()
                .expect("run cordon"),
        )
    };
    let (c, _, err) = cordon(&["image", "import", "tiny", layout.to_str().unwrap()]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = cordon(&["image", "ls", "--format", "json"]);
    assert_eq!(c, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tiny = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "tiny")
        .unwrap();
    assert_eq!(tiny["config"]["working_dir"], "/srv", "{out}");
    assert_eq!(tiny["config"]["user"], "65534", "{out}");
    assert_eq!(tiny["config"]["env"][0], "PATH=/bin", "{out}");

    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "kind: run\nimage: tiny\n").unwrap();
    let spec = spec.to_str().unwrap();
    let (c, _, err) = cordon(&[
        "run",
        "--min-isolation",
        "container",
        "--backend",
        "container",
        "--spec",
        spec,
        "--",
        "/bin/true",
    ]);
    assert_eq!(c, 0, "/bin/true in the imported image: {err}");
    // The image is what the sandbox sees: the host's shell is not in it.
    let (c, _, err) = cordon(&[
        "run",
        "--min-isolation",
        "container",
        "--backend",
        "container",
        "--spec",
        spec,
        "--",
        "/bin/sh",
        "-c",
        "true",
    ]);
    assert!(
        c == 125 && err.contains("`/bin/sh` cannot be resolved"),
        "/bin/sh ran in an image that has none ({c}): {err}"
    );
}

/// `cordon sandbox ls | head`: a reader that stops early ends the listing;
/// the process exits 0 and does not panic (it did on the broken pipe).
#[test]
fn ls_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cordon_testkit::cordon!()
        .command(["sandbox", "ls"])
        .env("CORDON_STATE_DIR", dir.path().join("state"))
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// `sandbox pause` freezes every process of a kept sandbox: a busy loop's
/// count stops while paused and goes on after `resume`; an `exec` on a
/// paused sandbox resumes it first; a paused sandbox goes at `down`, and
/// one whose keeper is killed while paused is reclaimed by the next
/// command (thawed, then killed), leaving no process and no cgroup.
#[test]
fn pause_freezes_a_kept_sandbox_and_resume_or_an_exec_thaws_it() {
    if !can_sandbox("sandbox pause/resume") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let c = cordon_testkit::cordon!().env("CORDON_STATE_DIR", &state);
    for round in ["down", "killed"] {
        let h = up(&state, "s-pause", round);
        let rec = record(&state, &h);
        let busy = cordon_testkit::pause::BusyLoop::start(&c, &h, &work_of(&rec));
        cordon_testkit::pause::pause_resume_and_an_exec_thaw(&c, &h, &busy);
        if round == "down" {
            let (code, _, err) = cordon(&state, &["sandbox", "down", &h]);
            assert_eq!(code, 0, "down of a paused sandbox: {err}");
        } else {
            kill_keeper(&rec);
            // The next command finds the keeper gone and reclaims it.
            let (code, _, err) = cordon(&state, &["sandbox", "ls"]);
            assert_eq!(code, 0, "ls: {err}");
        }
        let left: Vec<_> = cgroups_of(&rec)
            .into_iter()
            .filter(|d| d.exists())
            .collect();
        assert!(left.is_empty(), "{round}: cgroups left: {left:?}");
        assert!(!busy.moving(), "{round}: the loop outlived its sandbox");
        busy.reap();
    }
    // The process rung has no sandbox-wide cgroup: refused, saying so.
    let (code, h, err) = cordon(
        &state,
        &[
            "sandbox",
            "up",
            "--scope",
            "s-pause",
            "--thread",
            "process",
            "--backend",
            "process",
            "--min-isolation",
            "process",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cordon(&state, &["sandbox", "pause", h.trim()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("process rung") && err.contains("--min-isolation container"),
        "{err}"
    );
    let (code, _, err) = cordon(&state, &["sandbox", "down", h.trim()]);
    assert_eq!(code, 0, "{err}");
}
