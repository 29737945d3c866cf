//! Egress through the real binary: `cordon proxy` alone, `cordon run
//! --spec` with an `egress_allow`, and `cordon sandbox up --spec`, each
//! reaching a loopback test host through the proxy and refused elsewhere,
//! with the audit log naming who asked. Nothing leaves loopback: names
//! resolve only through the test's hosts file (`nameservers: []`), and only
//! the test policy's `allow_ranges` opens loopback.
//!
//! The sandbox cases run against every backend whose egress is the proxy,
//! by the same code: each is a function of a [`Target`], and
//! `against_every_backend!` makes one test per target (`container::…`,
//! `docker::…`, each on a `dockerd` of its own, `gvisor::…`, `microvm::…`).
//! A target says which image its spec names and which HTTP client its
//! workload runs there ([`Client`]): curl on the host's directories,
//! python3's `urllib` in the microvm's image, which has no curl; each is
//! run to exit as `curl -f` does, so the cases assert the same on every
//! target. The microvm guests boot under TCG here, one case at a time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The shared loopback policy, team-b kept home.
fn policy() -> String {
    cordon_testkit::policy::loopback_egress(
        "",
        "      - name: team-b-stays-home\n        when: identity.namespace == \"team-b\"\n",
        "",
    )
}

use cordon_testkit::{can_run_gvisor, can_sandbox, CI_IMAGE};

/// A loopback HTTP server answering every request with `body`; counts
/// the connections it accepted.
fn upstream(body: &'static str) -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            h.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, hits)
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    /// A fixture whose spec names the host's directories as its image.
    fn new(allow: &[String]) -> Fixture {
        Fixture::with_image("host", allow)
    }

    /// A fixture for `t`: its spec names the image `t` boots.
    fn for_target(t: &Target, allow: &[String]) -> Fixture {
        Fixture::with_image(t.image, allow)
    }

    /// A fixture whose spec names `image`; with no `allow`, the spec has
    /// no `egress_allow` at all.
    fn with_image(image: &str, allow: &[String]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("policy.yaml"), policy()).unwrap();
        std::fs::write(p.join("hosts"), "127.0.0.1 ok.test other.test\n").unwrap();
        let allow: Vec<String> = allow.iter().map(|a| format!("  - \"{a}\"\n")).collect();
        let egress = if allow.is_empty() {
            String::new()
        } else {
            format!("egress_allow:\n{}", allow.concat())
        };
        std::fs::write(
            p.join("spec.yaml"),
            format!("kind: egress-test\nimage: {image}\n{egress}"),
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
        // Made by cordon itself (mode 0700) on first use.
        let _ = p.join("state");
        Fixture { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The audit log's decision lines, `allow` and `deny` (the `end` line
    /// after each carried request, with its answer, left out).
    fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|l| l["verdict"] != "end")
            .collect()
    }

    fn cordon(&self, args: &[&str]) -> (i32, String, String) {
        self.cordon_env(args, &[])
    }

    fn cordon_env(&self, args: &[&str], env: &[(String, String)]) -> (i32, String, String) {
        cordon_testkit::cordon!()
            .env("CORDON_STATE_DIR", self.path("state"))
            .run_env(args, env)
    }

    fn selection(&self, target: &Target) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--policy".into(),
            self.path("policy.yaml").display().to_string(),
            "--spec".into(),
            self.path("spec.yaml").display().to_string(),
            "--config".into(),
            self.path("config.yaml").display().to_string(),
            "--identity".into(),
            "namespace=team-a".into(),
            "--identity".into(),
            "name=agent-7".into(),
        ];
        args.extend(target.args.iter().map(|a| a.to_string()));
        args
    }
}

/// A backend the sandbox cases run against: the arguments that land a
/// workload on it, whether this machine can run it (a loud skip if not,
/// a failure with `CI=true`), and what its cordon commands need in their
/// environment (an engine's address).
struct Target {
    args: &'static [&'static str],
    ready: fn(&str) -> Option<Ready>,
    /// The image the case's spec names (`host`: the host's directories).
    image: &'static str,
    /// The HTTP client the workload runs in that image.
    client: Client,
    /// Whether the backend delivers secrets (every one here does; one
    /// that did not would refuse a spec naming one, placeholders included).
    secrets: bool,
}

/// An HTTP client in a sandbox's image. Each is run so that the cases read
/// the same on every target: the body on stdout, exit 0 on a 2xx answer,
/// exit 22 on an HTTP error answer (a proxy's 403; curl's `-f`), another
/// non-zero exit when no answer came at all.
#[derive(Clone, Copy)]
enum Client {
    /// `/usr/bin/curl`.
    Curl,
    /// Python's `urllib` (an image with `python3` and no curl).
    Python,
}

/// Python's `urllib` as `curl -sS -f --max-time 10 URL`: it takes the
/// proxy from `HTTP_PROXY`/`http_proxy` as curl does.
const PY_FETCH: &str = r#"import sys,urllib.request,urllib.error
try:
    sys.stdout.write(urllib.request.urlopen(sys.argv[1],timeout=10).read().decode())
except urllib.error.HTTPError as e:
    sys.stderr.write("HTTP error %d\n" % e.code); sys.exit(22)
"#;

/// Python's `urllib` with no proxy at all, as `env -u http_proxy -u
/// HTTP_PROXY curl --max-time 5 URL`.
const PY_DIRECT: &str = r#"import sys,urllib.request
o=urllib.request.build_opener(urllib.request.ProxyHandler({}))
sys.stdout.write(o.open(sys.argv[1],timeout=5).read().decode())
"#;

/// Python's `urllib` sending METHOD to URL with a header `K: V` if given,
/// exiting as `curl -f` does.
const PY_REQUEST: &str = r#"import sys,urllib.request,urllib.error
r=urllib.request.Request(sys.argv[2],method=sys.argv[1],data=(b"x" if sys.argv[1]=="POST" else None))
if len(sys.argv)>3:
    k,v=sys.argv[3].split(":",1); r.add_header(k,v.strip())
try:
    sys.stdout.write(urllib.request.urlopen(r,timeout=10).read().decode())
except urllib.error.HTTPError as e:
    sys.stderr.write("HTTP error %d\n" % e.code); sys.exit(22)
"#;

/// Python's `urllib` as `curl -sS -N -k --max-time 60 URL`: the body
/// written as it comes; exit 18 when the answer is cut short (as curl's
/// partial transfer), a traceback naming the status when a tunnel is
/// refused.
const PY_STREAM: &str = r#"import ssl,sys,urllib.request
c=ssl.create_default_context(); c.check_hostname=False; c.verify_mode=ssl.CERT_NONE
r=urllib.request.urlopen(sys.argv[1],timeout=60,context=c)
while True:
    try:
        b=r.read1(64)
    except OSError:
        sys.exit(56)
    if not b:
        break
    sys.stdout.write(b.decode()); sys.stdout.flush()
sys.exit(18 if r.length else 0)
"#;

impl Client {
    /// The argv that streams `url`'s answer as it comes, trusting any
    /// certificate (a tunnel's upstream is the test's own).
    fn stream(self, url: &str) -> Vec<String> {
        match self {
            Client::Curl => ["/usr/bin/curl", "-sS", "-N", "-k", "--max-time", "60", url]
                .map(String::from)
                .to_vec(),
            Client::Python => ["/usr/bin/python3", "-c", PY_STREAM, url]
                .map(String::from)
                .to_vec(),
        }
    }

    /// The argv that sends `method` to `url` (with `header`, `K: V`),
    /// through the sandbox's proxy variables, with no TLS flag at all.
    fn request(self, method: &str, url: &str, header: Option<&str>) -> Vec<String> {
        let mut v: Vec<String> = match self {
            Client::Curl => {
                let mut v = curl(url);
                v.extend(["-X".to_string(), method.to_string()]);
                if method == "POST" {
                    v.extend(["-d".to_string(), "x".to_string()]);
                }
                if let Some(h) = header {
                    v.extend(["-H".to_string(), h.to_string()]);
                }
                return v;
            }
            Client::Python => ["/usr/bin/python3", "-c", PY_REQUEST, method, url]
                .map(String::from)
                .to_vec(),
        };
        v.extend(header.map(str::to_string));
        v
    }

    /// The argv that fetches `url` through the sandbox's proxy variables.
    fn fetch(self, url: &str) -> Vec<String> {
        match self {
            Client::Curl => curl(url),
            Client::Python => ["/usr/bin/python3", "-c", PY_FETCH, url]
                .map(String::from)
                .to_vec(),
        }
    }

