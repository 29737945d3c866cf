//! Cross-exec cases: one exec against the next, or a concurrent one.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use cordon_sandbox::{ExecRequest, ExitStatus, Sandbox, SandboxError};

use super::bounds::{none_survive, survivors};
use super::case::{EscapeSubject, BAIT};
use super::host::nonce;
use super::proc::{all_refused, PY_LIBC};
use super::workload::{breaches, exec_in, Ran, TIMEOUT};

/// What a planted tool prints when it runs.
pub(super) const PLANTED: &str = "cordon-escape-planted-tool-3b9e";
/// The tools exec 1 plants, and what the real ones print in exec 2.
pub(super) const TOOLS: [&str; 3] = ["python3", "sh", "ls"];

/// One exec with its own environment and standard input.
pub(super) fn exec_with(
    sandbox: &dyn Sandbox,
    argv: Vec<String>,
    env: std::collections::BTreeMap<String, String>,
    stdin: &[u8],
    timeout: Duration,
) -> Ran {
    let started = Instant::now();
    let result = sandbox.exec(&ExecRequest {
        argv,
        env,
        stdin: stdin.to_vec(),
        timeout,
        max_output_bytes: 1 << 20,
    });
    Ran {
        result,
        took: started.elapsed(),
    }
}

pub(super) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

/// Inode, size and modification time of a host entry.
pub(super) type HostEntry = (u64, u64, i64, i64);

