//! The init program: the code that runs between the owner and the workload.
//!
//! ```text
//! owner (host root, the embedding process)
//!  └─ init stage 1 (host root)      --cordon-stage=1   container rung
//!      └─ init stage 2 (PID 1)      --cordon-stage=2
//!          └─ workload
//!  └─ init (host root → host_uid)  --cordon-stage=process → exec → workload
//! ```
//!
//! The plan arrives on an inherited pipe (never argv or env). Every setup
//! failure is reported on the report pipe as [`Report::Failed`] and the init
//! exits non-zero: nothing of the workload runs.

use std::fs::File;
use std::io::{BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, RawFd};
use std::process::{Command, ExitStatus, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sched::{unshare, CloneFlags};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};

use super::proto::{self, Control, Report};
pub(crate) use super::setup::SETUP_FAILED;
use super::setup::{die_with_parent, drop_privileges, fail, rlimits, Failure};
use super::{cgroup, fs_rules, rootfs, seccomp};
use crate::fdpass;
use crate::outcome::Termination;
use crate::plan::{Plan, Rung};

pub(crate) const ARG_PLAN_FD: &str = "--cordon-plan-fd=";
pub(crate) const ARG_REPORT_FD: &str = "--cordon-report-fd=";
pub(crate) const ARG_STAGE: &str = "--cordon-stage=";
/// Warm sandboxes: the control socket (exec requests in, events out).
pub(crate) const ARG_CONTROL_FD: &str = "--cordon-control-fd=";
/// One-shot container runs with a proxy port: the socket stage 1 hands the
/// proxy listener to the owner on (see [`super::proxy`]).
pub(crate) const ARG_HANDOVER_FD: &str = "--cordon-handover-fd=";
/// The launcher's build of the init protocol ([`INIT_BUILD`]); an init
/// program built from other sources refuses to run.
pub(crate) const ARG_BUILD: &str = "--cordon-build=";

/// This build of the init protocol: the crate's version and a hash of its
/// sources (see `build.rs`).
pub const INIT_BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "-", env!("CORDON_LINUX_BUILD"));

struct Args {
    plan_fd: RawFd,
    report_fd: RawFd,
    control_fd: Option<RawFd>,
    handover_fd: Option<RawFd>,
    stage: String,
    build: Option<String>,
    /// Everything else (e.g. the host binary's hidden subcommand), kept so
    /// stage 1 can start stage 2 the same way it was started.
    prefix: Vec<std::ffi::OsString>,
}

fn parse_args() -> Option<Args> {
    let mut plan_fd = None;
    let mut report_fd = None;
    let mut stage = None;
    let mut control_fd = None;
    let mut handover_fd = None;
    let mut build = None;
    let mut prefix = Vec::new();
    for arg in std::env::args_os().skip(1) {
        let s = arg.to_string_lossy();
        if let Some(v) = s.strip_prefix(ARG_PLAN_FD) {
            plan_fd = v.parse().ok();
        } else if let Some(v) = s.strip_prefix(ARG_REPORT_FD) {
            report_fd = v.parse().ok();
        } else if let Some(v) = s.strip_prefix(ARG_CONTROL_FD) {
            control_fd = Some(v.parse().ok()?);
        } else if let Some(v) = s.strip_prefix(ARG_HANDOVER_FD) {
            handover_fd = Some(v.parse().ok()?);
        } else if let Some(v) = s.strip_prefix(ARG_STAGE) {
            stage = Some(v.to_string());
        } else if let Some(v) = s.strip_prefix(ARG_BUILD) {
            build = Some(v.to_string());
        } else {
            prefix.push(arg);
        }
    }
    Some(Args {
        plan_fd: plan_fd?,
        report_fd: report_fd?,
        control_fd,
        handover_fd,
        stage: stage?,
        build,
        prefix,
    })
}

