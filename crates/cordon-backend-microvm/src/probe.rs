//! What this machine can run: QEMU, a guest kernel, the guest agent, and
//! which accelerator really boots a guest.
//!
//! `/dev/kvm` opening proves nothing (a nested or paravirtual KVM may take
//! the ioctls and never run a guest kernel). The accelerator probe boots
//! cordon's own initramfs under KVM with a deadline and takes KVM only when
//! the guest agent answered. The result is cached in this process and on
//! disk, keyed by the kernel, QEMU, the initramfs and `/dev/kvm`, for a day
//! (a failed probe is tried again after that, or when any of them change).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use cordon_backend_kit::memo::PerSettings;

use crate::artifacts::{self, Kernel, VmSettings};
use crate::vm::{Accel, BootSpec};

/// How long a KVM probe guest has to come up.
pub const KVM_PROBE_DEADLINE: Duration = Duration::from_secs(8);

/// How long a probe result is trusted.
const PROBE_TTL: Duration = Duration::from_secs(24 * 3600);

/// What the machine has for this backend.
#[derive(Debug, Clone)]
pub struct Machine {
    pub qemu: PathBuf,
    pub qemu_version: String,
    pub kernel: Kernel,
    pub agent: PathBuf,
    pub initramfs: PathBuf,
    pub accel: Accel,
    /// Why KVM is not used, when it is not.
    pub no_kvm: Option<String>,
    /// How the accelerator was decided ("probed now", "cached …").
    pub accel_source: String,
    /// The settings it was probed with (its cache holds packed images).
    pub settings: artifacts::VmSettings,
}

/// Why the backend cannot run here.
pub use cordon_backend_kit::register::Unrunnable as Unavailable;

/// Probes once per process for each settings.
pub fn machine(settings: &VmSettings) -> &'static Result<Machine, Unavailable> {
    MACHINE.get_or_make(settings, probe)
}

static MACHINE: PerSettings<VmSettings, Result<Machine, Unavailable>> = PerSettings::new();

/// The accelerator for the registration's rung, cheaply: no `qemu
/// --version`, no initramfs unless a probe must boot one (a cached result
/// answers every later `cordon` command). `None`: the backend cannot run.
/// Every `cordon` command builds the registry, so this is start-up work.
pub fn accel_for_registry(settings: &VmSettings) -> Option<Accel> {
    static A: PerSettings<VmSettings, Option<Accel>> = PerSettings::new();
    *A.get_or_make(settings, |settings| {
        if let Some(Ok(m)) = MACHINE.made(settings) {
            return Some(m.accel);
        }
        let qemu = qemu()?;
        let kernel = artifacts::kernel(settings).ok()?;
        let agent = artifacts::agent(settings).ok()?;
        Some(
            accel(settings, &qemu, &kernel, || {
                artifacts::initramfs(settings, &kernel, &agent)
            })
            .0,
        )
    })
}

/// `qemu-system-x86_64` on PATH or in /usr/bin.
pub fn qemu() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
}

