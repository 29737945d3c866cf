//! Serving a sandbox's files from a host directory.
//!
//! [`HostWorkDir`] is for backends whose guest work dir is a host directory
//! (a bind mount, a synced directory): it maps guest paths under `work_dir`
//! to that directory and serves [`Sandbox::stat_no_follow`],
//! [`Sandbox::read_file`] and [`Sandbox::write_file`] through the confined
//! primitives — the confinement walk over the host path (ancestors
//! included) with an unconfined `lstat`, then `openat2` beneath a
//! descriptor of the work dir opened with no link on its path. A backend
//! delegates its files-out hooks, and every host-side write into the work
//! dir, to it.
//!
//! [`HostDirectorySandbox`] is a whole [`Sandbox`] over a host directory
//! whose `exec` runs commands **on the host**, with no isolation at all. It
//! is the conformance kit's test subject and nothing more: no backend hands
//! it to a router.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_sandbox::confined::{refuse_symlinked_parents, Parents};
use cordon_sandbox::{
    validate_artifact_name, Attach, ExecHandle, ExecRequest, ExitStatus, FileAnswer, FileOp,
    FileRead, FileStat, Killer, Provenance, Sandbox, SandboxError, StdinFeed, WriteHow,
};

use crate::confined::{host_lstat, ConfinedDir, Existing};

/// A guest work dir served from a host directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostWorkDir {
    host: PathBuf,
    guest: String,
    owner: Option<(u32, u32)>,
    /// The directory held open, when it has no host path cordon can walk
    /// (`host` is then only what errors show).
    pinned: Option<Pinned>,
    /// Whether its files API runs as its owner ([`HostWorkDir::as_owner`]).
    as_owner: bool,
}

/// A directory's descriptor shared by the clones of one [`HostWorkDir`].
#[derive(Debug, Clone)]
struct Pinned(Arc<std::os::fd::OwnedFd>);

impl PartialEq for Pinned {
    fn eq(&self, other: &Pinned) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Pinned {}

impl HostWorkDir {
    /// `host` is the absolute host directory the guest sees as `guest`.
    pub fn new(host: impl Into<PathBuf>, guest: &str) -> Result<HostWorkDir, SandboxError> {
        let host = host.into();
        let shown = host.display().to_string();
        let refuse = |reason: &str| SandboxError::PathRefused {
            path: shown.clone(),
            reason: reason.to_string(),
        };
        if !host.is_absolute() || host.to_str().is_none() {
            return Err(refuse("the host work dir must be an absolute UTF-8 path"));
        }
        if !guest.starts_with('/') || guest.len() < 2 {
            return Err(refuse("the guest work dir must be absolute and not `/`"));
        }
        Ok(HostWorkDir {
            host,
            guest: guest.trim_end_matches('/').to_string(),
            owner: None,
            pinned: None,
            as_owner: false,
        })
    }

    /// A directory the guest sees as `guest`, served beneath `dir` (held
    /// open: a sandbox's own `/tmp` in its mount namespace, say), which no
    /// host path reaches; `shown` names it in what the host logs.
    pub fn pinned(
        dir: Arc<std::os::fd::OwnedFd>,
        shown: &str,
        guest: &str,
    ) -> Result<HostWorkDir, SandboxError> {
        let mut d = HostWorkDir::new(shown, guest)?;
        d.pinned = Some(Pinned(dir));
        Ok(d)
    }

    /// Its files API (and writes in) run on a thread whose effective ids
    /// are the owner's ([`HostWorkDir::owned_by`]) for the call: a
    /// filesystem mounted in the sandbox's user namespace (the container
    /// rung's `/tmp`) makes no inode for a uid that namespace does not
    /// map, and host root is not mapped there. What runs as the owner may
    /// do no more than the workload could.
    pub fn as_owner(mut self) -> HostWorkDir {
        self.as_owner = true;
        self
    }

