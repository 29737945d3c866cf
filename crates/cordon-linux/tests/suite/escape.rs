//! The escape suite: each case is a workload that tries, and assertions that
//! it failed and the host is unharmed. Written once, run at every rung; where
//! a rung by design does not stop something, the case says so explicitly.

use std::io::{ErrorKind, Read};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_linux::{Bound, Rung, SandboxStdio, Termination};

use super::*;
use crate::both;

/// A host process the workload will try to reach, running as `uid`.
struct HostSleeper(std::process::Child);

impl HostSleeper {
    fn start(uid: u32) -> Self {
        let child = Command::new("/bin/sleep")
            .arg("60")
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::null())
            .spawn()
            .expect("host sleeper");
        HostSleeper(child)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn assert_unharmed(&mut self) {
        assert!(
            self.0.try_wait().expect("try_wait").is_none(),
            "the host process was killed"
        );
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        let state = status
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or("");
        assert!(
            !state.contains("stopped") && !state.contains("tracing"),
            "host process {state}"
        );
        assert!(
            !status.contains("TracerPid:\t") || status.contains("TracerPid:\t0"),
            "traced"
        );
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

both!(python_runs_and_writes_the_work_dir, |rung| {
    let Some(enforcer) = enforcer_for(rung, "positive run") else {
        return;
    };
    let case = python(rung, "open('out.txt','w').write('hello'); print('ran')");
    let run = case.run(&enforcer);
    assert!(run.outcome.termination.success(), "{run:?}");
    assert_eq!(run.stdout.trim(), "ran", "{run:?}");
    let written = std::fs::read_to_string(case.work_dir().join("out.txt")).expect("output file");
    assert_eq!(written, "hello");
});

both!(cannot_read_shadow_or_root_home, |rung| {
    let Some(enforcer) = enforcer_for(rung, "read secrets") else {
        return;
    };
    let secret = format!(
        "/root/cordon-secret-{}",
        std::process::id() as u64 * 1000 + rung as u64
    );
    std::fs::write(&secret, "ROOT-SECRET-MARKER").expect("write secret");
    let case = shell(
        rung,
        &format!("cat /etc/shadow; cat {secret}; ls /root /home; cat /etc/gshadow; echo done"),
    );
    let run = case.run(&enforcer);
    let _ = std::fs::remove_file(&secret);
    assert!(
        run.stdout.contains("done"),
        "the script did not run: {run:?}"
    );
    assert!(!run.stdout.contains("root:"), "read /etc/shadow: {run:?}");
    assert!(
        !run.stdout.contains("ROOT-SECRET-MARKER"),
        "read a file in /root: {run:?}"
    );
});

both!(cannot_write_outside_the_work_dir, |rung| {
    let Some(enforcer) = enforcer_for(rung, "write outside") else {
        return;
    };
    let host = open_host_dir();
    let target = host.path().join("pwned");
    let case = shell(
        rung,
        &format!(
            "echo x > {}; echo x > /etc/cordon-pwned; echo x > /usr/cordon-pwned; echo x > /cordon-pwned; echo ok > inside",
            target.display()
        ),
    );
    let run = case.run(&enforcer);
    assert!(
        case.work_dir().join("inside").exists(),
        "the script did not run: {run:?}"
    );
    for p in [
        target.as_path(),
        Path::new("/etc/cordon-pwned"),
        Path::new("/usr/cordon-pwned"),
        Path::new("/cordon-pwned"),
    ] {
        assert!(!p.exists(), "the workload wrote {}: {run:?}", p.display());
    }
});

const PERL: &str = "print qq(PERL-RAN\\n)";

/// A plan that allows the shell but not perl. The container rung masks perl
/// inside an executable /usr; the process rung cannot mask (a deny inside an
/// allowed tree is refused there), so its plan grants only what Landlock can
/// express: the shell and the libraries, and no access to perl at all.
fn no_perl(rung: Rung, argv: &[&str]) -> Case {
    let mut case = Case::new(rung, argv);
    match rung {
        Rung::Container => case.spec.mask_executables = vec!["/usr/bin/perl".into()],
        Rung::Process => {
            case.spec.fs = vec![
                FsRule {
                    path: "/usr/bin/dash".into(),
                    read: true,
                    write: false,
                    execute: true,
                },
                FsRule {
                    path: "/usr/lib".into(),
                    read: true,
                    write: false,
                    execute: true,
                },
                FsRule {
                    path: "/usr/lib64".into(),
                    read: true,
                    write: false,
                    execute: true,
                },
                FsRule {
                    path: "/etc".into(),
                    read: true,
                    write: false,
                    execute: false,
                },
            ]
        }
    }
    case
}

both!(cannot_exec_a_binary_the_plan_does_not_allow, |rung| {
    let Some(enforcer) = enforcer_for(rung, "exec denied binary") else {
        return;
    };
    // Directly, as the first command.
    let direct = no_perl(rung, &["/usr/bin/perl", "-e", PERL]);
    let result = direct.try_run(&enforcer, SandboxStdio::piped());
    no_process_left(direct.host_uid());
    match result {
        Err(e) => assert!(e.contains("exec") || e.contains("workload"), "{e}"),
        Ok(run) => panic!("perl ran as the first command: {run:?}"),
    }
    // From a shell, and through the dynamic loader (which needs only read
    // access to the binary it loads).
    let script = format!(
        "/usr/bin/perl -e '{PERL}'; echo direct=$?; /lib64/ld-linux-x86-64.so.2 /usr/bin/perl -e '{PERL}'; echo loader=$?"
    );
    let case = no_perl(rung, &["/bin/sh", "-c", &script]);
    let run = case.run(&enforcer);
    assert!(
        run.stdout.contains("loader="),
        "the shell did not run: {run:?}"
    );
    assert!(!run.stdout.contains("PERL-RAN"), "perl ran: {run:?}");
});

both!(cannot_see_or_signal_host_processes, |rung| {
    let Some(enforcer) = enforcer_for(rung, "host processes") else {
        return;
    };
    let case = shell(rung, "true");
    // Same uid as the sandbox, so file modes and uid checks do not help:
    // only the sandbox (pid namespace, Landlock signal scoping) can stop it.
    let mut sleeper = HostSleeper::start(case.host_uid());
    let pid = sleeper.pid();
    let mut case = case;
    case.spec.argv = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("kill -9 {pid}; echo kill=$?; kill -STOP {pid}; cat /proc/{pid}/cmdline; echo; echo end"),
    ];
    let run = case.try_run(&enforcer, SandboxStdio::piped()).expect("run");
    assert!(run.stdout.contains("end"), "{run:?}");
    assert!(
        !run.stdout.contains("kill=0"),
        "kill reported success: {run:?}"
    );
    sleeper.assert_unharmed();
    // The container rung has a pid namespace of its own; the process rung
    // a `/proc` mounted with `hidepid=invisible`, which lists only what the
    // workload may ptrace-read: nothing outside its Landlock domain, even
    // of its own uid.
    assert!(
        !run.stdout.contains("sleep"),
        "a host process is visible: {run:?}"
    );
});

both!(cannot_ptrace, |rung| {
    let Some(enforcer) = enforcer_for(rung, "ptrace") else {
        return;
    };
    let case = python(rung, "0");
    let mut sleeper = HostSleeper::start(case.host_uid());
    let mut case = case;
    let code = format!(
        "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\n\
         r=libc.ptrace(16,{pid},0,0); print('attach',r,ctypes.get_errno())\n\
         r=libc.ptrace(0,0,0,0); print('traceme',r,ctypes.get_errno())\n\
         r=libc.process_vm_readv({pid},0,0,0,0,0); print('vm_readv',r,ctypes.get_errno())",
        pid = sleeper.pid()
    );
    case.spec.argv = vec!["/usr/bin/python3".into(), "-c".into(), code];
    let run = case.try_run(&enforcer, SandboxStdio::piped()).expect("run");
    for what in ["attach", "traceme", "vm_readv"] {
        assert!(
            run.stdout.contains(&format!("{what} -1 1")),
            "{what} not refused with EPERM: {run:?}"
        );
    }
    sleeper.assert_unharmed();
});

fn host_mount_count() -> usize {
    std::fs::read_to_string("/proc/1/mountinfo")
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

both!(cannot_mount_or_make_namespaces, |rung| {
    let Some(enforcer) = enforcer_for(rung, "mount and namespaces") else {
        return;
    };
    let before = host_mount_count();
    let case = python(
        rung,
        "import ctypes,struct,os\nlibc=ctypes.CDLL(None,use_errno=True)\n\
         r=libc.mount(b'none',os.getcwd().encode(),b'tmpfs',0,None); print('mount',r,ctypes.get_errno())\n\
         r=libc.umount2(b'/proc',2); print('umount',r,ctypes.get_errno())\n\
         r=libc.unshare(0x10000000); print('unshare',r,ctypes.get_errno())\n\
         r=libc.unshare(0x00020000); print('unshare_ns',r,ctypes.get_errno())\n\
         r=libc.syscall(56,0x10000000|17,0,0,0,0)\n\
         if r==0: os._exit(0)\n\
         print('clone',r,ctypes.get_errno())\n\
         args=struct.pack('11Q',0x10000000|0x20000,0,0,0,17,0,0,0,0,0,0)\n\
         r=libc.syscall(435,args,88)\n\
         if r==0: os._exit(0)\n\
         print('clone3',r,ctypes.get_errno())\n\
         r=libc.chroot(b'/tmp'); print('chroot',r,ctypes.get_errno())",
    );
    let run = case.run(&enforcer);
    for what in [
        "mount",
        "umount",
        "unshare",
        "unshare_ns",
        "clone",
        "chroot",
    ] {
        assert!(
            run.stdout.contains(&format!("{what} -1 1\n")),
            "{what} not refused with EPERM: {run:?}"
        );
    }
    // clone3 answers ENOSYS so libc falls back to clone, whose flags the filter reads.
    assert!(
        run.stdout.contains("clone3 -1 38"),
        "clone3 not refused with ENOSYS: {run:?}"
    );
    let ns = Command::new("/usr/bin/true").status();
    assert!(ns.is_ok());
    assert_eq!(before, host_mount_count(), "the host's mount table changed");
});

both!(cannot_open_raw_packet_or_netlink_sockets, |rung| {
    let Some(enforcer) = enforcer_for(rung, "special sockets") else {
        return;
    };
    let case = python(
        rung,
        "import socket\n\
         for name,fam,typ,proto in [('raw',socket.AF_INET,socket.SOCK_RAW,1),('packet',socket.AF_PACKET,socket.SOCK_RAW,0),('netlink',socket.AF_NETLINK,socket.SOCK_RAW,0),('vsock',40,socket.SOCK_STREAM,0)]:\n\
         \x20   try:\n\
         \x20       socket.socket(fam,typ,proto); print(name,'OPENED')\n\
         \x20   except OSError as e: print(name,'refused',e.errno)\n\
         print('end')",
    );
    let run = case.run(&enforcer);
    assert!(run.stdout.contains("end"), "{run:?}");
    assert!(!run.stdout.contains("OPENED"), "a socket opened: {run:?}");
});

both!(cannot_reach_host_tcp_udp_or_unix_listeners, |rung| {
    let Some(enforcer) = enforcer_for(rung, "host listeners") else {
        return;
    };
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp listener");
    tcp.set_nonblocking(true).expect("nonblocking");
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp socket");
    udp.set_nonblocking(true).expect("nonblocking");
    let dir = open_host_dir();
    let sock_path = dir.path().join("host.sock");
    let unix = UnixListener::bind(&sock_path).expect("unix listener");
    unix.set_nonblocking(true).expect("nonblocking");
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let code = format!(
        "import socket\n\
         def t(name,f):\n\
         \x20   try: f(); print(name,'REACHED')\n\
         \x20   except OSError as e: print(name,'refused',e.errno)\n\
         t('tcp',lambda: socket.create_connection(('127.0.0.1',{tport}),timeout=2))\n\
         t('udp',lambda: socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'x',('127.0.0.1',{uport})))\n\
         def u():\n\
         \x20   s=socket.socket(socket.AF_UNIX); s.connect('{path}')\n\
         t('unix',u)\n\
         def b():\n\
         \x20   s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\n\
         t('bind',b)\n\
         print('end')",
        tport = tcp.local_addr().expect("addr").port(),
        uport = udp.local_addr().expect("addr").port(),
        path = sock_path.display(),
    );
    let run = python(rung, &code).run(&enforcer);
    assert!(run.stdout.contains("end"), "{run:?}");
    assert!(
        !run.stdout.contains("REACHED"),
        "the workload reached the host: {run:?}"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        tcp.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "tcp connection arrived"
    );
    let mut buf = [0u8; 8];
    assert_eq!(
        udp.recv(&mut buf).map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "udp datagram arrived"
    );
    assert_eq!(
        unix.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "unix connection arrived"
    );
});

both!(cannot_push_keystrokes_with_tiocsti, |rung| {
    let Some(enforcer) = enforcer_for(rung, "TIOCSTI") else {
        return;
    };
    let pty = nix::pty::openpty(None, None).expect("pty");
    let mut master = std::fs::File::from(pty.master);
    let case = python(
        rung,
        "import fcntl,termios,os\n\
         for name,fd in [('stdin',0)]:\n\
         \x20   try: fcntl.ioctl(fd,termios.TIOCSTI,b'X'); print(name,'PUSHED')\n\
         \x20   except OSError as e: print(name,'refused',e.errno)\n\
         try: os.open('/dev/tty',os.O_RDWR); print('tty OPENED')\n\
         except OSError as e: print('tty refused',e.errno)",
    );
    let stdio = SandboxStdio {
        stdin: Stdio::from(pty.slave),
        stdout: Stdio::piped(),
        stderr: Stdio::piped(),
    };
    let run = case.try_run(&enforcer, stdio).expect("run");
    no_process_left(case.host_uid());
    assert!(run.stdout.contains("stdin refused"), "{run:?}");
    assert!(
        !run.stdout.contains("PUSHED") && !run.stdout.contains("tty OPENED"),
        "{run:?}"
    );
    // Nothing was echoed back by the terminal: no character reached its input.
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .expect("nonblock");
    let mut buf = [0u8; 16];
    match master.read(&mut buf) {
        Ok(n) => assert!(
            !buf[..n].contains(&b'X'),
            "a keystroke reached the terminal"
        ),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::WouldBlock) || e.raw_os_error() == Some(libc_eio()),
            "{e}"
        ),
    }
});

