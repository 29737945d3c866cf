//! The local rungs' registrations: how a host finds, probes, builds and
//! cleans up after the `container` and `process` backends. What they claim
//! comes from their [`RungProfile`], as [`crate::LocalBackend`]'s own
//! declarations do; the host assembly refuses a built backend whose
//! declarations differ from its registration's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_linux::Rung;
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::registry::{BackendInfo, Probe};
use cordon_sandbox::{Backend, BackendRegistration, BackendSetup};

pub use crate::backend::local_capabilities;
use crate::{LocalBackend, LocalConfig, RungProfile, WorkDir, WORK_DIR_ID};

fn info(rung: Rung) -> BackendInfo {
    let p = RungProfile::of(rung);
    BackendInfo {
        name: p.name,
        isolation: p.isolation,
        egress: p.egress,
        capabilities: local_capabilities(p),
        summary: p.summary,
    }
}

pub use cordon_backend_kit::init_of;

fn probe_rung(rung: Rung, setup: &BackendSetup) -> Probe {
    match init_of(setup) {
        Some(init) => crate::probe(rung, init),
        None => Probe {
            runnable: false,
            reason: Some("no sandbox init program was given".into()),
            found: vec!["the host did not say how to run its binary as a sandbox init".into()],
        },
    }
}

fn build_rung(
    rung: Rung,
    setup: &BackendSetup,
    policy: Arc<Policy>,
) -> Result<Arc<dyn Backend>, String> {
    let init = init_of(setup).ok_or_else(|| {
        format!(
            "backend `{}` needs the sandbox init program (this binary with its init argument)",
            RungProfile::of(rung).name
        )
    })?;
    Ok(Arc::new(LocalBackend::new(LocalConfig {
        rung,
        policy,
        env: Deployment {
            name: setup.deployment.clone(),
        },
        work_dir: match &setup.work_dir {
            Some(d) => WorkDir::Given(d.clone()),
            None => WorkDir::Fresh {
                parent: setup.scratch.clone(),
            },
        },
        init,
        egress: setup.egress.clone(),
    })))
}

pub use crate::sandbox::Residue;

/// Where cgroup hierarchies are mounted: every recorded cgroup is beneath.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Whether `uid` is one cordon runs sandboxes as: the shared
/// [`crate::WORK_DIR_ID`] or a leased fresh one.
fn sandbox_uid(uid: u32) -> bool {
    uid == WORK_DIR_ID
        || (crate::FRESH_ID_BASE..crate::FRESH_ID_BASE + cordon_backend_kit::FRESH_IDS)
            .contains(&uid)
}

/// The keeper pid in the name of a directory `workdir::fresh_dir` made:
/// `cordon-{work,tmp,volume,mapped,secrets}-PID-N-STAMP` (a volume's or a
/// mapped `--work-dir`'s mount point among them).
fn fresh_dir_maker(name: &str) -> Option<u32> {
    let rest = [
        "cordon-work-",
        "cordon-tmp-",
        "cordon-volume-",
        "cordon-mapped-",
        "cordon-secrets-",
    ]
    .iter()
    .find_map(|p| name.strip_prefix(p))?;
    let parts: Vec<&str> = rest.split('-').collect();
    let digits = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (parts.len() == 3 && parts.iter().all(digits))
        .then(|| parts[0].parse().ok())
        .flatten()
}

/// The keeper pid in the name of a warm sandbox's cgroup
/// (`cordon-KEYID-PID-N`, see the backend's `warm_name`).
fn warm_cgroup_maker(name: &str) -> Option<u32> {
    let parts: Vec<&str> = name.strip_prefix("cordon-")?.split('-').collect();
    let [key, pid, n] = parts.as_slice() else {
        return None;
    };
    let ok = !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_hexdigit())
        && n.bytes().all(|b| b.is_ascii_digit())
        && !n.is_empty();
    ok.then(|| pid.parse().ok()).flatten()
}

use cordon_backend_kit::dirs::plain;