    /// `f`, as the owner when [`HostWorkDir::as_owner`] asks (and this
    /// process is root, which can switch and switch back); the ids are
    /// restored after, a panic included. The switch is this thread's
    /// alone: `f` must do its work on this thread, synchronously (a
    /// thread or task it started would run as root, and the tmpfs would
    /// refuse it).
    fn acting<T>(&self, f: impl FnOnce() -> Result<T, SandboxError>) -> Result<T, SandboxError> {
        let Some((uid, gid)) = self.owner.filter(|_| self.as_owner) else {
            return f();
        };
        if !rustix::process::geteuid().is_root() {
            return f();
        }
        struct Back(rustix::process::Gid);
        impl Drop for Back {
            fn drop(&mut self) {
                // INVARIANT: the saved uid stayed root, so both succeed.
                let _ = rustix::thread::set_thread_res_uid(None, rustix::process::Uid::ROOT, None);
                let _ = rustix::thread::set_thread_res_gid(None, self.0, None);
            }
        }
        let switch = |e: rustix::io::Errno| SandboxError::Failed {
            operation: "act as the files' owner",
            reason: e.to_string(),
        };
        let back = Back(rustix::process::getegid());
        // Per-thread ids (rustix makes the raw system calls, which change
        // this thread's alone), the group first while still root.
        rustix::thread::set_thread_res_gid(None, rustix::process::Gid::from_raw(gid), None)
            .map_err(switch)?;
        rustix::thread::set_thread_res_uid(None, rustix::process::Uid::from_raw(uid), None)
            .map_err(switch)?;
        let out = f();
        drop(back);
        out
    }

    /// The directory, opened with no link on its path (or the pinned one).
    fn root(&self) -> Result<ConfinedDir, SandboxError> {
        match &self.pinned {
            Some(Pinned(fd)) => ConfinedDir::pinned(fd, &self.host.display().to_string()),
            None => ConfinedDir::open_no_links(&self.host),
        }
        .map_err(|e| self.guest_view(e.into()))
    }

    /// Files and directories [`HostWorkDir::write_file`] creates belong to
    /// `uid`/`gid` (handed over through their descriptors, so a link the
    /// guest swaps in meanwhile is never chowned).
    pub fn owned_by(mut self, uid: u32, gid: u32) -> HostWorkDir {
        self.owner = Some((uid, gid));
        self
    }

    /// Whom what is written in is handed to, if anyone.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    pub fn host(&self) -> &Path {
        &self.host
    }

    pub fn guest(&self) -> &str {
        &self.guest
    }

