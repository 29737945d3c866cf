//! The interposer a probe collects through: it counts calls to the
//! sandbox, bounds-checks reads, spots [`SECRET`] and runs a hook after a
//! stat; and a sink that records what was delivered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cordon_collect::Collection;
use cordon_sandbox::{
    Artifact, ArtifactHandle, DeclaredOutput, ExecOutput, ExecRequest, FileRead, FileStat,
    LandedArtifact, OutputSink, Provenance, Sandbox, SandboxError, SandboxSpec, SinkError,
};

use super::judge::Observation;
use super::probe::{ConformanceSubject, SECRET};

pub(super) type Hook<'h> = (&'h str, &'h (dyn Fn() + Sync));

/// Runs a collection through an interposer that counts calls, bounds-checks
/// reads, spots the secret, and runs `hook` right after `hook.0` is stat-ed.
pub(super) fn observe(
    s: &dyn ConformanceSubject,
    spec: &SandboxSpec,
    named: Option<&[DeclaredOutput]>,
    hook: Option<Hook<'_>>,
) -> Observation {
    let spy = Interposer {
        inner: s.sandbox(),
        hook,
        calls: AtomicUsize::new(0),
        overruns: Mutex::new(Vec::new()),
        secret_seen: Mutex::new(false),
    };
    let sink = RecordingSink::default();
    let mut c = Collection::of(spec);
    if let Some(n) = named {
        c = c.named_at_call_time(n);
    }
    let result = c.collect(&spy, Some(&sink));
    let delivered = sink.take();
    let secret_seen = spy.secret_seen.lock().map(|g| *g).unwrap_or(true)
        || delivered.iter().any(|a| contains(&a.bytes, SECRET));
    Observation {
        result,
        delivered,
        sandbox_calls: spy.calls.load(Ordering::SeqCst),
        overruns: spy.overruns.lock().map(|g| g.clone()).unwrap_or_default(),
        secret_seen,
    }
}

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

pub(super) struct Interposer<'a> {
    inner: &'a dyn Sandbox,
    hook: Option<Hook<'a>>,
    calls: AtomicUsize,
    overruns: Mutex<Vec<String>>,
    secret_seen: Mutex<bool>,
}

impl Sandbox for Interposer<'_> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provenance(&self) -> &Provenance {
        self.inner.provenance()
    }
    fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.exec(req)
    }
    fn start_exec(
        &self,
        req: &ExecRequest,
        attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.start_exec(req, attach)
    }
    fn resolve_command(
        &self,
        program: &str,
    ) -> Result<cordon_sandbox::ResolvedCommand, SandboxError> {
        self.inner.resolve_command(program)
    }
    fn guarded_downstream(&self) -> bool {
        self.inner.guarded_downstream()
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.stat_no_follow(path);
        if let Some((at, run)) = self.hook {
            if at == path {
                run();
            }
        }
        r
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.read_file(path, max_bytes)?;
        if r.bytes.len() as u64 > max_bytes.saturating_add(1) {
            if let Ok(mut g) = self.overruns.lock() {
                g.push(format!(
                    "`{path}`: {} bytes for a bound of {max_bytes}",
                    r.bytes.len()
                ));
            }
        }
        if contains(&r.bytes, SECRET) {
            if let Ok(mut g) = self.secret_seen.lock() {
                *g = true;
            }
        }
        Ok(r)
    }
}

#[derive(Default)]
pub(super) struct RecordingSink {
    got: Mutex<Vec<Artifact>>,
}

impl RecordingSink {
    fn take(&self) -> Vec<Artifact> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl OutputSink for RecordingSink {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        if let Ok(mut g) = self.got.lock() {
            g.push(artifact.clone());
        }
        Ok(LandedArtifact {
            display: format!("`{}`", artifact.name),
            handle: ArtifactHandle::new(artifact.name.clone()),
        })
    }
}