/// Takes ownership of the inherited descriptors `fds`, and marks every other
/// descriptor above stderr close-on-exec so the workload inherits nothing
/// but stdio.
fn adopt(fds: &[RawFd]) -> Option<Vec<File>> {
    let mut seen = std::collections::BTreeSet::new();
    for &fd in fds {
        // Above stdio, distinct, and open before anything owns them.
        if fd <= 2
            || !seen.insert(fd)
            || !std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists()
        {
            return None;
        }
    }
    #[expect(unsafe_code, reason = "adopting the descriptors the launcher passed")]
    // SAFETY: the launcher passed these numbers; they were checked open just
    // above, are distinct, are not stdio, and nothing else in this freshly
    // started process owns them (this runs first thing in `init_main`).
    let files: Vec<File> = fds
        .iter()
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect();
    #[expect(
        unsafe_code,
        reason = "close_range has no safe wrapper in nix or rustix"
    )]
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing now; it only
    // sets FD_CLOEXEC on every descriptor from 3 up, so no owned descriptor
    // is invalidated. Arguments are plain integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc != 0 {
        return None;
    }
    Some(files)
}

fn inheritable(fd: &impl std::os::fd::AsFd) -> nix::Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map(drop)
}

/// The hidden entry point. The host binary calls this when started with
/// the init arguments; it never returns.
pub fn init_main() -> ! {
    let Some(args) = parse_args() else {
        eprintln!(
            "cordon init: started without the launcher's arguments; this entry point is internal"
        );
        std::process::exit(2);
    };
    let mut fds = vec![args.plan_fd, args.report_fd];
    fds.extend(args.control_fd);
    fds.extend(args.handover_fd);
    let Some(mut files) = adopt(&fds) else {
        eprintln!("cordon init: the launcher's descriptors are not usable");
        std::process::exit(2);
    };
    let handover = args.handover_fd.and_then(|_| files.pop());
    let control = args.control_fd.and_then(|_| files.pop());
    let mut report = files.remove(1);
    let mut plan_in = BufReader::new(files.remove(0));
    let result = match proto::recv::<Control>(&mut plan_in) {
        _ if args.build.as_deref() != Some(INIT_BUILD) => Err(Failure {
            step: "init program",
            error: format!(
                "`{}` is built from other sources than this cordon (its build {INIT_BUILD}, the launcher's {}); install cordon and cordon-init together (`cargo install` installs both)",
                std::env::current_exe().unwrap_or_default().display(),
                args.build.as_deref().unwrap_or("not given"),
            ),
        }),
        Ok(Some(Control::Plan(_))) if handover.is_some() && args.stage != "1" => Err(Failure {
            step: "arguments",
            error: format!("a handover socket is for stage 1, not `{}`", args.stage),
        }),
        Ok(Some(Control::Plan(plan))) => match (args.stage.as_str(), control) {
            ("1", None) => stage1(
                &plan,
                &mut plan_in,
                &mut report,
                &args.prefix,
                Stage1Channel::OneShot(handover),
            ),
            ("2", None) => stage2(&plan, &mut report),
            ("warm1", Some(control)) => stage1(
                &plan,
                &mut plan_in,
                &mut report,
                &args.prefix,
                Stage1Channel::Warm(control),
            ),
            ("warm2", Some(control)) => super::warm_init::serve(&plan, &mut report, control),
            ("process", None) => process(&plan, &mut plan_in, &mut report),
            (other, control) => Err(Failure {
                step: "arguments",
                error: format!(
                    "unknown stage `{other}` (control socket given: {})",
                    control.is_some()
                ),
            }),
        },
        Ok(_) => Err(Failure {
            step: "read plan",
            error: "no plan on the plan pipe".into(),
        }),
        Err(e) => Err(fail("read plan")(e)),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            let _ = proto::send(
                &mut report,
                &Report::Failed {
                    step: f.step.to_string(),
                    error: f.error,
                },
            );
            std::process::exit(SETUP_FAILED);
        }
    }
}

/// The first thing stage 1 and the process-rung init do: join the sandbox
/// cgroup as the owner says (see [`Control::Join`]). Nothing else has run
/// yet, and this process is still single-threaded.
fn join_cgroup(plan_in: &mut BufReader<File>) -> Result<(), Failure> {
    match proto::recv::<Control>(plan_in) {
        Ok(Some(Control::Join(files))) => cgroup::join_self(&files).map_err(fail("join cgroup")),
        other => Err(fail("join cgroup")(format!(
            "expected the cgroup to join, got {other:?}"
        ))),
    }
}

const STAGE2_CAPS: &[caps::Capability] = &[
    caps::Capability::CAP_SYS_ADMIN,
    caps::Capability::CAP_SETUID,
    caps::Capability::CAP_SETGID,
    caps::Capability::CAP_SETPCAP,
];

