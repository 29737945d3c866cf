//! A microVM saved with its memory (`snapshot --memory`) and copies made
//! from it: QEMU's migration into a file ([`crate::vm::Vm::save`]), and a
//! new QEMU that loads it ([`crate::vm::Vm::restore`]).
//!
//! The whole guest is saved — its kernel, the agent, the warm sandbox and
//! every process in it, the work dir and `/tmp` (the guest's RAM) — so a
//! copy holds exactly the confinement the original was made with: the
//! plan, its Landlock domains and seccomp filters are the guest kernel's
//! state, saved and loaded whole. The source goes on as it was.
//!
//! What must match for a copy to load: the machine (memory, CPUs,
//! accelerator) and the plan the guest holds, which the copy's host
//! computes anew from its spec and policy; a copy whose plan would differ
//! is refused (the guest would go on enforcing the old one).

use std::path::Path;

use cordon_sandbox::SandboxError;
use serde::{Deserialize, Serialize};

use super::MicrovmSandbox;
use crate::vm::{Accel, BootSpec};

/// The saved machine's state, as QEMU wrote it.
pub const STATE: &str = "vm.state";
/// What was saved with it ([`Saved`]).
pub const MACHINE: &str = "machine.json";
/// This form of a saved guest.
const FORMAT: &str = "cordon-microvm-1";

/// Why a sandbox with an egress route is not saved with its memory.
pub const NO_MEMORY_WITH_EGRESS: &str = "`--memory` is refused for a microVM sandbox with an egress route: its connections are relayed through this host's proxy, which a copy could not take over; take a snapshot of the files (leave `--memory` out), or make the sandbox without egress";

/// What a saved guest was made with, beside its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub format: String,
    pub memory_mib: u64,
    pub cpus: u32,
    pub accel: Accel,
    /// The plan the guest holds.
    pub plan: serde_json::Value,
    /// The first channel id a copy's host uses.
    pub first_id: u64,
    /// The execs running when it was saved.
    pub processes: u32,
    /// The guest agent's version.
    pub agent: String,
}

impl Saved {
    /// What `dir` (a snapshot's `memory`) says was saved; refused when it
    /// is not a microVM's.
    pub fn read(dir: &Path) -> Result<Saved, String> {
        let at = dir.join(MACHINE);
        let text = std::fs::read(&at).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "the snapshot's processes were not saved by the microvm backend (no `{MACHINE}` in `{}`), so it cannot start them",
                dir.display()
            ),
            _ => format!("`{}`: {e}", at.display()),
        })?;
        let s: Saved =
            serde_json::from_slice(&text).map_err(|e| format!("`{}`: {e}", at.display()))?;
        if s.format != FORMAT {
            return Err(format!(
                "the saved guest is in the form `{}`, this cordon loads `{FORMAT}`",
                s.format
            ));
        }
        Ok(s)
    }

    /// Whether a copy booted as `boot` can load it; why not otherwise.
    pub fn fits(&self, boot: &BootSpec) -> Result<(), String> {
        let mut differ = Vec::new();
        if self.memory_mib != boot.memory_mib {
            differ.push(format!(
                "its memory was {} MiB, this one's would be {} MiB (`resources.memory` must be the snapshot's)",
                self.memory_mib, boot.memory_mib
            ));
        }
        if self.cpus != boot.cpus {
            differ.push(format!("{} CPUs, not {}", self.cpus, boot.cpus));
        }
        if self.accel != boot.accel {
            differ.push(format!(
                "it ran under {}, this machine runs guests under {}",
                self.accel, boot.accel
            ));
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the saved guest cannot be loaded as this sandbox: {}",
                differ.join("; ")
            ))
        }
    }
}

/// For a sandbox made from a snapshot holding processes: what its guest
/// was saved with, and where its state is. Refused before anything
/// boots when it cannot load (not a microVM's, or an egress route asked
/// of a guest saved without one).
pub(super) fn of_origin(
    req: &cordon_sandbox::AcquireRequest,
    has_egress: bool,
) -> Result<Option<(Saved, std::path::PathBuf)>, String> {
    let Some(dir) = req
        .provenance
        .origin
        .as_ref()
        .and_then(|o| o.memory.as_ref())
    else {
        return Ok(None);
    };
    let saved = Saved::read(dir)?;
    if has_egress {
        return Err("a sandbox restored with its memory has no egress route (its guest was saved without one); leave `egress_allow` out of its spec".into());
    }
    Ok(Some((saved, dir.join(STATE))))
}

/// The fields of two plans (as JSON objects) that differ.
fn differing(saved: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    let (Some(a), Some(b)) = (saved.as_object(), now.as_object()) else {
        return vec!["the whole plan".into()];
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let shown = |v: Option<&serde_json::Value>| {
        let t = v.map_or("nothing".to_string(), |v| v.to_string());
        if t.len() > 160 {
            "…".to_string()
        } else {
            t
        }
    };
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("`{k}`: {} saved, {} now", shown(a.get(k)), shown(b.get(k))))
        .collect()
}

