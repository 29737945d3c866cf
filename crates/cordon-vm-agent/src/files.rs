//! Files in the work dir, served with `cordon_files::host_dir::HostWorkDir`
//! — the same confined code (`openat2` beneath the work dir, no link
//! followed) the host uses for a local sandbox's work dir. Inside the guest
//! the "host" path of the work dir is the guest's own path of it.

use std::collections::HashMap;
use std::sync::Arc;

use cordon_files::host_dir::{HostSecretsDir, HostWorkDir};
use cordon_sandbox::{FileKind, FileOp, SandboxError};
use cordon_vm_proto::{
    list_replies, ErrKind, Kind, Msg, WireEntry, WireStat, MAX_DATA, MAX_FILES_ANSWER, MAX_LIST,
};

use crate::out::Out;

/// Files being written in at once; more are refused (each may hold up to
/// `MAX_FILE` bytes until it is complete).
const MAX_PENDING_WRITES: usize = 4;

struct Pending {
    path: String,
    mode: u32,
    size: u64,
    bytes: Vec<u8>,
    /// A files-API write (`FilesOp`) whose bytes these are; `None` for a
    /// `WriteStart`.
    op: Option<FileOp>,
}

pub(crate) struct Files {
    dir: HostWorkDir,
    /// The sandbox's `/tmp` (its init's, held open), served beside the
    /// work dir.
    tmp: Option<HostWorkDir>,
    /// The secrets directory, when the plan names one: the only place
    /// outside the work dir a write goes.
    secrets: Option<HostSecretsDir>,
    writes: HashMap<u64, Pending>,
    pub(crate) watches: crate::watch::Watches,
}

/// A `SandboxError` as the protocol's `Error`: the kind, and the detail the
/// host rebuilds its error from (the reason, what was found instead).
pub(crate) fn wire_error(e: &SandboxError, fallback_path: &str) -> (ErrKind, String, String) {
    let path = fallback_path.to_string();
    match e {
        SandboxError::NotFound { path } => (ErrKind::NotFound, path.clone(), e.to_string()),
        SandboxError::PathRefused { path, reason } => {
            (ErrKind::PathRefused, path.clone(), reason.clone())
        }
        SandboxError::NotRegularFile { path, found } => {
            (ErrKind::NotRegularFile, path.clone(), found.clone())
        }
        SandboxError::ConfinementUnavailable { path, .. } => {
            (ErrKind::Unavailable, path.clone(), e.to_string())
        }
        SandboxError::Unavailable { reason } => (ErrKind::Unavailable, path, reason.clone()),
        SandboxError::Failed { reason, .. } => (ErrKind::Failed, path, reason.clone()),
        SandboxError::Refused { reason, .. } => (ErrKind::Refused, path, reason.clone()),
        SandboxError::Unsupported { .. } => (ErrKind::Unavailable, path, e.to_string()),
        // The caller's to fix: rebuilt on the host as a refused path, of
        // the same (invalid) kind.
        SandboxError::Invalid { reason } => (ErrKind::PathRefused, path, reason.clone()),
    }
}

fn send_error(out: &Out, req: u64, e: &SandboxError, path: &str) {
    let (kind, path, message) = wire_error(e, path);
    out.error(req, kind, &path, &message);
}

fn kind(k: FileKind) -> Kind {
    match k {
        FileKind::File => Kind::File,
        FileKind::Dir => Kind::Dir,
        FileKind::Symlink => Kind::Symlink,
        FileKind::Other => Kind::Other,
    }
}

impl Files {
    pub(crate) fn new(
        dir: HostWorkDir,
        tmp: Option<HostWorkDir>,
        secrets: Option<HostSecretsDir>,
    ) -> Files {
        Files {
            dir,
            tmp,
            secrets,
            writes: HashMap::new(),
            watches: Default::default(),
        }
    }

    pub(crate) fn watch_start(&self, out: &Arc<Out>, req: u64, path: &str, recursive: bool) {
        let roots = cordon_files::roots::Roots {
            work: &self.dir,
            tmp: self.tmp.as_ref(),
        };
        self.watches.start(roots, out, req, path, recursive);
    }

    pub(crate) fn write_start(
        &mut self,
        out: &Arc<Out>,
        req: u64,
        path: String,
        mode: u32,
        size: u64,
    ) {
        self.pend(out, req, path, mode, size, None);
    }

    /// A files-API operation: run at once, or once a write's `size` bytes
    /// arrived in `WriteData` frames.
    pub(crate) fn files_start(
        &mut self,
        out: &Arc<Out>,
        req: u64,
        op: serde_json::Value,
        size: u64,
    ) {
        let op: FileOp = match serde_json::from_value(op) {
            Ok(op) => op,
            Err(e) => {
                return out.error(
                    req,
                    ErrKind::Refused,
                    "",
                    &format!("not a files-API operation: {e}"),
                )
            }
        };
        match (&op, size) {
            (FileOp::Write { path, mode, .. }, _) => {
                let (path, mode) = (path.clone(), *mode);
                self.pend(out, req, path, mode, size, Some(op));
            }
            (_, 0) => self.run_op(out.clone(), req, op),
            (_, _) => out.error(
                req,
                ErrKind::Refused,
                "",
                &format!("a files-API `{}` carries no bytes", op.name()),
            ),
        }
    }