    /// The path beneath the work dir a guest path names; anything outside
    /// it, or not canonical, is refused.
    pub fn relative<'p>(&self, guest_path: &'p str) -> Result<&'p str, SandboxError> {
        let refuse = |reason: String| SandboxError::PathRefused {
            path: guest_path.to_string(),
            reason,
        };
        let rel = guest_path
            .strip_prefix(self.guest.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| refuse(format!("it is not beneath the work dir `{}`", self.guest)))?;
        validate_artifact_name(rel).map_err(|e| refuse(e.to_string()))?;
        Ok(rel)
    }

    fn host_string(&self, rel: &str) -> String {
        format!("{}/{rel}", self.host.display())
    }

    /// The walk over the whole host path, then a confined no-follow stat.
    pub fn stat_no_follow(&self, guest_path: &str) -> Result<Option<FileStat>, SandboxError> {
        let rel = self.relative(guest_path)?;
        if self.pinned.is_some() {
            // No host path to walk: beneath the descriptor, no link.
            return self
                .root()?
                .stat(rel)
                .map_err(|e| self.guest_view(e.into()));
        }
        let host = self.host.display().to_string();
        let mut last = String::new();
        let walked = refuse_symlinked_parents(&self.host_string(rel), |p| {
            last = p.to_string();
            host_lstat(p)
        });
        match walked {
            Ok(Parents::Present) => {}
            Ok(Parents::Absent { .. }) => return Ok(None),
            // Refused above the work dir: a host path the guest has no
            // name for, so it is not named.
            Err(SandboxError::PathRefused { .. })
                if !last.is_empty() && last != host && !last.starts_with(&format!("{host}/")) =>
            {
                return Err(SandboxError::PathRefused {
                    path: guest_path.to_string(),
                    reason: "the work dir's place on the host has a symbolic link or a non-directory on its path; cordon follows no links on an output's path".into(),
                })
            }
            Err(SandboxError::PathRefused { reason, .. }) => {
                return Err(self.guest_view(SandboxError::PathRefused {
                    path: guest_path.to_string(),
                    reason,
                }))
            }
            Err(e) => return Err(self.guest_view(e)),
        }
        let dir = self.root()?;
        dir.stat(rel).map_err(|e| self.guest_view(e.into()))
    }

    /// `e` as the guest sees it: wherever it carries the host directory's
    /// path (its path, its reason), the guest work dir instead. What a
    /// sandbox's files say reaches a model (MCP) and a tenant (HTTP); the
    /// host's layout (a volume's directory, a keeper's pid in its name)
    /// is neither's to see.
    pub fn guest_view(&self, e: SandboxError) -> SandboxError {
        let host = self.host.display().to_string();
        let map = |s: String| s.replace(&host, &self.guest);
        match e {
            SandboxError::NotFound { path } => SandboxError::NotFound { path: map(path) },
            SandboxError::PathRefused { path, reason } => SandboxError::PathRefused {
                path: map(path),
                reason: map(reason),
            },
            SandboxError::NotRegularFile { path, found } => SandboxError::NotRegularFile {
                path: map(path),
                found,
            },
            SandboxError::ConfinementUnavailable { path, reason } => {
                SandboxError::ConfinementUnavailable {
                    path: map(path),
                    reason: map(reason),
                }
            }
            SandboxError::Failed { operation, reason } => SandboxError::Failed {
                operation,
                reason: map(reason),
            },
            SandboxError::Refused { reason, rules } => SandboxError::Refused {
                reason: map(reason),
                rules,
            },
            SandboxError::Unavailable { reason } => SandboxError::Unavailable {
                reason: map(reason),
            },
            SandboxError::Invalid { reason } => SandboxError::Invalid {
                reason: map(reason),
            },
            unsupported @ SandboxError::Unsupported { .. } => unsupported,
        }
    }

    /// A bounded, confined read (see [`Sandbox::read_file`]).
    pub fn read_file(&self, guest_path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        let rel = self.relative(guest_path)?;
        let dir = self.root()?;
        dir.read_capped(rel, max_bytes).map_err(|e| {
            let mut e = SandboxError::from(e);
            if let SandboxError::NotFound { path } | SandboxError::PathRefused { path, .. } = &mut e
            {
                *path = guest_path.to_string();
            }
            self.guest_view(e)
        })
    }

    /// A confined listing of a directory in the work dir (the work dir
    /// itself included): at most `max_entries + 1` entries, so the caller
    /// sees one larger than its cap (see [`ConfinedDir::list`]).
    pub fn list_dir(
        &self,
        guest_path: &str,
        max_entries: usize,
    ) -> Result<Vec<cordon_sandbox::DirEntry>, SandboxError> {
        let rel = if guest_path.trim_end_matches('/') == self.guest {
            ""
        } else {
            self.relative(guest_path)?
        };
        let dir = self.root()?;
        dir.list(rel, max_entries).map_err(|e| {
            let mut e = SandboxError::from(e);
            if let SandboxError::NotFound { path } | SandboxError::PathRefused { path, .. } = &mut e
            {
                *path = guest_path.to_string();
            }
            self.guest_view(e)
        })
    }

    /// One operation of the files API ([`cordon_sandbox::files`]) on the
    /// work dir, through [`crate::api`]: nothing followed out, what it
    /// makes handed to the work dir's owner. The policy's decision is the
    /// guard's, before this.
    pub fn files(&self, op: &FileOp) -> Result<FileAnswer, SandboxError> {
        self.acting(|| self.files_now(op))
    }

    fn files_now(&self, op: &FileOp) -> Result<FileAnswer, SandboxError> {
        use cordon_sandbox::files::{absolute, MAX_LIST_DEPTH, MAX_LIST_ENTRIES};
        let rel_of = |p: &str| -> Result<String, SandboxError> {
            let abs = absolute(&self.guest, p);
            if abs.trim_end_matches('/') == self.guest {
                Ok(String::new())
            } else {
                self.relative(&abs).map(str::to_string)
            }
        };
        let mut dir = self.root()?;
        if let Some((uid, gid)) = self.owner {
            dir = dir.owned_by(uid, gid);
        }
        let info = |e: crate::api::Entry| cordon_sandbox::FileInfo {
            path: e.path,
            kind: e.kind,
            size: e.size,
            mode: e.mode,
            mtime: e.mtime,
        };
        let done: Result<FileAnswer, crate::confined::ConfinedError> = match op {
            FileOp::List { path, depth } => {
                let l = dir.list_tree(
                    &rel_of(path)?,
                    (*depth).min(MAX_LIST_DEPTH),
                    MAX_LIST_ENTRIES,
                );
                l.map(|l| FileAnswer::Listing {
                    entries: l.entries.into_iter().map(info).collect(),
                    truncated: l.truncated,
                })
            }
            FileOp::Stat { path } => dir
                .info(&rel_of(path)?)
                .map(|e| FileAnswer::Stat(e.map(info))),
            FileOp::Read { path, offset, len } => dir
                .read_range(&rel_of(path)?, *offset, *len)
                .map(|(data, size)| FileAnswer::Read { data, size }),
            FileOp::Write {
                path,
                data,
                mode,
                how,
            } => {
                let rel = rel_of(path)?;
                match how {
                    WriteHow::Append => dir.append(&rel, data),
                    WriteHow::Create => dir.write_file(&rel, data, *mode, Existing::Refuse, None),
                    WriteHow::Truncate => {
                        dir.write_file(&rel, data, *mode, Existing::Replace, None)
                    }
                }
                .map(|()| FileAnswer::Done(true))
            }
            FileOp::Mkdir { path } => dir
                .create_dirs(&rel_of(path)?)
                .map(|_| FileAnswer::Done(true)),
            FileOp::Remove { path, recursive } => {
                dir.remove(&rel_of(path)?, *recursive).map(FileAnswer::Done)
            }
            FileOp::Rename { from, to } => dir
                .rename(&rel_of(from)?, &rel_of(to)?)
                .map(|()| FileAnswer::Done(true)),
        };
        done.map_err(|e| self.guest_view(e.into()))
    }

    /// A watch of the directory `guest_path` (beneath it too when
    /// `recursive`) on the work dir's own inodes ([`crate::watch`]).
    pub fn watch(
        &self,
        guest_path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        self.watcher(guest_path, recursive)
            .map(|w| Box::new(w) as Box<dyn cordon_sandbox::WatchSource>)
    }

    /// The same, tracked by `watches` (ended by
    /// [`crate::watch::Watches::end_all`] when the sandbox goes).
    pub fn watch_tracked(
        &self,
        guest_path: &str,
        recursive: bool,
        watches: &crate::watch::Watches,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        let w = self.watcher(guest_path, recursive)?;
        watches
            .track(w)
            .map_err(|e| self.guest_view(SandboxError::from(e)))
    }

    fn watcher(
        &self,
        guest_path: &str,
        recursive: bool,
    ) -> Result<crate::watch::Watcher, SandboxError> {
        let abs = cordon_sandbox::files::absolute(&self.guest, guest_path);
        let rel = if abs.trim_end_matches('/') == self.guest {
            ""
        } else {
            self.relative(&abs)?
        };
        crate::watch::Watcher::open_in(self.root()?, rel, recursive).map_err(|e| {
            let mut e = SandboxError::from(e);
            if let SandboxError::NotFound { path } | SandboxError::PathRefused { path, .. } = &mut e
            {
                *path = guest_path.to_string();
            }
            self.guest_view(e)
        })
    }

    /// A confined host-side write: parents created beneath the work dir's
    /// descriptor, a temporary file renamed into place. A link the guest
    /// planted at the destination is replaced, never followed; one on a
    /// parent is refused.
    pub fn write_file(
        &self,
        guest_path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), SandboxError> {
        self.acting(|| self.write_file_now(guest_path, contents, mode))
    }

    fn write_file_now(
        &self,
        guest_path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), SandboxError> {
        let rel = self.relative(guest_path)?;
        let mut dir = self.root()?;
        if let Some((uid, gid)) = self.owner {
            dir = dir.owned_by(uid, gid);
        }
        dir.write_file(rel, contents, mode, Existing::Replace, None)
            .map_err(|e| self.guest_view(e.into()))
    }
}

