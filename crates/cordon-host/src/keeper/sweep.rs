//! The part of `gc` every command that opens the state directory runs
//! first: sandboxes whose keeper is gone for certain, reclaimed from their
//! records.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// What [`reclaim_dead_keepers`] did.
#[derive(Debug, Default)]
pub struct Reclaimed {
    /// The records reclaimed whole (their residue and their entry gone).
    pub records: Vec<Record>,
    /// What it could not do, each said as a warning: a record whose
    /// residue does not vet, a reclaim that failed, sandboxes left for
    /// `cordon sandbox gc` when the time ran out.
    pub failures: Vec<String>,
}

/// Whether the keeper a record names is gone for certain, by two signals
/// that do not depend on each other: the process it names is not running
/// (its pid is free, or taken by a process with another start time) and
/// no process at that pid is marked as the keeper of this very handle (a
/// start time recorded wrong does not make a live keeper dead); and
/// nothing listens on its socket any more (a keeper in another pid
/// namespace sharing this state directory, whose pid means nothing here,
/// still answers there).
fn keeper_gone(state: &StateDir, handle: &str, keeper: &ProcessId) -> bool {
    if keeper.alive() {
        return false;
    }
    let marked = ProcessId::of(keeper.pid).is_some_and(|now| check_keeper(&now, handle).is_ok());
    !marked && nobody_listens(&state.socket_path(handle))
}

/// Whether a connection to the socket at `path` is refused (or there is no
/// socket): nobody listens. Never waits: a listener whose backlog is full
/// (`EAGAIN`) is somebody, and so is any other answer.
fn nobody_listens(path: &Path) -> bool {
    use rustix::net::{
        connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
    };
    let Ok(s) = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    ) else {
        return false;
    };
    let Ok(addr) = SocketAddrUnix::new(path) else {
        return false;
    };
    matches!(
        connect(&s, &addr),
        Err(rustix::io::Errno::CONNREFUSED) | Err(rustix::io::Errno::NOENT)
    )
}

/// The part of `gc` every command that opens the state directory runs
/// first: reclaims each recorded sandbox whose keeper is gone for certain
/// (`keeper_gone`: killed with SIGKILL, say), from its record, as
/// `gc` would — its cgroups, its work dir's volume (and with that mount
/// the loop device under its deleted image) and its directories, once its
/// registration's `vet` passes them. Nothing else: a live keeper's
/// sandbox is never touched, whatever its age (its keeper disposes of it
/// at its maximum age; `gc` reclaims those past it), nor is what no record
/// names (`gc`'s sweep). A key another process holds the lock of is
/// skipped (that process is working on it). No registry is built unless a
/// record needs one, so a state directory with nothing to reclaim costs
/// the listing alone. Stops starting reclaims once `within` has passed,
/// saying how many it left to `gc`.
pub fn reclaim_dead_keepers(
    state: &StateDir,
    registry: impl FnOnce() -> Registry,
    within: Duration,
) -> Reclaimed {
    let started = Instant::now();
    let mut out = Reclaimed::default();
    // Each record's keeper only: the rest is read for the dead ones alone.
    let keepers = match state.keepers() {
        // Unreadable records are `gc`'s to name, not this sweep's.
        Ok(k) => k,
        Err(e) => {
            out.failures.push(e.to_string());
            return out;
        }
    };
    let dead: Vec<String> = keepers
        .into_iter()
        .filter(|(handle, keeper)| keeper_gone(state, handle, keeper))
        .map(|(handle, _)| handle)
        .collect();
    // Built on first need only.
    let registry = std::cell::LazyCell::new(registry);
    for (i, handle) in dead.iter().enumerate() {
        if started.elapsed() > within {
            out.failures.push(format!(
                "{} sandbox(es) whose keeper is gone were left for `cordon sandbox gc` (reclaiming stopped after {within:?})",
                dead.len() - i
            ));
            break;
        }
        let Ok(Some(rec)) = state.read(handle) else {
            continue;
        };
        // Not waited for: whoever holds it is working on this key.
        let Ok(lock) = state.lock(&rec.key, Duration::ZERO) else {
            continue;
        };
        // Read again under the lock: it may have gone, or been replaced.
        match state.read(handle) {
            Ok(Some(now)) if now == rec && keeper_gone(state, handle, &now.keeper) => {}
            _ => continue,
        }
        let registry: &Registry = &registry;
        // Vetted before anything goes; no process is ever signalled here
        // (its keeper is gone, and `reclaim` acts only on the residue).
        if let Err(why) = vet_record(state, registry, &rec) {
            out.failures.push(why);
            continue;
        }
        out.failures.extend(reclaim(state, registry, &rec));
        if matches!(state.read(handle), Ok(None)) {
            lock.unlock_and_remove();
            out.records.push(rec);
        }
    }
    out
}

#[cfg(test)]
mod reclaim_dead_tests {
    use super::*;
    use crate::state::KeyRecord;

