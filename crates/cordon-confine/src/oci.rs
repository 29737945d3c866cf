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

/// `/proc` paths an engine holds read-only in a container (runc's default
/// list).
pub const READONLY_PROC: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// `/proc` (and `/sys`) paths hidden from the workload (runc's default
/// list; gVisor's `/proc` is its own, and these are masked all the same).
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

/// The same denials as a Docker seccomp profile (`--security-opt
/// seccomp=…`, inlined in the Engine API's `SecurityOpt`). Docker's
/// profile has the OCI section's shape (`defaultAction`, `architectures`,
/// `syscalls[{names, action, errnoRet, args}]`; its decoder matches keys
/// without regard to case), with one difference that matters: runc splits
/// the conditions a rule puts on one argument into separate rules (any of
/// them denies), so "none of these values" cannot be one rule of `!=`
/// comparisons — it would deny every value. Here each such denial is its
/// complement as rules of one comparison each ([`none_of`]); a set that
/// cannot be written so is an error, never a wider filter.
///
/// `net` narrows the table for what a Docker container's network namespace
/// cannot hold the way the native rung's Landlock does (no TCP bind):
/// without an egress route no inet socket is made at all; with one, inet
/// sockets are made (to reach the proxy) but nothing listens; in a sandbox
/// made to serve a port ([`DockerNet::Listening`]) inet sockets listen —
/// in a namespace holding only its loopback (and the proxy's listener),
/// reached from the host only through cordon's forward.
pub fn docker_seccomp_profile(net: DockerNet) -> Result<String, String> {
    use cordon_linux::DeniedWhen;
    let mut profile = seccomp();
    let mut rules = Vec::new();
    const UNIX_ONLY: &[u64] = &[1]; // AF_UNIX
    for d in cordon_linux::container_denials() {
        let DeniedWhen::NotIn32 { arg, values } = d.when else {
            continue;
        };
        let values = match (d.name, net) {
            ("socket", DockerNet::None) => UNIX_ONLY,
            _ => values,
        };
        for cmp in none_of(arg, values).map_err(|e| format!("`{}`: {e}", d.name))? {
            rules.push(json!({
                "names": [d.name],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": d.errno,
                "args": [cmp],
            }));
        }
    }
    if let Some(all) = profile["syscalls"].as_array_mut() {
        // The OCI form of "none of" (one rule of `!=`) is replaced.
        all.retain(|r| {
            !r["args"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c["op"] == "SCMP_CMP_NE"))
        });
        all.extend(rules);
        if net == DockerNet::ProxyRoute {
            all.push(json!({
                "names": ["listen"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": 1, // EPERM
            }));
        }
    }
    Ok(profile.to_string())
}

/// The profile of a warm container whose processes are cordon's exec
/// helper only (`cordon_backend_kit::podexec`): [`docker_seccomp_profile`]
/// with `unshare` and `mount` allowed, which the helper needs to make an
/// exec's namespaces and `/proc`. Every command it starts runs under the
/// whole table besides (the helper installs it, stacked on this one), so
/// nothing a workload runs is allowed what this profile adds.
pub fn docker_helper_seccomp_profile(net: DockerNet) -> Result<String, String> {
    const HELPER_NEEDS: &[&str] = &["unshare", "mount"];
    let mut profile: Value = serde_json::from_str(&docker_seccomp_profile(net)?)
        .map_err(|e| format!("the seccomp profile for Docker: {e}"))?;
    if let Some(all) = profile["syscalls"].as_array_mut() {
        all.retain(|r| {
            !r["names"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| HELPER_NEEDS.iter().any(|h| n == h)))
        });
    }
    Ok(profile.to_string())
}

/// What a Docker container's network namespace holds (see
/// [`docker_seccomp_profile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerNet {
    /// A loopback only: unix sockets, no inet socket.
    None,
    /// The egress proxy's listener: inet sockets to reach it, no `listen`.
    ProxyRoute,
    /// A sandbox made with `requires: [ports]`: inet sockets, and `listen`
    /// on its own loopback (with or without the proxy's listener beside).
    Listening,
}