/// A sandbox's secrets directory on the host, which the workload sees
/// read-only at [`cordon_sandbox::secrets::SECRETS_DIR`] (a backend binds
/// it there). [`HostSecretsDir::write_secret`] is the only way in: the same
/// confined write as the work dir's (no link followed, a temporary file
/// renamed into place), each file and directory owned by root with the
/// sandbox's group, so the workload reads its secrets through its group
/// and owns nothing there (it can neither re-mode nor replace them, by any
/// path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSecretsDir {
    files: HostWorkDir,
}

impl HostSecretsDir {
    /// `host`: the directory, made by the owner for this sandbox alone;
    /// `gid`: the group the workload runs as.
    pub fn new(host: impl Into<PathBuf>, gid: u32) -> Result<HostSecretsDir, SandboxError> {
        Ok(HostSecretsDir {
            files: HostWorkDir::new(host, cordon_sandbox::secrets::SECRETS_DIR)?.owned_by(0, gid),
        })
    }

    /// Makes `host` (which must not exist: nothing planted is used),
    /// root's with group `gid`, mode 0750 — the workload lists and reads
    /// it, owns nothing in it, and no other uid gets in — and serves it.
    /// A directory half made is removed.
    pub fn make(host: impl Into<PathBuf>, gid: u32) -> Result<HostSecretsDir, String> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let host = host.into();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&host)
            .map_err(|e| format!("the secrets directory `{}`: {e}", host.display()))?;
        let handed = std::os::unix::fs::chown(&host, Some(0), Some(gid))
            .and_then(|()| std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o750)))
            .map_err(|e| {
                format!(
                    "handing the secrets directory `{}` to gid {gid}: {e}",
                    host.display()
                )
            })
            .and_then(|()| HostSecretsDir::new(&host, gid).map_err(|e| e.to_string()));
        if handed.is_err() {
            let _ = std::fs::remove_dir(&host);
        }
        handed
    }

    pub fn host(&self) -> &Path {
        self.files.host()
    }

    /// Whether `guest_path` names something under the secrets directory
    /// (this type's to write, or nobody's).
    pub fn names(guest_path: &str) -> bool {
        guest_path
            .strip_prefix(cordon_sandbox::secrets::SECRETS_DIR)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Writes one secret. `mode`'s owner read bit is given to the group
    /// (the workload's); no write or execute bit is ever set.
    pub fn write_secret(
        &self,
        guest_path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), SandboxError> {
        let read = mode & 0o400;
        self.files
            .write_file(guest_path, contents, read | (read >> 3))
    }
}