/// Stage 1's socket to the owner.
enum Stage1Channel {
    /// A one-shot run: the handover socket, given with a proxy port only.
    OneShot(Option<File>),
    /// A warm sandbox: the control socket, which stage 2 inherits.
    Warm(File),
}

/// With a proxy port: inside the new network namespace, with the
/// capabilities `unshare` gave over it, and before stage 2 exists (so
/// before any Landlock, seccomp or workload): brings `lo` up, listens on
/// `127.0.0.1:port`, sends the listener to the owner on `to` and closes
/// this process's copy. Without: nothing (a handover socket is an error).
fn hand_over_proxy_listener(plan: &Plan, to: Option<&File>) -> Result<(), Failure> {
    let (port, to) = match (plan.proxy_port(), to) {
        (None, None) => return Ok(()),
        (Some(port), Some(to)) => (port, to),
        (port, _) => {
            return Err(fail("proxy listener")(format!(
                "proxy port {port:?} without a socket to the owner, or the reverse"
            )))
        }
    };
    let listener = super::proxy::listen(port).map_err(fail("proxy listener"))?;
    fdpass::send(
        to,
        &proto::Handover::ProxyListener { port },
        &[listener.as_fd()],
    )
    .map_err(fail("hand over the proxy listener"))?;
    drop(listener);
    Ok(())
}

/// Stage 1 (container rung): host root, in the owner's cgroup. Drops
/// supplementary groups, unshares every namespace, waits for the owner to
/// write the id maps, hands over the proxy listener (if the plan names a
/// port), and starts stage 2 as PID 1 of the new pid namespace.
fn stage1(
    plan: &Plan,
    plan_in: &mut BufReader<File>,
    report: &mut File,
    prefix: &[std::ffi::OsString],
    channel: Stage1Channel,
) -> Result<i32, Failure> {
    let owner = nix::unistd::getppid();
    join_cgroup(plan_in)?;
    die_with_parent(Some(owner))?;
    if plan.rung() != Rung::Container {
        return Err(fail("stage 1")("stage 1 is for the container rung"));
    }
    // Host groups (root's gid 0) must go before the user namespace denies setgroups.
    nix::unistd::setgroups(&[]).map_err(fail("setgroups"))?;
    unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWCGROUP,
    )
    .map_err(fail("unshare namespaces"))?;
    proto::send(report, &Report::Unshared).map_err(fail("report"))?;
    match proto::recv::<Control>(plan_in) {
        Ok(Some(Control::Mapped)) => {}
        other => return Err(fail("wait for id maps")(format!("{other:?}"))),
    }
    let control = match channel {
        Stage1Channel::OneShot(handover) => {
            // Dropped here: stage 2 never holds the handover socket.
            hand_over_proxy_listener(plan, handover.as_ref())?;
            None
        }
        Stage1Channel::Warm(control) => {
            let to = plan.proxy_port().map(|_| &control);
            hand_over_proxy_listener(plan, to)?;
            Some(control)
        }
    };
    if control.is_some() {
        // A warm init runs as the namespace's root (a host uid of its own,
        // not the workload's), so exec gives it the namespace's full
        // capability set; it drops what it does not need once the root is
        // built.
        let root_gid = Gid::from_raw(0);
        let root_uid = Uid::from_raw(0);
        nix::unistd::setresgid(root_gid, root_gid, root_gid).map_err(fail("setresgid"))?;
        nix::unistd::setresuid(root_uid, root_uid, root_uid).map_err(fail("setresuid"))?;
    } else {
        // Stage 2 must keep the capabilities it needs to build the root
        // across exec (its uid is not root inside the namespace): ambient set.
        for &cap in STAGE2_CAPS {
            caps::raise(None, caps::CapSet::Inheritable, cap).map_err(fail("raise inheritable"))?;
            caps::raise(None, caps::CapSet::Ambient, cap).map_err(fail("raise ambient"))?;
        }
    }
    // Credentials changed (unshare, capset): arm the parent-death signal again.
    die_with_parent(Some(owner))?;

    let (from_stage1, to_stage2) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(fail("pipe"))?;
    inheritable(&from_stage1).map_err(fail("pipe"))?;
    inheritable(report).map_err(fail("pipe"))?;
    let mut stage2 = Command::new("/proc/self/exe");
    stage2
        .args(prefix)
        .arg(format!("{ARG_PLAN_FD}{}", from_stage1.as_raw_fd()))
        .arg(format!("{ARG_REPORT_FD}{}", report.as_raw_fd()))
        .arg(format!("{ARG_BUILD}{INIT_BUILD}"))
        .env_clear();
    match &control {
        Some(control) => {
            inheritable(control).map_err(fail("pipe"))?;
            stage2
                .arg(format!("{ARG_CONTROL_FD}{}", control.as_raw_fd()))
                .arg(format!("{ARG_STAGE}warm2"));
        }
        None => {
            stage2.arg(format!("{ARG_STAGE}2"));
        }
    }
    let child = stage2.spawn().map_err(fail("start stage 2"))?;
    drop(from_stage1);
    drop(control);
    let mut to_stage2 = File::from(to_stage2);
    proto::send(&mut to_stage2, &Control::Plan(Box::new(plan.clone())))
        .map_err(fail("send plan"))?;
    drop(to_stage2);
    let mut child = child;
    let status = child.wait().map_err(fail("wait for stage 2"))?;
    Ok(status.code().unwrap_or(SETUP_FAILED))
}

