//! `cordon sandbox`: warm sandboxes driven from separate invocations of the
//! real binary — the proof that nothing lives only in one process's memory.

use std::path::Path;
use std::process::Command;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn can_sandbox(case: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        assert!(
            is_root(),
            "CI=true and `{case}` needs root to launch sandboxes"
        );
        return true;
    }
    if !is_root() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "\n!!!!!!!! SKIPPED {case}: launching a sandbox needs root (CI=true makes this a failure) !!!!!!!!\n"
        );
    }
    is_root()
}

fn cordon(state: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(args)
        .env("CORDON_STATE_DIR", state)
        .env_remove("CORDON_MIN_ISOLATION")
        .output()
        .expect("run cordon");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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

fn record(state: &Path, handle: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(state.join("sandboxes").join(format!("{handle}.json")))
        .expect("record");
    serde_json::from_str(&text).expect("record json")
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
    let work = rec["work_dir"].as_str().unwrap().to_string();
    let cgroups: Vec<String> = rec["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(!cgroups.is_empty() && cgroups.iter().all(|c| Path::new(c).exists()));
    let (c, out, _) = cordon(&state, &["sandbox", "ls"]);
    assert!(c == 0 && out.contains(&h) && out.contains("live"), "{out}");
    let (c, out, err) = cordon(
        &state,
        &["sandbox", "down", "--scope", "s-life", "--thread", "t1"],
    );
    assert_eq!((c, out.trim()), (0, "1"), "{err}");
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
    assert_eq!((c, out.trim()), (0, "1"));
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
    let pid = rec["keeper"]["pid"].as_u64().unwrap() as i32;
    let work = rec["work_dir"].as_str().unwrap().to_string();
    let cg_name = Path::new(rec["cgroups"][0].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(!cgroups_named(&cg_name).is_empty());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (c, out, _) = cordon(&state, &["sandbox", "ls"]);
    assert!(c == 0 && out.contains("orphaned"), "{out}");
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
    let work = rec["work_dir"].as_str().unwrap().to_string();
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