/// A [`Sandbox`] over a host directory that runs commands on the host
/// itself — no isolation. The conformance kit's test subject (see
/// `cordon_kits::conformance`); never give it to a router.
#[derive(Debug)]
pub struct HostDirectorySandbox {
    id: String,
    files: HostWorkDir,
    provenance: Provenance,
}

impl HostDirectorySandbox {
    /// The guest sees the host directory at its own path.
    pub fn new(host: &Path, provenance: Provenance) -> Result<HostDirectorySandbox, SandboxError> {
        let guest = host.to_str().ok_or_else(|| SandboxError::PathRefused {
            path: host.display().to_string(),
            reason: "the host work dir must be a UTF-8 path".into(),
        })?;
        Ok(HostDirectorySandbox {
            id: format!("host-directory:{guest}"),
            files: HostWorkDir::new(host, guest)?,
            provenance,
        })
    }

    pub fn files(&self) -> &HostWorkDir {
        &self.files
    }
}

impl Sandbox for HostDirectorySandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn files(&self, op: &FileOp) -> Result<FileAnswer, SandboxError> {
        self.files.files(op)
    }

    fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        self.files.watch(path, recursive)
    }

    fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// Runs `argv` on the host in the work dir with only `req.env`
    /// (stdin streamed or fed the request's bytes; killed at its timeout).
    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let failed = |reason: String| SandboxError::Failed {
            operation: "exec",
            reason,
        };
        if attach.tty.is_some() {
            return Err(SandboxError::Unavailable {
                reason: "the host-directory subject has no terminal of its own to give".into(),
            });
        }
        let (program, args) = req
            .argv
            .split_first()
            .ok_or_else(|| failed("the command is empty".into()))?;
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(&req.env)
            .current_dir(self.files.host())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("`{program}`: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(failed("the child's pipes were not made".into()));
        };
        let stdin = match attach.stdin_stream {
            true => StdinFeed::Stream(Box::new(stdin)),
            false => StdinFeed::Bytes(Box::new(stdin), req.stdin.clone()),
        };
        let child = Arc::new(Mutex::new(child));
        let on_kill = child.clone();
        let timeout = req.timeout;
        Ok(ExecHandle::from_pipes(
            stdin,
            stdout,
            stderr,
            req.max_output_bytes,
            move || {
                let started = Instant::now();
                loop {
                    let mut c = child.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(s) = c.try_wait().map_err(|e| failed(e.to_string()))? {
                        use std::os::unix::process::ExitStatusExt;
                        return Ok(match (s.code(), s.signal()) {
                            (Some(code), _) => ExitStatus::Code(code),
                            (None, sig) => ExitStatus::Signal(sig.unwrap_or(0)),
                        });
                    }
                    if started.elapsed() >= timeout {
                        let _ = c.kill();
                        let _ = c.wait();
                        return Ok(ExitStatus::TimedOut);
                    }
                    drop(c);
                    std::thread::sleep(Duration::from_millis(5));
                }
            },
            Killer::new(move || {
                let _ = on_kill.lock().unwrap_or_else(|p| p.into_inner()).kill();
            }),
        ))
    }

    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.files.write_file(path, contents, mode)
    }

    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.files.stat_no_follow(path)
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.files.read_file(path, max_bytes)
    }
}
