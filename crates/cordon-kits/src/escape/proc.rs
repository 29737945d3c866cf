//! Processes and namespaces: host processes, `ptrace`, `mount`, `unshare`,
//! `clone3`.

use super::case::{host_process_visibility, EscapeSubject, HostProcessVisibility};
use super::host::HostSleeper;
use super::workload::{py, sh, Ran};

pub(super) fn host_processes(s: &EscapeSubject) -> Result<String, String> {
    let mut sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    let pid = sleeper.pid().to_string();
    let run = sh(
        s,
        "kill -9 \"$1\"; echo kill=$?; kill -STOP \"$1\"; echo stop=$?; \
         for f in /proc/[0-9]*/cmdline; do tr '\\000' ' ' < \"$f\" 2>/dev/null; echo; done; echo end",
        &[&pid],
    );
    let harmed = sleeper.unharmed();
    let out = run.stdout();
    harmed.map_err(|e| format!("{e} {}", run.show()))?;
    run.ran_to_end()?;
    if out.contains("kill=0") || out.contains("stop=0") {
        return Err(format!(
            "a signal to the host process was reported delivered {}",
            run.show()
        ));
    }
    let seen = out.contains(&sleeper.token);
    match (host_process_visibility(s.isolation), seen) {
        (HostProcessVisibility::VisibleByDesign, true) => Ok(format!(
            "at the `{}` rung the host process is visible by design (no pid namespace), and it was not signalled",
            s.isolation
        )),
        (HostProcessVisibility::VisibleByDesign, false) => Err(format!(
            "the `{}` rung is expected to see the host process (no pid namespace), and did not: the probe is not measuring what it claims {}",
            s.isolation,
            run.show()
        )),
        (HostProcessVisibility::Hidden, true) => Err(format!(
            "the host process (`sleep {}`) is visible at the `{}` rung",
            sleeper.token, s.isolation
        )),
        (HostProcessVisibility::Hidden, false) => {
            Ok("the host process was neither seen nor signalled".into())
        }
    }
}

/// `print(name, result, errno)` for each call, then `end`.
pub(super) const PY_LIBC: &str = "import ctypes,os,struct\nlibc=ctypes.CDLL(None,use_errno=True)\ndef say(name,r): print(name,r,ctypes.get_errno(),flush=True)\n";

/// Each `name` must have been reported, with result -1.
pub(super) fn all_refused(run: &Ran, names: &[&str]) -> Result<Vec<String>, String> {
    let out = run.stdout();
    let mut errnos = Vec::new();
    for name in names {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .ok_or_else(|| format!("could not set up: `{name}` was never tried {}", run.show()))?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"-1") {
            return Err(format!("`{name}` succeeded ({line}) {}", run.show()));
        }
        errnos.push(format!("{name}: errno {}", fields.get(2).unwrap_or(&"?")));
    }
    Ok(errnos)
}

pub(super) fn ptrace(s: &EscapeSubject) -> Result<String, String> {
    let mut sleeper = HostSleeper::start(s.host.sleeper_uid)?;
    // TRACEME runs in a child of the workload: where it succeeds, the
    // tracer is the workload itself (which reaps it), never the host.
    let code = format!(
        "{PY_LIBC}say('attach',libc.ptrace(16,{pid},0,0))\nsay('seize',libc.ptrace(0x4206,{pid},0,0))\nsay('vm_readv',libc.process_vm_readv({pid},0,0,0,0,0))\nc=os.fork()\nif c==0:\n    say('traceme',libc.ptrace(0,0,0,0)); os._exit(0)\nos.waitpid(c,0)\nprint('end')",
        pid = sleeper.pid()
    );
    let run = py(s, &code);
    let harmed = sleeper.unharmed();
    harmed.map_err(|e| format!("{e} {}", run.show()))?;
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["attach", "seize", "vm_readv", "traceme"])?;
    Ok(format!(
        "refused ({}); the host process is untraced",
        errnos.join(", ")
    ))
}

pub(super) fn mount_table() -> Result<String, String> {
    std::fs::read_to_string("/proc/1/mountinfo")
        .map_err(|e| format!("could not set up: cannot read the host's mount table: {e}"))
}

pub(super) fn mount(s: &EscapeSubject) -> Result<String, String> {
    let before = mount_table()?;
    let run = py(
        s,
        &format!(
            "{PY_LIBC}say('mount',libc.mount(b'none',os.getcwd().encode(),b'tmpfs',0,None))\nsay('bind',libc.mount(b'/',b'/tmp',None,4096,None))\nsay('umount',libc.umount2(b'/proc',2))\nsay('chroot',libc.chroot(b'/tmp'))\nprint('end')"
        ),
    );
    let after = mount_table()?;
    if before != after {
        return Err(format!("the host's mount table changed {}", run.show()));
    }
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["mount", "bind", "umount", "chroot"])?;
    Ok(format!(
        "refused ({}); the host's mount table is unchanged",
        errnos.join(", ")
    ))
}

pub(super) fn unshare(s: &EscapeSubject) -> Result<String, String> {
    // Raw clone(2) with CLONE_NEWUSER: a child that appears exits at once.
    let run = py(
        s,
        &format!(
            "{PY_LIBC}say('unshare_user',libc.unshare(0x10000000))\nsay('unshare_mount',libc.unshare(0x00020000))\nsay('unshare_net',libc.unshare(0x40000000))\nr=libc.syscall(56,0x10000000|17,0,0,0,0)\nif r==0: os._exit(0)\nsay('clone_user',-1 if r<0 else r)\nprint('end')"
        ),
    );
    run.ran_to_end()?;
    let errnos = all_refused(
        &run,
        &["unshare_user", "unshare_mount", "unshare_net", "clone_user"],
    )?;
    Ok(format!("refused ({})", errnos.join(", ")))
}

pub(super) fn clone3(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        &format!(
            "{PY_LIBC}args=struct.pack('11Q',0x10000000|0x20000|0x40000000,0,0,0,17,0,0,0,0,0,0)\nr=libc.syscall(435,args,88)\nif r==0: os._exit(0)\nsay('clone3',-1 if r<0 else r)\nprint('end')"
        ),
    );
    run.ran_to_end()?;
    let errnos = all_refused(&run, &["clone3"])?;
    let out = run.stdout();
    // ENOSYS (so the C library falls back to clone, whose flags a filter
    // reads) or EPERM; anything else (EINVAL: the kernel parsed the
    // arguments) means the call reached the kernel unfiltered.
    if out.contains("clone3 -1 38") || out.contains("clone3 -1 1\n") {
        Ok(format!("refused ({})", errnos.join(", ")))
    } else {
        Err(format!(
            "clone3 was refused, but not with ENOSYS or EPERM: the kernel saw it {}",
            run.show()
        ))
    }
}
