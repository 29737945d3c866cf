//! Landed artifacts: where collected outputs lie until they are fetched,
//! and each credential's bound on them (issue 28).
//!
//! - The directory is made, never adopted: a random name under the host's
//!   temporary directory, `mkdir` mode 0700 that fails if anything is
//!   already there, checked through its descriptor (a directory of this
//!   user's that lets no group or other in) and held open from then on.
//!   Each collection is a fresh 0700 directory beneath it; each file is
//!   landed 0600 by [`cordon_files::FsSink`] through that descriptor.
//! - A fetch reads through the held descriptor with no link followed
//!   (`openat2` `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`), and
//!   only the regular file of the size that landed: whatever is swapped in
//!   beneath is refused, never followed.
//! - Each credential holds at most `limits.max_artifact_bytes` and
//!   `limits.max_artifacts` landed and unfetched (collections in flight
//!   count): a collection past the bytes is `413`, past the count `429`,
//!   checked before anything is read (the outputs' sizes as they stand)
//!   and again at each file landed; a refused collection leaves nothing.
//! - A fetched artifact is removed (a handle is good for one fetch); an
//!   unfetched one is removed `limits.artifact_ttl_seconds` after it
//!   landed, swept periodically and at every collect and fetch; all of
//!   them when the server stops.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use cordon_files::confined::ConfinedDir;
use cordon_sandbox::outputs::Disposition;
use cordon_sandbox::{
    Artifact, ErrorKind, FileKind, LandedArtifact, OutputSink, Sandbox, SandboxSpec, SinkError,
};

use crate::config::{Credential, Limits};
use crate::refusal::Refusal;

/// The prefix of the directory's name; the rest is 128 random bits.
pub(crate) const DIR_PREFIX: &str = "cordon-serve-artifacts-";

/// The landed artifacts of one server.
pub(crate) struct Artifacts {
    /// Where the directory is made (the host's temporary directory).
    parent: PathBuf,
    bounds: Bounds,
    inner: Mutex<Inner>,
}

#[derive(Debug, Clone, Copy)]
struct Bounds {
    bytes: u64,
    count: u64,
    ttl: Duration,
}

#[derive(Default)]
struct Inner {
    /// The directory, once made (at the first collection).
    dir: Option<Held>,
    /// Landed files by opaque handle.
    landed: BTreeMap<String, Landed>,
    /// What collections in flight have reserved, by credential.
    pending: BTreeMap<String, Use>,
}

#[derive(Clone)]
struct Held {
    path: PathBuf,
    fd: Arc<ConfinedDir>,
}

/// One landed file: whose, where beneath the directory, how large, when.
#[derive(Debug, Clone)]
struct Landed {
    credential: String,
    scope: String,
    collection: String,
    name: String,
    bytes: u64,
    at: Instant,
}

/// Bytes and files, held or wanted.
#[derive(Debug, Default, Clone, Copy)]
struct Use {
    bytes: u64,
    count: u64,
}

impl Inner {
    /// What `credential` holds: landed and unfetched, and in flight.
    fn used(&self, credential: &str) -> Use {
        let mut u = self.pending.get(credential).copied().unwrap_or_default();
        for l in self.landed.values().filter(|l| l.credential == credential) {
            u.bytes = u.bytes.saturating_add(l.bytes);
            u.count += 1;
        }
        u
    }

    fn unreserve(&mut self, credential: &str, held: Use) {
        if let Some(p) = self.pending.get_mut(credential) {
            p.bytes = p.bytes.saturating_sub(held.bytes);
            p.count = p.count.saturating_sub(held.count);
            if p.bytes == 0 && p.count == 0 {
                self.pending.remove(credential);
            }
        }
    }
}

