//! The two kits every backend must pass — files-out conformance and
//! escape — run against any registered backend, through a real sandbox
//! built as a host builds one: a registration, a setup with a scratch work
//! dir, the host assembly's router, an acquire. A backend is attacked by
//! registering it; nothing here names one.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_kits::conformance::{run_files_out_conformance, PosixGuestSubject, Report};
use cordon_kits::escape::{
    bounded_ask, run_escape_cases, run_escape_suite, DeniedPrefix, DeniedProgram, EscapeHost,
    EscapeSubject,
};
use cordon_policy::{Identity, Policy};
use cordon_sandbox::{
    BackendRegistration, BackendSetup, CallerContext, Capability, Registry, SandboxSpec,
    WorkDirView,
};

use crate::assembly::{Host, HostSetup};
use crate::config::{Floor, FloorSource};

/// Why a kit could not attack a backend.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// No backend of that name is registered.
    #[error("{0}")]
    Unknown(String),
    /// It cannot be attacked here: not built, not runnable on this machine,
    /// or its sandbox did not start.
    #[error("{0}")]
    Unavailable(String),
}

/// What a kit run produced.
pub enum KitRun<R> {
    /// The report of every case run.
    Report {
        backend: String,
        rung: String,
        report: R,
    },
    /// The backend does not serve what the kit attacks (said why).
    Skipped(String),
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(base: &Path, kit: &str) -> Result<Scratch, KitError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let root = base.join(format!("cordon-{kit}-{}-{stamp}", std::process::id()));
        std::fs::create_dir(&root).map_err(|e| {
            KitError::Unavailable(format!(
                "cannot make the scratch directory `{}`: {e}; pass `--scratch DIR` with a writable directory",
                root.display()
            ))
        })?;
        // A filesystem of its own no larger than any `max_disk` the kits'
        // policies leave at its default: an operator's work dir is taken
        // only on a filesystem the bound can hold. Without it (not root)
        // the backend refuses the work dir and says why.
        let _ = rustix::mount::mount(
            "tmpfs",
            &root,
            "tmpfs",
            rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
            Some(c"mode=0755,size=256m"),
        );
        Ok(Scratch(root))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(
                "could not remove the scratch directory `{}`: {e}",
                self.0.display()
            );
        }
    }
}

/// A directory for the sandbox, owned as the backend requires, mode 0700.
fn owned_dir(p: &Path, owner: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir(p)?;
    if let Some(id) = owner {
        std::os::unix::fs::chown(p, Some(id), Some(id))?;
    }
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))
}

/// The kit's caller: scope = the kit, an attested identity in the
/// namespace named after the kit.
fn caller(kit: &'static str, thread: &'static str) -> CallerContext {
    CallerContext::new(
        move || kit.to_string(),
        move || thread.to_string(),
        || "kit".to_string(),
        move || Identity {
            namespace: kit.into(),
            attested: true,
            ..Identity::default()
        },
    )
}

/// The registration `name`, runnable here, or why not.
fn target<'r>(
    registry: &'r Registry,
    name: &str,
    setup: &BackendSetup,
) -> Result<&'r BackendRegistration, KitError> {
    let reg = registry.require(name).map_err(KitError::Unknown)?;
    if reg.build.is_none() {
        return Err(KitError::Unavailable(format!(
            "backend `{name}` is not built in this version of cordon, so no instance of it can be attacked; `cordon doctor` shows what is built"
        )));
    }
    let p = (reg.probe)(setup);
    if !p.runnable {
        return Err(KitError::Unavailable(format!(
            "backend `{name}` cannot run on this machine: {}; `cordon doctor` shows what is missing",
            p.found.join("; ")
        )));
    }
    Ok(reg)
}

