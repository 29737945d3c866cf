//! The process roles a `cordon` binary plays besides its commands, each
//! chosen by a hidden first argument, dispatched here and nowhere else:
//!
//! - the **sandbox init** ([`INIT_ARG`]): the confined first process of a
//!   sandbox at the native rungs (or `cordon-init` beside the binary);
//! - the **keeper** ([`KEEPER_ARG`]): one process per kept sandbox, which
//!   rebuilds the sandbox's backend from the registry it is given;
//! - the **egress proxy** ([`EGRESS_ARG`]): the proxy of this process's
//!   sandboxes, which confines itself before it reads a byte from any.
//!
//! A binary that registers backends of its own (a test's engine) calls
//! [`dispatch`] with its registry first thing in `main`, and is then its
//! own keeper: nothing else changes.

use std::path::Path;

use cordon_sandbox::{EgressSetup, Registry, SelfCommand};

pub use crate::keeper::KEEPER_ARG;

/// The hidden first argument that makes this binary the sandbox init.
pub const INIT_ARG: &str = "__sandbox-init";
/// The hidden first argument that runs this binary as the egress proxy.
pub const EGRESS_ARG: &str = "__egress-proxy";
/// The unprivileged id the egress proxy process runs as.
pub const EGRESS_ID: u32 = 1_999_999_000;

/// Runs the role the first argument names, and never returns then; returns
/// when the binary was started as itself. Call it before anything else in
/// `main` (the sandbox init needs a process with no other threads).
pub fn dispatch(registry: fn() -> Registry) {
    let first = std::env::args_os().nth(1);
    let Some(first) = first.as_deref().and_then(|a| a.to_str()) else {
        return;
    };
    match first {
        INIT_ARG => cordon_linux::init_main(),
        KEEPER_ARG => crate::keeper::keeper_main(&registry()),
        EGRESS_ARG => cordon_egress::child_main(confine_proxy),
        _ => {}
    }
}

/// Confines the egress proxy process (single-threaded still): no new
/// privileges, no capabilities, no writes but the audit log, no exec, a
/// seccomp deny list, an unprivileged id.
pub fn confine_proxy(setup: &EgressSetup) -> Result<(), String> {
    let applied = cordon_linux::confine_self(&cordon_linux::SelfConfinement {
        writable_file: setup.audit.clone(),
        without_landlock: false,
        run_as: Some((EGRESS_ID, EGRESS_ID)),
    })
    .map_err(|e| format!("confining the proxy: {e}"))?;
    for line in applied.lines {
        tracing::debug!(target: "cordon::egress", "confined: {line}");
    }
    Ok(())
}

/// This binary in each of its roles: what backends, keepers and the proxy
/// are started as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfCommands {
    pub init: SelfCommand,
    pub proxy: SelfCommand,
    pub keeper: SelfCommand,
}

impl SelfCommands {
    /// The running binary's roles.
    pub fn current() -> Result<SelfCommands, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this binary to run it as the sandbox init, the keeper and the egress proxy: {e}"))?;
        Ok(SelfCommands::of(&exe))
    }

    /// `exe`'s roles.
    pub fn of(exe: &Path) -> SelfCommands {
        let role = |arg: &str| SelfCommand {
            path: exe.to_path_buf(),
            args: vec![arg.to_string()],
        };
        SelfCommands {
            init: init_command(exe),
            proxy: role(EGRESS_ARG),
            keeper: role(KEEPER_ARG),
        }
    }
}

/// The sandbox init: `cordon-init` beside `exe` when it is there and as
/// trustworthy as `exe` (a regular file, owned by root or by `exe`'s
/// owner, writable by nobody else), else `exe`'s own [`INIT_ARG`]. Either
/// way the init refuses to run unless it was built from the same sources.
fn init_command(exe: &Path) -> SelfCommand {
    use std::os::unix::fs::MetadataExt;
    let own = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.file_type().is_file())
    };
    let sibling = exe.with_file_name("cordon-init");
    let trusted = match (own(exe), own(&sibling)) {
        (Some(me), Some(it)) => {
            (it.uid() == 0 || it.uid() == me.uid())
                && it.mode() & 0o022 == 0
                && it.mode() & 0o111 != 0
        }
        _ => false,
    };
    if trusted {
        tracing::debug!(target: "cordon::run", init = %sibling.display(), "the sandbox init");
        SelfCommand {
            path: sibling,
            args: Vec::new(),
        }
    } else {
        SelfCommand {
            path: exe.to_path_buf(),
            args: vec![INIT_ARG.to_string()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_sibling_init_is_used_only_when_nobody_else_can_write_it() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("cordon");
        std::fs::write(&exe, b"").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        // No sibling: this binary's own role.
        let c = SelfCommands::of(&exe);
        assert_eq!(c.init.path, exe);
        assert_eq!(c.init.args, [INIT_ARG]);
        assert_eq!(c.keeper.args, [KEEPER_ARG]);
        assert_eq!(c.proxy.args, [EGRESS_ARG]);
        let sibling = d.path().join("cordon-init");
        std::fs::write(&sibling, b"").unwrap();
        // Writable by its group: not trusted.
        std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(SelfCommands::of(&exe).init.path, exe);
        std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = SelfCommands::of(&exe);
        assert_eq!(c.init.path, sibling);
        assert!(c.init.args.is_empty());
        // A link is not a file of its own.
        std::fs::remove_file(&sibling).unwrap();
        std::os::unix::fs::symlink(&exe, &sibling).unwrap();
        assert_eq!(SelfCommands::of(&exe).init.path, exe);
    }
}
