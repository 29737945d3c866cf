//! OCI-shaped confinement, for engines that take it (runsc's bundle,
//! Docker's container): a root directory cordon prepares
//! ([`HostImage`]) and a `config.json` ([`Bundle::config`]).
//!
//! The root is read-only and nearly empty: mount points for the `host`
//! image's system directories, the host's top-level links among them
//! (`/bin` → `usr/bin` on a merged-`/usr` system), and cordon's own `/etc`
//! (the files the container rung synthesizes: `passwd`, `group`,
//! `hostname`, `hosts`; nothing of the host's `/etc`). What of the image
//! is bound, with which rights, comes from the policy's translated plan
//! (see `sandbox.rs`); the work dir and `/tmp` are bound read-write,
//! `noexec`, from the sandbox's volume.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The `host` image's system directories (as the container rung's), less
/// `/etc`, which is cordon's own here.
pub const HOST_IMAGE: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin"];

/// Files of `/etc` that are cordon's own (see [`HostImage::write_etc`])
/// or never shown (the container rung's image masks), whatever the plan
/// grants.
pub const ETC_KEPT: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// The sandbox's host name, as at the container rung.
pub const HOSTNAME: &str = "cordon";

/// `/proc` paths hidden from the workload (runc's default list; gVisor's
/// `/proc` is its own, and these are masked all the same).
pub const MASKED_PROC: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];

/// One mount of the bundle, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub destination: PathBuf,
    pub source: PathBuf,
    pub kind: MountKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// A bind, read-only; `exec`: programs beneath may run.
    ReadOnly { exec: bool },
    /// A bind, read-write; `exec`: programs beneath may run (never the
    /// work dir or `/tmp`).
    ReadWrite { exec: bool },
}

/// The root directory of a sandbox's bundle and which image directories
/// are real directories on this host (the others are links, recreated).
#[derive(Debug, Clone)]
pub struct HostImage {
    pub rootfs: PathBuf,
    /// The image's directories that are directories here (bind sources).
    pub dirs: Vec<PathBuf>,
}

fn mkdir(p: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(|e| format!("cannot create `{}`: {e}", p.display()))
}

/// Makes the directory `p` (absolute) inside `root`, with its parents.
pub fn mkdir_in(root: &Path, p: &Path) -> Result<(), String> {
    mkdir(&under(root, p))
}

/// `p` inside `root` (`p` absolute).
pub fn under(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

impl HostImage {
    /// Makes `rootfs`: mount points, the host's links, an empty `/etc`.
    pub fn prepare(rootfs: &Path) -> Result<HostImage, String> {
        mkdir(rootfs)?;
        let mut dirs = Vec::new();
        for d in HOST_IMAGE {
            let host = Path::new(d);
            match std::fs::symlink_metadata(host) {
                Ok(m) if m.file_type().is_symlink() => {
                    let to = std::fs::read_link(host)
                        .map_err(|e| format!("cannot read the link `{d}`: {e}"))?;
                    std::os::unix::fs::symlink(&to, under(rootfs, host))
                        .map_err(|e| format!("cannot link `{d}` in the root: {e}"))?;
                }
                Ok(m) if m.is_dir() => {
                    mkdir(&under(rootfs, host))?;
                    dirs.push(host.to_path_buf());
                }
                _ => {}
            }
        }
        for d in ["/etc", "/proc", "/dev", "/tmp"] {
            mkdir(&under(rootfs, Path::new(d)))?;
        }
        Ok(HostImage {
            rootfs: rootfs.to_path_buf(),
            dirs,
        })
    }

    /// Writes cordon's own `/etc` files for a workload of `uid`/`gid` whose
    /// home is `home`.
    pub fn write_etc(&self, uid: u32, gid: u32, home: &str) -> Result<(), String> {
        let etc = self.rootfs.join("etc");
        let files = [
            (
                "passwd",
                format!(
                    "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                     {HOSTNAME}:x:{uid}:{gid}:cordon sandbox:{home}:/bin/sh\n\
                     nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                ),
            ),
            (
                "group",
                format!("root:x:0:\n{HOSTNAME}:x:{gid}:\nnogroup:x:65534:\n"),
            ),
            ("hostname", format!("{HOSTNAME}\n")),
            (
                "hosts",
                format!(
                    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{HOSTNAME}\n"
                ),
            ),
        ];
        for (name, text) in files {
            std::fs::write(etc.join(name), text)
                .map_err(|e| format!("cannot write `/etc/{name}` of the root: {e}"))?;
        }
        Ok(())
    }

    /// Every image directory, read-only and executable (the probe's
    /// trivial container; a sandbox binds what its plan grants).
    pub fn whole_image_read_only(&self) -> Vec<Mount> {
        self.dirs
            .iter()
            .map(|d| Mount {
                destination: d.clone(),
                source: d.clone(),
                kind: MountKind::ReadOnly { exec: true },
            })
            .collect()
    }
}

/// Everything one container's `config.json` says.
#[derive(Debug, Clone)]
pub struct Bundle<'a> {
    /// The root directory (absolute), mounted read-only.
    pub root: &'a Path,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    /// After `/proc` and `/dev`, in this order.
    pub mounts: Vec<Mount>,
    /// The sandbox's memory bound, held by its cgroup.
    pub memory_bytes: Option<u64>,
    /// `RLIMIT_NPROC` (gVisor holds it inside the sandbox).
    pub processes: u64,
    /// `RLIMIT_CPU`, set for the workload's own view; the bound itself is
    /// held from the host (the sandbox's cgroup CPU time, see
    /// `sandbox.rs`).
    pub cpu_seconds: u64,
    /// `RLIMIT_FSIZE`.
    pub file_bytes: u64,
    /// `cgroupsPath`: where runsc puts the sandbox's cgroups.
    pub cgroup: String,
}

/// The container rung's syscall denials as an OCI `linux.seccomp`, which
/// runsc (`--oci-seccomp`) loads inside its sandbox: allow by default,
/// deny each entry with its errno. A 32-bit comparison masks the low half;
/// "none of" is one rule of `!=` comparisons, which compare all 64 bits:
/// a value whose high half is set is denied, never wider than the table.
pub fn seccomp() -> Value {
    use cordon_linux::DeniedWhen;
    let mut rules = Vec::new();
    for d in cordon_linux::container_denials() {
        let rule = |args: Vec<Value>| {
            let mut r = json!({
                "names": [d.name],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": d.errno,
            });
            if !args.is_empty() {
                r["args"] = Value::Array(args);
            }
            r
        };
        match d.when {
            DeniedWhen::Always => rules.push(rule(vec![])),
            DeniedWhen::AnyBit { arg, bits } => {
                for &bit in bits {
                    rules.push(rule(vec![json!({
                        "index": arg, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"
                    })]));
                }
            }
            DeniedWhen::Eq32 { arg, value } => rules.push(rule(vec![json!({
                "index": arg, "value": 0xffff_ffff_u64, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"
            })])),
            DeniedWhen::NotIn32 { arg, values } => rules.push(rule(
                values
                    .iter()
                    .map(|&v| json!({"index": arg, "value": v, "op": "SCMP_CMP_NE"}))
                    .collect(),
            )),
        }
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": rules,
    })
}

