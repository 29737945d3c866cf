//! `runsc`: where it is, which version, whether it runs here, and the
//! commands cordon gives it.
//!
//! Every command names cordon's own state root ([`crate::STATE_ROOT`]),
//! the `ptrace` platform and `--network=none`. The platform is the one the
//! probe saw run a container: `kvm` needs `/dev/kvm` and can hang where
//! nested virtualisation is missing, so cordon does not try it in this
//! version. The probe runs once per process and its answer is kept; a
//! success is also recorded in the state root ([`PROBE_RECORD`]) for the
//! same binary (device, inode, size, modification time) and the same boot,
//! so the next process skips the trivial container. A failure is never
//! recorded (a fixed machine is seen at once), and a recorded success only
//! routes: a container that then fails to run is still refused.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cordon_confine::oci;

/// The platform cordon runs runsc on.
pub const PLATFORM: &str = "ptrace";

/// How long the probe's trivial container may take before the probe
/// gives up on it (and kills it).
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a control command (`kill`, `delete`, `list`) may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// runsc as this machine has it, proven to run a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runsc {
    pub bin: PathBuf,
    pub version: String,
    pub platform: &'static str,
    /// How long the probe's `/bin/true` container took, start to end.
    pub probe_millis: u128,
}

/// Why runsc cannot run here, and what was found.
pub use cordon_backend_kit::register::Unrunnable;

/// The runsc binary: `runsc` on `PATH`, else `/usr/bin/runsc`.
pub fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("runsc"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let p = PathBuf::from("/usr/bin/runsc");
        p.is_file().then_some(p)
    })
}

/// The probe's answer, computed once per process.
pub fn probe() -> &'static Result<Runsc, Unrunnable> {
    static PROBED: OnceLock<Result<Runsc, Unrunnable>> = OnceLock::new();
    PROBED.get_or_init(probe_now)
}

/// Where a successful probe is recorded, in the state root (root's, 0700).
pub const PROBE_RECORD: &str = "probe.json";

/// What a recorded probe is valid for: this binary as it is now, this boot.
fn probe_key(bin: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(bin).ok()?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(format!(
        "{}:{}:{}:{}:{}.{}:{}:{PLATFORM}",
        bin.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        boot.trim()
    ))
}

/// A success recorded by an earlier process for this very binary and boot.
fn recorded(bin: &Path, key: &str) -> Option<Runsc> {
    recorded_in(Path::new(crate::STATE_ROOT), bin, key)
}

fn recorded_in(root: &Path, bin: &Path, key: &str) -> Option<Runsc> {
    use std::os::unix::fs::MetadataExt as _;
    let path = root.join(PROBE_RECORD);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    // Only root's own regular file, writable by nobody else, is believed.
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    (v["key"].as_str() == Some(key)).then(|| Runsc {
        bin: bin.to_path_buf(),
        version: v["version"].as_str().unwrap_or_default().to_string(),
        platform: PLATFORM,
        probe_millis: v["probe_millis"].as_u64().map_or(0, u128::from),
    })
}

/// Records a success (best effort: a record that cannot be written only
/// costs the next process a probe).
fn record(key: &str, r: &Runsc) {
    if let Ok(root) = state_root() {
        record_in(root, key, r);
    }
}

