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
//!
//! Device nodes cannot be made by a confined guest, so that probe runs only
//! for subjects that declare [`ConformanceSubject::plants_device_nodes`]
//! (the host-directory test subject run as root).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use unicode_normalization::UnicodeNormalization;

use crate::backend::{
    ExecOutput, ExecRequest, ExitStatus, FileRead, FileStat, Provenance, Sandbox, SandboxError,
};
use crate::collect::{Cap, CollectError, Collected, Collection};
use crate::limits::TransferLimits;
use crate::outputs::{Collision, DeclaredOutput};
use crate::sink::{Artifact, ArtifactHandle, LandedArtifact, OutputSink, SinkError};
use crate::spec::SandboxSpec;

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

/// What the kit plants outside the work dir. Seeing these bytes come back
/// is an escape.
/// Shorter than every probe's per-file cap, so a backend that follows the
/// link would really hand it over rather than trip a cap.
pub const SECRET: &[u8] = b"cordon-conformance-secret: never out\n";

/// A backend under test, seen only through its public surface.
///
/// Paths are absolute guest paths. Planting replaces whatever is at the
/// path and creates the parents it needs.
pub trait ConformanceSubject: Send + Sync {
    /// Shown in the report.
    fn name(&self) -> &str;
    fn sandbox(&self) -> &dyn Sandbox;
    /// The guest work dir the sandbox serves outputs from.
    fn work_dir(&self) -> &str;
    /// A guest directory outside the work dir the guest can write to.
    fn outside_dir(&self) -> &str;
    fn plant_file(&self, path: &str, contents: &[u8]) -> Result<(), String>;
    fn append(&self, path: &str, contents: &[u8]) -> Result<(), String>;
    fn plant_dir(&self, path: &str) -> Result<(), String>;
    fn plant_link(&self, path: &str, target: &str) -> Result<(), String>;
    fn plant_fifo(&self, path: &str) -> Result<(), String>;
    /// Whether this subject can make device nodes (a confined guest
    /// cannot); the device probe runs only when it can.
    fn plants_device_nodes(&self) -> bool {
        false
    }
    fn plant_device(&self, path: &str) -> Result<(), String> {
        Err(format!("`{path}`: this subject cannot make device nodes"))
    }
    /// What is at `path` now (following links is fine: the kit reads only
    /// its own outside files); `Ok(None)` when nothing is there.
    fn read_back(&self, path: &str) -> Result<Option<Vec<u8>>, String>;
    /// Removes whatever is at `path`, recursively (a probe's own directory).
    fn remove(&self, path: &str) -> Result<(), String>;
    /// The host-side writes into the work dir this backend makes (files
    /// in, ownership fixes, a work-dir sync). Each is attacked by the
    /// `host-write-*` probes. The default is [`Sandbox::write_file`].
    fn host_writes(&self) -> Vec<String> {
        vec!["Sandbox::write_file".to_string()]
    }
    /// Performs host-side write number `which` of [`Self::host_writes`].
    fn host_write(&self, which: usize, path: &str, contents: &[u8]) -> Result<(), String> {
        let _ = which;
        self.sandbox()
            .write_file(path, contents, 0o644)
            .map_err(|e| e.to_string())
    }
}

/// A subject for any guest with `sh`, `ln`, `mkfifo`, `mkdir`, `rm` and
/// `cat`: it plants through [`Sandbox::exec`], as the workload would.
pub struct PosixGuestSubject {
    pub name: String,
    pub sandbox: Arc<dyn Sandbox>,
    pub work_dir: String,
    pub outside_dir: String,
    /// Set only where the guest can make device nodes (not a confined one).
    pub device_nodes: bool,
}

impl PosixGuestSubject {
    fn sh(&self, script: &str, args: &[&str], stdin: &[u8]) -> Result<ExecOutput, String> {
        let mut argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        argv.push("sh".into());
        argv.extend(args.iter().map(|a| a.to_string()));
        self.sandbox
            .exec(&ExecRequest {
                argv,
                env: crate::outputs::plain_env(),
                stdin: stdin.to_vec(),
                timeout: Duration::from_secs(30),
                max_output_bytes: 2 << 20,
            })
            .map_err(|e| e.to_string())
    }

