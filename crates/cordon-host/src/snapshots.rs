//! cordon's snapshot store: a kept sandbox's files, captured (paused, where
//! the backend can pause) into a tree of root's, content-addressed, with
//! the provenance it was made under; the origin a new sandbox is made from.
//!
//! ```text
//! STORE/ (0700, root's; $CORDON_SNAPSHOT_DIR, else /var/lib/cordon/snapshots)
//!   snap-<sha256 prefix>/
//!     manifest.json   what it is: scope, thread, name, when, the backend,
//!                     the provenance (spec, identity, policy digest), every
//!                     entry with its hash; the id is the hash of all that
//!                     but the time and the name
//!     tree/           the work dir's files, root's, permission bits only
//!   .making-<pid>-<n>/  a capture in progress (removed on failure; a
//!                     killed one is swept by the next capture)
//! ```
//!
//! A snapshot's tree is never written again once made: the sandboxes made
//! from it mount it read-only underneath a writable layer of their own
//! (`cordon_linux::workspace`), so any number of them share its bytes.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cordon_files::tree::{copy_tree, hex, TreeEntry};
use cordon_sandbox::{Origin, Provenance, Sandbox};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The environment variable naming the store.
pub const SNAPSHOT_DIR_ENV: &str = "CORDON_SNAPSHOT_DIR";

/// Each scope's snapshots together hold at most this many bytes of files
/// unless the host configuration says otherwise (`snapshots.quota_per_scope`).
pub const DEFAULT_QUOTA_PER_SCOPE: u64 = 4 << 30;

pub use cordon_sandbox::NO_MEMORY_SNAPSHOT;

/// What a snapshot captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// The files; the sandbox resumed after.
    Files,
    /// The files; the sandbox left paused (a paused sandbox's own).
    FilesLeftPaused,
    /// The processes with their memory (`--memory`: they end in the
    /// sandbox and go on in one made from the snapshot), then the files
    /// as they left them.
    Memory,
}

/// The most entries one snapshot holds.
pub const MAX_ENTRIES: usize = 200_000;

const MANIFEST_VERSION: u32 = 1;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A snapshot, as its manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub version: u32,
    /// `snap-` and 24 hex digits of the SHA-256 of what it holds and was
    /// made under (not when, not its name).
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub scope: String,
    pub thread: String,
    /// Seconds since the epoch.
    pub created: u64,
    /// The backend of the sandbox it was taken from.
    pub backend: String,
    pub provenance: Provenance,
    pub files: usize,
    pub bytes: u64,
    pub entries: Vec<TreeEntry>,
    /// What was left out (FIFOs, sockets, devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// For a `--memory` snapshot, how many processes it holds (in
    /// `memory/`, the backend's form); `None`: files only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// The bytes of `memory/` (counted against the quota with `bytes`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memory_bytes: u64,
    /// The sandbox's own `/tmp` (in `tmp/`; its files and bytes counted
    /// in `files` and `bytes` too); `None`: it had none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<Vec<TreeEntry>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a backend saved of a sandbox's processes.
struct Saved {
    processes: u32,
    bytes: u64,
    /// Each file's path in `memory/`, size and SHA-256.
    files: Vec<(String, u64, String)>,
}

/// The files a backend saved its processes into (`dir`, the host's):
/// each file's path, size and hash. A link or anything else but a file or
/// a directory is refused: no backend saves one.
fn hash_files(dir: &Path) -> Result<Vec<(String, u64, String)>, StoreError> {
    let t = cordon_files::tree::hash_tree(dir).map_err(|e| format!("`{}`: {e}", dir.display()))?;
    let mut out = Vec::new();
    for e in t.entries {
        match (e.kind.as_str(), e.size, e.sha256) {
            ("dir", ..) => {}
            ("file", Some(n), Some(sha)) => out.push((e.path, n, sha)),
            _ => {
                return Err(format!(
                    "`{}`: the backend saved something not a file or a directory",
                    dir.join(&e.path).display()
                ))
            }
        }
    }
    Ok(out)
}

/// The store, opened.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    root: PathBuf,
    quota_per_scope: u64,
}

/// Why the store refused.
pub type StoreError = String;

