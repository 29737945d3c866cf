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
    /// Wait for a saved guest's state (`-incoming defer`, then
    /// `migrate-incoming`) instead of booting the kernel.
    pub incoming: bool,
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
            // The host's handle on QEMU itself (saving a guest with its
            // memory; [`crate::qmp`]): root's, in the run directory.
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", run("qmp.sock")),
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
        if self.incoming {
            a.extend(["-incoming".into(), "defer".into()]);
        }
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
        let deadline = started + spec.deadline;
        let jail = start_jail(spec, init).map_err(BootError::Other)?;
        let stream = connect_ctl(spec, &jail, deadline).map_err(BootError::Other)?;
        Vm::ready(spec, jail, stream, started, opener)
    }

    /// A copy of a saved guest: QEMU started to wait for a state
    /// (`-incoming defer`), given `state` (a file [`Vm::save`] wrote),
    /// and, once the guest runs, asked through its channel to go on as a
    /// copy (`Unpark`, answered by the agent's `Ready`). The channel's ids
    /// start at `first_id`, past every id the saved guest may still name.
    pub fn restore(
        spec: &BootSpec,
        init: &cordon_linux::InitProgram,
        opener: Option<ConnOpener>,
        state: &Path,
        first_id: u64,
    ) -> Result<Vm, String> {
        let started = Instant::now();
        let deadline = started + spec.deadline;
        let file = std::fs::File::open(state)
            .map_err(|e| format!("the saved guest `{}`: {e}", state.display()))?;
        let jail = start_jail(spec, init)?;
        let fail = |jail: &crate::jail::Jailed, e: String| {
            jail.kill();
            format!("{e}; console: {}", console_tail(&spec.run_dir))
        };
        let loaded = (|| {
            let mut qmp =
                crate::qmp::Qmp::connect(&spec.run_dir.join("qmp.sock"), deadline, || {
                    jail.alive()
                })?;
            use std::os::fd::AsFd;
            qmp.give_fd("saved", file.as_fd())?;
            qmp.execute(
                "migrate-incoming",
                Some(serde_json::json!({ "uri": "fd:saved" })),
            )?;
            qmp.await_migration(deadline)?;
            // Saved stopped, loaded stopped: it runs from here.
            qmp.execute("cont", None).map(drop)
        })();
        if let Err(e) = loaded {
            return Err(fail(
                &jail,
                format!("QEMU did not load the saved guest: {e}"),
            ));
        }
        let stream = connect_ctl(spec, &jail, deadline)?;
        let unpark = cordon_vm_proto::write_frame(
            &mut &stream,
            &cordon_vm_proto::Msg::Unpark { restored: true },
            &[],
        );
        if let Err(e) = unpark {
            return Err(fail(&jail, format!("the restored guest's channel: {e}")));
        }
        let vm = Vm::ready(spec, jail, stream, started, opener).map_err(|e| match e {
            BootError::Missed(e) | BootError::Other(e) => {
                format!("the restored guest did not answer: {e}")
            }
        })?;
        vm.channel.skip_ids(first_id);
        Ok(vm)
    }

    /// Saves the guest with its memory into `state` (a new file): the
    /// channel parked between frames ([`Channel::park`]), the CPUs
    /// stopped, the machine migrated into the file, then the guest let go
    /// on as it was. Returns the first channel id a copy may use.
    pub fn save(&self, state: &Path) -> Result<u64, String> {
        use std::os::unix::fs::OpenOptionsExt;
        // Root's alone: it holds everything the guest held in RAM.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(state)
            .map_err(|e| format!("`{}`: {e}", state.display()))?;
        let deadline = Instant::now() + SAVE_DEADLINE;
        let mut qmp = crate::qmp::Qmp::connect(&self.run_dir.join("qmp.sock"), deadline, || {
            self.jail.alive()
        })?;
        let parked = self
            .channel
            .park()
            .map_err(|e| format!("the guest agent did not park: {e}"))?;
        let first_id = self.channel.next_id() + FIRST_ID_MARGIN;
        qmp.execute("stop", None)?;
        let saved = (|| {
            // QEMU's default holds a migration to 32 MiB/s; the guest is
            // stopped, so the file is written as fast as it goes.
            qmp.execute(
                "migrate-set-parameters",
                Some(serde_json::json!({ "max-bandwidth": SAVE_BANDWIDTH })),
            )?;
            use std::os::fd::AsFd;
            qmp.give_fd("saved", file.as_fd())?;
            qmp.execute("migrate", Some(serde_json::json!({ "uri": "fd:saved" })))?;
            qmp.await_migration(deadline)?;
            file.sync_all()
                .map_err(|e| format!("`{}`: {e}", state.display()))
        })();
        // The guest goes on whatever came of it.
        let went_on = qmp.execute("cont", None);
        let unparked = parked.unpark();
        saved?;
        went_on.map_err(|e| format!("the guest was saved but did not go on: {e}"))?;
        unparked.map_err(|e| format!("the guest was saved but its channel did not: {e}"))?;
        Ok(first_id)
    }

    /// The guest's `Ready` read from `stream` within the spec's deadline,
    /// and its channel served.
    fn ready(
        spec: &BootSpec,
        jail: crate::jail::Jailed,
        stream: UnixStream,
        started: Instant,
        opener: Option<ConnOpener>,
    ) -> Result<Vm, BootError> {
        let deadline = started + spec.deadline;
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

/// QEMU in its jail, with the guest's files (kernel, initramfs, image)
/// readable; its sockets in the run directory.
fn start_jail(
    spec: &BootSpec,
    init: &cordon_linux::InitProgram,
) -> Result<crate::jail::Jailed, String> {
    for f in ["ctl.sock", "qmp.sock", "console.log"] {
        let _ = std::fs::remove_file(spec.run_dir.join(f));
    }
    let mut read_only = vec![
        spec.kernel.clone(),
        spec.initramfs.clone(),
        spec.image.clone(),
    ];
    read_only.dedup();
    crate::jail::start(
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
}

/// The control channel's socket, connected once QEMU opened it (killed
/// when it does not by `deadline`).
fn connect_ctl(
    spec: &BootSpec,
    jail: &crate::jail::Jailed,
    deadline: Instant,
) -> Result<UnixStream, String> {
    let sock = spec.run_dir.join("ctl.sock");
    loop {
        match UnixStream::connect(&sock) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < deadline && jail.alive() => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => {
                jail.kill();
                return Err(format!(
                    "QEMU did not open its control socket `{}`: {e}; console: {}",
                    sock.display(),
                    console_tail(&spec.run_dir)
                ));
            }
        }
    }
}

/// How long saving a guest may take, its CPUs stopped meanwhile.
const SAVE_DEADLINE: Duration = Duration::from_secs(120);
/// The rate a save is allowed to write at, in bytes per second (QEMU's
/// default is 32 MiB/s, made for a guest that runs on meanwhile).
const SAVE_BANDWIDTH: u64 = 8 << 30;
/// How far past the saving host's last id a copy's ids start: the saved
/// guest may still answer requests in flight when it was saved, which
/// the copy's host must take for no request of its own.
const FIRST_ID_MARGIN: u64 = 1 << 20;

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
