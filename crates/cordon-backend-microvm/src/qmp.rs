//! A client of QEMU's machine protocol (QMP) on the unix socket each
//! guest's QEMU serves in its run directory: the few commands that save a
//! guest with its memory and start a copy of it (`stop`, `getfd`,
//! `migrate`, `query-migrate`, `cont`, `migrate-incoming`).
//!
//! Written by hand (docs/design.md): QMP is one JSON object per line, and
//! cordon needs six commands and one file descriptor handed over with
//! `SCM_RIGHTS`; the QMP crates generate QEMU's whole schema.
//!
//! The socket is root's, in the sandbox's run directory (0700), and QEMU
//! answers on it only to the host: nothing the guest does reaches it.

use std::io::{BufRead, BufReader, IoSlice, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The most one answer line may hold, in bytes (QEMU's are small; a
/// larger one is not QEMU's).
const MAX_LINE: usize = 1 << 20;

/// A QMP session, capabilities negotiated.
pub struct Qmp {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Qmp {
    /// Connects to `sock` (retried until `deadline` while `alive` says
    /// QEMU runs), reads its greeting and leaves negotiation mode.
    pub fn connect(
        sock: &Path,
        deadline: Instant,
        alive: impl Fn() -> bool,
    ) -> Result<Qmp, String> {
        let w = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline && alive() => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => {
                    return Err(format!(
                        "QEMU's machine protocol socket `{}`: {e}",
                        sock.display()
                    ))
                }
            }
        };
        w.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let r = BufReader::new(w.try_clone().map_err(|e| e.to_string())?);
        let mut q = Qmp { w, r };
        let greeting = q.line()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("QEMU's machine protocol greeted with {greeting}"));
        }
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    /// Runs `command`; its `return`, or QEMU's error as the message.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, String> {
        let line = request(command, arguments);
        self.w
            .write_all(line.as_bytes())
            .map_err(|e| format!("QMP `{command}`: {e}"))?;
        self.answer(command)
    }

    /// Hands QEMU the descriptor `fd` under `name` (`getfd`), for a
    /// `fd:NAME` migration address.
    pub fn give_fd(&mut self, name: &str, fd: BorrowedFd<'_>) -> Result<(), String> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let line = request("getfd", Some(json!({ "fdname": name })));
        let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [fd];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("QMP `getfd`: the descriptor did not fit its message".into());
        }
        let sent = sendmsg(
            &self.w,
            &[IoSlice::new(line.as_bytes())],
            &mut control,
            SendFlags::empty(),
        )
        .map_err(|e| format!("QMP `getfd`: {e}"))?;
        if sent != line.len() {
            // The descriptor went with the first byte; the rest follows.
            self.w
                .write_all(&line.as_bytes()[sent..])
                .map_err(|e| format!("QMP `getfd`: {e}"))?;
        }
        self.answer("getfd").map(drop)
    }

    /// Polls `query-migrate` until the migration (out or in) completed,
    /// failed or `deadline` passed.
    pub fn await_migration(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            let info = self.execute("query-migrate", None)?;
            match info.get("status").and_then(Value::as_str) {
                Some("completed") => return Ok(()),
                Some(s @ ("failed" | "cancelled")) => {
                    return Err(format!(
                        "the migration {s}: {}",
                        info.get("error-desc")
                            .and_then(Value::as_str)
                            .unwrap_or("QEMU gave no reason")
                    ))
                }
                _ if Instant::now() >= deadline => {
                    return Err(format!(
                        "the migration did not complete in time (QEMU says {info})"
                    ))
                }
                _ => std::thread::sleep(Duration::from_millis(25)),
            }
        }
    }

    /// The answer to the command just sent: events are skipped.
    fn answer(&mut self, command: &str) -> Result<Value, String> {
        loop {
            let v = self.line()?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(format!(
                    "QMP `{command}`: {}",
                    e.get("desc").and_then(Value::as_str).unwrap_or("an error")
                ));
            }
            return Err(format!(
                "QMP `{command}`: an answer cordon does not know: {v}"
            ));
        }
    }

    fn line(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = (&mut self.r)
            .take(MAX_LINE as u64)
            .read_line(&mut line)
            .map_err(|e| format!("QEMU's machine protocol: {e}"))?;
        if n == 0 {
            return Err("QEMU closed its machine protocol socket".into());
        }
        if !line.ends_with('\n') {
            return Err(format!("QEMU sent a line longer than {MAX_LINE} bytes"));
        }
        serde_json::from_str(&line).map_err(|e| format!("QEMU sent what is not JSON ({e})"))
    }
}

