//! The warm exec's helper (`podexec.c`, linked statically), shared by the
//! engines that keep one warm container per sandbox and start every exec
//! after the first inside it: gVisor (`runsc exec` of the helper as the
//! sentry's root) and Docker (`docker exec` of it as the workload's own
//! uid, which then makes a user namespace of its own).
//!
//! An engine's own exec into one container would put every exec in one
//! pid namespace, where exec B lists, signals and reads `/proc` of exec A,
//! and what an exec leaves running would outlive it. The helper makes each
//! exec a pid, mount and IPC namespace of its own (a network namespace
//! too where the sandbox has no shared one) with its own `/proc` (the
//! engine's masks applied), and starts the command with every capability
//! gone, the exec's rlimits, `no_new_privs` and the syscall table compiled
//! here into one seccomp program ([`cordon_linux::seccomp_engine_program`]).
//! When the command ends, the namespace's PID 1 (the helper's child)
//! exits and the kernel kills what is left in it; when the helper is
//! killed (the wall clock, a cancel), its PID 1 follows
//! (`PR_SET_PDEATHSIG`). A failure of the helper before the command starts
//! refuses it: exit [`REFUSED`] and a message, the command never run.

/// The helper, built with this crate.
pub const HELPER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/podexec"));

/// Where the helper is in a sandbox's root.
pub const PATH: &str = "/.cordon/podexec";

/// The helper's exit status when it refused before the command.
pub const REFUSED: i32 = 125;

/// The pod's first process: the helper reaping orphans, forever.
pub fn pause_argv() -> Vec<String> {
    vec![PATH.into(), "pause".into()]
}

/// What a pod's first exec runs (through the helper) to learn that the
/// helper works there: it exits 0 once confined.
pub fn probe_argv() -> Vec<String> {
    vec![PATH.into(), "probe".into()]
}

/// What the syscall table must add for the sandbox's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// No route out (loopback only): unix sockets only, as at Docker
    /// without a route (nothing listens on a port).
    Own,
    /// The egress proxy's namespace: no `listen`.
    ProxyRoute,
    /// Made with `requires: [ports]`: the container rung's table.
    Listening,
}

/// The seccomp program for `net`, as the helper reads it (hex).
pub fn filter_hex(net: Net) -> Result<String, String> {
    let bytes = cordon_linux::seccomp_engine_program(net == Net::Own, net == Net::ProxyRoute)
        .map_err(|e| e.to_string())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// One exec's bounds, as the helper sets them on the command.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub uid: u32,
    pub processes: u64,
    pub cpu_seconds: u64,
    pub file_bytes: u64,
}

/// The helper's argv for `argv` under `limits`.
pub fn argv(argv: Vec<String>, limits: &Limits) -> Vec<String> {
    let mut args: Vec<String> = vec![
        PATH.into(),
        "exec".into(),
        limits.uid.to_string(),
        limits.uid.to_string(),
        limits.processes.to_string(),
        limits.cpu_seconds.to_string(),
        limits.file_bytes.to_string(),
        cordon_confine::oci::NOFILE.to_string(),
        "--".into(),
    ];
    args.extend(argv);
    args
}

/// What the helper is told beside the command's own environment.
#[derive(Debug, Clone, Copy)]
pub struct Told<'a> {
    /// The seccomp program ([`filter_hex`]).
    pub filter_hex: &'a str,
    /// What its `/proc` (and `/sys`) masks.
    pub masked: &'a [&'a str],
    /// What its `/proc` holds read-only.
    pub read_only: &'a [&'a str],
    /// A network namespace of the exec's own (the sandbox shares none).
    pub own_net: bool,
}

