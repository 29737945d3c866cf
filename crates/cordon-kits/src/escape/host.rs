//! The host side: fresh directories, planted bait, and a host `sleep` the
//! workload must not reach.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use super::case::{HOST_ENV_MARKER, HOST_ENV_VALUE};

pub(super) static NEXT: AtomicU32 = AtomicU32::new(0);

pub(super) fn nonce() -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{stamp}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh host directory, removed on drop.
pub(super) struct HostDir(pub(super) PathBuf);

impl HostDir {
    /// Created fresh (nothing planted is reused) with `mode`.
    pub(super) fn new(parent: &Path, mode: u32) -> Result<HostDir, String> {
        let p = parent.join(format!("cordon-escape-{}", nonce()));
        std::fs::create_dir(&p).map_err(|e| format!("`{}`: {e}", p.display()))?;
        let d = HostDir(p);
        std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("`{}`: {e}", d.0.display()))?;
        Ok(d)
    }
    pub(super) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub(super) fn show(&self, name: &str) -> String {
        self.join(name).display().to_string()
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn plant(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("`{}`: {e}", path.display()))
}

/// A host `sleep` the kit starts as a non-root uid, with the marker in its
/// environment; killed on drop.
pub(super) struct HostSleeper {
    child: Child,
    pub(super) token: String,
}

impl HostSleeper {
    pub(super) fn start(uid: u32) -> Result<HostSleeper, String> {
        if uid == 0 {
            return Err("could not set up the host process: its uid must not be root".into());
        }
        // A duration no other process uses, so its command line is ours.
        let token = format!("{}.{}", 3000 + NEXT.fetch_add(1, Ordering::Relaxed), 5);
        let child = Command::new("/bin/sleep")
            .arg(&token)
            .env_clear()
            .env(HOST_ENV_MARKER, HOST_ENV_VALUE)
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("could not set up the host process (`sleep` as uid {uid}): {e}")
            })?;
        let s = HostSleeper { child, token };
        // Wait until it is really `sleep` (exec done), so a probe that sees
        // nothing is not racing its start.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.pid())).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&s.token) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err("could not set up the host process: it never became `sleep`".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Alive, not stopped, not traced.
    pub(super) fn unharmed(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => {}
            Ok(Some(st)) => return Err(format!("the host process was killed ({st})")),
            Err(e) => return Err(format!("cannot tell whether the host process lives: {e}")),
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .map_err(|e| format!("cannot read the host process's status: {e}"))?;
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .map(|l| l[k.len()..].trim().to_string())
                .unwrap_or_default()
        };
        let state = field("State:");
        if state.starts_with('T') || state.starts_with('t') {
            return Err(format!("the host process was stopped ({state})"));
        }
        let tracer = field("TracerPid:");
        if tracer != "0" {
            return Err(format!("the host process is traced by pid {tracer}"));
        }
        Ok(())
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
