//! The files-out conformance kit: probes that plant a hostile layout
//! through a backend's public surface and attack it. Every backend that
//! serves `files_out` must pass it on a real instance (`cordon conformance
//! --backend NAME`).
//!
//! Fill in a [`ConformanceSubject`] — a sandbox, its work dir, a directory
//! outside it, and how the guest plants a file, a link, a FIFO —
//! ([`PosixGuestSubject`] does that for any guest with `sh`, `ln`, `mkfifo`
//! and `cat`), then call [`run_files_out_conformance`]. It depends on no
//! test framework, runs every probe, and reports every probe that failed,
//! not only the first. A probe that cannot plant its layout **fails**; none
//! is ever skipped. Each probe runs on its own thread under a timeout, so a
//! read that blocks (a FIFO opened for reading) is a failure, not a hang.
//!
//! The probes ([`PROBES`]), each in a directory of its own under the work
//! dir:
//!
//! | probe | layout | passes when |
//! | --- | --- | --- |
//! | `link-to-outside-file` | the output is a link to a file outside | refused, nothing of the file read or delivered |
//! | `symlinked-parent` | a parent of the output is a link to a directory outside | the same |
//! | `link-swapped-after-stat` | a file, swapped for a link to outside after it is stat-ed | the same |
//! | `dangling-link` | an optional output is a link to nothing | refused, not reported absent |
//! | `directory-declared-as-file` | a directory at the output path | refused |
//! | `oversized-file` | one byte past the per-file cap | refused for that cap; no read past cap + 1 |
//! | `file-grows-after-stat` | a small file that grows after its stat | refused; the read was bounded to cap + 1 |
//! | `too-many-files` | one file past `max_files` | refused for that cap |
//! | `names-collide-by-case` | landing names differing only by case | refused before the sandbox is touched |
//! | `names-collide-by-nfc-nfd` | landing names differing only by Unicode form | the same |
//! | `fifo-at-output-path` | a FIFO at the output path | refused, without hanging |
//! | `device-node-at-output-path` | a character device (subjects that can make one) | refused |
//! | `host-write-through-link` | for every host-side write: a link to a file outside where the host writes | the file outside is unchanged |
//! | `host-write-through-dangling-link` | a link to a path outside that does not exist | nothing is created outside |
//! | `host-write-under-linked-parent` | a parent of the write is a link to a directory outside | nothing is created outside |
//! | `files-api-operations` | none | list, stat, read, write (create, append), mkdir, rename and remove do what they say |
//! | `files-api-read-through-link` | a link to a file outside, a link to a directory outside | reads of both refused, nothing of the file read |
//! | `files-api-list-through-link` | the same | listed as links, nothing beneath them listed; a listing of the linked directory refused |
//! | `files-api-write-through-link` | the same | a write of each kind, and a mkdir, changes and makes nothing outside |
//! | `files-api-remove-through-link` | the same | a removal beneath the link refused; removing a link removes it, not what it names |
//! | `files-api-rename-through-link` | the same | nothing moved out of or into the linked directory |
//! | `files-api-read-bounded` | a 4 KiB file, a FIFO | a read returns its length, no more; the FIFO refused without hanging |
//!
//! Device nodes cannot be made by a confined guest, so that probe runs only
//! for subjects that declare [`ConformanceSubject::plants_device_nodes`]
//! (the host-directory test subject run as root).

use std::fmt;
use std::sync::{mpsc, Arc};
use std::time::Duration;

mod interposer;
mod judge;
mod probe;
mod probes_collect;
mod probes_files_api;
mod probes_host_write;
mod subject;

pub use judge::{
    judge_cap, judge_collision, judge_dangling, judge_escape, judge_host_write, judge_refused,
    Observation,
};
pub use probe::{ConformanceSubject, SECRET};
pub use subject::PosixGuestSubject;
#[cfg(target_os = "linux")]
pub use subject::{can_make_device_nodes, host_directory_subject};

use probes_collect::collect_probe;
use probes_files_api::files_api_probe;
use probes_host_write::host_write_probe;