/// The helper's environment (`K=V`): the command's (none of it may speak
/// for cordon: a caller's `CORDON_PODEXEC_*` is dropped) and what it is
/// told.
pub fn env(env: &std::collections::BTreeMap<String, String>, told: &Told<'_>) -> Vec<String> {
    let mut out: Vec<String> = env
        .iter()
        .filter(|(k, _)| !k.starts_with("CORDON_PODEXEC_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.push(format!("CORDON_PODEXEC_FILTER={}", told.filter_hex));
    out.push(format!("CORDON_PODEXEC_MASK={}", told.masked.join(":")));
    if !told.read_only.is_empty() {
        out.push(format!(
            "CORDON_PODEXEC_READONLY={}",
            told.read_only.join(":")
        ));
    }
    if told.own_net {
        out.push("CORDON_PODEXEC_OWN_NET=1".into());
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::process::CommandExt as _;

    const UID: u32 = 1_999_999_997;

    #[test]
    fn the_helper_is_told_the_command_after_its_bounds_and_cordons_env_is_its_own() {
        let limits = Limits {
            uid: 1999999998,
            processes: 64,
            cpu_seconds: 30,
            file_bytes: 1 << 20,
        };
        assert_eq!(
            argv(vec!["/bin/true".into()], &limits),
            [
                PATH,
                "exec",
                "1999999998",
                "1999999998",
                "64",
                "30",
                "1048576",
                "1024",
                "--",
                "/bin/true"
            ]
        );
        let given = BTreeMap::from([
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("CORDON_PODEXEC_FILTER".to_string(), "00".to_string()),
            ("CORDON_PODEXEC_OWN_NET".to_string(), "1".to_string()),
        ]);
        let told = Told {
            filter_hex: "abcd",
            masked: &["/proc/kcore", "/sys/firmware"],
            read_only: &[],
            own_net: false,
        };
        let e = env(&given, &told);
        assert_eq!(
            e,
            [
                "PATH=/usr/bin",
                "CORDON_PODEXEC_FILTER=abcd",
                "CORDON_PODEXEC_MASK=/proc/kcore:/sys/firmware"
            ]
        );
    }

    fn helper(dir: &std::path::Path) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("podexec");
        std::fs::write(&path, HELPER).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// The helper's refusals come before anything is made: run here on the
    /// host (root or not), each ends with 125 and says why, and the
    /// command never runs.
    #[test]
    fn the_helper_refuses_without_a_whole_program_or_as_root() {
        let dir = tempfile::tempdir().unwrap();
        let helper = helper(dir.path());
        let marker = dir.path().join("ran");
        let touch = format!("touch {}", marker.display());
        let run = |uid: &str, filter: Option<&str>| {
            let mut c = std::process::Command::new(&helper);
            c.args([
                "exec", uid, uid, "64", "10", "1024", "1024", "--", "/bin/sh", "-c", &touch,
            ])
            .env_remove("CORDON_PODEXEC_FILTER");
            if let Some(f) = filter {
                c.env("CORDON_PODEXEC_FILTER", f);
            }
            let out = c.output().unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let cases = [
            ("1999999998", None, "no seccomp program"),
            ("1999999998", Some("0600"), "malformed"),
            ("1999999998", Some("zz00000000000000"), "malformed"),
            ("0", Some("0600000000007fff"), "must not run as root"),
        ];
        for (uid, filter, says) in cases {
            let (code, err) = run(uid, filter);
            assert_eq!(code, Some(REFUSED), "{uid} {filter:?}: {err}");
            assert!(err.contains(says), "{uid} {filter:?}: {err}");
            assert!(!marker.exists(), "the command ran: {uid} {filter:?}");
        }
    }

    #[test]
    fn the_program_is_whole_instructions_and_narrower_with_a_route() {
        let own = filter_hex(Net::Own).unwrap_or_default();
        let route = filter_hex(Net::ProxyRoute).unwrap_or_default();
        assert!(
            !own.is_empty() && own.len().is_multiple_of(16),
            "{}",
            own.len()
        );
        let ports = filter_hex(Net::Listening).unwrap_or_default();
        assert!(
            route.len() > ports.len(),
            "the route's program adds `listen`"
        );
        assert!(own.len() > ports.len(), "no route: unix sockets only");
    }

    /// The way in Docker takes, run on this host: the helper started as
    /// the workload's uid with no capability makes a user namespace of its
    /// own and in it the exec's namespaces. The command is PID 2 and sees
    /// only its own namespace's processes, holds no capability, runs
    /// under the table, cannot write what is read-only or reach the
    /// host's network, and what it leaves running dies with it.
    #[test]
    fn as_the_workloads_uid_the_exec_is_namespaces_of_its_own_and_nothing_outlives_it() {
        if !rustix::process::geteuid().is_root() {
            eprintln!(
                "!!!!!!!! SKIPPED helper as the workload: changing to its uid needs root !!!!!!!!"
            );
            assert!(std::env::var("CI").is_err(), "CI runs as root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let helper = helper(dir.path());
        let filter = filter_hex(Net::Own).unwrap();
        let told = Told {
            filter_hex: &filter,
            masked: &["/sys/firmware"],
            read_only: &["/proc/sys"],
            own_net: true,
        };
        let limits = Limits {
            uid: UID,
            processes: 16,
            cpu_seconds: 10,
            file_bytes: 1 << 20,
        };
        // The marker only the background child would write, 2 s on.
        let left = dir.path().join("left");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let script = format!(
            "echo $$; ls /proc | grep -c '^[0-9]'; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; \
             (echo 1 > /proc/sys/kernel/hostname) 2>/dev/null && echo wrote-proc-sys; \
             grep -c . /proc/net/dev; \
             (setsid sh -c 'sleep 2; touch {0}' &); (sleep 2; touch {0}) &",
            left.display()
        );
        let env: BTreeMap<String, String> =
            BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let out = std::process::Command::new(&helper)
            .args(&argv(vec!["/bin/sh".into(), "-c".into(), script], &limits)[1..])
            .env_clear()
            .envs(
                super::env(&env, &told)
                    .iter()
                    .filter_map(|kv| kv.split_once('=')),
            )
            .uid(UID)
            .gid(UID)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], "2", "the command is PID 1's child: {stdout}");
        let seen: u32 = lines[1].parse().unwrap();
        assert!(seen <= 4, "the exec sees {seen} processes: {stdout}");
        for want in [
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
        ] {
            assert!(stdout.contains(want), "{want}: {stdout}");
        }
        assert!(!stdout.contains("wrote-proc-sys"), "{stdout}");
        // Its own network namespace: a loopback only (two header lines).
        assert_eq!(lines.last().copied(), Some("3"), "{stdout}");
        std::thread::sleep(std::time::Duration::from_secs(3));
        assert!(!left.exists(), "a process of the exec outlived it");
    }
}
