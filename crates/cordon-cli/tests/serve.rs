//! `cordon serve` as a client sees it: a live server on loopback, its
//! configuration checked at start, every request's identity and scope
//! from its bearer token.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a failed setup step is a failed test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

fn sha256_hex(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

fn config(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("serve.yaml");
    std::fs::write(&p, body).expect("config");
    p
}

fn good_config() -> String {
    format!(
        "listen: 127.0.0.1:0\nmin_isolation: container\nsandboxes: {{state_dir: state, dispose_on_shutdown: true}}\ncredentials:\n  - name: a\n    token_sha256: {}\n    scope: team-a\n    identity: {{namespace: team-a, name: agent, attested: true}}\n  - name: b\n    token_sha256: {}\n    scope: team-b\n    identity: {{namespace: team-b, name: agent}}\n",
        sha256_hex("token-a"),
        sha256_hex("token-b")
    )
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    /// SIGTERM, so the server disposes of its sandboxes; SIGKILL only if it
    /// does not stop within ten seconds (a killed server leaves them).
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &std::path::Path) -> Server {
    start_under(&[], config)
}

/// `start`, the server run by `wrapper` (a command that execs the rest of
/// its arguments, such as `prlimit ... --`).
fn start_under(wrapper: &[&str], config: &std::path::Path) -> Server {
    let mut command = match wrapper.split_first() {
        None => Command::new(env!("CARGO_BIN_EXE_cordon")),
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(env!("CARGO_BIN_EXE_cordon"));
            c
        }
    };
    let mut child = command
        .args(["serve", "--config", config.to_str().expect("utf-8")])
        .env_remove("CORDON_MIN_ISOLATION")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cordon serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .or_else(|| line.trim().strip_prefix("listening on https://"))
        .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
        .to_string();
    Server { child, addr }
}

/// One HTTP/1.1 GET: the status and the body.
fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    request(addr, "GET", path, token, None)
}

/// One HTTP/1.1 POST of a JSON body: the status and the JSON answer.
fn post(
    addr: &str,
    path: &str,
    token: Option<&str>,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let (status, text) = request(addr, "POST", path, token, Some(&body.to_string()));
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (status, v)
}

/// One HTTP/1.1 request on its own connection: the status and the body
/// (the server answers with a length, not chunks, for these).
fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = body.map_or(String::new(), |b| {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        )
    });
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}{head}Connection: close\r\n\r\n{}",
        body.unwrap_or("")
    )
    .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text[9..12].parse().expect("a status");
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// The pid of the keeper process serving the sandbox `handle`.
fn keeper_of(handle: &str) -> u32 {
    let mark = format!("--handle={handle}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            cmdline
                .split(|b| *b == 0)
                .any(|a| a == mark.as_bytes())
                .then_some(pid)
        })
        .unwrap_or_else(|| panic!("no keeper serves `{handle}`"))
}

/// The server refuses to start under a policy this machine cannot hold.
fn cannot_hold(run: &dyn Fn(&str) -> (i32, String), dir: &std::path::Path, good: &str) {
    std::fs::write(
        dir.join("huge.yaml"),
        OWN_POLICY.replacen("  storage:\n", "    max_disk: 100TiB\n  storage:\n", 1),
    )
    .expect("policy");
    let (code, err) = run(&good.replace(
        "min_isolation: container\n",
        "min_isolation: container\npolicy: huge.yaml\n",
    ));
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("this machine cannot hold what the policy requires")
            && err.contains("max_disk"),
        "{err}"
    );
}

fn root() -> bool {
    cordon_testkit::runs_here(
        "cordon serve",
        (!cordon_testkit::is_root()).then_some("its backends need root"),
    )
}

#[test]
fn a_token_is_its_one_identity_and_no_token_is_none() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    assert_eq!(get(&server.addr, "/healthz", None), (200, "ok\n".into()));
    for bad in [None, Some("token-c"), Some(""), Some("token-a ")] {
        let (status, body) = get(&server.addr, "/v1/backends", bad);
        if bad == Some("token-a ") {
            // Surrounding space is not part of a token in a header value.
            assert_eq!(status, 200, "{body}");
            continue;
        }
        assert_eq!(status, 401, "{bad:?}: {body}");
        assert!(body.contains("Authorization: Bearer TOKEN"), "{body}");
    }
    for (token, scope) in [("token-a", "team-a"), ("token-b", "team-b")] {
        let (status, body) = get(&server.addr, "/v1/backends", Some(token));
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v["scope"], scope, "{body}");
        assert_eq!(v["identity"]["namespace"], scope, "{body}");
        assert_eq!(v["floor"], "container");
        assert!(
            v["backends"]
                .as_array()
                .is_some_and(|b| b.iter().any(|n| n == "container")),
            "{body}"
        );
        // Every registered backend, as `cordon doctor` shows it.
        let available = v["available"].as_array().expect("available");
        let row = |name: &str| {
            available
                .iter()
                .find(|r| r["name"] == name)
                .unwrap_or_else(|| panic!("no `{name}` in {body}"))
        };
        assert_eq!(
            (
                &row("container")["rung"],
                &row("container")["used"],
                &row("container")["runnable"]
            ),
            (&"container".into(), &true.into(), &true.into()),
            "{body}"
        );
        assert_eq!(row("process")["used"], false, "below the floor: {body}");
        assert_eq!(row("process")["admitted"], false, "{body}");
    }
    // The backends in the configuration's order of preference, and only those.
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(
        dir.path(),
        &good_config().replace(
            "min_isolation: container\n",
            "min_isolation: process\nbackends: [process]\n",
        ),
    ));
    let (status, body) = get(&server.addr, "/v1/backends", Some("token-a"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["backends"], serde_json::json!(["process"]), "{body}");
    let (status, made) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "p"}),
    );
    assert_eq!((status, &made["rung"]), (200, &"process".into()), "{made}");
    assert_eq!(made["warnings"], serde_json::json!([]), "{made}");
}

#[test]
fn a_configuration_that_does_not_hold_is_refused_at_start_with_its_position() {
    let dir = tempfile::tempdir().expect("dir");
    let run = |body: &str| {
        let out = cordon_testkit::cordon!()
            .command(["serve", "--config"])
            .arg(config(dir.path(), body))
            .output()
            .expect("cordon serve");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let good = good_config();
    let (code, err) = run(&good.replace("listen:", "listne:"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("serve.yaml:1:1: unknown field `listne`"),
        "{err}"
    );
    // A policy this machine cannot hold (a disk bound larger than the
    // filesystem under the scratch directory): refused before serving.
    if root() {
        cannot_hold(&run, dir.path(), &good);
    }
    // A backend cordon does not know.
    let (code, err) = run(&good.replace(
        "min_isolation: container\n",
        "min_isolation: container\nbackends: [contianer]\n",
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("backend `contianer` is not a backend cordon knows"),
        "{err}"
    );
    // A token bound to a client certificate needs mutual TLS.
    let (code, err) = run(&good.replace(
        "    scope: team-a\n",
        &format!(
            "    scope: team-a\n    client_cert_sha256: {}\n",
            sha256_hex("x")
        ),
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("needs mutual TLS: set `tls.client_ca`"),
        "{err}"
    );
    // The policy (cordon:default) does not stand on the required root.
    let (code, err) = run(&good.replace(
        "min_isolation: container\n",
        "min_isolation: container\npolicy_root: cordon:no-privilege\n",
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the policy's root layer is `cordon:default`, not `cordon:no-privilege`"),
        "{err}"
    );
    // An artifact bound that is not a bound.
    let (code, err) = run(&good.replace(
        "credentials:\n",
        "limits: {artifact_ttl_seconds: 0}\ncredentials:\n",
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`limits.artifact_ttl_seconds`: `0` is not a whole number above 0"),
        "{err}"
    );
    let (code, err) = run("credentials: []\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`credentials` is empty"), "{err}");
    let (code, err) = run(&good.replace(&sha256_hex("token-b"), "not-hex"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(":10:19: `token_sha256` must be 64 hexadecimal digits"),
        "{err}"
    );
    let (code, err) = run(&good.replace(&sha256_hex("token-b"), &sha256_hex("token-a")));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("given twice"), "{err}");
    let (code, err) = run(&good.replace("127.0.0.1:0", "localhost"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`listen`: `localhost` is not an address and port"),
        "{err}"
    );
    // The default floor: nothing here meets `microvm`; refused, not served.
    let (code, err) = run(&good.replace("min_isolation: container\n", ""));
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("microvm"), "{err}");
}

/// A credential reaches only the sandboxes of its own scope: another's
/// thread of the same name is not found, not disposed, and not told apart
/// from one that does not exist.
#[test]
fn a_credential_reaches_only_its_own_sandboxes() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let b = Some("token-b");
    let at = serde_json::json!({"thread": "t1"});
    let (status, made) = post(&server.addr, "/v1/sandboxes", a, at.clone());
    assert_eq!(status, 200, "{made}");
    assert_eq!(
        (made["backend"].as_str(), made["rung"].as_str()),
        (Some("container"), Some("container"))
    );
    let run = serde_json::json!({"thread": "t1", "argv": ["sh", "-c", "echo hi; cat; exit 3"], "stdin": "in\n"});
    let (status, out) = post(&server.addr, "/v1/sandboxes/exec", a, run.clone());
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["stdout"], "hi\nin\n");
    assert_eq!(out["status"]["code"], 3);
    // B names the same thread: its own scope holds nothing there.
    let (status, out) = post(&server.addr, "/v1/sandboxes/exec", b, run.clone());
    assert_eq!(status, 404, "{out}");
    let (status, never) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        b,
        serde_json::json!({"thread": "never-made", "argv": ["true"]}),
    );
    assert_eq!(
        (status, &never),
        (404, &out),
        "not told apart from a sandbox that does not exist"
    );
    let (status, gone) = post(&server.addr, "/v1/sandboxes/dispose", b, at.clone());
    assert_eq!((status, gone["disposed"].as_u64()), (200, Some(0)));
    // A request cannot name the scope or the identity.
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        b,
        serde_json::json!({"thread": "t1", "scope": "team-a", "argv": ["true"]}),
    );
    assert_eq!(status, 400, "{out}");
    let (status, out) = post(&server.addr, "/v1/sandboxes/exec", None, run.clone());
    assert_eq!(status, 401, "{out}");
    // A's sandbox is still there, and goes when A disposes of it.
    let (status, _) = post(&server.addr, "/v1/sandboxes/exec", a, run.clone());
    assert_eq!(status, 200);
    let (status, gone) = post(&server.addr, "/v1/sandboxes/dispose", a, at);
    assert_eq!((status, gone["disposed"].as_u64()), (200, Some(1)));
    let (status, _) = post(&server.addr, "/v1/sandboxes/exec", a, run);
    assert_eq!(status, 404);
}

/// A streamed exec: its lines arrive as the command writes them, `exit`
/// last; a client that hangs up kills the command.
#[test]
fn a_streamed_exec_arrives_as_written_and_dies_with_its_client() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "s"}),
    );
    assert_eq!(status, 200);
    let send = |argv: serde_json::Value| {
        let body = serde_json::json!({"thread": "s", "argv": argv, "stream": true}).to_string();
        let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
        write!(
            s,
            "POST /v1/sandboxes/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-a\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        BufReader::new(s)
    };
    // Each event is a line of its own between the chunk sizes.
    let events = |r: &mut BufReader<std::net::TcpStream>, want: usize| {
        let mut out = Vec::new();
        let mut line = String::new();
        while out.len() < want {
            line.clear();
            if r.read_line(&mut line).expect("read") == 0 {
                break;
            }
            if line.starts_with('{') {
                out.push(serde_json::from_str::<serde_json::Value>(line.trim()).expect("json"));
            }
        }
        out
    };
    let mut r = send(serde_json::json!([
        "sh",
        "-c",
        "echo one; sleep 1; echo two; exit 4"
    ]));
    let started = std::time::Instant::now();
    let first = events(&mut r, 1);
    assert_eq!(first[0]["data"], "one\n", "{first:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_millis(900),
        "not streamed: {:?}",
        started.elapsed()
    );
    let rest = events(&mut r, 2);
    assert_eq!(rest[0]["data"], "two\n");
    assert_eq!(
        (
            rest[1]["event"].as_str(),
            rest[1]["status"]["code"].as_i64()
        ),
        (Some("exit"), Some(4))
    );
    // Hang up on a long one: its `sleep` is gone within a second or two.
    let marker = "31.25";
    let mut r = send(serde_json::json!([
        "sh",
        "-c",
        format!("echo go; exec sleep {marker}")
    ]));
    assert_eq!(events(&mut r, 1)[0]["data"], "go\n");
    let sleeping = || {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == marker.as_bytes()))
            })
    };
    // `exec sleep` follows the echo; give it a moment under load.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !sleeping() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(sleeping(), "the command is not running");
    drop(r);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sleeping() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!sleeping(), "the command outlived its client");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "s"}),
    );
    assert_eq!(status, 200);
}

/// Files in, a thread disposed whole, and the three limits: each past its
/// bound answers `413` or `429` at once, saying what to do.
#[test]
fn files_threads_and_limits() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config()
        + "limits: {max_request_bytes: 2KiB, max_sandboxes: 2, requests_per_second: 20}\n";
    let server = start(&config(dir.path(), &body));
    let (a, b) = (Some("token-a"), Some("token-b"));
    let j = |v: serde_json::Value| v;
    for agent in ["one", "two"] {
        let (status, out) = post(
            &server.addr,
            "/v1/sandboxes",
            a,
            j(serde_json::json!({"thread": "t", "agent_dir": agent})),
        );
        assert_eq!(status, 200, "{out}");
    }
    // The same key again is the same sandbox, not a third.
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "t", "agent_dir": "one"}),
    );
    assert_eq!(status, 200);
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "t", "agent_dir": "three"}),
    );
    assert_eq!(status, 429, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("its limit"),
        "{out}"
    );
    // Files in: "hello" (base64) into the work dir, read back by a command.
    let file = serde_json::json!({"thread": "t", "agent_dir": "one", "path": "in.txt", "content_base64": "aGVsbG8="});
    let (status, out) = post(&server.addr, "/v1/sandboxes/files", a, file.clone());
    assert_eq!((status, out["bytes"].as_u64()), (200, Some(5)), "{out}");
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "t", "agent_dir": "one", "argv": ["cat", "in.txt"]}),
    );
    assert_eq!(
        (status, out["stdout"].as_str()),
        (200, Some("hello")),
        "{out}"
    );
    let (status, _) = post(&server.addr, "/v1/sandboxes/files", b, file);
    assert_eq!(status, 404, "another credential cannot write into it");
    // A body past max_request_bytes.
    let big = serde_json::json!({"thread": "t", "agent_dir": "one", "path": "big", "content_base64": "A".repeat(4096)});
    let (status, _) = request(
        &server.addr,
        "POST",
        "/v1/sandboxes/files",
        a,
        Some(&big.to_string()),
    );
    assert_eq!(status, 413);
    // The whole thread goes, each agent dir's sandbox.
    let (status, out) = post(
        &server.addr,
        "/v1/threads/dispose",
        a,
        serde_json::json!({"thread": "t"}),
    );
    assert_eq!((status, out["disposed"].as_u64()), (200, Some(2)), "{out}");
    // The rate: a burst of twice the rate passes, then 429 with Retry-After.
    let statuses: Vec<u16> = (0..60)
        .map(|_| get(&server.addr, "/v1/backends", b).0)
        .collect();
    assert!(statuses.iter().take(30).all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    // `/mcp` draws on the same budget: a client that speaks MCP cannot
    // get past the rate by changing doors. (Whatever the protocol answers
    // a bare POST, the budget answers first once it is spent.)
    let mcp: Vec<u16> = (0..100)
        .map(|_| request(&server.addr, "POST", "/mcp", a, Some("{}")).0)
        .collect();
    assert!(mcp.contains(&429), "{mcp:?}");
    assert!(mcp.iter().take(20).all(|s| *s != 429), "{mcp:?}");
}