fn probe(settings: &VmSettings) -> Result<Machine, Unavailable> {
    let mut found = Vec::new();
    let Some(qemu) = qemu() else {
        return Err(Unavailable {
            reason: "`qemu-system-x86_64` is not installed; install it with `apt-get install qemu-system-x86`".into(),
            found,
        });
    };
    let qemu_version = qemu_version(settings, &qemu);
    found.push(format!("`{}` ({qemu_version})", qemu.display()));
    let kernel = artifacts::kernel(settings).map_err(|reason| Unavailable {
        reason,
        found: found.clone(),
    })?;
    found.push(format!("guest kernel `{}`", kernel.image.display()));
    let agent = artifacts::agent(settings).map_err(|reason| Unavailable {
        reason,
        found: found.clone(),
    })?;
    let initramfs =
        artifacts::initramfs(settings, &kernel, &agent).map_err(|reason| Unavailable {
            reason,
            found: found.clone(),
        })?;
    let (accel, no_kvm, accel_source) = accel(settings, &qemu, &kernel, || Ok(initramfs.clone()));
    Ok(Machine {
        qemu,
        qemu_version,
        kernel,
        agent,
        initramfs,
        accel,
        no_kvm,
        accel_source,
        settings: settings.clone(),
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Cached {
    key: String,
    at: u64,
    kvm: bool,
    why: Option<String>,
}

/// `qemu --version`'s first line, kept on disk beside the accelerator's
/// probe keyed by the binary's stamp (path, size, mtime): a `cordon`
/// command that merely considers this backend (any `--min-isolation
/// container` run here) starts no QEMU. A new QEMU is asked again.
fn qemu_version(settings: &VmSettings, qemu: &Path) -> String {
    let key = stamp(qemu);
    let file = artifacts::cache_dir(settings).ok().map(|d| {
        let mut h = Sha256::new();
        h.update(&key);
        d.join(format!(
            "qemu-version-{}.txt",
            &artifacts::hex(&h.finalize())[..16]
        ))
    });
    if let Some(known) = file
        .as_ref()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| t.strip_prefix(&format!("{key}\n")).map(str::to_string))
    {
        return known;
    }
    let version = std::process::Command::new(qemu)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        });
    let Some(version) = version else {
        return "version unknown".into();
    };
    if let Some(f) = &file {
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, format!("{key}\n{version}")).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    version
}

/// A file as a cache key sees it: its path, size, modification time (to
/// the nanosecond), inode and device number — any change of the file, or
/// another file put in its place, changes it.
pub(crate) fn stamp(p: &Path) -> String {
    std::fs::metadata(p)
        .map(|m| {
            format!(
                "{}:{}:{}:{}:{}",
                p.display(),
                m.len(),
                i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                m.ino(),
                m.rdev()
            )
        })
        .unwrap_or_else(|_| format!("{}:absent", p.display()))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Decides the accelerator: KVM only when a guest booted under it.
fn accel(
    settings: &VmSettings,
    qemu: &Path,
    kernel: &Kernel,
    initramfs: impl FnOnce() -> Result<PathBuf, String>,
) -> (Accel, Option<String>, String) {
    if settings.tcg {
        return (
            Accel::Tcg,
            Some("CORDON_VM_ACCEL=tcg asks for the emulator".into()),
            "set by CORDON_VM_ACCEL".into(),
        );
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return (
            Accel::Tcg,
            Some(
                "`/dev/kvm` does not open (no hardware virtualisation here, or not allowed)".into(),
            ),
            "probed now".into(),
        );
    }
    let key = {
        let mut h = Sha256::new();
        // Not the initramfs: whether KVM runs a guest is QEMU's, the
        // kernel's and the device's; a rebuilt agent must not cost a probe.
        for p in [qemu, &kernel.image, Path::new("/dev/kvm")] {
            h.update(stamp(p));
        }
        artifacts::hex(&h.finalize())
    };
    let file = artifacts::cache_dir(settings)
        .ok()
        .map(|d| d.join(format!("accel-probe-{}.json", &key[..16])));
    let cached = |file: &Option<PathBuf>| -> Option<(Accel, Option<String>, String)> {
        let f = file.as_ref()?;
        let c = serde_json::from_slice::<Cached>(&std::fs::read(f).ok()?).ok()?;
        if c.key != key || now().saturating_sub(c.at) >= PROBE_TTL.as_secs() {
            return None;
        }
        let source = format!(
            "probed {}, cached a day in `{}`",
            cordon_image::format_time(c.at),
            f.display()
        );
        Some(if c.kvm {
            (Accel::Kvm, None, source)
        } else {
            (Accel::Tcg, c.why, source)
        })
    };
    if let Some(hit) = cached(&file) {
        return hit;
    }
    // One probe at a time on this machine: many cordon processes starting
    // together (a test suite, replicas) wait for the first one's result
    // rather than each boot a guest.
    let _lock = file.as_ref().and_then(|f| {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(f.with_extension("lock"))
            .ok()?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).ok()?;
        Some(lock)
    });
    if let Some(hit) = cached(&file) {
        return hit;
    }
    // The initramfs is made only now: a probe must boot it.
    let result = initramfs()
        .and_then(|i| boot_probe(settings, qemu, kernel, &i))
        .map_err(|e| {
            e.replace(
                "reading the channel failed: Resource temporarily unavailable (os error 11)",
                "nothing came",
            )
        });
    if let Some(f) = &file {
        let c = Cached {
            key,
            at: now(),
            kvm: result.is_ok(),
            why: result.as_ref().err().cloned(),
        };
        if let Ok(bytes) = serde_json::to_vec(&c) {
            let tmp = f.with_extension("tmp");
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(&tmp, f);
            }
        }
    }
    match result {
        Ok(()) => (Accel::Kvm, None, "probed now".into()),
        Err(why) => (Accel::Tcg, Some(why), "probed now".into()),
    }
}

