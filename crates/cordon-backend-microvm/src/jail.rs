//! The jail QEMU runs in: cordon's own `container` rung (`cordon-linux`),
//! the way Firecracker runs under its jailer.
//!
//! [`start`] turns a [`JailSpec`] into a container-rung [`Plan`]
//! ([`plan`]) and launches it with [`cordon_linux::launch_named`]; the
//! returned [`Jailed`] keeps the run on a thread of its own (the one that
//! launched it: the init dies with that thread, see `PR_SET_PDEATHSIG`) and
//! kills the whole tree and removes its cgroup when killed or dropped.
//!
//! What the jail gives QEMU, and nothing more (the `host` image of the
//! container rung, narrowed):
//! - user, mount, pid, ipc, uts, net and cgroup namespaces; a fresh root
//!   with the host's `/usr` (and `/lib`, `/lib64`) read-only, its own
//!   `/etc` holding only `ld.so.cache` and the rung's synthesized files,
//!   a private `/tmp`, `/proc` of its own pid namespace, and a `/dev` of
//!   five devices (`null`, `zero`, `full`, `random`, `urandom`), plus
//!   `/dev/kvm` with [`JailSpec::kvm`] and only then;
//! - `run_dir` read-write at its own path (QEMU's unix sockets and logs:
//!   the host reaches them at the same path), and each of `read_only`
//!   read-only at its own path;
//! - execute on the program and its ELF interpreter only (Landlock);
//! - a host uid/gid of its own, leased for the jail's life like a local
//!   sandbox's ([`cordon_backend_kit::lease_id`]), no capabilities,
//!   `no_new_privs`, cordon's container seccomp table, and a network
//!   namespace with nothing but `lo`;
//! - a cgroup holding [`JailSpec::memory_bytes`] and [`MAX_TASKS`].
//!
//! QEMU adds its own filter on top with `-sandbox on` (the caller's
//! arguments): cordon's seccomp table allows `seccomp(2)` under
//! `no_new_privs`, so QEMU's filter stacks on cordon's.
//!
//! A jail whose owner is SIGKILLed dies with it (the init's parent-death
//! signal, then the pid namespace); its empty cgroup is reclaimed from
//! [`Jailed::cgroup_dirs`] with [`cordon_linux::reclaim_cgroups`], or found
//! by name with [`cordon_linux::orphaned_sandbox_cgroups`] (the name is
//! `cordon-vm-NAME-PID-N`, `PID` the owner's).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use cordon_linux::{
    Bounds, Cancel, Enforcer, FsRule, Ids, InitProgram, LinuxEnforcer, Outcome, Plan, PlanSpec,
    Rung, SandboxStdio,
};

/// What to run in the jail and what it may touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JailSpec {
    /// The program (`qemu-system-x86_64`): an absolute path to an ELF
    /// executable. It and its ELF interpreter are all the jail may execute.
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Read-write, at the same path inside: QEMU's unix sockets and logs
    /// live here, and the host connects to them at their host path. The
    /// jail makes it its host uid's own (mode 0700); its parents
    /// must be searchable by others. QEMU's stdout and stderr go to
    /// [`OUTPUT_LOG`] in it.
    pub run_dir: PathBuf,
    /// Files (or directories) QEMU opens read-only — the kernel, the
    /// initramfs, the packed root image — at the same paths inside. Each
    /// is a canonical path (no links), readable by others, under parents
    /// searchable by others.
    pub read_only: Vec<PathBuf>,
    /// Give QEMU the host's `/dev/kvm` (read, write, its ioctls); without
    /// it there is no `/dev/kvm` in the jail at all.
    pub kvm: bool,
    /// The jail's memory bound: guest RAM and QEMU's own (TCG's translation
    /// cache included: pass `-accel tcg,tb-size=MiB` to hold it down).
    pub memory_bytes: u64,
    /// Part of the cgroup's name (`cordon-vm-NAME-PID-N`): ASCII letters,
    /// digits and `_`, at most 64.
    pub name: String,
}

/// QEMU's stdout and stderr, in [`JailSpec::run_dir`].
pub const OUTPUT_LOG: &str = "qemu-output.log";

/// The uid and gid QEMU has inside its user namespace (the container
/// rung's).
pub use cordon_backend_kit::INSIDE_ID;

/// The jail's process and thread bound: QEMU's main loop, its RCU and
/// worker threads (the block layer's pool grows to 64), one per vCPU.
pub const MAX_TASKS: u32 = 256;

/// The private `/tmp`'s size: QEMU keeps nothing there.
const TMP_BYTES: u64 = 16 << 20;

