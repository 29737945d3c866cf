//! Watch beneath a confined directory ([`cordon_sandbox::watch`]): inotify
//! on the directories themselves, each opened beneath the root from
//! descriptors with no link followed (`openat2`), and watched through its
//! descriptor (`/proc/self/fd/N`), so a directory swapped for a link
//! after it was opened is still the one watched and nothing outside is
//! ever added. A new directory in a recursive watch is opened and watched
//! the same way, and what it already holds is reported as created (the
//! race between its creation and its watch).
//!
//! Events for one path within [`COALESCE`] are one event; at most
//! [`MAX_PENDING`] wait for the reader, past it (or when the kernel's
//! queue overflows) they give way to one `overflow`.

use std::collections::{HashMap, VecDeque};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use cordon_sandbox::watch::{COALESCE, MAX_PENDING, MAX_WATCHED_DIRS};
use cordon_sandbox::{Next, WatchEvent, WatchKind, WatchSource};

use crate::api::{join, names, open_child, open_dir};
use crate::confined::{classify, ConfinedDir, ConfinedError};

/// One watch beneath a directory.
pub struct Watcher {
    root: ConfinedDir,
    inotify: OwnedFd,
    /// Watch descriptor → the directory's path relative to the root.
    dirs: HashMap<i32, String>,
    /// The watched directory's own descriptor.
    top: i32,
    recursive: bool,
    /// Gathering: (path, event), in the order first seen.
    pending: Vec<WatchEvent>,
    since: Option<Instant>,
    ready: VecDeque<WatchEvent>,
    /// A `moved_from` waiting for its `moved_to` (cookie, event, when
    /// read): the pair can fall into two reads of the queue, so it waits
    /// [`MOVE_PAIR`] before it is taken for a move out of the tree.
    moved: Option<(u32, WatchEvent, Instant)>,
    overflowed: bool,
    ended: Option<String>,
    buf: Vec<MaybeUninit<u8>>,
    /// Set when the watch is tracked by [`Watches`]: its end, told from
    /// another thread.
    ending: Option<Arc<Ending>>,
}

/// How long a `moved_from` waits for its `moved_to` before it is taken
/// for a move out of the tree. The kernel queues the two halves of one
/// rename back to back, but a reader can wake between them and the
/// renaming thread can be descheduled there: far longer than [`COALESCE`]
/// on a loaded host or in a guest whose vCPU the host preempts (a guest
/// under TCG on a busy CI machine saw a rename as a removal and a
/// creation). Only a move out of the tree pays it, as the latency of its
/// `removed`.
pub const MOVE_PAIR: Duration = Duration::from_millis(250);

fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

impl Watcher {
    /// Watches `rel` beneath `root` (`""`: the root itself), and every
    /// directory beneath it when `recursive`.
    pub fn open(root: &Path, rel: &str, recursive: bool) -> Result<Watcher, ConfinedError> {
        Watcher::open_in(ConfinedDir::open_no_links(root)?, rel, recursive)
    }

    /// The same beneath a directory already open.
    pub fn open_in(at: ConfinedDir, rel: &str, recursive: bool) -> Result<Watcher, ConfinedError> {
        let rel = rel.trim_matches('/').to_string();
        let fd = open_dir(&at, &rel)?;
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(|e| classify(e, &rel, "watch"))?;
        let mut w = Watcher {
            root: at,
            inotify,
            dirs: HashMap::new(),
            top: -1,
            recursive,
            pending: Vec::new(),
            since: None,
            ready: VecDeque::new(),
            moved: None,
            overflowed: false,
            ended: None,
            buf: vec![MaybeUninit::uninit(); 64 << 10],
            ending: None,
        };
        w.top = w.add(&fd, &rel)?;
        if recursive {
            w.add_beneath(&fd, &rel, false);
        }
        Ok(w)
    }