impl Artifacts {
    pub(crate) fn new(parent: PathBuf, limits: &Limits) -> Artifacts {
        Artifacts {
            parent,
            bounds: Bounds {
                bytes: limits.max_artifact_bytes,
                count: limits.max_artifacts,
                ttl: Duration::from_secs(limits.artifact_ttl_seconds),
            },
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How often the periodic sweep runs: half the time to live, between
    /// one second and a minute.
    pub(crate) fn sweep_every(&self) -> Duration {
        (self.bounds.ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
    }

    /// The directory, made at the first call: see the module's notes.
    fn dir(&self) -> Result<Held, Refusal> {
        let mut inner = self.lock();
        if let Some(h) = &inner.dir {
            return Ok(h.clone());
        }
        let name = format!(
            "{DIR_PREFIX}{}",
            random_handle().map_err(|e| Refusal::of(ErrorKind::Failed, e))?
        );
        let fd = ConfinedDir::create_private(&self.parent, &name).map_err(|e| {
            Refusal::of(
                ErrorKind::Unavailable,
                format!("cannot make the artifacts directory: {e}"),
            )
        })?;
        let held = Held {
            path: self.parent.join(&name),
            fd: Arc::new(fd),
        };
        inner.dir = Some(held.clone());
        Ok(held)
    }

    /// Collects `sandbox`'s declared outputs into a fresh collection
    /// directory, each under a fresh handle only `cred`'s scope can fetch,
    /// within `cred`'s bounds: (display line, handle) per landed file.
    /// Blocks.
    pub(crate) fn land(
        &self,
        cred: &Credential,
        sandbox: &dyn Sandbox,
        spec: &SandboxSpec,
    ) -> Result<Vec<(String, String)>, Refusal> {
        self.sweep();
        // Before anything is read: the landing outputs as they stand (no
        // link followed; what is absent or not a file, the collection
        // itself refuses), against what the credential has left.
        self.land_with(cred, sandbox, spec, wanted(sandbox, spec))
    }

    /// [`Artifacts::land`] with the estimate taken before the collection.
    fn land_with(
        &self,
        cred: &Credential,
        sandbox: &dyn Sandbox,
        spec: &SandboxSpec,
        want: Use,
    ) -> Result<Vec<(String, String)>, Refusal> {
        self.reserve(&cred.name, want)?;
        // From here the reservation is given back however this ends.
        let mut sink = Budgeted {
            store: self,
            credential: &cred.name,
            state: Mutex::new(Budget {
                reserved: want,
                delivered: Vec::new(),
                over: None,
            }),
            sink: None,
        };
        let held = self.dir()?;
        let collection = random_handle().map_err(|e| Refusal::of(ErrorKind::Failed, e))?;
        let made = held.fd.make_private(&collection).map_err(|e| {
            Refusal::of(
                ErrorKind::Failed,
                format!("cannot make a collection directory: {e}"),
            )
        })?;
        sink.sink = Some(cordon_files::FsSink::beneath(made).with_mode(0o600));
        let got = cordon_collect::collect_outputs(sandbox, spec, Some(&sink));
        let mut budget = sink.state.lock().unwrap_or_else(|p| p.into_inner());
        let got = match got {
            Ok(got) if !got.landed.is_empty() => got,
            other => {
                // Nothing of a refused (or empty) collection stays behind.
                let _ = std::fs::remove_dir_all(held.path.join(&collection));
                return match other {
                    Ok(_) => Ok(Vec::new()),
                    // A collection refused keeps its kind (an output that
                    // is a link or a FIFO is the caller's `400`).
                    Err(e) => Err(budget
                        .over
                        .take()
                        .unwrap_or_else(|| Refusal::of(e.kind(), &e))),
                };
            }
        };
        // Every handle before any is recorded: no half-recorded collection.
        let handles: Result<Vec<String>, _> = got.landed.iter().map(|_| random_handle()).collect();
        let handles = match handles {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_dir_all(held.path.join(&collection));
                return Err(Refusal::of(ErrorKind::Failed, e));
            }
        };
        let mut inner = self.lock();
        let mut out = Vec::new();
        let each = got.landed.iter().zip(&budget.delivered).zip(handles);
        for ((landed, (name, bytes)), handle) in each {
            inner.landed.insert(
                handle.clone(),
                Landed {
                    credential: cred.name.clone(),
                    scope: cred.scope.clone(),
                    collection: collection.clone(),
                    name: name.clone(),
                    bytes: *bytes,
                    at: Instant::now(),
                },
            );
            out.push((landed.display.clone(), handle));
        }
        // Landed now counts as landed, no longer as in flight.
        inner.unreserve(&cred.name, budget.reserved);
        budget.reserved = Use::default();
        Ok(out)
    }

    /// Reserves `want` of `credential`'s bounds, or the refusal: `413` past
    /// the bytes, `429` past the count.
    fn reserve(&self, credential: &str, want: Use) -> Result<(), Refusal> {
        let mut inner = self.lock();
        let used = inner.used(credential);
        self.fits(used, want)?;
        let p = inner.pending.entry(credential.to_string()).or_default();
        p.bytes = p.bytes.saturating_add(want.bytes);
        p.count += want.count;
        Ok(())
    }

    fn fits(&self, used: Use, want: Use) -> Result<(), Refusal> {
        let wait = format!(
            "fetch what it holds (GET /v1/artifacts/{{handle}} removes each) or wait for it to expire ({} s after landing), then collect again",
            self.bounds.ttl.as_secs()
        );
        if used.bytes.saturating_add(want.bytes) > self.bounds.bytes {
            return Err(Refusal {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "these outputs ({} bytes) would hold this credential past `limits.max_artifact_bytes` ({} bytes) of landed, unfetched artifacts ({} held); {wait}; or produce less",
                    want.bytes, self.bounds.bytes, used.bytes
                ),
            });
        }
        if used.count.saturating_add(want.count) > self.bounds.count {
            return Err(Refusal {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: format!(
                    "these outputs ({} files) would hold this credential past `limits.max_artifacts` ({}) landed, unfetched artifacts ({} held); {wait}",
                    want.count, self.bounds.count, used.count
                ),
            });
        }
        Ok(())
    }

    /// The landed file `handle` of `scope`, read with no link followed and
    /// then removed: a handle is good for one fetch. Another scope's handle
    /// is answered as one that does not exist. Blocks.
    pub(crate) fn fetch(&self, scope: &str, handle: &str) -> Result<Vec<u8>, Refusal> {
        self.sweep();
        let found = {
            let mut inner = self.lock();
            let mine = inner.landed.get(handle).is_some_and(|l| l.scope == scope);
            match (mine, inner.dir.clone()) {
                (true, Some(held)) => inner.landed.remove(handle).map(|l| (held, l)),
                _ => None,
            }
        };
        let Some((held, landed)) = found else {
            return Err(Refusal::of(
                ErrorKind::NotFound,
                "no artifact by that handle",
            ));
        };
        let rel = format!("{}/{}", landed.collection, landed.name);
        let read = held.fd.read_capped(&rel, landed.bytes);
        self.discard(&held, vec![landed.clone()]);
        match read {
            Ok(r) if r.size == landed.bytes && r.bytes.len() as u64 == landed.bytes => Ok(r.bytes),
            Ok(r) => Err(Refusal::of(
                ErrorKind::Failed,
                format!(
                    "the artifact was changed where it lay ({} bytes, {} landed); it is refused and discarded",
                    r.size, landed.bytes
                ),
            )),
            Err(e) => Err(Refusal::of(
                ErrorKind::Failed,
                format!("the artifact is refused and discarded: {e}"),
            )),
        }
    }

    /// Removes what has outlived the time to live.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let (held, expired) = {
            let mut inner = self.lock();
            let Some(held) = inner.dir.clone() else {
                return;
            };
            let ttl = self.bounds.ttl;
            let gone: Vec<String> = inner
                .landed
                .iter()
                .filter(|(_, l)| now.duration_since(l.at) >= ttl)
                .map(|(h, _)| h.clone())
                .collect();
            let expired: Vec<Landed> = gone.iter().filter_map(|h| inner.landed.remove(h)).collect();
            (held, expired)
        };
        if !expired.is_empty() {
            self.discard(&held, expired);
        }
    }

    /// Removes these (already out of the table) from the disk: a
    /// collection none of whose files is left landed goes whole (links in
    /// it removed, not followed); otherwise each file, confined.
    fn discard(&self, held: &Held, gone: Vec<Landed>) {
        let still: std::collections::BTreeSet<String> = self
            .lock()
            .landed
            .values()
            .map(|l| l.collection.clone())
            .collect();
        let mut whole = std::collections::BTreeSet::new();
        for l in gone {
            if still.contains(&l.collection) {
                if let Err(e) = held.fd.remove_file(&format!("{}/{}", l.collection, l.name)) {
                    tracing::warn!("removing an artifact: {e}");
                }
            } else {
                whole.insert(l.collection);
            }
        }
        for c in whole {
            match std::fs::remove_dir_all(held.path.join(&c)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("removing a collection of artifacts: {e}"),
            }
        }
    }

    /// Removes every artifact and the directory: at shutdown.
    pub(crate) fn remove_all(&self) {
        let held = {
            let mut inner = self.lock();
            inner.landed.clear();
            inner.dir.take()
        };
        if let Some(h) = held {
            let _ = std::fs::remove_dir_all(&h.path);
        }
    }
}