/// CPU and wall-clock seconds the jail's plan carries: effectively none.
/// A VM lives as long as its sandbox; the sandbox's own time bounds are
/// the backend's to hold (ten years stays far from any overflow).
const UNBOUNDED_SECONDS: u64 = 10 * 365 * 24 * 3600;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The host's system trees the jail reads from (the container rung's
/// `host` image; what is not there is skipped).
const SYSTEM_READ: &[&str] = &["/usr", "/lib", "/lib64", "/etc/ld.so.cache"];

fn read_rule(path: &Path) -> FsRule {
    FsRule {
        path: path.to_path_buf(),
        read: true,
        write: false,
        execute: false,
    }
}

/// The container-rung plan for `spec` (what [`start`] launches), QEMU
/// running as host uid and gid `host_id`: checks the spec's paths on the
/// host and finds the program's ELF interpreter.
pub fn plan(spec: &JailSpec, host_id: u32) -> Result<Plan, String> {
    check_spec(spec, host_id)?;
    let program = canonical(&spec.program, "the program")?;
    let mut fs: Vec<FsRule> = SYSTEM_READ
        .iter()
        .map(Path::new)
        .filter(|p| p.exists())
        .map(read_rule)
        .collect();
    let mut exec = vec![program.clone()];
    if let Some(interp) = elf_interpreter(&program)? {
        exec.push(canonical(&interp, "the program's ELF interpreter")?);
    }
    for p in exec {
        fs.push(FsRule {
            path: p,
            read: true,
            write: false,
            execute: true,
        });
    }
    for p in &spec.read_only {
        fs.push(read_rule(&canonical(p, "a read-only file")?));
    }
    let mut argv = vec![program.display().to_string()];
    argv.extend(spec.args.iter().cloned());
    let plan = PlanSpec {
        rung: Rung::Container,
        fs,
        mask_paths: vec![],
        mask_executables: vec![],
        work_dir: spec.run_dir.clone(),
        work_dir_source: None,
        image_root: None,
        tmp_dir: None,
        env: BTreeMap::new(),
        bounds: Bounds {
            max_memory: spec.memory_bytes,
            max_processes: MAX_TASKS,
            max_cpu_seconds: UNBOUNDED_SECONDS,
            max_wall_seconds: UNBOUNDED_SECONDS,
            max_disk: TMP_BYTES,
        },
        argv,
        ids: Ids {
            uid: INSIDE_ID,
            gid: INSIDE_ID,
            host_uid: host_id,
            host_gid: host_id,
        },
        proxy_port: None,
        listen: false,
        secrets_dir: None,
        trust_dir: None,
        kvm: spec.kvm,
    };
    Plan::new(plan).map_err(|e| format!("the jail's plan is refused: {e}"))
}

fn check_spec(spec: &JailSpec, host_id: u32) -> Result<(), String> {
    if host_id == 0 {
        return Err(
            "`host_id` must not be 0: QEMU never runs as host root; lease a fresh uid".into(),
        );
    }
    let name_ok = !spec.name.is_empty()
        && spec.name.len() <= 64
        && spec
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !name_ok {
        return Err(format!(
            "jail name `{}`: use 1 to 64 ASCII letters, digits or `_`",
            spec.name
        ));
    }
    for (what, p) in std::iter::once(("run_dir", &spec.run_dir))
        .chain(std::iter::once(("program", &spec.program)))
        .chain(spec.read_only.iter().map(|p| ("read_only", p)))
    {
        if !p.is_absolute() {
            return Err(format!("{what} `{}` must be an absolute path", p.display()));
        }
    }
    Ok(())
}

fn canonical(path: &Path, what: &str) -> Result<PathBuf, String> {
    path.canonicalize()
        .map_err(|e| format!("{what} `{}`: {e}", path.display()))
}

/// The `PT_INTERP` of the 64-bit little-endian ELF executable at `path`
/// (`None`: statically linked). Anything but such an ELF is refused: the
/// jail grants execute on the program and its interpreter alone, so a
/// script's interpreter would not run.
pub fn elf_interpreter(path: &Path) -> Result<Option<PathBuf>, String> {
    const PT_INTERP: u32 = 3;
    let not_elf = || {
        format!(
            "`{}` is not a 64-bit little-endian ELF executable; the jail runs such a program directly (no scripts)",
            path.display()
        )
    };
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes))
        .map_err(|e| format!("reading `{}`: {e}", path.display()))?;
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .and_then(|v| usize::try_from(v).ok())
    };
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err(not_elf());
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return Err(not_elf());
    };
    for i in 0..usize::from(phnum) {
        let ph = phoff + i * usize::from(phentsize);
        if u32_at(ph).ok_or_else(not_elf)? != PT_INTERP {
            continue;
        }
        let (Some(off), Some(size)) = (u64_at(ph + 8), u64_at(ph + 32)) else {
            return Err(not_elf());
        };
        let raw = bytes.get(off..off + size).ok_or_else(not_elf)?;
        let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
        let interp = PathBuf::from(String::from_utf8(raw.to_vec()).map_err(|_| not_elf())?);
        if !interp.is_absolute() {
            return Err(not_elf());
        }
        return Ok(Some(interp));
    }
    Ok(None)
}