fn libc_eio() -> i32 {
    5
}

both!(fork_bomb_is_stopped_by_max_processes, |rung| {
    let Some(enforcer) = enforcer_for(rung, "fork bomb") else {
        return;
    };
    let mut case = python(
        rung,
        "import os,time\nn=0\n\
         for i in range(500):\n\
         \x20   try:\n\
         \x20       if os.fork()==0:\n\
         \x20           time.sleep(60); os._exit(0)\n\
         \x20       n+=1\n\
         \x20   except OSError: break\n\
         print('forked',n,flush=True)",
    );
    case.spec.bounds.max_processes = 16;
    let run = case.run(&enforcer);
    let forked: u32 = run
        .stdout
        .trim()
        .strip_prefix("forked ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{run:?}"));
    assert!(
        forked < 16,
        "forked {forked} processes under max_processes 16: {run:?}"
    );
    assert!(
        run.outcome.limits_hit.contains(&Bound::Processes),
        "{run:?}"
    );
    assert!(
        run.outcome.wall < Duration::from_secs(10),
        "the sleeping children kept the run alive: {run:?}"
    );
});

both!(memory_bomb_is_stopped_by_max_memory, |rung| {
    let Some(enforcer) = enforcer_for(rung, "memory bomb") else {
        return;
    };
    let mut case = python(rung, "x=[]\nwhile True: x.append(b'\\x01'*(8<<20))");
    case.spec.bounds.max_memory = 64 << 20;
    let run = case.run(&enforcer);
    assert_eq!(run.outcome.killed_by, Some(Bound::Memory), "{run:?}");
    assert_eq!(run.outcome.termination, Termination::Signaled(9), "{run:?}");
});