    /// The argv that fetches `url` directly, with no proxy variable set.
    fn direct(self, url: &str) -> Vec<String> {
        match self {
            Client::Curl => [
                "/usr/bin/env",
                "-u",
                "http_proxy",
                "-u",
                "HTTP_PROXY",
                "/usr/bin/curl",
                "-sS",
                "--max-time",
                "5",
                url,
            ]
            .map(String::from)
            .to_vec(),
            Client::Python => ["/usr/bin/python3", "-c", PY_DIRECT, url]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// A target ready for one case: what its cordon commands need in their
/// environment, and what must live as long as the case (an engine).
struct Ready {
    env: Vec<(String, String)>,
    _engine: Option<cordon_testkit::dockerd::Dockerd>,
    /// A turn the target's cases take one at a time.
    _turn: Option<std::sync::MutexGuard<'static, ()>>,
}

/// The native container rung.
const CONTAINER: Target = Target {
    args: &["--min-isolation", "container"],
    image: "host",
    client: Client::Curl,
    secrets: true,
    ready: |case| {
        can_sandbox(case).then(|| Ready {
            env: Vec::new(),
            _engine: None,
            _turn: None,
        })
    },
};

/// The docker backend, on an engine of the case's own.
const DOCKER: Target = Target {
    args: &["--min-isolation", "container", "--backend", "docker"],
    image: "host",
    client: Client::Curl,
    secrets: true,
    ready: |case| {
        let engine = cordon_testkit::dockerd::Dockerd::start(case)?;
        Some(Ready {
            env: vec![("CORDON_DOCKER_HOST".into(), engine.host())],
            _engine: Some(engine),
            _turn: None,
        })
    },
};

/// The `gvisor` backend (`hardened_container`).
const GVISOR: Target = Target {
    args: &["--min-isolation", "hardened_container"],
    image: "host",
    client: Client::Curl,
    secrets: true,
    ready: |case| {
        can_run_gvisor(case).then(|| Ready {
            env: Vec::new(),
            _engine: None,
            _turn: None,
        })
    },
};

/// One microvm case at a time: each boots guests under TCG on few cores.
static ONE_VM_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The `microvm` backend: a QEMU guest booting the CI image, whose
/// workload reaches its proxy through the guest agent's relay. The image
/// has python3 and no curl.
const MICROVM: Target = Target {
    args: &["--min-isolation", "container", "--backend", "microvm"],
    image: CI_IMAGE,
    client: Client::Python,
    secrets: true,
    ready: |case| {
        let cordon = cordon_testkit::cordon!();
        if !cordon_testkit::runs_here(
            &format!("{case} on microvm"),
            cordon_testkit::microvm_missing(cordon.bin()),
        ) {
            return None;
        }
        let turn = ONE_VM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let (store, _) = cordon_testkit::ci_image(&cordon);
        Some(Ready {
            env: vec![("CORDON_IMAGE_STORE".into(), store.display().to_string())],
            _engine: None,
            _turn: Some(turn),
        })
    },
};

/// One `#[test]` per target for each sandbox case, in a module named for
/// the target.
macro_rules! against_every_backend {
    ($($target:ident = $t:expr;)*) => {$(
        mod $target {
            #[test]
            fn run_with_a_spec_reaches_its_allowlist_and_nothing_else() {
                super::run_with_a_spec_reaches_its_allowlist_and_nothing_else(&$t)
            }
            #[test]
            fn a_spec_entry_the_policy_denies_is_refused_before_anything_starts() {
                super::a_spec_entry_the_policy_denies_is_refused_before_anything_starts(&$t)
            }
            #[test]
            fn a_kept_sandbox_has_its_route_through_its_keeper() {
                super::a_kept_sandbox_has_its_route_through_its_keeper(&$t)
            }
            #[test]
            fn https_to_an_inspected_host_is_decided_per_request() {
                super::https_to_an_inspected_host_is_decided_per_request(&$t)
            }
            #[test]
            fn a_brokered_secret_reaches_only_its_destination_and_never_the_sandbox() {
                super::a_brokered_secret_reaches_only_its_destination_and_never_the_sandbox(&$t)
            }
            #[test]
            fn a_kept_sandbox_s_egress_is_replaced_live_through_its_keeper() {
                super::a_kept_sandbox_s_egress_is_replaced_live_through_its_keeper(&$t)
            }
        }
    )*};
}

against_every_backend! {
    container = super::CONTAINER;
    docker = super::DOCKER;
    gvisor = super::GVISOR;
    microvm = super::MICROVM;
}

/// The pids of egress proxy processes (`cordon __egress-proxy`) holding
/// `audit` open: this test's, not another's.
fn egress_processes(audit: &std::path::Path) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !cmd.split(|b| *b == 0).any(|a| a == b"__egress-proxy") {
            continue;
        }
        let holds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == audit))
            })
            .unwrap_or(false);
        if holds {
            out.push(pid);
        }
    }
    out
}

