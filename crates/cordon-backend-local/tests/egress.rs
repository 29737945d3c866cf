//! Egress at the local rungs, end to end: a container-rung sandbox whose
//! spec names hosts reaches them through its proxy channel (curl, Python's
//! urllib, `pip install` from a test index) and reaches nothing else —
//! not a listener on the host's loopback, not a UDP socket there, not a
//! host outside its allowlist, not another sandbox's proxy port. A spec
//! without an allowlist gets no route; the process rung holds an allowlist
//! closed. The audit log names the sandbox and the identity for every
//! request that reached the proxy.
//!
//! Every negative sits next to a positive in the same test, so a broken
//! fixture fails instead of passing. Nothing leaves 127.0.0.1: the test
//! hosts (`ok.test`, `pypi.test`, `denied.test`) are tiny servers on the
//! host's loopback, named through the proxy's hosts file, with DNS off.
//!
//! Launching a sandbox needs root: elsewhere the tests skip loudly, and
//! with `CI=true` a machine that cannot hold the rung is a failure.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_egress::AuditLine;
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Identity};
use cordon_sandbox::{
    CallerContext, Capability, EgressEntry, EgressSetup, ExecOutput, ExecRequest, ExitStatus,
    Isolation, Router, RouterError, Sandbox, SandboxSpec, Warning,
};

mod common;

use common::rung_or_skip;

// ---- the policy --------------------------------------------------------------

/// A root policy (not `cordon:default`, whose egress allows nothing and
/// which a later layer could only narrow): `cordon:default`'s compute and
/// storage shape, and an egress surface that opens loopback for the test
/// hosts only and denies `denied.test`.
const POLICY: &str = r#"policy:
  compute:
    allow:
      - name: system-programs
        when: >-
          command.startsWith("/usr/") || command.startsWith("/bin/") ||
          command.startsWith("/sbin/") || command.startsWith("/lib/") ||
          command.startsWith("/lib64/")
    max_memory: 512MiB
    max_processes: 64
    max_cpu_seconds: 60
    max_wall_seconds: 120
  storage:
    allow:
      - name: system-read-execute
        when: >-
          (path.startsWith("/usr/") || path.startsWith("/lib/") ||
          path.startsWith("/lib64/") || path.startsWith("/bin/") ||
          path.startsWith("/sbin/")) && mode in ["read", "execute"]
      - name: etc-read
        when: path.startsWith("/etc/") && mode == "read"
      - name: work-dir
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: private-tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
      - name: devices
        when: >-
          path in ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
          && mode in ["read", "write"]
    deny:
      - name: host-secrets
        when: >-
          path in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"] ||
          path.startsWith("/etc/sudoers.d/") || path.startsWith("/etc/ssh/") ||
          path.startsWith("/etc/ssl/private/")
  egress:
    allow_ranges:
      - cidr: 127.0.0.0/8
        hosts: [ok.test, pypi.test, denied.test]
    allow:
      - name: test-hosts
        when: host.endsWith(".test")
    deny:
      - name: no-denied
        when: host == "denied.test"
"#;

const SCOPE: &str = "egress";
const THREAD: &str = "thread";
const NAMESPACE: &str = "egress-ns";
const NAME: &str = "egress-workload";

fn caller(agent: &str) -> CallerContext {
    cordon_testkit::caller(
        SCOPE,
        THREAD,
        agent,
        Identity {
            namespace: NAMESPACE.into(),
            name: NAME.into(),
            attested: true,
            ..Identity::default()
        },
    )
}

/// The key the audit log names for `agent`'s sandbox.
fn key_of(agent: &str) -> String {
    format!("{SCOPE}/{THREAD}/{agent}")
}

// ---- upstreams on the host's loopback ------------------------------------------

