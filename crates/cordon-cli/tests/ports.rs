//! Ports through the real binary at the container rung (issue 32), past
//! what the backend suite's ports case holds at every backend
//! (`cordon_testkit::suite_ports`: the page reached, a non-loopback
//! address refused, no way out, the forward ends with the sandbox): a
//! sandbox not made to listen cannot, and its forward is refused saying
//! how; another caller is refused naming the rule; `--format json`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::io::BufRead;
use std::path::Path;

use cordon_testkit::can_sandbox;
use cordon_testkit::suite_ports::{get, serve_a_page, start_forward};

fn cordon_in(dir: &Path) -> cordon_testkit::Cordon {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    cordon_testkit::cordon!().env("CORDON_STATE_DIR", &state)
}

#[test]
fn a_sandbox_not_made_to_listen_cannot_and_another_caller_is_refused() {
    if !can_sandbox("ports") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cordon_in(dir.path());
    let up = |thread: &str, extra: &[&str]| {
        let mut args = vec![
            "sandbox",
            "up",
            "--scope",
            "p",
            "--thread",
            thread,
            "--min-isolation",
            "container",
            "-q",
        ];
        args.extend_from_slice(extra);
        let (code, h, err) = c.run(&args);
        assert_eq!(code, 0, "{err}");
        h.trim().to_string()
    };
    // Made without `ports`: the workload may not listen, and a forward is
    // refused saying how to make one that may.
    let plain = up("plain", &[]);
    let (code, _, err) = c.run(["sandbox", "port", &plain, "8000"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("--require ports"), "{err}");
    let (code, out, _) = c.run([
        "sandbox",
        "exec",
        &plain,
        "--",
        "python3",
        "-c",
        "import socket; s=socket.socket(); s.bind(('127.0.0.1', 8000)); print('bound')",
    ]);
    assert!(
        code != 0 && !out.contains("bound"),
        "a sandbox without `ports` listened"
    );
    let (code, _, err) = c.run(["sandbox", "down", &plain]);
    assert_eq!(code, 0, "{err}");

    let h = up("web", &["--require", "ports"]);
    let mut server = serve_a_page(&c, &h);
    // Refused before anything listens on the host, the rule named: the
    // policy's `caller` (cordon:default: the sandbox's own namespace).
    let (code, _, err) = c.run([
        "sandbox",
        "port",
        &h,
        "8000",
        "--caller",
        "namespace=someone-else",
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("ingress surface refuses") && err.contains("caller.namespace was"),
        "{err}"
    );
    let (mut forward, addr) = start_forward(&c, &h, 8000).expect("the forward never started");
    let page = get(&addr, "/index.html").unwrap();
    assert!(page.contains("hello-from-the-sandbox"), "{page}");
    // `--format json`: one object once it listens.
    let mut json = c
        .command(["sandbox", "port", &h, "8000", "--format", "json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(json.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = json.kill();
    let _ = json.wait();
    let v: serde_json::Value = serde_json::from_str(&line).expect(&line);
    assert_eq!(
        (v["ok"].as_bool(), v["port"].as_u64()),
        (Some(true), Some(8000)),
        "{v}"
    );
    assert!(
        v["listen"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{v}"
    );
    let _ = forward.kill();
    let _ = forward.wait();
    let (code, _, err) = c.run(["sandbox", "down", &h]);
    assert_eq!(code, 0, "{err}");
    let _ = server.kill();
    let _ = server.wait();
}