/// The files API over HTTP: every operation on the caller's sandbox, a
/// link the workload planted never followed, the storage surface's rule
/// named in a refusal, and another credential's call the same `404` as a
/// missing sandbox.
#[test]
fn the_files_api_over_http() {
    if !root() {
        return;
    }
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let (a, b) = (Some("token-a"), Some("token-b"));
    let at = |extra: serde_json::Value| {
        let mut v = serde_json::json!({"thread": "f"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let call = |who, path: &str, extra: serde_json::Value| {
        post(
            &server.addr,
            &format!("/v1/sandboxes/files{path}"),
            who,
            at(extra),
        )
    };
    let (status, out) = post(&server.addr, "/v1/sandboxes", a, at(serde_json::json!({})));
    assert_eq!(status, 200, "{out}");
    // The workload plants a link to a host file and one to a directory.
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        at(
            serde_json::json!({"argv": ["sh", "-c", "ln -s /etc/passwd pw; ln -s /etc etc; echo ok"]}),
        ),
    );
    assert_eq!(
        (status, out["stdout"].as_str()),
        (200, Some("ok\n")),
        "{out}"
    );
    let (status, out) = call(a, "/mkdir", serde_json::json!({"path": "src/lib"}));
    assert_eq!(
        (status, &out["made"]),
        (200, &serde_json::json!(true)),
        "{out}"
    );
    let (status, out) = call(
        a,
        "",
        serde_json::json!({"path": "src/lib/a.txt", "content_base64": b64("hello")}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, out) = call(
        a,
        "",
        serde_json::json!({"path": "src/lib/a.txt", "content_base64": b64(" world"), "how": "append"}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, out) = call(
        a,
        "",
        serde_json::json!({"path": "src/lib/a.txt", "content_base64": b64("x"), "how": "create"}),
    );
    assert_eq!(status, 400, "create over an existing file: {out}");
    let (status, out) = call(
        a,
        "/read",
        serde_json::json!({"path": "src/lib/a.txt", "offset": 6, "length": 3}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        (out["content_base64"].as_str(), out["size"].as_u64()),
        (Some(b64("wor").as_str()), Some(11)),
        "{out}"
    );
    let (status, out) = call(a, "/list", serde_json::json!({"depth": 2}));
    assert_eq!(status, 200, "{out}");
    let listed: Vec<(String, String)> = out["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("src/lib/a.txt", "file"),
        ("pw", "symlink"),
        ("etc", "symlink"),
    ] {
        assert!(
            listed.contains(&(want.0.into(), want.1.into())),
            "{want:?} in {listed:?}"
        );
    }
    assert!(
        !listed.iter().any(|(p, _)| p.starts_with("etc/")),
        "a link followed: {listed:?}"
    );
    let (status, out) = call(a, "/stat", serde_json::json!({"path": "pw"}));
    assert_eq!(
        (status, out["entry"]["kind"].as_str()),
        (200, Some("symlink")),
        "{out}"
    );
    // Links are never followed: read, list, write, rename beneath them.
    for (path, body) in [
        ("/read", serde_json::json!({"path": "pw"})),
        ("/read", serde_json::json!({"path": "etc/hostname"})),
        ("/list", serde_json::json!({"path": "etc"})),
        (
            "",
            serde_json::json!({"path": "etc/cordon-x", "content_base64": b64("x")}),
        ),
        (
            "/rename",
            serde_json::json!({"from": "src/lib/a.txt", "to": "etc/cordon-x"}),
        ),
        ("/mkdir", serde_json::json!({"path": "etc/cordon-dir"})),
    ] {
        let (status, out) = call(a, path, body.clone());
        assert!(
            status == 403 || status == 400 || status == 404,
            "{path} {body}: {status} {out}"
        );
        assert!(!out.to_string().contains("root:x:0"), "{out}");
    }
    assert!(!std::path::Path::new("/etc/cordon-x").exists());
    assert!(!std::path::Path::new("/etc/cordon-dir").exists());
    // Removing a link removes the link, not what it names.
    let (status, out) = call(a, "/remove", serde_json::json!({"path": "pw"}));
    assert_eq!(
        (status, &out["removed"]),
        (200, &serde_json::json!(true)),
        "{out}"
    );
    assert!(std::path::Path::new("/etc/passwd").exists());
    let (status, out) = call(
        a,
        "/rename",
        serde_json::json!({"from": "src/lib/a.txt", "to": "b.txt"}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, out) = call(a, "/remove", serde_json::json!({"path": "src"}));
    assert_eq!(status, 400, "a directory without recursive: {out}");
    let (status, out) = call(
        a,
        "/remove",
        serde_json::json!({"path": "src", "recursive": true}),
    );
    assert_eq!(
        (status, &out["removed"]),
        (200, &serde_json::json!(true)),
        "{out}"
    );
    // The policy's storage surface decides, and its rule is named.
    let (status, out) = call(a, "/read", serde_json::json!({"path": "/etc/shadow"}));
    assert_eq!(status, 403, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("host-secrets"),
        "{out}"
    );
    let (status, out) = call(
        a,
        "/read",
        serde_json::json!({"path": "/workspace/../etc/passwd"}),
    );
    assert_eq!(status, 400, "{out}");
    // Another credential: the very answer a missing sandbox gets.
    let (status, theirs) = call(b, "/read", serde_json::json!({"path": "b.txt"}));
    let (missing_status, missing) = post(
        &server.addr,
        "/v1/sandboxes/files/read",
        a,
        serde_json::json!({"thread": "nope", "path": "b.txt"}),
    );
    assert_eq!((status, &theirs), (missing_status, &missing));
    assert_eq!(status, 404);
    let (status, out) = call(a, "/read", serde_json::json!({"path": "b.txt", "key": "x"}));
    assert_eq!(status, 400, "an unknown field: {out}");
}

/// A watch over HTTP: the workload's changes as NDJSON lines while the
/// request is open, `ended` when the sandbox goes; another credential's
/// watch is the `404` of a missing sandbox.
#[test]
fn a_watch_over_http_streams_changes_and_ends_with_the_sandbox() {
    if !root() {
        return;
    }
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "w"}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/files/watch",
        Some("token-b"),
        serde_json::json!({"thread": "w"}),
    );
    assert_eq!(status, 404);
    let body = serde_json::json!({"thread": "w", "recursive": true}).to_string();
    let mut conn = std::net::TcpStream::connect(&server.addr).expect("connect");
    write!(
        conn,
        "POST /v1/sandboxes/files/watch HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer token-a\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    )
    .expect("send");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = conn.try_clone().expect("clone");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut saw = |want: &str, within: std::time::Duration| {
        let until = std::time::Instant::now() + within;
        if seen.iter().any(|l: &String| l.contains(want)) {
            return true;
        }
        while let Ok(l) =
            rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
        {
            let hit = l.contains(want);
            seen.push(l);
            if hit {
                return true;
            }
        }
        false
    };
    let mut ready = false;
    for i in 0..40 {
        let (status, _) = post(
            &server.addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": "w", "argv": ["sh", "-c", format!(": > ready-{i}")]}),
        );
        assert_eq!(status, 200);
        if saw(
            &format!("\"path\":\"ready-{i}\""),
            std::time::Duration::from_millis(500),
        ) {
            ready = true;
            break;
        }
    }
    assert!(ready, "no event: {seen:?}");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "w", "argv": ["sh", "-c", "mkdir d && echo x > d/f && mv d/f d/g"]}),
    );
    assert_eq!(status, 200);
    let ten = std::time::Duration::from_secs(10);
    assert!(saw("\"to\":\"d/g\"", ten), "{seen:?}");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "w"}),
    );
    assert_eq!(status, 200);
    assert!(
        saw("\"event\":\"ended\"", std::time::Duration::from_secs(30)),
        "{seen:?}"
    );
}

/// A preview URL: `/v1/sandboxes/{thread}/ports/{port}/...` reaches a
/// server the owner's sandbox runs (made with `ports`), never with the
/// host's credential forwarded; another credential's is the `404` of a
/// missing sandbox; a port the policy does not allow is `403`, the rule
/// named.
#[test]
fn a_preview_url_reaches_the_owners_server_as_the_policy_allows() {
    if !root() {
        return;
    }
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let spec = "kind: run\nimage: host\nrequires: [exec, files_in, ports]\n";
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "web", "spec": spec}),
    );
    assert_eq!(status, 200, "{out}");
    // A server that answers with the path and whether a credential reached it.
    // A WebSocket's handshake is answered `101` and what follows echoed.
    let srv = "import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    protocol_version = 'HTTP/1.1'\n    def do_GET(self):\n        if self.headers.get('Upgrade') == 'websocket':\n            self.send_response(101); self.send_header('Upgrade', 'websocket'); self.send_header('Connection', 'Upgrade'); self.end_headers(); self.wfile.flush()\n            while True:\n                b = self.connection.recv(4096)\n                if not b: return\n                self.connection.sendall(b'echo:' + b)\n        body = ('path=%s auth=%s hop=%s' % (self.path, self.headers.get('Authorization'), self.headers.get('X-Hop'))).encode()\n        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)\nhttp.server.ThreadingHTTPServer(('127.0.0.1', 8000), H).serve_forever()\n";
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/files",
        a,
        serde_json::json!({"thread": "web", "path": "srv.py", "content_base64": base64::engine::general_purpose::STANDARD.encode(srv)}),
    );
    assert_eq!(status, 200, "{out}");
    let addr = server.addr.clone();
    let running = std::thread::spawn(move || {
        request(
            &addr,
            "POST",
            "/v1/sandboxes/exec",
            Some("token-a"),
            Some(&serde_json::json!({"thread": "web", "argv": ["python3", "srv.py"], "stream": true, "timeout_seconds": 60}).to_string()),
        )
    });
    let mut got = (0, String::new());
    for _ in 0..50 {
        got = request(
            &server.addr,
            "GET",
            "/v1/sandboxes/web/ports/8000/hello?x=1",
            a,
            None,
        );
        if got.0 == 200 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(got.0, 200, "{}", got.1);
    assert!(
        got.1.contains("path=/hello?x=1") && got.1.contains("auth=None"),
        "{}",
        got.1
    );
    let (status, _) = request(
        &server.addr,
        "GET",
        "/v1/sandboxes/web/ports/8000/",
        a,
        None,
    );
    assert_eq!(status, 200);
    // A header the request's own `Connection` names is hop-by-hop: it
    // does not reach the sandbox.
    let raw = |head: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        (s, got)
    };
    let (mut hop, got) = raw("GET /v1/sandboxes/web/ports/8000/h HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-a\r\nConnection: close, X-Hop\r\nX-Hop: secret\r\n\r\n");
    let mut answer = String::from_utf8_lossy(&got).to_string();
    {
        use std::io::Read;
        let _ = hop.read_to_string(&mut answer);
    }
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("hop=None"), "{answer}");
    // A WebSocket: switched (`101`), then bytes both ways, unread by cordon.
    let (mut ws, got) = raw("GET /v1/sandboxes/web/ports/8000/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    {
        use std::io::{Read, Write};
        for word in ["ping", "pong"] {
            ws.write_all(word.as_bytes()).unwrap();
            let mut buf = [0u8; 64];
            let n = ws.read(&mut buf).unwrap();
            assert_eq!(&buf[..n], format!("echo:{word}").as_bytes());
        }
    }
    // Joined connections are bounded per credential (16): the next is 429
    // until one closes.
    let handshake = "GET /v1/sandboxes/web/ports/8000/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let mut held: Vec<std::net::TcpStream> = (0..15).map(|_| raw(handshake).0).collect();
    held.push(ws);
    let (_, got) = raw(handshake);
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    drop(held.pop());
    let mut ok = false;
    for _ in 0..50 {
        let (_, got) = raw(handshake);
        if String::from_utf8_lossy(&got).starts_with("HTTP/1.1 101") {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        ok,
        "a joined connection's place was not given back when it closed"
    );
    drop(held);
    // Another credential: the very answer a missing sandbox gets.
    let theirs = request(
        &server.addr,
        "GET",
        "/v1/sandboxes/web/ports/8000/hello",
        Some("token-b"),
        None,
    );
    let missing = request(
        &server.addr,
        "GET",
        "/v1/sandboxes/nope/ports/8000/hello",
        a,
        None,
    );
    assert_eq!(theirs, missing);
    assert_eq!(theirs.0, 404);
    assert_eq!(
        request(
            &server.addr,
            "GET",
            "/v1/sandboxes/web/ports/8000/",
            None,
            None
        )
        .0,
        401
    );
    // A privileged port: refused by the ingress surface, the rule named.
    let (status, out) = request(&server.addr, "GET", "/v1/sandboxes/web/ports/80/", a, None);
    assert_eq!(status, 403, "{out}");
    assert!(out.contains("own-loopback-preview"), "{out}");
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "web"}),
    );
    assert_eq!(status, 200);
    let _ = running.join();
}

/// The per-credential cap counts every replica's sandboxes from the state
/// directory; when that cannot be listed, a create is refused (`503`,
/// saying why), never counted against this server's own alone, which
/// would let the cap fail open across replicas.
#[test]
fn a_state_directory_that_cannot_be_listed_refuses_new_sandboxes() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config() + "limits: {max_sandboxes: 2}\n";
    let server = start(&config(dir.path(), &body));
    let at = |agent: &str| serde_json::json!({"thread": "t", "agent_dir": agent});
    let (status, out) = post(&server.addr, "/v1/sandboxes", Some("token-a"), at("one"));
    assert_eq!(status, 200, "{out}");
    let records = dir.path().join("state/sandboxes");
    let moved = dir.path().join("state/sandboxes.moved");
    std::fs::rename(&records, &moved).expect("move the records aside");
    std::fs::write(&records, "not a directory").expect("a file in its place");
    let (status, out) = post(&server.addr, "/v1/sandboxes", Some("token-a"), at("two"));
    std::fs::remove_file(&records).expect("remove the file");
    std::fs::rename(&moved, &records).expect("put the records back");
    assert_eq!(status, 503, "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot count this credential's sandboxes"),
        "{out}"
    );
    // Listed again, the cap counts again: one held, one more may be made.
    let (status, out) = post(&server.addr, "/v1/sandboxes", Some("token-a"), at("two"));
    assert_eq!(status, 200, "{out}");
    let (status, out) = post(&server.addr, "/v1/sandboxes", Some("token-a"), at("three"));
    assert_eq!(status, 429, "{out}");
}

/// The OpenAPI document the server serves is the one in the repository,
/// and every path and method in it is one the running server answers.
#[test]
fn the_openapi_document_is_served_and_matches_the_server() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let (status, served) = get(&server.addr, "/openapi.json", None);
    assert_eq!(status, 200);
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cordon-serve/openapi/openapi.json"
    );
    assert_eq!(served, std::fs::read_to_string(file).expect("openapi.json"));
    let doc: serde_json::Value = serde_json::from_str(&served).expect("JSON");
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 8, "{paths:?}");
    for (path, methods) in paths {
        for method in methods.as_object().expect("methods").keys() {
            let body = (method == "post").then_some("{}");
            let (status, text) = request(
                &server.addr,
                &method.to_uppercase(),
                path,
                Some("token-a"),
                body,
            );
            // A route the server lacks is axum's bare 404 (no body); the
            // handlers' own 404s say what is missing.
            assert!(
                status != 405 && !(status == 404 && text.is_empty()),
                "{method} {path}: {status} {text}"
            );
        }
    }
}