/// What the spec's landing outputs hold now, by a no-follow stat of each:
/// the estimate a collection is checked against before anything is read.
/// An output absent, not a regular file or of no known size counts as
/// nothing here; the collection refuses what it must, and every file is
/// counted again as it lands.
fn wanted(sandbox: &dyn Sandbox, spec: &SandboxSpec) -> Use {
    let work = spec.work_dir().trim_end_matches('/');
    let mut want = Use::default();
    for o in spec.declared_outputs() {
        if o.disposition() != Disposition::Land {
            continue;
        }
        if let Ok(Some(st)) = sandbox.stat_no_follow(&format!("{work}/{}", o.path())) {
            if st.kind == FileKind::File {
                want.bytes = want.bytes.saturating_add(st.size.unwrap_or(0));
                want.count += 1;
            }
        }
    }
    want
}

/// A sink that counts each file against its credential's bounds as it
/// lands (beyond what was reserved before the collection read anything)
/// before handing it to the confined sink.
struct Budgeted<'a> {
    store: &'a Artifacts,
    credential: &'a str,
    state: Mutex<Budget>,
    sink: Option<cordon_files::FsSink>,
}

struct Budget {
    /// What this collection holds reserved of its credential's bounds.
    reserved: Use,
    /// Each landed file's name and size, in order.
    delivered: Vec<(String, u64)>,
    /// The refusal when a file would have passed a bound.
    over: Option<Refusal>,
}

