//! The `microvm` backend's registration: how a host finds, probes, builds
//! and cleans up after it.
//!
//! Its rung is the machine's: `microvm` where a guest really boots under
//! KVM, `container` (the jail around QEMU) where it runs under TCG. The
//! registration says the same as the built backend, so `cordon doctor`,
//! the floor and the router agree.

use std::sync::Arc;

use cordon_backend_kit::register as kit;
use cordon_backend_kit::EngineSetup;
use cordon_policy::Policy;
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup, Egress, Isolation, WorkDirView};

use crate::artifacts::VmSettings;
use crate::vm::Accel;
use crate::{MicrovmConfig, Residue};

/// The rung this machine gives the backend with `settings` (probing it on
/// first use).
pub fn rung(settings: &VmSettings) -> Isolation {
    match crate::probe::accel_for_registry(settings) {
        Some(accel) => crate::rung_of(accel),
        // Not runnable: shown at the rung it would have without KVM, the
        // probe says why it cannot run at all.
        None => Isolation::Container,
    }
}

/// What the backend claims on this machine with `settings`.
pub fn info(settings: &VmSettings) -> BackendInfo {
    let rung = rung(settings);
    BackendInfo {
        name: crate::NAME,
        isolation: rung,
        egress: Egress::Allowlist,
        capabilities: crate::capabilities(),
        summary: if rung == Isolation::Microvm {
            "a QEMU microvm guest under KVM (cordon's agent enforces the plan inside); egress through cordon's proxy over the control channel, no NIC"
        } else {
            "a QEMU microvm guest under TCG, an emulator: the boundary is the jail around QEMU (cordon's container rung); egress through cordon's proxy, no NIC"
        },
    }
}

/// What `cordon doctor` says beside a KVM guest: cordon's own machines
/// have no working KVM, so only this probe's boot has run under it.
pub const UNTRIED_UNDER_KVM: &str = "under KVM only this probe's boot has been run by cordon's own tests (its development and CI machines have no working KVM: the kits, the timings and the memory snapshots were run under TCG); run `cordon conformance --backend microvm` and `cordon escape --backend microvm` here before relying on it";

fn probe(setup: &BackendSetup) -> Probe {
    let settings = match VmSettings::of(setup) {
        Ok(s) => s,
        Err(e) => return kit::not_runnable(&e, &[]),
    };
    match crate::probe::machine(&settings) {
        Ok(m) => {
            let mut found = vec![
                format!("`{}` ({})", m.qemu.display(), m.qemu_version),
                format!(
                    "guest kernel {} (`{}`)",
                    m.kernel.release,
                    m.kernel.image.display()
                ),
                format!("guest agent `{}`", m.agent.display()),
                format!("initramfs `{}`", m.initramfs.display()),
            ];
            match m.accel {
                Accel::Kvm => {
                    found.push(format!(
                        "accelerator: kvm, a guest booted under it ({}): rung `microvm`",
                        m.accel_source
                    ));
                    found.push(UNTRIED_UNDER_KVM.to_string());
                }
                Accel::Tcg => found.push(format!(
                    "accelerator: tcg ({}): rung `container`, not `microvm`: {}. With working KVM this backend declares `microvm`; here use it with `--backend microvm --min-isolation container`",
                    m.accel_source,
                    m.no_kvm.as_deref().unwrap_or("KVM is not used")
                )),
            }
            kit::runnable(found)
        }
        Err(u) => u.probe(),
    }
}

fn build(setup: &BackendSetup, policy: Arc<Policy>) -> Result<Arc<dyn Backend>, String> {
    let machine = kit::probed(crate::probe::machine(&VmSettings::of(setup)?))?;
    let init = cordon_backend_kit::init_of(setup).ok_or("the host did not say how to run its binary as a sandbox init (the jail around QEMU needs one)")?;
    Ok(Arc::new(crate::backend::backend(MicrovmConfig {
        setup: EngineSetup::of(setup, policy),
        machine,
        init,
    })))
}

/// Checks that a recorded residue names only a directory this backend
/// makes, made by the keeper `keeper`, in this cordon's scratch directory.
fn vet(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    let r: Residue = kit::read_residue(residue, crate::NAME)?;
    crate::DIRS.vet(&r.dir, keeper)
}

fn reclaim(residue: &serde_json::Value) -> Vec<String> {
    kit::reclaim_read(residue, crate::NAME, |r: Residue| crate::reclaim(&r))
}

/// Sandbox directories whose making process is gone.
fn sweep(_: &BackendSetup) -> (Vec<String>, Vec<String>) {
    crate::DIRS.sweep(crate::reclaim_dir)
}

/// The `microvm` backend, as a host registers it, its rung the one the
/// machine gives it with `settings` (a host's, as its setup will carry).
pub fn registration(settings: &VmSettings) -> BackendRegistration {
    BackendRegistration {
        work_dir_view: WorkDirView::GuestOnly,
        work_dir_owner: None,
        // No workload runs on the host; a host process the kits start to
        // be attacked runs as this unprivileged id, which nothing else has.
        workload_uid: Some(crate::sandbox::GUEST_WORKLOAD_ID),
        ..kit::engine_registration(info(settings), probe, build, vet, reclaim, sweep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_directory_that_is_a_link_is_left_alone() {
        let pid = std::process::id();
        let scratch = std::env::temp_dir();
        let scratch = scratch.canonicalize().unwrap_or(scratch);
        let link = scratch.join(format!("{}{pid}-9999", crate::PREFIX));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let residue = serde_json::to_value(Residue {
            dir: link.clone(),
            cgroups: Vec::new(),
        })
        .unwrap();
        let got = vet(&residue, pid);
        std::fs::remove_file(&link).unwrap();
        let e = got.unwrap_err();
        assert!(e.contains("through a link"), "{e}");
        // Another keeper's name, or a directory elsewhere: refused too.
        assert!(vet(&residue, pid + 1).is_err());
        let elsewhere = serde_json::to_value(Residue {
            dir: format!("/var/{}{pid}-1", crate::PREFIX).into(),
            cgroups: Vec::new(),
        })
        .unwrap();
        assert!(vet(&elsewhere, pid).is_err());
    }
}