/// Saves `sb`'s guest into `into` ([`STATE`], [`MACHINE`]); the number of
/// execs running in it. None running: nothing is saved (0), the snapshot
/// holds files only.
pub(super) fn save(sb: &MicrovmSandbox, into: &Path) -> Result<u32, SandboxError> {
    let failed = |reason: String| SandboxError::Failed {
        operation: "snapshot",
        reason,
    };
    if sb.proxy_port.is_some() {
        return Err(SandboxError::Invalid {
            reason: NO_MEMORY_WITH_EGRESS.into(),
        });
    }
    let _awake = sb.awake()?;
    let processes = u32::try_from(sb.vm.channel.running_execs()).unwrap_or(u32::MAX);
    if processes == 0 {
        return Ok(0);
    }
    let plan = serde_json::to_value(sb.base_plan()?).map_err(|e| failed(e.to_string()))?;
    let first_id = sb.vm.save(&into.join(STATE)).map_err(failed)?;
    let saved = Saved {
        format: FORMAT.into(),
        memory_mib: sb.memory_mib,
        cpus: sb.cpus,
        accel: sb.vm.accel,
        plan,
        first_id,
        processes,
        agent: sb.vm.agent.clone(),
    };
    let json = serde_json::to_vec_pretty(&saved).map_err(|e| failed(e.to_string()))?;
    std::fs::write(into.join(MACHINE), json)
        .map_err(|e| failed(format!("`{}`: {e}", into.display())))?;
    Ok(processes)
}

/// Checks that the copy `sb` (loaded from `saved`) holds the plan its
/// host would give it.
pub(super) fn same_plan(sb: &MicrovmSandbox, saved: &Saved) -> Result<(), String> {
    let plan = sb.base_plan().map_err(|e| e.to_string())?;
    let now = serde_json::to_value(plan).map_err(|e| e.to_string())?;
    let differ = differing(&saved.plan, &now);
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!("the saved guest holds the plan it was made with, and this sandbox's spec and policy give another (it differs in {}): a copy restored with its memory must be made with the snapshot's own spec; leave `--spec` out, or restore its files alone (a snapshot without `--memory`)", differ.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn boot(memory_mib: u64, accel: Accel) -> BootSpec {
        BootSpec {
            qemu: "/q".into(),
            kernel: "/k".into(),
            initramfs: "/i".into(),
            image: "/img".into(),
            accel,
            memory_mib,
            cpus: 1,
            run_dir: "/r".into(),
            deadline: std::time::Duration::from_secs(1),
            name: "n".into(),
            incoming: true,
        }
    }

    fn saved() -> Saved {
        Saved {
            format: FORMAT.into(),
            memory_mib: 288,
            cpus: 1,
            accel: Accel::Tcg,
            plan: serde_json::json!({"rung": "container"}),
            first_id: 1 << 20,
            processes: 1,
            agent: "0.1.0".into(),
        }
    }

    #[test]
    fn a_copy_loads_only_into_the_same_machine() {
        let s = saved();
        assert!(s.fits(&boot(288, Accel::Tcg)).is_ok());
        let e = s.fits(&boot(416, Accel::Tcg)).unwrap_err();
        assert!(
            e.contains("288 MiB") && e.contains("resources.memory"),
            "{e}"
        );
        let e = s.fits(&boot(288, Accel::Kvm)).unwrap_err();
        assert!(e.contains("under tcg"), "{e}");
    }

    #[test]
    fn only_a_microvm_s_saved_processes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let e = Saved::read(dir.path()).unwrap_err();
        assert!(e.contains("not saved by the microvm backend"), "{e}");
        let mut other = saved();
        other.format = "cordon-microvm-0".into();
        std::fs::write(
            dir.path().join(MACHINE),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        let e = Saved::read(dir.path()).unwrap_err();
        assert!(e.contains("cordon-microvm-0"), "{e}");
        std::fs::write(
            dir.path().join(MACHINE),
            serde_json::to_vec(&saved()).unwrap(),
        )
        .unwrap();
        assert_eq!(Saved::read(dir.path()).unwrap(), saved());
    }

    #[test]
    fn a_plan_that_differs_is_named_by_its_fields() {
        let a = serde_json::json!({"rung": "container", "bounds": {"max_memory": 1}, "fs": []});
        let b = serde_json::json!({"rung": "container", "bounds": {"max_memory": 2}, "env": {}});
        assert_eq!(
            differing(&a, &b),
            [
                "`bounds`: {\"max_memory\":1} saved, {\"max_memory\":2} now",
                "`env`: nothing saved, {} now",
                "`fs`: [] saved, nothing now"
            ]
        );
        assert!(differing(&a, &a).is_empty());
    }
}
