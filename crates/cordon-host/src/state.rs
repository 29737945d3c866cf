//! The state directory: where a long-lived owner records its sandboxes, so
//! that finding, attaching to and reclaiming them never depends on one
//! process's memory.
//!
//! ```text
//! STATE/                      0700, owned by the owning user
//!   locks/<key-id>.lock       flock'd while a key's sandbox is created or disposed
//!   sandboxes/<handle>.json   the record (written whole, then renamed)
//!   sandboxes/<handle>.sock   the keeper's socket (SOCK_SEQPACKET)
//!   sandboxes/<handle>.log    the keeper's stderr
//! ```
//!
//! A handle is a name, not a capability: whoever can reach the directory
//! can drive every sandbox in it, so a state directory another user could
//! write is refused.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state directory `{path}`: {reason}\nhelp: {help}")]
    Unsafe {
        path: PathBuf,
        reason: String,
        help: String,
    },
    #[error("state directory `{path}`: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// What was given as a handle cannot be one (a handle becomes a file
    /// name, so this is checked before anything is opened).
    #[error("{} is not a sandbox handle\nhelp: handles look like `container-1a2b3c4d5e6f-0001` (lowercase letters, digits and `-`, at most 64); `cordon sandbox ls` lists them", shown_handle(.0))]
    NotAHandle(String),
    #[error("another owner holds the lock on this sandbox key (`{0}`) for over {1:?}; try again, or run `cordon sandbox gc` if an owner crashed")]
    Busy(PathBuf, Duration),
    /// A rekey's new key has a sandbox already (`scope/thread/agent_dir`).
    #[error("a sandbox already has the key {0}")]
    KeyTaken(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A running process, named so that a reused pid is not mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/PID/stat`, field 22).
    pub start: u64,
}

fn start_time(pid: u32) -> Option<u64> {
    stat_of(pid).map(|(_, start)| start)
}

/// The state letter and the start time of `pid`, from one read of
/// `/proc/PID/stat`.
fn stat_of(pid: u32) -> Option<(String, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last `)`.
    let mut rest = stat[stat.rfind(')')? + 2..].split_whitespace();
    let state = rest.next()?.to_string();
    Some((state, rest.nth(18)?.parse().ok()?))
}

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        let pid = std::process::id();
        ProcessId {
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// The process now running as `pid`, if any (its start time read now).
    pub fn of(pid: u32) -> Option<ProcessId> {
        start_time(pid).map(|start| ProcessId { pid, start })
    }

    /// Whether this very process is still running (not a zombie).
    pub fn alive(&self) -> bool {
        // One read: the start time and the state of the same process.
        match stat_of(self.pid) {
            Some((state, start)) => start == self.start && !matches!(state.as_str(), "Z" | "X"),
            None => false,
        }
    }
}

/// The key a sandbox was created for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub scope: String,
    pub thread: String,
    pub agent_dir: String,
}

impl KeyRecord {
    /// A file-name-safe id for the key (SHA-256, hex, 24 digits).
    pub fn id(&self) -> String {
        cordon_sandbox::key::key_id(&self.scope, &self.thread, &self.agent_dir)
    }
}

/// One sandbox, as the state directory knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// [`cordon_sandbox::wire::WIRE_VERSION`] of the cordon that wrote it;
    /// a record of another version is not read (gc names it).
    pub version: u32,
    pub handle: String,
    pub key: KeyRecord,
    /// Who asked for it: the owner's own name for itself (a host service,
    /// `cordon sandbox`), so a restarted owner finds what it made.
    pub owner: String,
    /// The backend (rung) that made it: `process` or `container`.
    pub backend: String,
    /// The keeper process serving it.
    pub keeper: ProcessId,
    /// Unix seconds.
    pub created: u64,
    /// Seconds without a request after which the keeper disposes of it.
    pub idle_timeout: u64,
    /// Seconds after creation after which it is disposed, busy or not.
    pub max_age: u64,
    /// What it was created for: the spec, the identity and the policy's
    /// digest, in their wire form — what `attach` reports, exactly what
    /// `up` created.
    pub provenance: cordon_sandbox::Provenance,
    /// The work dir on the host, when the backend serves it from one:
    /// clients put and collect files there directly (confined).
    pub host_work_dir: Option<cordon_sandbox::HostWorkDirRecord>,
    /// What the backend's registration reclaims if the keeper dies
    /// without disposing ([`cordon_sandbox::Sandbox::residue`]).
    pub residue: serde_json::Value,
}

impl Record {
    /// Whether its keeper is gone or it is past its maximum age.
    pub fn orphaned_or_expired(&self, now: u64) -> bool {
        !self.keeper.alive() || now.saturating_sub(self.created) > self.max_age
    }
}

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An open state directory.
#[derive(Clone, Debug)]
pub struct StateDir {
    root: PathBuf,
}

/// A held lock on one key's entry; released on drop.
#[derive(Debug)]
pub struct KeyLock {
    _file: File,
    path: PathBuf,
}

impl KeyLock {
    /// Removes the key's lock file, then releases the lock: for a key whose
    /// sandbox is gone, so `locks/` does not grow with every key ever used.
    /// Safe against a waiter: whoever locks the removed file finds it no
    /// longer at its path and opens it again.
    pub fn unlock_and_remove(self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl StateDir {
    /// `$CORDON_STATE_DIR`, else `/run/cordon` for root, else
    /// `$XDG_RUNTIME_DIR/cordon` (or `/tmp/cordon-UID`).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("CORDON_STATE_DIR").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let uid = rustix::process::geteuid().as_raw();
        if uid == 0 {
            return PathBuf::from("/run/cordon");
        }
        match std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
            Some(d) => PathBuf::from(d).join("cordon"),
            None => PathBuf::from(format!("/tmp/cordon-{uid}")),
        }
    }

    /// Opens `root`, creating it (mode 0700) when absent. Refuses a
    /// directory that is a link, is not owned by this user, or grants any
    /// access to group or others.
    pub fn open(root: &Path) -> Result<StateDir, StateError> {
        let uid = rustix::process::geteuid().as_raw();
        if !root.is_absolute() {
            return Err(StateError::Unsafe {
                path: root.to_path_buf(),
                reason: "the path is relative".into(),
                help: "name the state directory by an absolute path".into(),
            });
        }
        match fs::DirBuilder::new().mode(0o700).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o755)
                    .recursive(true)
                    .create(root.parent().unwrap_or(Path::new("/")))
                    .map_err(io_err(root))?;
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(root)
                    .map_err(io_err(root))?;
            }
            Err(e) => return Err(io_err(root)(e)),
        }
        let meta = fs::symlink_metadata(root).map_err(io_err(root))?;
        let unsafe_dir = |reason: String| {
            StateError::Unsafe {
            path: root.to_path_buf(),
            reason,
            help: format!(
                "a state directory must be a real directory owned by you (uid {uid}) with mode 0700: `chown {uid} {d} && chmod 700 {d}`, or point CORDON_STATE_DIR at a new path",
                d = root.display()
            ),
        }
        };
        if !meta.is_dir() {
            return Err(unsafe_dir("it is not a directory (or it is a link)".into()));
        }
        if meta.uid() != uid {
            return Err(unsafe_dir(format!("it is owned by uid {}", meta.uid())));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(unsafe_dir(format!(
                "its mode {:o} lets group or others in",
                meta.mode() & 0o7777
            )));
        }
        for sub in ["locks", "sandboxes"] {
            let d = root.join(sub);
            match fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let m = fs::symlink_metadata(&d).map_err(io_err(&d))?;
                    if !m.is_dir() || m.uid() != uid {
                        return Err(unsafe_dir(format!("`{sub}` is not a directory of yours")));
                    }
                }
                Err(e) => return Err(io_err(&d)(e)),
            }
        }
        Ok(StateDir {
            root: root.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Takes the exclusive lock on `key`'s entry, waiting up to `wait`.
    pub fn lock(&self, key: &KeyRecord, wait: Duration) -> Result<KeyLock, StateError> {
        self.lock_named(&format!("{}.lock", key.id()), wait)
    }

    /// Takes the exclusive lock on `scope` as a whole, waiting up to
    /// `wait`: what an owner holds while it counts a scope's sandboxes and
    /// creates one, until its record is written, so owners sharing this
    /// directory (replicas) cannot together pass a cap on the count.
    /// Release it with [`KeyLock::unlock_and_remove`]: nothing is kept in
    /// it, so its file need not outlive it.
    pub fn lock_scope(&self, scope: &str, wait: Duration) -> Result<KeyLock, StateError> {
        let id = cordon_sandbox::key::key_id(scope, "", "");
        self.lock_named(&format!("scope-{id}.lock"), wait)
    }

    /// Removes `key`'s lock file when nobody holds the lock and no record
    /// names the key (a sandbox that went by itself: its keeper's idle
    /// timeout). Held, or with a record, it is left alone.
    pub fn remove_lock_if_unused(&self, key: &KeyRecord) {
        if let Ok(lock) = self.lock(key, Duration::ZERO) {
            if matches!(self.find(key), Ok(None)) {
                lock.unlock_and_remove();
            }
        }
    }

    fn lock_named(&self, name: &str, wait: Duration) -> Result<KeyLock, StateError> {
        let path = self.root.join("locks").join(name);
        let open = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc_o_nofollow())
                .open(&path)
                .map_err(io_err(&path))
        };
        let file = open()?;
        let deadline = Instant::now() + wait;
        let mut file = file;
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    // The holder before us may have removed the file (see
                    // `unlock_and_remove`): a lock on an unlinked file locks
                    // nothing anyone else can find, so open it again.
                    let held = rustix::fs::fstat(&file).map_err(|e| io_err(&path)(e.into()))?;
                    match rustix::fs::stat(&path) {
                        Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => {
                            return Ok(KeyLock {
                                _file: file,
                                path: path.clone(),
                            })
                        }
                        _ => {
                            file = open()?;
                            continue;
                        }
                    }
                }
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {
                    if Instant::now() > deadline {
                        return Err(StateError::Busy(path, wait));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io_err(&path)(e.into())),
            }
        }
    }

    fn sandboxes(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    pub fn record_path(&self, handle: &str) -> PathBuf {
        self.sandboxes().join(format!("{handle}.json"))
    }
    pub fn socket_path(&self, handle: &str) -> PathBuf {
        self.sandboxes().join(format!("{handle}.sock"))
    }
    pub fn log_path(&self, handle: &str) -> PathBuf {
        self.sandboxes().join(format!("{handle}.log"))
    }

    /// Writes `rec` whole (temporary file, then rename).
    pub fn write(&self, rec: &Record) -> Result<(), StateError> {
        check_handle(&rec.handle)?;
        let path = self.record_path(&rec.handle);
        let tmp = self.sandboxes().join(format!(".{}.json.tmp", rec.handle));
        let bytes = serde_json::to_vec_pretty(rec).map_err(|e| io_err(&path)(e.into()))?;
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc_o_nofollow())
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(&bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_err(&path))
    }

    /// The record called `handle`, if there is one.
    pub fn read(&self, handle: &str) -> Result<Option<Record>, StateError> {
        check_handle(handle)?;
        let path = self.record_path(handle);
        let invalid = |e: String| io_err(&path)(io::Error::new(io::ErrorKind::InvalidData, e));
        match fs::read(&path) {
            Ok(bytes) => {
                let rec: Record = serde_json::from_slice(&bytes).map_err(|e| {
                    invalid(format!(
                        "{e} (a record written by another cordon version? `cordon sandbox gc` names it)"
                    ))
                })?;
                if rec.version != cordon_sandbox::wire::WIRE_VERSION {
                    return Err(invalid(format!(
                        "the record is of wire version {}, this cordon reads {}",
                        rec.version,
                        cordon_sandbox::wire::WIRE_VERSION
                    )));
                }
                Ok(Some(rec))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Every readable record, and the paths of the ones that are not.
    pub fn list(&self) -> Result<(Vec<Record>, Vec<PathBuf>), StateError> {
        let dir = self.sandboxes();
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for e in fs::read_dir(&dir).map_err(io_err(&dir))?.flatten() {
            let name = e.file_name();
            let Some(handle) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if handle.starts_with('.') {
                continue;
            }
            match self.read(handle) {
                Ok(Some(r)) => good.push(r),
                Ok(None) => {}
                Err(_) => bad.push(e.path()),
            }
        }
        good.sort_by(|a, b| a.created.cmp(&b.created).then(a.handle.cmp(&b.handle)));
        Ok((good, bad))
    }

    /// The keeper each record names, by handle, read without the rest of
    /// the record (its provenance is most of what reading one costs): for
    /// a sweep that reads in full only the records whose keeper is gone. A
    /// record that does not read as this version's is left out.
    pub fn keepers(&self) -> Result<Vec<(String, ProcessId)>, StateError> {
        /// The part of a record read here; the rest is skipped unread.
        #[derive(Deserialize)]
        struct Head {
            version: u32,
            keeper: ProcessId,
        }
        let dir = self.sandboxes();
        let mut out = Vec::new();
        for e in fs::read_dir(&dir).map_err(io_err(&dir))?.flatten() {
            let name = e.file_name();
            let Some(handle) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if handle.starts_with('.') || check_handle(handle).is_err() {
                continue;
            }
            let Ok(bytes) = fs::read(e.path()) else {
                continue;
            };
            match serde_json::from_slice::<Head>(&bytes) {
                Ok(h) if h.version == cordon_sandbox::wire::WIRE_VERSION => {
                    out.push((handle.to_string(), h.keeper))
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The record for `key`, if one exists.
    pub fn find(&self, key: &KeyRecord) -> Result<Option<Record>, StateError> {
        Ok(self.list()?.0.into_iter().find(|r| &r.key == key))
    }

    /// Moves `handle`'s sandbox to the key `to` (a warm pool's claim): under
    /// both keys' locks, refused when `to` already has a sandbox or the
    /// record is gone. The keeper goes on serving it by its handle; every
    /// later lookup by key finds it at `to`. Returns the rewritten record.
    pub fn rekey(
        &self,
        handle: &str,
        from: &KeyRecord,
        to: &KeyRecord,
    ) -> Result<Record, StateError> {
        let wait = Duration::from_secs(10);
        let _to = self.lock(to, wait)?;
        let _from = self.lock(from, wait)?;
        if self.find(to)?.is_some() {
            return Err(StateError::KeyTaken(format!(
                "{}/{}/{}",
                to.scope, to.thread, to.agent_dir
            )));
        }
        let mut rec = self.read(handle)?.ok_or_else(|| StateError::Io {
            path: self.record_path(handle),
            source: io::Error::other("the sandbox's record is gone"),
        })?;
        if &rec.key != from {
            return Err(StateError::Io {
                path: self.record_path(handle),
                source: io::Error::other("the sandbox was claimed already"),
            });
        }
        rec.key = to.clone();
        self.write(&rec)?;
        Ok(rec)
    }

    /// Removes the record, socket and log of `handle` (absent ones are fine).
    pub fn remove(&self, handle: &str) -> Result<(), StateError> {
        check_handle(handle)?;
        for p in [
            self.socket_path(handle),
            self.log_path(handle),
            self.record_path(handle),
        ] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p)(e)),
            }
        }
        Ok(())
    }
}

fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Handles are `[a-z0-9-]`, 1..=64 bytes: they become file names.
pub fn check_handle(handle: &str) -> Result<(), StateError> {
    let ok = !handle.is_empty()
        && handle.len() <= 64
        && handle
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(StateError::NotAHandle(handle.to_string()))
    }
}

/// A handle as an error shows it: quoted, its control characters escaped,
/// long ones cut.
fn shown_handle(handle: &str) -> String {
    if handle.is_empty() {
        return "an empty string".into();
    }
    let mut shown: String = handle
        .chars()
        .take(80)
        .flat_map(char::escape_debug)
        .collect();
    if handle.chars().count() > 80 {
        shown.push('…');
    }
    format!("`{shown}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }

    fn key(s: &str) -> KeyRecord {
        KeyRecord {
            scope: s.into(),
            thread: "t".into(),
            agent_dir: "a".into(),
        }
    }

    fn record(handle: &str, k: KeyRecord) -> Record {
        Record {
            version: cordon_sandbox::wire::WIRE_VERSION,
            handle: handle.into(),
            key: k,
            owner: "test".into(),
            backend: "container".into(),
            keeper: ProcessId::current(),
            created: now(),
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

    #[test]
    fn records_round_trip_and_are_found_by_key() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("state");
        let s = StateDir::open(&root).unwrap();
        assert_eq!(fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        let r = record("container-abc-1", key("s1"));
        s.write(&r).unwrap();
        assert_eq!(s.read("container-abc-1").unwrap(), Some(r.clone()));
        assert_eq!(
            s.keepers().unwrap(),
            vec![("container-abc-1".to_string(), r.keeper)]
        );
        assert_eq!(s.find(&key("s1")).unwrap(), Some(r));
        assert_eq!(s.find(&key("s2")).unwrap(), None);
        s.remove("container-abc-1").unwrap();
        assert!(s.list().unwrap().0.is_empty());
    }

    #[test]
    fn a_state_directory_others_can_reach_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("state");
        StateDir::open(&root).unwrap();
        set_mode(&root, 0o770).unwrap();
        let e = StateDir::open(&root).unwrap_err().to_string();
        assert!(
            e.contains("lets group or others in") && e.contains("chmod 700"),
            "{e}"
        );
        set_mode(&root, 0o700).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let e = StateDir::open(&link).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&root, Some(4242), None).unwrap();
            let e = StateDir::open(&root).unwrap_err().to_string();
            assert!(e.contains("owned by uid 4242"), "{e}");
        }
    }

    #[test]
    fn handles_that_are_not_plain_names_are_refused() {
        for bad in ["", "../x", "a/b", "A", "x.json", &"a".repeat(65)] {
            assert!(check_handle(bad).is_err(), "{bad}");
        }
        assert!(check_handle("container-1a2b-0001").is_ok());
    }

    #[test]
    fn the_key_lock_is_exclusive_across_opens() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::open(&d.path().join("state")).unwrap();
        let held = s.lock(&key("k"), Duration::from_secs(1)).unwrap();
        let again = StateDir::open(s.path()).unwrap();
        assert!(matches!(
            again.lock(&key("k"), Duration::from_millis(100)),
            Err(StateError::Busy(..))
        ));
        assert!(again
            .lock(&key("other"), Duration::from_millis(100))
            .is_ok());
        drop(held);
        assert!(again.lock(&key("k"), Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn a_removed_lock_file_is_not_a_lock_two_holders_share() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::open(&d.path().join("state")).unwrap();
        let first = s.lock(&key("k"), Duration::from_secs(1)).unwrap();
        // A waiter opens the same file and waits for the lock.
        let s2 = s.clone();
        let waiter =
            std::thread::spawn(move || s2.lock(&key("k"), Duration::from_secs(5)).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        first.unlock_and_remove();
        let second = waiter.join().unwrap();
        // The waiter holds the lock on the file now at the path: nobody else can.
        assert!(matches!(
            s.lock(&key("k"), Duration::from_millis(100)),
            Err(StateError::Busy(..))
        ));
        drop(second);
        assert_eq!(
            std::fs::read_dir(s.path().join("locks")).unwrap().count(),
            1
        );
    }

    #[test]
    fn a_dead_or_reused_pid_is_not_alive() {
        let me = ProcessId::current();
        assert!(me.alive());
        assert!(!ProcessId {
            pid: me.pid,
            start: me.start + 1
        }
        .alive());
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!ProcessId { pid, start: 0 }.alive());
    }
}
