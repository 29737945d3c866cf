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

use super::wire::{error_from_wire, status_from_wire, Reply, Request};
use super::{connect, EXEC_GRACE};
use crate::state::{Record, StateDir};

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

    fn files(&self, capability: Capability) -> Result<&HostWorkDir, SandboxError> {
        self.files
            .as_ref()
            .ok_or(SandboxError::Unsupported { capability })
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
        let within = req.timeout.max(Duration::from_secs(1)) + EXEC_GRACE;
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
        self.files(Capability::FilesIn)?
            .write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.files(Capability::FilesOut)?.stat_no_follow(path)
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.files(Capability::FilesOut)?.read_file(path, max_bytes)
    }
    fn host_work_dir(&self) -> Option<cordon_sandbox::HostWorkDirRecord> {
        self.record.host_work_dir.clone()
    }
    fn residue(&self) -> serde_json::Value {
        self.record.residue.clone()
    }
    /// Its keeper guards every exec (with the policy it loaded and checked
    /// by digest), so a router in this process does not guard it again.
    fn guarded_downstream(&self) -> bool {
        true
    }
}