    fn add(&mut self, fd: &OwnedFd, rel: &str) -> Result<i32, ConfinedError> {
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            self.overflow();
            return Err(ConfinedError::Io {
                path: rel.to_string(),
                operation: "watch",
                reason: format!("more than {MAX_WATCHED_DIRS} directories"),
            });
        }
        let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let wd = inotify::add_watch(&self.inotify, via.as_str(), mask())
            .map_err(|e| classify(e, rel, "watch"))?;
        self.dirs.insert(wd, rel.to_string());
        Ok(wd)
    }

    /// Watches every directory beneath `fd` (at `rel`); with `report`, each
    /// entry found is a creation (a directory made before its watch).
    fn add_beneath(&mut self, fd: &OwnedFd, rel: &str, report: bool) {
        let mut stack = vec![(rustix::io::dup(fd), rel.to_string())];
        while let Some((Ok(dir), at)) = stack.pop() {
            let Ok(entries) = names(&dir, &at) else {
                continue;
            };
            for name in entries {
                let path = join(&at, &name);
                let child = open_child(&dir, &name, &path);
                if report {
                    self.gather(WatchEvent {
                        event: WatchKind::Created,
                        path: path.clone(),
                        to: None,
                        dir: child.is_ok(),
                    });
                }
                // A link, a file: not a directory to watch.
                let Ok(child) = child else { continue };
                if self.add(&child, &path).is_err() {
                    return;
                }
                stack.push((Ok(child), path));
            }
        }
    }

    /// What is gathered gives way to one `overflow`; events are taken
    /// again once the window it opens has passed.
    fn overflow(&mut self) {
        if !self.overflowed {
            self.pending.clear();
            self.ready.push_back(WatchEvent::overflow());
            self.overflowed = true;
        }
        self.since.get_or_insert_with(Instant::now);
    }

    /// One event into the gathering, merged with one for the same path.
    fn gather(&mut self, e: WatchEvent) {
        if self.overflowed {
            return;
        }
        if e.event != WatchKind::Renamed {
            if let Some(p) = self
                .pending
                .iter_mut()
                .rev()
                .find(|p| p.path == e.path && p.event != WatchKind::Renamed)
            {
                p.event = match (p.event, e.event) {
                    (WatchKind::Created, WatchKind::Modified) => WatchKind::Created,
                    (WatchKind::Removed, WatchKind::Created) => WatchKind::Modified,
                    (_, k) => k,
                };
                p.dir |= e.dir;
                return;
            }
        }
        if self.pending.len() + self.ready.len() >= MAX_PENDING {
            return self.overflow();
        }
        self.since.get_or_insert_with(Instant::now);
        self.pending.push(e);
    }

    /// Reads what the kernel has (without waiting) into the gathering.
    fn drain(&mut self) {
        let mut found = Vec::new();
        {
            let mut reader = inotify::Reader::new(&self.inotify, &mut self.buf);
            loop {
                match reader.next() {
                    Ok(ev) => found.push((
                        ev.wd(),
                        ev.events(),
                        ev.cookie(),
                        ev.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    )),
                    Err(Errno::AGAIN) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => {
                        self.ended = Some(format!("the watch failed: {e}"));
                        break;
                    }
                }
            }
        }
        for (wd, flags, cookie, name) in found {
            self.one(wd, flags, cookie, name);
        }
        self.moved_expired();
    }

    fn one(&mut self, wd: i32, flags: ReadFlags, cookie: u32, name: String) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            return self.overflow();
        }
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            if wd == self.top {
                self.ended
                    .get_or_insert_with(|| "the watched directory is gone".into());
            }
            return;
        }
        let Some(at) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
            if wd == self.top {
                self.ended
                    .get_or_insert_with(|| "the watched directory was removed or moved".into());
            }
            return;
        }
        let dir = flags.contains(ReadFlags::ISDIR);
        let path = join(&at, &name);
        let event = |event| WatchEvent {
            event,
            path: path.clone(),
            to: None,
            dir,
        };
        if let Some((c, from, _)) = self.moved.take() {
            if !(flags.contains(ReadFlags::MOVED_TO) && c == cookie) {
                self.moved_out(from);
            } else {
                if dir && self.recursive {
                    self.moved_dirs(&from.path, Some(&path));
                }
                self.gather(WatchEvent {
                    event: WatchKind::Renamed,
                    path: from.path,
                    to: Some(path.clone()),
                    dir,
                });
                return;
            }
        }
        if flags.contains(ReadFlags::MOVED_FROM) {
            self.moved = Some((cookie, event(WatchKind::Removed), Instant::now()));
        } else if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
            self.gather(event(WatchKind::Created));
            if dir && self.recursive {
                self.watch_new(&path);
            }
        } else if flags.contains(ReadFlags::DELETE) {
            self.gather(event(WatchKind::Removed));
        } else if flags.intersects(ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE) {
            self.gather(event(WatchKind::Modified));
        }
    }

    /// A move out of the watched tree: its `moved_to` never came within
    /// the window.
    fn moved_expired(&mut self) {
        if let Some((_, _, at)) = &self.moved {
            if at.elapsed() >= MOVE_PAIR {
                if let Some((_, e, _)) = self.moved.take() {
                    self.moved_out(e);
                }
            }
        }
    }

    /// What moved out of the tree is removed, and a directory's watches
    /// beneath it go with it.
    fn moved_out(&mut self, mut e: WatchEvent) {
        e.event = WatchKind::Removed;
        if e.dir && self.recursive {
            self.moved_dirs(&e.path, None);
        }
        self.gather(e);
    }

    /// The watches at or beneath the directory `from`, renamed to `to`
    /// (their descriptors stay: the kernel watches inodes), or dropped.
    fn moved_dirs(&mut self, from: &str, to: Option<&str>) {
        let beneath =
            |p: &str| p == from || p.strip_prefix(from).is_some_and(|r| r.starts_with('/'));
        let hit: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, p)| beneath(p))
            .map(|(w, _)| *w)
            .collect();
        for wd in hit {
            match to {
                Some(to) => {
                    if let Some(p) = self.dirs.get_mut(&wd) {
                        *p = format!("{to}{}", &p[from.len()..]);
                    }
                }
                None => {
                    self.dirs.remove(&wd);
                    let _ = inotify::remove_watch(&self.inotify, wd);
                }
            }
        }
    }

    /// Watches a directory made in (or moved into) a watched one, and
    /// reports what it already holds.
    fn watch_new(&mut self, path: &str) {
        let Ok(fd) = open_dir(&self.root, path) else {
            // Gone already, or a link put in its place: nothing to watch.
            return;
        };
        if self.add(&fd, path).is_ok() {
            self.add_beneath(&fd, path, true);
        }
    }

    fn flush(&mut self) {
        if let Some(t) = self.since {
            if t.elapsed() >= COALESCE {
                self.ready.extend(self.pending.drain(..));
                self.since = None;
                self.overflowed = false;
            }
        }
    }
}