fn curl(url: &str) -> Vec<String> {
    ["/usr/bin/curl", "-sS", "-f", "--max-time", "10", url]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The `process` rung's egress is `closed`: named (`--backend process`)
/// for a spec with an `egress_allow`, it confines more than the spec asks,
/// which the router permits with a warning. That warning is said on
/// stderr (`run`, `sandbox up`, `sandbox exec`, `--quiet` too) and carried
/// in `--format json` (`warnings`); the workload has no route at all.
#[test]
fn a_closed_backend_for_a_spec_that_names_hosts_runs_with_a_warning_on_every_surface() {
    if !can_sandbox("closed egress warning") {
        return;
    }
    let (port, hits) = upstream("never at the process rung");
    let entry = format!("ok.test:{port}");
    let f = Fixture::new(std::slice::from_ref(&entry));
    let rung = ["--backend", "process", "--min-isolation", "process"];
    let mut sel: Vec<String> = f.selection(&CONTAINER);
    sel.retain(|a| a != "--min-isolation" && a != "container");
    sel.extend(rung.iter().map(|a| a.to_string()));
    let warned = |err: &str| {
        err.lines().any(|l| {
            l.starts_with("warning: ")
                && l.contains("backend `process` has closed egress")
                && l.contains(&format!("`{entry}`"))
        })
    };

    // `cordon run`, human: the workload runs, reaches nothing, and stderr
    // says why before it starts.
    let mut args: Vec<String> = vec!["run".into(), "--quiet".into()];
    args.extend(sel.clone());
    args.push("--".into());
    args.extend(curl(&format!("http://ok.test:{port}/x")));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon(&argv);
    assert!(
        code != 0 && code != 125,
        "no route, yet it ran: {code} {out} {err}"
    );
    assert!(warned(&err), "run: no warning on stderr: {err}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // `cordon run --format json`: in the `sandbox` event, and on stderr.
    let mut args: Vec<String> = vec!["run".into(), "--format".into(), "json".into()];
    args.extend(sel.clone());
    args.extend(["--".into(), "/bin/true".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon(&argv);
    assert_eq!(code, 0, "{err}");
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sandbox = events
        .iter()
        .find(|e| e["event"] == "sandbox")
        .expect("a sandbox event");
    assert_eq!(sandbox["backend"], "process", "{sandbox}");
    let warnings = sandbox["warnings"].as_array().expect("a warnings array");
    assert!(
        warnings.len() == 1
            && warnings[0]
                .as_str()
                .is_some_and(|w| w.contains("closed egress") && w.contains(&entry)),
        "{sandbox}"
    );
    assert!(warned(&err), "run --format json: {err}");

    // `cordon sandbox up`, human and JSON, then `exec` on it.
    let mut args: Vec<String> = ["sandbox", "up", "--scope", "closed", "--thread", "t"]
        .map(String::from)
        .to_vec();
    args.extend(sel.clone());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon(&argv);
    assert_eq!(code, 0, "{err}");
    assert!(warned(&err), "sandbox up: {err}");
    let handle = out.trim().to_string();
    let mut json = argv.clone();
    json.extend(["--format", "json"]);
    let (code, out, err) = f.cordon(&json);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["handle"], handle.as_str(), "{doc}");
    assert!(
        doc["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("closed egress")),
        "{doc}"
    );
    let (code, _, err) = f.cordon(&["sandbox", "exec", &handle, "--", "/bin/true"]);
    assert_eq!(code, 0, "{err}");
    assert!(warned(&err), "sandbox exec: {err}");
    let (code, out, err) = f.cordon(&[
        "sandbox",
        "exec",
        "--format",
        "json",
        &handle,
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(
        first["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("closed egress")),
        "{first}"
    );
    let (code, _, err) = f.cordon(&["sandbox", "down", &handle]);
    assert_eq!(code, 0, "{err}");

    // A spec that must have its route says so (`requires: [network]`):
    // the closed backend is then refused, nothing runs.
    let spec = std::fs::read_to_string(f.path("spec.yaml")).unwrap();
    std::fs::write(
        f.path("spec.yaml"),
        format!("{spec}requires: [exec, network]\n"),
    )
    .unwrap();
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(sel.clone());
    args.extend(["--".into(), "/bin/true".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = f.cordon(&argv);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("`process`") && err.contains("does not declare") && err.contains("network"),
        "{err}"
    );
    std::fs::write(f.path("spec.yaml"), spec).unwrap();

    // A spec without hosts on the same backend: no warning anywhere.
    let quiet = Fixture::new(&[]);
    let mut args: Vec<String> = vec!["run".into(), "--format".into(), "json".into()];
    let mut sel: Vec<String> = quiet.selection(&CONTAINER);
    sel.retain(|a| a != "--min-isolation" && a != "container");
    sel.extend(rung.iter().map(|a| a.to_string()));
    args.extend(sel);
    args.extend(["--".into(), "/bin/true".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = quiet.cordon(&argv);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let sandbox: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(sandbox["warnings"], serde_json::json!([]), "{sandbox}");
}

#[test]
fn the_proxy_alone_serves_what_its_allowlist_and_policy_allow() {
    let (port, hits) = upstream("from-upstream");
    let f = Fixture::new(&[]);
    let mut child = cordon_testkit::cordon!()
        .command([
            "proxy",
            "--policy",
            f.path("policy.yaml").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--hosts",
            f.path("hosts").to_str().unwrap(),
            "--nameserver",
            "none",
            "--allow",
            &format!("ok.test:{port}"),
            "--identity",
            "namespace=team-a",
            "--audit",
            f.path("audit.jsonl").to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("listening on"), "{line}");
    // It parses hostile input: it confined itself before it listened.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .map(|l| l[k.len()..].trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    assert_eq!(field("CapBnd:"), "0000000000000000", "{status}");
    // And it runs as its own unprivileged uid, not root.
    assert_eq!(
        field("Uid:"),
        "1999999000\t1999999000\t1999999000\t1999999000",
        "{status}"
    );
    let via = |url: &str| {
        Command::new("/usr/bin/curl")
            .args([
                "-sS",
                "-x",
                &format!("http://{addr}"),
                "--max-time",
                "10",
                url,
            ])
            .output()
            .unwrap()
    };
    let ok = via(&format!("http://ok.test:{port}/x"));
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "from-upstream");
    let other = via(&format!("http://other.test:{port}/x"));
    assert!(String::from_utf8_lossy(&other.stdout).contains("allowlist"));
    let literal = via(&format!("http://127.0.0.1:{port}/x"));
    // The refusal an agent can act on: JSON naming the surface and a fix.
    let refusal: serde_json::Value = serde_json::from_slice(&literal.stdout).unwrap();
    assert_eq!(refusal["surface"], "egress", "{refusal}");
    assert!(
        refusal["fix"].as_str().is_some_and(|f| !f.is_empty()),
        "{refusal}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let _ = child.kill();
    let _ = child.wait();

    let lines = f.audit();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["verdict"], "allow");
    assert_eq!(lines[0]["identity"]["namespace"], "team-a");
    assert_eq!(lines[1]["verdict"], "deny");
    // An audit line replays through `cordon policy explain --facts`.
    let mut explain = cordon_testkit::cordon!()
        .command([
            "policy",
            "explain",
            f.path("policy.yaml").to_str().unwrap(),
            "--facts",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    explain
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&lines[0]).unwrap().as_bytes())
        .unwrap();
    let out = explain.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("test-hosts"));
}

/// Issue 30: `cordon proxy --ca-out FILE` writes the proxy's CA (mode
/// 0644) before it says it listens, and a client trusting that file alone
/// gets an inspected host's answer through it; an existing FILE is not
/// overwritten, and a policy that inspects nothing has no CA to write.
#[test]
fn the_proxy_writes_its_ca_for_clients_when_its_policy_inspects() {
    use std::os::unix::fs::PermissionsExt;
    let up = cordon_testkit::https::upstream(&["api.test"]);
    let port = up.port;
    let f = Fixture::new(&[]);
    std::fs::write(f.path("upstream-ca.pem"), &up.ca_pem).unwrap();
    std::fs::write(f.path("hosts"), "127.0.0.1 ok.test other.test api.test\n").unwrap();
    let inspecting = policy()
        .replacen(
            "  egress:\n",
            "  egress:\n    inspect: [{host: api.test, ca: ./upstream-ca.pem}]\n",
            1,
        )
        .replace(
            "hosts: [ok.test, other.test]",
            "hosts: [ok.test, other.test, api.test]",
        )
        .replace(
            r#"when: host == "ok.test" || host == "other.test""#,
            r#"when: host == "ok.test" || host == "other.test" || host == "api.test""#,
        );
    std::fs::write(f.path("inspect.yaml"), &inspecting).unwrap();
    let ca = f.path("proxy-ca.pem");
    let args = |policy: &str, ca: &std::path::Path| -> Vec<String> {
        [
            "proxy",
            "--policy",
            f.path(policy).to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--hosts",
            f.path("hosts").to_str().unwrap(),
            "--nameserver",
            "none",
            "--allow",
            &format!("api.test:{port}"),
            "--audit",
            f.path("audit.jsonl").to_str().unwrap(),
            "--ca-out",
            ca.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut child = cordon_testkit::cordon!()
        .command(args("inspect.yaml", &ca))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        said.push_str(&line);
    }
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("listening on"), "{said}");
    assert!(
        said.contains(&format!("CA certificate in {}", ca.display())),
        "{said}"
    );
    let pem = std::fs::read_to_string(&ca).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert_ne!(
        pem.trim(),
        up.ca_pem.trim(),
        "the proxy's own CA, not the upstream's"
    );
    let mode = std::fs::metadata(&ca).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let out = Command::new("/usr/bin/curl")
        .args([
            "-sS",
            "--fail",
            "-x",
            &format!("http://{addr}"),
            "--cacert",
            ca.to_str().unwrap(),
            "--max-time",
            "10",
            &format!("https://api.test:{port}/through"),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello GET /through",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = child.kill();
    let _ = child.wait();

    // The file exists now: a second proxy refuses to overwrite it.
    let (code, _, err) = cordon_testkit::cordon!().run(args("inspect.yaml", &ca));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&ca).unwrap(), pem);
    // A policy that inspects nothing: no CA, so the flag is an error, and
    // no file is made.
    let none = f.path("none.pem");
    let (code, _, err) = cordon_testkit::cordon!().run(args("policy.yaml", &none));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("inspects no host"), "{err}");
    assert!(!none.exists());
}

/// Issue 28, item 12, where it has to hold: the proxy confines itself
/// (Landlock, seccomp, its own uid) before it writes a line, and it can
/// neither create nor rename a file then. Its audit log still rotates by
/// size, keeps its old files, stays bounded, and the proxy goes on
/// answering (a rotation it could not do would refuse every request).
#[test]
fn the_confined_proxy_rotates_its_audit_log_and_goes_on_serving() {
    let (port, _hits) = upstream("from-upstream");
    let f = Fixture::new(&[]);
    let audit = f.path("audit.jsonl");
    let mut child = cordon_testkit::cordon!()
        .command([
            "proxy",
            "--policy",
            f.path("policy.yaml").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--hosts",
            f.path("hosts").to_str().unwrap(),
            "--nameserver",
            "none",
            "--allow",
            &format!("ok.test:{port}"),
            "--identity",
            "namespace=team-a",
            "--audit",
            audit.to_str().unwrap(),
            "--audit-rotate-bytes",
            "65536",
            "--audit-keep",
            "2",
            "--audit-bytes-per-sec",
            "100000000",
            "--audit-burst-bytes",
            "100000000",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // Killed however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Killed(child);
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "{line}");
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Seccomp:") && l.ends_with('2')),
        "the proxy did not confine itself: {status}"
    );
    // Denied requests, each one audit line of over a kilobyte (a long
    // name): enough for several rotations of a 64 KiB log (the least the
    // proxy takes).
    let ask = |host: &str| -> String {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            c,
            "GET http://{host}:{port}/x HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = std::io::Read::read_to_string(&mut c, &mut answer);
        answer
    };
    let label = "n".repeat(60);
    for i in 0..300 {
        let answer = ask(&format!("denied-{i}.{label}.{label}.{label}.test"));
        assert!(answer.starts_with("HTTP/1.1 403"), "request {i}: {answer}");
    }
    // Still serving after the rotations, and still auditing.
    let ok = ask("ok.test");
    assert!(ok.contains("from-upstream"), "{ok}");
    drop(child);
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let old = |n: u32| f.path(&format!("audit.jsonl.{n}"));
    assert!(size(&old(1)) > 0, "the log never rotated");
    assert!(size(&old(2)) > 0, "only one old file was kept");
    assert!(!old(3).exists(), "more old files than --audit-keep");
    for p in [audit.clone(), old(1), old(2)] {
        assert!(size(&p) <= 65536, "`{}` is {} bytes", p.display(), size(&p));
    }
    // The newest lines are in the live file: the allowed request's.
    let live = std::fs::read_to_string(&audit).unwrap();
    assert!(live.contains("ok.test"), "{live}");
}

#[test]
fn the_proxy_alone_refuses_a_bad_allow_entry_and_a_missing_hosts_file() {
    let f = Fixture::new(&[]);
    let (code, _, err) = f.cordon(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--allow",
        "http://x.test/",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--allow"), "{err}");
    let (code, _, err) = f.cordon(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--hosts",
        "/nonexistent/hosts",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hosts file"), "{err}");
    // The audit log's bounds are checked, and the flag is named.
    let (code, _, err) = f.cordon(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--audit-burst-bytes",
        "10",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--audit-burst-bytes is 10"), "{err}");
}

fn run_with_a_spec_reaches_its_allowlist_and_nothing_else(t: &Target) {
    let Some(ready) = (t.ready)("run_with_a_spec_reaches_its_allowlist_and_nothing_else") else {
        return;
    };
    let env = ready.env.clone();
    let (port, hits) = upstream("hello-sandbox");
    let f = Fixture::for_target(t, &[format!("ok.test:{port}")]);
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    args.push("--".into());
    args.extend(t.client.fetch(&format!("http://ok.test:{port}/x")));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon_env(&argv, &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello-sandbox");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // A host the spec does not name: 403 from the proxy (curl -f exits 22).
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    args.push("--".into());
    args.extend(t.client.fetch(&format!("http://other.test:{port}/x")));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = f.cordon_env(&argv, &env);
    assert_eq!(code, 22, "{err}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Without the proxy variables, nothing at all.
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    args.push("--".into());
    args.extend(t.client.direct(&format!("http://127.0.0.1:{port}/x")));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, _) = f.cordon_env(&argv, &env);
    assert_ne!(code, 0);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    let lines = f.audit();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert_eq!(l["identity"]["namespace"], "team-a");
        assert_eq!(l["identity"]["name"], "agent-7");
        assert!(l["sandbox"].as_str().unwrap().contains('/'), "{l}");
    }
    assert_eq!(lines[0]["verdict"], "allow");
    assert_eq!(lines[1]["verdict"], "deny");
    assert!(lines[1]["reason"].as_str().unwrap().contains("allowlist"));
}

fn a_spec_entry_the_policy_denies_is_refused_before_anything_starts(t: &Target) {
    let Some(ready) = (t.ready)("a_spec_entry_the_policy_denies_is_refused_before_anything_starts")
    else {
        return;
    };
    let env = ready.env.clone();
    let f = Fixture::for_target(t, &["ok.test:8080".to_string()]);
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    // team-b is denied every egress by the policy.
    let i = args.iter().position(|a| a == "namespace=team-a").unwrap();
    args[i] = "namespace=team-b".into();
    args.extend(["--".into(), "/bin/true".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = f.cordon_env(&argv, &env);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("ok.test:8080"), "{err}");
}

/// An inspected host over https, from the workload's own client with no
/// flag (the sandbox trusts its CA): a GET the policy allows reaches the
/// upstream (which the proxy verified against the policy's roots for it);
/// a POST under a GET-only rule, a path under `/admin` and a request
/// fronting another host are refused (`403`, curl's exit 22) and reach
/// nothing; the audit log has each with its method and path.
fn https_to_an_inspected_host_is_decided_per_request(t: &Target) {
    let Some(ready) = (t.ready)("https_to_an_inspected_host_is_decided_per_request") else {
        return;
    };
    let env = ready.env.clone();
    let up = cordon_testkit::https::upstream(&["api.test"]);
    let port = up.port;
    let f = Fixture::for_target(t, &[format!("api.test:{port}"), format!("ok.test:{port}")]);
    std::fs::write(f.path("upstream-ca.pem"), &up.ca_pem).unwrap();
    std::fs::write(f.path("hosts"), "127.0.0.1 ok.test other.test api.test\n").unwrap();
    let text = policy()
        .replacen(
            "  egress:\n",
            "  egress:\n    inspect: [{host: api.test, ca: ./upstream-ca.pem}]\n",
            1,
        )
        .replace(
            "hosts: [ok.test, other.test]",
            "hosts: [ok.test, other.test, api.test]",
        )
        .replace(
            r#"when: host == "ok.test" || host == "other.test""#,
            r#"when: host == "ok.test" || host == "other.test" || (host == "api.test" && method == "GET")"#,
        )
        .replace(
            "    deny:\n",
            "    deny:\n      - name: no-admin\n        when: host == \"api.test\" && path.startsWith(\"/admin\")\n",
        );
    assert!(
        text.contains("no-admin") && text.contains("inspect:"),
        "{text}"
    );
    std::fs::write(f.path("policy.yaml"), text).unwrap();
    let url = |p: &str| format!("https://api.test:{port}{p}");
    let run = |argv: Vec<String>| {
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(f.selection(t));
        args.push("--".into());
        args.extend(argv);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        f.cordon_env(&argv, &env)
    };
    let (code, out, err) = run(t.client.fetch(&url("/v1/models")));
    assert_eq!((code, out.as_str()), (0, "hello GET /v1/models"), "{err}");
    for (what, argv) in [
        (
            "a POST under a GET-only rule",
            t.client.request("POST", &url("/v1/models"), None),
        ),
        (
            "a path under /admin",
            t.client.request("GET", &url("/admin/users"), None),
        ),
        (
            "a fronted Host",
            t.client
                .request("GET", &url("/v1/models"), Some("Host: ok.test")),
        ),
    ] {
        let (code, out, err) = run(argv);
        assert_eq!(code, 22, "{what}: {out}{err}");
    }
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "only the allowed GET reached the upstream: {seen:?}"
    );
    let lines = f.audit();
    let https: Vec<&serde_json::Value> = lines.iter().filter(|l| l["kind"] == "https").collect();
    assert!(
        https
            .iter()
            .any(|l| l["verdict"] == "deny" && l["facts"]["method"] == "POST"),
        "{https:?}"
    );
    assert!(
        https
            .iter()
            .any(|l| l["verdict"] == "deny" && l["facts"]["path"] == "/admin/users"),
        "{https:?}"
    );
}

/// The brokered secret's value: written to the host's secret store only.
const BROKERED_VALUE: &str = "sk-live-brokered-7f3a9c2e51d04b68";

/// The workload of the brokered-secret case: the placeholder from its
/// file in the one place the policy lets its value go, then in another
/// inspected host's header, a query string and a body (each answer's
/// status printed), then it sleeps (the shell, holding what it read,
/// waits for it) so the host can look inside.
const BROKER_WORKLOAD: &str = r#"ph=$(cat /run/cordon/secrets/openai/key)
c() { /usr/bin/curl -s -o /dev/null -w '%{http_code}\n' --max-time 10 "$@"; }
c -H "X-Key: $ph" "https://ok.test:$1/"
c "https://api.test:$1/v1/models?k=$ph"
c -X POST --data "k=$ph" "https://ok.test:$1/upload"
/usr/bin/curl -sS -f --max-time 10 -H "Authorization: Bearer $ph" "https://api.test:$1/v1/models"; echo
/bin/sleep 37.5
exit 0
"#;

/// Whether the file at `path` (sparse: its holes skipped) holds `needle`,
/// read in chunks (a gVisor memory file is as large as its guest's RAM).
fn sparse_file_has(path: &std::path::Path, needle: &[u8]) -> bool {
    use std::io::{Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut off: i64 = 0;
    let mut chunk = vec![0u8; 8 << 20];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let Ok(data) = nix::unistd::lseek(&f, off, nix::unistd::Whence::SeekData) else {
            return false;
        };
        let Ok(hole) = nix::unistd::lseek(&f, data, nix::unistd::Whence::SeekHole) else {
            return false;
        };
        let mut at = data;
        carry.clear();
        while at < hole {
            let want = ((hole - at) as usize).min(chunk.len());
            let got = match f.seek(SeekFrom::Start(at as u64)) {
                Ok(_) => f.read(&mut chunk[..want]).unwrap_or(0),
                Err(_) => 0,
            };
            if got == 0 {
                // Unreadable here: on a page further.
                at += 4096;
                carry.clear();
                continue;
            }
            carry.extend_from_slice(&chunk[..got]);
            if memchr::memmem::find(&carry, needle).is_some() {
                return true;
            }
            let keep = carry.len().saturating_sub(needle.len());
            carry.drain(..keep);
            at += got as i64;
        }
        off = hole;
    }
}

/// The brokered-secret workload for an image with python3 and no curl.
const BROKER_WORKLOAD_PY: &str = r#"import sys,time,urllib.request,urllib.error
port=sys.argv[1]
ph=open("/run/cordon/secrets/openai/key").read()
def c(url,headers={},data=None,show=False):
    r=urllib.request.Request(url,headers=headers,data=data,method="POST" if data else "GET")
    try:
        body=urllib.request.urlopen(r,timeout=10).read().decode()
        print(body if show else "200",flush=True)
    except urllib.error.HTTPError as e:
        print(e.code,flush=True)
c("https://ok.test:%s/"%port,{"X-Key":ph})
c("https://api.test:%s/v1/models?k=%s"%(port,ph))
c("https://ok.test:%s/upload"%port,data=("k="+ph).encode())
c("https://api.test:%s/v1/models"%port,{"Authorization":"Bearer "+ph},show=True)
time.sleep(37.5)
"#;

/// Every readable byte of `pid`'s memory, environment and command line,
/// and of the files under `roots` (in its own view of the filesystem),
/// searched for `needle`: where it was found.
fn found_in_process(pid: u32, needle: &[u8], roots: &[&str]) -> Vec<String> {
    let finder = memchr::memmem::Finder::new(needle);
    let has = |b: &[u8]| finder.find(b).is_some();
    let mut out = Vec::new();
    for what in ["environ", "cmdline"] {
        if has(&std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default()) {
            out.push(format!("{pid}: {what}"));
        }
    }
    // Memory files it holds (gVisor keeps its guests' memory in one).
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            let is_memfd = std::fs::read_link(fd.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:"));
            if is_memfd && sparse_file_has(&fd.path(), needle) {
                out.push(format!("{pid}: memfd {}", fd.path().display()));
            }
        }
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    if let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) {
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            // A memory file's mapping (a gVisor sentry's, many GiB of it
            // holes) is not read through `mem`, whose reads would fault
            // its holes in (into the sandbox's memory bound, killing it):
            // its data alone is read, through the mapped file.
            if f.nth(3).is_some_and(|path| path.starts_with("/memfd:")) {
                if sparse_file_has(
                    std::path::Path::new(&format!("/proc/{pid}/map_files/{range}")),
                    needle,
                ) {
                    out.push(format!("{pid}: memfd mapping {range} {perms}"));
                }
                continue;
            }
            // Any size (a guest's RAM is one region as large as it), read
            // in chunks that overlap by the needle; the address space's
            // reserved but unbacked giants are not read.
            if !perms.starts_with('r') || b - a > 16 << 30 {
                continue;
            }
            // A page that cannot be read (a guard, one QEMU keeps from
            // us) ends a read short or fails it: the read goes on past it.
            let mut at = a;
            let mut chunk = vec![0u8; 8 << 20];
            while at < b {
                let want = ((b - at) as usize).min(chunk.len());
                let got =
                    std::os::unix::fs::FileExt::read_at(&mem, &mut chunk[..want], at).unwrap_or(0);
                if got == 0 {
                    at = (at | 4095) + 1;
                    continue;
                }
                if has(&chunk[..got]) {
                    out.push(format!("{pid}: memory {range} {perms}"));
                    break;
                }
                if at + got as u64 >= b {
                    break;
                }
                at += got.saturating_sub(needle.len()).max(1) as u64;
            }
        }
    }
    for root in roots {
        let mut stack = vec![PathBuf::from(format!("/proc/{pid}/root{root}"))];
        let mut budget: u64 = 256 << 20;
        while let Some(p) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                if let Ok(rd) = std::fs::read_dir(&p) {
                    stack.extend(rd.flatten().map(|e| e.path()));
                }
            } else if meta.is_file() && meta.len() <= budget {
                budget -= meta.len();
                if has(&std::fs::read(&p).unwrap_or_default()) {
                    out.push(format!("{pid}: file {}", p.display()));
                }
            }
        }
    }
    out
}

/// A secret asked for as a placeholder, through the real binary: the
/// workload's file holds a stand-in; the proxy puts the value in only
/// where the policy's secret rule allows (the upstream sees it there);
/// the placeholder toward another inspected host, in a query string or
/// in a body is refused (`403`) and audited as an exfiltration attempt;
/// and the value is nowhere in the sandbox — not in its processes'
/// environment, command lines or memory, nor in the files they see — nor
/// in the audit log.
fn a_brokered_secret_reaches_only_its_destination_and_never_the_sandbox(t: &Target) {
    let Some(ready) =
        (t.ready)("a_brokered_secret_reaches_only_its_destination_and_never_the_sandbox")
    else {
        return;
    };
    let env = ready.env.clone();
    let up = cordon_testkit::https::upstream(&["api.test", "ok.test"]);
    let port = up.port;
    let f = Fixture::for_target(t, &[format!("api.test:{port}"), format!("ok.test:{port}")]);
    std::fs::write(f.path("upstream-ca.pem"), &up.ca_pem).unwrap();
    std::fs::write(f.path("hosts"), "127.0.0.1 ok.test other.test api.test\n").unwrap();
    std::fs::create_dir_all(f.path("store/openai")).unwrap();
    std::fs::write(f.path("store/openai/key"), format!("{BROKERED_VALUE}\n")).unwrap();
    let spec = format!(
        "kind: egress-test\nimage: {}\negress_allow: [\"api.test:{port}\", \"ok.test:{port}\", api.test]\nsecrets:\n  - {{name: openai/key, as: placeholder, to: [api.test]}}\n",
        t.image
    );
    std::fs::write(f.path("spec.yaml"), spec).unwrap();
    let text = policy()
        .replacen(
            "  egress:\n",
            "  egress:\n    inspect:\n      - {host: api.test, ca: ./upstream-ca.pem}\n      - {host: ok.test, ca: ./upstream-ca.pem}\n",
            1,
        )
        .replace(
            "hosts: [ok.test, other.test]",
            "hosts: [ok.test, other.test, api.test]",
        )
        .replace(
            r#"when: host == "ok.test" || host == "other.test""#,
            r#"when: host == "ok.test" || host == "other.test" || host == "api.test""#,
        )
        + "  secret:\n    allow:\n      - name: key-to-models\n        when: >-\n          secret.name == \"openai/key\" && destination.host == \"api.test\" &&\n          destination.header == \"authorization\" && destination.path.startsWith(\"/v1/\")\n";
    std::fs::write(f.path("policy.yaml"), &text).unwrap();
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    args.extend([
        "--secrets-dir".into(),
        f.path("store").display().to_string(),
    ]);
    args.push("--".into());
    match t.client {
        Client::Curl => args.extend([
            "/bin/sh".into(),
            "-c".into(),
            BROKER_WORKLOAD.into(),
            "sh".into(),
            port.to_string(),
        ]),
        Client::Python => args.extend([
            "/usr/bin/python3".into(),
            "-c".into(),
            BROKER_WORKLOAD_PY.into(),
            port.to_string(),
        ]),
    }
    let mut cmd = cordon_testkit::cordon!()
        .env("CORDON_STATE_DIR", f.path("state"))
        .command(&args);
    cmd.envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // The allowed request is the last before the sleep: once the upstream
    // has it, the workload is asleep (or about to be).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while up.seen.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if !t.secrets {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(up.seen.lock().unwrap().is_empty());
        return;
    }
    std::thread::sleep(std::time::Duration::from_millis(3000));
    // Every process of the sandbox (not the proxy, which holds the value
    // by design, nor this test or the `cordon` that read the store).
    let mut pids: Vec<u32> = descendants(pid);
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        // A gVisor sentry is not a descendant (runsc detaches it); any on
        // the machine is searched (another holds nothing of this case's).
        // Nor is a docker container's: its workload is found by its
        // script (`sh` or python, holding the placeholder) and its sleep.
        let engine_side = cmdline == b"/bin/sleep\x0037.5\x00"
            || cmdline
                .windows(30)
                .any(|w| w == b"/run/cordon/secrets/openai/key")
            || cmdline.starts_with(b"runsc-sandbox")
            || cmdline.windows(11).any(|w| w == b"qemu-system");
        if engine_side && !pids.contains(&p) {
            pids.push(p);
        }
    }
    // The sandbox's own: in a mount namespace other than the host's (the
    // proxy, which holds the value by design, the `cordon` that read the
    // store and an engine's host-side helpers are in the host's).
    // A microvm's guest is its QEMU process's memory (its files there
    // are the host's, not searched).
    let host_mnt = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let is_vm = |p: &u32| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .unwrap_or_default()
            .windows(11)
            .any(|w| w == b"qemu-system")
    };
    let sandbox: Vec<(u32, &[&str])> = pids
        .into_iter()
        .filter_map(|p| {
            if is_vm(&p) {
                return Some((p, &[] as &[&str]));
            }
            std::fs::read_link(format!("/proc/{p}/ns/mnt"))
                .is_ok_and(|ns| ns != host_mnt)
                .then_some((p, &["/run", "/tmp", "/work"] as &[&str]))
        })
        .collect();
    assert!(!sandbox.is_empty(), "the sandbox's processes were found");
    let mut found = Vec::new();
    let mut control = Vec::new();
    for (p, roots) in &sandbox {
        found.extend(found_in_process(*p, BROKERED_VALUE.as_bytes(), roots));
        // The control: the placeholder the workload read is found, so the
        // search reaches where the value would be.
        control.extend(found_in_process(*p, b"cordon-secret-", &["/run"]));
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(
        found.is_empty(),
        "the value is in the sandbox: {found:?} (of {sandbox:?})"
    );
    let codes: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        codes.first().copied(),
        Some("403"),
        "toward another inspected host: {stdout}{stderr}"
    );
    assert_eq!(
        codes.get(1).copied(),
        Some("403"),
        "in a query string: {stdout}{stderr}"
    );
    assert_eq!(
        codes.get(2).copied(),
        Some("403"),
        "in a body: {stdout}{stderr}"
    );
    assert_eq!(
        codes.get(3).copied(),
        Some("hello GET /v1/models"),
        "{stdout}{stderr}"
    );
    // The control: the placeholder the workload read is found in memory
    // (a process's, a gVisor sentry's memory file, a guest's RAM).
    assert!(
        control
            .iter()
            .any(|w| w.contains("memory") || w.contains("memfd")),
        "the search did not find the placeholder the sandbox holds: {control:?} (of {sandbox:?})"
    );
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0]
            .to_ascii_lowercase()
            .contains(&format!("authorization: bearer {BROKERED_VALUE}").to_ascii_lowercase()),
        "the upstream got the value: {seen:?}"
    );
    let audit = std::fs::read_to_string(f.path("audit.jsonl")).unwrap_or_default();
    assert!(
        !audit.contains(BROKERED_VALUE),
        "the value is in the audit log"
    );
    assert!(!stderr.contains(BROKERED_VALUE) && !stdout.contains(BROKERED_VALUE));
    assert!(audit.matches("exfiltration").count() >= 3, "{audit}");
    assert!(audit.contains(r#""secrets":["openai/key"]"#), "{audit}");
}

fn a_kept_sandbox_has_its_route_through_its_keeper(t: &Target) {
    let Some(ready) = (t.ready)("a_kept_sandbox_has_its_route_through_its_keeper") else {
        return;
    };
    let env = ready.env.clone();
    let (port, hits) = upstream("hello-kept");
    let f = Fixture::for_target(t, &[format!("ok.test:{port}")]);
    let mut args: Vec<String> = ["sandbox", "up", "--scope", "egress-test", "--thread", "t1"]
        .map(String::from)
        .to_vec();
    args.extend(f.selection(t));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon_env(&argv, &env);
    assert_eq!(code, 0, "up: {err}");
    let handle = out.trim().to_string();
    let exec = |url: &str| {
        let mut args: Vec<String> =
            vec!["sandbox".into(), "exec".into(), handle.clone(), "--".into()];
        args.extend(t.client.fetch(url));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        f.cordon_env(&argv, &env)
    };
    for _ in 0..2 {
        let (code, out, err) = exec(&format!("http://ok.test:{port}/x"));
        assert_eq!(code, 0, "exec: {err}");
        assert_eq!(out, "hello-kept");
    }
    let (code, _, _) = exec(&format!("http://other.test:{port}/x"));
    assert_eq!(code, 22);
    // The keeper's proxy runs in a process of its own, confined.
    let proxies = egress_processes(&f.path("audit.jsonl"));
    assert_eq!(
        proxies.len(),
        1,
        "the keeper's egress proxy process: {proxies:?}"
    );
    for pid in &proxies {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        for (k, want) in [
            ("NoNewPrivs:", "1"),
            ("Seccomp:", "2"),
            ("CapEff:", "0000000000000000"),
            ("CapBnd:", "0000000000000000"),
            ("Uid:", "1999999000\t1999999000\t1999999000\t1999999000"),
            ("Gid:", "1999999000\t1999999000\t1999999000\t1999999000"),
            ("Groups:", ""),
        ] {
            let got = status
                .lines()
                .find(|l| l.starts_with(k))
                .map(|l| l[k.len()..].trim().to_string())
                .unwrap_or_default();
            assert_eq!(got, want, "{k} of the egress proxy process {pid}");
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let (code, _, err) = f.cordon_env(&["sandbox", "down", &handle], &env);
    assert_eq!(code, 0, "down: {err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while !egress_processes(&f.path("audit.jsonl")).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the egress proxy process outlived its keeper"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines = f.audit();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().all(|l| l["identity"]["name"] == "agent-7"));
}

/// The network namespaces (`net:[N]`) process `pid` holds open as files.
fn held_netns(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .map(|t| t.display().to_string())
                .filter(|t| t.starts_with("net:["))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether any process is in, or holds open, the network namespace `ns`.
fn netns_in_use(ns: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let inside = std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|t| t.display().to_string() == ns);
        if inside || held_netns(pid).iter().any(|h| h == ns) {
            out.push(pid);
        }
    }
    out
}

/// The keeper process of the kept sandbox `handle`.
fn keeper_of(handle: &str) -> Option<u32> {
    let flag = format!("--handle={handle}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        (args.contains(&&b"__sandbox-keeper"[..]) && args.contains(&flag.as_bytes())).then_some(pid)
    })
}

/// A gvisor sandbox with a route out leaves nothing once disposed of —
/// no proxy process, no process in or holding its network namespace, no
/// runsc container or directory — and neither does one whose keeper is
/// killed with SIGKILL, once `cordon sandbox gc` has run.
#[test]
fn gvisor_routes_leave_nothing_after_down_or_a_killed_keeper_and_gc() {
    let t = &GVISOR;
    if (t.ready)("gvisor_routes_leave_nothing_after_down_or_a_killed_keeper_and_gc").is_none() {
        return;
    }
    let (port, hits) = upstream("hello-gc");
    let f = Fixture::new(&[format!("ok.test:{port}")]);
    for kill in [false, true] {
        let thread = if kill { "killed" } else { "down" };
        let mut args: Vec<String> = ["sandbox", "up", "--scope", "egress-gc", "--thread", thread]
            .map(String::from)
            .to_vec();
        args.extend(f.selection(t));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = f.cordon(&argv);
        assert_eq!(code, 0, "up: {err}");
        let handle = out.trim().to_string();
        // Two execs: the first a runsc sandbox of its own, the second a
        // container in the sandbox's pod.
        for _ in 0..2 {
            let mut args: Vec<String> =
                vec!["sandbox".into(), "exec".into(), handle.clone(), "--".into()];
            args.extend(curl(&format!("http://ok.test:{port}/x")));
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, out, err) = f.cordon(&argv);
            assert_eq!(code, 0, "exec: {err}");
            assert_eq!(out, "hello-gc");
        }
        let keeper = keeper_of(&handle).expect("the sandbox's keeper");
        let namespaces = held_netns(keeper);
        assert_eq!(namespaces.len(), 1, "the keeper's route: {namespaces:?}");
        let ns = &namespaces[0];
        if kill {
            // The keeper this test started, by its pid.
            let killed = Command::new("kill")
                .args(["-9", &keeper.to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::path::Path::new(&format!("/proc/{keeper}")).exists() {
                assert!(std::time::Instant::now() < deadline, "the keeper lived on");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let (code, _, err) = f.cordon(&["sandbox", "gc"]);
            assert_eq!(code, 0, "gc: {err}");
        } else {
            let (code, _, err) = f.cordon(&["sandbox", "down", &handle]);
            assert_eq!(code, 0, "down: {err}");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let proxies = egress_processes(&f.path("audit.jsonl"));
            let users = netns_in_use(ns);
            if proxies.is_empty() && users.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {thread}: egress proxies {proxies:?}, processes in or holding {ns}: {users:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let prefix = format!("cordon-gvisor-{keeper}-");
        let listed = Command::new("runsc")
            .args(["--root", "/run/cordon/gvisor", "list", "-quiet"])
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(
            !listed.lines().any(|l| l.starts_with(&prefix)),
            "after {thread}: runsc still lists {listed}"
        );
        let dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        assert!(dirs.is_empty(), "after {thread}: left {dirs:?}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
}

/// With a route out, a gVisor workload's sockets are the host kernel's
/// (hostinet) in a namespace cordon made: it must reach the proxy's port
/// and nothing else — not a listener on the host's loopback, not the
/// host's own address, not an outside one (TCP or UDP) — and may not
/// listen, nor open raw, packet or netlink sockets.
#[test]
fn a_gvisor_route_reaches_the_proxy_and_nothing_else() {
    let t = &GVISOR;
    if (t.ready)("a_gvisor_route_reaches_the_proxy_and_nothing_else").is_none() {
        return;
    }
    let (port, hits) = upstream("never");
    let f = Fixture::new(&["ok.test:443".to_string()]);
    // The host's first address that is not loopback, if it has one.
    let host_ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into());
    let probe = format!(
        r#"import socket,os
p=int(os.environ["HTTP_PROXY"].rsplit(":",1)[1])
def t(name,fam,typ,addr):
  try:
    s=socket.socket(fam,typ); s.settimeout(3)
    if typ==socket.SOCK_DGRAM: s.sendto(b"x",addr); s.recv(1); print(name,"REACHED")
    else: s.connect(addr); print(name,"REACHED")
  except OSError as e: print(name,"refused",e.errno)
t("proxy",socket.AF_INET,socket.SOCK_STREAM,("127.0.0.1",p))
t("host-loopback",socket.AF_INET,socket.SOCK_STREAM,("127.0.0.1",{port}))
t("host-address",socket.AF_INET,socket.SOCK_STREAM,("{host_ip}",{port}))
t("outside",socket.AF_INET,socket.SOCK_STREAM,("192.0.2.1",80))
t("outside-udp",socket.AF_INET,socket.SOCK_DGRAM,("192.0.2.1",53))
t("v6-loopback",socket.AF_INET6,socket.SOCK_STREAM,("::1",{port}))
for n,fam,typ,proto in [("raw",socket.AF_INET,socket.SOCK_RAW,1),("packet",17,socket.SOCK_RAW,0),("netlink",16,socket.SOCK_RAW,0)]:
  try: socket.socket(fam,typ,proto); print(n,"REACHED")
  except OSError as e: print(n,"refused",e.errno)
try:
  s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print("listen REACHED")
except OSError as e: print("listen refused",e.errno)
"#
    );
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(f.selection(t));
    args.extend(["--".into(), "/usr/bin/python3".into(), "-c".into(), probe]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon(&argv);
    assert_eq!(code, 0, "{err}\n{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 10, "{out}");
    assert_eq!(lines[0], "proxy REACHED", "{out}");
    for l in &lines[1..] {
        assert!(l.contains(" refused "), "a breach: `{l}`\n{out}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the host's listener was reached"
    );
}

/// What a microvm workload finds of the network, as lines the test reads:
/// its interfaces, its proxy variable, the ports listening in its network
/// namespace, then one line per place it tries to reach.
const MICROVM_NET_PROBE: &str = r#"import socket,os,sys
print("interfaces", ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])))
proxy=os.environ.get("HTTP_PROXY")
print("proxy-variable", proxy or "none")
ports=set()
for f in ["/proc/net/tcp","/proc/net/tcp6"]:
  for l in open(f).read().splitlines()[1:]:
    c=l.split()
    if c[3]=="0A": ports.add(int(c[1].rsplit(":",1)[1],16))
print("listening", ",".join(str(p) for p in sorted(ports)) or "none")
def t(name,fam,typ,addr):
  try:
    s=socket.socket(fam,typ); s.settimeout(3)
    if typ==socket.SOCK_DGRAM: s.sendto(b"x",addr); s.recv(1); print(name,"REACHED")
    else: s.connect(addr); print(name,"REACHED")
  except OSError as e: print(name,"refused",e.errno)
up=int(sys.argv[1]); host=sys.argv[2]
if proxy: t("proxy",socket.AF_INET,socket.SOCK_STREAM,("127.0.0.1",int(proxy.rsplit(":",1)[1])))
t("host-loopback",socket.AF_INET,socket.SOCK_STREAM,("127.0.0.1",up))
t("host-address",socket.AF_INET,socket.SOCK_STREAM,(host,up))
t("outside",socket.AF_INET,socket.SOCK_STREAM,("192.0.2.1",80))
t("outside-udp",socket.AF_INET,socket.SOCK_DGRAM,("192.0.2.1",53))
t("host-address-udp",socket.AF_INET,socket.SOCK_DGRAM,(host,up))
t("v6-loopback",socket.AF_INET6,socket.SOCK_STREAM,("::1",up))
"#;

/// A microvm guest has no network of its own, only the relay. With no
/// `egress_allow` its workload has no interface but `lo`, no proxy
/// variable, nothing listening (no proxy port) and reaches nothing; with
/// one, its one listener is the proxy port, and it reaches that and
/// nothing else: not a listener on the host's loopback, not the host's
/// own address, not an outside one (TCP or UDP).
#[test]
fn a_microvm_workload_has_no_route_but_its_proxy() {
    let t = &MICROVM;
    let Some(ready) = (t.ready)("a_microvm_workload_has_no_route_but_its_proxy") else {
        return;
    };
    let (port, hits) = upstream("never");
    // The host's first address that is not loopback, if it has one.
    let host_ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into());
    let probe = |allow: &[String]| {
        let f = Fixture::for_target(t, allow);
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(f.selection(t));
        args.extend(
            [
                "--",
                "/usr/bin/python3",
                "-c",
                MICROVM_NET_PROBE,
                &port.to_string(),
                &host_ip,
            ]
            .map(String::from),
        );
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = f.cordon_env(&argv, &ready.env);
        assert_eq!(code, 0, "{err}\n{out}");
        (out, f)
    };
    let refused = |out: &str, from: usize| {
        let lines: Vec<&str> = out.lines().skip(from).collect();
        assert_eq!(lines.len(), 6, "{out}");
        for l in &lines {
            assert!(l.contains(" refused "), "a breach: `{l}`\n{out}");
        }
        // Landlock refuses TCP connects; UDP it does not govern, and the
        // workload's namespace has no route for it (ENETUNREACH).
        for l in ["outside-udp refused 101", "host-address-udp refused 101"] {
            if host_ip != "127.0.0.1" || l.starts_with("outside") {
                assert!(lines.contains(&l), "no `{l}`:\n{out}");
            }
        }
    };

    let (out, f) = probe(&[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"interfaces lo"), "{out}");
    assert_eq!(lines.get(1), Some(&"proxy-variable none"), "{out}");
    assert_eq!(lines.get(2), Some(&"listening none"), "{out}");
    refused(&out, 3);
    assert!(f.audit().is_empty(), "no proxy, no audit: {:?}", f.audit());

    let (out, f) = probe(&["ok.test:443".to_string()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"interfaces lo"), "{out}");
    let proxy_port = lines
        .get(1)
        .and_then(|l| l.strip_prefix("proxy-variable http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("the proxy variable: {out}"));
    assert_eq!(
        lines.get(2),
        Some(&format!("listening {proxy_port}").as_str()),
        "{out}"
    );
    assert_eq!(lines.get(3), Some(&"proxy REACHED"), "{out}");
    refused(&out, 4);
    // Reaching the proxy's port is no request: nothing was decided.
    assert!(f.audit().is_empty(), "{:?}", f.audit());

    // Even with a route, the guest has no network device: the route is
    // the agent's channel. QEMU, under the sandbox's keeper, is asked for
    // no defaults and no NIC.
    let f = Fixture::for_target(t, &["ok.test:443".to_string()]);
    let mut args: Vec<String> = ["sandbox", "up", "--scope", "egress-vm", "--thread", "t1"]
        .map(String::from)
        .to_vec();
    args.extend(f.selection(t));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon_env(&argv, &ready.env);
    assert_eq!(code, 0, "up: {err}");
    let handle = out.trim().to_string();
    let keeper = keeper_of(&handle).expect("the sandbox's keeper");
    let qemu: Vec<Vec<String>> = descendants(keeper)
        .into_iter()
        .filter_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmd
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.first()?
                .ends_with("qemu-system-x86_64")
                .then_some(args)
        })
        .collect();
    let (code, _, err) = f.cordon_env(&["sandbox", "down", &handle], &ready.env);
    assert_eq!(code, 0, "down: {err}");
    assert_eq!(qemu.len(), 1, "the keeper's QEMU: {qemu:?}");
    let qemu = &qemu[0];
    assert!(qemu.iter().any(|a| a == "-nodefaults"), "{qemu:?}");
    for a in qemu {
        assert!(
            !["-net", "-netdev", "-nic"].contains(&a.as_str())
                && !a.contains("-net-")
                && !a.contains("virtio-net")
                && !a.contains("e1000"),
            "a network device for the guest: `{a}` in {qemu:?}"
        );
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the host's listener was reached"
    );
}

/// The processes below `pid`, however deep.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let p = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces and parens.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// A microvm sandbox with a route out leaves nothing once disposed of — no
/// proxy process, no process in or holding the proxy's network namespace,
/// no QEMU — and neither does one whose keeper is killed with SIGKILL,
/// once `cordon sandbox gc` has run.
#[test]
fn microvm_routes_leave_nothing_after_down_or_a_killed_keeper_and_gc() {
    let t = &MICROVM;
    let Some(ready) =
        (t.ready)("microvm_routes_leave_nothing_after_down_or_a_killed_keeper_and_gc")
    else {
        return;
    };
    let (port, hits) = upstream("hello-gc");
    let f = Fixture::for_target(t, &[format!("ok.test:{port}")]);
    for kill in [false, true] {
        let thread = if kill { "killed" } else { "down" };
        let mut args: Vec<String> = ["sandbox", "up", "--scope", "egress-gc", "--thread", thread]
            .map(String::from)
            .to_vec();
        args.extend(f.selection(t));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = f.cordon_env(&argv, &ready.env);
        assert_eq!(code, 0, "up: {err}");
        let handle = out.trim().to_string();
        let mut args: Vec<String> =
            vec!["sandbox".into(), "exec".into(), handle.clone(), "--".into()];
        args.extend(t.client.fetch(&format!("http://ok.test:{port}/x")));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = f.cordon_env(&argv, &ready.env);
        assert_eq!(code, 0, "exec: {err}");
        assert_eq!(out, "hello-gc");
        let keeper = keeper_of(&handle).expect("the sandbox's keeper");
        let namespaces = held_netns(keeper);
        assert_eq!(namespaces.len(), 1, "the keeper's route: {namespaces:?}");
        let ns = &namespaces[0];
        let below = descendants(keeper);
        assert!(!below.is_empty(), "nothing runs under the keeper");
        if kill {
            // The keeper this test started, by its pid.
            let killed = Command::new("kill")
                .args(["-9", &keeper.to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::path::Path::new(&format!("/proc/{keeper}")).exists() {
                assert!(std::time::Instant::now() < deadline, "the keeper lived on");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let (code, _, err) = f.cordon_env(&["sandbox", "gc"], &ready.env);
            assert_eq!(code, 0, "gc: {err}");
        } else {
            let (code, _, err) = f.cordon_env(&["sandbox", "down", &handle], &ready.env);
            assert_eq!(code, 0, "down: {err}");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let proxies = egress_processes(&f.path("audit.jsonl"));
            let users = netns_in_use(ns);
            let alive: Vec<u32> = below
                .iter()
                .copied()
                .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect();
            if proxies.is_empty() && users.is_empty() && alive.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {thread}: egress proxies {proxies:?}, processes in or holding {ns}: {users:?}, the keeper's processes alive: {alive:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// A loopback HTTP server whose every answer streams slowly: the head and
/// `first` at once (then `started` counts it), then a byte every 100 ms
/// for a minute; `cut` counts the answers whose write failed (their
/// connection was closed).
fn slow_upstream() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let started = Arc::new(AtomicUsize::new(0));
    let cut = Arc::new(AtomicUsize::new(0));
    let (st, ct) = (started.clone(), cut.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (st, ct) = (st.clone(), ct.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head =
                    "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close\r\n\r\nfirst\n";
                if s.write_all(head.as_bytes())
                    .and_then(|()| s.flush())
                    .is_err()
                {
                    ct.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                st.fetch_add(1, Ordering::SeqCst);
                for _ in 0..600 {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if s.write_all(b".").is_err() {
                        ct.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            });
        }
    });
    (port, started, cut)
}

/// Disposes of the sandbox it names when dropped (`cordon sandbox down`;
/// a sandbox already down is no error here).
struct DownOnDrop<'a>(&'a Fixture, String, Vec<(String, String)>);

impl Drop for DownOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.cordon_env(&["sandbox", "down", &self.1], &self.2);
    }
}

/// Waits up to `secs` for `cond`.
fn within(secs: u64, cond: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    cond()
}

/// `cordon sandbox egress` on a kept sandbox at the container rung, end to
/// end through its keeper: a replacement that drops `other.test` closes
/// the connections open to it mid-answer (a plain request and an https
/// tunnel) and refuses new ones (`403`) while `ok.test` still answers; one the policy denies exits non-zero
/// saying egress is now closed, and `ok.test` is refused too until a
/// change that loads; so is one that does not parse; `--none` allows
/// nothing. The audit log has each change, with both lists and who asked.
fn a_kept_sandbox_s_egress_is_replaced_live_through_its_keeper(t: &Target) {
    let Some(ready) = (t.ready)("a_kept_sandbox_s_egress_is_replaced_live_through_its_keeper")
    else {
        return;
    };
    let env = ready.env.clone();
    let (ok_port, ok_hits) = upstream("hello-ok");
    let (slow_port, started, cut) = slow_upstream();
    let tls = cordon_testkit::https::upstream(&["other.test"]);
    let f = Fixture::for_target(
        t,
        &[
            format!("ok.test:{ok_port}"),
            format!("other.test:{slow_port}"),
            format!("other.test:{}", tls.port),
        ],
    );
    let mut args: Vec<String> = [
        "sandbox",
        "up",
        "--scope",
        "egress-test",
        "--thread",
        "live",
    ]
    .map(String::from)
    .to_vec();
    args.extend(f.selection(t));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = f.cordon_env(&argv, &env);
    assert_eq!(code, 0, "up: {err}");
    let handle = out.trim().to_string();
    // Down however the case ends: a failed assertion leaves no keeper.
    let _down = DownOnDrop(&f, handle.clone(), env.clone());
    let exec_args = |argv: Vec<String>| -> Vec<String> {
        let mut args: Vec<String> =
            vec!["sandbox".into(), "exec".into(), handle.clone(), "--".into()];
        args.extend(argv);
        args
    };
    let exec = |url: &str| {
        let args = exec_args(t.client.fetch(url));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        f.cordon_env(&argv, &env)
    };
    let egress = |entries: &[&str]| {
        let mut args: Vec<&str> = vec!["sandbox", "egress", &handle];
        for e in entries {
            args.extend(["--spec-egress", e]);
        }
        f.cordon_env(&args, &env)
    };
    let ok_url = format!("http://ok.test:{ok_port}/x");
    let other_url = format!("http://other.test:{slow_port}/x");

    // Two long answers from other.test open in the background: a plain
    // request through the proxy, and https through a CONNECT tunnel.
    let tls_url = format!("https://other.test:{}/slow", tls.port);
    let seen = |line: &str| tls.seen.lock().unwrap().iter().any(|l| l.starts_with(line));
    let mut children: Vec<std::process::Child> = [&other_url, &tls_url]
        .iter()
        .map(|url| {
            let argv = t.client.stream(url);
            let mut cmd = cordon_testkit::cordon!()
                .env("CORDON_STATE_DIR", f.path("state"))
                .command(exec_args(argv));
            cmd.envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    // Their output read as it comes: the change below must find both
    // answers begun at the client, not only at the server (the server
    // seeing the request is not the client having `first`; CI once cut
    // the tunnel between the two).
    let outputs: Vec<Arc<std::sync::Mutex<String>>> = children
        .iter_mut()
        .map(|child| {
            let out = Arc::new(std::sync::Mutex::new(String::new()));
            let (mut pipe, o) = (child.stdout.take().unwrap(), out.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    o.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
            out
        })
        .collect();
    let begun = |o: &Arc<std::sync::Mutex<String>>| o.lock().unwrap().starts_with("first");
    assert!(
        within(30, || started.load(Ordering::SeqCst) == 1
            && seen("GET /slow")
            && outputs.iter().all(begun)),
        "the long requests never both reached other.test and began to answer: {:?}",
        outputs
            .iter()
            .map(|o| o.lock().unwrap().clone())
            .collect::<Vec<_>>()
    );
    let (code, out, err) = exec(&ok_url);
    assert_eq!((code, out.as_str()), (0, "hello-ok"), "{err}");

    // other.test dropped: the open answer is cut, a new request refused.
    let (code, out, err) = egress(&[&format!("ok.test:{ok_port}")]);
    assert_eq!(code, 0, "egress: {out}{err}");
    assert!(err.contains("generation 2"), "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    for (child, how) in children.iter_mut().zip(["plain", "tunnel"]) {
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the {how} connection open to other.test outlived the change"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert!(!status.success(), "{how}");
    }
    assert!(
        within(10, || cut.load(Ordering::SeqCst) == 1 && seen("cut /slow")),
        "an upstream connection to other.test stayed open (plain cut: {}, tunnel cut: {})",
        cut.load(Ordering::SeqCst),
        seen("cut /slow")
    );
    let (code, _, err) = exec(&other_url);
    assert_eq!(code, 22, "other.test after the change: {err}");
    assert!(err.contains("403"), "{err}");
    // A new tunnel to it: the CONNECT is answered 403.
    let args = exec_args(
        t.client
            .stream(&format!("https://other.test:{}/x", tls.port)),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = f.cordon_env(&argv, &env);
    assert_ne!(code, 0, "a tunnel to other.test after the change: {err}");
    assert!(err.contains("403"), "{err}");
    assert!(!seen("GET /x"), "the new tunnel reached other.test");
    let (code, out, err) = exec(&ok_url);
    assert_eq!((code, out.as_str()), (0, "hello-ok"), "{err}");

    // An entry the policy denies: refused, and egress closed.
    let (code, _, err) = egress(&[&format!("ok.test:{ok_port}"), "elsewhere.test:80"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("elsewhere.test"), "{err}");
    assert!(err.contains("now closed"), "{err}");
    let (code, _, err) = exec(&ok_url);
    assert_eq!(code, 22, "ok.test while egress is closed: {err}");
    // A change that loads opens it again.
    let (code, _, err) = egress(&[&format!("ok.test:{ok_port}")]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = exec(&ok_url);
    assert_eq!((code, out.as_str()), (0, "hello-ok"), "{err}");
    // An entry that does not parse (an address) closes it too.
    let (code, _, err) = egress(&["10.0.0.1"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("now closed"), "{err}");
    let (code, _, err) = exec(&ok_url);
    assert_eq!(code, 22, "ok.test while egress is closed: {err}");
    // `--none`: loads, and allows nothing.
    let (code, _, err) = f.cordon_env(&["sandbox", "egress", &handle, "--none"], &env);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = exec(&ok_url);
    assert_eq!(code, 22, "ok.test with no allowlist: {err}");
    assert_eq!(ok_hits.load(Ordering::SeqCst), 3);

    let (code, _, err) = f.cordon_env(&["sandbox", "down", &handle], &env);
    assert_eq!(code, 0, "down: {err}");
    let changes: Vec<serde_json::Value> = f
        .audit()
        .into_iter()
        .filter(|l| l["kind"] == "egress_allow")
        .collect();
    let verdicts: Vec<&str> = changes
        .iter()
        .map(|l| l["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        ["changed", "closed", "changed", "closed", "changed"],
        "{changes:?}"
    );
    for l in &changes {
        assert_eq!(l["identity"]["name"], "agent-7", "{l}");
        assert!(
            l["reason"]
                .as_str()
                .unwrap()
                .contains("asked by `cordon sandbox egress`"),
            "{l}"
        );
    }
    let first = changes[0]["reason"].as_str().unwrap();
    assert!(
        first.contains(&format!(
            "[ok.test:{ok_port}, other.test:{slow_port}, other.test:{}] -> [ok.test:{ok_port}]",
            tls.port
        )),
        "{first}"
    );
    assert!(
        changes[1]["reason"]
            .as_str()
            .unwrap()
            .contains("elsewhere.test"),
        "{}",
        changes[1]
    );
    // A replacement that did not parse is closed with its own reason.
    assert!(
        changes[3]["reason"]
            .as_str()
            .unwrap()
            .contains("`10.0.0.1`"),
        "{}",
        changes[3]
    );
    assert!(
        changes[4]["reason"].as_str().unwrap().contains("-> []"),
        "{}",
        changes[4]
    );
}