both!(
    cpu_spin_in_several_processes_is_stopped_by_max_cpu_seconds,
    |rung| {
        let Some(enforcer) = enforcer_for(rung, "cpu spin") else {
            return;
        };
        // Four spinners: RLIMIT_CPU (per process) would let them use four times
        // the bound; the tree-wide accounting stops them at the bound.
        let mut case = python(
            rung,
            "import os\nfor i in range(3):\n    if os.fork()==0: break\nwhile True: pass",
        );
        case.spec.bounds.max_cpu_seconds = 1;
        case.spec.bounds.max_wall_seconds = 30;
        let run = case.run(&enforcer);
        assert_eq!(run.outcome.killed_by, Some(Bound::Cpu), "{run:?}");
        let cpu = run.outcome.cpu.expect("cpu accounted");
        assert!(
            cpu < Duration::from_millis(1800),
            "the tree used {cpu:?} of a 1 s bound: {run:?}"
        );
        assert!(run.outcome.wall < Duration::from_secs(5), "{run:?}");
    }
);

both!(sleep_is_stopped_by_max_wall_seconds, |rung| {
    let Some(enforcer) = enforcer_for(rung, "wall clock") else {
        return;
    };
    let mut case = Case::new(rung, &["/bin/sleep", "60"]);
    case.spec.bounds.max_wall_seconds = 1;
    let run = case.run(&enforcer);
    assert_eq!(run.outcome.killed_by, Some(Bound::Wall), "{run:?}");
    assert!(run.outcome.wall < Duration::from_secs(4), "{run:?}");
});