/// A tiny HTTP server on the host's 127.0.0.1: one request per connection,
/// answered from `routes` (404 otherwise). Counts the connections it
/// accepts and records the request lines it read; a connection that opens
/// with a TLS handshake record is recorded as `TLS` and closed.
struct Upstream {
    port: u16,
    conns: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    fn start(routes: BTreeMap<String, Vec<u8>>) -> Upstream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let conns = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let routes = Arc::new(routes);
        let (c, r) = (conns.clone(), requests.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let (routes, r) = (routes.clone(), r.clone());
                std::thread::spawn(move || answer(s, &routes, &r));
            }
        });
        Upstream {
            port,
            conns,
            requests,
        }
    }

    fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn answer(mut s: TcpStream, routes: &BTreeMap<String, Vec<u8>>, seen: &Mutex<Vec<String>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.first() == Some(&22) {
            seen.lock().unwrap().push("TLS".into());
            return;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or("").to_string();
    seen.lock().unwrap().push(line.clone());
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match routes.get(path) {
        Some(b) => ("200 OK", b.clone()),
        None => ("404 Not Found", b"not here\n".to_vec()),
    };
    let ctype = if path.ends_with(".whl") {
        "application/octet-stream"
    } else {
        "text/html"
    };
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(&body);
    let _ = s.flush();
}

/// An upstream whose one route `/x` answers `body`.
fn ok_upstream(body: &str) -> Upstream {
    Upstream::start(BTreeMap::from([(
        "/x".to_string(),
        body.as_bytes().to_vec(),
    )]))
}

// ---- the fixture -----------------------------------------------------------------

struct Fixture {
    router: Router,
    audit: PathBuf,
    // Dropped last: the work dirs and the hosts/audit files live here.
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// A backend at `rung` behind a router whose floor is `floor`, its proxy
/// resolving the test hosts to 127.0.0.1 through a hosts file (no DNS),
/// auditing to a file of its own.
fn fixture(rung: Rung, floor: Isolation, init: InitProgram) -> Fixture {
    fixture_inspecting(rung, floor, init, &[])
}

/// [`fixture`] under a policy that has the proxy inspect `inspect` (set
/// on the loaded policy directly, until the policy's `egress.inspect`
/// parses).
fn fixture_inspecting(
    rung: Rung,
    floor: Isolation,
    init: InitProgram,
    inspect: &[&str],
) -> Fixture {
    let parent = common::work_parent("cordon-egress-");
    let files = tempfile::Builder::new()
        .prefix("cordon-egress-files-")
        .tempdir()
        .unwrap();
    let hosts = files.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 ok.test pypi.test denied.test\n").unwrap();
    let audit = files.path().join("audit.jsonl");
    let mut text = POLICY.to_string();
    if rung == Rung::Process {
        // The process rung's private temporary directory is on the work
        // dir's volume (here under /var/tmp, which `/tmp/` does not cover).
        text = text.replace(
            "    deny:\n      - name: host-secrets",
            &format!(
                "{}    deny:\n      - name: host-secrets",
                common::process_rung_tmp(parent.path())
            ),
        );
        assert_ne!(text, POLICY);
    }
    if !inspect.is_empty() {
        let with = text.replacen(
            "  egress:\n",
            &format!("  egress:\n    inspect: [{}]\n", inspect.join(", ")),
            1,
        );
        assert_ne!(
            with, text,
            "the test policy has an egress surface to inspect on"
        );
        text = with;
    }
    let policy = common::policy("egress-test.yaml", &text);
    assert_eq!(policy.inspects_any(), !inspect.is_empty());
    let backend = common::backend(
        rung,
        policy.clone(),
        parent.path(),
        init,
        EgressSetup {
            // Never the system resolver: only the hosts file answers.
            nameservers: Some(Vec::new()),
            hosts_file: Some(hosts),
            audit: Some(audit.clone()),
            // In this process: the library host's choice (the binary's
            // tests run it in its own confined process).
            proxy: None,
            policy_file: None,
            audit_bounds: Default::default(),
        },
    );
    let router = Router::builder(policy, Deployment::default())
        .min_isolation(floor)
        .backend(backend)
        .build()
        .unwrap();
    Fixture {
        router,
        audit,
        _dirs: (parent, files),
    }
}

fn container_fixture(test: &str) -> Option<Fixture> {
    let init = rung_or_skip(Rung::Container, test)?;
    Some(fixture(Rung::Container, Isolation::Container, init))
}

fn spec(allow: &[String]) -> SandboxSpec {
    SandboxSpec::new("egress", "host")
        .unwrap()
        .with_requires([Capability::Exec])
        .with_egress_allow(allow.iter().map(|e| EgressEntry::parse(e).unwrap()))
        .unwrap()
}

impl Fixture {
    fn acquire(&self, agent: &str, allow: &[String]) -> Arc<dyn Sandbox> {
        self.router
            .acquire(&caller(agent), &spec(allow))
            .unwrap_or_else(|e| panic!("acquire for `{agent}` with {allow:?}: {e}"))
    }

    fn dispose(&self, agent: &str) {
        assert_eq!(self.router.dispose(&caller(agent)).unwrap(), 1);
    }

    /// The audit lines so far.
    fn audit_lines(&self) -> Vec<AuditLine> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| AuditLine::parse(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Waits (briefly) until `pred` holds for the audit lines, and returns
    /// them either way.
    fn audit_until(&self, pred: impl Fn(&[AuditLine]) -> bool) -> Vec<AuditLine> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let lines = self.audit_lines();
            if pred(&lines) || Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

// ---- running things in a sandbox ------------------------------------------------

fn exec_env(sb: &Arc<dyn Sandbox>, argv: &[&str], env: &[(&str, &str)]) -> ExecOutput {
    let req = ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        stdin: Vec::new(),
        timeout: Duration::from_secs(90),
        max_output_bytes: 1 << 20,
    };
    sb.exec(&req)
        .unwrap_or_else(|e| panic!("exec {argv:?}: {e}"))
}

fn exec(sb: &Arc<dyn Sandbox>, argv: &[&str]) -> ExecOutput {
    exec_env(sb, argv, &[])
}

fn sh(sb: &Arc<dyn Sandbox>, script: &str) -> ExecOutput {
    exec(sb, &["/bin/sh", "-c", script])
}

fn out(o: &ExecOutput) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn shown(o: &ExecOutput) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: &ExecOutput) -> String {
    assert_eq!(o.status, ExitStatus::Code(0), "{}", shown(o));
    out(o)
}

/// Python: a TCP connect to 127.0.0.1:PORT; prints `connected`, or the
/// step that failed (`socket` or `connect`) and its errno.
const TCP_CONNECT: &str = r#"
import errno, socket, sys
step = "socket"
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    step = "connect"
    s.connect(("127.0.0.1", int(sys.argv[1])))
    print("connected")
except OSError as e:
    print(step + ": errno", e.errno, errno.errorcode.get(e.errno, "?"))
"#;

/// Python: a CONNECT to HOST:PORT through the proxy `http_proxy` names;
/// prints the status line, then, when the tunnel opened, how a TLS
/// handshake naming HOST went (the test upstream speaks no TLS: it records
/// the ClientHello and closes).
const TUNNEL: &str = r#"
import os, socket, ssl, sys
host, port = sys.argv[1], sys.argv[2]
proxy = int(os.environ["http_proxy"].rsplit(":", 1)[1])
s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    c = s.recv(1)
    if not c:
        break
    head += c
status = head.split(b"\r\n")[0].decode()
print(status)
if " 200" in status:
    try:
        ssl.create_default_context().wrap_socket(s, server_hostname=host)
        print("handshake done")
    except (OSError, ssl.SSLError) as e:
        print("handshake failed")
"#;

/// Python: one UDP datagram to 127.0.0.1:PORT; prints `sent` or the errno.
const UDP_SEND: &str = r#"
import errno, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"cordon-udp-probe", ("127.0.0.1", int(sys.argv[1])))
    print("sent")
except OSError as e:
    print("errno", e.errno, errno.errorcode.get(e.errno, "?"))
"#;

fn tcp_connect(sb: &Arc<dyn Sandbox>, port: u16) -> String {
    ok(&exec(
        sb,
        &["/usr/bin/python3", "-c", TCP_CONNECT, &port.to_string()],
    ))
}

/// The port of the proxy channel named in `http_proxy`, as the sandbox
/// sees it.
fn proxy_port_of(sb: &Arc<dyn Sandbox>) -> u16 {
    let url = ok(&sh(sb, "printf %s \"$http_proxy\""));
    url.strip_prefix("http://127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("http_proxy is `{url}`, not http://127.0.0.1:PORT"))
}

/// `curl` through the sandbox's proxy: `(http status, body)`.
fn curl(sb: &Arc<dyn Sandbox>, url: &str) -> (String, String) {
    let o = ok(&exec(
        sb,
        &[
            "/usr/bin/curl",
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code}",
            url,
        ],
    ));
    let (body, code) = o.rsplit_once('\n').unwrap_or(("", &o));
    (code.to_string(), body.to_string())
}

// ---- 1 and 5: curl and urllib through the proxy; the audit log -----------------

#[test]
fn curl_and_urllib_reach_an_allowed_host_through_the_proxy_and_the_audit_names_the_sandbox() {
    let Some(f) = container_fixture("curl_and_urllib") else {
        return;
    };
    let ok_up = ok_upstream("hello from ok.test");
    let other = ok_upstream("must never be served");
    let allow = vec![format!("ok.test:{}", ok_up.port)];
    let sb = f.acquire("curl", &allow);
    let proxy = proxy_port_of(&sb);

    // Kept: every exec below runs in the one acquired sandbox.
    let url = format!("http://ok.test:{}/x", ok_up.port);
    let (code, body) = curl(&sb, &url);
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("200", "hello from ok.test")
    );
    assert_eq!(ok_up.conns(), 1);

    let py = ok(&exec(
        &sb,
        &[
            "/usr/bin/python3",
            "-c",
            "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())",
            &url,
        ],
    ));
    assert_eq!(py, "hello from ok.test");
    assert_eq!(ok_up.conns(), 2);

    // The same host on a port the allowlist does not name: the proxy
    // refuses, and the upstream there sees nothing.
    let other_url = format!("http://ok.test:{}/x", other.port);
    let (code, body) = curl(&sb, &other_url);
    assert_eq!(code, "403", "{body}");
    assert!(body.contains("is not in the egress allowlist"), "{body}");
    assert_eq!(other.conns(), 0, "{:?}", other.requests());

    // A CONNECT tunnel to the allowed host opens and carries the TLS
    // ClientHello to it; one to the other port is refused before anything
    // is dialled.
    let port = ok_up.port.to_string();
    let tunnel = ok(&exec(
        &sb,
        &["/usr/bin/python3", "-c", TUNNEL, "ok.test", &port],
    ));
    assert_eq!(tunnel, "HTTP/1.1 200 OK\nhandshake failed", "{tunnel}");
    assert_eq!(ok_up.conns(), 3);
    assert_eq!(ok_up.requests().last().map(String::as_str), Some("TLS"));
    let other_port = other.port.to_string();
    let refused = ok(&exec(
        &sb,
        &["/usr/bin/python3", "-c", TUNNEL, "ok.test", &other_port],
    ));
    assert_eq!(refused, "HTTP/1.1 403 Forbidden", "{refused}");
    assert_eq!(other.conns(), 0, "{:?}", other.requests());

    // The audit log: one line per request, each naming the sandbox's key
    // and identity.
    let lines = f.audit_until(|l| l.iter().filter(|l| l.verdict != "end").count() >= 5);
    let mine: Vec<&AuditLine> = lines
        .iter()
        .filter(|l| l.verdict == "allow" || l.verdict == "deny")
        .collect();
    assert_eq!(mine.len(), 5, "{lines:#?}");
    for l in &mine {
        assert_eq!(l.sandbox, key_of("curl"), "{l:#?}");
        assert_eq!(l.identity.namespace, NAMESPACE, "{l:#?}");
        assert_eq!(l.identity.name, NAME, "{l:#?}");
        assert!(!l.reason.is_empty(), "{l:#?}");
    }
    let tunnels: Vec<&&AuditLine> = mine.iter().filter(|l| l.kind == "connect").collect();
    assert_eq!(tunnels.len(), 2, "{lines:#?}");
    let open = tunnels
        .iter()
        .find(|l| l.verdict == "allow")
        .expect("the allowed tunnel");
    assert_eq!(
        (open.target.as_str(), open.status, open.ip.as_deref()),
        (
            format!("ok.test:{}", ok_up.port).as_str(),
            200,
            Some("127.0.0.1")
        ),
        "{open:#?}"
    );
    let shut = tunnels
        .iter()
        .find(|l| l.verdict == "deny")
        .expect("the refused tunnel");
    assert_eq!(shut.status, 403, "{shut:#?}");
    assert!(
        shut.reason.contains("is not in the egress allowlist"),
        "{shut:#?}"
    );
    let mine: Vec<&AuditLine> = mine.into_iter().filter(|l| l.kind == "http").collect();
    let allowed: Vec<&&AuditLine> = mine.iter().filter(|l| l.verdict == "allow").collect();
    assert_eq!(allowed.len(), 2, "{lines:#?}");
    for l in &allowed {
        assert_eq!(l.target, url, "{l:#?}");
        // Written before the request was sent: the answer is on the
        // `end` line after it.
        assert_eq!(l.status, 0, "{l:#?}");
        assert_eq!(l.ip.as_deref(), Some("127.0.0.1"), "{l:#?}");
    }
    let answered = lines
        .iter()
        .filter(|l| l.kind == "http" && l.verdict == "end" && l.target == url)
        .filter(|l| l.status == 200 && l.sandbox == key_of("curl"))
        .count();
    assert_eq!(answered, 2, "{lines:#?}");
    let denied: Vec<&&AuditLine> = mine.iter().filter(|l| l.verdict == "deny").collect();
    assert_eq!(denied.len(), 1, "{lines:#?}");
    assert_eq!(denied[0].target, other_url);
    assert_eq!(denied[0].status, 403);
    assert!(
        denied[0].reason.contains(&format!(
            "ok.test:{} is not in the egress allowlist",
            other.port
        )),
        "the denial does not name the allowlist: {:#?}",
        denied[0]
    );
    // Nothing in the log is another sandbox's or a connection that never
    // reached the proxy.
    assert!(
        lines.iter().all(|l| l.sandbox == key_of("curl")),
        "{lines:#?}"
    );
    assert!(proxy >= 20_000);
    f.dispose("curl");
}

