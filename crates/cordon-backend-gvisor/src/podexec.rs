//! A warm exec as one `runsc exec` into the sandbox's pod, through
//! cordon's helper (`cordon_backend_kit::podexec`, linked statically and placed in the
//! sandbox's root at [`PATH`]).
//!
//! `runsc exec` alone would put every exec in the pod's one pid namespace,
//! where exec B lists, signals and reads `/proc` of exec A. The helper,
//! started by runsc as the sentry's root (never the host's: every
//! capability it holds is gVisor's) with the four capabilities it needs,
//! makes the exec a pid and mount namespace of its own with its own
//! `/proc` (the bundle's masks applied), and starts the command as the
//! workload's uid with every capability gone, the bundle's rlimits,
//! `no_new_privs` and the syscall table compiled here into one seccomp
//! program ([`cordon_linux::seccomp_engine_program`]). When the command
//! ends, the namespace's PID 1 (the helper's child) exits and the sentry
//! kills what is left in it; when the helper is killed (the wall clock,
//! a cancel), its PID 1 follows (`PR_SET_PDEATHSIG`). A failure of the
//! helper before the command starts refuses it: exit 125 and a message,
//! the command never run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub(crate) use cordon_backend_kit::podexec::{filter_hex, pause_argv, Limits, Net, HELPER, PATH};

/// The capabilities the helper starts with (inside the sentry): new
/// namespaces and the `/proc` mount, the change of user, emptying the
/// bounding set before it, and the command's rlimits (above the pod's own).
const CAPS: &[&str] = &[
    "CAP_SYS_ADMIN",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SYS_RESOURCE",
];

/// Puts the helper in `rootfs` (root's, mode 0555: the root is read-only
/// to runsc anyway).
pub(crate) fn install(rootfs: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    cordon_confine::oci::mkdir_in(rootfs, Path::new("/.cordon"))?;
    let path = cordon_confine::oci::under(rootfs, Path::new(PATH));
    std::fs::write(&path, HELPER)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)))
        .map_err(|e| format!("cannot write the exec helper `{}`: {e}", path.display()))
}

/// The OCI process `runsc exec --process` starts: the helper, as the
/// sentry's root with [`CAPS`], told the command, its bounds and its
/// seccomp program; the command's own environment beside.
pub(crate) fn process(
    argv: Vec<String>,
    env: &BTreeMap<String, String>,
    cwd: &str,
    limits: &Limits,
    filter_hex: &str,
) -> Value {
    let masked: Vec<&str> = cordon_confine::oci::MASKED_PROC
        .iter()
        .filter(|p| p.starts_with("/proc/"))
        .copied()
        .collect();
    // gVisor's procfs answers EINVAL to a read-only remount: nothing is
    // made read-only inside (see docs/design.md).
    let told = cordon_backend_kit::podexec::Told {
        filter_hex,
        masked: &masked,
        read_only: &[],
        // The pod's network namespace is every exec's: this runsc's
        // netstack answers EINVAL to an abstract unix socket's bind in a
        // namespace made inside the sandbox (checked), which would break
        // programs that use them (see docs/security.md).
        own_net: false,
    };
    let args = cordon_backend_kit::podexec::argv(argv, limits);
    let env = cordon_backend_kit::podexec::env(env, &told);
    json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0, "additionalGids": []},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": {
            "bounding": CAPS, "effective": CAPS, "permitted": CAPS,
            "inheritable": [], "ambient": []
        },
        "noNewPrivileges": true
    })
}

/// How long a kill waits for runsc to say the helper's pid.
pub(crate) const PID_PATIENCE: Duration = Duration::from_secs(10);

/// The file `runsc exec` writes the helper's pid (in the pod) to.
pub(crate) fn pid_file(exec_dir: &Path) -> PathBuf {
    exec_dir.join("pid")
}

/// Kills the helper of an exec in `pod` (and so the exec's whole
/// namespace), once runsc has said its pid; waits for the pid at most
/// `patience` while `running()` holds. Whether it was killed.
pub(crate) fn kill(
    bin: &Path,
    pod: &str,
    pid_file: &Path,
    patience: Duration,
    running: &mut dyn FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        let pid = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if let Some(pid) = pid {
            return crate::runsc::kill_pid(bin, pod, pid);
        }
        if !running() || Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_is_told_the_command_after_its_bounds_and_never_runs_as_root() {
        let limits = Limits {
            uid: 1999999998,
            processes: 64,
            cpu_seconds: 30,
            file_bytes: 1 << 20,
        };
        let env = BTreeMap::from([
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("CORDON_PODEXEC_FILTER".to_string(), "00".to_string()),
        ]);
        let p = process(vec!["/bin/true".into()], &env, "/work", &limits, "abcd");
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        // The argv and environment are the kit's (tested there); here,
        // that the process carries them.
        assert_eq!(
            strings(&p["args"]),
            cordon_backend_kit::podexec::argv(vec!["/bin/true".into()], &limits)
        );
        let env = strings(&p["env"]);
        // The caller's own `CORDON_PODEXEC_FILTER` never reaches the helper.
        assert_eq!(
            env.iter()
                .filter(|e| e.starts_with("CORDON_PODEXEC_FILTER="))
                .collect::<Vec<_>>(),
            ["CORDON_PODEXEC_FILTER=abcd"]
        );
        assert!(env.iter().any(|e| e == "PATH=/usr/bin"));
        assert_eq!(p["capabilities"]["ambient"], json!([]));
    }
}