fn record_in(root: &Path, key: &str, r: &Runsc) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = root.join(format!("{PROBE_RECORD}.{}", std::process::id()));
    let doc = serde_json::json!({
        "key": key,
        "version": r.version,
        "probe_millis": u64::try_from(r.probe_millis).unwrap_or(u64::MAX),
    });
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(doc.to_string().as_bytes()));
    if written.is_err() || std::fs::rename(&tmp, root.join(PROBE_RECORD)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn probe_now() -> Result<Runsc, Unrunnable> {
    let Some(bin) = binary() else {
        return Err(Unrunnable {
            reason: "`runsc` (gVisor) is not installed".into(),
            found: vec![
                "`runsc`: not found on PATH nor at `/usr/bin/runsc` (install it: `apt-get install runsc` on Debian 12)".into(),
            ],
        });
    };
    // Recorded by an earlier process for this binary and boot: no
    // `--version`, no trivial container (only root reads the record).
    let key = probe_key(&bin);
    if rustix::process::geteuid().is_root() {
        if let Some(r) = key.as_deref().and_then(|k| recorded(&bin, k)) {
            return Ok(r);
        }
    }
    let mut found = vec![format!("`runsc`: {}", bin.display())];
    let version = match output(Command::new(&bin).arg("--version"), CONTROL_TIMEOUT) {
        Ok((0, out, _)) => String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        Ok((code, _, err)) => {
            return Err(Unrunnable {
                reason: format!(
                    "`{} --version` exited {code}: {}",
                    bin.display(),
                    String::from_utf8_lossy(&err).trim()
                ),
                found,
            })
        }
        Err(e) => {
            return Err(Unrunnable {
                reason: format!("`{} --version`: {e}", bin.display()),
                found,
            })
        }
    };
    found.push(format!("version: {version}"));
    if !rustix::process::geteuid().is_root() {
        return Err(Unrunnable {
            reason:
                "cordon drives runsc as root only in this version (its rootless mode is not used)"
                    .into(),
            found: {
                found.push("this process: not root (run cordon as root)".into());
                found
            },
        });
    }
    let key = probe_key(&bin);
    let started = Instant::now();
    match trivial_container(&bin) {
        Ok(()) => {
            let probe_millis = started.elapsed().as_millis();
            let r = Runsc {
                bin,
                version,
                platform: PLATFORM,
                probe_millis,
            };
            if let Some(k) = &key {
                record(k, &r);
            }
            Ok(r)
        }
        Err(e) => {
            found.push(format!("platform `{PLATFORM}`: {e}"));
            Err(Unrunnable {
                reason: format!(
                    "runsc did not run a trivial container on the `{PLATFORM}` platform"
                ),
                found,
            })
        }
    }
}

/// Makes the state root: root's own, mode 0700.
pub fn state_root() -> Result<&'static Path, String> {
    let root = Path::new(crate::STATE_ROOT);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| format!("cannot create runsc's state root `{}`: {e}", root.display()))?;
    Ok(root)
}

