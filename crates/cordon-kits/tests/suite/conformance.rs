//! The conformance kit against the host-directory test subject, and against
//! deliberately unsafe variants of it: each probe must be able to fail.
//!
//! The host-directory subject maps guest paths to host paths one to one, so
//! the unsafe variants below can use `std::fs` on the guest path directly.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_kits::conformance::{
    host_directory_subject, run_files_out_conformance, run_files_out_conformance_with,
    PosixGuestSubject, Report,
};
use cordon_sandbox::{
    ExecOutput, ExecRequest, FileAnswer, FileInfo, FileKind, FileOp, FileRead, FileStat,
    Provenance, Sandbox, SandboxError, WriteHow,
};

use cordon_testkit::is_root;

fn safe(root: &std::path::Path) -> PosixGuestSubject {
    host_directory_subject(root, is_root()).unwrap()
}

/// The safe subject with its sandbox replaced by `wrap(safe sandbox)`.
fn variant(
    root: &std::path::Path,
    wrap: impl FnOnce(Arc<dyn Sandbox>) -> Arc<dyn Sandbox>,
) -> PosixGuestSubject {
    let mut s = safe(root);
    s.sandbox = wrap(s.sandbox.clone());
    s.name = "unsafe".into();
    s
}

fn failed(report: &Report) -> Vec<String> {
    report.failed().iter().map(|r| r.probe.clone()).collect()
}

fn assert_fails(report: &Report, expected: &[&str]) {
    let failed = failed(report);
    for probe in expected {
        assert!(
            failed.iter().any(|f| f.starts_with(probe)),
            "`{probe}` should have failed:\n{report}"
        );
    }
}

#[test]
fn the_safe_host_directory_subject_passes_every_probe() {
    let t = tempfile::tempdir().unwrap();
    let report = run_files_out_conformance(Arc::new(safe(t.path())));
    assert!(report.all_passed(), "{report}");
    let shown = report.to_string();
    assert!(
        shown.lines().last().unwrap().ends_with(" passed, 0 failed"),
        "{shown}"
    );
    let expected = if is_root() { 22 } else { 21 };
    assert_eq!(report.results.len(), expected, "{report}");
}

/// Delegates exec (the planting) to the safe sandbox and overrides files.
struct Unsafe {
    inner: Arc<dyn Sandbox>,
    how: How,
    stats: Mutex<BTreeMap<String, FileStat>>,
}

#[derive(Clone, Copy)]
enum How {
    /// `metadata` and `File::open`: follows every link.
    FollowsLinks,
    /// Checks links at stat, then opens following links, trusting it.
    TrustsEarlierStat,
    /// Confined, but reads the whole file whatever the bound.
    UnboundedRead,
    /// Treats anything that is not a directory or link as a file, and
    /// reads nothing from it.
    FifoAsFile,
    /// Opens a FIFO for reading, blocking.
    BlockingOpen,
    /// Writes with `std::fs::write`, following links.
    WritesThroughLinks,
    /// Serves the files API with `std::fs`, following every link.
    FilesApiFollowsLinks,
}

fn wrap(how: How) -> impl FnOnce(Arc<dyn Sandbox>) -> Arc<dyn Sandbox> {
    move |inner| {
        Arc::new(Unsafe {
            inner,
            how,
            stats: Mutex::new(BTreeMap::new()),
        })
    }
}

fn io(e: std::io::Error, path: &str) -> SandboxError {
    if e.kind() == std::io::ErrorKind::NotFound {
        SandboxError::NotFound { path: path.into() }
    } else {
        SandboxError::Failed {
            operation: "unsafe",
            reason: e.to_string(),
        }
    }
}

fn read_following(path: &str, max: Option<u64>) -> Result<FileRead, SandboxError> {
    let mut f = std::fs::File::open(path).map_err(|e| io(e, path))?;
    let size = f.metadata().map_err(|e| io(e, path))?.len();
    let mut bytes = Vec::new();
    match max {
        Some(m) => f.take(m + 1).read_to_end(&mut bytes),
        None => f.read_to_end(&mut bytes),
    }
    .map_err(|e| io(e, path))?;
    Ok(FileRead { bytes, size })
}