/// Outputs come back as `display` lines and handles; a handle fetches the
/// bytes for the scope that collected them and for no other.
#[test]
fn outputs_land_as_display_lines_and_handles_of_one_scope() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let (a, b) = (Some("token-a"), Some("token-b"));
    let spec = "kind: report\nimage: host\ndeclared_outputs:\n  - {path: out/result.txt, media_type: text/plain}\nfiles_out: {max_bytes_per_file: 1KiB, max_total_bytes: 1KiB, max_files: 1}\n";
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "o", "spec": spec}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "o", "argv": ["sh", "-c", "mkdir -p out && echo 42 > out/result.txt"]}),
    );
    assert_eq!(
        (status, out["status"]["code"].as_i64()),
        (200, Some(0)),
        "{out}"
    );
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/outputs",
        a,
        serde_json::json!({"thread": "o"}),
    );
    assert_eq!(status, 200, "{out}");
    let landed = &out["landed"][0];
    let display = landed["display"].as_str().expect("display");
    assert!(
        display.contains("out/result.txt") && !display.contains("/tmp"),
        "{display}"
    );
    let handle = landed["handle"].as_str().expect("handle");
    let (status, _) = get(&server.addr, &format!("/v1/artifacts/{handle}"), b);
    assert_eq!(status, 404, "another scope cannot fetch it");
    assert_eq!(
        get(&server.addr, &format!("/v1/artifacts/{handle}"), a),
        (200, "42\n".into())
    );
    // Fetched is gone: a handle is good for one fetch.
    let (status, _) = get(&server.addr, &format!("/v1/artifacts/{handle}"), a);
    assert_eq!(status, 404, "a fetched artifact is evicted");
    let (status, _) = get(
        &server.addr,
        "/v1/artifacts/0123456789abcdef0123456789abcdef",
        a,
    );
    assert_eq!(status, 404);
    // B's same thread holds no sandbox: its collect is the same 404.
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/outputs",
        b,
        serde_json::json!({"thread": "o"}),
    );
    assert_eq!(status, 404);
}

/// The old, predictable place a server landed artifacts (before issue 28).
fn old_artifacts_path(pid: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cordon-serve-{pid}-artifacts"))
}

/// Where a running server lands artifacts: the directory it holds open
/// (`cordon-serve-artifacts-…`), else — a server before issue 28 — the
/// predictable path.
fn artifacts_dir(server: &Server) -> Option<std::path::PathBuf> {
    let pid = server.child.id();
    let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("cordon-serve-artifacts-"))
        });
    held.or_else(|| {
        let p = old_artifacts_path(pid);
        p.exists().then_some(p)
    })
}

/// Every file (links included, none followed) beneath `dir`.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// Makes `thread`'s sandbox of credential `token` with a spec declaring
/// `outputs` (landing as their paths), runs `script` in it: then
/// collects, and answers what the collect answered.
fn collect_after(
    addr: &str,
    token: &str,
    thread: &str,
    outputs: &[&str],
    script: &str,
) -> (u16, serde_json::Value) {
    let declared: String = outputs
        .iter()
        .map(|o| format!("  - {{path: {o}, media_type: text/plain}}\n"))
        .collect();
    let spec = format!(
        "kind: report\nimage: host\ndeclared_outputs:\n{declared}files_out: {{max_bytes_per_file: 64KiB, max_total_bytes: 64KiB, max_files: 4}}\n"
    );
    let t = Some(token);
    let (status, out) = post(
        addr,
        "/v1/sandboxes",
        t,
        serde_json::json!({"thread": thread, "spec": spec}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, out) = post(
        addr,
        "/v1/sandboxes/exec",
        t,
        serde_json::json!({"thread": thread, "argv": ["sh", "-c", script]}),
    );
    assert_eq!(
        (status, out["status"]["code"].as_i64()),
        (200, Some(0)),
        "{out}"
    );
    post(
        addr,
        "/v1/sandboxes/outputs",
        t,
        serde_json::json!({"thread": thread}),
    )
}

/// Issue 28: artifacts land in a directory the server makes (never one it
/// finds), with a name no one can guess, that only its user can enter;
/// each file 0600.
#[test]
fn artifacts_land_in_a_fresh_directory_only_the_server_can_enter() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let pid = server.child.id();
    // A local user makes the old predictable directory first, open to all.
    let planted = old_artifacts_path(pid);
    std::fs::create_dir(&planted).expect("plant");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
    let (status, out) = collect_after(
        &server.addr,
        "token-a",
        "fresh",
        &["out/r.txt"],
        "mkdir -p out && printf tenant-a > out/r.txt",
    );
    let adopted = files_under(&planted);
    let _ = std::fs::remove_dir_all(&planted);
    assert_eq!(status, 200, "{out}");
    assert!(
        adopted.is_empty(),
        "the server landed a tenant's output in a directory another user made: {adopted:?}"
    );
    let root = artifacts_dir(&server).expect("the server holds its artifacts directory open");
    let name = root
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .to_string();
    assert!(
        !name.contains(&pid.to_string()) && name.len() >= "cordon-serve-artifacts-".len() + 32,
        "a predictable name: {name}"
    );
    let m = std::fs::symlink_metadata(&root).expect("stat");
    assert!(m.is_dir(), "{}", root.display());
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (0, 0o700),
        "{}",
        root.display()
    );
    let files = files_under(&root);
    assert_eq!(files.len(), 1, "{files:?}");
    let f = std::fs::symlink_metadata(&files[0]).expect("stat");
    assert!(f.is_file());
    assert_eq!(f.mode() & 0o7777, 0o600, "{}", files[0].display());
}

/// Issue 28: a link swapped in under a landed artifact — the file itself,
/// or a directory on its path — is refused at fetch, not followed.
#[test]
fn a_link_swapped_under_a_landed_artifact_is_refused_not_followed() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "not-yours").expect("secret");
    let (status, out) = collect_after(
        &server.addr,
        "token-a",
        "swap",
        &["out/r.txt", "t.txt"],
        "mkdir -p out && printf r > out/r.txt && printf t > t.txt",
    );
    assert_eq!(status, 200, "{out}");
    let handle = |i: usize| {
        out["landed"][i]["handle"]
            .as_str()
            .expect("handle")
            .to_string()
    };
    let (r, t) = (handle(0), handle(1));
    let root = artifacts_dir(&server).expect("the server's artifacts directory");
    let files = files_under(&root);
    let find = |suffix: &str| {
        files
            .iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no `{suffix}` in {files:?}"))
            .clone()
    };
    let (r_path, t_path) = (find("/out/r.txt"), find("/t.txt"));
    // The directory `out` swapped for a link to one holding `r.txt`, a
    // link to the secret.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    std::os::unix::fs::symlink(&secret, elsewhere.join("r.txt")).expect("link");
    let out_dir = r_path.parent().expect("out");
    std::fs::remove_dir_all(out_dir).expect("rm out");
    std::os::unix::fs::symlink(&elsewhere, out_dir).expect("swap out");
    // The file itself swapped for a link to the secret.
    std::fs::remove_file(&t_path).expect("rm t");
    std::os::unix::fs::symlink(&secret, &t_path).expect("swap t");
    for h in [r, t] {
        let (status, body) = get(&server.addr, &format!("/v1/artifacts/{h}"), Some("token-a"));
        assert!(
            status != 200 && !body.contains("not-yours"),
            "a link under the artifacts was followed: {status} {body}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&secret).expect("the secret"),
        "not-yours",
        "the file a link pointed at is left alone"
    );
}

/// Issue 28: a credential's landed artifacts are bounded (bytes: 413,
/// count: 429, each saying what to do, nothing partly landed left), a
/// fetched one is gone, an unfetched one expires, and nothing is left
/// after shutdown.
#[test]
fn artifact_storage_is_bounded_per_credential_and_evicted() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config().replace(
        "credentials:\n",
        "limits: {max_artifact_bytes: 4KiB, max_artifacts: 2, artifact_ttl_seconds: 3}\ncredentials:\n",
    );
    let mut server = start(&config(dir.path(), &body));
    let (addr, a) = (server.addr.clone(), "token-a");
    let kb = "head -c 1000 /dev/zero > out/r.txt";
    let (status, first) = collect_after(
        &addr,
        a,
        "cap",
        &["out/r.txt"],
        &format!("mkdir -p out && {kb}"),
    );
    assert_eq!(status, 200, "{first}");
    let collect = || {
        post(
            &addr,
            "/v1/sandboxes/outputs",
            Some(a),
            serde_json::json!({"thread": "cap"}),
        )
    };
    let (status, second) = collect();
    assert_eq!(status, 200, "{second}");
    let root = artifacts_dir(&server).expect("the server's artifacts directory");
    assert_eq!(files_under(&root).len(), 2);
    // Past the count: 429, saying to fetch or wait.
    let (status, refused) = collect();
    assert_eq!(status, 429, "{refused}");
    let msg = refused["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("max_artifacts") && msg.contains("fetch"),
        "{msg}"
    );
    assert_eq!(
        files_under(&root).len(),
        2,
        "a refused collection left files"
    );
    // A fetch frees its room; then more bytes than are left: 413.
    let h1 = first["landed"][0]["handle"].as_str().expect("handle");
    assert_eq!(get(&addr, &format!("/v1/artifacts/{h1}"), Some(a)).0, 200);
    let (status, out) = post(
        &addr,
        "/v1/sandboxes/exec",
        Some(a),
        serde_json::json!({"thread": "cap", "argv": ["sh", "-c", "head -c 5000 /dev/zero > out/r.txt"]}),
    );
    assert_eq!(status, 200, "{out}");
    let (status, refused) = collect();
    assert_eq!(status, 413, "{refused}");
    let msg = refused["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("max_artifact_bytes") && msg.contains("fetch"),
        "{msg}"
    );
    assert_eq!(
        files_under(&root).len(),
        1,
        "a refused collection left files"
    );
    // Another credential's budget is its own.
    let (status, other) = collect_after(
        &addr,
        "token-b",
        "cap",
        &["out/r.txt"],
        &format!("mkdir -p out && {kb}"),
    );
    assert_eq!(status, 200, "{other}");
    assert_eq!(files_under(&root).len(), 2);
    // Unfetched, they expire: gone from disk without another request, then
    // their handles are 404.
    let h2 = second["landed"][0]["handle"].as_str().expect("handle");
    std::thread::sleep(std::time::Duration::from_millis(5500));
    assert_eq!(
        files_under(&root),
        Vec::<std::path::PathBuf>::new(),
        "expired artifacts stayed"
    );
    assert_eq!(get(&addr, &format!("/v1/artifacts/{h2}"), Some(a)).0, 404);
    // Land one more and stop the server: nothing of its artifacts is left.
    let (status, out) = collect_after(
        &addr,
        a,
        "cap2",
        &["out/r.txt"],
        &format!("mkdir -p out && {kb}"),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(files_under(&root).len(), 1);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let code = server.child.wait().expect("wait").code();
    assert_eq!(code, Some(0));
    assert!(!root.exists(), "`{}` outlived the server", root.display());
}

/// `/metrics` needs a credential: a tenant sees its own scope's series, an
/// operator every scope's.
#[test]
fn metrics_show_a_tenant_its_own_series_and_an_operator_all() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config()
        + &format!(
            "  - name: ops\n    token_sha256: {}\n    scope: ops\n    operator: true\n    identity: {{namespace: ops, name: operator}}\n",
            sha256_hex("token-ops")
        );
    let body = body.replace("limits:", "limits_unused:");
    let server = start(&config(dir.path(), &body));
    for (token, thread) in [("token-a", "m"), ("token-b", "m")] {
        let (status, _) = post(
            &server.addr,
            "/v1/sandboxes",
            Some(token),
            serde_json::json!({"thread": thread}),
        );
        assert_eq!(status, 200);
        let (status, _) = post(
            &server.addr,
            "/v1/sandboxes/exec",
            Some(token),
            serde_json::json!({"thread": thread, "argv": ["true"]}),
        );
        assert_eq!(status, 200);
    }
    let (status, _) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        Some("token-a"),
        serde_json::json!({"thread": "none", "argv": ["true"]}),
    );
    assert_eq!(status, 404);
    assert_eq!(get(&server.addr, "/metrics", None).0, 401);
    let (status, a) = get(&server.addr, "/metrics", Some("token-a"));
    assert_eq!(status, 200);
    assert!(
        a.contains("cordon_sandboxes_created_total{scope=\"team-a\",rung=\"container\"} 1"),
        "{a}"
    );
    assert!(
        a.contains("cordon_exec_seconds_count{scope=\"team-a\"} 1"),
        "{a}"
    );
    assert!(
        a.contains("cordon_requests_refused_total{scope=\"team-a\",status=\"404\"} 1"),
        "{a}"
    );
    assert!(!a.contains("team-b"), "a tenant sees another's series: {a}");
    let (status, ops) = get(&server.addr, "/metrics", Some("token-ops"));
    assert_eq!(status, 200);
    assert!(
        ops.contains("scope=\"team-a\"") && ops.contains("scope=\"team-b\""),
        "{ops}"
    );
}

/// SIGTERM: the running exec finishes and is answered, then the server
/// exits 0 having disposed of its sandboxes.
#[test]
fn a_terminated_server_finishes_what_runs_and_disposes_of_its_sandboxes() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let mut server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let (status, made) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "g"}),
    );
    assert_eq!(status, 200);
    // The sandbox is kept: its volume is named with its keeper's pid.
    let keeper = keeper_of(made["handle"].as_str().expect("handle"));
    let volume = format!("/cordon-volume-{keeper}-");
    let volume_mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&volume)
    };
    assert!(volume_mounted(), "the sandbox has no volume to check");
    let addr = server.addr.clone();
    let running = std::thread::spawn(move || {
        post(
            &addr,
            "/v1/sandboxes/exec",
            Some("token-a"),
            serde_json::json!({"thread": "g", "argv": ["sh", "-c", "sleep 1; echo finished; exec sleep 0.0625"]}),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let (status, out) = running.join().expect("the exec's client");
    assert_eq!(
        (status, out["stdout"].as_str()),
        (200, Some("finished\n")),
        "{out}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let code = loop {
        if let Some(s) = server.child.try_wait().expect("wait") {
            break s.code();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
    // Nothing of the sandbox is left: its work dir volume (named with the
    // server's pid) is unmounted.
    assert!(
        !volume_mounted(),
        "the sandbox's volume outlived the server"
    );
    // (Landed artifacts going with the server is held by
    // `artifact_storage_is_bounded_per_credential_and_evicted`, which makes
    // some first: this server landed none.)
}

/// Node (for the TypeScript client): `/usr/bin/node`,
/// `/usr/local/bin/node`, else the first on `PATH`.
fn node_binary() -> Option<std::path::PathBuf> {
    ["/usr/bin/node", "/usr/local/bin/node"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("node"))
                .find(|p| p.is_file())
        })
}

/// A live server for a client's own tests: the test credentials, a
/// snapshot store, and a project (`projects/p1`, one file) beneath the one
/// workspace root it allows. The directory goes when the first is dropped.
fn client_server() -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let dir = tempfile::tempdir().expect("dir");
    // A project beneath the one workspace root this server allows.
    let project = dir.path().join("projects/p1");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("notes.md"), "# notes\n").expect("project file");
    let body = good_config().replace(
        "sandboxes: {state_dir: state, dispose_on_shutdown: true}",
        &format!(
            "sandboxes: {{state_dir: state, dispose_on_shutdown: true, workspace_roots: [projects]}}\nsnapshots: {{dir: {}}}",
            dir.path().join("snapshots").display()
        ),
    );
    assert!(body.contains("workspace_roots"));
    let server = start(&config(dir.path(), &body));
    (dir, project, server)
}

/// The Python client's own tests, against this live server.
#[test]
fn the_python_client_passes_its_tests_against_a_live_server() {
    if !root() {
        return;
    }
    let (_dir, project, server) = client_server();
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
        .current_dir(client)
        .env("CORDON_URL", format!("http://{}", server.addr))
        .env("CORDON_TOKEN_A", "token-a")
        .env("CORDON_TOKEN_B", "token-b")
        .env("CORDON_WORKSPACE", &project)
        .output()
        .expect("python3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Ran 15 tests") && !err.contains("skipped"),
        "{err}"
    );
}