impl OutputSink for Budgeted<'_> {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        let sink = self.sink.as_ref().ok_or_else(|| SinkError::Unavailable {
            reason: "no collection directory".into(),
        })?;
        let len = artifact.bytes.len() as u64;
        {
            let mut budget = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let so_far = budget.delivered.iter().map(|(_, b)| *b).sum::<u64>();
            let need = Use {
                bytes: so_far.saturating_add(len),
                count: budget.delivered.len() as u64 + 1,
            };
            let extra = Use {
                bytes: need.bytes.saturating_sub(budget.reserved.bytes),
                count: need.count.saturating_sub(budget.reserved.count),
            };
            if extra.bytes > 0 || extra.count > 0 {
                let mut inner = self.store.lock();
                let used = inner.used(self.credential);
                if let Err(r) = self.store.fits(used, extra) {
                    let reason = r.message.clone();
                    budget.over = Some(r);
                    return Err(SinkError::Failed {
                        name: artifact.name.clone(),
                        reason,
                    });
                }
                let p = inner
                    .pending
                    .entry(self.credential.to_string())
                    .or_default();
                p.bytes = p.bytes.saturating_add(extra.bytes);
                p.count += extra.count;
                budget.reserved.bytes += extra.bytes;
                budget.reserved.count += extra.count;
            }
        }
        let landed = sink.deliver(artifact)?;
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .delivered
            .push((artifact.name.clone(), len));
        Ok(landed)
    }
}

impl Drop for Budgeted<'_> {
    /// What a collection reserved and did not land is given back, however
    /// it ended.
    fn drop(&mut self) {
        let reserved = self.state.get_mut().map_or_else(
            |p| std::mem::take(&mut p.into_inner().reserved),
            |b| std::mem::take(&mut b.reserved),
        );
        self.store.lock().unreserve(self.credential, reserved);
    }
}