impl Sandbox for Unsafe {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provenance(&self) -> &Provenance {
        self.inner.provenance()
    }
    fn start_exec(
        &self,
        req: &ExecRequest,
        _attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        Ok(cordon_sandbox::ExecHandle::finished(self.exec(req)))
    }
    fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.inner.exec(req)
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        match self.how {
            How::WritesThroughLinks | How::FollowsLinks => {
                if let Some(parent) = std::path::Path::new(path).parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io(e, path))?;
                }
                std::fs::write(path, contents).map_err(|e| io(e, path))
            }
            _ => self.inner.write_file(path, contents, mode),
        }
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        match self.how {
            How::FollowsLinks => match std::fs::metadata(path) {
                Ok(m) => Ok(Some(FileStat {
                    kind: if m.is_dir() {
                        FileKind::Dir
                    } else if m.is_file() {
                        FileKind::File
                    } else {
                        FileKind::Other
                    },
                    size: Some(m.len()),
                    mode: 0o644,
                })),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(e, path)),
            },
            How::FifoAsFile | How::BlockingOpen => {
                let st = self.inner.stat_no_follow(path)?;
                Ok(st.map(|s| match s.kind {
                    FileKind::Other => FileStat {
                        kind: FileKind::File,
                        size: Some(0),
                        ..s
                    },
                    _ => s,
                }))
            }
            _ => {
                let st = self.inner.stat_no_follow(path)?;
                if let Some(s) = st {
                    self.stats.lock().unwrap().insert(path.to_string(), s);
                }
                Ok(st)
            }
        }
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        match self.how {
            How::FollowsLinks => read_following(path, Some(max_bytes)),
            How::TrustsEarlierStat => {
                let known = self.stats.lock().unwrap().get(path).copied();
                match known {
                    Some(s) if s.kind == FileKind::File => read_following(path, Some(max_bytes)),
                    _ => self.inner.read_file(path, max_bytes),
                }
            }
            How::UnboundedRead => {
                let r = self.inner.read_file(path, u64::MAX - 1)?;
                Ok(r)
            }
            How::FifoAsFile => match self.inner.read_file(path, max_bytes) {
                Err(SandboxError::NotRegularFile { .. }) => Ok(FileRead {
                    bytes: Vec::new(),
                    size: 0,
                }),
                other => other,
            },
            How::BlockingOpen => read_following(path, Some(max_bytes)),
            How::WritesThroughLinks | How::FilesApiFollowsLinks => {
                self.inner.read_file(path, max_bytes)
            }
        }
    }
    fn files(&self, op: &FileOp) -> Result<FileAnswer, SandboxError> {
        match self.how {
            How::FilesApiFollowsLinks => files_following(op),
            _ => self.inner.files(op),
        }
    }
}

/// The files API done with `std::fs` on the guest path (the host-directory
/// subject's paths are the host's), following every link.
fn files_following(op: &FileOp) -> Result<FileAnswer, SandboxError> {
    use std::io::Write;
    let info = |p: &std::path::Path, root: &str| -> std::io::Result<FileInfo> {
        let m = std::fs::metadata(p)?;
        Ok(FileInfo {
            path: p.display().to_string().trim_start_matches(root).into(),
            kind: if m.is_dir() {
                FileKind::Dir
            } else {
                FileKind::File
            },
            size: m.len(),
            mode: 0o644,
            mtime: 0,
        })
    };
    let done =
        |r: std::io::Result<()>, p: &str| r.map(|()| FileAnswer::Done(true)).map_err(|e| io(e, p));
    match op {
        FileOp::List { path, .. } => {
            let mut entries = Vec::new();
            let mut stack = vec![std::path::PathBuf::from(path)];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).map_err(|e| io(e, path))? {
                    let p = e.map_err(|e| io(e, path))?.path();
                    if p.is_dir() {
                        stack.push(p.clone());
                    }
                    entries.push(info(&p, "/").map_err(|e| io(e, path))?);
                }
            }
            Ok(FileAnswer::Listing {
                entries,
                truncated: false,
            })
        }
        FileOp::Stat { path } => Ok(FileAnswer::Stat(info(std::path::Path::new(path), "/").ok())),
        FileOp::Read { path, len, .. } => {
            let r = read_following(path, Some(*len))?;
            Ok(FileAnswer::Read {
                data: r.bytes,
                size: r.size,
            })
        }
        FileOp::Write {
            path, data, how, ..
        } => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(*how == WriteHow::Append)
                .write(true)
                .truncate(*how != WriteHow::Append)
                .open(path)
                .map_err(|e| io(e, path))?;
            done(f.write_all(data), path)
        }
        FileOp::Mkdir { path } => done(std::fs::create_dir_all(path), path),
        FileOp::Remove { path, .. } => {
            let r = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
            done(r, path)
        }
        FileOp::Rename { from, to } => done(std::fs::rename(from, to), from),
    }
}