/// The TypeScript client's own tests (`node --test`, no packages), against
/// this live server.
#[test]
fn the_typescript_client_passes_its_tests_against_a_live_server() {
    if !root() {
        return;
    }
    let Some(node) = node_binary() else {
        cordon_testkit::skip(
            "the TypeScript client's tests",
            "needs node (18 or later), on PATH or /usr/bin/node",
        );
        return;
    };
    let (_dir, project, server) = client_server();
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript");
    let out = Command::new(&node)
        .args(["--test", "test/"])
        .current_dir(client)
        .env("CORDON_URL", format!("http://{}", server.addr))
        .env("CORDON_TOKEN_A", "token-a")
        .env("CORDON_TOKEN_B", "token-b")
        .env("CORDON_WORKSPACE", &project)
        .output()
        .expect("node");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The summary: `# pass 11` (TAP, Node 18 and 20 off a terminal) or
    // `ℹ pass 11` (the spec reporter, later Nodes).
    let count = |what: &str| {
        text.lines()
            .find_map(|l| {
                let l = l.trim_start_matches(['#', 'ℹ', ' ']);
                l.strip_prefix(what)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<u32>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no `{what}` count in:\n{text}"))
    };
    assert_eq!(
        (
            count("tests"),
            count("pass"),
            count("fail"),
            count("skipped")
        ),
        (11, 11, 0, 0),
        "{text}"
    );
}

// ---- MCP ---------------------------------------------------------------

/// The `mcp` package from PyPI (pinned), in a venv of its own kept across
/// runs: a real MCP client that no one at cordon wrote. `None` (a loud
/// skip) outside CI when it cannot be installed; in CI that is a failure.
fn mcp_python() -> Option<std::path::PathBuf> {
    const VERSION: &str = "2.3.0";
    let venv = std::path::PathBuf::from(format!("/var/tmp/cordon-mcp-venv-{VERSION}"));
    let python = venv.join("bin/python");
    let ready = || {
        Command::new(&python)
            .args(["-c", "import mcp, httpx2"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ready() {
        let made = Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", &format!("mcp=={VERSION}")])
                .status()
                .is_ok_and(|s| s.success());
        if !made || !ready() {
            cordon_testkit::skip(
                "MCP client tests",
                format!(
                    "cannot install mcp=={VERSION} from PyPI into {}",
                    venv.display()
                ),
            );
            return None;
        }
    }
    Some(python)
}

/// Runs tests/mcp/client.py: `calls` (tool name, arguments) in one session;
/// the tools listed (name → input schema) and each call's (is_error, text).
fn mcp_client(
    python: &std::path::Path,
    args: &[&str],
    calls: serde_json::Value,
) -> (serde_json::Value, Vec<(bool, String)>) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let mut child = Command::new(python)
        .arg(script)
        .args(args)
        .env_remove("CORDON_MIN_ISOLATION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the MCP client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(calls.to_string().as_bytes())
        .expect("calls");
    let out = child.wait_with_output().expect("the MCP client");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the MCP client failed:\n{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let results = v["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            (
                c["is_error"].as_bool().expect("is_error"),
                c["text"].as_str().expect("text").to_string(),
            )
        })
        .collect();
    (v["tools"].clone(), results)
}

fn tool_names(tools: &serde_json::Value) -> Vec<String> {
    let mut n: Vec<String> = tools.as_object().expect("tools").keys().cloned().collect();
    n.sort();
    n
}

#[test]
fn cordon_mcp_on_stdio_serves_one_sandbox_bound_by_its_command_line() {
    if !root() {
        return;
    }
    let Some(python) = mcp_python() else { return };
    let cordon = env!("CARGO_BIN_EXE_cordon");
    let (tools, r) = mcp_client(
        &python,
        &[
            "stdio",
            cordon,
            "mcp",
            "--scope",
            "team-a",
            "--thread",
            "t-1",
            "--min-isolation",
            "container",
            "--quiet",
        ],
        serde_json::json!([
            ["exec", {"argv": ["sh", "-c", "echo hi; pwd"]}],
            ["write_file", {"path": "notes/a.txt", "content": "hello"}],
            ["read_file", {"path": "notes/a.txt"}],
            ["run_code", {"language": "python", "source": "print(open('notes/a.txt').read() * 2)"}],
            // What a model might try: name another sandbox, read the host.
            ["exec", {"argv": ["true"], "thread": "t-2"}],
            ["exec", {"argv": ["true"], "scope": "team-b"}],
            ["read_file", {"path": "/etc/shadow"}],
            ["read_file", {"path": "../../etc/passwd"}],
            ["list_files", {}],
            ["run_code", {"language": "perl", "source": "1"}],
            ["exec", {"argv": ["sh", "-c", "exit 3"]}],
        ]),
    );
    // The default MCP spec: what every backend holds, the files API too.
    assert_eq!(
        tool_names(&tools),
        [
            "exec",
            "list_files",
            "read_file",
            "remove_file",
            "run_code",
            "write_file"
        ]
    );
    for (name, schema) in tools.as_object().expect("tools") {
        assert_eq!(schema["additionalProperties"], false, "{name}");
    }
    assert!(!r[0].0 && r[0].1.contains("hi\\n/workspace"), "{:?}", r[0]);
    assert!(
        !r[1].0 && r[1].1.contains("/workspace/notes/a.txt"),
        "{:?}",
        r[1]
    );
    assert!(
        !r[2].0 && r[2].1.contains("\"text\": \"hello\""),
        "{:?}",
        r[2]
    );
    assert!(!r[3].0 && r[3].1.contains("hellohello"), "{:?}", r[3]);
    assert!(
        r[4].0 && r[4].1.contains("no argument `thread`"),
        "{:?}",
        r[4]
    );
    assert!(
        r[5].0 && r[5].1.contains("no argument `scope`"),
        "{:?}",
        r[5]
    );
    // Decided by the policy's storage surface, its rule named.
    assert!(
        r[6].0 && r[6].1.contains("storage surface refuses") && r[6].1.contains("host-secrets"),
        "{:?}",
        r[6]
    );
    assert!(r[7].0, "{:?}", r[7]);
    assert!(
        !r[8].0 && r[8].1.contains("\"path\": \"notes\"") && r[8].1.contains("\"kind\": \"dir\""),
        "{:?}",
        r[8]
    );
    assert!(
        r[9].0 && r[9].1.contains("must be one of python"),
        "{:?}",
        r[9]
    );
    assert!(
        !r[10].0 && r[10].1.contains("\"exit_code\": 3"),
        "{:?}",
        r[10]
    );
    // A second client of the same thread finds nothing: the first one's
    // sandbox went when its client closed stdio.
    let (_, again) = mcp_client(
        &python,
        &[
            "stdio",
            cordon,
            "mcp",
            "--scope",
            "team-a",
            "--thread",
            "t-1",
            "--min-isolation",
            "container",
            "--quiet",
        ],
        serde_json::json!([["read_file", {"path": "notes/a.txt"}]]),
    );
    assert!(
        again[0].0 && again[0].1.contains("does not exist"),
        "{:?}",
        again[0]
    );
}

#[test]
fn mcp_over_http_binds_each_request_to_its_credential_and_thread_headers() {
    if !root() {
        return;
    }
    let Some(python) = mcp_python() else { return };
    let dir = tempfile::tempdir().expect("dir");
    // A spec with a declared output: collect_outputs is offered, and its
    // result carries display lines, never the host's handles.
    std::fs::write(
        dir.path().join("mcp-spec.yaml"),
        "kind: report\nimage: host\nrequires: [exec, run_code, files_in]\ndeclared_outputs:\n  - {path: out/report.txt, media_type: text/plain}\nfiles_out: {max_bytes_per_file: 1MiB, max_total_bytes: 1MiB, max_files: 1}\n",
    )
    .expect("spec");
    // Its snapshots go in a store of the test's own, not the host's.
    let server = start(&config(
        dir.path(),
        &format!(
            "{}mcp: {{spec: mcp-spec.yaml}}\nsnapshots: {{dir: {}}}\n",
            good_config(),
            dir.path().join("snapshots").display()
        ),
    ));
    let url = format!("http://{}/mcp", server.addr);
    let (tools, a) = mcp_client(
        &python,
        &["http", &url, "token-a", "t-1"],
        serde_json::json!([
            ["exec", {"argv": ["sh", "-c", "mkdir -p out; echo secret-of-a > out/report.txt; echo ok"]}],
            ["collect_outputs", {}],
            // A checkpoint, a mistake, and back: the model's own thread only.
            ["snapshot", {"name": "before"}],
            ["exec", {"argv": ["sh", "-c", "rm -r out; echo oops > mistake"]}],
            ["restore", {"snapshot": "before"}],
            ["exec", {"argv": ["sh", "-c", "cat out/report.txt; ls"]}],
            ["restore", {"snapshot": "snap-000000000000000000000000"}],
            ["snapshot", {"name": "x", "thread": "t-2"}],
        ]),
    );
    assert_eq!(
        tool_names(&tools),
        [
            "collect_outputs",
            "exec",
            "remove_file",
            "restore",
            "run_code",
            "snapshot",
            "write_file"
        ]
    );
    assert!(
        !a[2].0 && a[2].1.contains("\"snapshot\": \"snap-"),
        "{:?}",
        a[2]
    );
    assert!(!a[4].0 && a[4].1.contains("restored"), "{:?}", a[4]);
    assert!(
        !a[5].0 && a[5].1.contains("secret-of-a") && !a[5].1.contains("mistake"),
        "{:?}",
        a[5]
    );
    assert!(a[6].0 && a[6].1.contains("no snapshot"), "{:?}", a[6]);
    assert!(
        a[7].0 && a[7].1.contains("no argument `thread`"),
        "{:?}",
        a[7]
    );
    assert!(!a[0].0 && a[0].1.contains("ok"), "{:?}", a[0]);
    assert!(!a[1].0 && a[1].1.contains("report.txt"), "{:?}", a[1]);
    assert!(
        !a[1].1.contains("cordon-serve-") && !a[1].1.contains("handle"),
        "a host handle reached the model: {:?}",
        a[1]
    );
    // The host's code collects the same outputs with handles, for the
    // thread it bound, and fetches the bytes.
    let (status, landed) = post(
        &server.addr,
        "/v1/sandboxes/outputs",
        Some("token-a"),
        serde_json::json!({"thread": "t-1"}),
    );
    assert_eq!(status, 200, "{landed}");
    let handle = landed["landed"][0]["handle"].as_str().expect("handle");
    let (status, bytes) = get(
        &server.addr,
        &format!("/v1/artifacts/{handle}"),
        Some("token-a"),
    );
    assert_eq!((status, bytes.as_str()), (200, "secret-of-a\n"));
    let cat = serde_json::json!([["exec", {"argv": ["cat", "out/report.txt"]}]]);
    // The same credential and thread: the same sandbox.
    let (_, same) = mcp_client(&python, &["http", &url, "token-a", "t-1"], cat.clone());
    assert!(same[0].1.contains("secret-of-a"), "{:?}", same[0]);
    // Another thread of A, or B with A's thread: another sandbox each.
    for (token, thread) in [("token-a", "t-2"), ("token-b", "t-1"), ("token-b", "")] {
        let (_, other) = mcp_client(&python, &["http", &url, token, thread], cat.clone());
        assert!(
            !other[0].1.contains("secret-of-a") && other[0].1.contains("No such file"),
            "{token}/{thread}: {:?}",
            other[0]
        );
    }
    // A's snapshot is not B's to restore, nor A's other thread's.
    for (token, thread) in [("token-b", "t-1"), ("token-a", "t-2")] {
        let (_, r) = mcp_client(
            &python,
            &["http", &url, token, thread],
            serde_json::json!([["restore", {"snapshot": "before"}]]),
        );
        assert!(
            r[0].0 && r[0].1.contains("no snapshot"),
            "{token}/{thread}: {:?}",
            r[0]
        );
    }
    // No credential, a wrong one, a browser's Origin: refused before MCP.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let (status, _) = request(&server.addr, "POST", "/mcp", None, Some(init));
    assert_eq!(status, 401);
    let (status, _) = request(&server.addr, "POST", "/mcp", Some("token-c"), Some(init));
    assert_eq!(status, 401);
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nOrigin: http://evil.example\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
        init.len()
    )
    .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
}

// ---- MCP sessions, connections and what a request must be ---------------

/// A raw HTTP/1.1 exchange on its own connection: everything the server
/// sent until it closed the connection or went quiet for `quiet`, less its
/// `date` header (the one line two answers a second apart may differ in).
fn exchange(addr: &str, raw: &str, quiet: std::time::Duration) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(raw.as_bytes()).expect("send");
    s.set_read_timeout(Some(quiet)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got)
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// One `/mcp` request as an MCP client sends it: `token`'s credential,
/// `session` (its `Mcp-Session-Id`), `extra` headers, a JSON body or none.
fn mcp_request(
    addr: &str,
    method: &str,
    token: &str,
    session: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&str>,
) -> String {
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n"
    );
    if let Some(id) = session {
        head += &format!("Mcp-Session-Id: {id}\r\n");
    }
    for (k, v) in extra {
        head += &format!("{k}: {v}\r\n");
    }
    if let Some(b) = body {
        head += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        );
    }
    head += "\r\n";
    head += body.unwrap_or("");
    exchange(addr, &head, std::time::Duration::from_secs(3))
}

/// A header's value in a raw response.
fn header_of(response: &str, name: &str) -> Option<String> {
    let head = response.split("\r\n\r\n").next()?;
    head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// An MCP session of `token`'s made by `initialize` (and `initialized`):
/// its id, or the refusal's raw response.
fn mcp_session(addr: &str, token: &str) -> Result<String, String> {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let answer = mcp_request(addr, "POST", token, None, &[], Some(init));
    let id = header_of(&answer, "mcp-session-id").ok_or(answer)?;
    let done = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let answer = mcp_request(addr, "POST", token, Some(&id), &[], Some(done));
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    Ok(id)
}

/// A `tools/call` of `tool` with `arguments` as JSON-RPC request `id`.
fn tool_call(id: u32, tool: &str, arguments: serde_json::Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string()
}

/// An MCP session is its maker's: another credential holding its id is
/// answered exactly as one holding an id nobody made (`404`, byte for
/// byte), whether it calls a tool in it, resumes its events (and so
/// reads its maker's results) or ends it; its maker's session goes on.
#[test]
fn an_mcp_session_is_answered_only_to_the_credential_that_made_it() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let addr = server.addr.as_str();
    let a = mcp_session(addr, "token-a").expect("a session of A's");
    let call = tool_call(
        2,
        "exec",
        serde_json::json!({"argv": ["echo", "secret-of-a"]}),
    );
    let ran = mcp_request(addr, "POST", "token-a", Some(&a), &[], Some(&call));
    assert!(ran.contains("secret-of-a"), "{ran}");
    let event = ran
        .lines()
        .find_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| panic!("no event id in {ran}"));
    let unknown = "00000000-0000-4000-8000-000000000000";
    // A call still running: B resuming its stream (`Last-Event-ID`, the
    // call's first event) would take the result from A.
    let (tx, rx) = std::sync::mpsc::channel();
    let flight = {
        let (addr, a) = (addr.to_string(), a.clone());
        std::thread::spawn(move || {
            let body = tool_call(
                5,
                "exec",
                serde_json::json!({"argv": ["sh", "-c", "sleep 2; echo secret-in-flight"]}),
            );
            let mut s = std::net::TcpStream::connect(&addr).expect("connect");
            write!(
                s,
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-06-18\r\nMcp-Session-Id: {a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .expect("send");
            s.set_read_timeout(Some(std::time::Duration::from_secs(15)))
                .expect("timeout");
            let (mut got, mut told, mut buf) = (String::new(), false, [0u8; 4096]);
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
                }
                if !told {
                    let id = got.find("\nid: ").and_then(|i| {
                        let rest = &got[i + 5..];
                        rest.find('\n').map(|j| rest[..j].trim().to_string())
                    });
                    if let Some(id) = id {
                        let _ = tx.send(id);
                        told = true;
                    }
                }
            }
            got
        })
    };
    let running = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the running call's first event");
    let resume = [("Last-Event-ID", running.as_str())];
    let stolen = mcp_request(addr, "GET", "token-b", Some(&a), &resume, None);
    let nobodys = mcp_request(addr, "GET", "token-b", Some(unknown), &resume, None);
    let own = flight.join().expect("A's call");
    assert!(
        !stolen.contains("secret-in-flight"),
        "B took A's result: {stolen}"
    );
    assert_eq!(stolen, nobodys);
    assert!(own.contains("secret-in-flight"), "A lost its result: {own}");
    let b_call = tool_call(3, "exec", serde_json::json!({"argv": ["echo", "from-b"]}));
    let resume = [("Last-Event-ID", event.as_str())];
    let cases = [
        ("POST", &[][..], Some(b_call.as_str())),
        ("GET", &resume[..], None),
        ("DELETE", &[][..], None),
    ];
    for (method, extra, body) in &cases {
        let foreign = mcp_request(addr, method, "token-b", Some(&a), extra, *body);
        let nobodys = mcp_request(addr, method, "token-b", Some(unknown), extra, *body);
        assert!(!foreign.contains("secret-of-a"), "{method}: {foreign}");
        assert_eq!(
            foreign, nobodys,
            "{method}: A's session and nobody's differ for B"
        );
        // rmcp's own answer for a session it does not hold, as it sends it.
        assert_eq!(
            foreign,
            "HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 28\r\n\r\nNot Found: Session not found",
            "{method}"
        );
        let own_unknown = mcp_request(addr, method, "token-a", Some(unknown), extra, *body);
        assert_eq!(own_unknown, nobodys, "{method}");
    }
    // A's session outlived B's DELETE: A resumes it and calls in it.
    let again = mcp_request(
        addr,
        "GET",
        "token-a",
        Some(&a),
        &[("Last-Event-ID", event.as_str())],
        None,
    );
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    let ran = mcp_request(
        addr,
        "POST",
        "token-a",
        Some(&a),
        &[],
        Some(&tool_call(
            4,
            "exec",
            serde_json::json!({"argv": ["echo", "still-a"]}),
        )),
    );
    assert!(ran.contains("still-a"), "{ran}");
    // A ends it; then it is nobody's, to A too.
    let ended = mcp_request(addr, "DELETE", "token-a", Some(&a), &[], None);
    // `204`: what MCP clients expect of an ended session (rmcp says 202).
    assert!(ended.starts_with("HTTP/1.1 204"), "{ended}");
    let gone = mcp_request(addr, "POST", "token-a", Some(&a), &[], Some(&call));
    let nobodys = mcp_request(addr, "POST", "token-a", Some(unknown), &[], Some(&call));
    assert_eq!(gone, nobodys);
}