/// Comparisons on argument `arg`, any one of which holds exactly when its
/// low 32 bits are none of `values`:
///
/// - a small set (largest value at most 64): each value below the largest
///   that is not in the set (low 32 bits equal), and every value above it
///   (all 64 bits compared, so a value whose high half is set is denied
///   too: narrower, never wider);
/// - `{0, 0xffffffff}` (all bits clear, all set): some bit set and another
///   clear, as pairs with bit 0 — 62 comparisons of two masked bits.
fn none_of(arg: u8, values: &[u64]) -> Result<Vec<Value>, String> {
    let masked = |mask: u64, value: u64| json!({"index": arg, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"});
    let top = values.iter().copied().max().unwrap_or(0);
    if top <= 64 {
        let mut out: Vec<Value> = (0..top)
            .filter(|v| !values.contains(v))
            .map(|v| masked(0xffff_ffff, v))
            .collect();
        out.push(json!({"index": arg, "value": top, "op": "SCMP_CMP_GT"}));
        return Ok(out);
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    if sorted == [0, 0xffff_ffff] {
        let mut out = Vec::new();
        for j in 1..32 {
            let pair = 1 | (1_u64 << j);
            out.push(masked(pair, 1));
            out.push(masked(pair, 1 << j));
        }
        return Ok(out);
    }
    Err(format!(
        "the allowed values {values:?} cannot be written as Docker seccomp rules of one comparison each"
    ))
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

/// The open-file limit of every engine sandbox's workload (`RLIMIT_NOFILE`).
pub const NOFILE: u64 = 1024;

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
                    rlimit("RLIMIT_NOFILE", NOFILE),
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
                "readonlyPaths": READONLY_PROC
            }
        })
    }
}

// The mounts that hold a translated plan in an OCI-shaped sandbox, and the
// work dir's checks, shared by the gvisor and docker backends.

/// Whether the plan's rule on `p` may be bound at its own path: not the
/// root or an ancestor of an image directory (those are reached through
/// the image's directories), nothing the sandbox mounts itself, not `/etc`
/// whole nor its files that are cordon's own.
pub fn bindable_outside(p: &Path, image_dirs: &[PathBuf]) -> bool {
    let own = ["/proc", "/dev", "/sys", "/tmp"];
    !image_dirs
        .iter()
        .any(|d| d.starts_with(p) || p.starts_with(d))
        && !HOST_IMAGE.iter().any(|d| p.starts_with(d))
        && !own.iter().any(|o| p.starts_with(o))
        && p != Path::new("/etc")
        && !ETC_KEPT.iter().any(|k| p.starts_with(k))
}

/// Why an engine sandbox's mounts could not be made: the policy refuses
/// (its plan, or a grant the translator cannot hold), or the sandbox's own
/// view failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineMountsError {
    Refused(String),
    Failed(String),
}

/// The policy's storage plan for `identity` in `env` at `now`, with the
/// work dir at `work` (the workload's path), translated with masks over
/// `view` and turned into mounts by [`plan_mounts`]: what every engine
/// backend (gVisor's bundle, Docker's binds) starts from.
#[allow(clippy::too_many_arguments)]
pub fn engine_mounts(
    policy: &cordon_policy::Policy,
    (identity, env, now): (&cordon_policy::Identity, &cordon_policy::Deployment, i64),
    rung: &str,
    work: &str,
    (image_root, image_dirs): (&Path, &[PathBuf]),
    view: &crate::RootedFs,
    work_host: &Path,
    (rootfs, volume, masks): (&Path, &Path, &Path),
) -> Result<Vec<Mount>, EngineMountsError> {
    use crate::FsView;
    let plan = policy
        .plan(identity, env, now, work)
        .map_err(|e| EngineMountsError::Refused(e.to_string()))?;
    let work_seen = view
        .canonical(Path::new(work))
        .map_err(|e| EngineMountsError::Failed(format!("the work dir `{work}`: {e}")))?;
    let tmp = PathBuf::from("/tmp");
    let t = crate::translate(
        policy,
        &plan,
        &crate::Target {
            rung,
            mode: crate::Mode::MasksAvailable,
            tmp_shared: false,
            work_dir: &work_seen,
            tmp_dir: &tmp,
            fs: view,
        },
    )
    .map_err(|e| EngineMountsError::Refused(e.message))?;
    plan_mounts(
        &t,
        image_root,
        image_dirs,
        view,
        (&work_seen, work_host),
        (rootfs, volume, masks),
    )
    .map_err(EngineMountsError::Failed)
}

