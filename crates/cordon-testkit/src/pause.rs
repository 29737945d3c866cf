//! The pause case every backend that pauses passes: a busy loop in a kept
//! sandbox stops while it is paused and goes on after `resume` or an
//! `exec`. Its count is read from the host (the sandbox's work dir), never
//! through the sandbox, which an exec would resume.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::Cordon;

/// A busy loop in a kept sandbox, counting into `count` in its work dir.
pub struct BusyLoop {
    count_at: PathBuf,
    child: Child,
}

impl BusyLoop {
    /// Starts the loop in `handle` (through `c`), whose work dir is `work`
    /// on this machine, and waits until it counts.
    pub fn start(c: &Cordon, handle: &str, work: &Path) -> BusyLoop {
        let child = c
            .command([
                "sandbox",
                "exec",
                handle,
                "--",
                "/bin/sh",
                "-c",
                "i=0; while :; do i=$((i+1)); echo $i > count; done",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the loop's exec starts");
        let b = BusyLoop {
            count_at: work.join("count"),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while b.count() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(b.moving(), "the loop never ran");
        b
    }

    /// The count (the loop truncates and rewrites the file: a read between
    /// the two sees nothing, and is read again).
    pub fn count(&self) -> u64 {
        for _ in 0..200 {
            if let Some(n) = std::fs::read_to_string(&self.count_at)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return n;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        0
    }

    /// Whether the count moves within 400 ms.
    pub fn moving(&self) -> bool {
        let a = self.count();
        std::thread::sleep(Duration::from_millis(400));
        self.count() > a
    }

    /// Waits (up to 10 s) for the loop's exec to end, then reaps it.
    pub fn reap(mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sandbox pause` stops the loop; `resume` starts it again; paused again,
/// an `exec` resumes it first. Leaves the sandbox paused.
pub fn pause_resume_and_an_exec_thaw(c: &Cordon, handle: &str, b: &BusyLoop) {
    let (code, _, err) = c.run(["sandbox", "pause", handle]);
    assert_eq!(code, 0, "pause: {err}");
    assert!(err.contains("paused"), "{err}");
    // A write in flight may land just after: then nothing moves.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!b.moving() && !b.moving(), "the loop ran while paused");
    let (code, _, err) = c.run(["sandbox", "resume", handle]);
    assert_eq!(code, 0, "resume: {err}");
    assert!(b.moving(), "the loop did not go on after resume");
    let (code, _, err) = c.run(["sandbox", "pause", handle]);
    assert_eq!(code, 0, "pause: {err}");
    let (code, out, err) = c.run(["sandbox", "exec", handle, "--", "/bin/echo", "ran"]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    assert!(b.moving(), "the exec did not resume the sandbox");
    let (code, _, err) = c.run(["sandbox", "pause", handle]);
    assert_eq!(code, 0, "pause: {err}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(!b.moving(), "the loop ran while paused");
}