// ---- 2: pip install from a test index ---------------------------------------------

/// Builds `cordontestpkg-1.0-py3-none-any.whl` in `dir` with the host's
/// python3 (zipfile, RECORD hashed as wheels hash it); prints the wheel's
/// sha256.
const BUILD_WHEEL: &str = r#"
import base64, hashlib, os, sys, zipfile
out = os.path.join(sys.argv[1], "cordontestpkg-1.0-py3-none-any.whl")
files = {
    "cordontestpkg/__init__.py": b"VALUE = 42\n",
    "cordontestpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: cordontestpkg\nVersion: 1.0\nSummary: cordon egress test package\n",
    "cordontestpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: cordon-egress-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def h(b):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
record = "".join(f"{n},{h(b)},{len(b)}\n" for n, b in files.items())
record += "cordontestpkg-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for n, b in files.items():
        z.writestr(n, b)
    z.writestr("cordontestpkg-1.0.dist-info/RECORD", record)
print(hashlib.sha256(open(out, "rb").read()).hexdigest())
"#;

const WHEEL: &str = "cordontestpkg-1.0-py3-none-any.whl";

/// A PEP 503 simple index serving the test wheel.
fn index_upstream(dir: &Path) -> Upstream {
    let built = std::process::Command::new("/usr/bin/python3")
        .args(["-c", BUILD_WHEEL])
        .arg(dir)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let sha = String::from_utf8(built.stdout).unwrap().trim().to_string();
    let wheel = std::fs::read(dir.join(WHEEL)).unwrap();
    let project = format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"/packages/{WHEEL}#sha256={sha}\">{WHEEL}</a>\n</body></html>\n"
    );
    let root = "<!DOCTYPE html>\n<html><body>\n<a href=\"/simple/cordontestpkg/\">cordontestpkg</a>\n</body></html>\n";
    Upstream::start(BTreeMap::from([
        ("/simple/".to_string(), root.as_bytes().to_vec()),
        ("/simple/cordontestpkg/".to_string(), project.into_bytes()),
        (format!("/packages/{WHEEL}"), wheel),
    ]))
}