/// The mounts that hold a translated plan in this sandbox: each rule's
/// reach into the image's directories, read-only (executable only where a
/// rule says so), and each rule outside the image at its own path, with
/// its rights, parents first; the work dir and `/tmp`, read-write and
/// `noexec`; then every mask that falls inside something bound. Rights
/// are the union of the rules on a path and above it, as Landlock reads
/// them. What the bundle cannot give (write inside the image) is left
/// out: never wider than the plan. Mount points outside the image are
/// made in `rootfs`. `image_root` is where the image's tree is on the
/// host (`/` for the `host` image, a stored image's root otherwise): a
/// rule's path is looked for, and bound from, beneath it.
pub fn plan_mounts(
    t: &crate::Confinement,
    image_root: &Path,
    image_dirs: &[PathBuf],
    view: &crate::RootedFs,
    (work, work_host): (&Path, &Path),
    (rootfs, volume, masks): (&Path, &Path, &Path),
) -> Result<Vec<Mount>, String> {
    use crate::FsView;
    let tmp = Path::new("/tmp");
    let rules: Vec<&crate::PathRule> =
        t.fs.iter()
            .filter(|r| r.read || r.write || r.execute)
            .filter(|r| !r.path.starts_with(work) && !r.path.starts_with(tmp))
            .collect();
    let mut at: Vec<PathBuf> = Vec::new();
    for r in &rules {
        for d in image_dirs {
            if d.starts_with(&r.path) {
                at.push(d.clone());
            } else if r.path.starts_with(d) {
                at.push(r.path.clone());
            }
        }
        if bindable_outside(&r.path, image_dirs) {
            at.push(r.path.clone());
        }
    }
    at.sort_by_key(|p| (p.components().count(), p.clone()));
    at.dedup();
    let in_image = |p: &Path| image_dirs.iter().any(|d| p.starts_with(d));
    let exec_at = |p: &Path| rules.iter().any(|r| r.execute && p.starts_with(&r.path));
    let write_at =
        |p: &Path| !in_image(p) && rules.iter().any(|r| r.write && p.starts_with(&r.path));
    let mut binds: Vec<(PathBuf, MountKind)> = Vec::new();
    for p in at {
        // A rule on a path the host lacks binds nothing.
        let Ok(meta) = std::fs::symlink_metadata(under(image_root, &p)) else {
            continue;
        };
        let kind = if write_at(&p) {
            MountKind::ReadWrite { exec: exec_at(&p) }
        } else {
            MountKind::ReadOnly { exec: exec_at(&p) }
        };
        let parent = binds
            .iter()
            .filter(|(q, _)| p.starts_with(q))
            .max_by_key(|(q, _)| q.components().count());
        if parent.is_some_and(|(_, k)| *k == kind) {
            continue;
        }
        if parent.is_none() && !in_image(&p) {
            // Its mount point, in the root cordon made.
            let point = under(rootfs, &p);
            if meta.is_dir() {
                mkdir_in(rootfs, &p)?;
            } else if !meta.file_type().is_symlink() {
                if let Some(parent) = p.parent() {
                    mkdir_in(rootfs, parent)?;
                }
                if std::fs::symlink_metadata(&point).is_err() {
                    std::fs::write(&point, b"")
                        .map_err(|e| format!("cannot make `{}`: {e}", point.display()))?;
                }
            } else {
                continue;
            }
        }
        binds.push((p, kind));
    }
    let mut mounts: Vec<Mount> = binds
        .into_iter()
        .map(|(p, kind)| Mount {
            source: under(image_root, &p),
            destination: p,
            kind,
        })
        .collect();
    let bound: Vec<PathBuf> = mounts.iter().map(|m| m.destination.clone()).collect();
    mounts.push(Mount {
        destination: work.to_path_buf(),
        source: work_host.to_path_buf(),
        kind: MountKind::ReadWrite { exec: false },
    });
    mounts.push(Mount {
        destination: tmp.to_path_buf(),
        source: volume.join("tmp"),
        kind: MountKind::ReadWrite { exec: false },
    });
    let inside = |p: &Path| {
        p.starts_with(work) || p.starts_with(tmp) || bound.iter().any(|b| p.starts_with(b))
    };
    let mut hidden: Vec<&PathBuf> = t.mask_paths.iter().chain(&t.mask_executables).collect();
    hidden.sort();
    hidden.dedup();
    for p in hidden {
        if !inside(p) {
            continue;
        }
        let source = match view.symlink_metadata(p) {
            Ok(m) if m.is_dir() => masks.join("dir"),
            Ok(_) => masks.join("file"),
            Err(_) => continue,
        };
        mounts.push(Mount {
            destination: p.clone(),
            source,
            kind: MountKind::ReadOnly { exec: false },
        });
    }
    Ok(mounts)
}

