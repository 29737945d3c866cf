//! The next exec of a warm sandbox, made ahead of its request (a spare).
//!
//! An exec's processes — the shim in the exec's own cgroup, PID 1 of its
//! own pid and mount namespaces with a `/proc` of its own, and the command
//! confined (rlimits, Landlock, seccomp) — are made by the init before any
//! request, in a cgroup made for them ([`WarmRequest::Prepare`]). The
//! request then only writes the exec's bounds into that cgroup and sends
//! the command what to run: the forks, namespaces, mounts and confinement
//! are off its path. One spare at a time, made by a thread of its own once
//! the exec that took the last one has ended (made while it ran, the
//! spare's setup took the CPU from it and from its end on a 2-core
//! machine: measured, the exec's wait grew by more than its start
//! shrank); an agent host's next request comes long after, and an exec
//! that finds none takes the ordinary path.
//!
//! Nothing of a spare runs anything of a workload's before it is taken: its
//! processes are cordon's, idle, in a cgroup without a process of any
//! other exec's, and they are confined as an ordinary exec's are before
//! its command starts. A spare the init could not make, or that ended, is
//! replaced by the ordinary path in the same cgroup (the init keeps its
//! cgroup files), so taking one never fails where the ordinary path would
//! not.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::cgroup::{Cgroup, CgroupManager};
use super::proto::WarmRequest;
use crate::fdpass;

/// How long an exec waits for a spare being made before it takes the
/// ordinary path (making one takes a fraction of a millisecond).
const TAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The spare of one warm sandbox, and the thread that makes it.
pub(crate) struct Ahead {
    shared: Arc<Shared>,
}

struct Shared {
    control: Arc<std::os::fd::OwnedFd>,
    parent: Arc<Cgroup>,
    next: Arc<AtomicU64>,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The spare made: its exec id and cgroup.
    spare: Option<(u64, Cgroup)>,
    /// One is to be made.
    wanted: bool,
    /// One is being made (its cgroup, the init asked).
    making: bool,
    /// The sandbox stops: nothing more is made.
    closed: bool,
    /// Ended execs' cgroups, emptied, to remove ([`Wanter::retire`]).
    retired: Vec<Cgroup>,
}

impl Ahead {
    /// Starts the thread that makes `parent`'s spares (over `control`,
    /// with ids from `next`) and asks for the first.
    /// `CORDON_WARM_AHEAD=off` in the environment makes none (every exec
    /// the ordinary way): to measure against, or should a kernel misbehave.
    pub(crate) fn start(
        control: Arc<std::os::fd::OwnedFd>,
        parent: Arc<Cgroup>,
        next: Arc<AtomicU64>,
    ) -> Ahead {
        let off = std::env::var_os("CORDON_WARM_AHEAD").is_some_and(|v| v == "off");
        let shared = Arc::new(Shared {
            control,
            parent,
            next,
            state: Mutex::new(State {
                wanted: !off,
                closed: off,
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        if off {
            return Ahead { shared };
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("cordon-warm-ahead".into())
            .spawn(move || s.serve());
        if spawned.is_err() {
            // No thread, no spares: every exec takes the ordinary path.
            shared.lock().closed = true;
        }
        Ahead { shared }
    }

    /// The spare, if one is made (its exec id and cgroup, whose bounds the
    /// caller writes before the exec's request). One asked for or being
    /// asked of the init is waited for: its cgroup and request cost a
    /// fraction of an exec, and the init makes its processes in the order
    /// asked, so an exec that takes it never waits longer than one made
    /// the ordinary way beside it, which would share the CPU with it.
    pub(crate) fn take(&self) -> Option<(u64, Cgroup)> {
        // Bounded: a spare that does not come in time (its thread stuck,
        // or gone) leaves the exec to the ordinary path.
        let until = std::time::Instant::now() + TAKE_WAIT;
        let mut st = self.shared.lock();
        while !st.closed && (st.making || (st.wanted && st.spare.is_none())) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .shared
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.spare.take()
    }

    /// A handle an exec asks for the next spare with, once it has ended.
    pub(crate) fn wanter(&self) -> Wanter {
        Wanter(Arc::downgrade(&self.shared))
    }

    /// No more spares: the sandbox stops (it removes what was made).
    pub(crate) fn close(&self) {
        let mut st = self.shared.lock();
        st.closed = true;
        st.wanted = false;
        self.shared.wake.notify_all();
    }
}

/// Asks for a spare ([`Ahead::wanter`]); nothing once the sandbox is gone.
#[derive(Clone)]
pub(crate) struct Wanter(std::sync::Weak<Shared>);

impl Wanter {
    /// An ended exec's cgroup, every process of it killed, to be removed
    /// off the caller's path; and a spare to be made, if none is. Removed
    /// at once when the sandbox is gone or stopping (whose stop removes
    /// every cgroup of it anyway).
    pub(crate) fn retire(&self, cg: Cgroup) {
        let Some(shared) = self.0.upgrade() else {
            let _ = cg.remove();
            return;
        };
        let mut st = shared.lock();
        if st.closed {
            drop(st);
            let _ = cg.remove();
            return;
        }
        st.retired.push(cg);
        if st.spare.is_none() {
            st.wanted = true;
        }
        shared.wake.notify_all();
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.close();
    }
}

/// Ends the spares if the thread unwinds while making one.
struct Unwound<'a>(&'a Shared);

impl Drop for Unwound<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut st = self.0.lock();
            st.making = false;
            st.closed = true;
            self.0.wake.notify_all();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn serve(&self) {
        loop {
            let retired = {
                let mut st = self.lock();
                while !st.closed && st.retired.is_empty() && !(st.wanted && st.spare.is_none()) {
                    st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                if st.closed {
                    return;
                }
                std::mem::take(&mut st.retired)
            };
            // The next spare first (an exec may be waiting for it), then
            // the ended execs' cgroups.
            let make = {
                let mut st = self.lock();
                let make = st.wanted && st.spare.is_none();
                if make {
                    st.wanted = false;
                    st.making = true;
                }
                make
            };
            if make {
                // Made without the lock. A stop meanwhile removes the
                // sandbox's cgroups, this one's too (made, or failing to be
                // made).
                let made = {
                    // Should making panic, no exec waits for it.
                    let _unwound = Unwound(self);
                    self.make()
                };
                let mut st = self.lock();
                st.making = false;
                match made {
                    Some(spare) if !st.closed => st.spare = Some(spare),
                    Some((_, cg)) => {
                        let _ = cg.kill_all();
                        let _ = cg.remove();
                    }
                    None => {}
                }
                self.wake.notify_all();
            }
            for cg in retired {
                let _ = cg.remove();
            }
        }
    }

    /// A cgroup for the next exec (no bounds yet) and the init asked to
    /// make its processes in it.
    fn make(&self) -> Option<(u64, Cgroup)> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let cg = self.parent.child(&format!("exec-{id}"), None).ok()?;
        let joins = cg
            .join_files()
            .iter()
            .map(|p| std::fs::OpenOptions::new().write(true).open(p))
            .collect::<std::io::Result<Vec<File>>>();
        let sent = joins.and_then(|joins| {
            let fds: Vec<_> = joins.iter().map(AsFd::as_fd).collect();
            let req = WarmRequest::Prepare {
                id,
                joins: joins.len(),
            };
            fdpass::send(&*self.control, &req, &fds)
        });
        match sent {
            Ok(()) => Some((id, cg)),
            Err(_) => {
                let _ = cg.remove();
                None
            }
        }
    }
}