both!(cannot_write_proc_sys_or_sys, |rung| {
    let Some(enforcer) = enforcer_for(rung, "write /proc/sys and /sys") else {
        return;
    };
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let qlen = std::fs::read_to_string("/sys/class/net/lo/tx_queue_len").expect("qlen");
    let case = shell(
        rung,
        "echo pwned > /proc/sys/kernel/hostname; echo 77 > /sys/class/net/lo/tx_queue_len; echo 1 > /proc/sys/vm/overcommit_memory; echo end",
    );
    let run = case.run(&enforcer);
    assert!(run.stdout.contains("end"), "{run:?}");
    assert_eq!(
        hostname,
        std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname")
    );
    assert_eq!(
        qlen,
        std::fs::read_to_string("/sys/class/net/lo/tx_queue_len").expect("qlen")
    );
});

both!(cannot_reach_kvm_or_a_docker_socket, |rung| {
    let Some(enforcer) = enforcer_for(rung, "devices") else {
        return;
    };
    let case = python(
        rung,
        "import os\n\
         for p in ['/dev/kvm','/dev/mem','/dev/vda','/var/run/docker.sock','/run/docker.sock']:\n\
         \x20   try: os.open(p,os.O_RDWR); print(p,'OPENED')\n\
         \x20   except OSError as e: print(p,'refused',e.errno)\n\
         print('end')",
    );
    let run = case.run(&enforcer);
    assert!(run.stdout.contains("end"), "{run:?}");
    assert!(!run.stdout.contains("OPENED"), "{run:?}");
});