fn workload(plan: &Plan) -> Command {
    let argv = plan.argv();
    if argv.is_empty() {
        // Refused by the launcher; never index an empty argv.
        return Command::new("/nonexistent/cordon-empty-argv");
    }
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(plan.env())
        .current_dir(plan.work_dir())
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    if plan.rung() == Rung::Process {
        cmd.env("TMPDIR", fs_rules::tmp_dir(plan));
    }
    cmd
}

/// Stage 2 (container rung): PID 1 of the new pid namespace, with the
/// capabilities stage 1 passed in the ambient set. Builds and enters the new
/// root, drops everything, applies Landlock and seccomp, runs the workload as
/// its child and reaps until the workload ends.
fn stage2(plan: &Plan, report: &mut File) -> Result<i32, Failure> {
    let ids = plan.ids();
    // Files this stage creates (mount points, masks) need an owner that is
    // mapped in the namespace: the workload's ids, not host root's.
    nix::unistd::setfsgid(Gid::from_raw(ids.gid));
    nix::unistd::setfsuid(Uid::from_raw(ids.uid));
    let rules = fs_rules::effective(plan);
    rootfs::enter(plan, &rules, false).map_err(fail("build root"))?;
    nix::unistd::sethostname("cordon").map_err(fail("sethostname"))?;
    nix::unistd::setsid().map_err(fail("setsid"))?;
    drop_privileges(ids.uid, ids.gid)?;
    rlimits(plan)?;
    die_with_parent(None)?;
    prctl::set_no_new_privs().map_err(fail("no_new_privs"))?;
    fs_rules::restrict(plan, &rules).map_err(fail("landlock"))?;
    seccomp::install(Rung::Container).map_err(fail("seccomp"))?;
    proto::send(report, &Report::Started).map_err(fail("report"))?;
    // PID 1 reaps every orphan; the run ends when the first process does,
    // and whatever it left behind dies with this namespace.
    let termination = run_and_reap(plan)?;
    proto::send(report, &Report::Exited(termination)).map_err(fail("report"))?;
    let _ = report.flush();
    Ok(0)
}

/// Starts the workload as our child and reaps every process that ends
/// (orphans included: we are PID 1 or a subreaper) until the workload's
/// first process does; returns how it ended.
fn run_and_reap(plan: &Plan) -> Result<Termination, Failure> {
    let child = workload(plan).spawn().map_err(fail("start workload"))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(fail("start workload"))?);
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(p, code)) if p == pid => return Ok(Termination::Exited(code)),
            Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                return Ok(Termination::Signaled(sig as i32))
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(fail("wait for workload")(e)),
        }
    }
}

