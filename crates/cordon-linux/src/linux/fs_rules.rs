//! The filesystem rules the sandbox holds, and their Landlock form.
//!
//! [`effective`] adds what the launcher itself provides (work dir, temporary
//! directory, the five devices, `/proc`, the `host` image's own `/etc`
//! files) to the plan's rules. The same list
//! drives the container rung's mounts and both rungs' Landlock ruleset.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::plan::{FsRule, Plan, Rung};

/// The devices every sandbox gets (read and write, nothing else).
pub(crate) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Files of `/etc` the `host` image always gets as the sandbox's own
/// (never the host's): its user, its name, its loopback.
pub(crate) const SYNTHESIZED: &[&str] =
    &["/etc/passwd", "/etc/group", "/etc/hostname", "/etc/hosts"];

/// One rule, with whether it is a device node (write means "write the file").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub read: bool,
    pub write: bool,
    pub execute: bool,
    pub device: bool,
    /// Device ioctls (Landlock `IoctlDev`, ABI 5): [`crate::KVM_DEVICE`]
    /// alone has them.
    pub ioctl: bool,
}

impl From<&FsRule> for Rule {
    fn from(r: &FsRule) -> Self {
        Rule {
            path: r.path.clone(),
            read: r.read,
            write: r.write,
            execute: r.execute,
            device: false,
            ioctl: false,
        }
    }
}

/// The tmp directory as the workload sees it.
pub(crate) fn tmp_dir(plan: &Plan) -> PathBuf {
    match plan.rung() {
        Rung::Container => PathBuf::from("/tmp"),
        Rung::Process => plan
            .tmp_dir()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/nonexistent")),
    }
}

/// The plan's rules plus the launcher-provided ones.
pub(crate) fn effective(plan: &Plan) -> Vec<Rule> {
    let mut rules: Vec<Rule> = plan.fs().iter().map(Rule::from).collect();
    let rw = |path: PathBuf| Rule {
        path,
        read: true,
        write: true,
        execute: false,
        device: false,
        ioctl: false,
    };
    rules.push(rw(plan.work_dir().to_path_buf()));
    rules.push(rw(tmp_dir(plan)));
    for d in DEVICES {
        rules.push(Rule {
            path: Path::new("/dev").join(d),
            read: true,
            write: true,
            execute: false,
            device: true,
            ioctl: false,
        });
    }
    if plan.kvm() {
        // Read and write the node, and its ioctls: what a VMM does with it.
        rules.push(Rule {
            path: PathBuf::from(crate::plan::KVM_DEVICE),
            read: true,
            write: true,
            execute: false,
            device: true,
            ioctl: true,
        });
    }
    if plan.rung() == Rung::Container && plan.image_root().is_none() {
        // The `host` image's own /etc files (`rootfs` writes them).
        for f in SYNTHESIZED {
            rules.push(Rule {
                path: PathBuf::from(f),
                read: true,
                write: false,
                execute: false,
                device: false,
                ioctl: false,
            });
        }
    }
    if plan.secrets_dir().is_some() {
        // Read only: the bind is read-only too (the second layer).
        rules.push(Rule {
            path: PathBuf::from(crate::plan::SECRETS_AT),
            read: true,
            write: false,
            execute: false,
            device: false,
            ioctl: false,
        });
    }
    if plan.trust_dir().is_some() {
        // Read only: the bind is read-only too (the second layer).
        rules.push(Rule {
            path: PathBuf::from(crate::plan::TRUST_AT),
            read: true,
            write: false,
            execute: false,
            device: false,
            ioctl: false,
        });
    }
    rules.push(Rule {
        path: PathBuf::from("/proc"),
        read: true,
        write: false,
        execute: false,
        device: false,
        ioctl: false,
    });
    rules
}

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("landlock ABI {found} is below the {needed} the {rung} rung needs")]
    Abi { found: u8, needed: u8, rung: Rung },
    #[error("landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("landlock rule on `{path}`: {source}")]
    Path {
        path: PathBuf,
        source: landlock::PathFdError,
    },
    #[error(
        "landlock ABI {found} has no TCP rules (ABI 4, Linux 6.7, is needed): the workload's TCP could not be held to proxy port {port}, so the sandbox does not start"
    )]
    NoTcpRules { found: u8, port: u16 },
    #[error("landlock reported the ruleset {0:?}, not fully enforced")]
    NotFullyEnforced(String),
}

