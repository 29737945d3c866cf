//! A sandbox serving declared outputs from a map and logging every call,
//! one that serves no files at all, and a sink that records deliveries.

use std::collections::BTreeMap;
use std::sync::Mutex;

use cordon_policy::Identity;
use cordon_sandbox::{
    Artifact, ArtifactHandle, ExecOutput, ExecRequest, FileKind, FileRead, FileStat,
    LandedArtifact, OutputSink, Provenance, Sandbox, SandboxError, SandboxSpec, SinkError,
};

fn spec() -> SandboxSpec {
    SandboxSpec::new("bicep", "bicep-sandbox:1").unwrap()
}

fn team_a() -> Identity {
    Identity {
        namespace: "team-a".into(),
        name: "builder".into(),
        attested: true,
        labels: BTreeMap::new(),
    }
}

/// A sandbox with no file hooks: the [`Sandbox`] defaults answer.
pub struct NoFiles(pub Provenance);

impl Sandbox for NoFiles {
    fn id(&self) -> &str {
        "no-files"
    }
    fn provenance(&self) -> &Provenance {
        &self.0
    }
    fn start_exec(
        &self,
        _req: &ExecRequest,
        _attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        Err(SandboxError::Failed {
            operation: "exec",
            reason: "not in this double".into(),
        })
    }
    fn write_file(&self, _path: &str, _contents: &[u8], _mode: u32) -> Result<(), SandboxError> {
        Ok(())
    }
}

/// What a [`FilesSandbox`] holds at a path.
#[derive(Debug, Clone)]
pub enum Entry {
    File(Vec<u8>),
    /// A file whose stat reports `stat_size` but whose read returns `bytes`
    /// (it changed between the two).
    Changing {
        stat_size: u64,
        bytes: Vec<u8>,
    },
    /// A file whose size the backend cannot tell.
    SizeUnknown(Vec<u8>),
    Dir,
    Symlink,
    Fifo,
}

/// A sandbox serving declared outputs from a map, logging every call in
/// order (`stat PATH`, `read PATH MAX`), so tests can prove phase order.
pub struct FilesSandbox {
    pub provenance: Provenance,
    pub entries: BTreeMap<String, Entry>,
    pub log: Mutex<Vec<String>>,
}

impl FilesSandbox {
    pub fn new(entries: &[(&str, Entry)]) -> FilesSandbox {
        FilesSandbox {
            provenance: Provenance {
                spec: spec(),
                identity: team_a(),
                policy_digest: String::new(),
                origin: None,
            },
            entries: entries
                .iter()
                .map(|(p, e)| (format!("/workspace/{p}"), e.clone()))
                .collect(),
            log: Mutex::new(Vec::new()),
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Sandbox for FilesSandbox {
    fn id(&self) -> &str {
        "files"
    }
    fn provenance(&self) -> &Provenance {
        &self.provenance
    }
    fn start_exec(
        &self,
        req: &ExecRequest,
        _attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        Ok(cordon_sandbox::ExecHandle::finished(self.exec(req)))
    }
    fn exec(&self, _req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.log.lock().unwrap().push("exec".into());
        Err(SandboxError::Failed {
            operation: "exec",
            reason: "not in this double".into(),
        })
    }
    fn write_file(&self, path: &str, _contents: &[u8], _mode: u32) -> Result<(), SandboxError> {
        self.log.lock().unwrap().push(format!("write {path}"));
        Ok(())
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.log.lock().unwrap().push(format!("stat {path}"));
        let stat = |kind, size| {
            Some(FileStat {
                kind,
                size,
                mode: 0o644,
            })
        };
        Ok(match self.entries.get(path) {
            None => None,
            Some(Entry::File(b)) => stat(FileKind::File, Some(b.len() as u64)),
            Some(Entry::Changing { stat_size, .. }) => stat(FileKind::File, Some(*stat_size)),
            Some(Entry::SizeUnknown(_)) => stat(FileKind::File, None),
            Some(Entry::Dir) => stat(FileKind::Dir, Some(4096)),
            Some(Entry::Symlink) => stat(FileKind::Symlink, Some(10)),
            Some(Entry::Fifo) => stat(FileKind::Other, Some(0)),
        })
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("read {path} {max_bytes}"));
        let bounded = |b: &Vec<u8>| {
            let n = usize::try_from(max_bytes.saturating_add(1))
                .unwrap_or(usize::MAX)
                .min(b.len());
            FileRead {
                bytes: b[..n].to_vec(),
                size: b.len() as u64,
            }
        };
        match self.entries.get(path) {
            None => Err(SandboxError::NotFound { path: path.into() }),
            Some(Entry::File(b)) | Some(Entry::SizeUnknown(b)) => Ok(bounded(b)),
            Some(Entry::Changing { bytes, .. }) => Ok(bounded(bytes)),
            Some(_) => Err(SandboxError::NotRegularFile {
                path: path.into(),
                found: "not a file".into(),
            }),
        }
    }
}

/// A sink that records what it was handed, and can fail at delivery `n`.
#[derive(Default)]
pub struct RecordingSink {
    pub got: Mutex<Vec<Artifact>>,
    pub fail_at: Option<usize>,
}

impl RecordingSink {
    pub fn names(&self) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.name.clone())
            .collect()
    }
}

impl OutputSink for RecordingSink {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        let mut got = self.got.lock().unwrap();
        if self.fail_at == Some(got.len()) {
            return Err(SinkError::Failed {
                name: artifact.name.clone(),
                reason: "the disk is full".into(),
            });
        }
        got.push(artifact.clone());
        Ok(LandedArtifact {
            display: format!("landed `{}`", artifact.name),
            handle: ArtifactHandle::new(format!("/host/out/{}", artifact.name)),
        })
    }
}