/// Each credential holds at most `limits.max_mcp_sessions` live MCP
/// sessions; past it `initialize` is `429` saying what to do, and ending
/// one frees its place. Another credential's cap is its own.
#[test]
fn mcp_sessions_are_capped_per_credential_and_a_delete_frees_one() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(
        dir.path(),
        &(good_config() + "limits: {max_mcp_sessions: 2}\n"),
    ));
    let addr = server.addr.as_str();
    let first = mcp_session(addr, "token-a").expect("a first session");
    mcp_session(addr, "token-a").expect("a second session");
    let past = mcp_session(addr, "token-a").expect_err("a third session");
    assert!(past.starts_with("HTTP/1.1 429"), "{past}");
    assert!(
        past.contains("limits.max_mcp_sessions") && past.contains("DELETE /mcp"),
        "{past}"
    );
    mcp_session(addr, "token-b").expect("B's own cap");
    // Racing initializes of B's pass its cap no more than one at a time
    // does: one place was left, one of eight takes it.
    let racing: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.to_string();
            std::thread::spawn(move || mcp_session(&addr, "token-b").is_ok())
        })
        .collect();
    let made = racing
        .into_iter()
        .map(|h| h.join().expect("an initialize"))
        .filter(|ok| *ok)
        .count();
    assert_eq!(made, 1, "B's racing initializes past its cap");
    let ended = mcp_request(addr, "DELETE", "token-a", Some(&first), &[], None);
    assert!(ended.starts_with("HTTP/1.1 2"), "{ended}");
    mcp_session(addr, "token-a").expect("the freed place");
}

/// No MCP tool's error shows a path of the host's (a volume's, a work
/// dir's, the state directory's): the model sees sandbox paths only.
#[test]
fn mcp_tool_errors_show_no_host_path() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let addr = server.addr.as_str();
    let a = mcp_session(addr, "token-a").expect("a session");
    let setup = tool_call(
        2,
        "exec",
        serde_json::json!({"argv": ["sh", "-c", "mkdir -p d; ln -s /etc/passwd link; ln -s d dlink; head -c 2000000 /dev/zero > big; mkfifo fifo; echo ok"]}),
    );
    let ran = mcp_request(addr, "POST", "token-a", Some(&a), &[], Some(&setup));
    assert!(ran.contains("ok"), "{ran}");
    let calls = [
        ("read_file", serde_json::json!({"path": "nope.txt"})),
        ("read_file", serde_json::json!({"path": "d"})),
        ("read_file", serde_json::json!({"path": "link"})),
        ("read_file", serde_json::json!({"path": "dlink/x"})),
        ("read_file", serde_json::json!({"path": "big"})),
        ("read_file", serde_json::json!({"path": "fifo"})),
        ("read_file", serde_json::json!({"path": "../../etc/passwd"})),
        ("read_file", serde_json::json!({"path": "/etc/passwd"})),
        (
            "write_file",
            serde_json::json!({"path": "d", "content": "x"}),
        ),
        (
            "write_file",
            serde_json::json!({"path": "link", "content": "x"}),
        ),
        (
            "write_file",
            serde_json::json!({"path": "dlink/x", "content": "x"}),
        ),
        (
            "write_file",
            serde_json::json!({"path": "/proc/nope/x", "content": "x"}),
        ),
        ("exec", serde_json::json!({"argv": ["/no/such/program"]})),
        ("list_files", serde_json::json!({"path": "nope"})),
    ];
    for (i, (tool, args)) in calls.iter().enumerate() {
        let id = u32::try_from(i).expect("few") + 10;
        let got = mcp_request(
            addr,
            "POST",
            "token-a",
            Some(&a),
            &[],
            Some(&tool_call(id, tool, args.clone())),
        );
        assert!(got.contains("\"result\""), "{tool} {args}: {got}");
        for host in [
            "/tmp/",
            "/run/",
            "/var/",
            "cordon-volume-",
            "cordon-work-",
            "cordon-tmp-",
            "cordon-mapped-",
            &dir.path().display().to_string(),
        ] {
            assert!(!got.contains(host), "{tool} {args} shows `{host}`: {got}");
        }
    }
}

/// A request must name one host: two `Host` headers (or two of any
/// header a check reads) are `400`, on `/mcp` and everywhere else.
#[test]
fn a_request_with_two_host_headers_is_refused() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let addr = server.addr.as_str();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let two_hosts = mcp_request(
        addr,
        "POST",
        "token-a",
        None,
        &[("Host", "evil.example")],
        Some(init),
    );
    assert!(two_hosts.starts_with("HTTP/1.1 400"), "{two_hosts}");
    assert!(
        header_of(&two_hosts, "mcp-session-id").is_none(),
        "{two_hosts}"
    );
    let two_tokens = mcp_request(
        addr,
        "POST",
        "token-a",
        None,
        &[("Authorization", "Bearer token-b")],
        Some(init),
    );
    assert!(two_tokens.starts_with("HTTP/1.1 400"), "{two_tokens}");
    let backends = exchange(
        addr,
        "GET /v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nAuthorization: Bearer token-a\r\nConnection: close\r\n\r\n",
        std::time::Duration::from_secs(5),
    );
    assert!(backends.starts_with("HTTP/1.1 400"), "{backends}");
    let absolute = exchange(
        addr,
        "GET http://evil.example/v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nConnection: close\r\n\r\n",
        std::time::Duration::from_secs(5),
    );
    assert!(absolute.starts_with("HTTP/1.1 400"), "{absolute}");
}

/// How long until the server closes `s` (reads return end of file or an
/// error), reading whatever it sends; `None` if still open after `within`.
fn closed_within(
    s: &mut std::net::TcpStream,
    within: std::time::Duration,
) -> Option<(std::time::Duration, String)> {
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < within {
        s.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => return Some((started.elapsed(), String::from_utf8_lossy(&got).into())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some((started.elapsed(), String::from_utf8_lossy(&got).into())),
        }
    }
    None
}