pub(crate) fn abi_enum(level: u8) -> ABI {
    match level {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// Restricts the calling thread (and everything it starts) to `rules`:
/// filesystem access as listed, no TCP bind, no TCP connect but to the
/// plan's proxy port (if any), and (ABI 6) no
/// signals or abstract unix sockets across the sandbox's boundary. Anything
/// short of fully enforced is an error.
pub(crate) fn restrict(plan: &Plan, rules: &[Rule]) -> Result<(), LandlockError> {
    let needed = match plan.rung() {
        Rung::Container => 4,
        Rung::Process => 6,
    };
    enforce(ruleset(plan, rules, needed)?)
}

/// Applies a ruleset built by [`ruleset`] to the calling thread; anything
/// short of fully enforced is an error.
pub(crate) fn enforce(created: RulesetCreated) -> Result<(), LandlockError> {
    let status = created.restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(LandlockError::NotFullyEnforced(format!("{status:?}")));
    }
    Ok(())
}

/// Adds read access to the `/proc` mounted now (a warm exec mounts its own
/// after the init built the ruleset, and a rule names a mount, not a path).
pub(crate) fn add_proc(created: RulesetCreated) -> Result<RulesetCreated, LandlockError> {
    let abi = abi_enum(super::probe::landlock_abi());
    let path = Path::new("/proc");
    let fd = PathFd::new(path).map_err(|source| LandlockError::Path {
        path: path.to_path_buf(),
        source,
    })?;
    let access = (AccessFs::ReadFile | AccessFs::ReadDir) & AccessFs::from_all(abi);
    Ok(created.add_rule(PathBeneath::new(fd, access))?)
}

/// Adds what a tty exec needs of its terminal, on the paths mounted now:
/// its own devpts instance at `/dev/pts` (list it; read, write and device
/// ioctls on the terminals in it, so a command that reopens its terminal or
/// opens another through `/dev/ptmx` can set it up), and `/dev/tty`, which
/// only ever opens the caller's own controlling terminal. Nothing else of
/// `/dev`. `TIOCSTI` and `TIOCLINUX` stay refused by seccomp.
pub(crate) fn add_tty(created: RulesetCreated) -> Result<RulesetCreated, LandlockError> {
    let abi = abi_enum(super::probe::landlock_abi());
    let tty = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let mut created = created;
    for (path, access) in [
        (Path::new(super::pty::DEVPTS), tty | AccessFs::ReadDir),
        (Path::new("/dev/tty"), tty),
    ] {
        if path == Path::new("/dev/tty") && !path.exists() {
            continue; // the host has none to bind; the terminal is on 0/1/2
        }
        let fd = PathFd::new(path).map_err(|source| LandlockError::Path {
            path: path.to_path_buf(),
            source,
        })?;
        created = created.add_rule(PathBeneath::new(fd, access & AccessFs::from_all(abi)))?;
    }
    Ok(created)
}

/// The Landlock ruleset for `rules`, built but not applied, refusing a
/// kernel below ABI `needed`. A warm sandbox's init builds it once and each
/// exec applies a copy, so every exec gets a domain of its own.
pub(crate) fn ruleset(
    plan: &Plan,
    rules: &[Rule],
    needed: u8,
) -> Result<RulesetCreated, LandlockError> {
    let found = super::probe::landlock_abi();
    if let Some(port) = plan.proxy_port() {
        // Without TCP rules the one allowed port cannot be told from the
        // rest: never run with TCP unconfined.
        if found < 4 {
            return Err(LandlockError::NoTcpRules { found, port });
        }
    }
    if found < needed {
        return Err(LandlockError::Abi {
            found,
            needed,
            rung: plan.rung(),
        });
    }
    let abi = abi_enum(found);
    let all = AccessFs::from_all(abi);
    let file_only = AccessFs::from_file(abi);
    // TCP: connect is always handled (only the proxy's port granted);
    // bind is left unhandled only where the plan lets the workload listen
    // in its own namespace (`listen`: a server the host reaches through
    // cordon; the namespace has no route out).
    let net = if plan.listen() {
        BitFlags::from(AccessNet::ConnectTcp)
    } else {
        AccessNet::from_all(abi)
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)?
        .handle_access(net)?;
    if found >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    if let Some(port) = plan.proxy_port() {
        // Connect only, to this port only; BindTcp stays handled and
        // ungranted.
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    for rule in rules {
        let Ok(meta) = std::fs::metadata(&rule.path) else {
            // A grant on a path that does not exist grants nothing.
            continue;
        };
        let mut access: BitFlags<AccessFs> = BitFlags::EMPTY;
        if rule.read {
            access |= AccessFs::ReadFile | AccessFs::ReadDir;
        }
        if rule.write {
            access |= if rule.device {
                AccessFs::WriteFile.into()
            } else {
                AccessFs::from_write(abi)
            };
        }
        if rule.execute {
            access |= AccessFs::Execute;
        }
        if rule.ioctl {
            // Below ABI 5 device ioctls are not handled at all (the node is
            // reachable only where a rule grants it).
            if AccessFs::from_all(abi).contains(AccessFs::IoctlDev) {
                access |= AccessFs::IoctlDev;
            }
        }
        if !meta.is_dir() {
            access &= file_only;
        }
        if access.is_empty() {
            continue;
        }
        let fd = PathFd::new(&rule.path).map_err(|source| LandlockError::Path {
            path: rule.path.clone(),
            source,
        })?;
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created)
}