both!(sees_only_the_plan_environment_and_stdio, |rung| {
    let Some(enforcer) = enforcer_for(rung, "environment") else {
        return;
    };
    let host_env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    assert!(!host_env.is_empty());
    let mut case = Case::new(rung, &["/usr/bin/env"]);
    case.spec.env.insert("CORDON_PLAN_VAR".into(), "yes".into());
    let run = case.run(&enforcer);
    let mut lines: Vec<&str> = run.stdout.lines().collect();
    lines.sort();
    let mut expected = vec![
        "CORDON_PLAN_VAR=yes".to_string(),
        "PATH=/usr/bin:/bin".to_string(),
    ];
    if rung == Rung::Process {
        expected.push(format!(
            "TMPDIR={}",
            case.spec.tmp_dir.as_ref().expect("tmp").display()
        ));
    }
    expected.sort();
    assert_eq!(lines, expected, "{run:?}");
    for var in &host_env {
        assert!(
            !run.stdout.lines().any(|l| l == var) || expected.contains(var),
            "host {var} leaked"
        );
    }
    // No descriptor beyond stdio (3 is listdir's own).
    let fds = python(
        rung,
        "import os; print(sorted(os.listdir('/proc/self/fd')))",
    )
    .run(&enforcer);
    assert_eq!(fds.stdout.trim(), "['0', '1', '2', '3']", "{fds:?}");
});

both!(non_native_syscall_abis_are_refused, |rung| {
    let Some(enforcer) = enforcer_for(rung, "x32 and ia32 syscalls") else {
        return;
    };
    // x32: x86_64's audit arch with bit 30 set in the syscall number (getpid).
    let x32 = python(
        rung,
        "import ctypes\nprint('before',flush=True)\nctypes.CDLL(None).syscall(0x40000000|39)\nprint('x32 RAN')",
    )
    .run(&enforcer);
    assert!(x32.stdout.contains("before"), "{x32:?}");
    assert!(!x32.stdout.contains("RAN"), "{x32:?}");
    assert_eq!(
        x32.outcome.termination,
        Termination::Signaled(31),
        "not killed by SIGSYS: {x32:?}"
    );
    // ia32: `int 0x80` with eax=20 (getpid), from a page of machine code.
    let ia32 = python(
        rung,
        "import ctypes,mmap\n\
         code=bytes([0xb8,0x14,0,0,0,0xcd,0x80,0xc3])\n\
         m=mmap.mmap(-1,4096,prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)\n\
         m.write(code)\n\
         addr=ctypes.addressof(ctypes.c_char.from_buffer(m))\n\
         print('before',flush=True)\n\
         r=ctypes.CFUNCTYPE(ctypes.c_long)(addr)()\n\
         print('ia32 RAN',r)",
    )
    .run(&enforcer);
    assert!(ia32.stdout.contains("before"), "{ia32:?}");
    assert!(!ia32.stdout.contains("RAN"), "{ia32:?}");
    assert_eq!(
        ia32.outcome.termination,
        Termination::Signaled(31),
        "not killed by SIGSYS: {ia32:?}"
    );
});
