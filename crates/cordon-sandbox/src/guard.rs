//! The compute guard: every exec of every backend's sandbox is decided on
//! the policy's compute surface before it reaches the backend. The router
//! puts it around each sandbox it hands out, and a keeper around the one it
//! serves, so a new backend inherits the check and cannot forget it.
//!
//! The command is resolved by the sandbox itself
//! ([`Sandbox::resolve_command`]: in its own filesystem, links resolved),
//! decided with its arguments, the sandbox's limits, its work dir and the
//! identity it was created for, and refused — naming the rules — unless the
//! policy allows it (undetermined is refused). An allowed exec runs the
//! resolved path, so the command that runs is the one that was decided.
//! Backends still hold the policy below the workload (Landlock, masks, an
//! OCI spec): the guard decides what is started, the backend confines what
//! it then does.

use std::sync::Arc;

use cordon_policy::{
    ComputeFacts, Deployment, Policy, Request, StorageFacts, Surface, SurfaceFacts,
};

use crate::backend::{
    DirEntry, FileRead, FileStat, HostWorkDirRecord, Limits, Provenance, ResolvedCommand, Sandbox,
    SandboxError,
};
use crate::exec::{Attach, ExecHandle};
use crate::{EgressChange, ExecRequest};

/// `sandbox` with the compute guard around it (unless it is guarded
/// downstream already: [`Sandbox::guarded_downstream`]).
pub fn guard(
    sandbox: Arc<dyn Sandbox>,
    policy: Arc<Policy>,
    env: Deployment,
    limits: Limits,
) -> Arc<dyn Sandbox> {
    if sandbox.guarded_downstream() {
        return sandbox;
    }
    Arc::new(Guarded {
        inner: sandbox,
        policy,
        env,
        limits,
    })
}

struct Guarded {
    inner: Arc<dyn Sandbox>,
    policy: Arc<Policy>,
    env: Deployment,
    limits: Limits,
}

/// Unix seconds, for a decision's `now` (the one clock every local
/// decision and plan reads).
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Guarded {
    /// The exec as it may run (its program resolved), or why not.
    fn check(&self, req: &ExecRequest) -> Result<ExecRequest, SandboxError> {
        let Some(program) = req.argv.first() else {
            return Err(SandboxError::Refused {
                reason: "the command is empty; name a program to run".into(),
                rules: Vec::new(),
            });
        };
        let resolved = self.inner.resolve_command(program)?;
        let work_dir = match self.inner.host_work_dir() {
            Some(d) => d.guest,
            None => self.inner.provenance().spec.work_dir().to_string(),
        };
        let request = Request {
            identity: self.inner.provenance().identity.clone(),
            env: self.env.clone(),
            now: now(),
            facts: SurfaceFacts::Compute(ComputeFacts {
                command: resolved.command.clone(),
                command_target: resolved.command_target.clone(),
                args: Some(req.argv.iter().skip(1).cloned().collect()),
                cpu: i64::try_from(self.limits.cpu_seconds).ok(),
                memory: i64::try_from(self.limits.memory_bytes).ok(),
                work_dir: Some(work_dir),
            }),
        };
        // The decision alone on the way to an allowed exec; the explanation
        // (every rule's outcome) only for a refusal's message.
        if !self.policy.decide(&request).is_allowed() {
            let explanation = self.policy.explain(&request);
            return Err(SandboxError::Refused {
                reason: format!(
                    "{}{program}` (canonical `{}`{}) before it starts:",
                    crate::backend::POLICY_REFUSES,
                    resolved.command,
                    if resolved.command_target != resolved.command {
                        format!(", target `{}`", resolved.command_target)
                    } else {
                        String::new()
                    },
                ),
                rules: explanation.why(&self.policy, Surface::Compute),
            });
        }
        let mut allowed = req.clone();
        allowed.argv[0] = resolved.command;
        Ok(allowed)
    }
}

