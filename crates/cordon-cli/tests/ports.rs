//! Ports through the real binary at the container rung (issue 32):
//! `cordon sandbox port H PORT` reaches a server the workload runs, as the
//! policy's ingress surface allows — refused, naming the rule, for another
//! caller or another address; refused for a sandbox not made to listen;
//! the workload gains no route out through it; the forward ends with the
//! sandbox.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use cordon_testkit::can_sandbox;

fn cordon_in(dir: &Path) -> cordon_testkit::Cordon {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    cordon_testkit::cordon!().env("CORDON_STATE_DIR", &state)
}

fn get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn a_port_is_reached_as_the_policy_allows_and_the_forward_ends_with_the_sandbox() {
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
    let (code, _, err) = c.run([
        "sandbox",
        "exec",
        &h,
        "--",
        "sh",
        "-c",
        "echo hello-from-the-sandbox > index.html",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut server = c
        .command([
            "sandbox",
            "exec",
            &h,
            "--",
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "127.0.0.1",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Refused before anything listens on the host, the rule named: the
    // policy's `listen` (cordon:default: loopback only) and `caller`.
    let (code, _, err) = c.run(["sandbox", "port", &h, "8000", "--listen", "0.0.0.0:0"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("ingress surface refuses")
            && err.contains("own-loopback-preview")
            && err.contains("listen was"),
        "{err}"
    );
    let (code, _, err) = c.run([
        "sandbox",
        "port",
        &h,
        "8000",
        "--caller",
        "namespace=someone-else",
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("caller.namespace was"), "{err}");
    // Allowed: the owner on loopback. Started once the server listens.
    let mut forward = None;
    let until = Instant::now() + Duration::from_secs(30);
    while forward.is_none() && Instant::now() < until {
        let mut f = c
            .command(["sandbox", "port", &h, "8000"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(f.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.trim().is_empty() {
            let _ = f.wait();
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        forward = Some((f, line.trim().to_string()));
    }
    let (mut forward, addr) = forward.expect("the forward never started");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
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
    // The forward is ingress only: the workload reaches nothing through
    // it, the host's address of the forward included.
    let reach = format!(
        "import socket\ns = socket.socket(); s.settimeout(3)\ntry:\n    s.connect(('127.0.0.1', {port}))\n    print('REACHED')\nexcept OSError as e:\n    print('refused', e)\n",
        port = addr.rsplit(':').next().unwrap()
    );
    let (_, out, _) = c.run(["sandbox", "exec", &h, "--", "python3", "-c", &reach]);
    assert!(out.contains("refused") && !out.contains("REACHED"), "{out}");
    // The forward ends when the sandbox does.
    let (code, _, err) = c.run(["sandbox", "down", &h]);
    assert_eq!(code, 0, "{err}");
    let until = Instant::now() + Duration::from_secs(15);
    while forward.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let ended = forward.try_wait().unwrap();
    if ended.is_none() {
        let _ = forward.kill();
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        ended.is_some_and(|s| s.success()),
        "the forward outlived its sandbox: {ended:?}"
    );
    assert!(get(&addr, "/").is_err(), "the host address still answers");
}