fn mount_json(m: &Mount) -> Value {
    let mut options = vec!["rbind", "nosuid", "nodev"];
    match m.kind {
        MountKind::ReadOnly { exec } => {
            options.push("ro");
            if !exec {
                options.push("noexec");
            }
        }
        MountKind::ReadWrite { exec } => {
            options.push("rw");
            if !exec {
                options.push("noexec");
            }
        }
    }
    json!({
        "destination": m.destination,
        "type": "bind",
        "source": m.source,
        "options": options,
    })
}

impl Bundle<'_> {
    /// The OCI runtime configuration.
    pub fn config(&self) -> Value {
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc",
                   "options": ["nosuid", "noexec", "nodev"]}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "noexec", "strictatime", "mode=755", "size=65536k"]}),
        ];
        mounts.extend(self.mounts.iter().map(mount_json));
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let rlimit = |kind: &str, n: u64| json!({"type": kind, "hard": n, "soft": n});
        let mut resources = json!({});
        if let Some(m) = self.memory_bytes {
            resources["memory"] = json!({"limit": m});
        }
        json!({
            "ociVersion": "1.0.0",
            "process": {
                "terminal": false,
                "user": {"uid": self.uid, "gid": self.gid, "additionalGids": []},
                "args": self.argv,
                "env": env,
                "cwd": self.cwd,
                "capabilities": {
                    "bounding": [], "effective": [], "inheritable": [],
                    "permitted": [], "ambient": []
                },
                "rlimits": [
                    rlimit("RLIMIT_NPROC", self.processes),
                    rlimit("RLIMIT_CPU", self.cpu_seconds),
                    rlimit("RLIMIT_FSIZE", self.file_bytes),
                    rlimit("RLIMIT_NOFILE", 1024),
                    rlimit("RLIMIT_CORE", 0),
                ],
                "noNewPrivileges": true
            },
            "root": {"path": self.root, "readonly": true},
            "hostname": HOSTNAME,
            "mounts": mounts,
            "linux": {
                "namespaces": [
                    {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                    {"type": "uts"}, {"type": "mount"}
                ],
                "resources": resources,
                "cgroupsPath": self.cgroup,
                "seccomp": seccomp(),
                "maskedPaths": MASKED_PROC,
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_container_denial_is_in_the_bundles_filter() {
        let filter = seccomp();
        assert_eq!(filter["defaultAction"], "SCMP_ACT_ALLOW");
        let rules = filter["syscalls"].as_array().unwrap();
        for d in cordon_linux::container_denials() {
            assert!(
                rules.iter().any(|r| r["names"][0] == d.name
                    && r["action"] == "SCMP_ACT_ERRNO"
                    && r["errnoRet"] == d.errno),
                "`{}` is not denied",
                d.name
            );
        }
    }
}