#[test]
fn pip_installs_from_an_index_the_spec_allows() {
    let Some(f) = container_fixture("pip_install") else {
        return;
    };
    let wheels = tempfile::tempdir().unwrap();
    let index = index_upstream(wheels.path());
    let sb = f.acquire("pip", &[format!("pypi.test:{}", index.port)]);
    let import = "import cordontestpkg; print(cordontestpkg.VALUE)";
    let pip = |extra_env: &[&str]| {
        let mut argv: Vec<String> = ["/usr/bin/env"]
            .iter()
            .chain(extra_env)
            .map(|s| s.to_string())
            .collect();
        argv.extend(
            [
                "/usr/bin/python3",
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--no-input",
                "--retries",
                "0",
                "--timeout",
                "10",
                // pip refuses a plain-http index on a name that is not
                // loopback unless it is trusted.
                "--trusted-host",
                "pypi.test",
                "--index-url",
                &format!("http://pypi.test:{}/simple/", index.port),
                "--target",
                "/workspace/lib",
                "cordontestpkg",
            ]
            .map(String::from),
        );
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        exec(&sb, &argv)
    };

    // Before: not importable.
    let before = exec_env(
        &sb,
        &["/usr/bin/python3", "-c", import],
        &[("PYTHONPATH", "/workspace/lib")],
    );
    assert_ne!(before.status, ExitStatus::Code(0), "{}", shown(&before));

    // Without the proxy variables pip has no route: nothing reaches the
    // index and nothing is installed.
    let direct = pip(&[
        "-u",
        "http_proxy",
        "-u",
        "HTTP_PROXY",
        "-u",
        "https_proxy",
        "-u",
        "HTTPS_PROXY",
    ]);
    assert_ne!(direct.status, ExitStatus::Code(0), "{}", shown(&direct));
    assert_eq!(index.conns(), 0, "{:?}", index.requests());

    // Through the proxy it installs.
    let installed = pip(&[]);
    assert_eq!(
        installed.status,
        ExitStatus::Code(0),
        "{}",
        shown(&installed)
    );
    let after = exec_env(
        &sb,
        &["/usr/bin/python3", "-c", import],
        &[("PYTHONPATH", "/workspace/lib")],
    );
    assert_eq!(ok(&after), "42");
    let reqs = index.requests();
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("GET /simple/cordontestpkg/ "))
            && reqs
                .iter()
                .any(|r| r.starts_with(&format!("GET /packages/{WHEEL} "))),
        "{reqs:?}"
    );

    // Each request the index served is an allowed line of this sandbox.
    let want = reqs.len();
    let lines = f.audit_until(|l| l.iter().filter(|l| l.verdict == "allow").count() >= want);
    let allowed: Vec<&AuditLine> = lines.iter().filter(|l| l.verdict == "allow").collect();
    assert_eq!(allowed.len(), want, "{lines:#?}\n{reqs:?}");
    for l in &allowed {
        assert_eq!(l.sandbox, key_of("pip"), "{l:#?}");
        assert_eq!(
            (l.identity.namespace.as_str(), l.identity.name.as_str()),
            (NAMESPACE, NAME)
        );
        assert_eq!(l.facts.host.as_deref(), Some("pypi.test"), "{l:#?}");
        assert!(!l.reason.is_empty(), "{l:#?}");
    }
    f.dispose("pip");
}