/// 128 random bits as hex: an artifact's handle.
fn random_handle() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    fn cred(name: &str) -> Credential {
        Credential {
            name: name.into(),
            token_sha256: [0; 32],
            identity: cordon_policy::Identity {
                namespace: name.into(),
                name: "agent".into(),
                attested: true,
                labels: Default::default(),
            },
            scope: name.into(),
            operator: false,
            client_cert_sha256: None,
        }
    }

    /// A sandbox served from the host directory `work`, declaring `outputs`.
    fn sandbox(work: &Path, outputs: &[&str]) -> cordon_files::host_dir::HostDirectorySandbox {
        let declared: String = outputs
            .iter()
            .map(|o| format!("  - {{path: {o}, media_type: text/plain}}\n"))
            .collect();
        let spec = SandboxSpec::from_yaml(
            "t.yaml",
            &format!(
                "kind: t\nimage: host\nwork_dir: {}\ndeclared_outputs:\n{declared}files_out: {{max_bytes_per_file: 64KiB, max_total_bytes: 64KiB, max_files: 4}}\n",
                work.display()
            ),
        )
        .unwrap();
        let provenance = cordon_sandbox::Provenance {
            spec,
            identity: cred("a").identity,
            policy_digest: String::new(),
            origin: None,
        };
        cordon_files::host_dir::HostDirectorySandbox::new(work, provenance).unwrap()
    }

    fn store(parent: &Path, bytes: u64, count: u64, ttl: u64) -> Artifacts {
        let limits = Limits {
            max_artifact_bytes: bytes,
            max_artifacts: count,
            artifact_ttl_seconds: ttl,
            ..Limits::default()
        };
        Artifacts::new(parent.to_path_buf(), &limits)
    }

    fn land(s: &Artifacts, who: &str, sb: &dyn Sandbox) -> Result<Vec<(String, String)>, Refusal> {
        s.land(&cred(who), sb, &sb.provenance().spec.clone())
    }

    /// Every file beneath `dir`, links included, none followed.
    fn files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(files(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }

    fn the_dir(s: &Artifacts) -> PathBuf {
        s.lock().dir.as_ref().unwrap().path.clone()
    }

    #[test]
    fn the_directory_is_made_fresh_private_and_unguessable() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("r.txt"), "r").unwrap();
        let sb = sandbox(work.path(), &["r.txt"]);
        let (one, two) = (
            store(parent.path(), 1 << 20, 8, 60),
            store(parent.path(), 1 << 20, 8, 60),
        );
        land(&one, "a", &sb).unwrap();
        land(&two, "a", &sb).unwrap();
        let (d1, d2) = (the_dir(&one), the_dir(&two));
        assert_ne!(d1, d2, "two servers, one name");
        for d in [&d1, &d2] {
            let name = d.file_name().unwrap().to_str().unwrap();
            assert_eq!(name.len(), DIR_PREFIX.len() + 32, "{name}");
            let m = std::fs::symlink_metadata(d).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.mode() & 0o7777, 0o700);
            for f in files(d) {
                let m = std::fs::symlink_metadata(&f).unwrap();
                assert!(m.is_file());
                assert_eq!(m.mode() & 0o7777, 0o600, "{}", f.display());
            }
        }
    }

    #[test]
    fn a_link_swapped_in_beneath_is_refused_at_fetch_and_its_target_left_alone() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "not-yours").unwrap();
        std::fs::create_dir(work.path().join("out")).unwrap();
        std::fs::write(work.path().join("out/r.txt"), "rrrrrrrrr").unwrap();
        std::fs::write(work.path().join("t.txt"), "not-yours").unwrap();
        let sb = sandbox(work.path(), &["out/r.txt", "t.txt"]);
        let s = store(parent.path(), 1 << 20, 8, 60);
        let landed = land(&s, "a", &sb).unwrap();
        let root = the_dir(&s);
        let all = files(&root);
        let r = all.iter().find(|p| p.ends_with("out/r.txt")).unwrap();
        let t = all.iter().find(|p| p.ends_with("t.txt")).unwrap();
        // `out` becomes a link to a directory holding `r.txt`; `t.txt` a
        // link to the secret (of the very size that landed).
        let elsewhere = outside.path().join("d");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("r.txt"), "not-yours").unwrap();
        std::fs::remove_dir_all(r.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, r.parent().unwrap()).unwrap();
        std::fs::remove_file(t).unwrap();
        std::os::unix::fs::symlink(&secret, t).unwrap();
        for (_, h) in &landed {
            let e = s.fetch("a", h).unwrap_err();
            assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", e.message);
            assert!(e.message.contains("link"), "{}", e.message);
        }
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "not-yours");
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("r.txt")).unwrap(),
            "not-yours"
        );
        assert!(files(&root).is_empty(), "{:?}", files(&root));
    }

    #[test]
    fn a_fetch_evicts_and_another_scope_sees_nothing() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("r.txt"), "42").unwrap();
        let sb = sandbox(work.path(), &["r.txt"]);
        let s = store(parent.path(), 1 << 20, 8, 60);
        let h = land(&s, "a", &sb).unwrap().remove(0).1;
        assert_eq!(s.fetch("b", &h).unwrap_err().status, StatusCode::NOT_FOUND);
        assert_eq!(s.fetch("a", &h).unwrap(), b"42");
        assert_eq!(s.fetch("a", &h).unwrap_err().status, StatusCode::NOT_FOUND);
        assert!(files(&the_dir(&s)).is_empty());
    }

    #[test]
    fn past_the_bytes_is_413_past_the_count_429_and_nothing_is_left() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("r.txt"), vec![b'x'; 1000]).unwrap();
        let sb = sandbox(work.path(), &["r.txt"]);
        let s = store(parent.path(), 3500, 2, 60);
        let first = land(&s, "a", &sb).unwrap().remove(0).1;
        land(&s, "a", &sb).unwrap();
        let e = land(&s, "a", &sb).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS, "{}", e.message);
        assert!(e.message.contains("max_artifacts") && e.message.contains("fetch"));
        // Another credential's bounds are its own.
        land(&s, "b", &sb).unwrap();
        s.fetch("a", &first).unwrap();
        std::fs::write(work.path().join("r.txt"), vec![b'x'; 2600]).unwrap();
        let e = land(&s, "a", &sb).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", e.message);
        assert!(e.message.contains("max_artifact_bytes") && e.message.contains("fetch"));
        assert_eq!(
            files(&the_dir(&s)).len(),
            2,
            "a refused collection left a file"
        );
        assert!(
            s.lock().pending.is_empty(),
            "a refusal kept its reservation"
        );
    }

    /// The stat before the collection says small; the file grows before it
    /// is read: the bound is held as it lands, and nothing is left.
    #[test]
    fn the_bytes_are_counted_again_as_each_file_lands() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("a.txt"), "small").unwrap();
        std::fs::write(work.path().join("b.txt"), "small").unwrap();
        let sb = sandbox(work.path(), &["a.txt", "b.txt"]);
        let s = store(parent.path(), 1000, 8, 60);
        // What the collection saw before it read: small. Then it grows.
        let want = wanted(&sb, &sb.provenance().spec.clone());
        assert_eq!((want.bytes, want.count), (10, 2));
        std::fs::write(work.path().join("b.txt"), vec![b'x'; 999]).unwrap();
        let e = land_reserving(&s, "a", &sb, want).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", e.message);
        assert!(files(&the_dir(&s)).is_empty(), "{:?}", files(&the_dir(&s)));
        assert!(s.lock().pending.is_empty());
    }

    /// `land`, with the pre-check's estimate given rather than taken.
    fn land_reserving(
        s: &Artifacts,
        who: &str,
        sb: &dyn Sandbox,
        want: Use,
    ) -> Result<Vec<(String, String)>, Refusal> {
        s.land_with(&cred(who), sb, &sb.provenance().spec.clone(), want)
    }

    #[test]
    fn unfetched_artifacts_expire_and_all_go_at_shutdown() {
        let (parent, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("r.txt"), "r").unwrap();
        let sb = sandbox(work.path(), &["r.txt"]);
        let s = store(parent.path(), 1 << 20, 8, 1);
        let h = land(&s, "a", &sb).unwrap().remove(0).1;
        let root = the_dir(&s);
        std::thread::sleep(Duration::from_millis(1100));
        s.sweep();
        assert!(files(&root).is_empty(), "{:?}", files(&root));
        assert_eq!(s.fetch("a", &h).unwrap_err().status, StatusCode::NOT_FOUND);
        land(&s, "a", &sb).unwrap();
        s.remove_all();
        assert!(!root.exists());
    }
}
