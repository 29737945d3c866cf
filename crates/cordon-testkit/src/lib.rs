//! What the workspace's tests share, in one place: whether this machine can
//! hold a case ([`is_root`], [`in_ci`], [`can_sandbox`], [`gvisor_missing`],
//! [`microvm_missing`]), the one loud skip ([`skip`]: the only place that
//! prints `SKIPPED`, and a failure under `CI=true`), the `cordon` binary
//! as a test runs it ([`Cordon`]), the CI image ([`ci_image`]), a caller
//! ([`caller`]), a private Docker Engine ([`dockerd::Dockerd`]), and the
//! cases every backend must pass, written once ([`suite`]).
//!
//! Dev-only: `publish = false`, a `[dev-dependencies]` entry of the crates
//! whose tests use it.
// A test helper panics on a broken fixture: that is the test failing.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

mod cordon;
pub mod dockerd;
pub mod https;
mod image;
pub mod pause;
pub mod policy;
pub mod snapshot;
pub mod suite;
pub mod suite_ports;
pub mod workspace;

pub use cordon::{output, Cordon};
pub use image::{ci_image, CI_IMAGE, CI_STORE};

/// Whether this process runs as root (its real uid, as `/proc` says).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether this is CI (`CI=true`), where a case that cannot run here is a
/// failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Says loudly that `case` did not run, and why — or, with `CI=true`,
/// fails: CI must run every case (`.ci/run` installs what they need and
/// runs as root).
///
/// The one place the `SKIPPED` banner is printed. It goes to the process's
/// own stderr, which the harness does not capture (`eprintln!` it would,
/// and a passing test's output is never shown), so `.ci/run` lists it.
pub fn skip(case: &str, why: impl Display) {
    assert!(!in_ci(), "CI=true and `{case}`: {why}");
    let _ = writeln!(
        std::io::stderr().lock(),
        "\n!!!!!!!! SKIPPED {case}: {why} (CI=true makes this a failure) !!!!!!!!\n"
    );
}

/// `true` when nothing is `missing`; else [`skip`]s `case` and is `false`.
pub fn runs_here(case: &str, missing: Option<impl Display>) -> bool {
    match missing {
        None => true,
        Some(why) => {
            skip(case, why);
            false
        }
    }
}

/// Whether `case` can launch sandboxes here (root); a loud skip if not, a
/// failure with `CI=true`.
pub fn can_sandbox(case: &str) -> bool {
    runs_here(
        case,
        (!is_root()).then_some("launching a sandbox needs root"),
    )
}

/// Whether `prog` is on PATH or in `/usr/bin`.
pub fn installed(prog: &str) -> bool {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file()));
    on_path || Path::new("/usr/bin").join(prog).is_file()
}

/// Whether `runsc` is installed.
pub fn has_runsc() -> bool {
    installed("runsc")
}

/// What this machine lacks for a gVisor sandbox (root and `runsc`).
pub fn gvisor_missing() -> Option<&'static str> {
    match (is_root(), has_runsc()) {
        (true, true) => None,
        (false, _) => Some("launching a gVisor sandbox needs root"),
        (true, false) => Some("`runsc` is not installed (`apt-get install runsc`)"),
    }
}

/// Whether `case` can run gVisor sandboxes here; a loud skip if not.
pub fn can_run_gvisor(case: &str) -> bool {
    runs_here(case, gvisor_missing())
}

/// Whether the ELF file at `p` names no program interpreter: a static
/// build, the only kind that can be a guest's PID 1.
pub fn is_static_elf(p: &Path) -> bool {
    let Ok(b) = std::fs::read(p) else {
        return false;
    };
    let u16_at = |o: usize| {
        b.get(o..o + 2)
            .map(|x| u16::from_le_bytes([x[0], x[1]]) as usize)
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|x| u64::from_le_bytes(x.try_into().unwrap()) as usize)
    };
    if !b.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    // PT_INTERP = 3.
    !(0..phnum).any(|i| {
        b.get(phoff + i * phentsize..phoff + i * phentsize + 4) == Some(&3u32.to_le_bytes()[..])
    })
}