/// Whether `uid` may reach `path`: every parent searchable by others (the
/// jail's uid is nobody's owner or group on the host), and `path` itself
/// readable by others (`need_read`).
fn reachable(path: &Path, need_read: bool) -> Result<(), String> {
    let mut parent = path.parent();
    while let Some(dir) = parent {
        let meta = std::fs::metadata(dir).map_err(|e| format!("`{}`: {e}", dir.display()))?;
        if meta.mode() & 0o001 == 0 {
            return Err(format!(
                "`{}` is not searchable by others, so the jail cannot reach `{}` beneath it: `chmod o+x {}` or use a directory that is",
                dir.display(),
                path.display(),
                dir.display()
            ));
        }
        parent = dir.parent();
    }
    if need_read {
        let meta = std::fs::metadata(path).map_err(|e| format!("`{}`: {e}", path.display()))?;
        let bit = if meta.is_dir() { 0o005 } else { 0o004 };
        if meta.mode() & bit != bit {
            return Err(format!(
                "`{}` is not readable by others, so QEMU in its jail cannot open it: `chmod o+r` it (it holds nothing secret)",
                path.display()
            ));
        }
    }
    Ok(())
}

/// Whether the jail's uid can open `node` (`/dev/kvm`) read-write: it is
/// in no group of the host, so only the mode bits for others count.
fn kvm_usable(node: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(node).map_err(|e| {
        format!(
            "`{}`: {e}; without KVM, start the jail with `kvm: false` (TCG)",
            node.display()
        )
    })?;
    if !meta.file_type().is_char_device() {
        return Err(format!("`{}` is not a device node", node.display()));
    }
    if meta.mode() & 0o006 != 0o006 {
        return Err(format!(
            "`{}` has mode {:o}: the jail's uid is in none of the host's groups, so KVM needs the node read-write for others (`chmod 0666 {}`, udev's usual mode), or start the jail with `kvm: false` (TCG)",
            node.display(),
            meta.mode() & 0o7777,
            node.display()
        ));
    }
    Ok(())
}

/// A running jail. Dropping it kills the tree and removes its cgroup.
#[derive(Debug)]
pub struct Jailed {
    init_pid: u32,
    cancel: Cancel,
    cgroup_dirs: Vec<PathBuf>,
    end: Arc<End>,
    /// The jail's host uid/gid, held until the jail is gone (see Drop).
    lease: Option<cordon_backend_kit::IdLease>,
}

/// How the jail's thread ended the run, set once it has (the tree killed
/// and the cgroup removed by then).
#[derive(Debug, Default)]
struct End {
    state: Mutex<Ended>,
    changed: Condvar,
}

#[derive(Debug, Default)]
enum Ended {
    #[default]
    Not,
    With(Result<Outcome, String>),
    /// [`Jailed::wait`] took the outcome.
    Taken,
}

impl End {
    fn set(&self, outcome: Result<Outcome, String>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = Ended::With(outcome);
        self.changed.notify_all();
    }

    /// Blocks until the run has ended; returns the guard over its state.
    fn wait(&self) -> std::sync::MutexGuard<'_, Ended> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*state, Ended::Not) {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state
    }

    fn ended(&self) -> bool {
        !matches!(
            *self.state.lock().unwrap_or_else(|p| p.into_inner()),
            Ended::Not
        )
    }
}

