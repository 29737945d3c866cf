//! A real debootstrap build (`bookworm` minbase with `python3`), then
//! `python3 -c 'print(6*7)'` in it at the container rung.
//!
//! Runs with `CI=true` or `CORDON_TEST_DEBOOTSTRAP=1`; skips loudly
//! otherwise. The image is kept in a store under `/var/cache/cordon-ci-images`
//! (`$CORDON_CI_IMAGE_CACHE`), named by suite and packages, so later runs
//! reuse it. This binary is also the sandbox's init (`harness = false`).

#![expect(clippy::unwrap_used, reason = "a test: a failed step is a failed test")]

#[cfg(target_os = "linux")]
fn main() {
    const INIT_ARG: &str = "__sandbox-init";
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(INIT_ARG)) {
        cordon_linux::init_main();
    }
    const NAME: &str = "debootstrap_python_runs_at_the_container_rung";
    // `cargo test FILTER`: run only when the filter matches; `--list`: say so.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{NAME}: test");
        return;
    }
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-')) {
        if !NAME.contains(filter.as_str()) {
            return;
        }
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let asked = std::env::var("CORDON_TEST_DEBOOTSTRAP").is_ok_and(|v| v == "1");
    if !ci && !asked {
        cordon_testkit::skip(
            NAME,
            "set CORDON_TEST_DEBOOTSTRAP=1 (or CI=true) to build a Debian image",
        );
        return;
    }
    println!("test {NAME} ...");
    run::case(INIT_ARG);
    println!("test {NAME} ... ok");
}

#[cfg(not(target_os = "linux"))]
fn main() {}

#[cfg(target_os = "linux")]
mod run {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::Instant;

    use cordon_image::{DebootstrapOpts, ImageStore, Resolved};
    use cordon_linux::{
        Bounds, Enforcer, FsRule, Ids, InitProgram, LinuxEnforcer, Plan, PlanSpec, Rung,
        SandboxStdio,
    };

    pub fn case(init_arg: &str) {
        let exe = std::env::current_exe().unwrap();
        let enforcer = LinuxEnforcer::new(InitProgram::new(exe).arg(init_arg));
        if let Err(missing) = enforcer.available(Rung::Container) {
            panic!("the container rung cannot run here: {missing}");
        }
        let cache = std::env::var_os("CORDON_CI_IMAGE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/cordon-ci-images"));
        let store = ImageStore::open(&cache).unwrap();
        let opts = DebootstrapOpts {
            include: vec!["python3".into()],
            ..Default::default()
        };
        // Keyed by suite and packages: a different image gets another name.
        let name = format!("ci-{}-{}", opts.suite, opts.include.join("-"));
        let root = match store.resolve(&name) {
            Ok(Resolved::Stored { root, .. }) => {
                eprintln!("reusing `{name}` from {}", cache.display());
                root
            }
            _ => {
                let started = Instant::now();
                let info = store
                    .build_debootstrap(&name, &opts, &mut |l: &str| eprintln!("  {l}"))
                    .unwrap();
                eprintln!(
                    "built `{name}` {} ({} MB) in {:.0?}",
                    info.digest,
                    info.size >> 20,
                    started.elapsed()
                );
                match store.resolve(&name).unwrap() {
                    Resolved::Stored { root, .. } => root,
                    Resolved::Host => unreachable!("a stored name"),
                }
            }
        };

        let host_id = 300_000 + std::process::id() % 10_000;
        let work = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(work.path(), Some(host_id), Some(host_id)).unwrap();
        let rule = |p: &str, execute: bool| FsRule {
            path: PathBuf::from(p),
            read: true,
            write: false,
            execute,
        };
        let spec = PlanSpec {
            rung: Rung::Container,
            fs: vec![
                rule("/usr", true),
                rule("/lib", true),
                rule("/lib64", true),
                rule("/bin", true),
                rule("/etc", false),
            ],
            mask_paths: vec![],
            mask_executables: vec![],
            work_dir: PathBuf::from("/workspace"),
            work_dir_source: Some(work.path().to_path_buf()),
            image_root: Some(root),
            tmp_dir: None,
            proxy_port: None,
            listen: false,
            secrets_dir: None,
            trust_dir: None,
            kvm: false,
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            bounds: Bounds {
                max_memory: 256 << 20,
                max_processes: 32,
                max_cpu_seconds: 10,
                max_wall_seconds: 30,
                max_disk: 256 << 20,
            },
            argv: vec![
                "/usr/bin/python3".into(),
                "-c".into(),
                "import os; print(6*7); open('/workspace/out', 'w').write(os.uname().nodename)"
                    .into(),
            ],
            ids: Ids {
                uid: 1000,
                gid: 1000,
                host_uid: host_id,
                host_gid: host_id,
            },
        };
        let plan = Plan::new(spec).unwrap();
        let started = Instant::now();
        let running = enforcer.confine(&plan, SandboxStdio::piped()).unwrap();
        let (outcome, out, err) = running.wait_with_output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
        assert!(
            outcome.termination.success(),
            "{outcome:?}\n--- stdout\n{out}\n--- stderr\n{err}"
        );
        assert_eq!(out, "42\n", "stderr: {err}");
        assert_eq!(
            std::fs::read_to_string(work.path().join("out")).unwrap(),
            "cordon"
        );
        eprintln!("python3 in the image: {:.0?}", started.elapsed());
    }
}