/// The pid in a name an engine backend made, `PREFIX` then `PID-N-…`
/// (its sandbox directory, containers and cgroups are named so, which is
/// how a sweep tells whose maker is gone). `None` for any other name.
pub fn maker_of(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let mut parts = rest.split('-');
    let pid = parts.next()?;
    let n = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n))
        .then(|| pid.parse().ok())
        .flatten()
}

/// An operator's work dir, checked: a directory owned by
/// `owner` (what the workload writes as; cordon never chowns an
/// operator's files), on a filesystem no larger than `max_disk`, which is
/// what holds the bound there. Returns it canonical.
pub fn given_work_dir(d: &Path, max_disk: u64, owner: u32, rung: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let real = d
        .canonicalize()
        .map_err(|e| format!("work dir `{}`: {e}", d.display()))?;
    let meta =
        std::fs::metadata(&real).map_err(|e| format!("work dir `{}`: {e}", real.display()))?;
    let dir = real.display();
    if !meta.is_dir() {
        return Err(format!("work dir `{dir}` is not a directory"));
    }
    if meta.uid() != owner || meta.gid() != owner {
        return Err(format!(
            "work dir `{dir}` is owned by {}:{}, but the {rung} backend's workload writes as {owner}:{owner} and cordon never chowns an operator's files\nhelp: give a directory owned by {owner}:{owner}, or omit `--work-dir` to get a fresh one",
            meta.uid(),
            meta.gid()
        ));
    }
    let size = cordon_linux::volume::filesystem_bytes(&real)
        .map_err(|e| format!("work dir `{dir}`: {e}"))?;
    if size == 0 || size > max_disk {
        return Err(format!(
            "work dir `{dir}` is on a filesystem of {size} bytes, not one of at most max_disk ({max_disk} bytes), and nothing else would hold the bound there\nhelp: to let the sandbox work on what is in `{dir}`, use `--workspace {dir}` instead (copy-on-write, held to max_disk whatever the filesystem; it changes only when applied); else omit `--work-dir` (a fresh work dir is a volume of exactly max_disk), or put the directory on a filesystem of its own no larger than max_disk"
        ));
    }
    Ok(real)
}

