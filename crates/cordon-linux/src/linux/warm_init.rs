//! A warm sandbox's init: PID 1 of the sandbox's namespaces, alive until
//! the owner closes the control socket.
//!
//! It builds the root once, then serves [`WarmRequest::Exec`] on the control
//! socket it inherited (no path the workload can reach). Each exec is a
//! fresh child that, before running anything of the workload, joins the
//! exec's own cgroup (files the owner opened), drops to the workload's uid,
//! and applies a Landlock domain of its own and the seccomp filter. The
//! init itself runs as the namespace's root — a host uid the workload does
//! not have — keeps only the capabilities that dropping needs, and is not
//! dumpable, so the workload can neither signal, trace nor read it.
//!
//! INVARIANT: this process stays single-threaded, so the code between fork
//! and exec (in [`spawn_exec`]) may allocate and call ordinary library code.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use landlock::RulesetCreated;
use nix::fcntl::OFlag;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::ForkResult;
use rustix::event::{poll, PollFd, PollFlags};
use seccompiler::BpfProgram;

use super::proto::{self, check_exec, check_prepare, Order, Report, WarmEvent, WarmRequest};
use super::pty::{self, TtySize};
use super::setup::{die_with_parent, drop_privileges, fail, rlimits_for, Failure, SETUP_FAILED};
use super::{fs_rules, rootfs, seccomp};
use crate::fdpass;
use crate::outcome::Termination;
use crate::plan::{Plan, Rung};

/// Landlock ABI a warm sandbox needs: 6 scopes signals and abstract unix
/// sockets to each exec's own domain, so concurrent execs cannot reach
/// each other.
pub const WARM_LANDLOCK_ABI: u8 = 6;

/// What every exec applies; built once.
struct Layers {
    ruleset: RulesetCreated,
    seccomp: std::sync::Arc<Vec<BpfProgram>>,
}

/// The capabilities the init keeps after building the root: what
/// [`drop_privileges`] needs in each exec's child.
const KEEP: &[caps::Capability] = &[
    // New pid and mount namespaces and a /proc for each exec.
    caps::Capability::CAP_SYS_ADMIN,
    caps::Capability::CAP_SETUID,
    caps::Capability::CAP_SETGID,
    caps::Capability::CAP_SETPCAP,
];

fn narrow_init_capabilities() -> Result<(), Failure> {
    for cap in caps::all() {
        if !KEEP.contains(&cap) {
            caps::drop(None, caps::CapSet::Bounding, cap).map_err(fail("narrow bounding set"))?;
        }
    }
    let keep: caps::CapsHashSet = KEEP.iter().copied().collect();
    caps::set(None, caps::CapSet::Effective, &keep).map_err(fail("narrow capabilities"))?;
    caps::set(None, caps::CapSet::Permitted, &keep).map_err(fail("narrow capabilities"))?;
    caps::clear(None, caps::CapSet::Inheritable).map_err(fail("narrow capabilities"))?;
    caps::clear(None, caps::CapSet::Ambient).map_err(fail("narrow capabilities"))?;
    Ok(())
}