/// Connections are held to time limits: an idle one, one sending its
/// headers a byte at a time and one sending its body slowly are closed
/// within `limits.header_timeout_seconds` / `body_timeout_seconds`; a
/// request without a credential is refused before its body is read.
#[test]
fn idle_slow_and_unauthenticated_connections_are_cut() {
    if !root() {
        return;
    }
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(
        dir.path(),
        &(good_config() + "limits: {header_timeout_seconds: 2, body_timeout_seconds: 2}\n"),
    ));
    let addr = server.addr.clone();
    let limit = Duration::from_secs(6);
    // Idle: connected, nothing sent.
    let mut idle = std::net::TcpStream::connect(&addr).expect("connect");
    let (took, _) = closed_within(&mut idle, limit).expect("an idle connection left open");
    assert!(
        took >= Duration::from_millis(1500),
        "closed too soon: {took:?}"
    );
    // Idle after a request (keep-alive).
    let mut kept = std::net::TcpStream::connect(&addr).expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("send");
    let (_, said) =
        closed_within(&mut kept, limit).expect("a kept-alive idle connection left open");
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    // Headers a byte at a time.
    let slow = std::net::TcpStream::connect(&addr).expect("connect");
    let mut writer = slow.try_clone().expect("clone");
    let trickle = std::thread::spawn(move || {
        let head = b"GET /v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        for b in head {
            if writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut slow = slow;
    closed_within(&mut slow, limit).expect("a slow-header connection left open");
    let _ = trickle.join();
    // A body a byte at a time, after headers with a credential.
    let body = std::net::TcpStream::connect(&addr).expect("connect");
    let mut writer = body.try_clone().expect("clone");
    writer
        .write_all(b"POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"thread\": \"")
        .expect("send");
    let trickle = std::thread::spawn(move || {
        for _ in 0..60 {
            if writer.write_all(b"a").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut body = body;
    closed_within(&mut body, limit).expect("a slow body left open");
    let _ = trickle.join();
    // No credential, a large body announced and not sent: 401 at once.
    let mut unauth = std::net::TcpStream::connect(&addr).expect("connect");
    unauth
        .write_all(b"POST /v1/sandboxes/exec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n{")
        .expect("send");
    let (took, said) =
        closed_within(&mut unauth, Duration::from_secs(1)).expect("no answer before the body");
    assert!(said.starts_with("HTTP/1.1 401"), "{said}");
    assert!(took < Duration::from_secs(1));
    let mut unauth = std::net::TcpStream::connect(&addr).expect("connect");
    unauth
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-c\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n{")
        .expect("send");
    let (_, said) =
        closed_within(&mut unauth, Duration::from_secs(1)).expect("no answer before the body");
    assert!(said.starts_with("HTTP/1.1 401"), "{said}");
    // The server still answers.
    assert_eq!(get(&addr, "/healthz", None).0, 200);
}

/// A connection from `source` (a loopback address of its own) to `addr`.
fn connect_from(source: &str, addr: &str) -> std::net::TcpStream {
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    let from: std::net::SocketAddr = format!("{source}:0").parse().expect("an address");
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&from.into()).expect("bind");
    s.connect(&to.into()).expect("connect");
    s.into()
}

/// One peer holds at most `limits.max_connections_per_peer` connections:
/// the next is refused at once (`503` saying what to do) while another
/// peer's credentialed request is served; a closed one frees its place.
#[test]
fn connections_past_the_per_peer_cap_are_refused_and_others_still_served() {
    if !root() {
        return;
    }
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(
        dir.path(),
        &(good_config() + "limits: {max_connections_per_peer: 3, max_connections: 10, header_timeout_seconds: 60}\n"),
    ));
    let addr = server.addr.clone();
    let held: Vec<std::net::TcpStream> = (0..3).map(|_| connect_from("127.0.0.1", &addr)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut past = connect_from("127.0.0.1", &addr);
    let (_, said) =
        closed_within(&mut past, Duration::from_secs(2)).expect("a fourth connection held open");
    assert!(
        said.starts_with("HTTP/1.1 503") && said.contains("too many open connections"),
        "{said}"
    );
    // Another peer (another loopback address) is served.
    let mut other = connect_from("127.0.0.2", &addr);
    other
        .write_all(b"GET /v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-b\r\nConnection: close\r\n\r\n")
        .expect("send");
    let (_, said) = closed_within(&mut other, Duration::from_secs(10)).expect("an answer");
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    // One closed: its place is the peer's again.
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let mut again = connect_from("127.0.0.1", &addr);
    again
        .write_all(b"GET /v1/backends HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer token-a\r\nConnection: close\r\n\r\n")
        .expect("send");
    let (_, said) = closed_within(&mut again, Duration::from_secs(10)).expect("an answer");
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
}

/// One request on a connection of its own from `source` (a loopback
/// address): all the server said until it closed, or 20 seconds passed.
fn request_from(source: &str, addr: &str, head: &str, body: &str) -> String {
    let mut s = connect_from(source, addr);
    let raw = format!(
        "{head}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(raw.as_bytes()).expect("send");
    closed_within(&mut s, std::time::Duration::from_secs(20))
        .map(|(_, said)| said)
        .unwrap_or_else(|| panic!("no answer to {head}"))
}

/// The case found: a server with few descriptors (`ulimit -n` 120) and
/// one peer holding 130 silent connections. With the default limits the
/// server still answers another peer: `/healthz`, and a credential's
/// create and exec.
#[test]
fn silent_connections_from_one_peer_cannot_take_the_servers_descriptors() {
    if !root() {
        return;
    }
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("dir");
    let server = start_under(
        &["prlimit", "--nofile=120:120", "--"],
        &config(dir.path(), &good_config()),
    );
    let addr = server.addr.clone();
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    let held: Vec<std::net::TcpStream> = (0..130)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let said = request_from("127.0.0.2", &addr, "GET /healthz HTTP/1.1", "");
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    let said = request_from(
        "127.0.0.2",
        &addr,
        "POST /v1/sandboxes HTTP/1.1\r\nAuthorization: Bearer token-a",
        r#"{"thread": "t"}"#,
    );
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    let said = request_from(
        "127.0.0.2",
        &addr,
        "POST /v1/sandboxes/exec HTTP/1.1\r\nAuthorization: Bearer token-a",
        r#"{"thread": "t", "argv": ["echo", "still-served"]}"#,
    );
    assert!(
        said.starts_with("HTTP/1.1 200") && said.contains("still-served"),
        "{said}"
    );
    drop(held);
}

// ---- replicas and restarts ----------------------------------------------

/// Servers sharing a state directory serve and dispose of each other's
/// sandboxes; one killed with SIGKILL loses nothing (a restarted one serves
/// what it made); a keeper killed with SIGKILL is reclaimed by the next
/// server to start, volume and all.
#[test]
fn replicas_share_sandboxes_and_a_kill_9_leaks_nothing() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config().replace(
        "sandboxes: {state_dir: state, dispose_on_shutdown: true}",
        "sandboxes: {state_dir: state}",
    );
    assert!(body.contains("state_dir: state}"), "{body}");
    let file = config(dir.path(), &body);
    let mut one = start(&file);
    let two = start(&file);
    let a = Some("token-a");
    let exec = |server: &Server, token, thread: &str, argv: serde_json::Value| {
        post(
            &server.addr,
            "/v1/sandboxes/exec",
            token,
            serde_json::json!({"thread": thread, "argv": argv}),
        )
    };
    let (status, made) = post(
        &one.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "r"}),
    );
    assert_eq!(status, 200, "{made}");
    let handle = made["handle"].as_str().expect("handle").to_string();
    let (status, v) = exec(
        &one,
        a,
        "r",
        serde_json::json!(["sh", "-c", "echo kept > f"]),
    );
    assert_eq!(
        (status, &v["status"]["code"]),
        (200, &serde_json::json!(0)),
        "{v}"
    );
    // The other replica finds it; another credential does not.
    let (status, v) = exec(&two, a, "r", serde_json::json!(["cat", "f"]));
    assert_eq!((status, v["stdout"].as_str()), (200, Some("kept\n")), "{v}");
    let (status, v) = exec(&two, Some("token-b"), "r", serde_json::json!(["cat", "f"]));
    assert_eq!(status, 404, "{v}");
    // SIGKILL the replica that made it; a new one serves it.
    one.child.kill().expect("kill -9");
    one.child.wait().expect("reaped");
    let three = start(&file);
    let (status, v) = exec(&three, a, "r", serde_json::json!(["cat", "f"]));
    assert_eq!((status, v["stdout"].as_str()), (200, Some("kept\n")), "{v}");
    // A dispose at one replica reclaims it for all.
    let keeper = keeper_of(&handle);
    let volume = format!("/cordon-volume-{keeper}-");
    let (status, v) = post(
        &two.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "r"}),
    );
    assert_eq!(
        (status, &v["disposed"]),
        (200, &serde_json::json!(1)),
        "{v}"
    );
    // The replica that held it answers as if it never had it.
    let (status, v) = exec(&three, a, "r", serde_json::json!(["true"]));
    assert_eq!(status, 404, "{v}");
    assert!(
        std::path::Path::new(&format!("/proc/{keeper}"))
            .exists()
            .then(|| {
                std::fs::read_to_string(format!("/proc/{keeper}/cmdline"))
                    .is_ok_and(|c| c.contains(&handle))
            })
            != Some(true),
        "the keeper outlived the dispose"
    );
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&volume),
        "the volume outlived the dispose"
    );
    // A keeper killed with SIGKILL: the next server to start reclaims
    // what it held.
    let (status, made) = post(
        &three.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "k"}),
    );
    assert_eq!(status, 200, "{made}");
    let keeper = keeper_of(made["handle"].as_str().expect("handle"));
    let volume = format!("/cordon-volume-{keeper}-");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(keeper).expect("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the keeper");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{keeper}")).exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let four = start(&file);
    let (status, v) = exec(&four, a, "k", serde_json::json!(["true"]));
    assert_eq!(status, 404, "{v}");
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&volume),
        "the killed keeper's volume was not reclaimed"
    );
    let records = std::fs::read_dir(dir.path().join("state/sandboxes"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(records, 0, "records left in the state directory");
    drop((two, three, four));
}

// ---- docs ----------------------------------------------------------------

/// docs/quickstart.md's sections 6 and 7 as a reader runs them from the
/// clone's root: the shell block starts a server, each Python block runs
/// against it, and each MCP client configuration is used as written.
#[test]
fn the_quickstart_http_python_and_mcp_sections_run_as_written() {
    if !root() {
        return;
    }
    let Some(python) = mcp_python() else { return };
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let doc = std::fs::read_to_string(repo.join("docs/quickstart.md")).expect("quickstart");
    let from = doc.find("## 6.").expect("section 6");
    // Section 8 needs a model API of the reader's own: not run here.
    let to = doc.find("## 8.").unwrap_or(doc.len());
    let part = &doc[from..to];
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut lines = part.lines();
    while let Some(l) = lines.next() {
        if let Some(lang) = l.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            blocks.push((lang.to_string(), body.join("\n") + "\n"));
        }
    }
    let of = |lang: &str| -> Vec<String> {
        blocks
            .iter()
            .filter(|(l, _)| l == lang)
            .map(|(_, b)| b.clone())
            .collect()
    };
    let (sh, py, js, node) = (of("sh"), of("python"), of("json"), of("js"));
    assert_eq!(
        (sh.len(), py.len(), js.len(), node.len()),
        (1, 3, 2, 1),
        "{blocks:?}"
    );
    // The reader's clone: its root, with the server's files written there.
    let dir = tempfile::tempdir().expect("dir");
    for d in ["clients", "examples"] {
        std::os::unix::fs::symlink(
            repo.join(d).canonicalize().expect("repo"),
            dir.path().join(d),
        )
        .expect("link");
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cordon"))
        .parent()
        .expect("bin dir");
    let mut script = String::from("set -eu\n");
    script.push_str(&sh[0]);
    script.push_str(
        "server=$!\ntrap 'curl -s -H \"Authorization: Bearer $CORDON_TOKEN\" -H content-type:application/json -d \"{\\\"thread\\\":\\\"t-45\\\"}\" http://127.0.0.1:8787/v1/threads/dispose >/dev/null; kill $server; wait $server' EXIT\n\
         for _ in $(seq 200); do curl -sf http://127.0.0.1:8787/healthz >/dev/null && break; sleep 0.1; done\n",
    );
    for (i, block) in py.iter().enumerate() {
        // As the reader runs them: the client's blocks with the venv the
        // shell block made (`pip install ./clients/python`), the MCP one
        // with a venv holding PyPI's `mcp`.
        let runner = if block.contains("import mcp") || block.contains("from mcp") {
            "\"$PYTHON\""
        } else {
            ".venv/bin/python"
        };
        script.push_str(&format!(
            "echo '== python {i}'\n{runner} - <<'PYTHON_BLOCK'\n{block}PYTHON_BLOCK\n"
        ));
    }
    // The TypeScript client's block, saved and run as the section says
    // (`node agent.mjs`), where there is a node.
    if let Some(bin) = node_binary() {
        std::fs::write(dir.path().join("agent.mjs"), &node[0]).expect("agent.mjs");
        script.push_str(&format!("echo '== node'\n{} agent.mjs\n", bin.display()));
    } else {
        cordon_testkit::skip(
            "the quickstart's TypeScript block",
            "no `node` on this machine",
        );
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("PYTHON", &python)
        .env_remove("CORDON_MIN_ISOLATION")
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let section = |i: usize| {
        let from = stdout.find(&format!("== python {i}")).expect("marker");
        let to = stdout[from + 1..]
            .find("== python")
            .map_or(stdout.len(), |n| from + 1 + n);
        stdout[from..to].to_string()
    };
    assert!(section(0).contains("chart.png"), "{stdout}");
    assert!(
        dir.path()
            .join("chart.png")
            .metadata()
            .expect("the chart landed")
            .len()
            > 0
    );
    assert!(section(1).trim_end().ends_with("285"), "{stdout}");
    if let Some(at) = stdout.find("== node") {
        let node_out = &stdout[at..];
        assert!(
            node_out.contains("\n285\n") && node_out.contains("first: 1"),
            "{stdout}\n{stderr}"
        );
    }
    assert!(
        section(2).contains("run_code") && section(2).contains("\"exit_code\": 0"),
        "{stdout}\n{stderr}"
    );
    // The stdio configuration, run as an MCP client would run it.
    let stdio: serde_json::Value = serde_json::from_str(&js[0]).expect("json");
    let server = &stdio["mcpServers"]["cordon"];
    assert_eq!(server["command"], "cordon");
    let mut args = vec![
        "stdio".to_string(),
        env!("CARGO_BIN_EXE_cordon").to_string(),
    ];
    args.extend(
        server["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, r) = mcp_client(
        &python,
        &args,
        serde_json::json!([["run_code", {"language": "python", "source": "print(6 * 7)"}]]),
    );
    assert!(!r[0].0 && r[0].1.contains("42"), "{:?}", r[0]);
    // The HTTP one names the endpoint and headers section 6's server takes.
    let http: serde_json::Value = serde_json::from_str(&js[1]).expect("json");
    let server = &http["mcpServers"]["cordon"];
    assert_eq!(server["url"], "http://127.0.0.1:8787/mcp");
    assert_eq!(server["headers"]["Authorization"], "Bearer TOKEN");
    assert!(server["headers"]["cordon-thread"].is_string());
}

// ---- metrics of the policy --------------------------------------------------

/// A root policy of the tests' own: system programs, the work dir, two
/// test hosts on loopback (one address denied), su denied, team-b kept
/// home, each tenant's own secrets.
static OWN_POLICY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    cordon_testkit::policy::loopback_egress(
        "      - name: no-su\n        when: command == \"/usr/bin/su\"\n",
        "      - name: not-the-second-address\n        when: ip == \"127.0.0.2\"\n      - name: team-b-stays-home\n        when: identity.namespace == \"team-b\"\n",
        "  secret:\n    allow:\n      - name: own-tenant-secrets\n        when: secret.name.startsWith(identity.namespace + \"/\")\n",
    )
});

/// A server whose only backend has closed egress (`process`) serves a spec
/// that names hosts, and says so in the create answer's `warnings`: the
/// backend confines more than the spec asks. A spec without hosts gets
/// none.
#[test]
fn create_on_a_closed_backend_for_a_spec_that_names_hosts_carries_the_warning() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    std::fs::write(p.join("policy.yaml"), &*OWN_POLICY).expect("policy");
    let body = good_config().replace(
        "min_isolation: container\n",
        "min_isolation: process\nbackends: [process]\npolicy: policy.yaml\n",
    );
    let server = start(&config(p, &body));
    let spec = "kind: fetch\nimage: host\negress_allow: [\"ok.test:8443\"]\n";
    let (status, made) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "closed", "spec": spec}),
    );
    assert_eq!(
        (status, &made["backend"]),
        (200, &"process".into()),
        "{made}"
    );
    let warnings = made["warnings"].as_array().expect("warnings");
    assert!(
        warnings.len() == 1
            && warnings[0].as_str().is_some_and(|w| {
                w.contains("backend `process` has closed egress") && w.contains("`ok.test:8443`")
            }),
        "{made}"
    );
    let (status, made) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "offline"}),
    );
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["warnings"], serde_json::json!([]), "{made}");
}

/// An upstream on loopback that reads what comes on each connection and
/// answers `answer`, then closes; its port.
fn upstream(answer: &'static [u8]) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
            });
        }
    });
    port
}

/// `/metrics` counts policy denials by surface and rule (at create, at
/// exec, at the egress proxy) and the bytes the proxy carried, by scope.
#[test]
fn metrics_count_denials_by_surface_and_rule_and_egress_bytes() {
    if !root() {
        return;
    }
    // An upstream that answers whatever comes with 1000 bytes and closes.
    let port = upstream(&[b'x'; 1000]);
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    std::fs::write(p.join("policy.yaml"), &*OWN_POLICY).expect("policy");
    std::fs::write(p.join("hosts"), "127.0.0.1 ok.test\n127.0.0.2 other.test\n").expect("hosts");
    let body = good_config().replace(
        "min_isolation: container\n",
        &format!(
            "min_isolation: container\npolicy: policy.yaml\negress: {{nameservers: [], hosts_file: {}}}\n",
            p.join("hosts").display()
        ),
    );
    let server = start(&config(p, &body));
    let spec = format!(
        "kind: fetch\nimage: host\nrequires: [exec]\negress_allow: [\"ok.test:{port}\", \"other.test:{port}\"]\n"
    );
    // team-b's egress is denied for certain: refused at create.
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-b"),
        serde_json::json!({"thread": "m", "spec": spec}),
    );
    assert_eq!(status, 403, "{v}");
    let a = Some("token-a");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "m", "spec": spec}),
    );
    assert_eq!(status, 200, "{v}");
    // At exec: the compute guard.
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "m", "argv": ["/usr/bin/su"]}),
    );
    assert_eq!(status, 403, "{v}");
    // At the proxy: one tunnel carried, one refused by its address.
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "m", "argv": ["sh", "-c", format!(
            "curl -sk --max-time 5 https://ok.test:{port}/ ; curl -sk --max-time 5 https://other.test:{port}/ ; true"
        )]}),
    );
    assert_eq!(status, 200, "{v}");
    let metric = |token: &str, name: &str| -> Option<u64> {
        get(&server.addr, "/metrics", Some(token))
            .1
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let down = "cordon_egress_bytes_total{scope=\"team-a\",direction=\"down\"}";
    while metric("token-a", down).is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, text) = get(&server.addr, "/metrics", Some("token-a"));
    let rule_line = |surface: &str, rule_name: &str| {
        // The rule's `file:line`: the line of its `when:`, after its name.
        let policy = std::fs::read_to_string(p.join("policy.yaml")).expect("policy");
        let line = policy
            .lines()
            .position(|l| l.contains(&format!("name: {rule_name}")))
            .expect("rule")
            + 2;
        format!(
            "cordon_policy_denials_total{{scope=\"{{SCOPE}}\",surface=\"{surface}\",rule=\"{}:{line}\"}} 1",
            p.join("policy.yaml").canonicalize().expect("path").display()
        )
    };
    for want in [
        rule_line("compute", "no-su").replace("{SCOPE}", "team-a"),
        rule_line("egress", "not-the-second-address").replace("{SCOPE}", "team-a"),
    ] {
        assert!(text.contains(&want), "no `{want}` in:\n{text}");
    }
    assert_eq!(metric("token-a", down), Some(1000), "{text}");
    assert!(
        metric(
            "token-a",
            "cordon_egress_bytes_total{scope=\"team-a\",direction=\"up\"}"
        )
        .is_some_and(|n| n > 100),
        "{text}"
    );
    let (_, b) = get(&server.addr, "/metrics", Some("token-b"));
    let want = rule_line("egress", "team-b-stays-home").replace("{SCOPE}", "team-b");
    assert!(b.contains(&want), "no `{want}` in:\n{b}");
    assert!(!b.contains("team-a"), "{b}");
}

/// A granted secret comes from the configured store (a directory here, a
/// command in cordon-sandbox's tests) into the sandbox, read-only.
#[test]
fn secrets_come_from_the_configured_store() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    std::fs::write(p.join("policy.yaml"), &*OWN_POLICY).expect("policy");
    std::fs::create_dir_all(p.join("secrets/team-a")).expect("store");
    std::fs::write(p.join("secrets/team-a/token"), "s3cr3t").expect("secret");
    let body = good_config().replace(
        "min_isolation: container\n",
        "min_isolation: container\npolicy: policy.yaml\nsecrets: {dir: secrets}\n",
    );
    let server = start(&config(p, &body));
    let spec =
        |name: &str| format!("kind: deploy\nimage: host\nrequires: [exec]\nsecrets: [{name}]\n");
    let a = Some("token-a");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "s", "spec": spec("team-a/token")}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "s", "argv": ["sh", "-c", "cat /run/cordon/secrets/team-a/token; echo x > /run/cordon/secrets/team-a/token || echo refused"]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stdout"], "s3cr3trefused\n", "{v}");
    // Another tenant's secret is refused by the policy, before anything runs.
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "s2", "spec": spec("team-b/key")}),
    );
    assert_eq!(status, 403, "{v}");
    // A configuration naming both stores, or neither, is refused.
    let bad = good_config().replace(
        "min_isolation: container\n",
        "min_isolation: container\nsecrets: {dir: secrets, command: [/bin/true]}\n",
    );
    let out = cordon_testkit::cordon!()
        .command(["serve", "--config"])
        .arg(config(&p.join("secrets"), &bad))
        .output()
        .expect("cordon serve");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly one of `dir`"));
}