/// Where the work dir may not be: inside the image's directories, cordon's
/// `/etc`, or what the sandbox mounts itself.
pub fn check_work_dir(guest: &str, rung: &str) -> Result<(), String> {
    let p = Path::new(guest);
    let reserved = HOST_IMAGE
        .iter()
        .copied()
        .chain(["/etc", "/proc", "/dev", "/tmp", "/sys"]);
    for r in reserved {
        if p.starts_with(r) {
            return Err(format!(
                "the work dir `{guest}` is inside `{r}`, which the {rung} backend mounts itself; name a work dir outside it, like `/workspace`"
            ));
        }
    }
    if p == Path::new("/") {
        return Err("the work dir cannot be `/`; name one like `/workspace`".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pod's profile is the exec's less exactly what the helper needs
    /// (`unshare`, `mount`): every other denial stays, for every network.
    #[test]
    fn the_helpers_profile_allows_only_unshare_and_mount_beyond_the_execs() {
        let names = |p: &str| -> Vec<String> {
            let v: Value = serde_json::from_str(p).unwrap();
            v["syscalls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["names"].to_string())
                .collect()
        };
        for net in [DockerNet::None, DockerNet::ProxyRoute, DockerNet::Listening] {
            let exec = names(&docker_seccomp_profile(net).unwrap());
            let helper = names(&docker_helper_seccomp_profile(net).unwrap());
            let dropped: Vec<&String> = exec.iter().filter(|n| !helper.contains(n)).collect();
            assert_eq!(dropped, ["[\"mount\"]", "[\"unshare\"]"], "{net:?}");
            assert!(helper.iter().all(|n| exec.contains(n)), "{net:?}");
            assert!(helper.iter().any(|n| n == "[\"setns\"]"), "{net:?}");
        }
    }

    #[test]
    fn the_docker_profile_denies_the_complement_of_an_allowed_set_rule_by_rule() {
        let p: Value =
            serde_json::from_str(&docker_seccomp_profile(DockerNet::ProxyRoute).unwrap()).unwrap();
        let rules = p["syscalls"].as_array().unwrap();
        // No rule puts two conditions on one argument (runc would OR them).
        for r in rules {
            let args = r["args"].as_array().map_or(0, Vec::len);
            assert!(args <= 1, "{r}");
        }
        let socket: Vec<&Value> = rules.iter().filter(|r| r["names"][0] == "socket").collect();
        let eq: Vec<u64> = socket
            .iter()
            .filter(|r| r["args"][0]["op"] == "SCMP_CMP_MASKED_EQ")
            .map(|r| r["args"][0]["valueTwo"].as_u64().unwrap())
            .collect();
        // unix (1), inet (2) and inet6 (10) are allowed; the rest is denied.
        assert_eq!(eq, [0, 3, 4, 5, 6, 7, 8, 9]);
        assert!(socket
            .iter()
            .any(|r| r["args"][0]["op"] == "SCMP_CMP_GT" && r["args"][0]["value"] == 10));
        assert!(rules.iter().any(|r| r["names"][0] == "listen"));
        // With no route, no inet socket at all, and unix sockets listen.
        let p: Value =
            serde_json::from_str(&docker_seccomp_profile(DockerNet::None).unwrap()).unwrap();
        let rules = p["syscalls"].as_array().unwrap();
        assert!(rules.iter().any(|r| r["names"][0] == "socket"
            && r["args"][0]["op"] == "SCMP_CMP_GT"
            && r["args"][0]["value"] == 1));
        assert!(!rules.iter().any(|r| r["names"][0] == "listen"));
        // Made to serve a port: inet sockets, and they listen; every other
        // family is still denied, and the rest of the table is the same.
        let p: Value =
            serde_json::from_str(&docker_seccomp_profile(DockerNet::Listening).unwrap()).unwrap();
        let rules = p["syscalls"].as_array().unwrap();
        let socket: Vec<u64> = rules
            .iter()
            .filter(|r| r["names"][0] == "socket" && r["args"][0]["op"] == "SCMP_CMP_MASKED_EQ")
            .map(|r| r["args"][0]["valueTwo"].as_u64().unwrap())
            .collect();
        assert_eq!(socket, [0, 3, 4, 5, 6, 7, 8, 9]);
        assert!(!rules.iter().any(|r| r["names"][0] == "listen"));
        let route: Value =
            serde_json::from_str(&docker_seccomp_profile(DockerNet::ProxyRoute).unwrap()).unwrap();
        assert_eq!(
            rules.len() + 1,
            route["syscalls"].as_array().unwrap().len(),
            "Listening is ProxyRoute less its `listen` denial"
        );
    }

    /// The rules of [`none_of`] hold exactly off the allowed set.
    #[test]
    fn none_of_denies_exactly_what_is_not_allowed() {
        let holds = |rules: &[Value], v: u64| {
            rules.iter().any(|c| {
                let a = c["value"].as_u64().unwrap();
                match c["op"].as_str().unwrap() {
                    "SCMP_CMP_MASKED_EQ" => v & a == c["valueTwo"].as_u64().unwrap(),
                    "SCMP_CMP_GT" => v > a,
                    op => panic!("{op}"),
                }
            })
        };
        let socket = none_of(0, &[1, 2, 10]).unwrap();
        for v in 0..200_u64 {
            assert_eq!(holds(&socket, v), ![1, 2, 10].contains(&v), "{v}");
        }
        assert!(holds(&socket, (1 << 32) | 2));
        let persona = none_of(0, &[0, 0xffff_ffff]).unwrap();
        assert!(!holds(&persona, 0) && !holds(&persona, 0xffff_ffff));
        for v in [
            1,
            2,
            8,
            0x0040_0000,
            0x0004_0000,
            0xffff_fffe,
            0x7fff_ffff,
            0x8000_0000,
        ] {
            assert!(holds(&persona, v), "{v:#x}");
        }
        assert!(none_of(0, &[0, 100, 1000]).is_err());
    }

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
