//! A fresh per-call output directory ([`CallDir`]) for a warm sandbox's
//! rounds (see "Warm reuse" in [`cordon_sandbox::outputs`]), and its
//! creation in the sandbox through [`Sandbox::exec`]. The collection reads
//! beneath it (`Collection::in_call_dir`); this module uses
//! nothing of the crate's root.

use std::time::Duration;

use cordon_sandbox::outputs::{plain_env, OutputError};
use cordon_sandbox::{ExecRequest, ExitStatus, Sandbox, SandboxError};

/// A fresh per-call output directory, relative to `work_dir`.
///
/// The kind names it (from its own call id); the round writes into it; the
/// collection reads beneath it, and landing names drop it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallDir(String);

impl CallDir {
    /// `.cordon/calls/<call_id>`; the id is one name segment of
    /// `a-z A-Z 0-9 - _ .`, at most 64 bytes.
    pub fn new(call_id: &str) -> Result<CallDir, OutputError> {
        let bad = |reason: &str| OutputError::CallId {
            id: call_id.to_string(),
            reason: reason.to_string(),
        };
        if call_id.is_empty() || call_id.len() > 64 || call_id.starts_with('.') {
            return Err(bad(
                "a call id is 1 to 64 bytes and does not start with `.`",
            ));
        }
        if !call_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(bad("a call id holds only `a-z A-Z 0-9 - _ .`"));
        }
        Ok(CallDir(format!(".cordon/calls/{call_id}")))
    }

    /// Relative to `work_dir`.
    pub fn path(&self) -> &str {
        &self.0
    }

    /// The guest path of this directory under `work_dir`.
    pub fn guest_path(&self, work_dir: &str) -> String {
        format!("{}/{}", work_dir.trim_end_matches('/'), self.0)
    }

    /// Creates the directory in the sandbox with `mkdir -p` for its parent
    /// and a plain `mkdir` for itself, so a directory left by an earlier
    /// round fails this one rather than serving stale files.
    pub fn create(&self, sandbox: &dyn Sandbox, work_dir: &str) -> Result<(), SandboxError> {
        let dir = self.guest_path(work_dir);
        let parent = dir.rsplit_once('/').map_or("/", |(p, _)| p).to_string();
        let req = ExecRequest {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "mkdir -p -- \"$1\" && mkdir -- \"$2\"".into(),
                "sh".into(),
                parent,
                dir.clone(),
            ],
            env: plain_env(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(30),
            max_output_bytes: 4096,
        };
        let out = sandbox.exec(&req)?;
        if out.status != ExitStatus::Code(0) {
            return Err(SandboxError::Failed {
                operation: "create the call directory",
                reason: format!(
                    "`mkdir {dir}` ended with {}: {}; a call directory must not exist before its round (use a new call id)",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(())
    }
}