/// Every probe, in the order they run. `device-node-at-output-path` runs
/// only for subjects that can plant device nodes; the `host-write-*`
/// probes run once per host-side write the subject names.
pub const PROBES: [&str; 15] = [
    "link-to-outside-file",
    "symlinked-parent",
    "link-swapped-after-stat",
    "dangling-link",
    "directory-declared-as-file",
    "oversized-file",
    "file-grows-after-stat",
    "too-many-files",
    "names-collide-by-case",
    "names-collide-by-nfc-nfd",
    "fifo-at-output-path",
    "device-node-at-output-path",
    "host-write-through-link",
    "host-write-through-dangling-link",
    "host-write-under-linked-parent",
];

/// The files API's probes ([`cordon_sandbox::Sandbox::files`]), run after
/// [`PROBES`] on every subject: every backend serves `files_list`.
pub const FILES_API_PROBES: [&str; 7] = [
    "files-api-operations",
    "files-api-read-through-link",
    "files-api-list-through-link",
    "files-api-write-through-link",
    "files-api-remove-through-link",
    "files-api-rename-through-link",
    "files-api-read-bounded",
];

/// One probe's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub probe: String,
    pub passed: bool,
    pub detail: String,
}

/// Every probe's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub subject: String,
    pub results: Vec<ProbeResult>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }
    pub fn failed(&self) -> Vec<&ProbeResult> {
        self.results.iter().filter(|r| !r.passed).collect()
    }
    pub fn all_passed(&self) -> bool {
        !self.results.is_empty() && self.results.iter().all(|r| r.passed)
    }
    /// `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed",
            self.passed(),
            self.results.len() - self.passed()
        )
    }
    /// `Ok` when every probe passed; otherwise the report, which names
    /// every failed probe.
    pub fn into_result(self) -> Result<Report, Report> {
        if self.all_passed() {
            Ok(self)
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for Report {
    /// One line per probe, then `N passed, M failed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            let mark = if r.passed { "pass" } else { "FAIL" };
            writeln!(f, "{mark} {}: {}", r.probe, r.detail)?;
        }
        write!(f, "{}", self.summary())
    }
}

/// How long one probe may take before it fails as hung.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs every probe against `subject` and reports each.
pub fn run_files_out_conformance(subject: Arc<dyn ConformanceSubject>) -> Report {
    run_files_out_conformance_with(subject, PROBE_TIMEOUT)
}

/// [`run_files_out_conformance`] with a per-probe timeout.
pub fn run_files_out_conformance_with(
    subject: Arc<dyn ConformanceSubject>,
    timeout: Duration,
) -> Report {
    let mut plan: Vec<(String, Probe)> = Vec::new();
    for name in PROBES {
        match name {
            "device-node-at-output-path" if !subject.plants_device_nodes() => {}
            n if n.starts_with("host-write-") => {
                for (i, w) in subject.host_writes().into_iter().enumerate() {
                    plan.push((format!("{n} ({w})"), Probe::HostWrite(n, i)));
                }
            }
            n => plan.push((n.to_string(), Probe::Collect(n))),
        }
    }
    for n in FILES_API_PROBES {
        plan.push((n.to_string(), Probe::FilesApi(n)));
    }
    let mut results = Vec::new();
    for (label, probe) in plan {
        let (tx, rx) = mpsc::channel();
        let s = subject.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("probe {label}"))
            .spawn(move || {
                let _ = tx.send(probe.run(&*s));
            });
        let outcome = match spawned {
            Err(e) => Err(format!("could not start the probe: {e}")),
            Ok(_) => match rx.recv_timeout(timeout) {
                Ok(v) => v,
                Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                    "did not finish within {}s: a read blocked (a FIFO opened for reading hangs the host)",
                    timeout.as_secs()
                )),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    Err("the probe panicked".to_string())
                }
            },
        };
        results.push(match outcome {
            Ok(detail) => ProbeResult {
                probe: label,
                passed: true,
                detail,
            },
            Err(detail) => ProbeResult {
                probe: label,
                passed: false,
                detail,
            },
        });
    }
    Report {
        subject: subject.name().to_string(),
        results,
    }
}

#[derive(Debug, Clone, Copy)]
enum Probe {
    Collect(&'static str),
    HostWrite(&'static str, usize),
    FilesApi(&'static str),
}

impl Probe {
    fn run(self, s: &dyn ConformanceSubject) -> Result<String, String> {
        match self {
            Probe::Collect(name) => collect_probe(name, s),
            Probe::HostWrite(name, which) => host_write_probe(name, which, s),
            Probe::FilesApi(name) => files_api_probe(name, s),
        }
    }
}