// ---- 3: nothing but the proxy --------------------------------------------------------

#[test]
fn a_sandbox_with_an_allowlist_reaches_nothing_but_its_proxy() {
    let Some(f) = container_fixture("nothing_but_the_proxy") else {
        return;
    };
    let ok_up = ok_upstream("through the proxy");

    // The router refuses at acquire an entry the policy denies for
    // certain, and acquires the same spec without it.
    let denied = vec![
        format!("ok.test:{}", ok_up.port),
        format!("denied.test:{}", ok_up.port),
    ];
    match f.router.acquire(&caller("refused"), &spec(&denied)) {
        Err(RouterError::EgressDenied { entry, why, .. }) => {
            assert_eq!(entry, format!("denied.test:{}", ok_up.port));
            assert!(why.contains("no-denied"), "{why}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a spec naming denied.test was acquired"),
    }
    let sb = f.acquire("direct", &denied[..1]);

    // The positive: through the proxy the host is reached.
    let url = format!("http://ok.test:{}/x", ok_up.port);
    assert_eq!(curl(&sb, &url), ("200".into(), "through the proxy".into()));
    assert_eq!(ok_up.conns(), 1);

    // Direct TCP to a listener on the host's loopback: Landlock refuses
    // the connect; the listener accepts nothing.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let lport = listener.local_addr().unwrap().port();
    assert_eq!(tcp_connect(&sb, lport), "connect: errno 13 EACCES");
    // And to the allowed upstream's own port, bypassing the proxy.
    assert_eq!(tcp_connect(&sb, ok_up.port), "connect: errno 13 EACCES");

    // UDP to a socket on the host's loopback: nothing arrives.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let uport = udp.local_addr().unwrap().port();
    let sent = ok(&exec(
        &sb,
        &["/usr/bin/python3", "-c", UDP_SEND, &uport.to_string()],
    ));
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    let got = udp.recv_from(&mut buf);
    assert!(
        got.is_err(),
        "a datagram from the sandbox reached the host ({sent}): {got:?}"
    );

    // The proxy variables unset: curl resolves and connects itself, and
    // reaches nothing (no name for ok.test; pinned to 127.0.0.1, the
    // connect is refused).
    let unset = sh(
        &sb,
        &format!("env -u http_proxy -u HTTP_PROXY /usr/bin/curl -sS --max-time 10 {url}"),
    );
    assert_ne!(unset.status, ExitStatus::Code(0), "{}", shown(&unset));
    let pinned = sh(
        &sb,
        &format!(
            "/usr/bin/curl -sS --max-time 10 --noproxy '*' --resolve ok.test:{p}:127.0.0.1 {url}",
            p = ok_up.port
        ),
    );
    assert_ne!(pinned.status, ExitStatus::Code(0), "{}", shown(&pinned));
    assert!(
        String::from_utf8_lossy(&pinned.stderr).contains("Permission denied")
            || String::from_utf8_lossy(&pinned.stderr).contains("Couldn't connect"),
        "{}",
        shown(&pinned)
    );

    // None of it reached the host: the upstream still has one connection,
    // the listener none, and the audit log only the one request.
    assert_eq!(ok_up.conns(), 1, "{:?}", ok_up.requests());
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the sandbox's direct connect reached the host's listener"
    );
    // (Its `allow` line, written before it was carried, and the `end`
    // line with its answer.)
    let lines = f.audit_until(|l| l.len() >= 2);
    let verdicts: Vec<&str> = lines.iter().map(|l| l.verdict.as_str()).collect();
    assert_eq!(verdicts, ["allow", "end"], "{lines:#?}");
    assert_eq!(lines[0].sandbox, key_of("direct"));

    // The probes themselves see a connection and a datagram when one is
    // made (from the host), so their silence above means something.
    let _c = TcpStream::connect(("127.0.0.1", lport)).unwrap();
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok());
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"x", ("127.0.0.1", uport))
        .unwrap();
    assert!(udp.recv_from(&mut buf).is_ok());
    f.dispose("direct");
}

