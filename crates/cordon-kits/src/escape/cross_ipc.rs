//! `concurrent-exec-sysv-ipc`: exec A makes a System V shared-memory
//! segment and message queue under a key only this run knows, and holds
//! them while exec B, at the same time, looks them up by that key. B must
//! find neither: a segment found is one B can attach and read (the same
//! uid owns both), a queue one it can read A's messages from.

use std::time::Duration;

use cordon_sandbox::SandboxError;

use super::bounds::none_survive;
use super::case::EscapeSubject;
use super::cross_exec::{exec_with, strings, SLEEPER_SECONDS};
use super::host::nonce;
use super::proc::PY_LIBC;
use super::workload::{Ran, TIMEOUT};

/// A System V key for `token`: FNV-1a, never 0 (`IPC_PRIVATE`).
fn key_of(token: &str) -> u32 {
    let h = token.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (h & 0x3fff_ffff) | 1
}

/// The numbers after `word` on the first line of `out` starting with it.
fn numbers_after(out: &str, word: &str) -> Option<Vec<i64>> {
    let line = out.lines().find(|l| l.starts_with(word))?;
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().ok())
        .collect()
}

pub(super) fn concurrent_sysv_ipc(s: &EscapeSubject) -> Result<String, String> {
    let token = format!("cordon-escape-ipc-{}", nonce());
    let key = key_of(&token);
    // A: make both (mode 0600), say so in the work dir, hold them, remove
    // them. B: wait for A's word, then look both up.
    let maker = format!(
        "{PY_LIBC}import sys,time\nk={key}\n\
m=libc.shmget(k,4096,0o1600); e1=ctypes.get_errno()\n\
q=libc.msgget(k,0o1600); e2=ctypes.get_errno()\n\
print('made',m,e1,q,e2,flush=True)\n\
open('.'+sys.argv[1]+'.made','w').close()\n\
time.sleep({SLEEPER_SECONDS})\n\
if m>=0: libc.shmctl(m,0,None)\n\
if q>=0: libc.msgctl(q,0,None)\n\
print('maker-done')"
    );
    let looker = format!(
        "{PY_LIBC}import sys,time\nk={key}\n\
t=time.time()\n\
while not os.path.exists('.'+sys.argv[1]+'.made') and time.time()-t<{SLEEPER_SECONDS}: time.sleep(0.05)\n\
if not os.path.exists('.'+sys.argv[1]+'.made'): print('nomaker'); sys.exit(0)\n\
m=libc.shmget(k,0,0); e1=ctypes.get_errno()\n\
q=libc.msgget(k,0); e2=ctypes.get_errno()\n\
print('found',m,e1,q,e2,flush=True)"
    );
    let env = cordon_sandbox::outputs::plain_env();
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            exec_with(
                &*s.sandbox,
                strings(&["/usr/bin/python3", "-c", &maker, &token]),
                env.clone(),
                b"",
                TIMEOUT,
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let b = exec_with(
            &*s.sandbox,
            strings(&["/usr/bin/python3", "-c", &looker, &token]),
            env.clone(),
            b"",
            TIMEOUT,
        );
        let a = a.join().unwrap_or_else(|_| Ran {
            result: Err(SandboxError::Failed {
                operation: "exec",
                reason: "exec A's thread panicked".into(),
            }),
            took: Duration::ZERO,
        });
        (a, b)
    });
    none_survive(&token, &a)?;
    let made = numbers_after(&a.stdout(), "made")
        .filter(|n| n.len() == 4)
        .ok_or_else(|| {
            format!(
                "could not set up: exec A did not say what it made {}",
                a.show()
            )
        })?;
    if made[0] < 0 && made[2] < 0 {
        return Ok(format!(
            "exec A could make neither a segment nor a queue (errno {}, {}): nothing to share",
            made[1], made[3]
        ));
    }
    if b.stdout().contains("nomaker") {
        return Err(format!(
            "could not set up: exec B never saw exec A's word in the work dir {}; A: {}",
            b.show(),
            a.show()
        ));
    }
    let found = numbers_after(&b.stdout(), "found")
        .filter(|n| n.len() == 4)
        .ok_or_else(|| format!("exec B did not run to its look-up {}", b.show()))?;
    let mut breached = Vec::new();
    if made[0] >= 0 && found[0] >= 0 {
        breached.push("shared-memory segment");
    }
    if made[2] >= 0 && found[2] >= 0 {
        breached.push("message queue");
    }
    if !breached.is_empty() {
        return Err(format!(
            "exec B found exec A's {} by its key {}; A: {}",
            breached.join(" and "),
            b.show(),
            a.show()
        ));
    }
    if !a.stdout().contains("maker-done") {
        return Err(format!("exec A did not finish normally {}", a.show()));
    }
    Ok(format!(
        "exec B found neither of exec A's (errno {}, {}: each exec has System V IPC of its own)",
        found[1], found[3]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_never_private_and_lines_are_read_whole() {
        assert_ne!(key_of(""), 0);
        assert_ne!(key_of("cordon-escape-ipc-1"), key_of("cordon-escape-ipc-2"));
        assert_eq!(
            numbers_after("x\nmade 3 0 -1 38\n", "made"),
            Some(vec![3, 0, -1, 38])
        );
        assert_eq!(numbers_after("made a b\n", "made"), None);
        assert_eq!(numbers_after("", "found"), None);
    }
}