/// Runs `/bin/true` in a container over the host's `/usr`, as a sandbox
/// would, and checks it exited 0.
fn trivial_container(bin: &Path) -> Result<(), String> {
    state_root()?;
    let dir = std::env::temp_dir().join(format!(
        "{}{}-{}-probe",
        crate::PREFIX,
        std::process::id(),
        cordon_backend_kit::NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("cordon-gvisor-probe")
        .to_string();
    let result = (|| {
        let rootfs = dir.join("rootfs");
        let layout = oci::HostImage::prepare(&rootfs)?;
        let config = oci::Bundle {
            root: &rootfs,
            argv: vec!["/bin/true".into()],
            env: Default::default(),
            cwd: "/".into(),
            uid: crate::WORKLOAD_ID,
            gid: crate::WORKLOAD_ID,
            mounts: layout.whole_image_read_only(),
            memory_bytes: None,
            processes: 64,
            cpu_seconds: 10,
            file_bytes: 1 << 20,
            cgroup: format!("/{id}"),
        }
        .config();
        let mut config = config;
        for_runsc(&mut config);
        std::fs::write(dir.join("config.json"), config.to_string())
            .map_err(|e| format!("cannot write the probe's bundle: {e}"))?;
        let mut cmd = command(bin, &dir.join("runsc.log"), Network::None);
        cmd.args(["run", "--bundle"]).arg(&dir).arg(&id);
        match output(&mut cmd, PROBE_TIMEOUT) {
            Ok((0, _, _)) => Ok(()),
            Ok((code, _, err)) => Err(format!(
                "`runsc run` exited {code}: {}",
                String::from_utf8_lossy(&err).trim()
            )),
            Err(e) => Err(e),
        }
    })();
    let _ = delete(bin, &id);
    remove_cgroups(&id);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What network a runsc sandbox has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// `--network=none`: gVisor's own stack with a loopback only.
    None,
    /// `--network=host` in the network namespace the bundle names
    /// (`linux.namespaces`), which cordon made holding only `lo` and the
    /// egress proxy's listener ([`join_netns`]). gVisor then passes the
    /// workload's socket calls to the host kernel (hostinet) in that
    /// namespace: the one way this runsc reaches a listener (its
    /// `--network=sandbox` misfires on this kernel), at the price of a
    /// wider kernel surface than its own stack.
    ProxyRoute,
}

/// `runsc` with cordon's global flags: its state root, the platform, the
/// network, the bundle's seccomp filter loaded inside the sandbox
/// (`--oci-seccomp`; a runsc without the flag refuses to run), and its own
/// log (runsc's errors are also on its stderr).
pub fn command(bin: &Path, log: &Path, net: Network) -> Command {
    let mut c = Command::new(bin);
    c.arg("--root")
        .arg(crate::STATE_ROOT)
        .arg(format!("--platform={PLATFORM}"))
        .arg(match net {
            Network::None => "--network=none",
            Network::ProxyRoute => "--network=host",
        })
        .arg("--oci-seccomp")
        .arg("--log")
        .arg(log)
        .arg("--log-format=json");
    c
}

/// The syscall table as this runsc can hold it: the table's `clone3` rule
/// dropped. runsc answers every `SCMP_ACT_ERRNO` rule with `EPERM`
/// whatever its `errnoRet` (checked: Debian's `0.0~20221219`), and the C
/// library falls back from `clone3` to `clone` (whose flags the table
/// reads) only on `ENOSYS` — so with the rule no thread could start, and
/// without it the sentry answers `clone3` with `ENOSYS` itself, as the
/// table means to. The escape kit's `clone3` case holds it either way: a
/// runsc that implements `clone3` (and so could be asked for namespaces
/// through it) fails that case, and with it the backend's suite.
pub fn for_runsc(config: &mut serde_json::Value) {
    if let Some(rules) = config["linux"]["seccomp"]["syscalls"].as_array_mut() {
        rules.retain(|r| {
            !r["names"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n == "clone3"))
        });
    }
}

/// Makes a bundle's `config.json` run in the network namespace `path`
/// (`/proc/PID/fd/N` of the process holding it open), with the syscall
/// table narrowed for it. The workload's sockets are then the host
/// kernel's, so `listen` is refused (`EPERM`) unless the sandbox was made
/// to serve ports (`listen`): the namespace is the proxy's (or loopback
/// only), and what listens in it is reached only through cordon's
/// forward.
///
/// This runsc reads the conditions a rule puts on one argument as "any
/// of" (as runc does), so the table's "none of these families" rule for
/// `socket` denies every family there (which is why a sandbox without a
/// route makes no socket at all). With a route the workload needs inet
/// sockets to reach the proxy: the table goes in the form that states
/// each such rule as its complement (the one written for Docker's
/// profile, which has the same reading), never wider than the table.
pub fn join_netns(config: &mut serde_json::Value, path: &str, listen: bool) -> Result<(), String> {
    let narrowed = oci::docker_seccomp_profile(match listen {
        true => oci::DockerNet::Listening,
        false => oci::DockerNet::ProxyRoute,
    })?;
    config["linux"]["seccomp"] = serde_json::from_str(&narrowed)
        .map_err(|e| format!("the syscall table for the egress route: {e}"))?;
    name_netns(config, path)?;
    for_runsc(config);
    Ok(())
}

/// Makes a bundle's `config.json` run in the network namespace `path`,
/// its syscall table untouched (a pod's, whose execs hold their own).
pub fn name_netns(config: &mut serde_json::Value, path: &str) -> Result<(), String> {
    let Some(all) = config["linux"]["namespaces"].as_array_mut() else {
        return Err("the bundle names no namespaces".into());
    };
    all.retain(|n| n["type"] != "network");
    all.push(serde_json::json!({"type": "network", "path": path}));
    Ok(())
}

fn control(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("--root").arg(crate::STATE_ROOT);
    c
}

/// Kills every process of container `id` (it may already be gone).
pub fn kill(bin: &Path, id: &str) {
    let _ = output(
        control(bin).args(["kill", "--all", id, "KILL"]),
        CONTROL_TIMEOUT,
    );
}

/// Kills process `pid` (as the sandbox numbers it) of container `id`;
/// whether runsc said it did.
pub fn kill_pid(bin: &Path, id: &str, pid: u32) -> bool {
    matches!(
        output(
            control(bin).args(["kill", "--pid", &pid.to_string(), id, "KILL"]),
            CONTROL_TIMEOUT,
        ),
        Ok((0, _, _))
    )
}

/// Deletes container `id`, killing it first; `Ok` when it is gone.
pub fn delete(bin: &Path, id: &str) -> Result<(), String> {
    match output(
        control(bin).args(["delete", "--force", id]),
        CONTROL_TIMEOUT,
    ) {
        Ok((0, _, _)) => Ok(()),
        Ok((_, _, err)) => {
            let err = String::from_utf8_lossy(&err);
            if list(bin)?.iter().any(|c| c == id) {
                Err(format!("`runsc delete {id}`: {}", err.trim()))
            } else {
                Ok(())
            }
        }
        Err(e) => Err(e),
    }
}

/// Pauses (`runsc pause`: the whole runsc sandbox stops) or resumes
/// container `id`. One already so, stopped, or gone is no failure: what
/// `runsc state` (and `runsc list`) say then decides; nothing else is
/// taken for done.
pub fn pause(bin: &Path, id: &str, paused: bool) -> Result<(), String> {
    let verb = if paused { "pause" } else { "resume" };
    let err = match output(control(bin).args([verb, id]), CONTROL_TIMEOUT) {
        Ok((0, _, _)) => return Ok(()),
        Ok((_, _, err)) => String::from_utf8_lossy(&err).trim().to_string(),
        Err(e) => e,
    };
    let status = match output(control(bin).args(["state", id]), CONTROL_TIMEOUT) {
        Ok((0, out, _)) => serde_json::from_slice::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["status"].as_str().map(String::from)),
        _ => None,
    };
    // A state runsc does not report is not taken for done: a pause that
    // may not have happened is refused, never claimed.
    match (paused, status.as_deref()) {
        (_, Some("stopped")) | (true, Some("paused")) | (false, Some("running")) => Ok(()),
        (_, Some(other)) => Err(format!("`runsc {verb} {id}`: {err} (its state: {other})")),
        // Gone meanwhile (an exec's container removed as it ended).
        (_, None) if list(bin).is_ok_and(|all| !all.iter().any(|c| c == id)) => Ok(()),
        (_, None) => Err(format!(
            "`runsc {verb} {id}`: {err} (and `runsc state` did not say where it stands)"
        )),
    }
}

