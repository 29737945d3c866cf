//! Running workloads: one exec through the subject's public surface, and
//! what it did.

use std::time::Duration;
use std::time::Instant;

use cordon_sandbox::{ExecOutput, ExecRequest, ExitStatus, Sandbox, SandboxError};

use super::case::EscapeSubject;

/// What one workload did.
#[derive(Debug)]
pub(super) struct Ran {
    pub(super) result: Result<ExecOutput, SandboxError>,
    pub(super) took: Duration,
}

impl Ran {
    pub(super) fn stdout(&self) -> String {
        match &self.result {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(_) => String::new(),
        }
    }
    pub(super) fn all_output(&self) -> String {
        match &self.result {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => e.to_string(),
        }
    }
    pub(super) fn status(&self) -> Option<ExitStatus> {
        self.result.as_ref().ok().map(|o| o.status)
    }
    /// A short account for a failure message.
    pub(super) fn show(&self) -> String {
        match &self.result {
            Ok(o) => {
                let cut = |b: &[u8]| {
                    let s = String::from_utf8_lossy(b);
                    let s = s.trim();
                    if s.len() > 600 {
                        let mut end = 600;
                        while !s.is_char_boundary(end) {
                            end -= 1;
                        }
                        format!("{}…", &s[..end])
                    } else {
                        s.to_string()
                    }
                };
                format!(
                    "[{}; stdout: {:?}; stderr: {:?}]",
                    o.status,
                    cut(&o.stdout),
                    cut(&o.stderr)
                )
            }
            Err(e) => format!("[exec refused: {e}]"),
        }
    }
    /// The workload must have run to `end` (its script printed it): a case
    /// whose script never ran proves nothing.
    pub(super) fn ran_to_end(&self) -> Result<(), String> {
        if self.stdout().lines().any(|l| l.trim() == "end") {
            Ok(())
        } else {
            Err(format!(
                "could not set up: the workload did not run to its end {}",
                self.show()
            ))
        }
    }
}

pub(super) fn exec_in(sandbox: &dyn Sandbox, argv: Vec<String>, timeout: Duration) -> Ran {
    let started = Instant::now();
    let result = sandbox.exec(&ExecRequest {
        argv,
        env: cordon_sandbox::outputs::plain_env(),
        stdin: Vec::new(),
        timeout,
        max_output_bytes: 1 << 20,
    });
    Ran {
        result,
        took: started.elapsed(),
    }
}

pub(super) const TIMEOUT: Duration = Duration::from_secs(20);

pub(super) fn sh(s: &EscapeSubject, script: &str, args: &[&str]) -> Ran {
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        script.into(),
        "sh".into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    exec_in(&*s.sandbox, argv, TIMEOUT)
}

pub(super) fn py_in(sandbox: &dyn Sandbox, code: &str) -> Ran {
    exec_in(
        sandbox,
        vec!["/usr/bin/python3".into(), "-c".into(), code.into()],
        TIMEOUT,
    )
}

pub(super) fn py(s: &EscapeSubject, code: &str) -> Ran {
    py_in(&*s.sandbox, code)
}

pub(super) fn setup<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("could not set up {what}: {e}"))
}

/// Lines of the workload's output that report a breach (`... REACHED`,
/// `... OPENED` and the like), for the failure message.
pub(super) fn breaches(out: &str, words: &[&str]) -> Vec<String> {
    out.lines()
        .filter(|l| words.iter().any(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}
