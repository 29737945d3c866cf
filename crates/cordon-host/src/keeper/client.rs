//! A kept sandbox driven from another process: execs go to its keeper over
//! the socket; files go straight to the recorded host work dir (when the
//! backend serves one) with the same confined operations the sandbox uses.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use cordon_files::host_dir::{HostSecretsDir, HostWorkDir};
use cordon_linux::fdpass;
use cordon_sandbox::{
    Attach, Capability, ExecHandle, ExecRequest, FileRead, FileStat, Killer, Provenance, Sandbox,
    SandboxError, StdinFeed,
};

use super::dial::{connect, EXEC_GRACE};
use super::wire::{
    error_from_wire, file_error_from_wire, kind_from_wire, status_from_wire, Reply, Request,
    WireEntry, MAX_FILE_BYTES,
};
use crate::state::{Record, StateDir};

/// An anonymous file (memfd) for bytes that travel to or from a keeper.
fn scratch_file(name: &str) -> Result<std::os::fd::OwnedFd, SandboxError> {
    rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| {
        SandboxError::Failed {
            operation: "file",
            reason: format!("making an anonymous file: {e}"),
        }
    })
}

fn odd_reply(r: &Reply) -> SandboxError {
    SandboxError::Failed {
        operation: "file",
        reason: format!("the keeper answered out of turn ({r:?})"),
    }
}

/// A sandbox held by a keeper, driven from this process.
pub struct KeptSandbox {
    state: StateDir,
    record: Record,
    provenance: Provenance,
    files: Option<HostWorkDir>,
    /// The secrets directory its keeper's sandbox binds read-only at the
    /// guest's secrets directory (a spec that names secrets).
    secrets: Option<HostSecretsDir>,
}

impl KeptSandbox {
    /// The sandbox `record` names, with the provenance it was created with.
    pub fn new(state: StateDir, record: Record) -> Result<KeptSandbox, SandboxError> {
        let files = match &record.host_work_dir {
            Some(d) => {
                let mut f = HostWorkDir::new(&d.host, &d.guest)?;
                if let Some(id) = d.owner {
                    f = f.owned_by(id, id);
                }
                Some(f)
            }
            None => None,
        };
        let secrets = match record
            .host_work_dir
            .as_ref()
            .and_then(|d| d.secrets.as_ref())
        {
            Some(s) => Some(HostSecretsDir::new(&s.host, s.gid)?),
            None => None,
        };
        Ok(KeptSandbox {
            state,
            provenance: record.provenance.clone(),
            record,
            files,
            secrets,
        })
    }

    pub fn record(&self) -> &Record {
        &self.record
    }