/// The warm stage 2. Returns only when the owner is gone (or on a setup
/// failure, before anything of a workload ran).
pub(crate) fn serve(plan: &Plan, report: &mut File, control: File) -> Result<i32, Failure> {
    if plan.rung() != Rung::Container {
        return Err(fail("warm init")(
            "warm sandboxes are built at the container rung",
        ));
    }
    let rules = fs_rules::effective(plan);
    // With a mount point for each tty exec's devpts, `/dev/ptmx` linked to
    // it and `/dev/tty` (which only ever opens the caller's own terminal).
    rootfs::enter(plan, &rules, true).map_err(fail("build root"))?;
    nix::unistd::sethostname("cordon").map_err(fail("sethostname"))?;
    nix::unistd::setsid().map_err(fail("setsid"))?;
    die_with_parent(None)?;
    narrow_init_capabilities()?;
    prctl::set_dumpable(false).map_err(fail("PR_SET_DUMPABLE"))?;
    // Each exec mounts a /proc of its own and grants it then.
    let exec_rules: Vec<fs_rules::Rule> = rules
        .iter()
        .filter(|r| r.path != std::path::Path::new("/proc"))
        .cloned()
        .collect();
    let layers = Layers {
        ruleset: fs_rules::ruleset(plan, &exec_rules, WARM_LANDLOCK_ABI)
            .map_err(fail("landlock"))?,
        seccomp: std::sync::Arc::new(vec![
            seccomp::compile_one(Rung::Container).map_err(fail("seccomp"))?
        ]),
    };
    // SIGCHLD arrives on a descriptor, so one poll waits for both requests
    // and children.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block().map_err(fail("block SIGCHLD"))?;
    let children = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(fail("signalfd"))?;
    // The sandbox's /tmp for its owner's files API: opened before any
    // workload runs, with no link followed (it is the tmpfs just made).
    let tmp = rustix::fs::openat2(
        rustix::fs::CWD,
        "/tmp",
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(fail("open /tmp"))?;
    fdpass::send(&control, &proto::Handover::Tmp, &[tmp.as_fd()]).map_err(fail("send /tmp"))?;
    drop(tmp);
    proto::send(report, &Report::Started).map_err(fail("report"))?;
    let control = OwnedFd::from(control);
    let mut running: HashMap<i32, u64> = HashMap::new();
    let mut spares: HashMap<u64, Spare> = HashMap::new();
    loop {
        let (requests, exits) = {
            let mut fds = [
                PollFd::new(&control, PollFlags::IN),
                PollFd::new(&children, PollFlags::IN),
            ];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(fail("poll")(e)),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if exits {
            while let Ok(Some(_)) = children.read_signal() {}
            reap(&control, &mut running, &mut spares);
        }
        if requests {
            match fdpass::recv::<WarmRequest>(&control) {
                // The owner is gone: PID 1 exits and the kernel kills every
                // process left in the namespace.
                Ok(None) => return Ok(0),
                Ok(Some((
                    WarmRequest::Exec {
                        id,
                        argv,
                        env,
                        joins,
                        tty,
                    },
                    fds,
                ))) => {
                    let started = match spares.remove(&id) {
                        Some(spare) if joins == 0 && tty.is_none() => {
                            take_spare(plan, &layers, spare, &argv, &env, fds)
                        }
                        Some(_) => Err("a spare is taken by an exec with no terminal and no cgroup files of its own".into()),
                        // Every exec joins a cgroup of its own: one with
                        // none to join (and no spare that joined one) is
                        // never started.
                        None if joins == 0 => Err("an exec without a cgroup to join is not started".into()),
                        None => spawn_exec(plan, &layers, &argv, &env, joins, tty, fds),
                    };
                    let (event, master) = match started {
                        Ok((pid, master)) => {
                            running.insert(pid, id);
                            (WarmEvent::Started { id }, master)
                        }
                        Err(error) => (WarmEvent::Failed { id, error }, None),
                    };
                    let attached: Vec<_> = master.iter().map(AsFd::as_fd).collect();
                    if fdpass::send(&control, &event, &attached).is_err() {
                        return Ok(0);
                    }
                }
                Ok(Some((WarmRequest::Prepare { id, joins }, fds))) => {
                    if let Err(e) = check_prepare(joins, fds.len()) {
                        return Err(fail("control socket")(e));
                    }
                    if spares.contains_key(&id) || running.values().any(|r| *r == id) {
                        return Err(fail("control socket")(format!("exec {id} is already made")));
                    }
                    spares.insert(id, spawn_spare(plan, &layers, fds));
                }
                // A malformed request from our own owner: stop serving.
                Err(e) => return Err(fail("control socket")(e)),
            }
        }
    }
}

/// Reaps every child that ended; reports the ones that were an exec's
/// first process. A spare that ended before it was taken is marked gone
/// (its exec is then made the ordinary way). Orphans reparented to PID 1
/// are reaped silently.
fn reap(control: &OwnedFd, running: &mut HashMap<i32, u64>, spares: &mut HashMap<u64, Spare>) {
    loop {
        let (pid, termination) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, code)) => (p, Termination::Exited(code)),
            Ok(WaitStatus::Signaled(p, sig, _)) => (p, Termination::Signaled(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        if let Some(id) = running.remove(&pid.as_raw()) {
            let _ = fdpass::send(control, &WarmEvent::Exited { id, termination }, &[]);
        } else if let Some(spare) = spares.values_mut().find(|s| s.pid == Some(pid.as_raw())) {
            spare.pid = None;
        }
    }
}

/// An exec made ahead ([`WarmRequest::Prepare`]), not yet taken.
struct Spare {
    /// Its shim, while it runs.
    pid: Option<i32>,
    /// To its command: what to run ([`Order`]).
    order: Option<OwnedFd>,
    /// The cgroup files it joined (the init's copies): an exec that takes
    /// a spare that is gone is made the ordinary way, in the same cgroup.
    joins: Vec<OwnedFd>,
}

/// Makes a spare: the ordinary exec's processes (shim, PID 1, command),
/// each as far as it goes without the request: the command, confined,
/// waits for its [`Order`]. Until it is taken, a setup failure ends the
/// spare (said nowhere: the exec that takes it is then made the ordinary
/// way, and says it again).
fn spawn_spare(plan: &Plan, layers: &Layers, joins: Vec<OwnedFd>) -> Spare {
    let mut spare = Spare {
        pid: None,
        order: None,
        joins,
    };
    let made = (|| -> Result<(i32, OwnedFd), String> {
        let (ours, theirs) = fdpass::pair().map_err(|e| format!("socketpair: {e}"))?;
        // (std opens close-on-exec.)
        let errors: OwnedFd = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map_err(|e| format!("/dev/null: {e}"))?
            .into();
        let joins = spare
            .joins
            .iter()
            .map(|f| f.try_clone().map(File::from))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("dup: {e}"))?;
        let setup = ExecSetup {
            order: Some(theirs),
            ..ExecSetup::of_plan(plan, layers, joins, errors)?
        };
        #[expect(unsafe_code, reason = "a spare's processes are forked by hand")]
        // SAFETY: as in `spawn_exec`: this process is single-threaded, and
        // the child never returns into the caller's frames.
        let forked = unsafe { nix::unistd::fork() };
        match forked {
            Ok(ForkResult::Child) => shim(setup),
            Ok(ForkResult::Parent { child }) => {
                // The order's other end is the command's alone: were it
                // held here too, an order to a command that is gone would
                // wait for nobody.
                drop(setup);
                Ok((child.as_raw(), ours))
            }
            Err(e) => Err(format!("fork: {e}")),
        }
    })();
    if let Ok((pid, order)) = made {
        spare.pid = Some(pid);
        spare.order = Some(order);
    }
    spare
}

/// Starts an exec in `spare`: its command is sent what to run, with the
/// owner's stdio and a pipe for its setup failures, which reaches its end
/// when the command is exec'd. A spare that is gone (or whose command
/// cannot be reached) gives way to the ordinary path, in its cgroup.
fn take_spare(
    plan: &Plan,
    layers: &Layers,
    spare: Spare,
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    fds: Vec<OwnedFd>,
) -> Result<(i32, Option<OwnedFd>), String> {
    check_exec(argv, env, 0, None, fds.len())?;
    if let (Some(pid), Some(to)) = (spare.pid, &spare.order) {
        let (errors_r, errors_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
        let mut attached: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
        attached.push(errors_w.as_fd());
        let order = Order {
            argv: argv.to_vec(),
            env: env.clone(),
        };
        if fdpass::send(to, &order, &attached).is_ok() {
            drop(attached);
            drop(errors_w);
            drop(fds);
            // EOF once the command is exec'd; otherwise the reason.
            let mut why = String::new();
            let _ = File::from(errors_r).read_to_string(&mut why);
            return if why.is_empty() {
                Ok((pid, None))
            } else {
                Err(why)
            };
        }
    }
    let joins = spare.joins.len();
    let mut all = fds;
    all.extend(spare.joins);
    spawn_exec(plan, layers, argv, env, joins, None, all)
}

/// Everything one exec's processes need, built before the fork.
struct ExecSetup {
    joins: Vec<File>,
    /// The owner's descriptors; for a tty exec, the terminal's slave once
    /// the exec's PID 1 has opened it.
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// A terminal of the exec's own, of this size.
    tty: Option<TtySize>,
    /// Where the exec's PID 1 sends the terminal's master (to the init).
    master_to: Option<OwnedFd>,
    /// Setup failures are written here (the init reads until EOF).
    errors: OwnedFd,
    ruleset: Option<RulesetCreated>,
    seccomp: std::sync::Arc<Vec<BpfProgram>>,
    ids: crate::plan::Ids,
    bounds: crate::plan::Bounds,
    work_dir: std::path::PathBuf,
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    /// A spare's: where its command receives what to run ([`Order`]);
    /// `program`, `argv`, `env` and stdio are empty until then.
    order: Option<OwnedFd>,
}

impl ExecSetup {
    /// What every exec of `plan` holds alike — its cgroup files to join,
    /// where setup failures go, the Landlock ruleset and seccomp filter,
    /// the ids, bounds and work dir — with no stdio, terminal, command or
    /// order yet: an exec on request and a spare fill in their own.
    fn of_plan(
        plan: &Plan,
        layers: &Layers,
        joins: Vec<File>,
        errors: OwnedFd,
    ) -> Result<ExecSetup, String> {
        Ok(ExecSetup {
            joins,
            stdin: None,
            stdout: None,
            stderr: None,
            tty: None,
            master_to: None,
            errors,
            ruleset: Some(
                layers
                    .ruleset
                    .try_clone()
                    .map_err(|e| format!("copying the landlock ruleset: {e}"))?,
            ),
            seccomp: layers.seccomp.clone(),
            ids: plan.ids().clone(),
            bounds: plan.bounds().clone(),
            work_dir: plan.work_dir().to_path_buf(),
            program: CString::default(),
            argv: Vec::new(),
            env: Vec::new(),
            order: None,
        })
    }
}

/// Starts one exec; returns the pid of its first process (in the sandbox's
/// pid namespace) and, for a tty exec, the terminal's master; or why it did
/// not start.
///
/// ```text
/// init ─ fork ─> shim (joins the exec's cgroup; new pid + mount namespaces)
///                  └─ fork ─> exec init = PID 1 of the exec's own pid
///                             namespace: a /proc of its own (and a devpts
///                             for a tty exec), drops to the workload's
///                             uid, Landlock, seccomp
///                               └─ fork ─> the command (execve)
/// ```
///
/// A pid namespace per exec is what keeps concurrent execs (one uid) out of
/// each other's `/proc`; when the exec's PID 1 ends, the kernel kills
/// everything left in it.
#[allow(clippy::too_many_arguments)]
fn spawn_exec(
    plan: &Plan,
    layers: &Layers,
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    joins: usize,
    tty: Option<TtySize>,
    mut fds: Vec<OwnedFd>,
) -> Result<(i32, Option<OwnedFd>), String> {
    let (n_stdio, program) = check_exec(argv, env, joins, tty, fds.len())?;
    let cstr = |s: &str| {
        CString::new(s).map_err(|_| "the command or its environment holds a NUL byte".to_string())
    };
    let c_argv = argv
        .iter()
        .map(|a| cstr(a))
        .collect::<Result<Vec<_>, _>>()?;
    let c_env = env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let joins: Vec<File> = fds.drain(n_stdio..).map(File::from).collect();
    let mut stdio = fds.into_iter();
    let (stdin, stdout, stderr) = (stdio.next(), stdio.next(), stdio.next());
    let (errors_r, errors) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (master_from, master_to) = match tty {
        Some(_) => {
            let (ours, theirs) = fdpass::pair().map_err(|e| format!("socketpair: {e}"))?;
            (Some(ours), Some(theirs))
        }
        None => (None, None),
    };
    let setup = ExecSetup {
        stdin,
        stdout,
        stderr,
        tty,
        master_to,
        program: cstr(program)?,
        argv: c_argv,
        env: c_env,
        ..ExecSetup::of_plan(plan, layers, joins, errors)?
    };
    #[expect(unsafe_code, reason = "an exec's processes are forked by hand")]
    // SAFETY: this process is single-threaded (module invariant), so the
    // child starts with every lock free and may allocate; the child never
    // returns into the caller's frames (`shim` ends in exit).
    let forked = unsafe { nix::unistd::fork() };
    match forked {
        Ok(ForkResult::Child) => shim(setup),
        Ok(ForkResult::Parent { child }) => {
            drop(setup);
            // EOF once the command is exec'd (its copy is close-on-exec and
            // the others are closed on the way); otherwise the reason.
            let mut why = String::new();
            let _ = File::from(errors_r).read_to_string(&mut why);
            if !why.is_empty() {
                return Err(why);
            }
            let master = match master_from {
                Some(from) => Some(receive_master(&from)?),
                None => None,
            };
            Ok((child.as_raw(), master))
        }
        Err(e) => Err(format!("fork: {e}")),
    }
}

/// The terminal's master, sent by the exec's PID 1 before its command was
/// exec'd (so before the errors pipe reached EOF): already queued, never
/// waited for.
fn receive_master(from: &OwnedFd) -> Result<OwnedFd, String> {
    let missing = |why: String| format!("the exec's terminal did not arrive: {why}");
    rustix::io::ioctl_fionbio(from, true).map_err(|e| missing(e.to_string()))?;
    match fdpass::recv::<()>(from) {
        Ok(Some(((), mut fds))) if fds.len() == 1 => Ok(fds.remove(0)),
        Ok(Some((_, fds))) => Err(missing(format!("{} descriptors", fds.len()))),
        Ok(None) => Err(missing("nothing was sent".into())),
        Err(e) => Err(missing(e.to_string())),
    }
}

/// The limits, no_new_privs, Landlock and seccomp, in the exec's PID 1 and
/// in its command alike (each applies them to itself).
fn confine_exec(setup: &mut ExecSetup) {
    step(setup, rlimits_for(&setup.bounds));
    step(
        setup,
        prctl::set_no_new_privs().map_err(fail("no_new_privs")),
    );
    let rs = setup.ruleset.take();
    step(
        setup,
        rs.ok_or_else(|| fail("landlock")("no ruleset"))
            .and_then(|rs| fs_rules::add_proc(rs).map_err(fail("landlock")))
            .and_then(|rs| match setup.tty {
                Some(_) => fs_rules::add_tty(rs).map_err(fail("landlock")),
                None => Ok(rs),
            })
            .and_then(|rs| fs_rules::enforce(rs).map_err(fail("landlock"))),
    );
    for p in setup.seccomp.clone().iter() {
        step(setup, seccompiler::apply_filter(p).map_err(fail("seccomp")));
    }
}

/// The command (and all it forks) goes first when the sandbox's memory runs
/// out: an OOM score adjustment of +1000 puts it ahead of every process of
/// cordon's in the cgroup (the warm init, this exec's PID 1), whatever their
/// sizes: a workload filling its private `/tmp` holds memory that belongs to
/// no process, and the init's resident binary would otherwise outweigh it.
/// Raising one's own score needs no privilege (root here may lack
/// CAP_SYS_RESOURCE, so the init cannot be made immune instead); Landlock
/// then grants `/proc` read-only, so the workload cannot lower it again.
///
/// The uid change made this process non-dumpable, which leaves its `/proc`
/// files to the namespace's root; it turns dumpable again first (its own
/// `execve` would do so anyway, for any program it can read).
fn oom_first() -> Result<(), Failure> {
    prctl::set_dumpable(true).map_err(fail("set the OOM score"))?;
    std::fs::write("/proc/self/oom_score_adj", b"1000").map_err(fail("set the OOM score"))
}

/// Reports a setup failure to the init and the exec's own stderr (for a
/// tty exec, its terminal once open), and ends this process.
fn refuse_exec(setup: &ExecSetup, f: Failure) -> ! {
    let msg = format!("{}: {}", f.step, f.error);
    let _ = rustix::io::write(&setup.errors, msg.as_bytes());
    if let Some(stderr) = &setup.stderr {
        let _ = rustix::io::write(
            stderr,
            format!("cordon: the sandbox refused to start this command: {msg}\n").as_bytes(),
        );
    }
    std::process::exit(SETUP_FAILED)
}

/// How the exec's PID 1 tells the shim how the command ended.
fn encode(t: Termination) -> [u8; 5] {
    let (tag, n) = match t {
        Termination::Exited(c) => (b'E', c),
        Termination::Signaled(s) => (b'S', s),
    };
    let b = n.to_le_bytes();
    [tag, b[0], b[1], b[2], b[3]]
}

fn decode(b: &[u8]) -> Option<Termination> {
    let n = i32::from_le_bytes(b.get(1..5)?.try_into().ok()?);
    match b.first()? {
        b'E' => Some(Termination::Exited(n)),
        b'S' => Some(Termination::Signaled(n)),
        _ => None,
    }
}

/// Ends this process the way `t` says: a signal is raised again (the shim
/// is not a PID 1, so it can die of it; one whose default is to be ignored
/// falls through to the shell's 128+N), an exit code is exited with.
fn end_as(t: Termination) -> ! {
    match t {
        Termination::Exited(c) => std::process::exit(c),
        Termination::Signaled(sig) => {
            if let Ok(s) = Signal::try_from(sig) {
                let _ = nix::sys::signal::raise(s);
            }
            std::process::exit(128 + (sig & 0x7f))
        }
    }
}

fn wait_status(status: WaitStatus) -> Option<Termination> {
    match status {
        WaitStatus::Exited(_, c) => Some(Termination::Exited(c)),
        WaitStatus::Signaled(_, sig, _) => Some(Termination::Signaled(sig as i32)),
        _ => None,
    }
}

/// The shim: in the exec's cgroup, parent of the exec's pid namespace.
fn shim(mut setup: ExecSetup) -> ! {
    // Children of the init start with its mask (SIGCHLD blocked): clear it.
    let _ = SigSet::empty().thread_set_mask();
    for mut f in &setup.joins {
        if let Err(e) = f.write_all(b"0") {
            refuse_exec(&setup, fail("join the exec's cgroup")(e));
        }
    }
    setup.joins.clear();
    // IPC of its own too: no System V segment, queue or semaphore of one
    // exec is another's to find (`concurrent-exec-sysv-ipc`).
    if let Err(e) =
        unshare(CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)
    {
        refuse_exec(&setup, fail("unshare the exec's namespaces")(e));
    }
    let (status_r, status_w) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => refuse_exec(&setup, fail("pipe")(e)),
    };
    #[expect(unsafe_code, reason = "the exec's PID 1 is forked by hand")]
    // SAFETY: single-threaded (forked from the single-threaded init).
    let forked = unsafe { nix::unistd::fork() };
    match forked {
        Ok(ForkResult::Child) => {
            drop(status_r);
            exec_init(setup, status_w)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(status_w);
            drop(setup);
            // Nothing more to do with privilege: keep none.
            for set in [
                caps::CapSet::Effective,
                caps::CapSet::Permitted,
                caps::CapSet::Inheritable,
                caps::CapSet::Ambient,
            ] {
                let _ = caps::clear(None, set);
            }
            let ended = loop {
                match waitpid(child, None) {
                    Ok(s) => {
                        if let Some(t) = wait_status(s) {
                            break t;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => break Termination::Exited(SETUP_FAILED),
                }
            };
            let mut report = Vec::new();
            let _ = File::from(status_r).read_to_end(&mut report);
            end_as(decode(&report).unwrap_or(ended))
        }
        Err(e) => refuse_exec(&setup, fail("fork")(e)),
    }
}

/// PID 1 of the exec's own pid namespace.
fn exec_init(mut setup: ExecSetup, status: OwnedFd) -> ! {
    enter_exec(&setup);
    if let Some(size) = setup.tty {
        take_terminal(&mut setup, size);
    }
    // The command is forked before either process is confined: it must
    // raise its OOM score (`oom_first`) while it may still write its own
    // /proc files, and Landlock grants /proc read-only. It runs nothing of the workload's
    // until this PID 1 is confined too (the gate), so no workload code ever
    // shares the namespace with an unconfined process.
    let (gate_r, gate_w) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => refuse_exec(&setup, fail("pipe")(e)),
    };
    #[expect(unsafe_code, reason = "the command is forked by hand")]
    // SAFETY: single-threaded (forked from the single-threaded shim).
    let forked = unsafe { nix::unistd::fork() };
    match forked {
        Ok(ForkResult::Child) => {
            drop(status);
            drop(gate_w);
            run_command(setup, gate_r)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(gate_r);
            reap_command(setup, child, gate_w, status)
        }
        Err(e) => refuse_exec(&setup, fail("fork")(e)),
    }
}

/// A step of an exec's setup: its failure refuses the exec.
fn step(setup: &ExecSetup, r: Result<(), Failure>) {
    if let Err(f) = r {
        refuse_exec(setup, f);
    }
}

/// The exec's PID 1 before anything else: its mounts private, a `/proc`
/// (and a devpts for a tty exec) of its own, a session, the workload's
/// uid, the work dir.
fn enter_exec(setup: &ExecSetup) {
    let root = std::path::Path::new("/");
    let proc = std::path::Path::new("/proc");
    step(
        setup,
        mount::<str, std::path::Path, str, str>(
            None,
            root,
            None,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None,
        )
        .map_err(fail("make mounts private")),
    );
    step(
        setup,
        mount::<str, std::path::Path, str, str>(
            Some("proc"),
            proc,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        )
        .map_err(fail("mount the exec's /proc")),
    );
    if setup.tty.is_some() {
        // A devpts instance of this exec's own: the host's /dev/pts (and so
        // the host's terminals) is never in the sandbox at all.
        step(
            setup,
            pty::mount_instance().map_err(fail("mount the exec's devpts")),
        );
    }
    step(
        setup,
        nix::unistd::setsid().map(drop).map_err(fail("setsid")),
    );
    step(setup, drop_privileges(setup.ids.uid, setup.ids.gid));
    // As the workload: the init (without CAP_DAC_OVERRIDE) may not enter
    // the workload's own 0700 work dir.
    step(
        setup,
        nix::unistd::chdir(&setup.work_dir).map_err(fail("chdir to the work dir")),
    );
}

/// A tty exec: opens its terminal as the workload, sends the master to the
/// init and makes the slave the exec's stdio.
fn take_terminal(setup: &mut ExecSetup, size: TtySize) {
    // Opened as the workload, so the terminal belongs to its uid and
    // gid; before Landlock and seccomp. The master goes to the init now,
    // while this process is the only one holding it.
    let opened = pty::open(size).map_err(fail("open the exec's terminal"));
    let (master, slave) = match opened {
        Ok(pair) => pair,
        Err(f) => refuse_exec(setup, f),
    };
    let sent = match setup.master_to.take() {
        Some(to) => fdpass::send(&to, &(), &[master.as_fd()]),
        None => Err(std::io::Error::other("no channel to the init")),
    };
    drop(master);
    let stdio = sent
        .and_then(|()| Ok((slave.try_clone()?, slave.try_clone()?, slave)))
        .map_err(fail("hand over the exec's terminal"));
    match stdio {
        Ok((i, o, e)) => {
            setup.stdin = Some(i);
            setup.stdout = Some(o);
            setup.stderr = Some(e);
        }
        Err(f) => refuse_exec(setup, f),
    }
}

/// The command (child of the exec's PID 1): confined, it waits at the gate
/// until PID 1 is confined too, then takes its stdio and starts.
fn run_command(mut setup: ExecSetup, gate_r: OwnedFd) -> ! {
    step(&setup, oom_first());
    confine_exec(&mut setup);
    let mut opened = [0u8; 1];
    if !matches!(rustix::io::read(&gate_r, &mut opened), Ok(1)) {
        // PID 1 failed to confine itself and reported why.
        std::process::exit(SETUP_FAILED);
    }
    drop(gate_r);
    if let Some(order) = setup.order.take() {
        take_order(&mut setup, &order);
    }
    if let (Some(_), Some(slave)) = (setup.tty, &setup.stdin) {
        step(
            &setup,
            pty::take_as_controlling(slave).map_err(fail("controlling terminal")),
        );
    }
    let dup = match (&setup.stdin, &setup.stdout, &setup.stderr) {
        (Some(i), Some(o), Some(e)) => nix::unistd::dup2_stdin(i)
            .and_then(|()| nix::unistd::dup2_stdout(o))
            .and_then(|()| nix::unistd::dup2_stderr(e))
            .map_err(fail("stdio")),
        _ => Err(fail("stdio")("missing descriptors")),
    };
    step(&setup, dup);
    let err = nix::unistd::execve(&setup.program, &setup.argv, &setup.env);
    let e = match err {
        Err(e) => e,
        Ok(never) => match never {},
    };
    refuse_exec(
        &setup,
        fail("exec")(format!(
            "starting `{}`: {e}",
            setup.program.to_string_lossy()
        )),
    )
}

/// A spare's command, confined: waits for what to run. The init gone
/// (the sandbox ends) is the end of it, quietly.
fn take_order(setup: &mut ExecSetup, from: &OwnedFd) {
    let (order, fds) = match fdpass::recv::<Order>(from) {
        Ok(Some(got)) => got,
        Ok(None) | Err(_) => std::process::exit(SETUP_FAILED),
    };
    let mut fds = fds.into_iter();
    let (Some(i), Some(o), Some(e), Some(errors), None) =
        (fds.next(), fds.next(), fds.next(), fds.next(), fds.next())
    else {
        std::process::exit(SETUP_FAILED)
    };
    setup.errors = errors;
    setup.stdin = Some(i);
    setup.stdout = Some(o);
    setup.stderr = Some(e);
    let cstr = |s: &str| CString::new(s).map_err(fail("the order"));
    let program = order
        .argv
        .first()
        .map_or(Err(fail("the order")("no command")), |p| cstr(p));
    let argv = order
        .argv
        .iter()
        .map(|a| cstr(a))
        .collect::<Result<Vec<_>, _>>();
    let env = order
        .env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>();
    match (program, argv, env) {
        (Ok(p), Ok(a), Ok(e)) => {
            setup.program = p;
            setup.argv = a;
            setup.env = e;
        }
        (Err(f), _, _) | (_, Err(f), _) | (_, _, Err(f)) => refuse_exec(setup, f),
    }
}

/// The exec's PID 1 once the command is forked: confines itself, opens the
/// gate, reaps until the command ends and writes how it ended to `status`.
fn reap_command(
    mut setup: ExecSetup,
    child: nix::unistd::Pid,
    gate_w: OwnedFd,
    status: OwnedFd,
) -> ! {
    confine_exec(&mut setup);
    step(
        &setup,
        rustix::io::write(&gate_w, &[1])
            .map(drop)
            .map_err(fail("open the command's gate")),
    );
    drop(gate_w);
    drop(setup);
    // Reap everything; the exec ends when the command does, and the
    // kernel kills what is left when this PID 1 exits.
    let ended = loop {
        match waitpid(None, None) {
            Ok(s) if s.pid() == Some(child) => {
                if let Some(t) = wait_status(s) {
                    break t;
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break Termination::Exited(SETUP_FAILED),
        }
    };
    let _ = rustix::io::write(&status, &encode(ended));
    std::process::exit(0)
}
