//! What a sandbox shares with the host besides the filesystem: System V
//! IPC (segments, queues, semaphores) and the `/proc/net` tables. Both
//! rungs have namespaces of their own for these.

use cordon_linux::Rung;

use super::*;
use crate::both;

// Runs `ipcmk ARGS` on the host and returns the id it printed.
fn ipcmk(args: &[&str]) -> i64 {
    let out = std::process::Command::new("ipcmk")
        .args(args)
        .output()
        .expect("ipcmk (util-linux)");
    assert!(out.status.success(), "ipcmk {args:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.rsplit(':')
        .next()
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("ipcmk printed `{text}`"))
}

// The rows of `/proc/sysvipc/KIND` (shm, msg, sem) whose owner is `uid`.
fn host_ipc_of(kind: &str, uid: u32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")).expect("sysvipc");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = header
        .iter()
        .position(|h| *h == "uid")
        .expect("a uid column");
    lines
        .filter(|l| l.split_whitespace().nth(col) == Some(&uid.to_string()))
        .map(str::to_string)
        .collect()
}

// A host segment anyone may read and write: the workload must not even
// find it, let alone attach it; and what it makes of its own is gone with
// the sandbox, never left in the host's namespace.
both!(no_host_sysv_ipc_and_none_left_behind, |rung| {
    let Some(enforcer) = enforcer_for(rung, "System V IPC") else {
        return;
    };
    let shm = ipcmk(&["-M", "4096", "-p", "0666"]);
    let msg = ipcmk(&["-Q", "-p", "0666"]);
    let code = format!(
        "import ctypes\n\
         libc=ctypes.CDLL(None,use_errno=True)\n\
         libc.shmat.restype=ctypes.c_void_p\n\
         p=libc.shmat({shm},None,0); print('attach', -1 if p in (None, 2**64-1) else 0, ctypes.get_errno())\n\
         r=libc.msgsnd({msg},b'\\x01\\0\\0\\0\\0\\0\\0\\0hi',2,0o4000); print('send',r,ctypes.get_errno())\n\
         s=libc.shmget(0,1<<20,0o1600); print('own shm',s)\n\
         q=libc.msgget(0,0o1600); print('own msg',q)\n\
         m=libc.semget(0,1,0o1600); print('own sem',m)\n"
    );
    let case = python(rung, &code);
    let run = case.run(&enforcer);
    let _ = std::process::Command::new("ipcrm")
        .args(["-m", &shm.to_string(), "-q", &msg.to_string()])
        .status();
    assert_eq!(
        run.outcome.termination,
        cordon_linux::Termination::Exited(0),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("attach -1 22"),
        "the host's segment {shm} was attached (or not refused with EINVAL): {run:?}"
    );
    assert!(
        run.stdout.contains("send -1 22"),
        "the host's queue {msg} took a message (or not refused with EINVAL): {run:?}"
    );
    // The workload could make its own (so nothing is left because nothing
    // was made would not pass).
    for own in ["own shm", "own msg", "own sem"] {
        let made = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(own))
            .and_then(|v| v.trim().parse::<i64>().ok());
        assert!(made.is_some_and(|v| v >= 0), "{own} not made: {run:?}");
    }
    for kind in ["shm", "msg", "sem"] {
        let left = host_ipc_of(kind, case.host_uid());
        assert!(
            left.is_empty(),
            "the sandbox's {kind} objects are in the host's namespace: {left:?}"
        );
    }
});

// A listening TCP port and a bound unix socket of the host's do not show
// in the `/proc/net` tables the workload reads.
both!(host_sockets_are_not_in_proc_net, |rung| {
    let Some(enforcer) = enforcer_for(rung, "/proc/net") else {
        return;
    };
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = tcp.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("dir");
    let name = format!("cordon-host-socket-{}", std::process::id());
    let _unix = std::os::unix::net::UnixListener::bind(dir.path().join(&name)).expect("bind");
    let case = shell(
        rung,
        "cat /proc/net/tcp; echo ===; cat /proc/net/unix; echo ===; cat /proc/self/net/tcp; \
         echo ===; cat /proc/1/net/tcp /proc/1/net/unix 2>&1; \
         for p in /proc/[0-9]*; do cat $p/net/tcp 2>/dev/null; done",
    );
    let run = case.run(&enforcer);
    assert_eq!(
        run.outcome.termination,
        cordon_linux::Termination::Exited(0),
        "{run:?}"
    );
    // Proof the tables were read at all.
    assert!(run.stdout.contains("local_address"), "{run:?}");
    let hex = format!(":{port:04X} ");
    assert!(
        !run.stdout.contains(&hex),
        "the host's listening port {port} is visible: {run:?}"
    );
    assert!(
        !run.stdout.contains(&name),
        "the host's unix socket `{name}` is visible: {run:?}"
    );
});

// At the process rung (the host's pid namespace), the host's processes are
// not listed in the workload's `/proc`: not the host's init (whose
// `mountinfo` and `net/` are the host's), not a process of another uid.
// Its own processes are.
#[test]
fn the_process_rung_lists_only_its_own_uids_processes() {
    let Some(enforcer) = enforcer_for(Rung::Process, "/proc/1") else {
        return;
    };
    let case = shell(
        Rung::Process,
        "ls -d /proc/1 2>&1; cat /proc/1/mountinfo 2>&1 | head -1; \
         echo self=$(readlink /proc/self); ls -d /proc/[0-9]* | wc -l",
    );
    let run = case.run(&enforcer);
    assert_eq!(
        run.outcome.termination,
        cordon_linux::Termination::Exited(0),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("/proc/1': No such file"),
        "the host's init is listed: {run:?}"
    );
    assert!(
        !run.stdout.contains(" / / "),
        "the host's init's mountinfo was read: {run:?}"
    );
    let listed: usize = run
        .stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(
        run.stdout.contains("self=") && listed < 10,
        "more than the workload's own processes are listed ({listed}): {run:?}"
    );
}