    /// One request to the keeper, `fds` attached: its reply, an `Error`
    /// one included (the caller maps it). `hung_up`: what a keeper that
    /// hangs up unanswered is reported as.
    fn ask(
        &self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
        (operation, wait): (&'static str, Duration),
        hung_up: &str,
    ) -> Result<Reply, SandboxError> {
        let sock = connect(&self.state.socket_path(&self.record.handle), wait).map_err(|e| {
            SandboxError::Unavailable {
                reason: format!(
                    "sandbox `{}` does not answer ({e}); it may have expired or been disposed — `cordon sandbox ls` shows what is live",
                    self.record.handle
                ),
            }
        })?;
        let failed = |reason: String| SandboxError::Failed { operation, reason };
        fdpass::send(&sock, req, fds).map_err(|e| failed(e.to_string()))?;
        match fdpass::recv::<Reply>(&sock) {
            Ok(Some((reply, _))) => Ok(reply),
            Ok(None) => Err(failed(hung_up.to_string())),
            Err(e) => Err(failed(e.to_string())),
        }
    }

    /// Asks the keeper to freeze (`true`) or thaw its sandbox.
    fn paused(&self, paused: bool) -> Result<(), SandboxError> {
        let operation = if paused { "pause" } else { "resume" };
        let reply = self.ask(
            &Request::Pause { paused },
            &[],
            (operation, Duration::from_secs(60)),
            "the keeper hung up unanswered (a keeper of an older cordon does not pause: make the sandbox again)",
        )?;
        match reply {
            Reply::Paused { paused: now } if now == paused => Ok(()),
            other => Err(unexpected(other, operation)),
        }
    }

    /// Asks the keeper for the workspace's changes (`apply: None`) or to
    /// apply them; the JSON answer comes back in a scratch file.
    fn workspace<T: serde::de::DeserializeOwned>(
        &self,
        apply: Option<Vec<String>>,
    ) -> Result<T, SandboxError> {
        let operation = if apply.is_some() { "apply" } else { "diff" };
        let failed = |reason: String| SandboxError::Failed { operation, reason };
        let mut f = std::fs::File::from(scratch_file("cordon-workspace")?);
        let req = Request::Workspace { apply };
        match self.keeper_file(&req, Some(f.as_fd()), "")? {
            Reply::Workspace { len } => {
                let mut json = Vec::new();
                std::io::Seek::rewind(&mut f)
                    .and_then(|_| {
                        std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, len), &mut json)
                    })
                    .map_err(|e| failed(e.to_string()))?;
                serde_json::from_slice(&json)
                    .map_err(|e| failed(format!("the keeper's answer: {e}")))
            }
            other => Err(unexpected(other, operation)),
        }
    }

    /// Whether the sandbox's spec asked for `capability` (a file call
    /// through the keeper serves only what was declared).
    fn declared(&self, capability: Capability) -> Result<(), SandboxError> {
        if self.provenance.spec.requires().contains(capability) {
            Ok(())
        } else {
            Err(SandboxError::Unsupported { capability })
        }
    }

    /// One file request to the keeper (a sandbox whose work dir is not a
    /// host directory), `fd` attached; its reply.
    fn keeper_file(
        &self,
        req: &Request,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
        path: &str,
    ) -> Result<Reply, SandboxError> {
        let fds: Vec<std::os::fd::BorrowedFd<'_>> = fd.into_iter().collect();
        let reply = self.ask(
            req,
            &fds,
            ("file", Duration::from_secs(120)),
            "the keeper hung up unanswered",
        )?;
        match reply {
            Reply::Error {
                kind,
                message,
                rules,
            } => Err(file_error_from_wire(kind, message, rules, path)),
            reply => Ok(reply),
        }
    }

    fn start_handle(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let failed = |reason: String| SandboxError::Failed {
            operation: "exec",
            reason,
        };
        let pipe = || {
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| failed(format!("making pipes: {e}")))
        };
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        // The timeout comes from whoever asked (a request, a spec): never
        // added unchecked, a huge one would overflow (a panic).
        let within = req
            .timeout
            .max(Duration::from_secs(1))
            .saturating_add(EXEC_GRACE);
        let sock = connect(&self.state.socket_path(&self.record.handle), within).map_err(|e| {
            SandboxError::Unavailable {
                reason: format!(
                    "sandbox `{}` does not answer ({e}); it may have expired or been disposed — `cordon sandbox ls` shows what is live",
                    self.record.handle
                ),
            }
        })?;
        fdpass::send(
            &sock,
            &Request::Exec {
                argv: req.argv.clone(),
                env: req.env.clone(),
                timeout_secs: req.timeout.as_secs().max(1),
                tty: attach.tty,
            },
            &[in_r.as_fd(), out_w.as_fd(), err_w.as_fd()],
        )
        .map_err(|e| failed(e.to_string()))?;
        drop((in_r, out_w, err_w));
        // Killing the exec is hanging up on the keeper: it watches the
        // connection and kills the exec's tree when its client is gone —
        // the same path as a client process that was killed.
        let sock = Arc::new(sock);
        let hang_up = sock.clone();
        let killer = Killer::new(move || {
            let _ = rustix::net::shutdown(&*hang_up, rustix::net::Shutdown::Both);
        });
        let resize_on = sock.clone();
        let resizer: cordon_sandbox::Resizer =
            Arc::new(move |size| fdpass::send(&*resize_on, &Request::Resize { size }, &[]));
        let stdin = match attach.stdin_stream {
            true => StdinFeed::Stream(Box::new(std::fs::File::from(in_w))),
            false => StdinFeed::Bytes(Box::new(std::fs::File::from(in_w)), req.stdin.clone()),
        };
        let handle = ExecHandle::from_pipes(
            stdin,
            std::fs::File::from(out_r),
            std::fs::File::from(err_r),
            req.max_output_bytes,
            move || match fdpass::recv::<Reply>(&sock) {
                Ok(Some((Reply::Done(s), _))) => Ok(status_from_wire(s)),
                Ok(Some((
                    Reply::Error {
                        kind,
                        message,
                        rules,
                    },
                    _,
                ))) => Err(error_from_wire(kind, message, rules)),
                Ok(None) => Err(failed("the exec was killed: its client hung up".into())),
                Ok(other) => Err(failed(format!("the keeper answered {other:?}"))),
                Err(e) => Err(failed(format!("the keeper's answer: {e}"))),
            },
            killer,
        );
        Ok(match attach.tty {
            Some(_) => handle.with_resizer(resizer),
            None => handle,
        })
    }
}