impl Guarded {
    /// Whether the policy lets a path relative to `work_dir` be read.
    fn readable(&self, work_dir: String) -> impl FnMut(&str) -> bool + Send + 'static {
        let policy = self.policy.clone();
        // One request, its path replaced per entry: a listing of 10,000
        // entries decides 10,000 times, and cloning the identity and the
        // deployment for each was most of what a listing cost.
        let mut request = Request {
            identity: self.inner.provenance().identity.clone(),
            env: self.env.clone(),
            now: now(),
            facts: SurfaceFacts::Storage(StorageFacts {
                path: String::new(),
                mode: cordon_policy::Mode::Read,
                bytes: None,
                work_dir: Some(work_dir.clone()),
            }),
        };
        move |rel: &str| {
            request.now = now();
            if let SurfaceFacts::Storage(f) = &mut request.facts {
                // As `files::absolute`, without a new string each time.
                f.path.clear();
                if rel.starts_with('/') {
                    f.path.push_str(rel);
                } else {
                    f.path.push_str(work_dir.trim_end_matches('/'));
                    if !rel.is_empty() && rel != "." {
                        f.path.push('/');
                        f.path.push_str(rel);
                    } else if f.path.is_empty() {
                        f.path.push('/');
                    }
                }
            }
            policy.decide(&request).is_allowed()
        }
    }

    /// The operation as it may run (a read's length held to the cap), or
    /// the storage rule that refuses one of the paths it touches.
    fn check_files(&self, op: &crate::FileOp) -> Result<crate::FileOp, SandboxError> {
        let work_dir = match self.inner.host_work_dir() {
            Some(d) => d.guest,
            None => self.inner.provenance().spec.work_dir().to_string(),
        };
        for (path, mode) in op.accesses() {
            let mut path = crate::files::absolute(&work_dir, path);
            if !crate::files::is_canonical(&path) {
                return Err(SandboxError::Invalid {
                    reason: format!("`{path}` is not a canonical path (an empty, `.` or `..` part); name the path plainly"),
                });
            }
            // A listing reads what is in the directory: decided as its
            // contents (`D/`), as the workload's own reads beneath it are.
            if matches!(op, crate::FileOp::List { .. }) {
                path = format!("{}/", path.trim_end_matches('/'));
            }
            let request = Request {
                identity: self.inner.provenance().identity.clone(),
                env: self.env.clone(),
                now: now(),
                facts: SurfaceFacts::Storage(StorageFacts {
                    path: path.clone(),
                    mode,
                    bytes: op.bytes(),
                    work_dir: Some(work_dir.clone()),
                }),
            };
            if !self.policy.decide(&request).is_allowed() {
                let explanation = self.policy.explain(&request);
                return Err(SandboxError::Refused {
                    reason: format!(
                        "the policy's storage surface refuses the files API's `{}` ({} of `{path}`):",
                        op.name(),
                        mode.as_str()
                    ),
                    rules: explanation.why(&self.policy, Surface::Storage),
                });
            }
        }
        let mut op = op.clone();
        if let crate::FileOp::Read { len, .. } = &mut op {
            let cap = self
                .inner
                .provenance()
                .spec
                .files_out()
                .map_or(crate::files::MAX_READ_BYTES, |l| {
                    l.max_bytes_per_file.min(crate::files::MAX_READ_BYTES)
                });
            *len = (*len).min(cap);
        }
        Ok(op)
    }
}

impl Sandbox for Guarded {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provenance(&self) -> &Provenance {
        self.inner.provenance()
    }
    fn start_exec(&self, req: &ExecRequest, attach: Attach) -> Result<ExecHandle, SandboxError> {
        let allowed = self.check(req)?;
        self.inner.start_exec(&allowed, attach)
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.inner.write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.inner.stat_no_follow(path)
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.inner.read_file(path, max_bytes)
    }
    /// The files API's listing of one directory (decided as it is),
    /// named as `list_dir` names entries.
    fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, SandboxError> {
        let op = crate::FileOp::List {
            path: path.to_string(),
            depth: 0,
        };
        match self.files(&op)? {
            crate::FileAnswer::Listing { entries, .. } => Ok(entries
                .into_iter()
                .map(|e| DirEntry {
                    name: e.path.rsplit('/').next().unwrap_or(&e.path).to_string(),
                    kind: e.kind,
                })
                .collect()),
            other => Err(SandboxError::Failed {
                operation: "list",
                reason: format!("the backend answered a listing with {other:?}"),
            }),
        }
    }
    fn host_work_dir(&self) -> Option<HostWorkDirRecord> {
        self.inner.host_work_dir()
    }
    fn residue(&self) -> serde_json::Value {
        self.inner.residue()
    }
    fn resolve_command(&self, program: &str) -> Result<ResolvedCommand, SandboxError> {
        self.inner.resolve_command(program)
    }
    fn pause(&self) -> Result<(), SandboxError> {
        self.inner.pause()
    }
    fn resume(&self) -> Result<(), SandboxError> {
        self.inner.resume()
    }
    fn workspace_diff(&self) -> Result<Vec<crate::WorkspaceChange>, SandboxError> {
        self.inner.workspace_diff()
    }
    fn checkpoint(&self, into: &std::path::Path) -> Result<u32, SandboxError> {
        self.inner.checkpoint(into)
    }