// ---- TLS -----------------------------------------------------------------

/// HTTPS with mutual TLS: no connection without a client certificate from
/// the configured CA, and a credential bound to one certificate is refused
/// with any other, its token notwithstanding.
/// A CA (`ca`), another (`other-ca`), a server certificate for 127.0.0.1
/// (`server`), client certificates `client` and `client2` of `ca` and
/// `stranger` of `other-ca` (`NAME.pem`, `NAME.key`) in `p`, and
/// `client.sha256`, the fingerprint of `client`'s.
fn certificates(p: &std::path::Path) {
    let script = r#"set -eu
ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null; }
leaf() { # name ca ext
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext" 2>/dev/null
}
ca ca; ca other-ca
leaf server ca "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth"
for c in client client2; do leaf $c ca "extendedKeyUsage=clientAuth"; done
leaf stranger other-ca "extendedKeyUsage=clientAuth"
openssl x509 -in client.pem -outform der | sha256sum | cut -c1-64 > client.sha256
"#;
    let made = Command::new("bash")
        .args(["-c", script])
        .current_dir(p)
        .status()
        .expect("openssl");
    assert!(made.success());
}

/// Over TLS the same limits hold: a connection idle after its handshake
/// is closed within `limits.header_timeout_seconds`, and one past the
/// per-peer cap is closed at once (before any handshake).
#[test]
fn tls_connections_are_held_to_the_same_timeouts_and_caps() {
    if !root() {
        return;
    }
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    certificates(p);
    let body = good_config().replace(
        "min_isolation: container\n",
        "min_isolation: container\ntls: {cert: server.pem, key: server.key}\nlimits: {header_timeout_seconds: 2, max_connections_per_peer: 2, max_connections: 10}\n",
    );
    let server = start(&config(p, &body));
    // Handshaken, then silent: closed by the header timeout.
    let started = Instant::now();
    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &server.addr, "-CAfile"])
        .arg(p.join("ca.pem"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    let ended = loop {
        if let Ok(Some(_)) = client.try_wait() {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(8) {
            let _ = client.kill();
            let _ = client.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = ended.expect("an idle TLS connection left open past the header timeout");
    assert!(
        took >= Duration::from_millis(1500),
        "closed too soon: {took:?}"
    );
    // Two connections held mid-handshake; a third from the same peer is
    // closed at once.
    let held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(&server.addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut past = std::net::TcpStream::connect(&server.addr).expect("connect");
    let (took, _) =
        closed_within(&mut past, Duration::from_secs(5)).expect("a third connection held open");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(held);
}

#[test]
fn mutual_tls_requires_a_client_certificate_and_binds_a_token_to_one() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    certificates(p);
    let bound = std::fs::read_to_string(p.join("client.sha256")).expect("fingerprint");
    let body = good_config()
        .replace(
            "min_isolation: container\n",
            "min_isolation: container\ntls: {cert: server.pem, key: server.key, client_ca: ca.pem}\n",
        )
        .replace(
            "    scope: team-a\n",
            &format!("    scope: team-a\n    client_cert_sha256: {}\n", bound.trim()),
        );
    let server = start(&config(p, &body));
    let curl = |cert: Option<&str>, token: &str| -> (i32, String) {
        let mut c = Command::new("curl");
        c.args(["-sS", "--max-time", "10", "--cacert"])
            .arg(p.join("ca.pem"))
            .args(["-H", &format!("Authorization: Bearer {token}")]);
        if let Some(cert) = cert {
            c.arg("--cert")
                .arg(p.join(format!("{cert}.pem")))
                .arg("--key")
                .arg(p.join(format!("{cert}.key")));
        }
        c.args(["-w", "\n%{http_code}"])
            .arg(format!("https://{}/v1/backends", server.addr));
        let out = c.output().expect("curl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // The bound token, with its certificate: served.
    let (code, out) = curl(Some("client"), "token-a");
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("\n200") && out.contains("team-a"), "{out}");
    // An unbound token with any certificate of the CA: served.
    let (code, out) = curl(Some("client2"), "token-b");
    assert!(code == 0 && out.ends_with("\n200"), "{out}");
    // The bound token with another certificate of the same CA: 401.
    let (code, out) = curl(Some("client2"), "token-a");
    assert!(code == 0 && out.ends_with("\n401"), "{out}");
    // No client certificate, or one of another CA: no connection at all.
    for cert in [None, Some("stranger")] {
        let (code, out) = curl(cert, "token-b");
        assert_ne!(code, 0, "{cert:?}: {out}");
        assert!(!out.contains("team-b"), "{out}");
    }
    // Plain HTTP to the TLS port is not served.
    let (status, _) = std::panic::catch_unwind(|| get(&server.addr, "/healthz", None))
        .unwrap_or((0, String::new()));
    assert_ne!(status, 200);
}

/// `cordon mcp` signalled (as MCP's stdio shutdown does when the server
/// has not exited two seconds after stdin closed) still disposes of its
/// sandbox and exits 0, even with stdin left open.
#[test]
fn cordon_mcp_disposes_when_signalled() {
    if !root() {
        return;
    }
    let mut child = cordon_testkit::cordon!()
        .command([
            "mcp",
            "--scope",
            "team-a",
            "--thread",
            "term",
            "--min-isolation",
            "container",
            "--quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cordon mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |v: serde_json::Value| {
        writeln!(stdin, "{v}").expect("send");
    };
    let mut line = String::new();
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    out.read_line(&mut line).expect("initialized");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"argv": ["true"]}}}),
    );
    line.clear();
    out.read_line(&mut line).expect("the call");
    assert!(line.contains("\"exit_code\\\": 0"), "{line}");
    let volume = format!("/cordon-volume-{}-", child.id());
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&volume)
    };
    assert!(mounted(), "the sandbox has no volume to check");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cordon mcp did not exit within 10 s of SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    assert!(status.success(), "{status}");
    assert!(!mounted(), "the sandbox's volume outlived cordon mcp");
}

/// A refusal's status is its kind's, decided where the error is made
/// (issue 28, items 8 and 9): a request the server cannot take is `400`,
/// one the policy refuses `403`, never a `500` or `503` for either.
#[test]
fn statuses_follow_the_kind_of_what_refused() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let create = |thread: &str, spec: &str| {
        post(
            &server.addr,
            "/v1/sandboxes",
            a,
            serde_json::json!({"thread": thread, "spec": spec}),
        )
    };
    // A timeout past the bound (it overflowed a clock: a panic, `500`).
    let (status, out) = create("s", "kind: run\nimage: host\n");
    assert_eq!(status, 200, "{out}");
    for t in [u64::MAX, 3601, 0] {
        let (status, out) = post(
            &server.addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": "s", "argv": ["true"], "timeout_seconds": t}),
        );
        assert_eq!(status, 400, "timeout_seconds {t}: {out}");
        assert!(
            out["error"]
                .as_str()
                .unwrap_or_default()
                .contains("from 1 to 3600"),
            "{out}"
        );
    }
    // Declared outputs that are not regular files: a link, a FIFO.
    let spec = "kind: report\nimage: host\ndeclared_outputs:\n  - {path: out/r, media_type: text/plain}\nfiles_out: {max_bytes_per_file: 1KiB, max_total_bytes: 1KiB, max_files: 1}\n";
    let (status, out) = create("o", spec);
    assert_eq!(status, 200, "{out}");
    for make in ["ln -s /etc/passwd out/r", "mkfifo out/r"] {
        let (status, out) = post(
            &server.addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": "o", "argv": ["sh", "-c", format!("mkdir -p out && rm -f out/r && {make}")]}),
        );
        assert_eq!(
            (status, out["status"]["code"].as_i64()),
            (200, Some(0)),
            "{out}"
        );
        let (status, out) = post(
            &server.addr,
            "/v1/sandboxes/outputs",
            a,
            serde_json::json!({"thread": "o"}),
        );
        assert_eq!(status, 400, "{make}: {out}");
    }
    // A work dir the policy refuses, one that cannot be a work dir, and
    // an image name that cannot be one.
    for (spec, want) in [
        ("kind: run\nimage: host\nwork_dir: /etc\n", 403),
        ("kind: run\nimage: host\nwork_dir: /proc\n", 400),
        ("kind: run\nimage: ../../etc\n", 400),
    ] {
        let (status, out) = create("w", spec);
        assert_eq!(status, want, "{spec}: {out}");
    }
}

/// The start time (`/proc/PID/stat` field 22) of a process: with its pid,
/// what a record names a keeper by.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    rest.split_whitespace()
        .nth(19)
        .and_then(|s| s.parse().ok())
        .expect("start time")
}

/// A dispose that did not dispose is an error with its reason, never
/// `{"disposed": N}` over a sandbox that still runs (issue 28, item 7).
/// Here the record names a live process that is not the sandbox's keeper
/// (as a record does that a server under another TMPDIR cannot vet):
/// nothing is killed on its word, so the sandbox is left, and both
/// disposes say so; the sandbox still answers. Put right, it goes.
#[test]
fn a_dispose_that_did_not_dispose_is_an_error_with_why() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&config(dir.path(), &good_config()));
    let a = Some("token-a");
    let at = serde_json::json!({"thread": "d"});
    let (status, out) = post(&server.addr, "/v1/sandboxes", a, at.clone());
    assert_eq!(status, 200, "{out}");
    let handle = out["handle"].as_str().expect("handle").to_string();
    let record = dir.path().join(format!("state/sandboxes/{handle}.json"));
    let original = std::fs::read_to_string(&record).expect("record");
    let mut other = Command::new("sleep").arg("120").spawn().expect("sleep");
    let mut rec: serde_json::Value = serde_json::from_str(&original).expect("JSON");
    rec["keeper"] = serde_json::json!({"pid": other.id(), "start": start_time(other.id())});
    std::fs::write(&record, rec.to_string()).expect("rewrite the record");
    let (status, out) = post(&server.addr, "/v1/sandboxes/dispose", a, at.clone());
    let (status_t, out_t) = post(&server.addr, "/v1/threads/dispose", a, at.clone());
    let exec = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "d", "argv": ["echo", "still here"]}),
    );
    std::fs::write(&record, &original).expect("put the record back");
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!(status, 500, "{out}");
    let why = out["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("not disposed") && why.contains("is not the keeper"),
        "{out}"
    );
    assert_eq!(status_t, 500, "{out_t}");
    assert!(
        out_t["error"]
            .as_str()
            .unwrap_or_default()
            .contains("is not the keeper"),
        "{out_t}"
    );
    assert_eq!(
        (exec.0, exec.1["stdout"].as_str()),
        (200, Some("still here\n")),
        "{}",
        exec.1
    );
    let (status, out) = post(&server.addr, "/v1/sandboxes/dispose", a, at);
    assert_eq!((status, out["disposed"].as_u64()), (200, Some(1)), "{out}");
    assert!(!record.exists());
}

/// `/v1/backends` shows a tenant each backend's name, rung and whether it
/// can serve, and the probe's detail (host tool paths and versions, why a
/// backend cannot run) to an operator only; and no lock file outlives the
/// sandboxes (issue 28, item 10).
#[test]
fn backend_detail_is_the_operators_and_no_lock_file_outlives_its_sandbox() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config()
        + &format!(
            "  - name: ops\n    token_sha256: {}\n    scope: ops\n    operator: true\n    identity: {{namespace: ops, name: operator}}\n",
            sha256_hex("token-ops")
        );
    let server = start(&config(dir.path(), &body));
    let rows = |token: &str| {
        let (status, body) = get(&server.addr, "/v1/backends", Some(token));
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["available"].as_array().expect("available").clone()
    };
    let tenant = rows("token-a");
    assert!(!tenant.is_empty());
    for row in &tenant {
        let keys: Vec<&String> = row.as_object().expect("a row").keys().collect();
        assert_eq!(
            keys,
            ["admitted", "name", "rung", "runnable", "used"],
            "a tenant's row: {row}"
        );
    }
    let operator = rows("token-ops");
    assert!(
        operator
            .iter()
            .all(|r| r.get("found").is_some() && r.get("reason").is_some()),
        "{operator:?}"
    );
    // Sandboxes made and disposed of, one disposed of that never was: no
    // lock file is left in the state directory.
    let a = Some("token-a");
    for agent in ["one", "two"] {
        let (status, out) = post(
            &server.addr,
            "/v1/sandboxes",
            a,
            serde_json::json!({"thread": "l", "agent_dir": agent}),
        );
        assert_eq!(status, 200, "{out}");
    }
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "l", "agent_dir": "one"}),
    );
    assert_eq!((status, out["disposed"].as_u64()), (200, Some(1)), "{out}");
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "never"}),
    );
    assert_eq!((status, out["disposed"].as_u64()), (200, Some(0)), "{out}");
    let (status, out) = post(
        &server.addr,
        "/v1/threads/dispose",
        a,
        serde_json::json!({"thread": "l"}),
    );
    assert_eq!((status, out["disposed"].as_u64()), (200, Some(1)), "{out}");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("state/locks"))
        .expect("locks")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "lock files left: {left:?}");
}

/// A sandbox its keeper disposes of by itself (idle past the timeout)
/// leaves no lock file either (issue 28, item 10).
#[test]
fn an_idle_sandbox_that_goes_leaves_no_lock_file() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config().replace(
        "dispose_on_shutdown: true}",
        "dispose_on_shutdown: true, idle_timeout_seconds: 1}",
    );
    let server = start(&config(dir.path(), &body));
    let (status, out) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "idle"}),
    );
    assert_eq!(status, 200, "{out}");
    let state = dir.path().join("state");
    let entries = |sub: &str| -> Vec<std::ffi::OsString> {
        std::fs::read_dir(state.join(sub))
            .expect("state")
            .flatten()
            .map(|e| e.file_name())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(entries("sandboxes").is_empty() && entries("locks").is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(entries("sandboxes"), Vec::<std::ffi::OsString>::new());
    assert_eq!(entries("locks"), Vec::<std::ffi::OsString>::new());
}

/// The configuration's `egress:` section reaches the proxy whole: its
/// `audit_bounds` too (the server once copied three of its fields and
/// dropped the bounds, so a sandbox's audit budget was the default's).
#[test]
fn the_configured_audit_budget_holds_for_the_servers_sandboxes() {
    if !root() {
        return;
    }
    // An upstream that answers each request with a short 200.
    let port = upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    std::fs::write(p.join("policy.yaml"), OWN_POLICY.as_str()).expect("policy");
    std::fs::write(p.join("hosts"), "127.0.0.1 ok.test\n").expect("hosts");
    // The least burst and rate the proxy takes: about a hundred lines.
    let body = good_config().replace(
        "min_isolation: container\n",
        &format!(
            "min_isolation: container\npolicy: policy.yaml\negress: {{nameservers: [], hosts_file: {}, audit_bounds: {{rotate_bytes: 1048576, keep: 1, sandbox_bytes_per_sec: 1024, sandbox_burst_bytes: 32768}}}}\n",
            p.join("hosts").display()
        ),
    );
    let server = start(&config(p, &body));
    let spec =
        format!("kind: fetch\nimage: host\nrequires: [exec]\negress_allow: [\"ok.test:{port}\"]\n");
    let a = Some("token-a");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "budget", "spec": spec}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "budget", "argv": ["sh", "-c", format!(
            "for i in $(seq 300); do curl -s -o /dev/null -w '%{{http_code}}\\n' --max-time 5 http://ok.test:{port}/$i; done | sort | uniq -c"
        )]}),
    );
    assert_eq!(status, 200, "{v}");
    let counts = v["stdout"].as_str().unwrap_or_default();
    assert!(counts.contains(" 200"), "nothing was carried: {v}");
    assert!(
        counts.contains(" 429"),
        "300 requests within a 32 KiB audit budget were all carried: {v}"
    );
}

