//! The terminal and the host's system surfaces: `TIOCSTI`, `/proc/sys` and
//! `/sys`, devices and a Docker-style socket, the host's environment.

use std::path::Path;
use std::time::Duration;

use super::case::{EscapeSubject, HOST_ENV_MARKER, HOST_ENV_VALUE};
use super::host::{HostDir, HostSleeper};
use super::net::{arrived, unix_listener, PY_UNIX};
use super::workload::{breaches, py, setup, sh};

pub(super) fn tiocsti(s: &EscapeSubject) -> Result<String, String> {
    // stdio, the controlling terminal, and a pty of the workload's own made
    // the controlling terminal of a new session (so the kernel's own
    // check, which refuses a terminal that is not the caller's, passes and
    // only a filter can refuse): the ioctl must be refused on any terminal
    // it can reach.
    let run = py(
        s,
        "import fcntl,termios,os\ndef push(name,fd):\n    try:\n        fcntl.ioctl(fd,termios.TIOCSTI,b'X'); print(name,'PUSHED',flush=True)\n    except OSError as e: print(name,'refused',e.errno,flush=True)\nfor fd in (0,1,2): push('stdio%d'%fd,fd)\ntry:\n    t=os.open('/dev/tty',os.O_RDWR); push('tty',t)\nexcept OSError as e: print('tty absent',e.errno)\ntry:\n    m,sl=os.openpty()\n    name=os.ttyname(sl)\n    pid=os.fork()\n    if pid==0:\n        os.setsid(); t=os.open(name,os.O_RDWR); push('pty',t); os._exit(0)\n    os.waitpid(pid,0)\nexcept OSError as e: print('pty absent',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let out = run.stdout();
    let pushed = breaches(&out, &["PUSHED"]);
    if !pushed.is_empty() {
        return Err(format!(
            "pushed a keystroke: {} {}",
            pushed.join("; "),
            run.show()
        ));
    }
    // On a pty it opened itself, the refusal must be the filter's (EPERM),
    // not a terminal's own answer.
    if let Some(line) = out.lines().find(|l| l.starts_with("pty refused")) {
        if line != "pty refused 1" {
            return Err(format!(
                "TIOCSTI on the workload's own pty was refused, but not with EPERM ({line}): the call reached the terminal {}",
                run.show()
            ));
        }
    }
    let reached: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("tty ") || l.starts_with("pty "))
        .collect();
    Ok(format!("never pushed ({})", reached.join(", ")))
}

const HOST_KNOBS: [&str; 4] = [
    "/proc/sys/kernel/hostname",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/kernel/core_pattern",
    "/sys/class/net/lo/tx_queue_len",
];

pub(super) fn proc_sys_write(s: &EscapeSubject) -> Result<String, String> {
    let mut before = Vec::new();
    for k in HOST_KNOBS {
        before.push(setup(
            &format!("the host value `{k}`"),
            std::fs::read_to_string(k),
        )?);
    }
    let run = sh(
        s,
        "echo cordon-pwned > /proc/sys/kernel/hostname; echo 1 > /proc/sys/vm/overcommit_memory; echo '|/bin/false' > /proc/sys/kernel/core_pattern; echo 77 > /sys/class/net/lo/tx_queue_len; echo end",
        &[],
    );
    let mut changed = Vec::new();
    for (k, was) in HOST_KNOBS.iter().zip(&before) {
        let now = std::fs::read_to_string(k).unwrap_or_default();
        if &now != was {
            // Put the host back; the case has already failed.
            let _ = std::fs::write(k, was);
            changed.push(format!("`{k}` ({:?} -> {:?})", was.trim(), now.trim()));
        }
    }
    if !changed.is_empty() {
        return Err(format!(
            "the workload changed {} {}",
            changed.join(", "),
            run.show()
        ));
    }
    run.ran_to_end()?;
    Ok(format!("{} host values unchanged", HOST_KNOBS.len()))
}

pub(super) fn devices(s: &EscapeSubject) -> Result<String, String> {
    if !Path::new("/dev/kvm").exists() {
        return Err(
            "could not set up: this host has no `/dev/kvm`, so refusing it proves nothing".into(),
        );
    }
    let dir = setup(
        "a Docker-style socket directory",
        HostDir::new(&s.host.run_dir, 0o777),
    )?;
    let l = unix_listener(&dir, "docker.sock")?;
    let path = dir.show("docker.sock");
    let run = py(
        s,
        &format!(
            "{PY_UNIX}import os\nfor p in ['/dev/kvm','/dev/mem','/dev/kmsg']:\n    try: os.open(p,os.O_RDWR); print(p,'OPENED')\n    except OSError as e: print(p,'refused',e.errno)\nconn('docker',{path:?})\nconn('docker_std','/var/run/docker.sock')\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(50));
    if arrived(l.accept())? {
        return Err(format!("a connection arrived at `{path}` {}", run.show()));
    }
    run.ran_to_end()?;
    let b = breaches(&run.stdout(), &["OPENED", "REACHED"]);
    if !b.is_empty() {
        return Err(format!("reached: {} {}", b.join("; "), run.show()));
    }
    Ok(format!("`/dev/kvm` and `{path}` were not reached"))
}

pub(super) fn host_environment(s: &EscapeSubject) -> Result<String, String> {
    if std::env::var(HOST_ENV_MARKER).as_deref() != Ok(HOST_ENV_VALUE) {
        return Err(format!(
            "could not set up: the marker is not in the kit's environment; start the kit's process with `{HOST_ENV_MARKER}={HOST_ENV_VALUE}`"
        ));
    }
    // A host process started with the marker in its environment: the
    // workload must not read it through /proc either.
    let _sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    let run = sh(
        s,
        "env; for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < \"$f\" 2>/dev/null; done; echo end",
        &[],
    );
    run.ran_to_end()?;
    if run.all_output().contains(HOST_ENV_VALUE) {
        return Err(format!(
            "the host's `{HOST_ENV_MARKER}` reached the workload {}",
            run.show()
        ));
    }
    Ok("the host's environment did not reach the workload".into())
}