/// Saves container `id`'s processes and memory into `image` (a directory
/// of root's), which ends them (`runsc checkpoint`; this runsc's
/// `--leave-running` cannot be trusted: it timed out and killed the
/// container when tried). Only a container that is a runsc sandbox's one
/// container restores: this runsc cannot restore a sandbox of several.
pub fn checkpoint(bin: &Path, id: &str, image: &Path) -> Result<(), String> {
    let mut cmd = control(bin);
    cmd.args(["checkpoint", "--image-path"]).arg(image).arg(id);
    match output(&mut cmd, CHECKPOINT_TIMEOUT) {
        Ok((0, _, _)) => Ok(()),
        Ok((code, _, err)) => Err(format!(
            "`runsc checkpoint {id}` exited {code}: {}",
            without_argv(String::from_utf8_lossy(&err).trim())
        )),
        Err(e) => Err(e),
    }
}

/// How long one `runsc checkpoint` may take (it writes the whole of the
/// container's memory).
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(120);

/// What `runsc state` says of container `id` (`created`, `running`,
/// `paused`, `stopped`); `None` when it does not say (gone).
pub fn status(bin: &Path, id: &str) -> Option<String> {
    match output(control(bin).args(["state", id]), CONTROL_TIMEOUT) {
        Ok((0, out, _)) => serde_json::from_slice::<serde_json::Value>(&out)
            .ok()?
            .get("status")?
            .as_str()
            .map(String::from),
        _ => None,
    }
}

