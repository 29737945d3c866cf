//! The backend suite's ports case ([`crate::suite`]): a server the
//! workload runs is reached through `cordon sandbox port` as the policy's
//! ingress surface allows, refused naming the rule where it does not, the
//! forward opens no way out for the workload, and it ends with the
//! sandbox.

use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};

use crate::suite::Backend;

/// `GET path` over HTTP/1.0 at `addr`: the whole answer.
pub fn get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Writes `index.html` (`hello-from-the-sandbox`) into sandbox `h`'s work
/// dir and serves the work dir on its `127.0.0.1:8000` (`python3 -m
/// http.server`), as a running exec (its stderr piped).
pub fn serve_a_page(c: &crate::Cordon, h: &str) -> std::process::Child {
    let (code, _, err) = c.run([
        "sandbox",
        "exec",
        h,
        "--",
        "/bin/sh",
        "-c",
        "echo hello-from-the-sandbox > index.html",
    ]);
    assert_eq!(code, 0, "{err}");
    c.command([
        "sandbox",
        "exec",
        h,
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
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// `cordon sandbox port H PORT`, tried until the server in the sandbox
/// listens (60 s): the running forward and the host address it printed.
/// `None`: it never started (the last refusal is on stderr).
pub fn start_forward(
    c: &crate::Cordon,
    h: &str,
    port: u16,
) -> Option<(std::process::Child, String)> {
    let port = port.to_string();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let mut f = c
            .command(["sandbox", "port", h, &port])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(f.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if !line.trim().is_empty() {
            return Some((f, line.trim().to_string()));
        }
        let _ = f.wait();
        std::thread::sleep(Duration::from_millis(300));
    }
    None
}

/// A sandbox made with `--require ports` serves a page from its work dir
/// (`python3 -m http.server`, bound to its own loopback); `sandbox port`
/// refuses a non-loopback address under `cordon:default`, naming the rule,
/// then forwards `127.0.0.1:N` on the host to it; the workload cannot
/// reach that host address; `down` ends the forward (exit 0) and leaves
/// nothing.
pub fn a_port_is_forwarded_as_the_policy_allows_and_ends_with_the_sandbox(b: &Backend) {
    let name = b.name;
    let c = &b.cordon;
    let before = b.residue();
    let scope = format!("{name}-ports");
    let files = tempfile::tempdir().unwrap();
    let mut up = vec!["sandbox", "up", "--scope", &scope, "--thread", "web"];
    let land = b.land(files.path());
    up.extend(land.iter().map(String::as_str));
    up.extend(["--require", "ports"]);
    let (code, h, err) = c.run(&up);
    assert_eq!(code, 0, "{name}: {err}");
    let h = h.trim().to_string();
    let mut server = serve_a_page(c, &h);
    let (code, _, err) = c.run(["sandbox", "port", &h, "8000", "--listen", "0.0.0.0:0"]);
    assert!(
        code != 0
            && err.contains("ingress surface refuses")
            && err.contains("own-loopback-preview"),
        "{name}: {err}"
    );
    let Some((mut forward, addr)) = start_forward(c, &h, 8000) else {
        let _ = server.kill();
        let mut e = String::new();
        let _ = server.stderr.take().unwrap().read_to_string(&mut e);
        panic!("{name}: the forward never started; the server said: {e}");
    };
    assert!(addr.starts_with("127.0.0.1:"), "{name}: {addr}");
    let page = get(&addr, "/index.html").unwrap();
    assert!(page.contains("hello-from-the-sandbox"), "{name}: {page}");
    // Ingress only: the workload reaches nothing through it, the host's
    // address of the forward included.
    let reach = format!(
        "import socket\ns = socket.socket(); s.settimeout(3)\ntry:\n    s.connect(('127.0.0.1', {port}))\n    print('REACHED')\nexcept OSError as e:\n    print('refused', e)\n",
        port = addr.rsplit(':').next().unwrap()
    );
    let (_, out, err) = c.run(["sandbox", "exec", &h, "--", "python3", "-c", &reach]);
    assert!(
        out.contains("refused") && !out.contains("REACHED"),
        "{name}: {out}{err}"
    );
    let (code, _, err) = c.run(["sandbox", "down", &h]);
    assert_eq!(code, 0, "{name}: {err}");
    let until = Instant::now() + Duration::from_secs(30);
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
        "{name}: the forward outlived its sandbox: {ended:?}"
    );
    b.settles_to(&before, "after the ports case");
}