/// Boots the initramfs under KVM with an empty image; Ok when the agent
/// answered within the deadline.
fn boot_probe(
    settings: &VmSettings,
    qemu: &Path,
    kernel: &Kernel,
    initramfs: &Path,
) -> Result<(), String> {
    let image = empty_image(settings)?;
    let run = tempfile_dir("cordon-microvm-probe")?;
    let spec = BootSpec {
        qemu: qemu.to_path_buf(),
        kernel: kernel.image.clone(),
        initramfs: initramfs.to_path_buf(),
        image,
        accel: Accel::Kvm,
        memory_mib: 256,
        cpus: 1,
        run_dir: run.clone(),
        deadline: KVM_PROBE_DEADLINE,
        name: format!("cordon-microvm-probe-{}", std::process::id()),
        incoming: false,
    };
    let r = boot_plain(&spec).map_err(|e| format!(
        "`/dev/kvm` opens but a guest did not boot under KVM within {} s ({e}), so guests here run under TCG, which is not a security boundary",
        KVM_PROBE_DEADLINE.as_secs()
    ));
    let _ = std::fs::remove_dir_all(&run);
    r
}

/// Boots `spec` as a plain child of this process (the probe runs cordon's
/// own initramfs and an empty image, no workload, under QEMU's own
/// `-sandbox on`; it must run before any backend is built, so before a
/// jail's init program is known) and waits for the agent's `Ready`.
fn boot_plain(spec: &BootSpec) -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    use std::time::Instant;
    let started = Instant::now();
    let mut child = std::process::Command::new(&spec.qemu)
        .args(spec.args())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", spec.qemu.display()))?;
    let sock = spec.run_dir.join("ctl.sock");
    let result = (|| {
        let stream = loop {
            match UnixStream::connect(&sock) {
                Ok(s) => break s,
                Err(e) => {
                    if started.elapsed() > spec.deadline {
                        return Err(format!("no control socket: {e}"));
                    }
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!("QEMU ended ({status})"));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        let left = spec.deadline.saturating_sub(started.elapsed());
        crate::channel::await_ready(&stream, left.max(Duration::from_millis(1))).map(drop)
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// A private directory under the system's temporary directory.
pub fn tempfile_dir(prefix: &str) -> Result<PathBuf, String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&d).map_err(|e| format!("cannot make `{}`: {e}", d.display()))?;
    Ok(d)
}

/// An empty erofs image, cached.
fn empty_image(settings: &VmSettings) -> Result<PathBuf, String> {
    let dir = artifacts::cache_dir(settings)?;
    let path = dir.join("empty.erofs");
    if path.is_file() {
        return Ok(path);
    }
    let src = tempfile_dir("cordon-microvm-empty")?;
    let r = artifacts::pack_dir(&src, &path);
    let _ = std::fs::remove_dir_all(&src);
    r.map(|()| path)
}