/// A host over exactly `reg`, floor = its own rung, under `policy_text`,
/// serving `work`.
fn host_for(
    registry: &Registry,
    reg: &BackendRegistration,
    setup: &BackendSetup,
    work: &Path,
    policy_name: &str,
    policy_text: &str,
    proxied_in: Option<&Path>,
) -> Result<Host, KitError> {
    let mut backends = setup.clone();
    // A sandbox with a route has an egress proxy, a process of its own that
    // loads the policy from a file and checks it is the owner's: the
    // policy is written to `proxied_in` and loaded from there by both.
    let policy = match proxied_in {
        Some(dir) => {
            let file = dir.join(policy_name);
            std::fs::write(&file, policy_text).map_err(|e| {
                KitError::Unavailable(format!("cannot write `{}`: {e}", file.display()))
            })?;
            backends.egress.policy_file = Some(file.clone());
            Policy::load_file(&file)
        }
        None => Policy::load_str(policy_name, policy_text),
    }
    .map_err(|d| KitError::Unavailable(d.render()))?;
    // A backend whose work dir lives only in its guest is given none: the
    // kit plants through the sandbox itself there.
    backends.work_dir = (reg.work_dir_view != WorkDirView::GuestOnly).then(|| work.to_path_buf());
    let hs = HostSetup {
        floor: Floor {
            rung: reg.info.isolation,
            source: FloorSource::Flag,
        },
        policy_file: None,
        only: Some(reg.name().to_string()),
        order: None,
        backends,
        keep: None,
        secrets: None,
    };
    Host::assemble_with(&hs, registry, Arc::new(policy))
        .map_err(|e| KitError::Unavailable(e.to_string()))
}

/// Where the workload sees its work dir: as the sandbox says (the process
/// rung shows an operator's directory at the path of its idmapped mount),
/// else where the backend's view puts `work`.
fn seen_work_dir(
    sandbox: &dyn cordon_sandbox::Sandbox,
    reg: &BackendRegistration,
    spec: &SandboxSpec,
    work: &Path,
) -> String {
    sandbox
        .host_work_dir()
        .map_or_else(|| guest_work_dir(reg, spec, work), |r| r.guest)
}

/// Where the backend shows `work` to the workload.
fn guest_work_dir(reg: &BackendRegistration, spec: &SandboxSpec, work: &Path) -> String {
    match reg.work_dir_view {
        WorkDirView::SpecPath | WorkDirView::GuestOnly => spec.work_dir().to_string(),
        WorkDirView::HostPath => work.display().to_string(),
    }
}

/// The directory outside the work dir where the conformance kit plants,
/// in a backend whose work dir lives only in its guest.
pub const GUEST_OUTSIDE: &str = "/tmp/cordon-kit-outside";

/// Runs the files-out conformance kit against backend `name` of
/// `registry`, built from `setup` (its `work_dir` is replaced by the kit's
/// scratch work dir under `scratch`, default `/var/tmp`: not under `/tmp`,
/// which a guest may have of its own).
pub fn conformance(
    registry: &Registry,
    name: &str,
    setup: &BackendSetup,
    scratch: Option<PathBuf>,
) -> Result<KitRun<Report>, KitError> {
    let reg = registry.require(name).map_err(KitError::Unknown)?;
    if !reg.info.capabilities.contains(Capability::FilesOut) {
        return Ok(KitRun::Skipped(format!(
            "`{name}` does not serve `files_out`, so there is nothing to attack"
        )));
    }
    let reg = target(registry, name, setup)?;
    let root = Scratch::new(
        &scratch.unwrap_or_else(|| PathBuf::from("/var/tmp")),
        "conformance",
    )?;
    let (work, outside) = (root.0.join("work"), root.0.join("outside"));
    owned_dir(&work, reg.work_dir_owner)
        .and_then(|()| owned_dir(&outside, reg.work_dir_owner))
        .map_err(|e| {
            KitError::Unavailable(format!("cannot prepare `{}`: {e}", root.0.display()))
        })?;
    let host = host_for(
        registry,
        reg,
        setup,
        &work,
        "conformance.yaml",
        &conformance_policy(&root.0),
        None,
    )?;
    let spec = SandboxSpec::new("conformance", "host")
        .map_err(|e| KitError::Unavailable(e.to_string()))?
        .with_requires([Capability::Exec, Capability::FilesIn, Capability::FilesOut]);
    let caller = caller("conformance", "main");
    let sandbox = host
        .router
        .acquire(&caller, &spec)
        .map_err(|e| KitError::Unavailable(e.to_string()))?;
    let seen = seen_work_dir(&*sandbox, reg, &spec, &work);
    let subject = PosixGuestSubject {
        name: name.to_string(),
        sandbox,
        work_dir: seen,
        // In a guest-only backend the host's scratch is out of reach: the
        // directory outside the work dir is the guest's own.
        outside_dir: match reg.work_dir_view {
            WorkDirView::GuestOnly => GUEST_OUTSIDE.to_string(),
            _ => outside.display().to_string(),
        },
        device_nodes: false,
    };
    let report = run_files_out_conformance(Arc::new(subject));
    let _ = host.router.dispose(&caller);
    Ok(KitRun::Report {
        backend: name.to_string(),
        rung: reg.info.isolation.to_string(),
        report,
    })
}