/// Starts `spec` in its jail; `init` is the binary that runs
/// `cordon_linux::init_main` (the `cordon` binary's hidden subcommand).
/// Returns once the jail is built and the program is starting; QEMU's own
/// failures are in [`OUTPUT_LOG`] and in [`Jailed::wait`]'s outcome.
pub fn start(spec: &JailSpec, init: &InitProgram) -> Result<Jailed, String> {
    let lease = cordon_backend_kit::lease_id()
        .map_err(|e| format!("leasing a host uid for the jail: {e}"))?;
    let host_id = lease.id();
    let plan = plan(spec, host_id)?;
    let enforcer = LinuxEnforcer::new(init.clone());
    enforcer
        .available(Rung::Container)
        .map_err(|m| format!("the microvm jail needs the container rung here: {m}"))?;
    for p in &spec.read_only {
        let c = canonical(p, "a read-only file")?;
        if &c != p {
            // Only the file itself is bound, at its canonical path: a link
            // to it named on QEMU's command line would lead nowhere inside.
            return Err(format!(
                "the read-only file `{}` must be given as its canonical path `{}`",
                p.display(),
                c.display()
            ));
        }
        reachable(&c, true)?;
    }
    reachable(&canonical(&spec.program, "the program")?, true)?;
    let run_dir = canonical(&spec.run_dir, "the run dir")?;
    if run_dir != spec.run_dir {
        return Err(format!(
            "the run dir `{}` must be given as its canonical path `{}` (the host reaches QEMU's sockets at the same path)",
            spec.run_dir.display(),
            run_dir.display()
        ));
    }
    if !std::fs::metadata(&run_dir).is_ok_and(|m| m.is_dir()) {
        return Err(format!(
            "the run dir `{}` is not a directory",
            run_dir.display()
        ));
    }
    reachable(&run_dir, false)?;
    if spec.kvm {
        kvm_usable(Path::new(cordon_linux::KVM_DEVICE))?;
    }
    std::os::unix::fs::chown(&run_dir, Some(host_id), Some(host_id))
        .and_then(|()| std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| {
            format!(
                "making the run dir `{}` the jail's own: {e} (starting a jail needs root)",
                run_dir.display()
            )
        })?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(run_dir.join(OUTPUT_LOG))
        .map_err(|e| format!("`{}`: {e}", run_dir.join(OUTPUT_LOG).display()))?;
    let log2 = log
        .try_clone()
        .map_err(|e| format!("`{}`: {e}", run_dir.join(OUTPUT_LOG).display()))?;
    let stdio = SandboxStdio {
        stdin: Stdio::null(),
        stdout: Stdio::from(log),
        stderr: Stdio::from(log2),
    };
    let cgroup = format!(
        "cordon-vm-{}-{}-{}",
        spec.name,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let end = Arc::new(End::default());
    let (tx, rx) = mpsc::channel();
    let init = init.clone();
    let finished = Arc::clone(&end);
    // The thread that launches is the init's parent (its parent-death
    // signal fires when this thread ends), so it lives as long as the jail.
    std::thread::Builder::new()
        .name(format!("jail-{}", spec.name))
        .spawn(move || {
            let running = match cordon_linux::launch_named(&plan, &init, stdio, &cgroup) {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(format!("starting the jail: {e}")));
                    return;
                }
            };
            let _ = tx.send(Ok((
                running.pid(),
                running.canceller(),
                running.cgroup_dirs(),
            )));
            finished.set(running.wait().map_err(|e| e.to_string()));
        })
        .map_err(|e| format!("starting the jail's thread: {e}"))?;
    let (init_pid, cancel, cgroup_dirs) = rx
        .recv()
        .map_err(|_| "the jail's thread ended before the jail started".to_string())??;
    Ok(Jailed {
        init_pid,
        cancel,
        cgroup_dirs,
        end,
        lease: Some(lease),
    })
}

/// The children of `pid` (`/proc/PID/task/PID/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

impl Jailed {
    /// The program's host pid while it runs (the init's grandchild: the
    /// init's first stage runs the second, PID 1 of the jail, whose first
    /// child is the program); `None` once it has ended.
    pub fn pid(&self) -> Option<u32> {
        if !self.alive() {
            return None;
        }
        let stage2 = children(self.init_pid).into_iter().next()?;
        children(stage2).into_iter().next()
    }

    /// The host pid of the jail's init (the root of its process tree).
    pub fn init_pid(&self) -> u32 {
        self.init_pid
    }

    /// The host uid and gid the program runs as (leased for the jail).
    pub fn host_id(&self) -> u32 {
        self.lease
            .as_ref()
            .map_or(0, cordon_backend_kit::IdLease::id)
    }