/// What this machine lacks for a microvm guest, if anything: root (the
/// jail around QEMU), `qemu-system-x86_64`, a 6.12+ Debian cloud kernel
/// (or `CORDON_VM_KERNEL`), and the static guest agent (`CORDON_VM_AGENT`,
/// or the one `.ci/run` builds beside `cordon_bin`'s target directory).
pub fn microvm_missing(cordon_bin: &Path) -> Option<String> {
    if !is_root() {
        return Some("launching a microvm sandbox (the jail around QEMU) needs root".into());
    }
    if !installed("qemu-system-x86_64") {
        return Some(
            "`qemu-system-x86_64` is not installed (`apt-get install qemu-system-x86`)".into(),
        );
    }
    let kernel = match std::env::var_os("CORDON_VM_KERNEL").filter(|v| !v.is_empty()) {
        Some(k) => Path::new(&k).is_file(),
        None => std::fs::read_dir("/boot")
            .map(|d| {
                d.flatten().any(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    // The backend boots 6.12 or later.
                    let version = n
                        .strip_prefix("vmlinuz-")
                        .filter(|_| n.ends_with("-cloud-amd64"))
                        .map(|r| {
                            r.split(['.', '-'])
                                .take(2)
                                .map(|x| x.parse::<u32>().unwrap_or(0))
                                .collect::<Vec<_>>()
                        });
                    version.is_some_and(|v| v >= vec![6, 12])
                })
            })
            .unwrap_or(false),
    };
    if !kernel {
        return Some("no guest kernel: no 6.12+ `/boot/vmlinuz-*-cloud-amd64` (bookworm-backports' `linux-image-cloud-amd64`) and no CORDON_VM_KERNEL".into());
    }
    let agent = match std::env::var_os("CORDON_VM_AGENT").filter(|v| !v.is_empty()) {
        Some(a) => PathBuf::from(a),
        // target/debug/cordon → target/x86_64-unknown-linux-gnu/guest/.
        None => cordon_bin
            .parent()
            .and_then(Path::parent)
            .map(|t| t.join("x86_64-unknown-linux-gnu/guest/cordon-vm-agent"))
            .unwrap_or_default(),
    };
    if !is_static_elf(&agent) {
        return Some(format!(
            "no static guest agent at `{}` (`RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --profile guest --locked -p cordon-vm-agent --target x86_64-unknown-linux-gnu`)",
            agent.display()
        ));
    }
    None
}

/// Every running process's command line (arguments joined by spaces),
/// read from `/proc`: what `ps -eo args` prints, without needing `ps`
/// (procps is not on every fresh machine, and `.ci/run` installs no
/// package for it). A process that ends while it is read is left out.
pub fn process_args() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// A scratch directory in `/var/tmp` (a real filesystem, not a tmpfs),
/// named `{prefix}…`.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A caller whose scope, thread and agent dir are fixed strings, as a test
/// host's request context would give them, with `identity`.
pub fn caller(
    scope: &str,
    thread: &str,
    agent: &str,
    identity: cordon_policy::Identity,
) -> cordon_sandbox::CallerContext {
    let (s, t, a) = (scope.to_string(), thread.to_string(), agent.to_string());
    cordon_sandbox::CallerContext::new(
        move || s.clone(),
        move || t.clone(),
        move || a.clone(),
        move || identity.clone(),
    )
}

/// The `cordon` binary cargo built for the calling integration test of
/// cordon-cli (`CARGO_BIN_EXE_cordon`), as a [`Cordon`].
#[macro_export]
macro_rules! cordon {
    () => {
        $crate::Cordon::new(env!("CARGO_BIN_EXE_cordon"))
    };
}

/// Directories (at any depth, bounded) below the cgroup tree `root` whose
/// name starts with `cordon-`, and everything beneath them; `maker` keeps
/// only those a process of that pid made (`cordon-KEY-PID-N`).
pub fn cgroup_dirs(root: &Path, maker: Option<u32>) -> std::collections::BTreeSet<PathBuf> {
    fn walk(
        d: &Path,
        depth: usize,
        inside: bool,
        maker: Option<u32>,
        out: &mut std::collections::BTreeSet<PathBuf>,
    ) {
        if depth > 8 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(d) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("cordon-")
                && maker.is_none_or(|pid| name.contains(&format!("-{pid}-")));
            let here = inside || ours;
            if here {
                out.insert(e.path());
            }
            walk(&e.path(), depth + 1, here, maker, out);
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(root, 0, false, maker, &mut out);
    out
}

#[cfg(test)]
mod process_args_tests {
    /// A process started with a unique argument is listed with it while
    /// it runs, and not after.
    #[test]
    fn a_running_process_is_listed_with_its_arguments() {
        let tag = format!("cordon-testkit-tag-{}", std::process::id());
        // The shell waits in `read`, a builtin: no process of its own
        // forks (a forked child of the shell carries the tag until it
        // execs, and outlived a kill of the shell here under CI's load).
        // The listing is polled, since between fork and exec the shell's
        // cmdline is still the test's own.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read x", &tag])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = false;
        while !seen && std::time::Instant::now() < deadline {
            seen = super::process_args().iter().any(|a| a.contains(&tag));
            if !seen {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen, "the process was not listed");
        assert!(!super::process_args().iter().any(|a| a.contains(&tag)));
    }
}
