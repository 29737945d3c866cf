//! The audit log: one JSON line per decision, holding the facts of the
//! final decision, so `cordon policy explain --facts LINE` replays it.
//! An allowed request's `allow` line is written before anything is dialled
//! or sent, and an `end` line follows with what came of it. A file is
//! rotated by size ([`LogFile`]); what each sandbox may write is bounded
//! by the proxy (`proxy/budget.rs`, `Budget`).

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
    /// `allow` or `deny`; `end` for what came of an allowed request.
    pub verdict: String,
    /// The status answered (`200` for a tunnel that opened). `0` on a
    /// plain request's `allow` line, written before the request was sent:
    /// its answer is on the `end` line after it.
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
    /// The brokered secrets whose value the proxy put in this request
    /// (names only; never a value).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub secrets: Vec<String>,
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
    /// Appended to a file, one write per line, rotated by size.
    File(Mutex<LogFile>),
    /// To standard error, one line each.
    Log,
    /// Kept in memory (tests).
    Memory(Mutex<Vec<AuditLine>>),
}

/// An audit file and its rotated copies, all opened when the proxy starts
/// (it confines itself after: it can then neither create nor rename a
/// file, only write to those it holds).
///
/// Rotation copies rather than renames: `FILE.N-1` into `FILE.N`, ..., `FILE`
/// into `FILE.1`, then `FILE` is emptied. Every proxy process appending to
/// the same file (each holds it open, `O_APPEND`) keeps writing to the live
/// `FILE`, and an exclusive `flock` on it, held for each write and each
/// rotation, keeps two processes from rotating at once or a line from
/// falling between the copy and the emptying.
pub struct LogFile {
    path: std::path::PathBuf,
    live: File,
    /// `FILE.1` to `FILE.keep`; empty for a file that is not a regular one
    /// (`/dev/full`, a pipe), which is never rotated.
    old: Vec<File>,
    rotate_bytes: u64,
}

impl LogFile {
    fn write_line(&mut self, text: &str) -> std::io::Result<()> {
        use rustix::fs::{flock, FlockOperation};
        if self.rotate_bytes == u64::MAX {
            // Not a regular file: never rotated.
            return self.live.write_all(text.as_bytes());
        }
        flock(&self.live, FlockOperation::LockExclusive)?;
        let written = self
            .rotate_if_full(text.len() as u64)
            .and_then(|()| self.live.write_all(text.as_bytes()));
        let _ = flock(&self.live, FlockOperation::Unlock);
        written
    }

    /// Under the lock: rotates when `more` bytes would take the live file
    /// past its bound (a file that holds nothing yet takes any one line).
    fn rotate_if_full(&mut self, more: u64) -> std::io::Result<()> {
        use std::io::Seek as _;
        let len = self.live.metadata()?.len();
        if len == 0 || len.saturating_add(more) <= self.rotate_bytes {
            return Ok(());
        }
        // Oldest first: FILE.N-1 over FILE.N, ..., FILE over FILE.1.
        for i in (0..self.old.len()).rev() {
            let (from, to): (&File, &File) = if i == 0 {
                (&self.live, &self.old[0])
            } else {
                (&self.old[i - 1], &self.old[i])
            };
            to.set_len(0)?;
            (&*to).seek(std::io::SeekFrom::Start(0))?;
            (&*from).seek(std::io::SeekFrom::Start(0))?;
            std::io::copy(&mut &*from, &mut &*to)?;
        }
        self.live.set_len(0)?;
        tracing::info!(target: "cordon::egress", "the audit log {} was rotated at {len} bytes", self.path.display());
        Ok(())
    }
}

/// `FILE.n`.
fn numbered(path: &Path, n: u32) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    std::path::PathBuf::from(s)
}

impl Audit {
    /// Opens (creates, appends to) an audit file, mode 0600, with the
    /// default bounds.
    pub fn open(path: &Path) -> Result<Audit, String> {
        Audit::open_bounded(path, &cordon_sandbox::AuditBounds::default())
    }

