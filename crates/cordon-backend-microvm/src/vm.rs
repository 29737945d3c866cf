//! One guest: QEMU's `microvm` machine booted from the kernel, cordon's
//! initramfs and a packed image, run inside cordon's jail, reached over the
//! control channel. A boot has a deadline; one that misses it is killed,
//! logged and tried once more.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::channel::{self, Channel, ConnOpener};

/// What runs the guest's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualisation: the hypervisor boundary is real.
    Kvm,
    /// QEMU's emulator: not a security boundary; what confines is the jail.
    Tcg,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        })
    }
}

/// Everything one boot needs.
#[derive(Debug, Clone)]
pub struct BootSpec {
    pub qemu: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// The packed root image (a virtio-blk device, read-only).
    pub image: PathBuf,
    pub accel: Accel,
    pub memory_mib: u64,
    pub cpus: u32,
    /// The VM's own directory: QEMU's sockets and console log.
    pub run_dir: PathBuf,
    /// How long the guest has to say it is ready.
    pub deadline: Duration,
    /// The cgroup name of the jail.
    pub name: String,
}

impl BootSpec {
    /// QEMU's arguments (the program is `qemu`).
    pub fn args(&self) -> Vec<String> {
        let run = |f: &str| self.run_dir.join(f).display().to_string();
        let machine = match self.accel {
            // Without KVM's in-kernel devices the guest needs QEMU's
            // legacy timer and interrupt controller to boot.
            Accel::Tcg => "microvm,pit=on,pic=on,rtc=on",
            Accel::Kvm => "microvm",
        };
        let (accel, cpu) = match self.accel {
            // Without cx16: QEMU's TCG emulation of `cmpxchg16b` (the
            // guest kernel's slab allocator uses it) panicked 3 boots in 6
            // on a loaded host here, and 0 in 6 without it.
            //
            // tb-size: TCG's translation cache defaults to 1 GiB here
            // (QEMU 7.2), which it fills as more of the guest's code runs:
            // a guest that had run enough (the conformance kit's 21 cases)
            // had QEMU at 950 MiB resident and its jail's memory bound
            // killed it. The cache is held to a part of QEMU's overhead.
            Accel::Tcg => ("tcg,tb-size=96", "max,-cx16"),
            Accel::Kvm => ("kvm", "host"),
        };
        let mut a: Vec<String> = [
            "-M",
            machine,
            "-accel",
            accel,
            "-cpu",
            cpu,
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-display",
            "none",
            "-no-reboot",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        a.extend([
            "-m".into(),
            format!("{}M", self.memory_mib),
            "-smp".into(),
            self.cpus.to_string(),
            "-chardev".into(),
            format!("file,id=con,path={}", run("console.log")),
            "-serial".into(),
            "chardev:con".into(),
            "-chardev".into(),
            format!("socket,id=ctl,path={},server=on,wait=off", run("ctl.sock")),
            "-device".into(),
            "virtio-serial-device".into(),
            "-device".into(),
            "virtserialport,chardev=ctl,name=cordon.ctl".into(),
            "-drive".into(),
            format!(
                "file={},if=none,format=raw,readonly=on,id=img",
                self.image.display()
            ),
            "-device".into(),
            "virtio-blk-device,drive=img".into(),
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initramfs.display().to_string(),
            "-append".into(),
            self.cmdline(),
            // QEMU's own seccomp filter on top of cordon's jail.
            "-sandbox".into(),
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny".into(),
        ]);
        a
    }
}

impl BootSpec {
    /// The guest kernel's command line. Under TCG the guest's TSC is the
    /// host's (QEMU passes the host's cycle counter through), and a guest
    /// that calibrates it against the emulated PIT can hang silently on a
    /// loaded host; so the host's own TSC rate is handed over
    /// (`tsc_early_khz`, with `lpj` and `no_timer_check` to skip the other
    /// calibrations). The rate must be the real one: the guest keeps time
    /// — and so the wall-clock and CPU bounds it holds — by it.
    pub fn cmdline(&self) -> String {
        let mut c = String::from("console=ttyS0 quiet panic=-1 reboot=t");
        if self.accel == Accel::Tcg {
            if let Some(khz) = host_tsc_khz() {
                // lpj: loops per jiffy at HZ=250, as the kernel derives it.
                c.push_str(&format!(
                    " no_timer_check tsc_early_khz={khz} lpj={}",
                    khz * 1000 / 250
                ));
            }
        }
        c
    }
}

/// The host's TSC rate in kHz, from the host kernel's own calibration
/// (`bogomips` is twice the TSC's MHz where the delay loop runs on the
/// TSC, as on every x86-64 with a constant TSC); `None` when the host does
/// not say (the guest then calibrates for itself).
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = info.lines().find(|l| l.starts_with("flags"))?;
    if !flags.split_whitespace().any(|f| f == "constant_tsc") {
        return None;
    }
    let bogo: f64 = info
        .lines()
        .find(|l| l.starts_with("bogomips"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    let khz = (bogo * 500.0).round();
    (100_000.0..=10_000_000.0)
        .contains(&khz)
        .then_some(khz as u64)
}

/// A running guest.
pub struct Vm {
    pub jail: crate::jail::Jailed,
    pub channel: Arc<Channel>,
    pub run_dir: PathBuf,
    pub kernel_release: String,
    pub agent: String,
    pub accel: Accel,
    /// How long the boot took to the guest's `Ready`.
    pub boot: Duration,
}

impl Vm {
    /// Boots `spec`, retrying once when the first boot misses its deadline;
    /// `opener` takes the guest's relayed connections (egress).
    pub fn boot(
        spec: &BootSpec,
        init: &cordon_linux::InitProgram,
        opener: Option<ConnOpener>,
    ) -> Result<Vm, String> {
        match Vm::boot_once(spec, init, opener.clone()) {
            Ok(vm) => Ok(vm),
            Err(BootError::Missed(first)) => {
                tracing::warn!(
                    run_dir = %spec.run_dir.display(),
                    "the guest missed its boot deadline ({first}); killed, trying once more"
                );
                Vm::boot_once(spec, init, opener).map_err(|e| match e {
                    BootError::Missed(second) => format!(
                        "the guest did not come up twice within {} s ({first}; then {second}); console: {}",
                        spec.deadline.as_secs(),
                        console_tail(&spec.run_dir)
                    ),
                    BootError::Other(e) => e,
                })
            }
            Err(BootError::Other(e)) => Err(e),
        }
    }

    fn boot_once(
        spec: &BootSpec,
        init: &cordon_linux::InitProgram,
        opener: Option<ConnOpener>,
    ) -> Result<Vm, BootError> {
        let started = Instant::now();
        let sock = spec.run_dir.join("ctl.sock");
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(spec.run_dir.join("console.log"));
        let mut read_only = vec![
            spec.kernel.clone(),
            spec.initramfs.clone(),
            spec.image.clone(),
        ];
        read_only.dedup();
        let jail = crate::jail::start(
            &crate::jail::JailSpec {
                program: spec.qemu.clone(),
                args: spec.args(),
                run_dir: spec.run_dir.clone(),
                read_only,
                kvm: spec.accel == Accel::Kvm,
                memory_bytes: (spec.memory_mib + QEMU_OVERHEAD_MIB) << 20,
                name: spec.name.clone(),
            },
            init,
        )
        .map_err(BootError::Other)?;
        let deadline = started + spec.deadline;
        let stream = loop {
            match UnixStream::connect(&sock) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline && jail.alive() => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => {
                    jail.kill();
                    return Err(BootError::Other(format!(
                        "QEMU did not open its control socket `{}`: {e}; console: {}",
                        sock.display(),
                        console_tail(&spec.run_dir)
                    )));
                }
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let (reader, agent, kernel) =
            match channel::await_ready(&stream, left.max(Duration::from_millis(1))) {
                Ok(r) => r,
                Err(e) => {
                    jail.kill();
                    return Err(if Instant::now() >= deadline {
                        BootError::Missed(e)
                    } else {
                        BootError::Other(format!(
                            "the guest did not come up: {e}; console: {}",
                            console_tail(&spec.run_dir)
                        ))
                    });
                }
            };
        let killer = jail.killer();
        let broke: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let hook = {
            let broke = broke.clone();
            Arc::new(move |why: &str| {
                *broke.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_string());
                killer();
            })
        };
        let channel = Channel::serve(stream, reader, hook, opener);
        Ok(Vm {
            jail,
            channel,
            run_dir: spec.run_dir.clone(),
            kernel_release: kernel,
            agent,
            accel: spec.accel,
            boot: started.elapsed(),
        })
    }

    /// Powers the guest off and ends QEMU (killed if it lingers).
    pub fn stop(&self) {
        self.channel.shutdown();
        let until = Instant::now() + Duration::from_millis(500);
        while self.jail.alive() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.jail.kill();
    }
}

/// QEMU's own memory beyond the guest's RAM, held by the jail's bound
/// (under TCG, its translation cache of 96 MiB within it).
pub const QEMU_OVERHEAD_MIB: u64 = 256;

enum BootError {
    Missed(String),
    Other(String),
}

/// The last lines of the guest's console, for a message.
pub fn console_tail(run_dir: &Path) -> String {
    let text = std::fs::read(run_dir.join("console.log")).unwrap_or_default();
    let start = text.len().saturating_sub(600);
    let tail = String::from_utf8_lossy(&text[start..]).replace('\n', " | ");
    if tail.trim().is_empty() {
        "(empty)".into()
    } else {
        tail
    }
}