/// `POST /v1/sandboxes/egress` replaces the egress allowlist of the
/// credential's own live sandbox (kept, through its keeper): a host
/// dropped is refused from then on, one kept still answers. Another
/// credential naming the same thread reaches no sandbox (`404`), and a
/// body cannot name an identity. A list the policy denies (`403`) or that
/// does not load (`400`) says egress is now closed, and nothing is carried
/// until a change that loads.
#[test]
fn a_credential_replaces_only_its_own_sandboxes_egress_live() {
    if !root() {
        return;
    }
    let port = upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path();
    // No rule that reads an address: an entry no allow rule names is
    // denied for certain at the change (as at create), not per connection.
    std::fs::write(
        p.join("policy.yaml"),
        cordon_testkit::policy::loopback_egress("", "", ""),
    )
    .expect("policy");
    std::fs::write(p.join("hosts"), "127.0.0.1 ok.test other.test\n").expect("hosts");
    let body = good_config().replace(
        "min_isolation: container\n",
        &format!(
            "min_isolation: container\npolicy: policy.yaml\negress: {{nameservers: [], hosts_file: {}, audit: {}}}\n",
            p.join("hosts").display(),
            p.join("audit.jsonl").display()
        ),
    );
    let server = start(&config(p, &body));
    let spec = format!(
        "kind: fetch\nimage: host\nrequires: [exec]\negress_allow: [\"ok.test:{port}\", \"other.test:{port}\"]\n"
    );
    let a = Some("token-a");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "live", "spec": spec}),
    );
    assert_eq!(status, 200, "{v}");
    let fetch = |host: &str| -> (i64, String) {
        let (status, v) = post(
            &server.addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": "live", "argv": [
                "/usr/bin/curl", "-sS", "-f", "--max-time", "10", format!("http://{host}:{port}/")
            ]}),
        );
        assert_eq!(status, 200, "{v}");
        (
            v["status"]["code"].as_i64().expect("status"),
            format!(
                "{}{}",
                v["stdout"].as_str().unwrap_or(""),
                v["stderr"].as_str().unwrap_or("")
            ),
        )
    };
    let egress = |token: Option<&str>, allow: serde_json::Value| {
        post(
            &server.addr,
            "/v1/sandboxes/egress",
            token,
            serde_json::json!({"thread": "live", "egress_allow": allow}),
        )
    };
    assert_eq!(fetch("other.test"), (0, "hello".into()));

    // Another credential's thread of the same name is not this sandbox.
    let (status, v) = egress(Some("token-b"), serde_json::json!([]));
    assert_eq!(status, 404, "{v}");
    let (status, v) = egress(None, serde_json::json!([]));
    assert_eq!(status, 401, "{v}");
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes/egress",
        a,
        serde_json::json!({"thread": "live", "egress_allow": [], "identity": {"namespace": "team-b"}}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(fetch("other.test"), (0, "hello".into()));

    let (status, v) = egress(a, serde_json::json!([format!("ok.test:{port}")]));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["generation"], 2, "{v}");
    assert_eq!(
        v["egress_allow"],
        serde_json::json!([format!("ok.test:{port}")])
    );
    let (code, out) = fetch("other.test");
    assert_eq!(code, 22, "{out}");
    assert!(out.contains("403"), "{out}");
    assert_eq!(fetch("ok.test"), (0, "hello".into()));

    // Denied by the policy: closed, and said so.
    let (status, v) = egress(
        a,
        serde_json::json!([format!("ok.test:{port}"), "elsewhere.test"]),
    );
    assert_eq!(status, 403, "{v}");
    let error = v["error"].as_str().expect("error");
    assert!(
        error.contains("elsewhere.test") && error.contains("now closed"),
        "{v}"
    );
    assert_eq!(fetch("ok.test").0, 22);
    // A change that loads opens it again; one that does not closes it.
    let (status, v) = egress(a, serde_json::json!([format!("ok.test:{port}")]));
    assert_eq!(status, 200, "{v}");
    assert_eq!(fetch("ok.test"), (0, "hello".into()));
    let (status, v) = egress(a, serde_json::json!(["10.0.0.1"]));
    assert_eq!(status, 400, "{v}");
    let error = v["error"].as_str().expect("error");
    assert!(
        error.contains("`10.0.0.1`") && error.contains("now closed"),
        "{v}"
    );
    assert_eq!(fetch("ok.test").0, 22);

    // A sandbox made without `egress_allow` has no route to change, even
    // for a list the policy denies: said so, not "now closed".
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        a,
        serde_json::json!({"thread": "offline"}),
    );
    assert_eq!(status, 200, "{v}");
    for allow in [serde_json::json!([]), serde_json::json!(["elsewhere.test"])] {
        let (status, v) = post(
            &server.addr,
            "/v1/sandboxes/egress",
            a,
            serde_json::json!({"thread": "offline", "egress_allow": allow}),
        );
        assert_eq!(status, 400, "{v}");
        let error = v["error"].as_str().expect("error");
        assert!(
            error.contains("no route out") && !error.contains("now closed"),
            "{v}"
        );
    }

    // The audit log has each change, with who asked.
    let audit = std::fs::read_to_string(p.join("audit.jsonl")).expect("audit");
    let changes: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|l| l["kind"] == "egress_allow")
        .collect();
    let verdicts: Vec<&str> = changes
        .iter()
        .filter_map(|l| l["verdict"].as_str())
        .collect();
    assert_eq!(
        verdicts,
        ["changed", "closed", "changed", "closed"],
        "{changes:?}"
    );
    assert!(
        changes.iter().all(|l| l["reason"]
            .as_str()
            .is_some_and(|r| r.contains("POST /v1/sandboxes/egress` (credential `a`"))),
        "{changes:?}"
    );
}

// ---- Warm pools --------------------------------------------------------

/// The server's pool gauge for `pool`, read from `/metrics` as credential a.
fn pool_ready(addr: &str, pool: &str) -> usize {
    let (_, text) = get(addr, "/metrics", Some("token-a"));
    let line = format!("cordon_pool_ready{{pool=\"{pool}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn wait_for_pool(addr: &str, pool: &str, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while pool_ready(addr, pool) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "pool `{pool}` never held {n}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The records in `state` whose thread is a pool's: (handle, policy digest).
fn pooled_records(state: &std::path::Path) -> Vec<(String, String)> {
    let (recs, _) = cordon_host::state::StateDir::open(state)
        .expect("state")
        .list()
        .expect("list");
    recs.into_iter()
        .filter(|r| r.key.thread.starts_with("cordon-pool-"))
        .map(|r| (r.handle, r.provenance.policy_digest))
        .collect()
}

fn pool_config(
    dir: &std::path::Path,
    size: usize,
    policy: Option<&str>,
    dispose: bool,
) -> std::path::PathBuf {
    std::fs::write(dir.join("pool-spec.yaml"), "kind: run\nimage: host\n").expect("spec");
    let mut body = good_config()
        .replace(
            "sandboxes: {state_dir: state, dispose_on_shutdown: true}",
            &format!("sandboxes: {{state_dir: state, dispose_on_shutdown: {dispose}}}"),
        )
        + &format!(
            "limits: {{max_sandboxes: 64, requests_per_second: 1000}}\npools:\n  - {{name: warm, spec: pool-spec.yaml, size: {size}, credential: a}}\n"
        );
    if let Some(p) = policy {
        body += &format!("policy: {p}\n");
    }
    config(dir, &body)
}

/// 50 concurrent creates against a pool of 10: each caller gets a sandbox
/// of its own (the pool's are claimed, rekeyed to the caller's thread,
/// never handed to two), the rest are made cold, and the pool refills.
#[test]
fn a_pool_claim_is_rekeyed_never_handed_to_two_callers_and_the_pool_refills() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = start(&pool_config(dir.path(), 10, None, true));
    wait_for_pool(&server.addr, "warm", 10);
    let pooled: Vec<String> = pooled_records(&dir.path().join("state"))
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    assert_eq!(pooled.len(), 10);
    let addr = server.addr.clone();
    let made: Vec<(String, String)> = std::thread::scope(|sc| {
        let joins: Vec<_> = (0..50)
            .map(|i| {
                let addr = addr.clone();
                sc.spawn(move || {
                    let thread = format!("claim-{i}");
                    let (status, v) = post(
                        &addr,
                        "/v1/sandboxes",
                        Some("token-a"),
                        serde_json::json!({"thread": thread}),
                    );
                    assert_eq!(status, 200, "{v}");
                    (thread, v["handle"].as_str().expect("handle").to_string())
                })
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().expect("a create"))
            .collect()
    });
    let mut handles: Vec<&String> = made.iter().map(|(_, h)| h).collect();
    handles.sort();
    handles.dedup();
    assert_eq!(handles.len(), 50, "a sandbox was handed to two callers");
    let claimed: Vec<&(String, String)> = made.iter().filter(|(_, h)| pooled.contains(h)).collect();
    assert_eq!(
        claimed.len(),
        10,
        "every pooled sandbox was claimed once: {made:?}"
    );
    // Rekeyed: a claimed sandbox is found at its caller's thread (its
    // record says so), answers there, and its files are its own.
    let state = cordon_host::state::StateDir::open(&dir.path().join("state")).expect("state");
    for (thread, h) in &claimed {
        let rec = state.read(h).expect("read").expect("a record");
        assert_eq!(&rec.key.thread, thread);
        let (status, v) = post(
            &addr,
            "/v1/sandboxes/exec",
            Some("token-a"),
            serde_json::json!({"thread": thread, "argv": ["sh", "-c", format!("echo {thread} > who; cat who")]}),
        );
        assert_eq!(
            (status, v["stdout"].as_str()),
            (200, Some(format!("{thread}\n").as_str())),
            "{v}"
        );
    }
    // Another credential's create is not served from credential a's pool.
    let (status, v) = post(
        &addr,
        "/v1/sandboxes",
        Some("token-b"),
        serde_json::json!({"thread": "b-1"}),
    );
    assert_eq!(status, 200, "{v}");
    assert!(!pooled.contains(&v["handle"].as_str().unwrap_or_default().to_string()));
    // A caller cannot name a pool's thread.
    let (status, _) = post(
        &addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "cordon-pool-warm-1"}),
    );
    assert_eq!(status, 400);
    wait_for_pool(&addr, "warm", 10);
    let refilled = pooled_records(&dir.path().join("state"));
    assert_eq!(refilled.len(), 10, "{refilled:?}");
    assert!(
        refilled.iter().all(|(h, _)| !pooled.contains(h)),
        "a claimed sandbox went back to the pool"
    );
}

/// A server restarted under another policy finds the old pool in the
/// state directory: it disposes of it and serves only sandboxes made
/// under the policy in force.
#[test]
fn a_pool_made_under_an_older_policy_is_drained_not_served() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    let old = {
        let server = start(&pool_config(dir.path(), 2, None, false));
        wait_for_pool(&server.addr, "warm", 2);
        let old = pooled_records(&state);
        drop(server); // SIGTERM; `dispose_on_shutdown: false` leaves them
        old
    };
    assert_eq!(old.len(), 2);
    std::fs::write(
        dir.path().join("narrower.yaml"),
        "policy:\n  extends: [cordon:default]\n  compute:\n    max_memory: 256MiB\n",
    )
    .expect("policy");
    let server = start(&pool_config(dir.path(), 2, Some("narrower.yaml"), true));
    wait_for_pool(&server.addr, "warm", 2);
    let now = pooled_records(&state);
    assert_eq!(now.len(), 2, "{now:?}");
    for (h, digest) in &now {
        assert!(
            !old.iter().any(|(o, _)| o == h),
            "a sandbox of the old pool is still pooled"
        );
        assert_ne!(digest, &old[0].1, "pooled under the old policy");
    }
    let (status, v) = post(
        &server.addr,
        "/v1/sandboxes",
        Some("token-a"),
        serde_json::json!({"thread": "after"}),
    );
    assert_eq!(status, 200, "{v}");
    let h = v["handle"].as_str().expect("handle");
    assert!(
        !old.iter().any(|(o, _)| o == h),
        "the old policy's sandbox was served"
    );
    for (o, _) in &old {
        assert!(
            cordon_host::state::StateDir::open(&state)
                .unwrap()
                .read(o)
                .unwrap()
                .is_none(),
            "old `{o}` not drained"
        );
    }
}

/// A paused sandbox's files outlive its keeper: with its keeper and the
/// server killed (`kill -9` both), the restarted server finds it at its
/// key, made again from the files it had when paused, and serves it. One
/// disposed of while paused, and one whose keeper died while it ran, are
/// not made again.
#[test]
fn a_paused_sandbox_survives_kill_9_of_its_keeper_and_of_the_server() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let body = good_config().replace(
        "sandboxes: {state_dir: state, dispose_on_shutdown: true}",
        &format!(
            "sandboxes: {{state_dir: state, dispose_on_shutdown: false}}\nsnapshots: {{dir: {}}}",
            dir.path().join("snapshots").display()
        ),
    );
    let cfg = config(dir.path(), &body);
    let mut server = start(&cfg);
    let a = Some("token-a");
    let addr = server.addr.clone();
    let mut handles = Vec::new();
    for thread in ["paused", "disposed", "running"] {
        let (status, v) = post(
            &addr,
            "/v1/sandboxes",
            a,
            serde_json::json!({"thread": thread}),
        );
        assert_eq!(status, 200, "{v}");
        handles.push(v["handle"].as_str().expect("handle").to_string());
        let (status, v) = post(
            &addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": thread, "argv": ["sh", "-c", format!("echo {thread} > kept")]}),
        );
        assert_eq!(status, 200, "{v}");
    }
    for thread in ["paused", "disposed"] {
        let (status, v) = post(
            &addr,
            "/v1/sandboxes/pause",
            a,
            serde_json::json!({"thread": thread}),
        );
        assert_eq!(status, 200, "{v}");
    }
    let paused = || {
        let (_, text) = get(&addr, "/metrics", a);
        text.lines()
            .find_map(|l| l.strip_prefix("cordon_sandboxes_paused{scope=\"team-a\"} "))
            .map(|n| n.trim().to_string())
            .unwrap_or_else(|| "0".into())
    };
    assert_eq!(paused(), "2");
    let (status, v) = post(
        &addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "disposed"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(paused(), "1");
    for h in [&handles[0], &handles[2]] {
        let pid = keeper_of(h);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill the keeper");
    }
    server.child.kill().expect("kill -9 the server");
    let _ = server.child.wait();
    drop(server);
    let server = start(&cfg);
    let addr = server.addr.clone();
    let (status, v) = post(
        &addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "paused", "argv": ["cat", "kept"]}),
    );
    assert_eq!(
        (status, v["stdout"].as_str()),
        (200, Some("paused\n")),
        "{v}"
    );
    // Served from then on as any sandbox, at its key.
    let (status, v) = post(
        &addr,
        "/v1/sandboxes/exec",
        a,
        serde_json::json!({"thread": "paused", "argv": ["sh", "-c", "echo more >> kept; cat kept"]}),
    );
    assert_eq!(
        (status, v["stdout"].as_str()),
        (200, Some("paused\nmore\n")),
        "{v}"
    );
    for thread in ["disposed", "running"] {
        let (status, v) = post(
            &addr,
            "/v1/sandboxes/exec",
            a,
            serde_json::json!({"thread": thread, "argv": ["true"]}),
        );
        assert_eq!(status, 404, "`{thread}` was made again: {v}");
    }
    let (status, _) = post(
        &addr,
        "/v1/sandboxes/dispose",
        a,
        serde_json::json!({"thread": "paused"}),
    );
    assert_eq!(status, 200);
}