/// Runs the escape kit (every case, or `cases`) against backend `name` of
/// `registry`, as [`conformance`] does. The `host-environment` case needs
/// [`cordon_kits::escape::HOST_ENV_MARKER`] in this process's environment
/// from its start.
pub fn escape(
    registry: &Registry,
    name: &str,
    setup: &BackendSetup,
    scratch: Option<PathBuf>,
    cases: &[String],
) -> Result<KitRun<Report>, KitError> {
    escape_with(registry, name, setup, scratch, cases, false)
}

/// The host name the kit's sandbox may reach with a route
/// ([`escape_with`]): under `.invalid`, which never resolves, so the route
/// exists (the proxy's listener, the backend's route machinery) but
/// nothing is ever dialled through it.
pub const ROUTE_HOST: &str = "kit.invalid";

/// [`escape`], and with `route` the attacked sandbox (not the bounded
/// one) has a route out through cordon's proxy: its spec allows
/// [`ROUTE_HOST`]`:443` and the kit's policy allows that host. Every case
/// then runs against what a backend does to make a route — a listener in
/// the sandbox's network namespace, inet sockets it would otherwise deny,
/// gVisor's host network stack — so a route cannot open what the kit
/// closes.
pub fn escape_with(
    registry: &Registry,
    name: &str,
    setup: &BackendSetup,
    scratch: Option<PathBuf>,
    cases: &[String],
    route: bool,
) -> Result<KitRun<Report>, KitError> {
    let reg = target(registry, name, setup)?;
    let root = Scratch::new(
        &scratch.unwrap_or_else(|| PathBuf::from("/var/tmp")),
        "escape",
    )?;
    let work = root.0.join("work");
    owned_dir(&work, reg.work_dir_owner)
        .map_err(|e| KitError::Unavailable(format!("cannot prepare `{}`: {e}", work.display())))?;
    let denied = DeniedProgram::perl();
    let denied_prefix = DeniedPrefix::coreutils_base();
    let host = host_for(
        registry,
        reg,
        setup,
        &work,
        "escape.yaml",
        &escape_policy(&root.0, &denied.path, &denied_prefix.prefix, route),
        route.then_some(root.0.as_path()),
    )?;
    let unrouted = SandboxSpec::new("escape", "host")
        .map_err(|e| KitError::Unavailable(e.to_string()))?
        .with_requires([Capability::Exec]);
    let bounded_spec = unrouted
        .clone()
        .with_resources(bounded_ask())
        .map_err(|e| KitError::Unavailable(e.to_string()))?;
    let spec = if route {
        let entry = cordon_sandbox::EgressEntry::parse(&format!("{ROUTE_HOST}:443"))
            .map_err(|e| KitError::Unavailable(e.to_string()))?;
        unrouted
            .with_egress_allow([entry])
            .map_err(|e| KitError::Unavailable(e.to_string()))?
    } else {
        unrouted
    };
    let (main, small) = (caller("escape", "main"), caller("escape", "bounded"));
    let acquired = host
        .router
        .acquire(&main, &spec)
        .and_then(|s| host.router.acquire(&small, &bounded_spec).map(|b| (s, b)));
    let result = match acquired {
        Err(e) => Err(KitError::Unavailable(e.to_string())),
        Ok((sandbox, bounded)) => {
            let seen = seen_work_dir(&*sandbox, reg, &spec, &work);
            let subject = EscapeSubject {
                name: name.to_string(),
                isolation: reg.info.isolation,
                sandbox,
                bounded,
                work_dir: seen,
                denied,
                denied_prefix,
                // The kit's host processes run as the workload's own host
                // uid, so no uid check can stop the workload reaching them,
                // only the sandbox. A backend that names no such uid gets
                // this process's own: as strict, since nothing but the
                // boundary stands between the two.
                host: EscapeHost::new(
                    reg.workload_uid
                        .unwrap_or_else(|| rustix::process::geteuid().as_raw()),
                ),
            };
            let report = if cases.is_empty() {
                run_escape_suite(&subject)
            } else {
                let names: Vec<&str> = cases.iter().map(String::as_str).collect();
                run_escape_cases(&subject, &names)
            };
            Ok(KitRun::Report {
                backend: name.to_string(),
                rung: reg.info.isolation.to_string(),
                report,
            })
        }
    };
    let _ = host.router.dispose(&main);
    let _ = host.router.dispose(&small);
    result
}