// ---- 4: another sandbox's proxy port ---------------------------------------------------

#[test]
fn a_sandbox_cannot_connect_to_another_sandboxs_proxy_port() {
    let Some(f) = container_fixture("another_proxy_port") else {
        return;
    };
    let up_a = ok_upstream("for a");
    let up_b = ok_upstream("for b");
    let a = f.acquire("a", &[format!("ok.test:{}", up_a.port)]);
    let pa = proxy_port_of(&a);
    // Ports are drawn at random per sandbox: draw B again in the rare case
    // it got A's.
    let (mut b_agent, mut b) = ("b", f.acquire("b", &[format!("ok.test:{}", up_b.port)]));
    let mut pb = proxy_port_of(&b);
    if pb == pa {
        f.dispose("b");
        (b_agent, b) = ("b2", f.acquire("b2", &[format!("ok.test:{}", up_b.port)]));
        pb = proxy_port_of(&b);
    }
    assert_ne!(pa, pb, "two sandboxes drew the same proxy port twice");

    // Each reaches its own proxy.
    assert_eq!(tcp_connect(&a, pa), "connected");
    assert_eq!(tcp_connect(&b, pb), "connected");
    // A cannot connect to B's port (Landlock), nor B to A's.
    assert_eq!(tcp_connect(&a, pb), "connect: errno 13 EACCES");
    assert_eq!(tcp_connect(&b, pa), "connect: errno 13 EACCES");
    // And A's requests pointed at B's port with B's host get nowhere:
    // A's own proxy refuses B's host, B's port is closed to A.
    let b_url = format!("http://ok.test:{}/x", up_b.port);
    let (code, _) = curl(&a, &b_url);
    assert_eq!(code, "403");
    let via_b = exec(
        &a,
        &[
            "/usr/bin/curl",
            "-sS",
            "--max-time",
            "10",
            "--proxy",
            &format!("http://127.0.0.1:{pb}"),
            &b_url,
        ],
    );
    assert_ne!(via_b.status, ExitStatus::Code(0), "{}", shown(&via_b));
    assert_eq!(up_b.conns(), 0);
    // The positive: B reaches its host.
    assert_eq!(curl(&b, &b_url), ("200".into(), "for b".into()));
    assert_eq!(up_b.conns(), 1);
    f.dispose("a");
    f.dispose(b_agent);
}