    fn run(&self, script: &str, args: &[&str], stdin: &[u8]) -> Result<(), String> {
        let out = self.sh(script, args, stdin)?;
        if out.status == ExitStatus::Code(0) {
            Ok(())
        } else {
            Err(format!(
                "`{script}` ended with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

const PARENT: &str = "mkdir -p -- \"$(dirname -- \"$1\")\" && rm -rf -- \"$1\"";

impl ConformanceSubject for PosixGuestSubject {
    fn name(&self) -> &str {
        &self.name
    }
    fn sandbox(&self) -> &dyn Sandbox {
        &*self.sandbox
    }
    fn work_dir(&self) -> &str {
        &self.work_dir
    }
    fn outside_dir(&self) -> &str {
        &self.outside_dir
    }
    fn plant_file(&self, path: &str, contents: &[u8]) -> Result<(), String> {
        self.run(&format!("{PARENT} && cat > \"$1\""), &[path], contents)
    }
    fn append(&self, path: &str, contents: &[u8]) -> Result<(), String> {
        self.run("cat >> \"$1\"", &[path], contents)
    }
    fn plant_dir(&self, path: &str) -> Result<(), String> {
        self.run(&format!("{PARENT} && mkdir -- \"$1\""), &[path], b"")
    }
    fn plant_link(&self, path: &str, target: &str) -> Result<(), String> {
        self.run(
            &format!("{PARENT} && ln -s -- \"$2\" \"$1\""),
            &[path, target],
            b"",
        )
    }
    fn plant_fifo(&self, path: &str) -> Result<(), String> {
        self.run(&format!("{PARENT} && mkfifo -- \"$1\""), &[path], b"")
    }
    fn plants_device_nodes(&self) -> bool {
        self.device_nodes
    }
    fn plant_device(&self, path: &str) -> Result<(), String> {
        // 1:3 is the null device: harmless if anything ever opened it.
        self.run(&format!("{PARENT} && mknod -- \"$1\" c 1 3"), &[path], b"")
    }
    fn read_back(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let out = self.sh(
            "if [ -e \"$1\" ] || [ -L \"$1\" ]; then cat -- \"$1\"; else exit 3; fi",
            &[path],
            b"",
        )?;
        match out.status {
            ExitStatus::Code(0) => Ok(Some(out.stdout)),
            ExitStatus::Code(3) => Ok(None),
            other => Err(format!(
                "reading `{path}` back ended with {other}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }
    fn remove(&self, path: &str) -> Result<(), String> {
        self.run("rm -rf -- \"$1\"", &[path], b"")
    }
}

/// Whether this process can make device nodes (it runs as root), so the
/// host-directory subject can run the device probe.
#[cfg(target_os = "linux")]
pub fn can_make_device_nodes() -> bool {
    rustix::process::geteuid().is_root()
}

/// The host-directory test subject: a [`crate::host_dir::HostDirectorySandbox`]
/// over `root/work`, with `root/outside` beside it, planted through `exec`
/// on the host. Device nodes are planted when `device_nodes` is set (root
/// only).
#[cfg(target_os = "linux")]
pub fn host_directory_subject(
    root: &std::path::Path,
    device_nodes: bool,
) -> Result<PosixGuestSubject, String> {
    let work = root.join("work");
    let outside = root.join("outside");
    for d in [&work, &outside] {
        std::fs::create_dir_all(d).map_err(|e| format!("`{}`: {e}", d.display()))?;
    }
    let text = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("`{}` is not UTF-8", p.display()))
    };
    let (work_dir, outside_dir) = (text(&work)?, text(&outside)?);
    let spec = SandboxSpec::new("conformance", "host-directory")
        .and_then(|s| s.with_work_dir(&work_dir))
        .map_err(|e| e.to_string())?;
    let provenance = Provenance {
        spec,
        identity: cordon_policy::Identity {
            namespace: "cordon".into(),
            name: "conformance".into(),
            attested: false,
            labels: Default::default(),
        },
        policy_digest: String::new(),
    };
    let sandbox =
        crate::host_dir::HostDirectorySandbox::new(&work, provenance).map_err(|e| e.to_string())?;
    Ok(PosixGuestSubject {
        name: "host-directory".into(),
        sandbox: Arc::new(sandbox),
        work_dir,
        outside_dir,
        device_nodes,
    })
}

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
}

/// What a collection did, as the kit observed it.
#[derive(Debug)]
pub struct Observation {
    pub result: Result<Collected, CollectError>,
    /// Artifacts that reached the sink.
    pub delivered: Vec<Artifact>,
    /// Calls that reached the sandbox (stat, read).
    pub sandbox_calls: usize,
    /// Reads that returned more than their bound plus one byte.
    pub overruns: Vec<String>,
    /// Whether [`SECRET`] came back from any read or delivery.
    pub secret_seen: bool,
}

fn small_limits() -> TransferLimits {
    TransferLimits {
        max_bytes_per_file: 64,
        max_total_bytes: 1024,
        max_files: 8,
    }
}

impl Probe {
    fn run(self, s: &dyn ConformanceSubject) -> Result<String, String> {
        match self {
            Probe::Collect(name) => collect_probe(name, s),
            Probe::HostWrite(name, which) => host_write_probe(name, which, s),
        }
    }
}

fn plant(what: &str, r: Result<(), String>) -> Result<(), String> {
    r.map_err(|e| format!("could not plant {what}: {e}"))
}

fn collect_probe(name: &'static str, s: &dyn ConformanceSubject) -> Result<String, String> {
    let dir = format!("{}/cordon-probe-{name}", s.work_dir());
    let out = format!("{}/cordon-probe-{name}", s.outside_dir());
    plant(
        "a clean probe directory",
        s.remove(&dir).and(s.remove(&out)),
    )?;
    let rel = |p: &str| format!("cordon-probe-{name}/{p}");
    let decl = |p: &str| {
        DeclaredOutput::new(&rel(p), "application/octet-stream").map_err(|e| e.to_string())
    };
    let spec_with = |limits: TransferLimits, outputs: Vec<DeclaredOutput>| {
        SandboxSpec::new("conformance", "conformance")
            .and_then(|sp| sp.with_work_dir(s.work_dir()))
            .and_then(|sp| sp.with_outputs(limits, outputs))
            .map_err(|e| format!("the probe's spec is refused: {e}"))
    };
    let secret = format!("{out}/secret");
    match name {
        "link-to-outside-file" => {
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            plant("the link", s.plant_link(&format!("{dir}/out.txt"), &secret))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_escape(&observe(s, &spec, None, None))
        }
        "symlinked-parent" => {
            plant(
                "the outside file",
                s.plant_file(&format!("{out}/dir/out.txt"), SECRET),
            )?;
            plant(
                "the linked parent",
                s.plant_link(&format!("{dir}/sub"), &format!("{out}/dir")),
            )?;
            let spec = spec_with(small_limits(), vec![decl("sub/out.txt")?])?;
            judge_escape(&observe(s, &spec, None, None))
        }
        "link-swapped-after-stat" => {
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            let path = format!("{dir}/out.txt");
            plant("the file", s.plant_file(&path, b"harmless\n"))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            let swapped = Mutex::new(None::<Result<(), String>>);
            let swap = || {
                let r = s.plant_link(&path, &secret);
                if let Ok(mut g) = swapped.lock() {
                    *g = Some(r);
                }
            };
            let o = observe(s, &spec, None, Some((&path, &swap)));
            match swapped.lock().map(|g| g.clone()) {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) => return Err(format!("could not plant the swapped link: {e}")),
                _ => return Err("the output was never stat-ed, so the swap never ran".into()),
            }
            judge_escape(&o)
        }
        "dangling-link" => {
            let target = format!("{out}/missing");
            plant(
                "the dangling link",
                s.plant_link(&format!("{dir}/out.txt"), &target),
            )?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?.optional()])?;
            judge_dangling(&observe(s, &spec, None, None))
        }
        "directory-declared-as-file" => {
            plant("the directory", s.plant_dir(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        "oversized-file" => {
            plant(
                "the oversized file",
                s.plant_file(&format!("{dir}/big.bin"), &[b'x'; 65]),
            )?;
            let spec = spec_with(small_limits(), vec![decl("big.bin")?])?;
            judge_cap(&observe(s, &spec, None, None), Cap::BytesPerFile)
        }
        "file-grows-after-stat" => {
            let path = format!("{dir}/grows.bin");
            plant("the file", s.plant_file(&path, b"small\n"))?;
            let spec = spec_with(small_limits(), vec![decl("grows.bin")?])?;
            let grown = Mutex::new(None::<Result<(), String>>);
            let grow = || {
                let r = s.append(&path, &vec![b'y'; 64 << 10]);
                if let Ok(mut g) = grown.lock() {
                    *g = Some(r);
                }
            };
            let o = observe(s, &spec, None, Some((&path, &grow)));
            match grown.lock().map(|g| g.clone()) {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) => return Err(format!("could not grow the file: {e}")),
                _ => return Err("the output was never stat-ed, so it never grew".into()),
            }
            judge_cap(&o, Cap::BytesPerFile)
        }
        "too-many-files" => {
            let mut outputs = Vec::new();
            for n in ["one", "two", "three"] {
                plant("a file", s.plant_file(&format!("{dir}/{n}.txt"), b"ok\n"))?;
                outputs.push(decl(&format!("{n}.txt"))?);
            }
            let limits = TransferLimits {
                max_files: 2,
                ..small_limits()
            };
            judge_cap(
                &observe(s, &spec_with(limits, outputs)?, None, None),
                Cap::Files,
            )
        }
        "names-collide-by-case" | "names-collide-by-nfc-nfd" => {
            plant("a file", s.plant_file(&format!("{dir}/a.txt"), b"a\n"))?;
            plant("a file", s.plant_file(&format!("{dir}/b.txt"), b"b\n"))?;
            let (first, second, how) = if name == "names-collide-by-case" {
                (
                    "Report.txt".to_string(),
                    "report.txt".to_string(),
                    Collision::Case,
                )
            } else {
                let composed: String = "caf\u{e9}.txt".nfc().collect();
                let decomposed: String = "caf\u{e9}.txt".nfd().collect();
                (composed, decomposed, Collision::Normalisation)
            };
            let named = vec![
                decl("a.txt")?
                    .with_name(&first)
                    .map_err(|e| e.to_string())?,
                decl("b.txt")?
                    .with_name(&second)
                    .map_err(|e| e.to_string())?,
            ];
            let spec = SandboxSpec::new("conformance", "conformance")
                .and_then(|sp| sp.with_work_dir(s.work_dir()))
                .and_then(|sp| sp.with_outputs_named_at_call_time(small_limits()))
                .map_err(|e| e.to_string())?;
            judge_collision(&observe(s, &spec, Some(&named), None), how)
        }
        "fifo-at-output-path" => {
            plant("the FIFO", s.plant_fifo(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        "device-node-at-output-path" => {
            plant("the device node", s.plant_device(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        other => Err(format!("unknown probe `{other}`")),
    }
}

fn host_write_probe(
    name: &'static str,
    which: usize,
    s: &dyn ConformanceSubject,
) -> Result<String, String> {
    let dir = format!("{}/cordon-probe-{name}-{which}", s.work_dir());
    let out = format!("{}/cordon-probe-{name}-{which}", s.outside_dir());
    plant(
        "a clean probe directory",
        s.remove(&dir).and(s.remove(&out)),
    )?;
    const WRITTEN: &[u8] = b"written by the host\n";
    let (path, watched, before): (String, String, Option<Vec<u8>>) = match name {
        "host-write-through-link" => {
            let secret = format!("{out}/secret");
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            // The file must really be there, as the guest will see it next:
            // a subject whose planted files vanish between execs cannot be
            // judged, and must fail rather than pass or blame the host.
            let seen = s.read_back(&secret).map_err(|e| {
                format!("could not plant its layout: reading the outside file back: {e}")
            })?;
            if seen.as_deref() != Some(SECRET) {
                return Err(format!(
                    "could not plant its layout: the outside file `{secret}` is not there on the next exec (is the outside directory the same one on the host and in the guest?)"
                ));
            }
            let path = format!("{dir}/in.txt");
            plant("the link", s.plant_link(&path, &secret))?;
            (path, secret, Some(SECRET.to_vec()))
        }
        "host-write-through-dangling-link" => {
            let target = format!("{out}/created-by-host");
            plant("the outside directory", s.plant_dir(&out))?;
            let path = format!("{dir}/in.txt");
            plant("the dangling link", s.plant_link(&path, &target))?;
            (path, target, None)
        }
        "host-write-under-linked-parent" => {
            let target_dir = format!("{out}/dir");
            plant("the outside directory", s.plant_dir(&target_dir))?;
            plant(
                "the linked parent",
                s.plant_link(&format!("{dir}/sub"), &target_dir),
            )?;
            (
                format!("{dir}/sub/in.txt"),
                format!("{target_dir}/in.txt"),
                None,
            )
        }
        other => return Err(format!("unknown probe `{other}`")),
    };
    let wrote = s.host_write(which, &path, WRITTEN);
    let after = s
        .read_back(&watched)
        .map_err(|e| format!("could not read `{watched}` back: {e}"))?;
    judge_host_write(&watched, before.as_deref(), after.as_deref(), &wrote)
}

/// Did the host write change anything outside?
pub fn judge_host_write(
    watched: &str,
    before: Option<&[u8]>,
    after: Option<&[u8]>,
    wrote: &Result<(), String>,
) -> Result<String, String> {
    if before != after {
        return Err(format!(
            "the host write reached `{watched}` outside the work dir through a planted link"
        ));
    }
    Ok(match wrote {
        Ok(()) => {
            "the write stayed inside the work dir (the link was replaced, not followed)".into()
        }
        Err(e) => format!("refused: {e}"),
    })
}

fn describe_err(e: &CollectError) -> String {
    e.to_string()
}

fn common(o: &Observation) -> Result<(), String> {
    if o.secret_seen {
        return Err("bytes from outside the work dir came back".into());
    }
    if let Some(r) = o.overruns.first() {
        return Err(format!(
            "a read returned more than its bound plus one byte: {r}"
        ));
    }
    Ok(())
}

/// A hostile layout must be refused with nothing delivered and nothing of
/// the outside read.
pub fn judge_escape(o: &Observation) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err(format!(
            "{} artifact(s) were delivered from a hostile layout",
            o.delivered.len()
        ));
    }
    match &o.result {
        Ok(_) => Err("the collection succeeded through a link".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// A dangling link at an optional output must be refused, not reported
/// absent (which is what a stat that follows links says).
pub fn judge_dangling(o: &Observation) -> Result<String, String> {
    common(o)?;
    match &o.result {
        Ok(c) if c.landed.is_empty() => Err(
            "the dangling link was reported absent: the stat follows links instead of reporting one"
                .into(),
        ),
        Ok(_) => Err("the collection succeeded through a dangling link".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// Any refusal, nothing delivered.
pub fn judge_refused(o: &Observation) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err("something was delivered".into());
    }
    match &o.result {
        Ok(_) => Err("it was collected as if it were a regular file".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// Refused for exactly this cap, nothing delivered, every read bounded.
pub fn judge_cap(o: &Observation, cap: Cap) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err("something was delivered past a cap".into());
    }
    match &o.result {
        Err(e @ CollectError::CapExceeded { cap: got, .. }) if *got == cap => {
            Ok(format!("refused: {e}"))
        }
        Err(e) => Err(format!("refused, but not for `{cap}`: {e}")),
        Ok(_) => Err(format!("collected past `{cap}`")),
    }
}

/// Refused as a collision, before the sandbox or the sink was touched.
pub fn judge_collision(o: &Observation, how: Collision) -> Result<String, String> {
    if o.sandbox_calls > 0 || !o.delivered.is_empty() {
        return Err(format!(
            "the sandbox was reached {} time(s) before the collision was refused (it is decided from the declaration alone)",
            o.sandbox_calls
        ));
    }
    match &o.result {
        Err(e @ CollectError::Collision { how: got, .. }) if *got == how => {
            Ok(format!("refused: {e}"))
        }
        Err(e) => Err(format!("refused, but not as a collision that {how}: {e}")),
        Ok(_) => Err("two names that are one file at the destination were both landed".into()),
    }
}

type Hook<'h> = (&'h str, &'h (dyn Fn() + Sync));

/// Runs a collection through an interposer that counts calls, bounds-checks
/// reads, spots the secret, and runs `hook` right after `hook.0` is stat-ed.
fn observe(
    s: &dyn ConformanceSubject,
    spec: &SandboxSpec,
    named: Option<&[DeclaredOutput]>,
    hook: Option<Hook<'_>>,
) -> Observation {
    let spy = Interposer {
        inner: s.sandbox(),
        hook,
        calls: AtomicUsize::new(0),
        overruns: Mutex::new(Vec::new()),
        secret_seen: Mutex::new(false),
    };
    let sink = RecordingSink::default();
    let mut c = Collection::of(spec);
    if let Some(n) = named {
        c = c.named_at_call_time(n);
    }
    let result = c.collect(&spy, Some(&sink));
    let delivered = sink.take();
    let secret_seen = spy.secret_seen.lock().map(|g| *g).unwrap_or(true)
        || delivered.iter().any(|a| contains(&a.bytes, SECRET));
    Observation {
        result,
        delivered,
        sandbox_calls: spy.calls.load(Ordering::SeqCst),
        overruns: spy.overruns.lock().map(|g| g.clone()).unwrap_or_default(),
        secret_seen,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

struct Interposer<'a> {
    inner: &'a dyn Sandbox,
    hook: Option<Hook<'a>>,
    calls: AtomicUsize,
    overruns: Mutex<Vec<String>>,
    secret_seen: Mutex<bool>,
}

impl Sandbox for Interposer<'_> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provenance(&self) -> &Provenance {
        self.inner.provenance()
    }
    fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.exec(req)
    }
    fn start_exec(
        &self,
        req: &ExecRequest,
        attach: crate::Attach,
    ) -> Result<crate::ExecHandle, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.start_exec(req, attach)
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.write_file(path, contents, mode)
    }
    fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.stat_no_follow(path);
        if let Some((at, run)) = self.hook {
            if at == path {
                run();
            }
        }
        r
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.read_file(path, max_bytes)?;
        if r.bytes.len() as u64 > max_bytes.saturating_add(1) {
            if let Ok(mut g) = self.overruns.lock() {
                g.push(format!(
                    "`{path}`: {} bytes for a bound of {max_bytes}",
                    r.bytes.len()
                ));
            }
        }
        if contains(&r.bytes, SECRET) {
            if let Ok(mut g) = self.secret_seen.lock() {
                *g = true;
            }
        }
        Ok(r)
    }
}

#[derive(Default)]
struct RecordingSink {
    got: Mutex<Vec<Artifact>>,
}

impl RecordingSink {
    fn take(&self) -> Vec<Artifact> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl OutputSink for RecordingSink {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        if let Ok(mut g) = self.got.lock() {
            g.push(artifact.clone());
        }
        Ok(LandedArtifact {
            display: format!("`{}`", artifact.name),
            handle: ArtifactHandle::new(artifact.name.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The judges of the probes an unsafe *backend* cannot fail (they
    //! attack cordon's own collector), fed the observation a broken
    //! collector would produce: each can fail.
    use super::*;

    fn obs(result: Result<Collected, CollectError>) -> Observation {
        Observation {
            result,
            delivered: Vec::new(),
            sandbox_calls: 0,
            overruns: Vec::new(),
            secret_seen: false,
        }
    }

    fn collected() -> Collected {
        Collected {
            landed: Vec::new(),
            consumed: Vec::new(),
        }
    }

    #[test]
    fn a_collision_judge_fails_a_collector_that_lands_both_or_reads_first() {
        assert!(judge_collision(&obs(Ok(collected())), Collision::Case).is_err());
        let mut o = obs(Err(CollectError::Collision {
            first: "A".into(),
            second: "a".into(),
            how: Collision::Case,
        }));
        assert!(judge_collision(&o, Collision::Case).is_ok());
        assert!(judge_collision(&o, Collision::Normalisation).is_err());
        o.sandbox_calls = 1;
        assert!(judge_collision(&o, Collision::Case).is_err());
    }

    #[test]
    fn a_cap_judge_fails_a_collector_that_collects_past_the_cap_or_the_wrong_one() {
        assert!(judge_cap(&obs(Ok(collected())), Cap::Files).is_err());
        let e = CollectError::CapExceeded {
            cap: Cap::TotalBytes,
            limit: 1,
            path: "p".into(),
            observed: 2,
            unit: "bytes",
        };
        assert!(judge_cap(&obs(Err(e.clone())), Cap::Files).is_err());
        assert!(judge_cap(&obs(Err(e)), Cap::TotalBytes).is_ok());
    }

    #[test]
    fn a_host_write_judge_fails_when_the_outside_changed() {
        assert!(judge_host_write("x", Some(SECRET), Some(b"written"), &Ok(())).is_err());
        assert!(judge_host_write("x", None, Some(b"written"), &Err("no".into())).is_err());
        assert!(judge_host_write("x", None, None, &Ok(())).is_ok());
    }
}