    /// A record as a keeper writes it, naming `keeper`, of a backend this
    /// test's registry does not know and with nothing left outside it.
    fn record(handle: &str, keeper: ProcessId) -> Record {
        Record {
            version: cordon_sandbox::wire::WIRE_VERSION,
            handle: handle.into(),
            key: KeyRecord {
                scope: format!("scope-{handle}"),
                thread: "t".into(),
                agent_dir: "a".into(),
            },
            owner: "test".into(),
            backend: "nowhere".into(),
            keeper,
            created: state::now(),
            idle_timeout: 60,
            max_age: 3600,
            provenance: cordon_sandbox::Provenance {
                spec: cordon_sandbox::SandboxSpec::new("run", "host").unwrap(),
                identity: cordon_policy::Identity::default(),
                policy_digest: "d".into(),
                origin: None,
            },
            host_work_dir: None,
            residue: serde_json::Value::Null,
        }
    }

    /// A process that ran and was reaped: its pid is free.
    fn gone() -> ProcessId {
        let mut c = Command::new("/bin/true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        ProcessId { pid, start: 1 }
    }

    fn sweep(state: &StateDir, built: &std::cell::Cell<usize>) -> Reclaimed {
        reclaim_dead_keepers(
            state,
            || {
                built.set(built.get() + 1);
                Registry::new()
            },
            Duration::from_secs(5),
        )
    }

    #[test]
    fn only_a_keeper_gone_for_certain_is_reclaimed() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let built = std::cell::Cell::new(0);
        // Nothing to reclaim: no registry is built.
        let live = record("live-1", ProcessId::current());
        state.write(&live).unwrap();
        let r = sweep(&state, &built);
        assert!(r.records.is_empty() && r.failures.is_empty(), "{r:?}");
        assert_eq!(built.get(), 0);

        // Dead by its pid, but something still listens on its socket (a
        // keeper in another pid namespace): left alone.
        let elsewhere = record("elsewhere-1", gone());
        state.write(&elsewhere).unwrap();
        let seq = {
            use rustix::net::{bind, listen, socket, AddressFamily, SocketAddrUnix, SocketType};
            let s = socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
            bind(
                &s,
                &SocketAddrUnix::new(state.socket_path("elsewhere-1")).unwrap(),
            )
            .unwrap();
            listen(&s, 1).unwrap();
            s
        };
        // Dead by its pid and nothing listens (a socket file left by a
        // keeper killed with SIGKILL, or none at all): reclaimed.
        let killed = record("killed-1", gone());
        state.write(&killed).unwrap();
        {
            use rustix::net::{bind, socket, AddressFamily, SocketAddrUnix, SocketType};
            let s = socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
            bind(
                &s,
                &SocketAddrUnix::new(state.socket_path("killed-1")).unwrap(),
            )
            .unwrap();
        }
        let never = record("never-1", gone());
        state.write(&never).unwrap();
        // Dead, but another process holds its key's lock: skipped.
        let busy = record("busy-1", gone());
        state.write(&busy).unwrap();
        let held = state.lock(&busy.key, Duration::from_secs(1)).unwrap();

        let r = sweep(&state, &built);
        let mut got: Vec<&str> = r.records.iter().map(|r| r.handle.as_str()).collect();
        got.sort_unstable();
        assert_eq!(got, ["killed-1", "never-1"], "{r:?}");
        assert!(r.failures.is_empty(), "{r:?}");
        assert_eq!(built.get(), 1, "built once, when first needed");
        for h in ["killed-1", "never-1"] {
            assert_eq!(state.read(h).unwrap(), None);
            assert!(!state.socket_path(h).exists());
        }
        for h in ["live-1", "elsewhere-1", "busy-1"] {
            assert!(state.read(h).unwrap().is_some(), "{h} was reclaimed");
        }
        drop(seq);
        drop(held);
        // Its listener gone, and the lock free: both go now.
        let r = sweep(&state, &built);
        let mut got: Vec<&str> = r.records.iter().map(|r| r.handle.as_str()).collect();
        got.sort_unstable();
        assert_eq!(got, ["busy-1", "elsewhere-1"], "{r:?}");
        assert_eq!(state.list().unwrap().0, vec![live]);
    }

    #[test]
    fn a_residue_that_does_not_vet_is_left_and_said() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        // A backend the registry does not know, naming a residue: the
        // record is the only pointer to it, so it is kept, and said.
        let mut rec = record("unknown-1", gone());
        rec.residue = serde_json::json!({"dirs": ["/"]});
        state.write(&rec).unwrap();
        let built = std::cell::Cell::new(0);
        let r = sweep(&state, &built);
        assert!(r.records.is_empty(), "{r:?}");
        assert!(
            r.failures.len() == 1 && r.failures[0].contains("is not registered"),
            "{r:?}"
        );
        assert_eq!(state.read("unknown-1").unwrap(), Some(rec));
    }

    #[test]
    fn past_its_time_it_starts_no_reclaim_and_says_what_it_left() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        for h in ["late-1", "late-2"] {
            state.write(&record(h, gone())).unwrap();
        }
        let r = reclaim_dead_keepers(&state, Registry::new, Duration::ZERO);
        assert!(r.records.is_empty(), "{r:?}");
        assert!(
            r.failures.len() == 1
                && r.failures[0].starts_with(
                    "2 sandbox(es) whose keeper is gone were left for `cordon sandbox gc`"
                ),
            "{r:?}"
        );
        assert_eq!(state.list().unwrap().0.len(), 2);
    }
}