impl Sandbox for KeptSandbox {
    fn id(&self) -> &str {
        &self.record.handle
    }
    fn provenance(&self) -> &Provenance {
        &self.provenance
    }
    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        self.start_handle(req, attach)
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        // The secrets directory, as the sandbox itself writes it; nothing
        // else outside the work dir.
        if HostSecretsDir::names(path) {
            return match &self.secrets {
                Some(s) => s.write_secret(path, contents, mode),
                None => Err(SandboxError::PathRefused {
                    path: path.to_string(),
                    reason: "this sandbox has no secrets directory (its spec names no secrets, or its backend serves none from the host); name the secret in the spec's `secrets`".into(),
                }),
            };
        }
        // Into the work dir through its host path; anything else (the
        // sandbox's `/tmp`, which the keeper reaches and this process may
        // not) through the keeper.
        if let Some(f) = self.files.as_ref().filter(|f| f.relative(path).is_ok()) {
            return f.write_file(path, contents, mode);
        }
        if self.files.is_none() {
            self.declared(Capability::FilesIn)?;
        }
        if contents.len() as u64 > MAX_FILE_BYTES {
            return Err(SandboxError::Refused {
                reason: format!(
                    "`{path}` is {} bytes; a file written into a kept sandbox without a host work dir is at most {MAX_FILE_BYTES}",
                    contents.len()
                ),
                rules: Vec::new(),
            });
        }
        let memfd = scratch_file("cordon-put")?;
        let mut f = std::fs::File::from(memfd);
        std::io::Write::write_all(&mut f, contents).map_err(|e| SandboxError::Failed {
            operation: "write",
            reason: e.to_string(),
        })?;
        std::io::Seek::rewind(&mut f).map_err(|e| SandboxError::Failed {
            operation: "write",
            reason: e.to_string(),
        })?;
        let req = Request::WriteFile {
            path: path.to_string(),
            mode,
            len: contents.len() as u64,
        };
        match self.keeper_file(&req, Some(f.as_fd()), path)? {
            Reply::Written => Ok(()),
            other => Err(odd_reply(&other)),
        }
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        if let Some(f) = &self.files {
            return f.stat_no_follow(path);
        }
        self.declared(Capability::FilesOut)?;
        let req = Request::Stat {
            path: path.to_string(),
        };
        match self.keeper_file(&req, None, path)? {
            Reply::Stat { stat } => Ok(stat.map(|s| FileStat {
                kind: kind_from_wire(s.kind),
                size: s.size,
                mode: s.mode,
            })),
            other => Err(odd_reply(&other)),
        }
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        if let Some(f) = &self.files {
            return f.read_file(path, max_bytes);
        }
        self.declared(Capability::FilesOut)?;
        let mut f = std::fs::File::from(scratch_file("cordon-read")?);
        let req = Request::ReadFile {
            path: path.to_string(),
            max: max_bytes,
        };
        match self.keeper_file(&req, Some(f.as_fd()), path)? {
            Reply::Read { size, len } => {
                let mut bytes = Vec::new();
                std::io::Seek::rewind(&mut f)
                    .and_then(|_| {
                        std::io::Read::read_to_end(
                            &mut std::io::Read::take(&mut f, max_bytes.saturating_add(1)),
                            &mut bytes,
                        )
                    })
                    .map_err(|e| SandboxError::Failed {
                        operation: "read",
                        reason: e.to_string(),
                    })?;
                if bytes.len() as u64 != len {
                    return Err(SandboxError::Failed {
                        operation: "read",
                        reason: format!("the keeper said {len} bytes and wrote {}", bytes.len()),
                    });
                }
                Ok(FileRead { bytes, size })
            }
            other => Err(odd_reply(&other)),
        }
    }
    fn list_dir(&self, path: &str) -> Result<Vec<cordon_sandbox::DirEntry>, SandboxError> {
        if self.files.is_some() {
            return Err(SandboxError::Unsupported {
                capability: Capability::FilesList,
            });
        }
        self.declared(Capability::FilesList)?;
        let mut f = std::fs::File::from(scratch_file("cordon-list")?);
        let req = Request::ListDir {
            path: path.to_string(),
        };
        match self.keeper_file(&req, Some(f.as_fd()), path)? {
            Reply::Listed { len } => {
                let mut json = Vec::new();
                std::io::Seek::rewind(&mut f)
                    .and_then(|_| {
                        std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, len), &mut json)
                    })
                    .map_err(|e| SandboxError::Failed {
                        operation: "list",
                        reason: e.to_string(),
                    })?;
                let entries: Vec<WireEntry> =
                    serde_json::from_slice(&json).map_err(|e| SandboxError::Failed {
                        operation: "list",
                        reason: format!("the keeper's listing: {e}"),
                    })?;
                Ok(entries
                    .into_iter()
                    .map(|e| cordon_sandbox::DirEntry {
                        name: e.name,
                        kind: kind_from_wire(e.kind),
                    })
                    .collect())
            }
            other => Err(odd_reply(&other)),
        }
    }
    fn host_work_dir(&self) -> Option<cordon_sandbox::HostWorkDirRecord> {
        self.record.host_work_dir.clone()
    }
    fn residue(&self) -> serde_json::Value {
        self.record.residue.clone()
    }
    /// Asked of its keeper, whose sandbox freezes.
    fn pause(&self) -> Result<(), SandboxError> {
        self.paused(true)
    }
    fn resume(&self) -> Result<(), SandboxError> {
        self.paused(false)
    }
    /// Asked of its keeper, whose guard decides with the policy's ingress
    /// surface; the keeper connects inside the sandbox and hands the
    /// socket back.
    fn open_port(
        &self,
        req: &cordon_sandbox::PortRequest,
    ) -> Result<std::net::TcpStream, SandboxError> {
        let failed = |reason: String| SandboxError::Failed {
            operation: "port",
            reason,
        };
        let sock = connect(
            &self.state.socket_path(&self.record.handle),
            Duration::from_secs(30),
        )
        .map_err(|e| SandboxError::Unavailable {
            reason: format!(
                "sandbox `{}` does not answer ({e}); it may have expired or been disposed",
                self.record.handle
            ),
        })?;
        let ask = Request::Port {
            port: req.port,
            listen: req.listen.clone(),
            caller: req.caller.clone(),
        };
        fdpass::send(&sock, &ask, &[]).map_err(|e| failed(e.to_string()))?;
        match fdpass::recv::<Reply>(&sock) {
            Ok(Some((Reply::PortOpen, mut fds))) if fds.len() == 1 => {
                Ok(std::net::TcpStream::from(fds.remove(0)))
            }
            Ok(Some((Reply::Error { kind, message, rules }, _))) => {
                Err(super::wire::error_from_wire(kind, message, rules))
            }
            Ok(Some((other, _))) => Err(unexpected(other, "port")),
            Ok(None) => Err(failed(
                "the keeper hung up unanswered (a keeper of an older cordon has no ports: make the sandbox again)".into(),
            )),
            Err(e) => Err(failed(e.to_string())),
        }
    }

    /// Asked of its keeper, whose guard decides the path with the policy it
    /// loaded; the events come back on a pipe, until the keeper (with its
    /// sandbox) is gone or this is dropped.
    fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        let (read, write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
                SandboxError::Failed {
                    operation: "watch",
                    reason: format!("a pipe: {e}"),
                }
            })?;
        let reply = self.ask(
            &Request::Watch {
                path: path.to_string(),
                recursive,
            },
            &[write.as_fd()],
            ("watch", Duration::from_secs(60)),
            "the keeper hung up unanswered (a keeper of an older cordon has no watch: make the sandbox again)",
        )?;
        drop(write);
        match reply {
            Reply::Watching => Ok(Box::new(super::watch::PipeWatch::new(read))),
            Reply::Error {
                kind,
                message,
                rules,
            } => Err(super::wire::file_error_from_wire(
                kind, message, rules, path,
            )),
            other => Err(unexpected(other, "watch")),
        }
    }
    /// Asked of its keeper, whose guard decides each path with the policy
    /// it loaded; the operation and its answer go through a scratch file.
    fn files(
        &self,
        op: &cordon_sandbox::FileOp,
    ) -> Result<cordon_sandbox::FileAnswer, SandboxError> {
        use std::io::{Read, Seek, Write};
        let failed = |reason: String| SandboxError::Failed {
            operation: "file",
            reason,
        };
        let json = serde_json::to_vec(op).map_err(|e| failed(e.to_string()))?;
        let mut f = std::fs::File::from(scratch_file("cordon-files")?);
        f.write_all(&json).map_err(|e| failed(e.to_string()))?;
        let req = Request::Files {
            len: json.len() as u64,
        };
        let path = match op.accesses().first() {
            Some((p, _)) => p.to_string(),
            None => String::new(),
        };
        let reply = self.ask(
            &req,
            &[f.as_fd()],
            ("file", Duration::from_secs(120)),
            "the keeper hung up unanswered (a keeper of an older cordon has no files API: make the sandbox again)",
        )?;
        match reply {
            // The keeper's message says what and where already.
            Reply::Error {
                kind: cordon_sandbox::ErrorKind::Invalid,
                message,
                ..
            } => Err(SandboxError::Invalid { reason: message }),
            Reply::Error {
                kind,
                message,
                rules,
            } => Err(super::wire::file_error_from_wire(
                kind, message, rules, &path,
            )),
            Reply::Files { len } => {
                let mut out = Vec::new();
                f.seek(std::io::SeekFrom::Start(0))
                    .and_then(|_| (&mut f).take(len).read_to_end(&mut out))
                    .map_err(|e| failed(e.to_string()))?;
                serde_json::from_slice(&out)
                    .map_err(|e| failed(format!("the keeper's answer: {e}")))
            }
            Reply::FileRead { size, len } => {
                let mut data = Vec::new();
                f.seek(std::io::SeekFrom::Start(0))
                    .and_then(|_| (&mut f).take(len).read_to_end(&mut data))
                    .map_err(|e| failed(e.to_string()))?;
                if data.len() as u64 != len {
                    return Err(failed(format!(
                        "the keeper said {len} bytes and wrote {}",
                        data.len()
                    )));
                }
                Ok(cordon_sandbox::FileAnswer::Read { data, size })
            }
            other => Err(unexpected(other, "file")),
        }
    }
    /// Asked of its keeper, which holds the sandbox's processes.
    fn checkpoint(&self, into: &std::path::Path) -> Result<u32, SandboxError> {
        let reply = self.ask(
            &Request::Checkpoint {
                into: into.to_path_buf(),
            },
            &[],
            ("checkpoint", Duration::from_secs(300)),
            "the keeper hung up unanswered (a keeper of an older cordon does not checkpoint: make the sandbox again)",
        )?;
        match reply {
            Reply::Checkpointed { processes } => Ok(processes),
            other => Err(unexpected(other, "checkpoint")),
        }
    }
    /// Asked of its keeper, which holds the sandbox.
    fn copy_files_out(
        &self,
        into: &std::path::Path,
        room: u64,
        max_entries: usize,
    ) -> Result<Vec<String>, SandboxError> {
        let reply = self.ask(
            &Request::CopyFilesOut {
                into: into.to_path_buf(),
                room,
                max_entries,
            },
            &[],
            ("copy files", Duration::from_secs(600)),
            "the keeper hung up unanswered (a keeper of an older cordon does not copy files out: make the sandbox again)",
        )?;
        match reply {
            Reply::FilesCopied { skipped } => Ok(skipped),
            other => Err(unexpected(other, "copy files")),
        }
    }
    /// Asked of its keeper, which holds the workspace's layers.
    fn workspace_diff(&self) -> Result<Vec<cordon_sandbox::WorkspaceChange>, SandboxError> {
        self.workspace(None)
    }
    fn workspace_apply(
        &self,
        only: &[String],
    ) -> Result<cordon_sandbox::ApplyReport, SandboxError> {
        self.workspace(Some(only.to_vec()))
    }
    /// Asked of its keeper, whose guard checks the list against the
    /// policy for the sandbox's identity, and whose proxy changes it.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        let (allow, closed) = match change {
            cordon_sandbox::EgressChange::Replace(list) => {
                (list.iter().map(|e| e.to_string()).collect(), None)
            }
            // Refused here already: the keeper closes egress with this
            // reason (its audit line says why, not a stand-in's).
            cordon_sandbox::EgressChange::Close(why) => (Vec::new(), Some(why)),
        };
        let req = Request::Egress {
            allow,
            closed,
            by: by.to_string(),
        };
        let reply = self.ask(
            &req,
            &[],
            ("egress", Duration::from_secs(60)),
            "the keeper hung up unanswered (a keeper of an older cordon does not change egress: make the sandbox again)",
        )?;
        match reply {
            Reply::Egress { generation } => Ok(generation),
            other => Err(unexpected(other, "egress")),
        }
    }
    /// Its keeper guards every exec (with the policy it loaded and checked
    /// by digest), so a router in this process does not guard it again.
    fn guarded_downstream(&self) -> bool {
        true
    }
}

/// A keeper's answer that is not the one asked for: its error as the
/// caller's (what the caller is to fix, what was refused, what is
/// unavailable kept so), anything else out of turn.
fn unexpected(reply: Reply, operation: &'static str) -> SandboxError {
    match reply {
        Reply::Error {
            kind,
            message,
            rules,
        } => match kind {
            cordon_sandbox::ErrorKind::Refused => SandboxError::Refused {
                reason: message,
                rules,
            },
            cordon_sandbox::ErrorKind::Invalid => SandboxError::Invalid { reason: message },
            cordon_sandbox::ErrorKind::Unavailable => SandboxError::Unavailable { reason: message },
            _ => SandboxError::Failed {
                operation,
                reason: message,
            },
        },
        other => SandboxError::Failed {
            operation,
            reason: format!("the keeper answered out of turn ({other:?})"),
        },
    }
}