fn request(command: &str, arguments: Option<Value>) -> String {
    let mut v = json!({ "execute": command });
    if let Some(a) = arguments {
        v["arguments"] = a;
    }
    format!("{v}\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake QEMU for one session: greets, answers each line with what
    /// `answers` says (after an event, which the client must skip), and
    /// reports whether a descriptor came with `getfd`.
    fn fake(answers: Vec<&'static str>) -> (tempfile::TempDir, std::thread::JoinHandle<bool>) {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("qmp.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let h = std::thread::spawn(move || {
            use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"{\"QMP\": {\"version\": {}}}\n").unwrap();
            let mut got_fd = false;
            let mut answers = answers.into_iter();
            let mut buf = vec![0u8; 4096];
            loop {
                let mut space =
                    [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
                let mut control = RecvAncillaryBuffer::new(&mut space);
                let n = recvmsg(
                    &s,
                    &mut [std::io::IoSliceMut::new(&mut buf)],
                    &mut control,
                    RecvFlags::empty(),
                )
                .unwrap()
                .bytes;
                if n == 0 {
                    return got_fd;
                }
                for m in control.drain() {
                    if let RecvAncillaryMessage::ScmRights(fds) = m {
                        got_fd |= fds.count() == 1;
                    }
                }
                for _ in buf[..n].iter().filter(|b| **b == b'\n') {
                    let a = answers.next().unwrap_or("{\"return\": {}}");
                    s.write_all(b"{\"event\": \"RESUME\"}\n").unwrap();
                    s.write_all(a.as_bytes()).unwrap();
                    s.write_all(b"\n").unwrap();
                }
            }
        });
        (dir, h)
    }

    #[test]
    fn commands_are_answered_events_skipped_and_a_descriptor_handed_over() {
        let (dir, h) = fake(vec![
            "{\"return\": {}}",
            "{\"return\": {\"status\": \"running\"}}",
            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no such thing\"}}",
            "{\"return\": {}}",
            "{\"return\": {\"status\": \"active\"}}",
            "{\"return\": {\"status\": \"completed\"}}",
        ]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut q = Qmp::connect(&dir.path().join("qmp.sock"), deadline, || true).unwrap();
        let v = q.execute("query-status", None).unwrap();
        assert_eq!(v["status"], "running");
        let e = q.execute("nonsense", None).unwrap_err();
        assert!(e.contains("no such thing"), "{e}");
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        q.give_fd("snap", f.as_fd()).unwrap();
        q.await_migration(deadline).unwrap();
        drop(q);
        assert!(h.join().unwrap(), "no descriptor came with `getfd`");
    }

    #[test]
    fn a_failed_migration_says_why() {
        let (dir, _h) = fake(vec![
            "{\"return\": {}}",
            "{\"return\": {\"status\": \"failed\", \"error-desc\": \"disk full\"}}",
        ]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut q = Qmp::connect(&dir.path().join("qmp.sock"), deadline, || true).unwrap();
        let e = q.await_migration(deadline).unwrap_err();
        assert!(e.contains("failed: disk full"), "{e}");
    }

    #[test]
    fn what_is_not_qemu_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("qmp.sock");
        let l = UnixListener::bind(&sock).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"hello\n").unwrap();
            let mut b = [0u8; 1];
            let _ = s.read(&mut b);
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let e = Qmp::connect(&sock, deadline, || true).err().unwrap();
        assert!(e.contains("not JSON"), "{e}");
    }
}
