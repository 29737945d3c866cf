//! The audit log: one JSON line per decision, holding the facts of the
//! final decision, so `cordon policy explain --facts LINE` replays it.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use cordon_policy::{Deployment, EgressFacts, Identity, Request, SurfaceFacts};
use serde::{Deserialize, Serialize};

/// One audit line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditLine {
    /// RFC 3339, UTC.
    pub time: String,
    /// Seconds since the epoch: `now` in the decision.
    pub now: i64,
    /// The sandbox the connection came from (by its channel), or the
    /// proxy's own name for a standalone proxy.
    pub sandbox: String,
    pub identity: Identity,
    /// `env.name` in rules.
    pub env: String,
    /// `connect` (a tunnel) or `http` (a plain request).
    pub kind: String,
    /// As requested, bounded.
    pub target: String,
    /// The address dialled or refused, when one was reached.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ip: Option<String>,
    /// `allow` or `deny`; `end` for a note after an allowed request.
    pub verdict: String,
    /// The status answered (`200` for a tunnel that opened).
    pub status: u16,
    /// The deciding rules, `file:line`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub rules: Vec<String>,
    /// Facts whose being unknown kept the policy's verdict open.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub unknown: Vec<String>,
    pub reason: String,
    /// The facts as they stood at the decision that ended the request.
    pub facts: EgressFacts,
    /// On a tunnel's `end` line: the bytes it carried from the sandbox
    /// upstream, and back.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bytes_up: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bytes_down: Option<u64>,
}

impl AuditLine {
    /// The request this line records, to decide again.
    pub fn request(&self) -> Request {
        Request {
            identity: self.identity.clone(),
            env: Deployment {
                name: self.env.clone(),
            },
            now: self.now,
            facts: SurfaceFacts::Egress(self.facts.clone()),
        }
    }

    /// Reads one line (the first non-empty one of `text`).
    pub fn parse(text: &str) -> Result<AuditLine, String> {
        let line = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .ok_or("it holds no audit line")?;
        serde_json::from_str(line).map_err(|e| format!("it is not a cordon egress audit line: {e}"))
    }
}

/// Where lines go.
pub enum Audit {
    /// Appended to a file, one write per line.
    File(Mutex<File>),
    /// To standard error, one line each.
    Log,
    /// Kept in memory (tests).
    Memory(Mutex<Vec<AuditLine>>),
}

impl Audit {
    /// Opens (creates, appends to) an audit file, mode 0600.
    pub fn open(path: &Path) -> Result<Audit, String> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("opening the audit log {}: {e}", path.display()))?;
        Ok(Audit::File(Mutex::new(f)))
    }

    /// Writes one line; whether it was written. A proxy that cannot record
    /// an allow does not carry the request (see `proxy.rs`).
    pub fn record(&self, line: AuditLine) -> bool {
        match self {
            Audit::File(f) => {
                let Ok(mut text) = serde_json::to_string(&line) else {
                    return false;
                };
                text.push('\n');
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                match f.write_all(text.as_bytes()) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(target: "cordon::egress", "writing the audit log: {e}");
                        false
                    }
                }
            }
            Audit::Log => match serde_json::to_string(&line) {
                Ok(mut text) => {
                    text.push('\n');
                    std::io::stderr().lock().write_all(text.as_bytes()).is_ok()
                }
                Err(_) => false,
            },
            Audit::Memory(m) => {
                m.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                true
            }
        }
    }

    /// The lines kept by [`Audit::Memory`].
    pub fn lines(&self) -> Vec<AuditLine> {
        match self {
            Audit::Memory(m) => m.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            _ => Vec::new(),
        }
    }
}

/// RFC 3339 UTC for seconds since the epoch.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn time() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_300_000), "2026-12-03T12:13:20Z");
    }
}
