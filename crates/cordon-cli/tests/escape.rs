//! The escape kit against the local backends and gVisor, through the real binary
//! (`cordon escape --backend NAME`). CI runs as root and runs it; elsewhere
//! it skips loudly, and `CI=true` without root is a failure.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

/// Breaches the kit finds today, each with why. The test asserts these
/// cases still FAIL (so a fix makes it fail until the entry is removed)
/// and every other case passes. Never add to it to make CI green without
/// an issue that owns the fix.
const KNOWN_BREACHES: &[(&str, &str, &str)] = &[
    // (The process rung's `concurrent-exec-proc-info` was one until its
    // `/proc` was mounted with `hidepid=invisible`: exec B no longer lists
    // exec A, which is outside its Landlock domain.)
];

fn escape(backend: &str, extra: &[&str]) -> (i32, String, String) {
    cordon_testkit::output(
        cordon_testkit::cordon!()
            .command(["escape", "--backend", backend])
            .args(extra)
            .output()
            .expect("run cordon"),
    )
}

/// One kit at a time: both backends run their sandboxes as the same host
/// uid, whose process count (`RLIMIT_NPROC`) the bounds cases measure.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_against(backend: &str) {
    run_against_with(backend, &[]);
}

fn run_against_with(backend: &str, extra: &[&str]) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let case = format!("the escape kit against `{backend}`");
    if backend == "gvisor" && !cordon_testkit::has_runsc() {
        cordon_testkit::skip(&case, "`runsc` is not installed (`apt-get install runsc`)");
        return;
    }
    if !cordon_testkit::can_sandbox(&case) {
        return;
    }
    let started = std::time::Instant::now();
    let (code, out, err) = escape(backend, extra);
    if extra.contains(&"--with-egress-route") {
        assert!(
            out.contains("with a route through the egress proxy"),
            "{out}\n{err}"
        );
    }
    let took = started.elapsed();
    let known: Vec<&str> = KNOWN_BREACHES
        .iter()
        .filter(|(b, _, _)| *b == backend)
        .map(|(_, case, _)| *case)
        .collect();
    let results: Vec<(bool, &str)> = out
        .lines()
        .filter_map(|l| {
            let (mark, rest) = l.split_once(' ')?;
            let name = rest.split_once(':')?.0;
            match mark {
                "pass" => Some((true, name)),
                "FAIL" => Some((false, name)),
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        results.len(),
        cordon_kits::escape::CASES.len(),
        "every case must report (exit {code}):\n{out}\n{err}"
    );
    for (passed, name) in &results {
        if known.contains(name) {
            assert!(
                !passed,
                "`{name}` now passes against `{backend}`: remove it from KNOWN_BREACHES\n{out}"
            );
            eprintln!("!!!!!!!! KNOWN BREACH against `{backend}`: `{name}` fails (see KNOWN_BREACHES) !!!!!!!!");
        } else {
            assert!(passed, "`{name}` failed against `{backend}`:\n{out}\n{err}");
        }
    }
    if known.is_empty() {
        assert_eq!(code, 0, "{out}\n{err}");
    } else {
        assert_eq!(code, 1, "{out}\n{err}");
    }
    assert!(
        took < std::time::Duration::from_secs(60),
        "the kit took {took:?} against `{backend}`"
    );
}

#[test]
fn the_escape_kit_passes_against_the_process_backend() {
    run_against("process");
}

#[test]
fn the_escape_kit_passes_against_the_container_backend() {
    run_against("container");
}

#[test]
fn the_escape_kit_passes_against_the_gvisor_backend() {
    run_against("gvisor");
}

/// With a route out (a listener in the sandbox's network namespace, the
/// inet sockets a route needs, gVisor's host network stack), every case
/// still holds: a route opens nothing the kit closes.
#[test]
fn the_escape_kit_passes_with_an_egress_route_against_the_container_backend() {
    run_against_with("container", &["--with-egress-route"]);
}

#[test]
fn the_escape_kit_passes_with_an_egress_route_against_the_gvisor_backend() {
    run_against_with("gvisor", &["--with-egress-route"]);
}

#[test]
fn escape_refuses_a_backend_it_does_not_know_or_cannot_build() {
    let (code, _, err) = escape("nope", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`nope` is not a backend cordon knows"),
        "{err}"
    );
    let out = cordon_testkit::cordon!()
        .command(["escape", "--backend", "docker"])
        .env("CORDON_DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .expect("run cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("cannot run on this machine"), "{err}");
}
