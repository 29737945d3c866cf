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
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use landlock::RulesetCreated;
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use rustix::event::{poll, PollFd, PollFlags};
use seccompiler::BpfProgram;

use super::init::{die_with_parent, drop_privileges, fail, rlimits_for, Failure};
use super::proto::{self, Report, WarmEvent, WarmRequest};
use super::{fs_rules, rootfs, seccomp};
use crate::fdpass;
use crate::outcome::Termination;
use crate::plan::{Plan, Rung};

/// Landlock ABI a warm sandbox needs: 6 scopes signals and abstract unix
/// sockets to each exec's own domain, so concurrent execs cannot reach
/// each other.
pub(crate) const WARM_LANDLOCK_ABI: u8 = 6;

/// What every exec applies; built once.
struct Layers {
    ruleset: RulesetCreated,
    seccomp: std::sync::Arc<Vec<BpfProgram>>,
}

/// The capabilities the init keeps after building the root: what
/// [`drop_privileges`] needs in each exec's child.
const KEEP: &[caps::Capability] = &[
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
    rootfs::enter(plan, &rules).map_err(fail("build root"))?;
    nix::unistd::sethostname("cordon").map_err(fail("sethostname"))?;
    nix::unistd::setsid().map_err(fail("setsid"))?;
    die_with_parent(None)?;
    narrow_init_capabilities()?;
    prctl::set_dumpable(false).map_err(fail("PR_SET_DUMPABLE"))?;
    let layers = Layers {
        ruleset: fs_rules::ruleset(plan, &rules, WARM_LANDLOCK_ABI).map_err(fail("landlock"))?,
        seccomp: std::sync::Arc::new(seccomp::compile(Rung::Container).map_err(fail("seccomp"))?),
    };
    // SIGCHLD arrives on a descriptor, so one poll waits for both requests
    // and children.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block().map_err(fail("block SIGCHLD"))?;
    let children = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(fail("signalfd"))?;
    proto::send(report, &Report::Started).map_err(fail("report"))?;
    let control = OwnedFd::from(control);
    let mut running: HashMap<i32, u64> = HashMap::new();
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
            reap(&control, &mut running);
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
                    },
                    fds,
                ))) => {
                    let event = match spawn_exec(plan, &layers, &argv, &env, joins, fds) {
                        Ok(pid) => {
                            running.insert(pid, id);
                            WarmEvent::Started { id }
                        }
                        Err(error) => WarmEvent::Failed { id, error },
                    };
                    if fdpass::send(&control, &event, &[]).is_err() {
                        return Ok(0);
                    }
                }
                // A malformed request from our own owner: stop serving.
                Err(e) => return Err(fail("control socket")(e)),
            }
        }
    }
}

/// Reaps every child that ended; reports the ones that were an exec's
/// first process. Orphans reparented to PID 1 are reaped silently.
fn reap(control: &OwnedFd, running: &mut HashMap<i32, u64>) {
    loop {
        let (pid, termination) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, code)) => (p, Termination::Exited(code)),
            Ok(WaitStatus::Signaled(p, sig, _)) => (p, Termination::Signaled(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        if let Some(id) = running.remove(&pid.as_raw()) {
            let _ = fdpass::send(control, &WarmEvent::Exited { id, termination }, &[]);
        }
    }
}

/// Starts one exec; returns its pid (in the sandbox's pid namespace).
fn spawn_exec(
    plan: &Plan,
    layers: &Layers,
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    joins: usize,
    mut fds: Vec<OwnedFd>,
) -> Result<i32, String> {
    if fds.len() != 3 + joins {
        return Err(format!(
            "expected {} descriptors (stdio and {joins} cgroup files), got {}",
            3 + joins,
            fds.len()
        ));
    }
    let program = argv
        .first()
        .filter(|p| p.starts_with('/'))
        .ok_or("the command must start with an absolute path")?;
    if argv.iter().any(|a| a.contains('\0'))
        || env
            .iter()
            .any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
    {
        return Err("the command or its environment holds a NUL byte or a bad name".into());
    }
    let join_files: Vec<File> = fds.drain(3..).map(File::from).collect();
    let mut stdio = fds.into_iter();
    let (Some(stdin), Some(stdout), Some(stderr)) = (stdio.next(), stdio.next(), stdio.next())
    else {
        return Err("missing stdio descriptors".into());
    };
    let mut ruleset = Some(
        layers
            .ruleset
            .try_clone()
            .map_err(|e| format!("copying the landlock ruleset: {e}"))?,
    );
    let ids = plan.ids().clone();
    let seccomp = layers.seccomp.clone();
    let bounds = plan.bounds().clone();
    let work_dir = plan.work_dir().to_path_buf();
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    let mut setup = move || -> Result<(), Failure> {
        for mut f in &join_files {
            f.write_all(b"0").map_err(fail("join exec cgroup"))?;
        }
        nix::unistd::setsid().map_err(fail("setsid"))?;
        drop_privileges(ids.uid, ids.gid)?;
        // As the workload: the init (without CAP_DAC_OVERRIDE) may not
        // enter the workload's own 0700 work dir.
        nix::unistd::chdir(&work_dir).map_err(fail("chdir to the work dir"))?;
        rlimits_for(&bounds)?;
        prctl::set_no_new_privs().map_err(fail("no_new_privs"))?;
        let rs = ruleset
            .take()
            .ok_or_else(|| fail("landlock")("the ruleset was already used"))?;
        fs_rules::enforce(rs).map_err(fail("landlock"))?;
        for p in seccomp.iter() {
            seccompiler::apply_filter(p).map_err(fail("seccomp"))?;
        }
        Ok(())
    };
    #[expect(
        unsafe_code,
        reason = "the exec's confinement must be applied between fork and exec"
    )]
    // SAFETY: `pre_exec` runs the closure in the forked child. This process
    // is single-threaded (module invariant), so no lock can be held by a
    // thread that does not exist in the child, and allocation is sound. The
    // closure touches only values it owns or that were fully built before
    // the fork.
    unsafe {
        cmd.pre_exec(move || {
            setup().map_err(|f| {
                // The exec's own stderr (already in place) says why.
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: the sandbox refused to start this command: {}: {}",
                    f.step,
                    f.error
                );
                std::io::Error::from_raw_os_error(libc::EPERM)
            })
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting `{program}`: {e}"))?;
    i32::try_from(child.id()).map_err(|e| e.to_string())
}