    /// Runs one operation in a thread of its own (a listing or a read may
    /// be large) and streams its answer.
    fn run_op(&self, out: Arc<Out>, req: u64, op: FileOp) {
        let (dir, tmp) = (self.dir.clone(), self.tmp.clone());
        std::thread::spawn(move || {
            let path = op.accesses().first().map(|(p, _)| p.to_string());
            let roots = cordon_files::roots::Roots {
                work: &dir,
                tmp: tmp.as_ref(),
            };
            let json = roots
                .files(&op)
                .and_then(|a| {
                    serde_json::to_vec(&a).map_err(|e| SandboxError::Failed {
                        operation: "files",
                        reason: e.to_string(),
                    })
                })
                .and_then(|j| {
                    if j.len() as u64 > MAX_FILES_ANSWER {
                        Err(SandboxError::Refused {
                            reason: format!(
                                "the answer is {} bytes, more than the channel's {MAX_FILES_ANSWER}; list less deep or read less",
                                j.len()
                            ),
                            rules: Vec::new(),
                        })
                    } else {
                        Ok(j)
                    }
                });
            match json {
                Ok(j) => {
                    for chunk in j.chunks(MAX_DATA as usize) {
                        if !out.send(&Msg::FilesData { req }, chunk) {
                            return;
                        }
                    }
                    out.send(&Msg::FilesEnd { req }, &[]);
                }
                Err(e) => send_error(&out, req, &e, path.as_deref().unwrap_or("")),
            }
        });
    }

    fn pend(
        &mut self,
        out: &Arc<Out>,
        req: u64,
        path: String,
        mode: u32,
        size: u64,
        op: Option<FileOp>,
    ) {
        if self.writes.contains_key(&req) {
            // The one already pending for `req` goes too: the host lost
            // track of it.
            self.writes.remove(&req);
            return out.error(
                req,
                ErrKind::Refused,
                &path,
                "a write with this id is already in progress",
            );
        }
        if self.writes.len() >= MAX_PENDING_WRITES {
            return out.error(
                req,
                ErrKind::Refused,
                &path,
                &format!(
                    "{MAX_PENDING_WRITES} files are being written in already; write one at a time"
                ),
            );
        }
        let pending = Pending {
            path,
            mode,
            size,
            bytes: Vec::new(),
            op,
        };
        if size == 0 {
            return self.finish(out, req, pending);
        }
        self.writes.insert(req, pending);
    }

    pub(crate) fn write_data(&mut self, out: &Arc<Out>, req: u64, data: Vec<u8>) {
        // A write refused at its start has nothing pending: its data goes.
        let Some(p) = self.writes.get_mut(&req) else {
            return;
        };
        if p.bytes.len() as u64 + data.len() as u64 > p.size {
            let path = p.path.clone();
            let size = p.size;
            self.writes.remove(&req);
            return out.error(
                req,
                ErrKind::Refused,
                &path,
                &format!("more data arrived than the {size} bytes announced"),
            );
        }
        p.bytes.extend_from_slice(&data);
        if p.bytes.len() as u64 == p.size {
            if let Some(p) = self.writes.remove(&req) {
                self.finish(out, req, p);
            }
        }
    }

    fn finish(&self, out: &Arc<Out>, req: u64, p: Pending) {
        if let Some(FileOp::Write {
            path, mode, how, ..
        }) = p.op
        {
            let op = FileOp::Write {
                path,
                data: p.bytes,
                mode,
                how,
            };
            return self.run_op(out.clone(), req, op);
        }
        let written = match (HostSecretsDir::names(&p.path), &self.secrets) {
            (true, Some(s)) => s.write_secret(&p.path, &p.bytes, p.mode),
            (true, None) => Err(SandboxError::PathRefused {
                path: p.path.clone(),
                reason: "this sandbox's spec names no secrets, so it has no secrets directory; name the secret in the spec's `secrets`".into(),
            }),
            (false, _) => {
                let roots = cordon_files::roots::Roots {
                    work: &self.dir,
                    tmp: self.tmp.as_ref(),
                };
                let (dir, abs, _) = roots.place(&p.path);
                dir.write_file(&abs, &p.bytes, p.mode)
            }
        };
        match written {
            Ok(()) => {
                out.send(&Msg::Done { req }, &[]);
            }
            Err(e) => send_error(out, req, &e, &p.path),
        }
    }

    pub(crate) fn stat(&self, out: &Out, req: u64, path: &str) {
        match self.dir.stat_no_follow(path) {
            Ok(stat) => {
                let stat = stat.map(|s| WireStat {
                    kind: kind(s.kind),
                    size: s.size,
                    mode: s.mode,
                });
                out.send(&Msg::StatReply { req, stat }, &[]);
            }
            Err(e) => send_error(out, req, &e, path),
        }
    }

    /// Reads in a thread of its own: a large file streams without holding
    /// up the channel's reader.
    pub(crate) fn read(&self, out: Arc<Out>, req: u64, path: String, max: u64) {
        let dir = self.dir.clone();
        std::thread::spawn(move || match dir.read_file(&path, max) {
            Ok(read) => {
                for chunk in read.bytes.chunks(MAX_DATA as usize) {
                    if !out.send(&Msg::ReadData { req }, chunk) {
                        return;
                    }
                }
                out.send(
                    &Msg::ReadEnd {
                        req,
                        size: read.size,
                    },
                    &[],
                );
            }
            Err(e) => send_error(&out, req, &e, &path),
        });
    }

    pub(crate) fn list(&self, out: &Out, req: u64, path: &str) {
        match self.dir.list_dir(path, MAX_LIST) {
            Ok(entries) if entries.len() > MAX_LIST => out.error(
                req,
                ErrKind::Refused,
                path,
                &format!("the directory has more than {MAX_LIST} entries"),
            ),
            Ok(entries) => {
                let entries = entries
                    .into_iter()
                    .map(|e| WireEntry {
                        name: e.name,
                        kind: kind(e.kind),
                    })
                    .collect();
                for m in list_replies(req, entries) {
                    if !out.send(&m, &[]) {
                        return;
                    }
                }
            }
            Err(e) => send_error(out, req, &e, path),
        }
    }
}