fn checked_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !name.starts_with('.')
        && !name.starts_with("snap-");
    if ok {
        Ok(())
    } else {
        Err(format!("`{name}` is not a snapshot name: 1-64 of `a-z A-Z 0-9 - _ .`, not starting with `.` or `snap-`"))
    }
}

impl SnapshotStore {
    /// `$CORDON_SNAPSHOT_DIR`, else `/var/lib/cordon/snapshots`.
    pub fn default_path() -> PathBuf {
        std::env::var_os(SNAPSHOT_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/cordon/snapshots"))
    }

    /// Opens (making it, 0700, when absent) the store at `root`: refused
    /// unless it is a real directory of this user's that lets no group or
    /// other in (what is in it becomes a sandbox's files).
    pub fn open(root: &Path, quota_per_scope: u64) -> Result<SnapshotStore, StoreError> {
        if let Some(parent) = root.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("snapshot store `{}`: {e}", parent.display()))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("snapshot store `{}`: {e}", root.display())),
        }
        let m = std::fs::symlink_metadata(root)
            .map_err(|e| format!("snapshot store `{}`: {e}", root.display()))?;
        let me = rustix::process::geteuid().as_raw();
        if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
            return Err(format!(
                "snapshot store `{}` must be a directory of uid {me}'s with mode 0700 (it holds what sandboxes are made from)\nhelp: `chown {me} {0} && chmod 700 {0}`, or point {SNAPSHOT_DIR_ENV} at a new path",
                root.display()
            ));
        }
        Ok(SnapshotStore {
            root: root.to_path_buf(),
            quota_per_scope,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every snapshot, oldest first (unreadable manifests left out).
    pub fn list(&self) -> Vec<Snapshot> {
        let mut out: Vec<Snapshot> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("snap-"))
            .filter_map(|e| self.read(&e.file_name().to_string_lossy()).ok())
            .collect();
        out.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        out
    }

    fn read(&self, id: &str) -> Result<Snapshot, StoreError> {
        let text = std::fs::read_to_string(self.root.join(id).join("manifest.json"))
            .map_err(|e| format!("snapshot `{id}`: {e}"))?;
        let s: Snapshot =
            serde_json::from_str(&text).map_err(|e| format!("snapshot `{id}`: {e}"))?;
        if s.version != MANIFEST_VERSION || s.id != id {
            return Err(format!(
                "snapshot `{id}`: a manifest this cordon does not read"
            ));
        }
        Ok(s)
    }

    /// The snapshot `what` names (its id, or its name) within `scope`.
    pub fn find(&self, what: &str, scope: &str) -> Result<Snapshot, StoreError> {
        let found: Vec<Snapshot> = self
            .list()
            .into_iter()
            .filter(|s| s.scope == scope && (s.id == what || s.name.as_deref() == Some(what)))
            .collect();
        match found.len() {
            0 => Err(format!(
                "no snapshot `{what}` in scope `{scope}`; `cordon sandbox snapshots` lists them"
            )),
            1 => Ok(found.into_iter().next().unwrap_or_else(|| unreachable!())),
            _ => Err(format!(
                "the name `{what}` is on more than one snapshot; name one by its id"
            )),
        }
    }

    /// Where a sandbox made from `s` finds its files.
    pub fn origin(&self, s: &Snapshot) -> Origin {
        Origin {
            snapshot: s.id.clone(),
            tree: self.root.join(&s.id).join("tree"),
            memory: s
                .processes
                .is_some_and(|n| n > 0)
                .then(|| self.root.join(&s.id).join("memory")),
            memory_of: s
                .processes
                .is_some_and(|n| n > 0)
                .then(|| s.backend.clone()),
            tmp: s.tmp.as_ref().map(|_| self.root.join(&s.id).join("tmp")),
        }
    }

    /// Bytes the snapshots of `scope` hold.
    pub fn used(&self, scope: &str) -> u64 {
        self.list()
            .iter()
            .filter(|s| s.scope == scope)
            .map(|s| s.bytes + s.memory_bytes)
            .sum()
    }

    /// Captures `sandbox`'s work dir (its host side) as a snapshot of
    /// `scope`/`thread`: paused meanwhile where the backend can pause (and
    /// resumed after unless [`Capture::FilesLeftPaused`]: a paused
    /// sandbox's own), refused where the backend keeps its files out of
    /// this host's reach; with [`Capture::Memory`], its processes first
    /// ([`Sandbox::checkpoint`], refused where the backend cannot). The
    /// same files under the same provenance are one snapshot: taken
    /// again, the existing one is returned.
    pub fn take(
        &self,
        sandbox: &dyn Sandbox,
        backend: &str,
        scope: &str,
        thread: &str,
        name: Option<&str>,
        capture: Capture,
    ) -> Result<(Snapshot, Option<String>), StoreError> {
        if let Some(n) = name {
            checked_name(n)?;
        }
        let work = sandbox.host_work_dir();
        let used = self.used(scope);
        let room = self.quota_per_scope.saturating_sub(used);
        self.sweep_removed();
        let making = self.root.join(format!(
            ".making-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&making)
            .map_err(|e| format!("`{}`: {e}", making.display()))?;
        // The processes first: they end saved, so the files copied next
        // are the ones their memory last saw.
        let memory = match capture {
            Capture::Memory => match self.checkpoint(sandbox, &making, used) {
                Ok(m) => Some(m),
                Err(e) => {
                    let _ = cordon_files::tree::remove_tree(&making);
                    return Err(e);
                }
            },
            _ => None,
        };
        let memory_bytes = memory.as_ref().map_or(0, |m| m.bytes);
        let room = room.saturating_sub(memory_bytes);
        let (copied, warning) = match &work {
            Some(work) => {
                // Paused for a consistent copy; a sandbox the backend
                // cannot pause is copied running, and said so.
                let warning = match sandbox.pause() {
                    Ok(()) => None,
                    Err(e) => Some(format!("the sandbox was not paused while its files were copied ({e}); a file being written meanwhile may be caught halfway")),
                };
                let copied = self.copy_files(work, &making, room, (scope, used));
                if warning.is_none() && capture != Capture::FilesLeftPaused {
                    let _ = sandbox.resume();
                }
                (copied, warning)
            }
            None => self.copy_through(sandbox, &making, room, capture),
        };
        let (copied, tmp) = match copied {
            Ok(c) => c,
            Err(e) => {
                let _ = cordon_files::tree::remove_tree(&making);
                return Err(e);
            }
        };
        let provenance = sandbox.provenance().clone();
        let id = {
            let mut h = Sha256::new();
            let doc = serde_json::json!({
                "scope": scope,
                "backend": backend,
                "provenance": provenance,
                "entries": copied.entries,
                "memory": memory.as_ref().map(|m| &m.files),
                "tmp": tmp.as_ref().map(|t| &t.entries),
            });
            h.update(doc.to_string().as_bytes());
            format!("snap-{}", &hex(&h.finalize())[..24])
        };
        let snap = Snapshot {
            version: MANIFEST_VERSION,
            id: id.clone(),
            name: name.map(str::to_string),
            scope: scope.to_string(),
            thread: thread.to_string(),
            created: crate::state::now(),
            backend: backend.to_string(),
            provenance,
            files: copied
                .entries
                .iter()
                .chain(tmp.iter().flat_map(|t| &t.entries))
                .filter(|e| e.kind == "file")
                .count(),
            bytes: copied.bytes + tmp.as_ref().map_or(0, |t| t.bytes),
            entries: copied.entries,
            skipped: copied
                .skipped
                .into_iter()
                .chain(
                    tmp.iter()
                        .flat_map(|t| t.skipped.iter().map(|p| format!("/tmp/{p}"))),
                )
                .collect(),
            tmp: tmp.map(|t| t.entries),
            processes: memory.as_ref().map(|m| m.processes),
            memory_bytes,
        };
        let dest = self.root.join(&id);
        if dest.exists() {
            let _ = cordon_files::tree::remove_tree(&making);
            let mut old = self.read(&id)?;
            if name.is_some() && old.name.as_deref() != name {
                old.name = name.map(str::to_string);
                self.write_manifest(&dest, &old)?;
            }
            return Ok((old, warning));
        }
        let written = self.write_manifest(&making, &snap).and_then(|()| {
            std::fs::rename(&making, &dest).map_err(|e| format!("`{}`: {e}", dest.display()))
        });
        if let Err(e) = written {
            let _ = cordon_files::tree::remove_tree(&making);
            return Err(e);
        }
        // The tree is what sandboxes see underneath: world-traversable
        // inside its 0700 snapshot directory (the mount reaches it as root).
        let _ = std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o700));
        Ok((snap, warning))
    }

    /// Copies the work dir into `making/tree` and the sandbox's own
    /// `/tmp`, when it has one, into `making/tmp`, together within `room`
    /// bytes (what is left of `scope`'s quota, `used` taken).
    fn copy_files(
        &self,
        work: &cordon_sandbox::HostWorkDirRecord,
        making: &Path,
        room: u64,
        (scope, used): (&str, u64),
    ) -> Result<
        (
            cordon_files::tree::Copied,
            Option<cordon_files::tree::Copied>,
        ),
        StoreError,
    > {
        let whose = format!(
            "scope `{scope}`'s snapshot quota of {} bytes, {used} used",
            self.quota_per_scope
        );
        let tree = copy_tree(&work.host, &making.join("tree"), room, &whose, MAX_ENTRIES)
            .map_err(|e| format!("snapshot of the work dir: {e}"))?;
        let Some(tmp) = &work.tmp else {
            return Ok((tree, None));
        };
        let tmp = copy_tree(
            tmp,
            &making.join("tmp"),
            room.saturating_sub(tree.bytes),
            &whose,
            MAX_ENTRIES.saturating_sub(tree.entries.len()),
        )
        .map_err(|e| format!("snapshot of `/tmp`: {e}"))?;
        Ok((tree, Some(tmp)))
    }

    /// The files of a sandbox the host cannot open, copied by its backend
    /// (through the guest's files API, at the microVM) into
    /// `making/tree` and `making/tmp`, then hashed here. The guest answers
    /// the copy, so it runs meanwhile (a paused one is woken for it, and
    /// paused again after when `capture` leaves it paused): said in the
    /// warning.
    #[allow(clippy::type_complexity)]
    fn copy_through(
        &self,
        sandbox: &dyn Sandbox,
        making: &Path,
        room: u64,
        capture: Capture,
    ) -> (
        Result<
            (
                cordon_files::tree::Copied,
                Option<cordon_files::tree::Copied>,
            ),
            StoreError,
        >,
        Option<String>,
    ) {
        let warning = Some("the sandbox ran while its files were copied (its guest serves the copy, so it is not paused meanwhile); a file being written meanwhile may be caught halfway".to_string());
        let copied = sandbox.copy_files_out(making, room, MAX_ENTRIES);
        if capture == Capture::FilesLeftPaused {
            let _ = sandbox.pause();
        }
        let hashed = |dir: &Path| {
            cordon_files::tree::hash_tree(dir).map_err(|e| format!("snapshot of the files: {e}"))
        };
        let result = copied
            .map_err(|e| format!("snapshot of the files: {e}"))
            .and_then(|skipped| {
                let mut tree = hashed(&making.join("tree"))?;
                tree.skipped = skipped;
                let tmp_dir = making.join("tmp");
                let tmp = if tmp_dir.exists() {
                    let mut t = hashed(&tmp_dir)?;
                    // What `/tmp` left out is named in the tree's list.
                    t.skipped.clear();
                    Some(t)
                } else {
                    None
                };
                let bytes = tree.bytes + tmp.as_ref().map_or(0, |t| t.bytes);
                if bytes > room {
                    return Err(format!("the files come to {bytes} bytes, past the {room} bytes left of the scope's snapshot quota; forget a snapshot (`cordon sandbox forget`), or raise `snapshots.quota_per_scope`"));
                }
                Ok((tree, tmp))
            });
        (result, warning)
    }

    /// Asks `sandbox` to save its processes into `making/memory`; then
    /// hashes what it wrote, held to the scope's quota (`used` taken).
    fn checkpoint(
        &self,
        sandbox: &dyn Sandbox,
        making: &Path,
        used: u64,
    ) -> Result<Saved, StoreError> {
        let dir = making.join("memory");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("`{}`: {e}", dir.display()))?;
        let processes = sandbox
            .checkpoint(&dir)
            .map_err(|e| format!("snapshot of the processes: {e}"))?;
        let files = hash_files(&dir)?;
        let bytes = files.iter().map(|(_, n, _)| *n).sum::<u64>();
        if used.saturating_add(bytes) > self.quota_per_scope {
            return Err(format!(
                "the processes' memory is {bytes} bytes, past scope's quota of {} bytes ({used} used); forget a snapshot (`cordon sandbox forget`), or raise `snapshots.quota_per_scope`",
                self.quota_per_scope
            ));
        }
        Ok(Saved {
            processes,
            bytes,
            files,
        })
    }

    fn write_manifest(&self, dir: &Path, s: &Snapshot) -> Result<(), StoreError> {
        let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
        let tmp = dir.join("manifest.json.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, dir.join("manifest.json")))
            .map_err(|e| format!("`{}`: {e}", dir.display()))
    }

    /// Removes the snapshot `what` (id or name) of `scope`: at once from
    /// the store's listing; its files once no sandbox made from it is left
    /// ([`SnapshotStore::sweep_removed`]).
    pub fn remove(&self, what: &str, scope: &str) -> Result<Snapshot, StoreError> {
        let s = self.find(what, scope)?;
        let dir = self.root.join(&s.id);
        let gone = self.root.join(format!(
            ".removing-{}-{}-{}",
            s.id,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::rename(&dir, &gone).map_err(|e| format!("`{}`: {e}", dir.display()))?;
        self.sweep_removed();
        Ok(s)
    }

    /// Deletes removed snapshots no sandbox has mounted any more. A tree
    /// a running sandbox was made from is its lower layer — the same
    /// files, not a copy — so it is deleted only once no mount of it is
    /// left (this sweep runs again at the next take and removal).
    pub fn sweep_removed(&self) {
        // Without the mount table nothing can be shown unused: deleting
        // then could pull files from under a running sandbox, so nothing
        // is deleted (the next sweep tries again).
        let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
            tracing::warn!("the mount table cannot be read; removed snapshots are kept for now");
            return;
        };
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(".removing-") {
                continue;
            }
            let tree = format!("/{name}/tree");
            let in_use = mounts.lines().any(|l| {
                l.split(' ')
                    .nth(3)
                    .is_some_and(|root| root.ends_with(&tree) || root.contains(&format!("{tree}/")))
            });
            if !in_use {
                let _ = cordon_files::tree::remove_tree(&e.path());
            }
        }
    }

    /// Whether a sandbox may be made from `s` with `spec` for `identity`
    /// under the policy `policy_digest`: the snapshot's spec or a narrower
    /// one ([`cordon_sandbox::SandboxSpec::wider_than`]; the `snapshot`
    /// requirement a restore adds is a narrowing), the same identity, and
    /// the same policy — a narrower policy cannot be told from a wider one
    /// by comparing two CEL programs, so only the one it was taken under
    /// is taken. `Err` names what differs.
    pub fn check_restore(
        s: &Snapshot,
        spec: &cordon_sandbox::SandboxSpec,
        identity: &cordon_policy::Identity,
        policy_digest: &str,
    ) -> Result<(), StoreError> {
        let mut what = Vec::new();
        let wider = spec.wider_than(&s.provenance.spec);
        if !wider.is_empty() {
            what.push(format!(
                "the spec changes or widens what it was taken with in {}",
                wider.join(", ")
            ));
        }
        if s.provenance.identity != *identity {
            what.push(format!(
                "it was taken for identity `{}/{}`",
                s.provenance.identity.namespace, s.provenance.identity.name
            ));
        }
        if s.provenance.policy_digest != policy_digest {
            what.push("it was taken under another policy (its digest differs)".to_string());
        }
        if what.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "snapshot `{}` cannot be restored here: {}; restore it with its own spec (leave `--spec` out) or a narrower one, under the policy and identity it was taken with",
                s.id,
                what.join("; ")
            ))
        }
    }
}