// ---- 6: no allowlist, no route; the process rung is closed ---------------------------------

#[test]
fn a_spec_without_an_allowlist_gets_no_route_at_the_container_rung() {
    let Some(f) = container_fixture("no_allowlist") else {
        return;
    };
    let up = ok_upstream("only with an allowlist");
    let none = f.acquire("none", &[]);
    let with = f.acquire("with", &[format!("ok.test:{}", up.port)]);

    // No proxy variables at all.
    let env = ok(&sh(&none, "env | grep -i _proxy || echo no-proxy-env"));
    assert_eq!(env, "no-proxy-env");
    let with_env = ok(&sh(&with, "env | grep -ic _proxy"));
    assert_eq!(with_env, "4");

    // Every loopback port is refused: the upstream's, a proxy-like port,
    // and the port the other sandbox's proxy listens on.
    let pw = proxy_port_of(&with);
    for port in [up.port, 80, 20_000, pw] {
        assert_eq!(
            tcp_connect(&none, port),
            "connect: errno 13 EACCES",
            "port {port}"
        );
    }
    let curl_none = sh(
        &none,
        &format!(
            "/usr/bin/curl -sS --max-time 10 --resolve ok.test:{p}:127.0.0.1 http://ok.test:{p}/x",
            p = up.port
        ),
    );
    assert_ne!(
        curl_none.status,
        ExitStatus::Code(0),
        "{}",
        shown(&curl_none)
    );
    assert_eq!(up.conns(), 0);

    // The positive: the sandbox with an allowlist reaches the same host.
    assert_eq!(tcp_connect(&with, pw), "connected");
    assert_eq!(
        curl(&with, &format!("http://ok.test:{}/x", up.port)),
        ("200".into(), "only with an allowlist".into())
    );
    assert_eq!(up.conns(), 1);
    let lines = f.audit_until(|l| !l.is_empty());
    assert!(
        lines.iter().all(|l| l.sandbox == key_of("with")),
        "{lines:#?}"
    );
    f.dispose("none");
    f.dispose("with");
}