/// Every check of [`vet`] on one directory.
fn vet_dir(d: &Path, keeper: u32, uid: Option<u32>, scratch: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    plain(d)?;
    let name = d.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match fresh_dir_maker(name) {
        Some(pid) if pid == keeper => {}
        Some(pid) => {
            return Err(format!(
                "`{}` was made by process {pid}, not by the record's keeper {keeper}",
                d.display()
            ))
        }
        None => {
            return Err(format!(
                "`{}` is not named as cordon names the directories it makes (`cordon-work-…`, `cordon-tmp-…`, `cordon-volume-…`, `cordon-mapped-…`, `cordon-secrets-…`)",
                d.display()
            ))
        }
    }
    if d.parent() != Some(scratch) {
        return Err(format!(
            "`{}` is not in `{}`, where this cordon makes sandbox directories (TMPDIR); if a cordon started with another TMPDIR (or `--work-dir` beside it) made it, run gc with TMPDIR set to its parent",
            d.display(),
            scratch.display()
        ));
    }
    // A secrets directory is root's, with the sandbox's group.
    let secrets = name.starts_with("cordon-secrets-");
    match std::fs::symlink_metadata(d) {
        Ok(m) if !m.is_dir() => Err(format!("`{}` is not a directory", d.display())),
        Ok(m)
            if secrets
                && (m.uid() != 0 || uid.is_some_and(|u| u != m.gid()) || !sandbox_uid(m.gid())) =>
        {
            Err(format!(
                "`{}` is owned by {}:{}, not by root with the sandbox's group{}",
                d.display(),
                m.uid(),
                m.gid(),
                uid.map(|u| format!(" {u}")).unwrap_or_default()
            ))
        }
        Ok(_) if secrets => Ok(()),
        Ok(m) if uid.is_some_and(|u| u != m.uid()) || !sandbox_uid(m.uid()) => Err(format!(
            "`{}` is owned by uid {}, not by the sandbox's uid{}",
            d.display(),
            m.uid(),
            uid.map(|u| format!(" {u}")).unwrap_or_default()
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("`{}`: {e}", d.display())),
    }
}

/// Every check of [`vet`] on one cgroup directory.
fn vet_cgroup(c: &Path, keeper: u32) -> Result<(), String> {
    plain(c)?;
    if !c.starts_with(CGROUP_MOUNT) || c.parent() == Some(Path::new(CGROUP_MOUNT)) {
        return Err(format!(
            "`{}` is not a cgroup beneath `{CGROUP_MOUNT}/`",
            c.display()
        ));
    }
    let name = c.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match warm_cgroup_maker(name) {
        Some(pid) if pid == keeper => {}
        _ => {
            return Err(format!(
                "`{}` is not the cgroup of a sandbox the record's keeper ({keeper}) made (`cordon-KEY-{keeper}-N`)",
                c.display()
            ))
        }
    }
    match rustix::fs::statfs(c) {
        Ok(fs) if [CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC].contains(&fs.f_type) => Ok(()),
        Ok(_) => Err(format!("`{}` is not on a cgroup filesystem", c.display())),
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(format!("`{}`: {e}", c.display())),
    }
}

/// Checks that a recorded residue names only what a local sandbox of the
/// keeper `keeper` makes: directories named as `workdir::fresh_dir` names
/// them, with `keeper` as their maker, in this cordon's scratch directory,
/// real directories owned by the sandbox's uid (one cordon runs sandboxes
/// as); cgroups beneath the cgroup mount on a cgroup filesystem, named as
/// the keeper names a warm sandbox's. Nothing is touched unless all pass.
fn vet(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    let r: Residue = serde_json::from_value(residue.clone())
        .map_err(|e| format!("the recorded residue is not a local one ({e})"))?;
    if r.uid.is_some_and(|u| !sandbox_uid(u)) {
        return Err(format!(
            "the recorded uid {} is not one cordon runs sandboxes as",
            r.uid.unwrap_or_default()
        ));
    }
    let scratch = std::env::temp_dir();
    let scratch = scratch.canonicalize().unwrap_or(scratch);
    for d in &r.dirs {
        vet_dir(d, keeper, r.uid, &scratch)?;
    }
    for c in &r.cgroups {
        vet_cgroup(c, keeper)?;
    }
    Ok(())
}

fn reclaim(residue: &serde_json::Value) -> Vec<String> {
    let r: Residue = match serde_json::from_value(residue.clone()) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "the recorded residue is not a local one ({e}); left alone"
            )]
        }
    };
    let mut failures = Vec::new();
    if let Err(e) = cordon_linux::reclaim_cgroups(&r.cgroups) {
        failures.push(format!("cgroups: {e}"));
    }
    // `vet` passed it as a sandbox uid: what it owns in the host's System V
    // IPC goes (see `LocalSandbox::dispose`).
    if let Some(uid) = r.uid {
        failures.extend(cordon_linux::remove_sysv_ipc_of(uid).1);
    }
    for d in &r.dirs {
        // A mount (a volume, an operator's directory mapped) is unmounted
        // first and only its then-empty mount point removed: nothing is
        // ever removed through a mount of the operator's files.
        match crate::workdir::remove_mount(d) {
            Ok(()) => {}
            Err(_) if !cordon_linux::volume::is_mount_point(d).unwrap_or(true) => {
                // A plain directory cordon made (a record from before work
                // dirs were volumes, a temporary directory).
                if let Err(e) = std::fs::remove_dir_all(d) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        failures.push(format!("{}: {e}", d.display()));
                    }
                }
            }
            Err(e) => failures.push(e),
        }
    }
    failures
}