    /// A handle that does [`Jailed::kill`] from anywhere (another thread,
    /// a hook), for as long as anyone holds it.
    pub fn killer(&self) -> impl Fn() + Send + Sync + 'static {
        let cancel = self.cancel.clone();
        let end = Arc::clone(&self.end);
        let dirs = self.cgroup_dirs();
        move || {
            let _ = cordon_linux::freeze_cgroups(&dirs, false);
            cancel.cancel();
            drop(end.wait());
        }
    }

    /// Whether anything of the jail still runs.
    pub fn alive(&self) -> bool {
        !self.end.ended()
    }

    /// Kills the whole tree and returns once it is gone and its cgroup
    /// removed.
    pub fn kill(&self) {
        // A paused guest's QEMU dies only thawed.
        let _ = cordon_linux::freeze_cgroups(&self.cgroup_dirs(), false);
        self.cancel.cancel();
        drop(self.end.wait());
    }

    /// Freezes (`true`) or thaws every process of the jail — QEMU and its
    /// guest — through its cgroup.
    pub fn freeze(&self, frozen: bool) -> std::io::Result<()> {
        cordon_linux::freeze_cgroups(&self.cgroup_dirs(), frozen)
    }

    /// Waits for the program to end (the tree is then killed and the
    /// cgroup removed) and says how: a memory kill is `killed_by:
    /// Some(Bound::Memory)`.
    pub fn wait(self) -> Result<Outcome, String> {
        let mut state = self.end.wait();
        match std::mem::replace(&mut *state, Ended::Taken) {
            Ended::With(outcome) => outcome,
            Ended::Not | Ended::Taken => Err("the jail's outcome was already taken".into()),
        }
    }

    /// The jail's cgroup directories, for a record: after a crashed owner,
    /// [`cordon_linux::reclaim_cgroups`] on them kills what is left and
    /// removes them.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.cgroup_dirs.clone()
    }
}

impl Drop for Jailed {
    fn drop(&mut self) {
        self.kill();
        // Only now is no process of the uid left: the lease may go.
        drop(self.lease.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: u32 = 1_900_000_000;

    fn spec(kvm: bool) -> JailSpec {
        JailSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "true".into()],
            run_dir: "/var/tmp/cordon-vm-run".into(),
            read_only: vec!["/etc/hostname".into()],
            kvm,
            memory_bytes: 256 << 20,
            name: "unit".into(),
        }
    }

    #[test]
    fn kvm_is_in_the_plan_only_when_asked_for() {
        let with = plan(&spec(true), ID).unwrap();
        assert!(with.kvm());
        assert_eq!(with.rung(), Rung::Container);
        let without = plan(&spec(false), ID).unwrap();
        assert!(!without.kvm());
        // Nothing else of /dev is ever granted by a rule.
        for p in [&with, &without] {
            assert!(p.fs().iter().all(|r| !r.path.starts_with("/dev")));
        }
    }

    #[test]
    fn the_plan_executes_the_program_and_its_interpreter_only() {
        let p = plan(&spec(false), ID).unwrap();
        let sh = Path::new("/bin/sh").canonicalize().unwrap();
        let exec: Vec<&Path> = p
            .fs()
            .iter()
            .filter(|r| r.execute)
            .map(|r| r.path.as_path())
            .collect();
        let interp = elf_interpreter(&sh)
            .unwrap()
            .unwrap()
            .canonicalize()
            .unwrap();
        assert_eq!(exec, vec![sh.as_path(), interp.as_path()]);
        assert!(p.fs().iter().all(|r| !r.write));
        assert_eq!(p.work_dir(), Path::new("/var/tmp/cordon-vm-run"));
        assert_eq!(p.argv()[0], sh.display().to_string());
        assert_eq!(p.ids().host_uid, 1_900_000_000);
        assert_eq!(p.bounds().max_memory, 256 << 20);
        assert!(p.env().is_empty());
    }

    #[test]
    fn bad_specs_are_refused_saying_what_to_do() {
        assert!(plan(&spec(false), 0)
            .unwrap_err()
            .contains("lease a fresh uid"));
        let mut s = spec(false);
        s.name = "a/b".into();
        assert!(plan(&s, ID).unwrap_err().contains("ASCII letters"));
        let mut s = spec(false);
        s.program = "/etc/hostname".into();
        assert!(plan(&s, ID).unwrap_err().contains("not a 64-bit"));
        let mut s = spec(false);
        s.read_only = vec!["relative".into()];
        assert!(plan(&s, ID).unwrap_err().contains("absolute"));
    }

    #[test]
    fn a_kvm_node_only_its_group_can_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kvm");
        std::fs::write(&file, b"").unwrap();
        assert!(kvm_usable(&file).unwrap_err().contains("not a device node"));
        // /dev/null is a character device usable by all.
        assert!(kvm_usable(Path::new("/dev/null")).is_ok());
        if let Ok(meta) = std::fs::metadata(cordon_linux::KVM_DEVICE) {
            let open_to_others = meta.mode() & 0o006 == 0o006;
            let r = kvm_usable(Path::new(cordon_linux::KVM_DEVICE));
            assert_eq!(r.is_ok(), open_to_others, "{r:?}");
            if let Err(e) = r {
                assert!(e.contains("chmod 0666") && e.contains("kvm: false"), "{e}");
            }
        }
    }
}