impl WatchSource for Watcher {
    fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Next::Event(e);
            }
            if self.ended.is_some() {
                if let Some((_, e, _)) = self.moved.take() {
                    self.moved_out(e);
                }
                if self.pending.is_empty() {
                    return Next::Ended(self.ended.clone().unwrap_or_default());
                }
                self.ready.extend(self.pending.drain(..));
                continue;
            }
            self.moved_expired();
            self.flush();
            if !self.ready.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Quiet;
            }
            let mut until = deadline - now;
            if let Some(t) = self.since {
                until = until.min((t + COALESCE).saturating_duration_since(now));
            }
            if let Some((_, _, t)) = &self.moved {
                until = until.min((*t + MOVE_PAIR).saturating_duration_since(now));
            }
            let ts = rustix::time::Timespec::try_from(until).unwrap_or(rustix::time::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            let polled = match &self.ending {
                Some(end) => {
                    let mut fds = [
                        rustix::event::PollFd::new(&self.inotify, rustix::event::PollFlags::IN),
                        rustix::event::PollFd::new(&end.wake_r, rustix::event::PollFlags::IN),
                    ];
                    let polled = rustix::event::poll(&mut fds, Some(&ts));
                    if !fds[1].revents().is_empty() {
                        self.ended.get_or_insert_with(|| end.reason());
                    }
                    polled
                }
                None => rustix::event::poll(
                    &mut [rustix::event::PollFd::new(
                        &self.inotify,
                        rustix::event::PollFlags::IN,
                    )],
                    Some(&ts),
                ),
            };
            match polled {
                Ok(_) | Err(Errno::INTR) => self.drain(),
                Err(e) => self.ended = Some(format!("the watch failed: {e}")),
            }
        }
    }
}

/// The watches opened on one sandbox's files, ended together when the
/// sandbox goes ([`Watches::end_all`]). Each is told through a pipe its
/// reader polls with its inotify queue; it ends (its last events first)
/// and drops every descriptor it holds, so nothing of the sandbox's
/// filesystem stays open past its dispose: a volume unmounted lazily (and
/// the loop device under it) goes only with the last descriptor on it.
#[derive(Debug, Default)]
pub struct Watches {
    live: Mutex<Vec<Weak<Ending>>>,
}

/// One tracked watch's end: told through `wake_w`, done once its reader
/// has let go of the watch.
#[derive(Debug)]
struct Ending {
    wake_r: OwnedFd,
    wake_w: OwnedFd,
    why: Mutex<String>,
    done: Mutex<bool>,
    gone: Condvar,
}

impl Ending {
    fn reason(&self) -> String {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn finished(&self) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gone.notify_all();
    }
}

impl Watches {
    /// `w`, tracked: ended by [`Watches::end_all`].
    pub fn track(&self, mut w: Watcher) -> Result<Box<dyn WatchSource>, ConfinedError> {
        let (wake_r, wake_w) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .map_err(|e| classify(e, "", "watch"))?;
        let end = Arc::new(Ending {
            wake_r,
            wake_w,
            why: Mutex::new(String::new()),
            done: Mutex::new(false),
            gone: Condvar::new(),
        });
        w.ending = Some(end.clone());
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|e| e.strong_count() > 0);
        live.push(Arc::downgrade(&end));
        Ok(Box::new(Tracked {
            w: Some(w),
            end,
            ended: String::new(),
        }))
    }

    /// Ends every watch still open (each one's last line says `why`) and
    /// waits, at most `within`, until each has let go of its descriptors;
    /// how many had not by then (a reader that stopped reading: its
    /// descriptors go when it does).
    pub fn end_all(&self, why: &str, within: Duration) -> usize {
        let live: Vec<Arc<Ending>> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .filter_map(|e| e.upgrade())
            .collect();
        for e in &live {
            *e.why.lock().unwrap_or_else(|p| p.into_inner()) = why.to_string();
            let _ = rustix::io::write(&e.wake_w, b"x");
        }
        let until = Instant::now() + within;
        let mut left = 0;
        for e in &live {
            let mut done = e.done.lock().unwrap_or_else(|p| p.into_inner());
            while !*done {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                done = match e.gone.wait_timeout(done, until - now) {
                    Ok((d, _)) => d,
                    Err(p) => p.into_inner().0,
                };
            }
            if !*done {
                left += 1;
            }
        }
        left
    }
}