/// The containers under cordon's state root.
pub fn list(bin: &Path) -> Result<Vec<String>, String> {
    if !Path::new(crate::STATE_ROOT).exists() {
        return Ok(Vec::new());
    }
    match output(control(bin).args(["list", "--quiet"]), CONTROL_TIMEOUT) {
        Ok((0, out, _)) => Ok(String::from_utf8_lossy(&out)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()),
        Ok((code, _, err)) => Err(format!(
            "`runsc list` exited {code}: {}",
            String::from_utf8_lossy(&err).trim()
        )),
        Err(e) => Err(e),
    }
}

/// The containers under cordon's state root with their annotations
/// (`runsc list --format=json`).
pub fn list_json(bin: &Path) -> Result<Vec<Listed>, String> {
    if !Path::new(crate::STATE_ROOT).exists() {
        return Ok(Vec::new());
    }
    match output(
        control(bin).args(["list", "--format=json"]),
        CONTROL_TIMEOUT,
    ) {
        Ok((0, out, _)) => {
            let v: serde_json::Value = serde_json::from_slice(&out)
                .map_err(|e| format!("`runsc list --format=json` is not JSON: {e}"))?;
            Ok(v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let id = c["id"].as_str()?.to_string();
                    let annotations = c["annotations"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(Listed { id, annotations })
                })
                .collect())
        }
        Ok((code, _, err)) => Err(format!(
            "`runsc list` exited {code}: {}",
            String::from_utf8_lossy(&err).trim()
        )),
        Err(e) => Err(e),
    }
}

/// The host pid `runsc state` reports for container `id` (its sandbox's
/// process), when it reports one.
pub fn state_pid(bin: &Path, id: &str) -> Option<i32> {
    match output(control(bin).args(["state", id]), CONTROL_TIMEOUT) {
        Ok((0, out, _)) => serde_json::from_slice::<serde_json::Value>(&out)
            .ok()?
            .get("pid")?
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 0),
        _ => None,
    }
}

/// The cgroup directories of container `id` (runsc makes them at the
/// config's `cgroupsPath`, `/ID`, in every hierarchy).
pub fn cgroups_of(id: &str) -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    let mut out = Vec::new();
    if base.join(id).is_dir() {
        out.push(base.join(id));
    }
    if let Ok(entries) = std::fs::read_dir(base) {
        for e in entries.flatten() {
            let d = e.path().join(id);
            if d.is_dir() {
                out.push(d);
            }
        }
    }
    out
}

/// Removes what runsc and cordon left of container `id`'s cgroups (a
/// start that failed leaves them; cordon's own memory parent outlives the
/// container by design, see [`crate::cgroup`]): the leaf runsc made under
/// cordon's parent first, then the directory itself. Only empty ones go:
/// `rmdir` refuses the others.
pub fn remove_cgroups(id: &str) {
    for d in cgroups_of(id) {
        let _ = std::fs::remove_dir(d.join(crate::cgroup::LEAF));
        let _ = std::fs::remove_dir(&d);
    }
}