    /// Opens (creates, appends to) an audit file, mode 0600, and (for a
    /// regular file) its `bounds.keep` rotated copies `FILE.1`... beside it.
    pub fn open_bounded(
        path: &Path,
        bounds: &cordon_sandbox::AuditBounds,
    ) -> Result<Audit, String> {
        use std::os::unix::fs::OpenOptionsExt as _;
        bounds
            .check()
            .map_err(|e| format!("the audit log's bounds: {e}"))?;
        // Read too, to copy it when it is rotated: only a regular file (or
        // one not there yet, made regular here). A pipe or a device is
        // opened for appending alone, as it always was.
        let regular_before = std::fs::metadata(path).map_or(true, |m| m.is_file());
        let live = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(regular_before)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("opening the audit log {}: {e}", path.display()))?;
        let regular = live
            .metadata()
            .map_err(|e| format!("opening the audit log {}: {e}", path.display()))?
            .is_file()
            && regular_before;
        let mut old = Vec::new();
        if regular {
            for n in 1..=bounds.keep {
                let p = numbered(path, n);
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .read(true)
                    .write(true)
                    .mode(0o600)
                    .open(&p)
                    .map_err(|e| {
                        format!(
                            "opening the rotated audit log {}: {e} (old audit files are kept beside it; keeping none, `keep: 0` or `--audit-keep 0`, needs no other file)",
                            p.display()
                        )
                    })?;
                old.push(f);
            }
        }
        Ok(Audit::File(Mutex::new(LogFile {
            path: path.to_path_buf(),
            live,
            old,
            rotate_bytes: if regular {
                bounds.rotate_bytes
            } else {
                u64::MAX
            },
        })))
    }

    /// One line as written: JSON and a newline.
    pub fn encode(line: &AuditLine) -> Option<String> {
        let mut text = serde_json::to_string(line).ok()?;
        text.push('\n');
        Some(text)
    }

    /// Writes one line; whether it was written. A proxy that cannot record
    /// an allow does not carry the request (see `proxy/record.rs`).
    pub fn record(&self, line: AuditLine) -> bool {
        match Audit::encode(&line) {
            Some(text) => self.write_encoded(line, &text),
            None => false,
        }
    }

    /// Writes `line`, encoded already as `text`.
    pub(crate) fn write_encoded(&self, line: AuditLine, text: &str) -> bool {
        match self {
            Audit::File(f) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                match f.write_line(text) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(target: "cordon::egress", "writing the audit log: {e}");
                        false
                    }
                }
            }
            Audit::Log => std::io::stderr().lock().write_all(text.as_bytes()).is_ok(),
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

    fn line(n: usize) -> AuditLine {
        AuditLine {
            time: rfc3339(0),
            now: 0,
            sandbox: "s".into(),
            identity: Identity::default(),
            env: String::new(),
            kind: "http".into(),
            target: format!("http://{n:06}.test/{}", "x".repeat(900)),
            ip: None,
            verdict: "deny".into(),
            status: 403,
            rules: Vec::new(),
            unknown: Vec::new(),
            reason: "r".into(),
            facts: EgressFacts {
                url: None,
                scheme: None,
                host: None,
                port: 0,
                method: None,
                path: None,
                ip: None,
                query: None,
                headers: None,
            },
            bytes_up: None,
            bytes_down: None,
            secrets: Vec::new(),
        }
    }

    fn read(p: &Path) -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| AuditLine::parse(l).unwrap().target[7..13].to_string())
            .collect()
    }

    #[test]
    fn the_file_is_rotated_by_size_and_keeps_a_bounded_number_of_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let bounds = cordon_sandbox::AuditBounds {
            rotate_bytes: 64 * 1024,
            keep: 2,
            ..Default::default()
        };
        let audit = Audit::open_bounded(&path, &bounds).unwrap();
        // About 1 KiB each: 300 lines are more than four files' worth.
        for n in 0..300 {
            assert!(audit.record(line(n)));
        }
        let live = read(&path);
        let one = read(&numbered(&path, 1));
        let two = read(&numbered(&path, 2));
        assert!(!numbered(&path, 3).exists());
        for p in [path.clone(), numbered(&path, 1), numbered(&path, 2)] {
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(len <= bounds.rotate_bytes, "{} is {len} bytes", p.display());
        }
        // The newest lines are in the live file, the next in FILE.1, then
        // FILE.2, each run unbroken; the oldest are gone.
        assert_eq!(live.last().map(String::as_str), Some("000299"));
        let all: Vec<String> = two.iter().chain(&one).chain(&live).cloned().collect();
        let first: usize = all[0].parse().unwrap();
        assert!(first > 0, "nothing was dropped: the bound did not hold");
        let want: Vec<String> = (first..300).map(|n| format!("{n:06}")).collect();
        assert_eq!(all, want);
    }

    #[test]
    fn two_writers_of_one_file_rotate_it_without_losing_or_tearing_a_line() {
        // Two opens of one path, as two proxy processes hold it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let bounds = cordon_sandbox::AuditBounds {
            rotate_bytes: 64 * 1024,
            keep: 8,
            ..Default::default()
        };
        let a = std::sync::Arc::new(Audit::open_bounded(&path, &bounds).unwrap());
        let b = std::sync::Arc::new(Audit::open_bounded(&path, &bounds).unwrap());
        let writers: Vec<_> = [(a, 0), (b, 1000)]
            .into_iter()
            .map(|(audit, base)| {
                std::thread::spawn(move || {
                    for n in 0..200 {
                        assert!(audit.record(line(base + n)));
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // About 400 KiB in all, within nine files of 64 KiB: every line
        // is kept, once, whole.
        let mut all = Vec::new();
        for n in 0..=bounds.keep {
            let p = if n == 0 {
                path.clone()
            } else {
                numbered(&path, n)
            };
            all.extend(read(&p));
        }
        all.sort();
        let mut want: Vec<String> = (0..200)
            .chain(1000..1200)
            .map(|n| format!("{n:06}"))
            .collect();
        want.sort();
        assert_eq!(all, want);
        assert!(std::fs::metadata(numbered(&path, 1)).unwrap().len() > 0);
    }

    #[test]
    fn a_file_that_is_not_regular_is_never_rotated() {
        // /dev/null takes every line and no `/dev/null.1` is made.
        let audit = Audit::open(Path::new("/dev/null")).unwrap();
        assert!(audit.record(line(1)));
        assert!(!Path::new("/dev/null.1").exists());
        // /dev/full takes none: the write fails and says so.
        let full = Audit::open(Path::new("/dev/full")).unwrap();
        assert!(!full.record(line(1)));
    }

    #[test]
    fn time() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_300_000), "2026-12-03T12:13:20Z");
    }
}