/// The policy the kit runs under: system directories to run `sh` and
/// its tools, and the scratch root read-write — the work dir, the
/// directory outside it where the kit plants what a link must not
/// reach, and (at the process rung) the sandbox's temporary directory.
fn conformance_policy(scratch: &Path) -> String {
    format!(
        r#"policy:
  storage:
    allow:
      - name: system
        when: (path.startsWith("/usr/") || path.startsWith("/lib/") || path.startsWith("/lib64/") || path.startsWith("/bin/") || path.startsWith("/sbin/")) && mode != "write"
      - name: config
        when: path.startsWith("/etc/") && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode != "execute"
      - name: scratch
        when: path.startsWith("{}/") && mode != "execute"
      - name: tmp
        when: path.startsWith("/tmp/") && mode != "execute"
  compute:
    allow:
      - name: programs
        when: command.startsWith("/usr/")
"#,
        scratch.display()
    )
}

/// `cordon:default` (what a newcomer's `cordon run` gets), written out
/// rather than extended (a policy that extends another can only narrow it),
/// with three changes: a deny of the kit's denied program by its one path
/// (its other names, hard links such as `perl5.36.0`, must be denied with
/// it: the kit tries them), a deny of a literal prefix (the programs it
/// names must be found and denied, not the deny refused) — and the scratch
/// root read-write: it holds only the work dir and, at the process rung,
/// the sandbox's temporary directory (made beside the work dir), which the
/// launcher gives the workload read-write anyway.
fn escape_policy(scratch: &Path, denied: &str, prefix: &str, route: bool) -> String {
    let egress = if route {
        format!("    allow:\n      - name: the-kit-route\n        when: host == {ROUTE_HOST:?}\n")
    } else {
        "    allow: []\n".to_string()
    };
    format!(
        r#"policy:
  compute:
    allow:
      - name: system-programs
        when: >-
          command.startsWith("/usr/") || command.startsWith("/bin/") ||
          command.startsWith("/sbin/") || command.startsWith("/lib/") ||
          command.startsWith("/lib64/")
    deny:
      - name: no-perl
        when: command == {denied:?}
      - name: no-prefix
        when: command.startsWith({prefix:?})
      - name: no-privilege-tools
        when: >-
          command in ["/usr/bin/sudo", "/bin/sudo", "/usr/bin/su", "/bin/su",
          "/usr/bin/doas", "/usr/bin/pkexec", "/usr/sbin/visudo"]
    max_memory: 512MiB
    max_processes: 64
    max_cpu_seconds: 60
    max_wall_seconds: 300
  storage:
    allow:
      - name: system-read-execute
        when: >-
          (path.startsWith("/usr/") || path.startsWith("/lib/") ||
          path.startsWith("/lib64/") || path.startsWith("/bin/") ||
          path.startsWith("/sbin/")) && mode in ["read", "execute"]
      - name: etc-read
        when: path.startsWith("/etc/") && mode == "read"
      - name: work-dir
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: scratch
        when: path.startsWith("{}/") && mode in ["read", "write"]
      - name: private-tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
      - name: devices
        when: >-
          path in ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
          && mode in ["read", "write"]
    deny:
      - name: host-secrets
        when: >-
          path in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"] ||
          path.startsWith("/etc/sudoers.d/") || path.startsWith("/etc/ssh/") ||
          path.startsWith("/etc/ssl/private/")
  egress:
{egress}  secret:
    allow: []
"#,
        scratch.display()
    )
}