/// Every cgroup directory named like a container of this backend, in
/// every hierarchy (for the sweep of dead owners').
pub fn all_cgroup_names() -> Vec<String> {
    let mut names = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else {
        return names;
    };
    for h in entries.flatten() {
        let p = h.path();
        let in_dir = |d: &Path| -> Vec<String> {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .filter(|n| crate::DIRS.maker_of(n).is_some())
                .collect()
        };
        if crate::DIRS
            .maker_of(&h.file_name().to_string_lossy())
            .is_some()
        {
            names.push(h.file_name().to_string_lossy().into_owned());
        } else {
            names.extend(in_dir(&p));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// CPU time container `id`'s cgroup used, in nanoseconds, when it can be
/// read (cgroup v1's `cpuacct.usage`, or v2's `cpu.stat`).
pub fn cpu_nanos(id: &str) -> Option<u64> {
    let v1 = Path::new("/sys/fs/cgroup/cpuacct")
        .join(id)
        .join("cpuacct.usage");
    if let Ok(s) = std::fs::read_to_string(v1) {
        return s.trim().parse().ok();
    }
    for v2 in [
        Path::new("/sys/fs/cgroup").join(id).join("cpu.stat"),
        Path::new("/sys/fs/cgroup/unified")
            .join(id)
            .join("cpu.stat"),
    ] {
        if let Ok(s) = std::fs::read_to_string(v2) {
            return s
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|us| us * 1000);
        }
    }
    None
}

/// Runs `cmd` to its end (at most `timeout`; then it is killed), with no
/// stdin: (exit code, stdout, stderr).
pub fn output(cmd: &mut Command, timeout: Duration) -> Result<(i32, Vec<u8>, Vec<u8>), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start `{}`: {e}",
                cmd.get_program().to_string_lossy()
            )
        })?;
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = read(child.stdout.take().map(|r| Box::new(r) as _));
    let err = read(child.stderr.take().map(|r| Box::new(r) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{}` did not finish in {}s and was killed",
                    cmd.get_program().to_string_lossy(),
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for runsc: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    Ok((status.code().unwrap_or(-1), out, err))
}

/// A pause container in runsc's listing, with cordon's annotations.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    pub annotations: BTreeMap<String, String>,
}

/// runsc's own error, from its JSON log, if it logged one.
pub(crate) fn runsc_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        (v["level"] == "error" || v["level"] == "fatal")
            .then(|| without_argv(v["msg"].as_str().unwrap_or("")))
    })
}

/// runsc's message without the workload's argv, which it quotes when a
/// sub-container does not start (`starting sub-container [ARGV]: …`): the
/// workload's words are never reported as cordon's.
fn without_argv(msg: &str) -> String {
    const AT: &str = "starting sub-container [";
    match msg.find(AT) {
        Some(i) => {
            let rest = &msg[i + AT.len()..];
            match rest.find("]: ") {
                Some(j) => format!("{}starting sub-container: {}", &msg[..i], &rest[j + 3..]),
                None => format!("{}starting sub-container", &msg[..i]),
            }
        }
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod probe_record_tests {
    use super::*;

    fn runsc() -> Runsc {
        Runsc {
            bin: PathBuf::from("/usr/bin/runsc"),
            version: "runsc version test".into(),
            platform: PLATFORM,
            probe_millis: 180,
        }
    }

    #[test]
    fn a_record_is_believed_only_for_its_key_and_only_as_root_s_private_file() {
        if !rustix::process::geteuid().is_root() {
            cordon_testkit::skip(
                "probe record test",
                "the record is believed only when owned by root",
            );
            return;
        }
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = Path::new("/usr/bin/runsc");
        assert_eq!(recorded_in(dir.path(), bin, "k1"), None, "no record yet");
        record_in(dir.path(), "k1", &runsc());
        assert_eq!(recorded_in(dir.path(), bin, "k1"), Some(runsc()));
        // Another binary, or another boot: another key, not believed.
        assert_eq!(recorded_in(dir.path(), bin, "k2"), None);
        // Writable by the group: not believed.
        let path = dir.path().join(PROBE_RECORD);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded_in(dir.path(), bin, "k1"), None);
        // A link in its place: not followed.
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let elsewhere = dir.path().join("elsewhere");
        record_in(&elsewhere_dir(&elsewhere), "k1", &runsc());
        std::os::unix::fs::symlink(elsewhere.join(PROBE_RECORD), &path)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded_in(dir.path(), bin, "k1"), None);
    }

    fn elsewhere_dir(p: &Path) -> PathBuf {
        std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{e}"));
        p.to_path_buf()
    }

    #[test]
    fn the_key_names_the_binary_as_it_is_and_the_boot() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = dir.path().join("runsc");
        std::fs::write(&bin, b"one").unwrap_or_else(|e| panic!("{e}"));
        let first = probe_key(&bin).unwrap_or_else(|| panic!("a key"));
        assert!(first.contains(PLATFORM));
        std::fs::write(&bin, b"another binary").unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(
            probe_key(&bin),
            Some(first),
            "a replaced binary has another key"
        );
    }
}

#[cfg(test)]
mod route_tests {
    use super::*;

    fn bundle() -> serde_json::Value {
        oci::Bundle {
            root: Path::new("/r"),
            argv: vec!["/bin/true".into()],
            env: Default::default(),
            cwd: "/".into(),
            uid: 1,
            gid: 1,
            mounts: Vec::new(),
            memory_bytes: None,
            processes: 1,
            cpu_seconds: 1,
            file_bytes: 1,
            cgroup: "/x".into(),
        }
        .config()
    }

    #[test]
    fn a_route_names_its_namespace_once_refuses_listen_and_states_each_socket_rule_alone() {
        let mut c = bundle();
        join_netns(&mut c, "/proc/1/fd/5", false).unwrap();
        let ns = c["linux"]["namespaces"].as_array().unwrap();
        let net: Vec<_> = ns.iter().filter(|n| n["type"] == "network").collect();
        assert_eq!(net.len(), 1);
        assert_eq!(net[0]["path"], "/proc/1/fd/5");
        // The others stay.
        for kind in ["pid", "ipc", "uts", "mount"] {
            assert!(ns.iter().any(|n| n["type"] == kind), "{kind}");
        }
        let rules = c["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        assert!(rules.iter().any(|r| r["names"][0] == "listen"
            && r["action"] == "SCMP_ACT_ERRNO"
            && r["args"].is_null()));
        // This runsc reads several conditions on one argument as "any of":
        // no rule may carry more than one.
        for r in rules {
            assert!(r["args"].as_array().map_or(0, Vec::len) <= 1, "{r}");
        }
        // Without a route, the table is the plain one (no `listen` rule).
        let plain = bundle();
        assert!(!plain["linux"]["seccomp"]["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["names"][0] == "listen"));
        // A sandbox made to serve ports joins its namespace the same way,
        // and listens there.
        let mut ports = bundle();
        join_netns(&mut ports, "/proc/1/fd/5", true).unwrap();
        let rules = ports["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        assert!(!rules.iter().any(|r| r["names"][0] == "listen"));
        assert!(rules.iter().any(|r| r["names"][0] == "socket"));
    }
}

#[cfg(test)]
mod argv_tests {
    use super::without_argv;

    #[test]
    fn runsc_errors_never_carry_the_workloads_argv() {
        assert_eq!(
            without_argv("running container: starting container: starting sub-container [/usr/bin/perl -e print qq(X)]: creating process: failed to load /usr/bin/perl: permission denied"),
            "running container: starting container: starting sub-container: creating process: failed to load /usr/bin/perl: permission denied"
        );
        assert_eq!(without_argv("plain"), "plain");
    }
}