#[test]
fn a_backend_that_follows_links_fails_every_link_probe() {
    let t = tempfile::tempdir().unwrap();
    let report = run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::FollowsLinks))));
    assert_fails(
        &report,
        &[
            "link-to-outside-file",
            "symlinked-parent",
            "link-swapped-after-stat",
            "dangling-link",
            "host-write-through-link",
            "host-write-through-dangling-link",
            "host-write-under-linked-parent",
        ],
    );
    // Every failure is reported, not only the first.
    assert!(report.failed().len() >= 7, "{report}");
    assert!(report
        .summary()
        .ends_with(&format!("{} failed", report.failed().len())));
}

#[test]
fn a_backend_that_trusts_an_earlier_stat_fails_the_swap_probe() {
    let t = tempfile::tempdir().unwrap();
    let report =
        run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::TrustsEarlierStat))));
    assert_eq!(failed(&report), ["link-swapped-after-stat"], "{report}");
}

#[test]
fn a_backend_that_reads_without_a_cap_fails_the_growth_probe() {
    let t = tempfile::tempdir().unwrap();
    let report = run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::UnboundedRead))));
    assert_eq!(failed(&report), ["file-grows-after-stat"], "{report}");
}

#[test]
fn a_backend_that_treats_a_fifo_as_a_file_fails_the_fifo_probe() {
    let t = tempfile::tempdir().unwrap();
    let report = run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::FifoAsFile))));
    let mut expected = vec!["fifo-at-output-path".to_string()];
    if is_root() {
        expected.push("device-node-at-output-path".into());
    }
    assert_eq!(failed(&report), expected, "{report}");
}

#[test]
fn a_backend_whose_read_blocks_on_a_fifo_fails_by_timeout_instead_of_hanging() {
    let t = tempfile::tempdir().unwrap();
    let subject = Arc::new(variant(t.path(), wrap(How::BlockingOpen)));
    let report = run_files_out_conformance_with(subject, Duration::from_secs(3));
    let fifo = report
        .results
        .iter()
        .find(|r| r.probe == "fifo-at-output-path")
        .unwrap();
    assert!(
        !fifo.passed && fifo.detail.contains("did not finish"),
        "{report}"
    );
}

#[test]
fn a_backend_whose_host_writes_follow_links_fails_every_host_write_probe() {
    let t = tempfile::tempdir().unwrap();
    let report =
        run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::WritesThroughLinks))));
    assert_eq!(
        failed(&report),
        [
            "host-write-through-link (Sandbox::write_file)",
            "host-write-through-dangling-link (Sandbox::write_file)",
            "host-write-under-linked-parent (Sandbox::write_file)",
        ],
        "{report}"
    );
}

#[test]
fn a_backend_whose_files_api_follows_links_fails_every_files_api_link_probe() {
    let t = tempfile::tempdir().unwrap();
    let report =
        run_files_out_conformance(Arc::new(variant(t.path(), wrap(How::FilesApiFollowsLinks))));
    assert_eq!(
        failed(&report),
        [
            // It also replaces on create and reads one byte past a length.
            "files-api-operations",
            "files-api-read-through-link",
            "files-api-list-through-link",
            "files-api-write-through-link",
            "files-api-remove-through-link",
            "files-api-rename-through-link",
            "files-api-read-bounded",
        ],
        "{report}"
    );
}

#[test]
fn a_subject_that_cannot_plant_fails_every_probe_it_cannot_plant() {
    let t = tempfile::tempdir().unwrap();
    let mut s = safe(t.path());
    // No shell commands at all: every plant fails.
    s.sandbox = Arc::new(NoExec(s.sandbox.clone()));
    let report = run_files_out_conformance(Arc::new(s));
    assert!(report.passed() == 0, "{report}");
    assert!(
        report
            .results
            .iter()
            .all(|r| r.detail.contains("could not plant")),
        "{report}"
    );
}

struct NoExec(Arc<dyn Sandbox>);

impl Sandbox for NoExec {
    fn id(&self) -> &str {
        self.0.id()
    }
    fn provenance(&self) -> &Provenance {
        self.0.provenance()
    }
    fn start_exec(
        &self,
        req: &ExecRequest,
        _attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        Ok(cordon_sandbox::ExecHandle::finished(self.exec(req)))
    }
    fn exec(&self, _req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        Err(SandboxError::Failed {
            operation: "exec",
            reason: "this guest has no shell".into(),
        })
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.0.write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.0.stat_no_follow(path)
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.0.read_file(path, max_bytes)
    }
}