/// The cgroups of sandboxes whose owner was killed before it could record
/// or dispose of them (found by name below this process's cgroup), and the
/// uid leases such owners left.
fn sweep(_: &BackendSetup) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    for (name, dirs) in cordon_linux::orphaned_sandbox_cgroups() {
        match cordon_linux::reclaim_cgroups(&dirs) {
            Ok(()) => done.push(name),
            Err(e) => failures.push(format!("cgroup `{name}`: {e}")),
        }
    }
    let _ = crate::sweep_id_leases();
    for m in orphaned_mounts() {
        match crate::workdir::remove_mount(&m) {
            Ok(()) => done.push(m.display().to_string()),
            Err(e) => failures.push(e),
        }
    }
    for d in orphaned_secrets(&std::env::temp_dir()) {
        match std::fs::remove_dir_all(&d) {
            Ok(()) => done.push(d.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failures.push(format!("{}: {e}", d.display())),
        }
    }
    (done, failures)
}

/// Secrets and trust directories in `scratch` whose making process is gone (an
/// owner killed before it could dispose or record them): named
/// `cordon-secrets-PID-…` by the process that made them, real directories
/// of root's with a sandbox uid's group. A live process with that pid
/// keeps them. No secret outlives its sandbox on the host for longer than
/// the next gc.
fn orphaned_secrets(scratch: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !name.starts_with("cordon-secrets-") && !name.starts_with("cordon-trust-") {
            continue;
        }
        let Some(pid) = fresh_dir_maker(name) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        match e.path().symlink_metadata() {
            Ok(m) if m.is_dir() && m.uid() == 0 && sandbox_uid(m.gid()) => out.push(e.path()),
            _ => {}
        }
    }
    out
}

/// Work dir mounts (volumes, operators' directories mapped) whose making
/// process is gone: named `cordon-volume-PID-…` / `cordon-mapped-PID-…`
/// by the process that made them. A live process with that pid keeps them.
fn orphaned_mounts() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in info.lines() {
        let Some(point) = line.split(' ').nth(4) else {
            continue;
        };
        let path = PathBuf::from(point);
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let pid = ["cordon-volume-", "cordon-mapped-"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                out.push(path);
            }
        }
    }
    out
}

fn registration(rung: Rung) -> BackendRegistration {
    BackendRegistration {
        info: info(rung),
        probe: match rung {
            Rung::Container => |s| probe_rung(Rung::Container, s),
            Rung::Process => |s| probe_rung(Rung::Process, s),
        },
        build: Some(match rung {
            Rung::Container => |s, p| build_rung(Rung::Container, s, p),
            Rung::Process => |s, p| build_rung(Rung::Process, s, p),
        }),
        vet,
        reclaim,
        sweep,
        work_dir_view: RungProfile::of(rung).work_dir_view(),
        work_dir_owner: Some(WORK_DIR_ID),
        workload_uid: Some(WORK_DIR_ID),
        opt_in: false,
    }
}

/// The `container` and `process` backends, strongest first.
pub fn registrations() -> Vec<BackendRegistration> {
    vec![registration(Rung::Container), registration(Rung::Process)]
}

#[cfg(test)]
mod vet_tests {
    use super::*;