#[test]
fn the_process_rung_holds_an_allowlist_closed() {
    let Some(init) = rung_or_skip(Rung::Process, "process_rung_closed") else {
        return;
    };
    let f = fixture(Rung::Process, Isolation::Process, init);
    let up = ok_upstream("never at the process rung");
    let allow = vec![format!("ok.test:{}", up.port)];

    // The router serves it, with a warning that closed egress confines
    // more than the spec asks.
    let warnings = f.router.ensure_can_serve(&spec(&allow)).unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| matches!(w, Warning::ConfinesMore { entries, .. } if entries == &allow)),
        "{warnings:?}"
    );
    let sb = f.acquire("process", &allow);

    // The positive: the sandbox runs.
    assert_eq!(ok(&sh(&sb, "echo ran")), "ran");
    // No proxy variables, and no route: curl pinned to the upstream fails,
    // a direct connect fails, and the upstream sees nothing.
    assert_eq!(
        ok(&sh(&sb, "env | grep -i _proxy || echo no-proxy-env")),
        "no-proxy-env"
    );
    let c = sh(
        &sb,
        &format!(
            "/usr/bin/curl -sS --max-time 10 --resolve ok.test:{p}:127.0.0.1 http://ok.test:{p}/x",
            p = up.port
        ),
    );
    assert_ne!(c.status, ExitStatus::Code(0), "{}", shown(&c));
    let direct = exec(
        &sb,
        &["/usr/bin/python3", "-c", TCP_CONNECT, &up.port.to_string()],
    );
    // Closed: not even an inet socket is made.
    assert_eq!(
        out(&direct),
        "socket: errno 13 EACCES",
        "{}",
        shown(&direct)
    );
    assert_eq!(up.conns(), 0, "{:?}", up.requests());
    // Nothing was served by a proxy.
    assert!(f.audit_lines().is_empty());
    // And the probe itself connects from the host.
    TcpStream::connect(("127.0.0.1", up.port)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while up.conns() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(up.conns(), 1);
    f.dispose("process");
}

/// Under a policy that has the proxy inspect a host, a container-rung
/// sandbox with a route trusts its proxy's CA without doing anything: the
/// variables name its bundle and the CA, the bundle (also over the system
/// path, where the host image shows one) is the host's own followed by the
/// CA, the host's bundle is unchanged, and nothing of it outlives the
/// sandbox.
#[test]
fn a_sandbox_under_an_inspecting_policy_trusts_its_proxys_ca() {
    let Some(init) = rung_or_skip(Rung::Container, "trusts_its_proxys_ca") else {
        return;
    };
    let f = fixture_inspecting(Rung::Container, Isolation::Container, init, &["ok.test"]);
    let system = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
    let host_bundle = std::fs::read(system).unwrap_or_default();
    let sb = f.acquire("ca", &["ok.test".to_string()]);
    let o = sh(
        &sb,
        "env; echo '---CA'; cat /run/cordon/trust/egress-ca.pem; echo '---BUNDLE'; \
         cat /run/cordon/trust/ca-certificates.crt; echo '---SYSTEM'; \
         cat /etc/ssl/certs/ca-certificates.crt 2>&1; \
         (echo x > /run/cordon/trust/egress-ca.pem) 2>/dev/null && echo WROTE; true",
    );
    let text = ok(&o);
    let (env, rest) = text.split_once("---CA\n").unwrap();
    let (ca, rest) = rest.split_once("---BUNDLE\n").unwrap();
    let (bundle, system_seen) = rest.split_once("---SYSTEM\n").unwrap();
    for k in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
    ] {
        assert!(
            env.lines()
                .any(|l| l == format!("{k}=/run/cordon/trust/ca-certificates.crt")),
            "{k}: {env}"
        );
    }
    assert!(
        env.lines()
            .any(|l| l == "NODE_EXTRA_CA_CERTS=/run/cordon/trust/egress-ca.pem"),
        "{env}"
    );
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    assert!(bundle.ends_with(ca), "the bundle does not end with the CA");
    let mut expect = host_bundle.clone();
    if !expect.is_empty() && !expect.ends_with(b"\n") {
        expect.push(b'\n');
    }
    expect.extend_from_slice(ca.as_bytes());
    assert!(
        bundle.as_bytes() == expect,
        "the bundle is not the host's, then the CA"
    );
    if !host_bundle.is_empty() && !system_seen.contains("No such file") {
        assert!(
            system_seen.trim_end().ends_with(ca.trim_end()) && system_seen.len() > ca.len(),
            "the system bundle does not end with the CA"
        );
    }
    assert!(!system_seen.is_empty() || host_bundle.is_empty());
    assert!(!rest.contains("WROTE"), "the CA was writable");
    assert_eq!(std::fs::read(system).unwrap_or_default(), host_bundle);
    // A request's own variable still wins.
    let mine = exec_env(
        &sb,
        &["/bin/sh", "-c", "echo $SSL_CERT_FILE"],
        &[("SSL_CERT_FILE", "/mine")],
    );
    assert_eq!(ok(&mine).trim(), "/mine");
    f.dispose("ca");
}