/// The process rung's namespaces, made while still host root. System V
/// IPC and the network of its own: the workload neither reaches the
/// host's (or another sandbox's) segments, queues and semaphores nor
/// leaves any behind (the namespace and all it holds go with its last
/// process), and its `/proc/net` tables are its own empty ones (the
/// network has no route either way: seccomp refuses sockets here). A mount
/// namespace only to give it a `/proc` with `hidepid=invisible`: the same
/// host filesystem (host mounts still propagate in, none of ours out), but
/// processes of other uids are not listed, so neither `/proc/1/net/tcp`
/// (the host's network namespace seen through its init) nor
/// `/proc/1/mountinfo`, environments or command lines of the host's
/// processes can be read. Needs Linux 5.8 (per-mount proc options); the
/// rung's Landlock ABI 6 means 6.12 already.
fn process_namespaces() -> Result<(), Failure> {
    use nix::mount::{mount, MsFlags};
    unshare(CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
        .map_err(fail("unshare ipc, net and mount namespaces"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(fail("make the mount namespace a slave"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("hidepid=invisible"),
    )
    .map_err(fail("mount /proc with hidepid"))?;
    Ok(())
}

/// The sandbox's secrets directory at the process rung: bound read-only,
/// never executable, at [`crate::plan::SECRETS_AT`] in its own mount
/// namespace (a slave: nothing propagates back to the host, so no other
/// sandbox sees it), while still host root. Its parent `/run/cordon` (on
/// the host: root's own, mode 0700, the owner made it; often cordon's
/// state directory) is covered first by a small tmpfs of this namespace
/// holding only the mount point, so the workload can reach its secrets and
/// sees nothing of the host's `/run/cordon`. Nothing is reached through a
/// link.
fn process_secrets(plan: &Plan) -> Result<(), Failure> {
    use nix::mount::{mount, MsFlags};
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = plan.secrets_dir() else {
        return Ok(());
    };
    let open = |path: &std::path::Path| {
        rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| Failure {
            step: "secrets",
            error: format!("`{}`: {e}", path.display()),
        })
    };
    let src = open(dir)?;
    let at = std::path::Path::new(crate::plan::SECRETS_AT);
    let parent = at.parent().unwrap_or(at);
    let cover = open(parent)?;
    mount(
        Some("tmpfs"),
        format!("/proc/self/fd/{}", cover.as_raw_fd()).as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=16k"),
    )
    .map_err(fail("cover /run/cordon"))?;
    drop(cover);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(at)
        .map_err(fail("make the secrets mount point"))?;
    let target = open(at)?;
    let src_path = format!("/proc/self/fd/{}", src.as_raw_fd());
    let target_path = format!("/proc/self/fd/{}", target.as_raw_fd());
    mount(
        Some(src_path.as_str()),
        target_path.as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(fail("bind the secrets directory"))?;
    drop((src, target));
    mount(
        None::<&str>,
        at,
        None::<&str>,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(fail("make the secrets directory read-only"))?;
    mount(
        None::<&str>,
        parent,
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(fail("make the cover of /run/cordon read-only"))?;
    Ok(())
}

/// The plan's masks at the process rung, in its own mount namespace (see
/// [`process_namespaces`]) while still host root: an empty mode-000 file
/// bound over each masked file, an empty read-only mode-000 tmpfs over
/// each masked directory — the same as the container rung's, on the
/// host's tree, seen by this sandbox alone. The empty file comes from a
/// scratch tmpfs mounted over the sandbox's temporary directory for the
/// moment and detached after (the binds keep it). Masks are resolved
/// without following any link (the translator gives resolved paths; a
/// link there now means the host changed underneath: refused).
fn process_masks(plan: &Plan) -> Result<(), Failure> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use rustix::fs::{FileType, OFlags, ResolveFlags};
    use std::os::fd::AsRawFd;
    let masks: Vec<&std::path::PathBuf> = plan
        .mask_paths()
        .iter()
        .chain(plan.mask_executables())
        .collect();
    if masks.is_empty() {
        return Ok(());
    }
    let scratch = plan.tmp_dir().ok_or_else(|| Failure {
        step: "masks",
        error: "the process rung has no temporary directory to stage masks in".into(),
    })?;
    let hidden = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700,size=4k"),
    )
    .map_err(fail("mount the masks' scratch tmpfs"))?;
    let empty = scratch.join("empty");
    std::fs::write(&empty, b"").map_err(fail("create the empty mask"))?;
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o000))
        .map_err(fail("create the empty mask"))?;
    // Read-only before anything is bound from it: a bind takes its source
    // mount's flags (the bind's own remount would name the file beneath).
    mount(
        None::<&str>,
        scratch,
        None::<&str>,
        MsFlags::MS_REMOUNT | hidden,
        None::<&str>,
    )
    .map_err(fail("make the masks' scratch tmpfs read-only"))?;
    let empty_fd = rustix::fs::open(
        &empty,
        OFlags::PATH | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(fail("open the empty mask"))?;
    let empty_src = format!("/proc/self/fd/{}", empty_fd.as_raw_fd());
    for m in masks {
        let fd = match rustix::fs::openat2(
            rustix::fs::CWD,
            m.as_path(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            // Nothing there to hide.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                return Err(Failure {
                    step: "resolve mask",
                    error: format!("`{}`: {e}", m.display()),
                })
            }
        };
        let kind = rustix::fs::fstat(&fd)
            .map(|st| FileType::from_raw_mode(st.st_mode))
            .map_err(fail("stat mask"))?;
        let at = format!("/proc/self/fd/{}", fd.as_raw_fd());
        if kind == FileType::Directory {
            mount(
                Some("tmpfs"),
                at.as_str(),
                Some("tmpfs"),
                hidden,
                Some("mode=000,size=4k"),
            )
            .map_err(|e| Failure {
                step: "mask",
                error: format!("`{}`: {e}", m.display()),
            })?;
        } else {
            mount(
                Some(empty_src.as_str()),
                at.as_str(),
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| Failure {
                step: "mask",
                error: format!("`{}`: {e}", m.display()),
            })?;
        }
    }
    drop(empty_fd);
    umount2(scratch, MntFlags::MNT_DETACH).map_err(fail("detach the masks' scratch tmpfs"))?;
    Ok(())
}

/// The process rung: host root until it becomes `host_uid`, then the
/// workload itself (exec), so the owner waits on the workload directly.
fn process(plan: &Plan, plan_in: &mut BufReader<File>, report: &mut File) -> Result<i32, Failure> {
    let owner = nix::unistd::getppid();
    join_cgroup(plan_in)?;
    if plan.rung() != Rung::Process {
        return Err(fail("process init")("this init is for the process rung"));
    }
    // The workload's orphans come to us, not to the host's init: we reap
    // them at once, so none lingers as a zombie counted against the uid's
    // RLIMIT_NPROC after the run.
    prctl::set_child_subreaper(true).map_err(fail("PR_SET_CHILD_SUBREAPER"))?;
    nix::unistd::setsid().map_err(fail("setsid"))?;
    process_namespaces()?;
    process_secrets(plan)?;
    process_masks(plan)?;
    nix::unistd::setgroups(&[]).map_err(fail("setgroups"))?;
    let ids = plan.ids();
    drop_privileges(ids.host_uid, ids.host_gid)?;
    rlimits(plan)?;
    die_with_parent(Some(owner))?;
    prctl::set_no_new_privs().map_err(fail("no_new_privs"))?;
    let rules = fs_rules::effective(plan);
    fs_rules::restrict(plan, &rules).map_err(fail("landlock"))?;
    seccomp::install(Rung::Process).map_err(fail("seccomp"))?;
    // The owner's death must take the workload with it. The death signal
    // does not pass to children, so ours is SIGTERM, taken by a thread that
    // kills everything we may signal and exits. (std gives the workload an
    // empty signal mask.)
    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    term.thread_block().map_err(fail("block SIGTERM"))?;
    prctl::set_pdeathsig(Signal::SIGTERM).map_err(fail("PR_SET_PDEATHSIG"))?;
    if nix::unistd::getppid() != owner {
        return Err(fail("PR_SET_PDEATHSIG")("the owner exited during setup"));
    }
    std::thread::spawn(move || {
        let _ = term.wait();
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
        std::process::exit(SETUP_FAILED);
    });
    proto::send(report, &Report::Started).map_err(fail("report"))?;
    let termination = run_and_reap(plan)?;
    // What the workload left running dies now, and is reaped here. The
    // signal reaches only our own domain (Landlock scoping, required at
    // this rung) and our own uid; the owner also kills the cgroup.
    let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
    // Until ECHILD: nobody left.
    while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(None, None) {}
    proto::send(report, &Report::Exited(termination)).map_err(fail("report"))?;
    let _ = report.flush();
    Ok(0)
}

/// Maps a wait status of the init (process rung: of the workload itself).
pub(crate) fn termination(status: ExitStatus) -> Termination {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Termination::Exited(code),
        (None, Some(sig)) => Termination::Signaled(sig),
        (None, None) => Termination::Signaled(0),
    }
}