    #[test]
    fn names_are_read_as_cordon_writes_them() {
        assert_eq!(fresh_dir_maker("cordon-work-123-4-567"), Some(123));
        assert_eq!(fresh_dir_maker("cordon-tmp-9-0-1"), Some(9));
        assert_eq!(
            fresh_dir_maker("cordon-volume-14228-1-891969249"),
            Some(14228)
        );
        assert_eq!(fresh_dir_maker("cordon-mapped-7-0-2"), Some(7));
        assert_eq!(fresh_dir_maker("cordon-secrets-7-0-2"), Some(7));
        for bad in [
            "cordon-work-1-2",
            "cordon-home-1-2-3",
            "work-1-2-3",
            "cordon-work-1-x-3",
        ] {
            assert_eq!(fresh_dir_maker(bad), None, "{bad}");
        }
        assert_eq!(warm_cgroup_maker("cordon-0a1b2c-77-3"), Some(77));
        for bad in [
            "cordon-77-3",
            "cordon-xyz-77-3",
            "other-0a-77-3",
            "cordon-0a-77-3-4",
        ] {
            assert_eq!(warm_cgroup_maker(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_what_the_keeper_made_passes() {
        let scratch = std::env::temp_dir().canonicalize().unwrap();
        let keeper = 4_000_000; // above any pid_max: never a live process
        let made = scratch.join(format!("cordon-work-{keeper}-0-{}", std::process::id()));
        std::fs::create_dir(&made).unwrap();
        let root = rustix::process::geteuid().is_root();
        if root {
            std::os::unix::fs::chown(&made, Some(WORK_DIR_ID), Some(WORK_DIR_ID)).unwrap();
        }
        let residue = |dirs: Vec<PathBuf>, cgroups: Vec<PathBuf>, uid: Option<u32>| {
            serde_json::to_value(Residue { cgroups, dirs, uid }).unwrap()
        };
        if root {
            assert_eq!(
                vet(
                    &residue(vec![made.clone()], vec![], Some(WORK_DIR_ID)),
                    keeper
                ),
                Ok(())
            );
            // Owned by the sandbox uid, but not this one.
            let e = vet(
                &residue(vec![made.clone()], vec![], Some(crate::FRESH_ID_BASE)),
                keeper,
            );
            assert!(e.is_err_and(|e| e.contains("owned by uid")));
        }
        // Another keeper's, another place, a link, another name.
        let e = vet(&residue(vec![made.clone()], vec![], None), keeper + 1).unwrap_err();
        assert!(e.contains("not by the record's keeper"), "{e}");
        let e = vet(
            &residue(
                vec![PathBuf::from(format!("/var/cordon-work-{keeper}-0-1"))],
                vec![],
                None,
            ),
            keeper,
        )
        .unwrap_err();
        assert!(e.contains("where this cordon makes"), "{e}");
        let e = vet(&residue(vec![scratch.join("x/../y")], vec![], None), keeper).unwrap_err();
        assert!(e.contains("plain absolute"), "{e}");
        let e = vet(&residue(vec![scratch.clone()], vec![], None), keeper).unwrap_err();
        assert!(e.contains("not named"), "{e}");
        let link = scratch.join(format!("cordon-work-{keeper}-1-{}", std::process::id()));
        std::os::unix::fs::symlink(&made, &link).unwrap();
        let e = vet(&residue(vec![link.clone()], vec![], None), keeper).unwrap_err();
        assert!(e.contains("link"), "{e}");
        // Not owned by a sandbox uid (this user's own directory).
        if !root {
            let e = vet(&residue(vec![made.clone()], vec![], None), keeper).unwrap_err();
            assert!(e.contains("owned by uid"), "{e}");
        }
        // Cgroups: beneath the mount, named for this keeper, on cgroupfs.
        let e = vet(&residue(vec![], vec![made.clone()], None), keeper).unwrap_err();
        assert!(e.contains("beneath"), "{e}");
        let e = vet(
            &residue(vec![], vec![PathBuf::from("/sys/fs/cgroup/pids")], None),
            keeper,
        )
        .unwrap_err();
        assert!(e.contains("beneath"), "{e}");
        let gone = PathBuf::from(format!("/sys/fs/cgroup/pids/cordon-0a-{keeper}-1"));
        assert_eq!(vet(&residue(vec![], vec![gone], None), keeper), Ok(()));
        let other = PathBuf::from(format!("/sys/fs/cgroup/pids/cordon-0a-{}-1", keeper + 1));
        assert!(vet(&residue(vec![], vec![other], None), keeper).is_err());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir(&made);
    }
}