    /// The host's copy for a snapshot, not the workload's access: not
    /// decided here, as the host's own copy of a work dir on this host is
    /// not.
    fn copy_files_out(
        &self,
        into: &std::path::Path,
        room: u64,
        max_entries: usize,
    ) -> Result<Vec<String>, SandboxError> {
        self.inner.copy_files_out(into, room, max_entries)
    }
    /// Each path it touches decided by the policy's storage surface first;
    /// a listing then keeps only the entries the policy lets be read (a
    /// directory the workload may list can hold what it may not read).
    fn files(&self, op: &crate::FileOp) -> Result<crate::FileAnswer, SandboxError> {
        let allowed = self.check_files(op)?;
        match self.inner.files(&allowed)? {
            crate::FileAnswer::Listing {
                mut entries,
                truncated,
            } => {
                let work_dir = match self.inner.host_work_dir() {
                    Some(d) => d.guest,
                    None => self.inner.provenance().spec.work_dir().to_string(),
                };
                let mut readable = self.readable(work_dir);
                entries.retain(|e| readable(&e.path));
                Ok(crate::FileAnswer::Listing { entries, truncated })
            }
            other => Ok(other),
        }
    }
    /// Decided by the policy's ingress surface for this sandbox's identity
    /// and the caller, the refusal naming the rule; then opened.
    fn open_port(&self, req: &crate::PortRequest) -> Result<std::net::TcpStream, SandboxError> {
        if !self
            .inner
            .provenance()
            .spec
            .requires()
            .contains(crate::Capability::Ports)
        {
            return Err(SandboxError::Invalid {
                reason: "this sandbox was made without `requires: [ports]`, so its workload may listen on no port; make it with `--require ports` (or the spec's `requires`)".into(),
            });
        }
        let request = Request {
            identity: self.inner.provenance().identity.clone(),
            env: self.env.clone(),
            now: now(),
            facts: SurfaceFacts::Ingress(cordon_policy::IngressFacts {
                port: i64::from(req.port),
                listen: req.listen.clone(),
                caller: req.caller.clone(),
            }),
        };
        if !self.policy.decide(&request).is_allowed() {
            let explanation = self.policy.explain(&request);
            return Err(SandboxError::Refused {
                reason: format!(
                    "the policy's ingress surface refuses port {} at {} to `{}/{}`:",
                    req.port, req.listen, req.caller.namespace, req.caller.name
                ),
                rules: explanation.why(&self.policy, Surface::Ingress),
            });
        }
        self.inner.open_port(req)
    }
    /// Decided as a listing of `path` is; then each event only for a path
    /// the policy lets be read (half a rename as a creation or removal).
    fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn crate::WatchSource>, SandboxError> {
        let op = crate::FileOp::List {
            path: path.to_string(),
            depth: 0,
        };
        let crate::FileOp::List { path, .. } = self.check_files(&op)? else {
            unreachable!("a listing checks as a listing");
        };
        let inner = self.inner.watch(&path, recursive)?;
        let work_dir = match self.inner.host_work_dir() {
            Some(d) => d.guest,
            None => self.inner.provenance().spec.work_dir().to_string(),
        };
        Ok(Box::new(crate::watch::Filtered {
            inner,
            keep: self.readable(work_dir),
        }))
    }
    fn workspace_apply(&self, only: &[String]) -> Result<crate::ApplyReport, SandboxError> {
        self.inner.workspace_apply(only)
    }

    /// A replacement is checked as [`crate::Router::ensure_policy_allows`]
    /// checks a spec's allowlist at acquire, for this sandbox's identity;
    /// one the policy denies closes egress (never leaves the old, wider
    /// list in force) and is refused, saying so.
    fn change_egress(&self, change: EgressChange, by: &str) -> Result<u64, SandboxError> {
        if let EgressChange::Replace(list) = &change {
            let p = self.inner.provenance();
            if let Err(e) = crate::router::ensure_egress_allowed(
                &self.policy,
                &self.env,
                now(),
                &p.identity,
                p.spec.kind(),
                list,
            ) {
                let rules = e.denial().map(|(_, r)| r).unwrap_or_default();
                // Its own answer is the closing's error, expected; but a
                // sandbox with no route out had nothing to close, and says
                // so (not "now closed").
                if let Err(SandboxError::Invalid { reason }) = self
                    .inner
                    .change_egress(EgressChange::Close(e.to_string()), by)
                {
                    return Err(SandboxError::Invalid { reason });
                }
                return Err(SandboxError::Refused {
                    reason: format!(
                        "{e}; the sandbox's egress is now closed (nothing is carried) until a change the policy allows"
                    ),
                    rules,
                });
            }
        }
        self.inner.change_egress(change, by)
    }
    fn guarded_downstream(&self) -> bool {
        true
    }
}
