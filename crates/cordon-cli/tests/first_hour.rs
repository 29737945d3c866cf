//! A new user's first hour (issue 34): each friction found by trying cordon
//! as a new user would, run as the command and read from its output.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::Path;

/// `cordon ARGS` in the workspace's root, as a user whose home is `home`
/// (no `XDG_CONFIG_HOME`, no floor in the environment).
fn as_user(home: &Path, args: &[&str]) -> (i32, String, String) {
    cordon_testkit::cordon!()
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CORDON_MIN_ISOLATION")
        .run(args)
}

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether `case` can run here (it builds sandboxes: root); else it is
/// skipped loudly (a failure under `CI=true`).
fn runs_as_root(case: &str) -> bool {
    let ok = root();
    if !ok {
        cordon_testkit::skip(case, "needs root (a sandbox maps a dedicated uid)");
    }
    ok
}

/// `cordon setup` alone shows what the machine holds and records nothing;
/// an unknown rung and a rung nothing here serves are refused, nothing
/// written.
#[test]
fn setup_shows_the_machine_and_records_only_a_choice() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join(".config/cordon/config.yaml");
    let (code, out, err) = as_user(home.path(), &["setup"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("what this machine can hold"), "{out}");
    assert!(out.contains("nothing recorded"), "{out}");
    assert!(!file.exists(), "setup without a choice wrote {file:?}");
    // Whether this machine holds the default floor, said plainly either
    // way: a microvm line, or why there is none.
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("microvm")),
        "{out}"
    );
    let (code, _, err) = as_user(home.path(), &["setup", "--min-isolation", "sturdy"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one of none, runtime"), "{err}");
    // No backend declares `vm`: recording it would refuse every workload.
    let (code, _, err) = as_user(home.path(), &["setup", "--min-isolation", "vm"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("would refuse every workload") && err.contains("nothing recorded"),
        "{err}"
    );
    assert!(!file.exists());
}

/// The recorded floor keeps what else the file says, replaces only its
/// `min_isolation:` line, and is what `doctor` then reports.
#[test]
fn setup_records_the_floor_and_keeps_the_rest_of_the_file() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".config/cordon");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, "# mine\nmin_isolation: microvm\n").unwrap();
    let (code, out, err) = as_user(home.path(), &["setup", "--min-isolation", "process"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("recorded `min_isolation: process`"), "{out}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text, "# mine\nmin_isolation: process\n");
    let (_, out, _) = as_user(home.path(), &["doctor"]);
    assert!(
        out.starts_with(&format!(
            "floor: process (from `min_isolation` in `{}`)",
            file.display()
        )),
        "{out}"
    );
}

/// After the first-run choice of `container`, `cordon run` needs no flag
/// and announces nothing (the choice was made on purpose, once); without
/// it, the refusal names `cordon setup`.
#[test]
fn after_setup_container_a_run_needs_no_flag() {
    if !runs_as_root("after_setup_container_a_run_needs_no_flag") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = as_user(home.path(), &["run", "--", "python3", "-c", "print(1)"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("cordon setup --min-isolation"), "{err}");
    let (code, out, err) = as_user(home.path(), &["setup", "--min-isolation", "container"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = as_user(home.path(), &["run", "--", "python3", "-c", "print(1)"]);
    assert_eq!((code, out.as_str()), (0, "1\n"), "{err}");
    assert!(
        !err.contains("below the default floor"),
        "a recorded floor is not announced on every run: {err}"
    );
}

/// The notice for a floor lowered by a flag names the backend as a
/// backend and the rung as a rung.
#[test]
fn the_below_floor_notice_names_backend_and_rung() {
    if !runs_as_root("the_below_floor_notice_names_backend_and_rung") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = as_user(
        home.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--backend",
            "container",
            "--",
            "/bin/true",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("running on the `container` backend at the `container` rung"),
        "{err}"
    );
}

/// Egress in one step: under `cordon:local-dev` a spec naming
/// `localhost:PORT` reaches a server on this machine's loopback through
/// the proxy; the same spec under `cordon:default` is refused, and under
/// `cordon:spec-egress` the proxy still never dials loopback.
#[test]
fn local_dev_reaches_a_server_on_this_machine_and_the_defaults_do_not() {
    use std::io::{Read, Write};
    if !runs_as_root("local_dev_reaches_a_server_on_this_machine_and_the_defaults_do_not") {
        return;
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let body = "hello from this machine";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let home = tempfile::tempdir().unwrap();
    let d = home.path();
    std::fs::write(
        d.join("spec.yaml"),
        format!("kind: dev\nimage: host\negress_allow: [\"localhost:{port}\"]\n"),
    )
    .unwrap();
    let fetch = format!(
        "import urllib.request\nprint(urllib.request.urlopen('http://localhost:{port}/', timeout=20).read().decode())"
    );
    let run = |root: &str| {
        let policy = d.join(format!("{}.yaml", root.replace(':', "-")));
        std::fs::write(&policy, format!("policy:\n  extends: [\"{root}\"]\n")).unwrap();
        as_user(
            d,
            &[
                "run",
                "-q",
                "--min-isolation",
                "container",
                "--backend",
                "container",
                "--policy",
                policy.to_str().unwrap(),
                "--spec",
                d.join("spec.yaml").to_str().unwrap(),
                "--",
                "python3",
                "-c",
                &fetch,
            ],
        )
    };
    let (code, out, err) = run("cordon:local-dev");
    assert_eq!((code, out.trim()), (0, "hello from this machine"), "{err}");
    let (code, _, err) = run("cordon:default");
    assert_ne!(code, 0, "the default reached loopback: {err}");
    let (code, out, err) = run("cordon:spec-egress");
    assert!(
        code != 0 && !out.contains("hello"),
        "spec-egress dialled loopback: {code} {out} {err}"
    );
}

/// docs/quickstart.md's section 4 as a reader runs it: its `mine.yaml`
/// saved as shown, then each command of its console block, whose output
/// (line numbers and all) must be what the section shows. The run's
/// refusal names the file by its full path: `/home/you/` there.
#[test]
fn the_quickstart_policy_section_prints_what_it_shows() {
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let doc = std::fs::read_to_string(repo.join("docs/quickstart.md")).unwrap();
    let from = doc.find("## 4.").expect("section 4");
    let to = from + doc[from..].find("## 5.").expect("section 5");
    let part = &doc[from..to];
    let block = |lang: &str| -> String {
        let start = part.find(&format!("```{lang}\n")).expect(lang) + lang.len() + 4;
        let len = part[start..].find("```").expect("end of block");
        part[start..start + len].to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mine.yaml"), block("yaml")).unwrap();
    let console = block("console");
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in console.lines() {
        match line.strip_prefix("$ ") {
            Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
            None => steps
                .last_mut()
                .expect("a command first")
                .1
                .push(line.to_string()),
        }
    }
    let shown_dir = format!("{}/", dir.path().display());
    let mut ran = 0;
    for (cmd, expected) in &steps {
        let Some(args) = cmd.strip_prefix("cordon ") else {
            continue;
        };
        let args: Vec<&str> = args.split_whitespace().collect();
        if args[0] == "run" && !runs_as_root("the quickstart's `cordon run` step") {
            continue;
        }
        let (_, out, err) = cordon_testkit::cordon!()
            .current_dir(dir.path())
            .env("CORDON_MIN_ISOLATION", "container")
            .run(&args);
        let got: Vec<String> = format!("{out}{err}")
            .replace(&shown_dir, "/home/you/")
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            &got, expected,
            "`{cmd}`: docs/quickstart.md shows otherwise"
        );
        ran += 1;
    }
    assert_eq!(ran, if root() { 3 } else { 2 }, "{steps:?}");
}

/// A spec key misspelt is answered with the nearest field.
#[test]
fn a_misspelt_spec_field_gets_a_did_you_mean() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "kind: x\nimage: host\negres_allow: [pypi.org]\n").unwrap();
    let (code, _, err) = as_user(dir.path(), &["spec", "check", spec.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("did you mean `egress_allow`?"), "{err}");
}

/// A policy file that is not there: every command says so with what to
/// do — `run` with 125 (all its own failures are), the policy commands
/// with 2 (a usage error).
#[test]
fn a_missing_policy_file_says_what_to_do_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = as_user(
        dir.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--policy",
            "nope.yaml",
            "--",
            "/bin/true",
        ],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("help:") && err.contains("show-default"),
        "{err}"
    );
    let (code, _, err) = as_user(dir.path(), &["policy", "check", "nope.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("help:"), "{err}");
}

/// The README's exit codes are the ones `cordon --help` lists.
#[test]
fn the_readme_lists_every_exit_code_help_does() {
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let at = readme.find("Exit codes:").expect("the README's exit codes");
    let para = readme[at..at + readme[at..].find("\n\n").unwrap()]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let (_, help, _) = cordon_testkit::cordon!().run(["--help"]);
    let codes = &help[help.find("Exit codes:").expect("help's exit codes")..];
    let mut seen = 0;
    for code in ["0", "1", "2", "3", "124", "125"] {
        if codes.contains(&format!(" {code} ")) {
            seen += 1;
            assert!(
                para.contains(&format!(" {code} ")),
                "`cordon --help` lists exit code {code}; the README does not:\n{para}"
            );
        }
    }
    assert_eq!(seen, 6, "{codes}");
}

/// What a new user hits running things: a memory kill names the bound's
/// value and how to raise it; a program the image lacks is said to be
/// missing, not misnamed; `run` and `sandbox exec` cut output at one cap.
#[test]
fn run_messages_name_the_value_and_the_fix() {
    if !runs_as_root("run_messages_name_the_value_and_the_fix") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec![
            "run",
            "-q",
            "--min-isolation",
            "container",
            "--backend",
            "container",
        ];
        all.extend(args);
        as_user(home.path(), &all)
    };
    let (code, _, err) = run(&["--", "python3", "-c", "x = bytearray(700 << 20)"]);
    assert_eq!(code, 124, "{err}");
    assert!(
        err.contains("`max_memory` bound (512MiB here)") && err.contains("resources.memory"),
        "{err}"
    );
    let (code, _, err) = run(&["--", "ruby", "-e", "1"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("`ruby` is not in the image") && err.contains("Install it"),
        "{err}"
    );
    let cap = |out: &str| -> u64 {
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "exit")
            .and_then(|v| v["output_cap_bytes"].as_u64())
            .expect("an exit event with its cap")
    };
    let (code, out, err) = run(&["--format", "json", "--", "/bin/true"]);
    assert_eq!(code, 0, "{err}");
    let state = home.path().join("state");
    let kept = |args: &[&str]| {
        cordon_testkit::cordon!()
            .env("HOME", home.path())
            .env("CORDON_STATE_DIR", &state)
            .run(args)
    };
    let (code, h, err) = kept(&[
        "sandbox",
        "up",
        "-q",
        "--scope",
        "s",
        "--thread",
        "t",
        "--min-isolation",
        "container",
        "--backend",
        "container",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, exec_out, err) = kept(&[
        "sandbox",
        "--format",
        "json",
        "exec",
        h.trim(),
        "--",
        "/bin/true",
    ]);
    let _ = kept(&["sandbox", "down", h.trim()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        cap(&out),
        cap(&exec_out),
        "run and exec cut output at different caps"
    );
}

/// The documented install puts the guest agent beside `cordon`
/// (`install.sh`: both `cargo install`s into one bin directory); there
/// `doctor`'s microvm row finds it and says the backend can run, naming
/// the rung this machine really gives it.
#[test]
fn an_agent_installed_beside_cordon_makes_the_microvm_ready() {
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let script = std::fs::read_to_string(repo.join("install.sh")).unwrap();
    assert!(
        script.contains("--path crates/cordon-cli")
            && script.contains("--path crates/cordon-vm-agent"),
        "install.sh installs cordon and its guest agent"
    );
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_cordon"));
    if !cordon_testkit::runs_here(
        "an_agent_installed_beside_cordon_makes_the_microvm_ready",
        cordon_testkit::microvm_missing(built),
    ) {
        return;
    }
    // An installed layout: the two binaries in one directory.
    let bin = tempfile::tempdir().unwrap();
    let agent = built
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("x86_64-unknown-linux-gnu/guest/cordon-vm-agent");
    std::fs::copy(built, bin.path().join("cordon")).unwrap();
    std::fs::copy(&agent, bin.path().join("cordon-vm-agent")).unwrap();
    let (_, out, err) = cordon_testkit::Cordon::new(bin.path().join("cordon"))
        .env_remove("CORDON_VM_AGENT")
        .run(["doctor", "--min-isolation", "container"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("microvm"))
        .unwrap_or_else(|| panic!("no microvm row:\n{out}{err}"));
    let beside = format!(
        "guest agent `{}`",
        bin.path().join("cordon-vm-agent").display()
    );
    assert!(row.contains(&beside) && row.contains("can run"), "{row}");
    // The rung it declares is the one this machine holds, said plainly.
    assert!(
        row.contains("accelerator: kvm") || row.contains("not a security boundary"),
        "{row}"
    );
}

/// Egress in the policy, as a new user tries it: appending an `egress:`
/// to the default's text is told that the key is given twice (not about
/// anchors); a layer over `cordon:default` that allows egress is told its
/// allow can never take effect, and what to extend instead.
#[test]
fn egress_mistakes_are_named_with_their_fix() {
    let dir = tempfile::tempdir().unwrap();
    let (_, default, _) = as_user(dir.path(), &["policy", "show-default"]);
    let appended = dir.path().join("appended.yaml");
    std::fs::write(
        &appended,
        format!("{default}  egress:\n    allow:\n      - name: pypi\n        when: host == \"pypi.org\"\n"),
    )
    .unwrap();
    let (code, _, err) = as_user(dir.path(), &["policy", "check", appended.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("duplicate key `egress`: it is given twice") && !err.contains("anchors"),
        "{err}"
    );
    let layered = dir.path().join("layered.yaml");
    std::fs::write(
        &layered,
        "policy:\n  extends: [\"cordon:default\"]\n  egress:\n    allow:\n      - name: pypi\n        when: host == \"pypi.org\"\n",
    )
    .unwrap();
    let (code, out, err) = as_user(dir.path(), &["policy", "check", layered.to_str().unwrap()]);
    assert_eq!(code, 0, "a warning, not an error: {err}");
    assert!(out.starts_with("ok "), "{out}");
    assert!(
        err.contains("warning: this allow can never take effect")
            && err.contains("cordon:spec-egress"),
        "{err}"
    );
}

/// A one-shot run does not see the caller's files: the promise in the
/// default's header says so, a failed `python3 script.py` is followed by
/// the flag that shows the directory, and `--work-dir` over a directory
/// it refuses points to `--workspace`.
#[test]
fn a_run_that_cannot_see_your_files_says_how_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let (_, default, _) = as_user(dir.path(), &["policy", "show-default"]);
    let header: String = default.lines().take_while(|l| l.starts_with('#')).collect();
    assert!(
        !header.contains("cordon run -- python3 script.py"),
        "{header}"
    );
    assert!(header.contains("--workspace"), "{header}");
    if !runs_as_root("the run half of a_run_that_cannot_see_your_files_says_how_it_can") {
        return;
    }
    std::fs::write(dir.path().join("script.py"), "print('ran')\n").unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--min-isolation",
            "container",
            "--backend",
            "container",
        ];
        args.extend(extra);
        cordon_testkit::cordon!()
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .run(&args)
    };
    let (code, _, err) = run(&["--", "python3", "script.py"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("`script.py` is a file of this directory") && err.contains("--workspace ."),
        "{err}"
    );
    // Root's directory: refused, pointing to the flag that works.
    let (code, _, err) = run(&["--work-dir", ".", "--", "python3", "script.py"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("--workspace"), "{err}");
    let (code, out, err) = run(&["--workspace", ".", "--", "python3", "script.py"]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
}

/// `doctor` names the backend a run uses under the floor, as the router
/// picks it (an opt-in backend above the floor only when named).
#[test]
fn doctor_names_the_backend_a_run_uses() {
    if !runs_as_root("doctor_names_the_backend_a_run_uses") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = as_user(dir.path(), &["doctor", "--min-isolation", "container"]);
    assert_eq!(code, 0, "{err}");
    let ok = out
        .lines()
        .find(|l| l.starts_with("ok: "))
        .expect("the ok line");
    assert!(ok.contains("a workload runs on `container`"), "{ok}");
    if out
        .lines()
        .any(|l| l.starts_with("gvisor") && l.contains("can run"))
    {
        assert!(ok.contains("only when named: `gvisor`"), "{ok}");
    }
    let (_, json, _) = as_user(
        dir.path(),
        &[
            "run",
            "--min-isolation",
            "container",
            "--format",
            "json",
            "--",
            "/bin/true",
        ],
    );
    assert!(json.contains("\"backend\":\"container\""), "{json}");
}

/// A user configuration another user could write is never obeyed (it can
/// only lower the floor): ignored, said, and the default floor holds.
#[test]
fn a_configuration_others_can_write_is_ignored_and_said() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = as_user(home.path(), &["setup", "--min-isolation", "process"]);
    assert_eq!(code, 0, "{err}");
    let file = home.path().join(".config/cordon/config.yaml");
    let (_, out, _) = as_user(home.path(), &["doctor"]);
    assert!(out.starts_with("floor: process"), "{out}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (_, out, err) = as_user(home.path(), &["doctor"]);
    assert!(
        out.starts_with("floor: microvm (from the default)"),
        "{out}"
    );
    assert!(
        err.contains("warning: ignoring") && err.contains("written by others"),
        "{err}"
    );
    // Written again by setup: its own, and obeyed.
    let (code, _, err) = as_user(home.path(), &["setup", "--min-isolation", "process"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = as_user(home.path(), &["doctor"]);
    assert!(out.starts_with("floor: process"), "{out}");
}