/// A tracked watch: the watcher is dropped (its descriptors closed) as
/// soon as it ends, before its end is said.
struct Tracked {
    w: Option<Watcher>,
    end: Arc<Ending>,
    ended: String,
}

impl WatchSource for Tracked {
    fn next(&mut self, wait: Duration) -> Next {
        let Some(w) = self.w.as_mut() else {
            return Next::Ended(self.ended.clone());
        };
        match w.next(wait) {
            Next::Ended(why) => {
                self.w = None;
                self.end.finished();
                self.ended = why.clone();
                Next::Ended(why)
            }
            n => n,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.w = None;
        self.end.finished();
    }
}

impl AsFd for Watcher {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rename whose two halves fall into two reads of the queue is still
    /// one rename; a half whose pair never comes is a removal, once the
    /// window has passed.
    #[test]
    fn a_rename_split_across_reads_is_one_rename() {
        let t = tempfile::tempdir().unwrap();
        let mut w = Watcher::open(t.path(), "", false).unwrap();
        let top = w.top;
        w.one(top, ReadFlags::MOVED_FROM, 7, "a".into());
        // The second half comes later than the coalescing window: a
        // descheduled renamer, not a move out of the tree.
        std::thread::sleep(COALESCE * 5);
        w.moved_expired();
        assert!(w.pending.is_empty(), "{:?}", w.pending);
        w.one(top, ReadFlags::MOVED_TO, 7, "b".into());
        assert_eq!(
            (
                w.pending[0].event,
                w.pending[0].path.as_str(),
                w.pending[0].to.as_deref()
            ),
            (WatchKind::Renamed, "a", Some("b"))
        );
        w.one(top, ReadFlags::MOVED_FROM, 9, "c".into());
        std::thread::sleep(MOVE_PAIR + Duration::from_millis(5));
        w.moved_expired();
        assert!(
            w.pending
                .iter()
                .any(|e| e.event == WatchKind::Removed && e.path == "c"),
            "{:?}",
            w.pending
        );
    }

    /// The descriptors of this process open on `dir` or beneath it.
    fn open_beneath(dir: &Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|t| t.starts_with(dir))
            .collect()
    }

    /// A tracked watch whose reader sits in `next` is ended from another
    /// thread: its last events come first, then its end with the reason,
    /// and by the time `end_all` returns it holds no descriptor on the
    /// directory (what lets a lazily unmounted volume go with its
    /// dispose). An untracked watch would still hold them.
    #[test]
    fn end_all_ends_a_waiting_watch_and_lets_go_of_the_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().canonicalize().unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        let watches = Watches::default();
        let mut w = watches
            .track(Watcher::open(&dir, "", true).unwrap())
            .unwrap();
        assert!(
            !open_beneath(&dir).is_empty(),
            "the watch holds the directory"
        );
        std::fs::write(dir.join("sub/f"), b"x").unwrap();
        let reader = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let started = Instant::now();
            loop {
                match w.next(Duration::from_secs(30)) {
                    Next::Event(e) => seen.push(e.path),
                    Next::Quiet => {}
                    Next::Ended(why) => return (seen, why, started.elapsed(), w),
                }
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(watches.end_all("gone", Duration::from_secs(5)), 0);
        assert_eq!(open_beneath(&dir), Vec::<std::path::PathBuf>::new());
        let (seen, why, took, mut w) = reader.join().unwrap();
        assert_eq!((seen, why.as_str()), (vec!["sub/f".to_string()], "gone"));
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(matches!(w.next(Duration::ZERO), Next::Ended(r) if r == "gone"));
        // Ending twice, or with no watch left, waits for nothing.
        assert_eq!(watches.end_all("again", Duration::from_secs(5)), 0);
        // Untracked, the same watch keeps its descriptors until dropped.
        let plain = Watcher::open(&dir, "", true).unwrap();
        assert!(!open_beneath(&dir).is_empty());
        drop(plain);
        assert!(open_beneath(&dir).is_empty());
    }
}