/// What the host holds at `p` (not following a link): `None` when nothing.
pub(super) fn host_entry(p: &Path) -> Option<HostEntry> {
    use std::os::unix::fs::MetadataExt;
    p.symlink_metadata()
        .ok()
        .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

pub(super) fn plant_tool(s: &EscapeSubject) -> Result<String, String> {
    let dirs = &s.host.path_dirs;
    if dirs.is_empty() {
        return Err("could not set up: no PATH directories to plant in".into());
    }
    let path = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let env = std::collections::BTreeMap::from([("PATH".to_string(), path.clone())]);
    // Every place exec 1 plants in, as the host sees it before: a PATH
    // directory is the host's own at the local rungs (the image is the
    // host's); `/tmp`, `/var/tmp`, `/dev/shm` and `$HOME` too where the
    // rung does not give the workload its own.
    let mut plant_dirs: Vec<PathBuf> = dirs.clone();
    for extra in ["/tmp", "/var/tmp", "/dev/shm"] {
        if !plant_dirs.iter().any(|d| d == Path::new(extra)) {
            plant_dirs.push(PathBuf::from(extra));
        }
    }
    let n = nonce();
    let sibling = format!("cordon-escape-plant-{n}");
    let mut watched: Vec<(PathBuf, Option<HostEntry>)> = Vec::new();
    for d in dirs {
        for t in TOOLS {
            let p = d.join(t);
            watched.push((p.clone(), host_entry(&p)));
        }
        let p = d.join(&sibling);
        watched.push((p.clone(), host_entry(&p)));
    }
    // Exec 1: in each directory, plant each tool where none is (noclobber:
    // the real one is never overwritten, so a broken sandbox does not
    // break the host); where one is, open it for appending without
    // writing (a breach, harmlessly); and a fresh sibling, which proves the
    // directory writable. `$HOME` is planted in too (the work dir: allowed,
    // but not on PATH).
    let script = format!(
        "set -C\nm={PLANTED}\nsib=$1; shift\nfor d in \"$@\" ${{HOME:+\"$HOME\"}}; do\n  for t in {tools}; do\n    p=\"$d/$t\"\n    if [ -e \"$p\" ] || [ -L \"$p\" ]; then\n      if true 2>/dev/null >>\"$p\"; then echo \"$p OPENED-FOR-WRITE\"; fi\n    elif printf '#!/bin/sh\\necho %s\\n' \"$m\" 2>/dev/null >\"$p\" && /bin/chmod 755 \"$p\" 2>/dev/null; then\n      echo \"$p PLANTED\"\n    fi\n  done\n  if true 2>/dev/null >\"$d/$sib\"; then echo \"$d/$sib PLANTED\"; fi\ndone\necho end",
        tools = TOOLS.join(" ")
    );
    let mut argv = strings(&["/bin/sh", "-c", &script, "sh", &sibling]);
    argv.extend(plant_dirs.iter().map(|d| d.display().to_string()));
    argv.push(s.work_dir.clone());
    let first = exec_with(&*s.sandbox, argv, env.clone(), b"", TIMEOUT);
    // The host afterwards: nothing new where nothing was, nothing changed
    // where something was.
    let mut changed = Vec::new();
    for (p, before) in &watched {
        if host_entry(p) != *before {
            changed.push((p, before.is_none()));
        }
    }
    // Exec 2: the tools by bare name (the backend resolves it) and from a
    // shell (PATH lookup inside the sandbox).
    let bare = exec_with(
        &*s.sandbox,
        strings(&["python3", "-c", "print('real-python3', 6*7)"]),
        env.clone(),
        b"",
        TIMEOUT,
    );
    let second = exec_with(
        &*s.sandbox,
        strings(&[
            "/bin/sh",
            "-c",
            "python3 -c \"print('real-python3', 6*7)\"; ls -d /; sh -c 'echo real-sh'; echo end",
        ]),
        env,
        b"",
        TIMEOUT,
    );
    // Exec 1's leftovers in places the workload may write (its work dir,
    // its own /tmp) are cleaned by a third exec.
    let _ = exec_in(
        &*s.sandbox,
        vec![
            "/bin/sh".into(),
            "-c".into(),
            "for d in \"$3\" ${HOME:+\"$HOME\"} /tmp /var/tmp /dev/shm; do for t in python3 sh ls; do p=\"$d/$t\"; if grep -qs \"$1\" \"$p\"; then rm -f \"$p\"; fi; done; rm -f \"$d/$2\"; done".into(),
            "sh".into(),
            PLANTED.into(),
            sibling.clone(),
            s.work_dir.clone(),
        ],
        TIMEOUT,
    );
    for (p, new) in &changed {
        if *new {
            // Put the host back; the case has already failed.
            let _ = std::fs::remove_file(p);
        }
    }
    let changed: Vec<String> = changed
        .iter()
        .map(|(p, _)| format!("`{}`", p.display()))
        .collect();
    plant_verdict(&changed, &first, &bare, &second, dirs)
}

/// `plant_tool`'s verdict from what exec 1 changed on the host and what
/// execs 1 and 2 said: a breach when the host changed or exec 2 ran a
/// planted tool; a setup failure when exec 2 did not run the real ones.
fn plant_verdict(
    changed: &[String],
    first: &Ran,
    bare: &Ran,
    second: &Ran,
    dirs: &[PathBuf],
) -> Result<String, String> {
    let ran_planted = [bare, second]
        .iter()
        .any(|r| r.all_output().contains(PLANTED));
    if !changed.is_empty() {
        return Err(format!(
            "exec 1 changed the host's {}{} {}",
            changed.join(", "),
            if ran_planted {
                ", and exec 2 ran the planted tool"
            } else {
                ""
            },
            first.show()
        ));
    }
    for (what, run) in [("bare name", bare), ("shell lookup", second)] {
        if run.all_output().contains(PLANTED) {
            return Err(format!(
                "exec 2 ran the tool exec 1 planted ({what}) {}; exec 1: {}",
                run.show(),
                first.show()
            ));
        }
    }
    first.ran_to_end()?;
    second.ran_to_end()?;
    let out = second.stdout();
    let real = out.contains("real-python3 42")
        && out.lines().any(|l| l == "/")
        && out.contains("real-sh")
        && bare.stdout().contains("real-python3 42");
    if !real {
        return Err(format!(
            "could not set up: exec 2 did not run the real tools {} {}",
            bare.show(),
            second.show()
        ));
    }
    let reached = breaches(&first.stdout(), &["PLANTED", "OPENED-FOR-WRITE"]);
    let on_path: Vec<&String> = reached
        .iter()
        .filter(|l| {
            dirs.iter()
                .any(|d| l.starts_with(&format!("{}/", d.display())))
        })
        .collect();
    if !on_path.is_empty() {
        return Err(format!(
            "exec 1 wrote into PATH directories exec 2 did not read from: {}",
            on_path
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(format!(
        "exec 2 ran the real {}; nothing planted in {} PATH directories (exec 1 wrote only off PATH: {})",
        TOOLS.join(", "),
        dirs.len(),
        if reached.is_empty() {
            "nowhere".to_string()
        } else {
            reached
                .iter()
                .map(|l| l.trim_end_matches(" PLANTED").to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))
}

/// How long a tamperer waits before it acts: well after its exec ended.
pub(super) const TAMPER_DELAY_SECONDS: u64 = 1;
/// The tamperer: ignores the polite signals, waits until exec 1 has said
/// it is ending (the marker, `$3`: so a slow sandbox — an emulated guest —
/// whose exec 1 outlasts the delay cannot make a write *during* exec 1
/// look like one after it), writes its file after the delay, then stays
/// alive (as itself, so its command line keeps the
/// token) for 30 s.
pub(super) const TAMPERER: &str = "trap '' HUP TERM INT; i=0; while [ ! -e \"$3\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; sleep 1; echo tampered > \"$1\"; i=0; while [ $i -lt 30 ]; do sleep 1; i=$((i+1)); done";
/// The ways exec 1 leaves a tamperer behind.
pub(super) const TAMPER_WAYS: [&str; 7] = [
    "amp",
    "subshell",
    "nohup",
    "setsid",
    "double-fork",
    "daemon",
    "hopper",
];
/// A tamperer that changes pid all the time (fork, parent exits) so that
/// a kill by membership races it; it gives up after 5 s on its own.
pub(super) const HOPPER: &str = "import os,sys,time\nt=time.time()\nif os.fork(): os._exit(0)\nos.setsid()\nn=os.open('/dev/null',os.O_RDWR)\nfor f in (0,1,2): os.dup2(n,f)\ndone=False\nended=None\nwhile time.time()-t<30 and (ended is None or time.time()-ended<4):\n    if os.fork(): os._exit(0)\n    if ended is None and os.path.exists(sys.argv[3]): ended=time.time()\n    if not done and ended is not None and time.time()-ended>1:\n        open(sys.argv[1],'w').write('tampered'); done=True";

pub(super) fn background_outlives(s: &EscapeSubject) -> Result<String, String> {
    let token = format!("cordon-escape-bg-{}", nonce());
    // Exec 1: every way at once, each with its own file; the daemon is
    // python (fork, setsid, fork, standard streams to /dev/null).
    let daemon = "import os,sys,time,signal\nfor g in (signal.SIGHUP,signal.SIGTERM,signal.SIGINT): signal.signal(g,signal.SIG_IGN)\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\nn=os.open('/dev/null',os.O_RDWR)\nfor f in (0,1,2): os.dup2(n,f)\nt=time.time()\nwhile not os.path.exists(sys.argv[3]) and time.time()-t<30: time.sleep(0.05)\ntime.sleep(1)\nopen(sys.argv[1],'w').write('tampered')\ntime.sleep(30)";
    // Each tamperer's file is `PREFIX-WAY-TOKEN` in the work dir (the
    // exec's working directory, which it reports: the path the sandbox's
    // file surface answers for).
    let script = "t=$1; T=$2; D=$3; w=\"$PWD/$4\"; e=\"$w-ended-$t\"\n\
         echo \"cwd=$PWD\"\n\
         exec </dev/null >/dev/null 2>&1\n\
         /bin/sh -c \"$T\" bg \"$w-amp-$t\" \"$t\" \"$e\" &\n\
         ( /bin/sh -c \"$T\" bg \"$w-subshell-$t\" \"$t\" \"$e\" ) &\n\
         nohup /bin/sh -c \"$T\" bg \"$w-nohup-$t\" \"$t\" \"$e\" &\n\
         setsid /bin/sh -c \"$T\" bg \"$w-setsid-$t\" \"$t\" \"$e\" &\n\
         ( ( /bin/sh -c \"$T\" bg \"$w-double-fork-$t\" \"$t\" \"$e\" & ) & )\n\
         python3 -c \"$D\" \"$w-daemon-$t\" \"$t\" \"$e\"\n\
         python3 -c \"$5\" \"$w-hopper-$t\" \"$t\" \"$e\"\n\
         : > \"$e\"\n\
         exit 0";
    let prefix = "cordon-escape-tamper";
    let first = exec_in(
        &*s.sandbox,
        strings(&[
            "/bin/sh", "-c", script, "sh", &token, TAMPERER, daemon, prefix, HOPPER,
        ]),
        TIMEOUT,
    );
    // Well past the tamperers' delay.
    std::thread::sleep(Duration::from_secs(TAMPER_DELAY_SECONDS) + Duration::from_millis(1500));
    // The host: no tamperer alive, no file written.
    let alive = survivors(&token);
    let cwd = first
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("cwd=").map(str::to_string))
        .unwrap_or_else(|| s.work_dir.clone());
    let mut written = Vec::new();
    for w in TAMPER_WAYS {
        let found = s
            .sandbox
            .stat_no_follow(&format!("{cwd}/{prefix}-{w}-{token}"))
            .map_err(|e| format!("could not check the work dir from the host side: {e}"));
        if let Err(e) = found {
            none_survive(&token, &first)?;
            return Err(e);
        }
        if matches!(found, Ok(Some(_))) {
            written.push(w.to_string());
        }
    }
    // Exec 2: what it sees of them (the token in two halves, so its own
    // command line does not hold it), then it cleans up the files.
    let (t1, t2) = token.split_at(token.len() / 2);
    let second = exec_in(
        &*s.sandbox,
        strings(&[
            "/bin/sh",
            "-c",
            "t=\"$1$2\"; for f in /proc/[0-9]*/cmdline; do if tr '\\000' ' ' < \"$f\" 2>/dev/null | grep -q -- \"$t\"; then echo \"ALIVE $f\"; fi; done; for f in \"$3\"-*-\"$t\"; do case \"$f\" in \"$3\"-ended-*) rm -f \"$f\"; continue;; esac; [ -e \"$f\" ] && echo \"WRITTEN $f\"; rm -f \"$f\"; done; echo end",
            "sh",
            t1,
            t2,
            prefix,
        ]),
        TIMEOUT,
    );
    let outlived = if alive.is_empty() {
        Ok(())
    } else {
        // Kills them: the host's cleanup (the case has already failed).
        none_survive(&token, &first)
    };
    match (outlived, written.is_empty()) {
        (Ok(()), true) => {}
        (Ok(()), false) => {
            return Err(format!(
                "a tamperer left behind by exec 1 wrote after it ended ({}) {}",
                written.join(", "),
                first.show()
            ))
        }
        (Err(e), true) => return Err(e),
        (Err(e), false) => {
            return Err(format!(
                "{e}; and they wrote after it ended ({})",
                written.join(", ")
            ))
        }
    }
    second.ran_to_end()?;
    let seen = breaches(&second.stdout(), &["ALIVE", "WRITTEN"]);
    if !seen.is_empty() {
        return Err(format!(
            "exec 2 saw exec 1's tamperers: {} {}",
            seen.join("; "),
            second.show()
        ));
    }
    if first.status() != Some(ExitStatus::Code(0)) {
        return Err(format!(
            "could not set up: exec 1 did not start its tamperers {}",
            first.show()
        ));
    }
    Ok(format!(
        "none of {} tamperers ({}) outlived exec 1; none wrote",
        TAMPER_WAYS.len(),
        TAMPER_WAYS.join(", ")
    ))
}

/// How long the concurrent sleeper sleeps before it reads its stdin.
pub(super) const SLEEPER_SECONDS: u64 = 4;

/// What `concurrent-exec-tampering` judges: every way to act on the
/// sleeper or PID 1.
pub(super) const TAMPERING: [&str; 19] = [
    "environ",
    "mem",
    "fd_link",
    "seize",
    "vm_readv",
    "kill0",
    "pidfd_signal0",
    "init_environ",
    "init_mem",
    "init_fd_list",
    "init_fd_link",
    "init_seize",
    "init_vm_readv",
    "init_kill0",
    "init_pidfd_signal0",
    "stdout_write",
    "stdin_write",
    "stop",
    "kill9",
];
/// What `concurrent-exec-proc-info` judges: what a concurrent exec reads
/// of the sleeper without acting on it.
pub(super) const PROC_INFO: [&str; 2] = ["fd_list", "cmdline"];

/// Exec A sleeps (its pid in a file in the work dir) while exec B tries
/// everything on it and on PID 1; `judged` names the calls that must have
/// been refused; A must finish normally whatever B reports.
pub(super) fn concurrent_exec(s: &EscapeSubject, judged: &[&str]) -> Result<String, String> {
    let token = format!("cordon-escape-sleeper-{}", nonce());
    let stdin = format!("stdin-of-the-sleeper-{}\n", nonce());
    let (t1, t2) = token.split_at(token.len() / 2);
    // B: find A through /proc (and PID 1), then try everything on both.
    // Each line is `name result errno`, as `all_refused` reads it. PID 1
    // gets only signal 0, a seize (released when B exits) and reads, so an
    // unconfined subject does not harm its host's init.
    let attacker = format!(
        "{PY_LIBC}import sys,time,signal\n\
tok=sys.argv[1]+sys.argv[2]\nme=os.getpid()\n\
def find():\n    for d in os.listdir('/proc'):\n        if d.isdigit() and int(d)!=me:\n            try:\n                if tok in open('/proc/%s/cmdline'%d,'rb').read().replace(b'\\0',b' ').decode(): return int(d)\n            except (OSError,ValueError): pass\n    return None\n\
pid=None\nt=time.time()\nwhile pid is None and time.time()-t<{find}:\n    pid=find()\n    if pid is None: time.sleep(0.05)\n\
if pid is None:\n    print('invisible' if sys.argv[1] in open('/proc/self/cmdline','rb').read().decode(errors='replace') else 'nofind'); sys.exit(0)\n\
inits=(('',pid),) if os.getppid()==1 else (('',pid),('init_',1))\n\
if os.getppid()==1: print('init_own',flush=True)\n\
def op(name,f):\n    try:\n        f(); print(name,0,0,flush=True)\n    except OSError as e: print(name,-1,e.errno,flush=True)\n\
def rd(p): open(p,'rb').read(64)\n\
def wr(p):\n    fd=os.open(p,os.O_WRONLY|os.O_NONBLOCK)\n    try: os.write(fd,b'{BAIT}\\n')\n    finally: os.close(fd)\n\
def seize(p):\n    if libc.ptrace(0x4206,p,0,0)!=0: raise OSError(ctypes.get_errno(),'seize')\n\
def vm(p):\n    b=ctypes.create_string_buffer(8)\n    l=(ctypes.c_void_p*2)(ctypes.cast(b,ctypes.c_void_p),8)\n    r=(ctypes.c_void_p*2)(0x400000,8)\n    if libc.process_vm_readv(p,l,1,r,1,0)<0:\n        e=ctypes.get_errno()\n        if e!=14: raise OSError(e,'vm')\n\
def sig(p,n): os.kill(p,n)\n\
def pidfd(p):\n    fd=os.pidfd_open(p)\n    try: signal.pidfd_send_signal(fd,0)\n    finally: os.close(fd)\n\
def cmdline(p):\n    if tok not in open('/proc/%d/cmdline'%p,'rb').read().replace(b'\\0',b' ').decode(): raise OSError(0,'no token')\n\
if sys.argv[3]=='info':\n    op('fd_list',lambda: os.listdir('/proc/%d/fd'%pid)); op('cmdline',lambda: cmdline(pid)); print('end'); sys.exit(0)\n\
for pre,p in inits:\n\
\x20   op(pre+'environ',lambda: rd('/proc/%d/environ'%p))\n\
\x20   op(pre+'mem',lambda: os.close(os.open('/proc/%d/mem'%p,os.O_RDONLY)))\n\
\x20   op(pre+'fd_list',lambda: os.listdir('/proc/%d/fd'%p))\n\
\x20   op(pre+'fd_link',lambda: os.readlink('/proc/%d/fd/1'%p))\n\
\x20   op(pre+'seize',lambda: seize(p))\n\
\x20   op(pre+'vm_readv',lambda: vm(p))\n\
\x20   op(pre+'kill0',lambda: sig(p,0))\n\
\x20   op(pre+'pidfd_signal0',lambda: pidfd(p))\n\
op('stdout_write',lambda: wr('/proc/%d/fd/1'%pid))\n\
op('stdin_write',lambda: wr('/proc/%d/fd/0'%pid))\n\
op('stop',lambda: sig(pid,signal.SIGSTOP))\n\
try: os.kill(pid,signal.SIGCONT)\nexcept OSError: pass\n\
op('kill9',lambda: sig(pid,signal.SIGKILL))\n\
print('end')",
        find = SLEEPER_SECONDS
    );
    // Only reads for the information case, so its judgment is not hidden
    // behind the sleeper's own.
    let mode = if judged == PROC_INFO { "info" } else { "all" };
    let env = cordon_sandbox::outputs::plain_env();
    let (sleeper, attack) = std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            exec_with(
                &*s.sandbox,
                strings(&[
                    "/bin/sh",
                    "-c",
                    &format!("echo $$ > \".$1.pid\"; sleep {SLEEPER_SECONDS}; rm -f \".$1.pid\"; cat; echo sleeper-done"),
                    "sh",
                    &token,
                ]),
                env.clone(),
                stdin.as_bytes(),
                TIMEOUT,
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let b = exec_with(
            &*s.sandbox,
            strings(&["/usr/bin/python3", "-c", &attacker, t1, t2, mode]),
            env.clone(),
            b"",
            TIMEOUT,
        );
        let a = a.join().unwrap_or_else(|_| Ran {
            result: Err(SandboxError::Failed {
                operation: "exec",
                reason: "the sleeper's thread panicked".into(),
            }),
            took: Duration::ZERO,
        });
        (a, b)
    });
    // The host afterwards: neither exec left anything, and the sandbox
    // (its init) still serves an exec.
    none_survive(&token, &sleeper)?;
    let after = exec_in(
        &*s.sandbox,
        strings(&["/bin/sh", "-c", "echo still-serving"]),
        TIMEOUT,
    );
    let sleeper_out = sleeper.stdout();
    if sleeper.all_output().contains(BAIT) {
        return Err(format!(
            "exec B wrote into the sleeper's stdin or stdout {}; B: {}",
            sleeper.show(),
            attack.show()
        ));
    }
    let finished = sleeper.status() == Some(ExitStatus::Code(0))
        && sleeper_out.contains("sleeper-done")
        && sleeper_out.contains(stdin.trim());
    if !finished {
        return Err(format!(
            "the sleeper did not finish normally {}; B: {}",
            sleeper.show(),
            attack.show()
        ));
    }
    if !after.stdout().contains("still-serving") {
        return Err(format!(
            "the sandbox no longer serves an exec after B's attempts {}; B: {}",
            after.show(),
            attack.show()
        ));
    }
    if attack.stdout().contains("nofind") {
        return Err(format!(
            "could not set up: exec B never found the sleeper in /proc {}",
            attack.show()
        ));
    }
    if attack.status() == Some(ExitStatus::Code(0))
        && attack.stdout().lines().any(|l| l == "invisible")
    {
        // B reads its own /proc entry but no process holds the sleeper's
        // token: the sleeper is in another pid namespace.
        return Ok(
            "exec B cannot see the sleeper at all (each exec has a pid namespace and /proc of its own); the sleeper finished normally"
                .to_string(),
        );
    }
    attack.ran_to_end()?;
    // B's PID 1 is its own exec's init (a pid namespace per exec), not the
    // sandbox's: the init probes do not apply.
    let judged: Vec<&str> = if attack.stdout().lines().any(|l| l == "init_own") {
        judged
            .iter()
            .copied()
            .filter(|n| !n.starts_with("init_"))
            .collect()
    } else {
        judged.to_vec()
    };
    let errnos = all_refused(&attack, &judged)?;
    Ok(format!(
        "exec B was refused ({}); the sleeper finished normally",
        errnos.join(", ")
    ))
}
