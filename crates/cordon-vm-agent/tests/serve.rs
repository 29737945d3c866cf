//! The agent served over a unix socket (`serve-unix`), exactly as PID 1
//! serves the virtio port, minus the boot: a warm sandbox at the container
//! rung over the host's system directories, execs and files through the
//! framed protocol. Needs root (user namespaces, cgroups); skips loudly
//! without it, and fails when `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use cordon_linux::{Bounds, PlanSpec, Rung};
use cordon_vm_proto::{write_frame, ErrKind, FrameReader, Kind, Msg, Status, Stream};

/// The agent under test: this build's, or the one `CORDON_VM_AGENT` names
/// (the static build that goes into the initramfs).
fn agent() -> String {
    std::env::var("CORDON_VM_AGENT")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_cordon-vm-agent").into())
}
const INSIDE: u32 = 1000;
const GUEST_WORK: &str = "/work";

/// Whether the sandbox can run here; `false` (after saying so) skips.
fn can_run(case: &str) -> bool {
    cordon_testkit::runs_here(
        case,
        (!cordon_testkit::is_root()).then_some(
            "not root: the agent builds a warm sandbox (user namespaces, cgroups, mounts)",
        ),
    )
}

fn bounds(wall: u64) -> Bounds {
    Bounds {
        max_memory: 256 << 20,
        max_processes: 64,
        max_cpu_seconds: 10,
        max_wall_seconds: wall,
        max_disk: 64 << 20,
    }
}

/// A container-rung plan (a `cordon_linux::PlanSpec` as JSON, as the host
/// sends it; fields it leaves out take their defaults) over the host's
/// system directories (the `host` image), its work dir `/work` bound from
/// `work`.
fn plan(work: &Path, host_id: u32) -> serde_json::Value {
    let system = ["/usr", "/lib", "/lib64", "/bin", "/sbin"]
        .map(|p| serde_json::json!({"path": p, "read": true, "execute": true}));
    let mut fs = system.to_vec();
    fs.push(serde_json::json!({"path": "/etc", "read": true}));
    let plan = serde_json::json!({
        "rung": "container",
        "fs": fs,
        "work_dir": GUEST_WORK,
        "work_dir_source": work,
        "env": {"PATH": "/usr/bin:/bin"},
        "bounds": bounds(20),
        "argv": [],
        "ids": {"uid": INSIDE, "gid": INSIDE, "host_uid": host_id, "host_gid": host_id},
    });
    // What the agent takes is a valid plan.
    let spec: PlanSpec = serde_json::from_value(plan.clone()).unwrap();
    assert_eq!(spec.rung, Rung::Container);
    plan
}

/// A host id no other test run uses at the same time.
fn host_id(n: u32) -> u32 {
    310_000 + (std::process::id() % 5000) * 8 + n
}

/// What an exec produced.
#[derive(Debug, Default)]
struct Ran {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: Option<Status>,
    failed: Option<String>,
}

impl Ran {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// One agent in `serve-unix` mode and our end of its channel.
struct Session {
    child: Child,
    w: UnixStream,
    frames: FrameReader<UnixStream>,
    /// Frames read while waiting for another exec's or request's.
    stash: Vec<(Msg, Vec<u8>)>,
    _dir: tempfile::TempDir,
    work: PathBuf,
}

impl Session {
    fn start() -> Session {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("ctl.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let child = Command::new(agent())
            .arg("serve-unix")
            .arg(&sock)
            .spawn()
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("the agent did not connect: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let work = dir.path().join("work");
        let mut s = Session {
            child,
            w: stream.try_clone().unwrap(),
            frames: FrameReader::new(stream),
            stash: Vec::new(),
            _dir: dir,
            work,
        };
        match s.next() {
            (
                Msg::Ready {
                    agent,
                    kernel,
                    proto,
                },
                _,
            ) => {
                assert_eq!(agent, env!("CARGO_PKG_VERSION"));
                assert!(!kernel.is_empty());
                assert_eq!(proto, cordon_vm_proto::PROTOCOL);
            }
            other => panic!("the first frame is not `ready`: {other:?}"),
        }
        s
    }

    fn send(&mut self, msg: &Msg, data: &[u8]) {
        write_frame(&mut self.w, msg, data).unwrap();
    }

    fn next(&mut self) -> (Msg, Vec<u8>) {
        match self.frames.read() {
            Ok(Some(f)) => f,
            other => panic!("no frame from the agent: {other:?}"),
        }
    }

    /// The next frame `mine` accepts, from the stash first.
    fn next_of(&mut self, mine: impl Fn(&Msg) -> bool) -> (Msg, Vec<u8>) {
        if let Some(i) = self.stash.iter().position(|(m, _)| mine(m)) {
            return self.stash.remove(i);
        }
        loop {
            let f = self.next();
            if mine(&f.0) {
                return f;
            }
            self.stash.push(f);
        }
    }

    fn setup(&mut self, host: u32) {
        let plan = plan(&self.work, host);
        self.setup_with(plan);
    }

    fn setup_with(&mut self, plan: serde_json::Value) {
        if let Err(e) = self.try_setup(1, plan) {
            panic!("setup: {e:?}");
        }
    }

    /// `Setup` as request `req`: `Err` with the agent's `Error`.
    fn try_setup(&mut self, req: u64, plan: serde_json::Value) -> Result<(), Msg> {
        let msg = Msg::Setup {
            req,
            plan,
            disk_bytes: 64 << 20,
        };
        match self.request(req, &msg, &[]).pop() {
            Some((Msg::Done { .. }, _)) => Ok(()),
            Some((e, _)) => Err(e),
            None => unreachable!(),
        }
    }

    fn exec(&mut self, id: u64, argv: &[&str], wall: u64) {
        self.exec_capped(id, argv, wall, 1 << 20);
    }

    fn exec_capped(&mut self, id: u64, argv: &[&str], wall: u64, max_output_bytes: u64) {
        self.send(
            &Msg::Exec {
                id,
                argv: argv.iter().map(|s| s.to_string()).collect(),
                env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
                bounds: serde_json::to_value(bounds(wall)).unwrap(),
                max_output_bytes,
            },
            &[],
        );
    }

    fn collect(&mut self, id: u64) -> Ran {
        let mut ran = Ran::default();
        loop {
            let (m, data) = self.next_of(|m| {
                matches!(m, Msg::Output { id: i, .. } | Msg::Exited { id: i, .. } | Msg::ExecFailed { id: i, .. } if *i == id)
            });
            match m {
                Msg::Output {
                    stream: Stream::Stdout,
                    ..
                } => ran.stdout.extend(data),
                Msg::Output { .. } => ran.stderr.extend(data),
                Msg::Exited { status, .. } => {
                    ran.status = Some(status);
                    return ran;
                }
                Msg::ExecFailed { error, .. } => {
                    ran.failed = Some(error);
                    return ran;
                }
                _ => unreachable!(),
            }
        }
    }

    fn sh(&mut self, id: u64, script: &str) -> Ran {
        self.exec(id, &["/bin/sh", "-c", script], 20);
        self.collect(id)
    }

    /// Every frame answering file request `req`, up to its last.
    fn request(&mut self, req: u64, msg: &Msg, data: &[u8]) -> Vec<(Msg, Vec<u8>)> {
        self.send(msg, data);
        let mut got = Vec::new();
        loop {
            let f = self.next_of(|m| {
                matches!(m, Msg::Done { req: r } | Msg::StatReply { req: r, .. } | Msg::ReadData { req: r }
                    | Msg::ReadEnd { req: r, .. } | Msg::ListReply { req: r, .. } | Msg::Error { req: r, .. }
                    | Msg::FilesData { req: r } | Msg::FilesEnd { req: r } if *r == req)
            });
            let last = !matches!(
                f.0,
                Msg::ReadData { .. } | Msg::FilesData { .. } | Msg::ListReply { more: true, .. }
            );
            got.push(f);
            if last {
                return got;
            }
        }
    }

    /// Waits (bounded) for the agent to exit; its exit code.
    fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("the agent did not exit within {within:?}");
    }
}

impl Drop for Session {
    /// Hangs up first, so the agent tears its sandbox down (its cgroups
    /// with it) as it does when its host goes away; killed only if it
    /// lingers.
    fn drop(&mut self) {
        let _ = self.w.shutdown(std::net::Shutdown::Both);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn execs_and_files_through_the_channel() {
    if !can_run("the agent's exec and file service") {
        return;
    }
    let started = Instant::now();
    let mut s = Session::start();
    // Before `setup` there is no sandbox: refused, the agent serves on.
    s.exec(99, &["/bin/true"], 5);
    assert!(s.collect(99).failed.is_some());
    let host = host_id(0);
    s.setup(host);

    execs_run_apart_and_end(&mut s);
    a_file_goes_in_and_comes_back(&mut s);
    links_are_listed_never_followed(&mut s);
    the_files_api_through_the_channel(&mut s);
    a_watch_sees_the_workloads_changes(&mut s);
    parked_nothing_goes_out(&mut s);

    // Shut down: the agent ends cleanly and leaves nothing running.
    s.send(&Msg::Shutdown {}, &[]);
    assert_eq!(s.exit_code(Duration::from_secs(10)), Some(0));
    let left = Command::new("pgrep")
        .args(["-u", &host.to_string()])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "processes left: {left:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// Whether the agent sent anything within `within` (nothing is read).
fn anything_within(s: &Session, within: Duration) -> bool {
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(
        s.w.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
    nix::poll::poll(&mut fds, ms).unwrap() > 0
}

/// `Park`: `Done`, then nothing goes out — an exec's output waits — until
/// `Unpark`; a restored `Unpark` is answered with `Ready`, as a boot.
fn parked_nothing_goes_out(s: &mut Session) {
    assert!(s.stash.is_empty(), "{:?}", s.stash);
    s.exec(70, &["/bin/sh", "-c", "sleep 0.3; echo late"], 20);
    s.send(&Msg::Park { req: 71 }, &[]);
    let (m, _) = s.next();
    assert_eq!(m, Msg::Done { req: 71 }, "the first frame after `park`");
    assert!(
        !anything_within(s, Duration::from_millis(1500)),
        "a frame went out while parked"
    );
    s.send(&Msg::Unpark { restored: false }, &[]);
    let r = s.collect(70);
    assert_eq!(r.out(), "late\n", "{r:?}");
    assert_eq!(r.status, Some(Status::Code { code: 0 }));

    s.send(&Msg::Park { req: 72 }, &[]);
    assert_eq!(s.next().0, Msg::Done { req: 72 });
    s.send(&Msg::Unpark { restored: true }, &[]);
    match s.next().0 {
        Msg::Ready { proto, .. } => assert_eq!(proto, cordon_vm_proto::PROTOCOL),
        other => panic!("a restored unpark is answered with `ready`, not {other:?}"),
    }
    // It serves on.
    assert_eq!(s.sh(73, "echo on").out(), "on\n");
}

/// Exit codes, stdout and stderr apart, stdin, the wall bound, kill, two
/// execs at once, output past the cap.
fn execs_run_apart_and_end(s: &mut Session) {
    // Exit codes, stdout and stderr apart; the workload is not root.
    let r = s.sh(1, "uname -r; id -u; echo oops >&2; exit 3");
    assert_eq!(r.status, Some(Status::Code { code: 3 }), "{r:?}");
    let lines: Vec<String> = r.out().lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{r:?}");
    assert_eq!(
        lines[1],
        INSIDE.to_string(),
        "the workload runs as its own uid"
    );
    assert_eq!(r.stderr, b"oops\n");

    // stdin, in frames, then its end.
    s.exec(2, &["/bin/sh", "-c", "tr a-z A-Z; echo done"], 20);
    s.send(&Msg::Stdin { id: 2 }, b"hello ");
    s.send(&Msg::Stdin { id: 2 }, b"world\n");
    s.send(&Msg::StdinEnd { id: 2 }, &[]);
    let r = s.collect(2);
    assert_eq!(r.out(), "HELLO WORLD\ndone\n", "{r:?}");
    assert_eq!(r.status, Some(Status::Code { code: 0 }));

    // The wall bound.
    s.exec(3, &["/bin/sleep", "30"], 1);
    let r = s.collect(3);
    assert_eq!(r.status, Some(Status::TimedOut), "{r:?}");

    // Kill, and two execs at once: the second ends while the first runs.
    s.exec(4, &["/bin/sh", "-c", "echo started; exec sleep 30"], 20);
    s.exec(5, &["/bin/sh", "-c", "echo second"], 20);
    let r5 = s.collect(5);
    assert_eq!(r5.out(), "second\n", "{r5:?}");
    let first = s.next_of(|m| matches!(m, Msg::Output { id: 4, .. }));
    assert_eq!(first.1, b"started\n");
    let t = Instant::now();
    s.send(&Msg::Kill { id: 4 }, &[]);
    let r4 = s.collect(4);
    assert_eq!(r4.status, Some(Status::Signal { signal: 9 }), "{r4:?}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // Output past the cap is drained, not sent: one byte past it shows
    // the cut, and the command is never blocked on a full pipe.
    s.exec_capped(
        8,
        &["/bin/sh", "-c", "head -c 3000000 /dev/zero; echo end >&2"],
        20,
        1000,
    );
    let r = s.collect(8);
    assert_eq!(r.stdout.len(), 1001, "{:?}", r.status);
    assert_eq!(r.stderr, b"end\n");
    assert_eq!(r.status, Some(Status::Code { code: 0 }));
}

/// A file written in, read back (whole, and past a read's cap), stat-ed.
fn a_file_goes_in_and_comes_back(s: &mut Session) {
    // A file written in, read back, stat-ed and listed.
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    s.send(
        &Msg::WriteStart {
            req: 10,
            path: format!("{GUEST_WORK}/sub/data.bin"),
            mode: 0o640,
            size: body.len() as u64,
        },
        &[],
    );
    for chunk in body.chunks(100_000) {
        s.send(&Msg::WriteData { req: 10 }, chunk);
    }
    let got = s.next_of(|m| matches!(m, Msg::Done { req: 10 } | Msg::Error { req: 10, .. }));
    assert_eq!(got.0, Msg::Done { req: 10 });
    // The workload sees it, as its own.
    let r = s.sh(6, "stat -c '%u %a %s' sub/data.bin");
    assert_eq!(r.out(), format!("{INSIDE} 640 {}\n", body.len()), "{r:?}");
    let frames = s.request(
        11,
        &Msg::Read {
            req: 11,
            path: format!("{GUEST_WORK}/sub/data.bin"),
            max: 1 << 20,
        },
        &[],
    );
    let (bytes, end): (Vec<u8>, _) = (
        frames
            .iter()
            .filter(|(m, _)| matches!(m, Msg::ReadData { .. }))
            .flat_map(|(_, d)| d.clone())
            .collect(),
        frames.last().unwrap().0.clone(),
    );
    assert_eq!(
        end,
        Msg::ReadEnd {
            req: 11,
            size: body.len() as u64
        }
    );
    assert!(bytes == body, "the file read back differs");
    // Larger than the read's cap: its size, no bytes.
    let frames = s.request(
        19,
        &Msg::Read {
            req: 19,
            path: format!("{GUEST_WORK}/sub/data.bin"),
            max: 10,
        },
        &[],
    );
    assert_eq!(
        frames,
        [(
            Msg::ReadEnd {
                req: 19,
                size: body.len() as u64
            },
            vec![]
        )]
    );
    let st = s.request(
        12,
        &Msg::Stat {
            req: 12,
            path: format!("{GUEST_WORK}/sub/data.bin"),
        },
        &[],
    );
    match &st[0].0 {
        Msg::StatReply {
            stat: Some(stat), ..
        } => {
            assert_eq!(stat.kind, Kind::File);
            assert_eq!(stat.size, Some(body.len() as u64));
            assert_eq!(stat.mode, 0o640);
        }
        other => panic!("stat: {other:?}"),
    }
    let none = s.request(
        13,
        &Msg::Stat {
            req: 13,
            path: format!("{GUEST_WORK}/absent"),
        },
        &[],
    );
    assert_eq!(
        none[0].0,
        Msg::StatReply {
            req: 13,
            stat: None
        }
    );
}

/// A link the workload plants is listed as one and never followed, on a
/// read or a write; nothing outside the work dir is served.
fn links_are_listed_never_followed(s: &mut Session) {
    // A link the workload plants is listed as one and never followed.
    let r = s.sh(7, "ln -s /etc/passwd link && ln -s / sub/root");
    assert_eq!(r.status, Some(Status::Code { code: 0 }), "{r:?}");
    let listed = s.request(
        14,
        &Msg::List {
            req: 14,
            path: GUEST_WORK.into(),
        },
        &[],
    );
    let mut names: Vec<(String, Kind)> = Vec::new();
    for (m, _) in &listed {
        match m {
            Msg::ListReply { entries, .. } => {
                names.extend(entries.iter().map(|e| (e.name.clone(), e.kind)))
            }
            other => panic!("list: {other:?}"),
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        names,
        [
            ("link".to_string(), Kind::Symlink),
            ("sub".to_string(), Kind::Dir)
        ]
    );
    for (req, path) in [(15, "link"), (16, "sub/root/etc/passwd")] {
        let r = s.request(
            req,
            &Msg::Read {
                req,
                path: format!("{GUEST_WORK}/{path}"),
                max: 1 << 20,
            },
            &[],
        );
        match &r[..] {
            [(Msg::Error { kind, .. }, _)] => {
                assert_eq!(*kind, ErrKind::PathRefused, "{path}: {r:?}")
            }
            other => panic!("reading through the link `{path}`: {other:?}"),
        }
    }
    // Nor is a write carried through a linked parent.
    let r = s.request(
        17,
        &Msg::WriteStart {
            req: 17,
            path: format!("{GUEST_WORK}/sub/root/tmp/planted"),
            mode: 0o644,
            size: 0,
        },
        &[],
    );
    assert!(matches!(r[0].0, Msg::Error { .. }), "{r:?}");
    assert!(!Path::new("/tmp/planted").exists());
    // Outside the work dir.
    let r = s.request(
        18,
        &Msg::Read {
            req: 18,
            path: "/etc/passwd".into(),
            max: 100,
        },
        &[],
    );
    assert!(
        matches!(
            r[0].0,
            Msg::Error {
                kind: ErrKind::PathRefused,
                ..
            }
        ),
        "{r:?}"
    );
}

/// One files-API operation (a write's bytes in `WriteData` frames): its
/// answer, or the error frame.
fn files_op(
    s: &mut Session,
    req: u64,
    op: cordon_sandbox::FileOp,
) -> Result<cordon_sandbox::FileAnswer, Msg> {
    let mut head = op;
    let bytes = match &mut head {
        cordon_sandbox::FileOp::Write { data, .. } => std::mem::take(data),
        _ => Vec::new(),
    };
    s.send(
        &Msg::FilesOp {
            req,
            op: serde_json::to_value(&head).unwrap(),
            size: bytes.len() as u64,
        },
        &[],
    );
    if !bytes.is_empty() {
        s.send(&Msg::WriteData { req }, &bytes);
    }
    let mut json = Vec::new();
    loop {
        let (m, data) = s.next_of(|m| {
            matches!(m, Msg::FilesData { req: r } | Msg::FilesEnd { req: r } | Msg::Error { req: r, .. } if *r == req)
        });
        match m {
            Msg::FilesData { .. } => json.extend_from_slice(&data),
            Msg::FilesEnd { .. } => return Ok(serde_json::from_slice(&json).unwrap()),
            other => return Err(other),
        }
    }
}

/// The files API in the guest: a write (appended to), a listing to a
/// depth, a ranged read, a rename, a removal; links planted by the
/// workload (by `links_are_listed_never_followed`) never followed.
fn the_files_api_through_the_channel(s: &mut Session) {
    use cordon_sandbox::{FileAnswer, FileOp, WriteHow};
    let write = |path: &str, data: &[u8], how| FileOp::Write {
        path: path.into(),
        data: data.to_vec(),
        mode: 0o644,
        how,
    };
    assert_eq!(
        files_op(s, 40, write("api/a.txt", b"hello", WriteHow::Truncate)),
        Ok(FileAnswer::Done(true))
    );
    assert_eq!(
        files_op(s, 41, write("api/a.txt", b" world", WriteHow::Append)),
        Ok(FileAnswer::Done(true))
    );
    let read = files_op(
        s,
        42,
        FileOp::Read {
            path: format!("{GUEST_WORK}/api/a.txt"),
            offset: 6,
            len: 100,
        },
    );
    assert_eq!(
        read,
        Ok(FileAnswer::Read {
            data: b"world".to_vec(),
            size: 11
        })
    );
    let Ok(FileAnswer::Listing { entries, .. }) = files_op(
        s,
        43,
        FileOp::List {
            path: String::new(),
            depth: 3,
        },
    ) else {
        panic!("a listing");
    };
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert!(
        paths.contains(&"api/a.txt") && paths.contains(&"sub/root"),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.starts_with("sub/root/")),
        "a link followed: {paths:?}"
    );
    for (req, op) in [
        (
            44,
            FileOp::Read {
                path: "link".into(),
                offset: 0,
                len: 100,
            },
        ),
        (
            45,
            FileOp::List {
                path: "sub/root/etc".into(),
                depth: 0,
            },
        ),
        (
            46,
            write("sub/root/tmp/planted-by-api", b"x", WriteHow::Create),
        ),
        (
            47,
            FileOp::Mkdir {
                path: "sub/root/tmp/planted-dir".into(),
            },
        ),
        (
            48,
            FileOp::Rename {
                from: "api/a.txt".into(),
                to: "sub/root/tmp/planted-by-api".into(),
            },
        ),
        (
            49,
            FileOp::Remove {
                path: "sub/root/etc/hostname".into(),
                recursive: false,
            },
        ),
    ] {
        let got = files_op(s, req, op.clone());
        assert!(matches!(got, Err(Msg::Error { .. })), "{op:?}: {got:?}");
    }
    assert!(!Path::new("/tmp/planted-by-api").exists());
    assert!(!Path::new("/tmp/planted-dir").exists());
    assert_eq!(
        files_op(
            s,
            50,
            FileOp::Rename {
                from: "api/a.txt".into(),
                to: "api/b.txt".into()
            }
        ),
        Ok(FileAnswer::Done(true))
    );
    assert_eq!(
        files_op(
            s,
            51,
            FileOp::Remove {
                path: "api".into(),
                recursive: true
            }
        ),
        Ok(FileAnswer::Done(true))
    );
    assert_eq!(
        files_op(s, 52, FileOp::Stat { path: "api".into() }),
        Ok(FileAnswer::Stat(None))
    );
}

/// A watch in the guest: the workload's changes come as events until the
/// host stops it; a watch of a planted link is refused.
fn a_watch_sees_the_workloads_changes(s: &mut Session) {
    s.send(
        &Msg::WatchStart {
            req: 60,
            path: GUEST_WORK.into(),
            recursive: true,
        },
        &[],
    );
    // Until the watch is in place, a change would go unseen: an exec after
    // the start frame is read after it (one reader, in order).
    let r = s.sh(61, "mkdir -p w && echo x > w/f && mv w/f w/g");
    assert_eq!(r.status, Some(Status::Code { code: 0 }), "{r:?}");
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &cordon_sandbox::WatchEvent| e.event == cordon_sandbox::WatchKind::Renamed)
    {
        let (m, _) = s.next_of(|m| {
            matches!(
                m,
                Msg::WatchEvent { req: 60, .. }
                    | Msg::WatchEnd { req: 60, .. }
                    | Msg::Error { req: 60, .. }
            )
        });
        match m {
            Msg::WatchEvent { event, .. } => seen.push(serde_json::from_value(event).unwrap()),
            other => panic!("the watch ended early: {other:?} after {seen:?}"),
        }
    }
    let has = |kind, path: &str| seen.iter().any(|e| e.event == kind && e.path == path);
    assert!(has(cordon_sandbox::WatchKind::Created, "w"), "{seen:?}");
    s.send(&Msg::WatchStop { req: 60 }, &[]);
    let (end, _) = s.next_of(|m| matches!(m, Msg::WatchEnd { req: 60, .. }));
    assert!(matches!(end, Msg::WatchEnd { .. }), "{end:?}");
    s.send(
        &Msg::WatchStart {
            req: 62,
            path: format!("{GUEST_WORK}/sub/root"),
            recursive: false,
        },
        &[],
    );
    let (m, _) = s.next_of(|m| {
        matches!(
            m,
            Msg::WatchEvent { req: 62, .. }
                | Msg::WatchEnd { req: 62, .. }
                | Msg::Error { req: 62, .. }
        )
    });
    assert!(
        matches!(m, Msg::Error { .. }),
        "a watch through a link: {m:?}"
    );
}

#[test]
fn a_garbage_frame_ends_the_agent() {
    if !can_run("the agent's refusal of a malformed frame") {
        return;
    }
    let mut s = Session::start();
    s.setup(host_id(1));
    // A length the protocol refuses before reading anything behind it.
    s.w.write_all(&u32::MAX.to_be_bytes()).unwrap();
    s.w.write_all(&[0, 0, 0, 0]).unwrap();
    assert_eq!(s.exit_code(Duration::from_secs(10)), Some(1));
}

#[test]
fn a_host_sending_guest_frames_is_refused() {
    if !can_run("the agent's refusal of a guest frame from the host") {
        return;
    }
    let mut s = Session::start();
    s.send(&Msg::Done { req: 1 }, &[]);
    assert_eq!(s.exit_code(Duration::from_secs(10)), Some(1));
}

#[test]
fn a_host_that_goes_away_ends_the_agent() {
    if !can_run("the agent's end with its channel") {
        return;
    }
    let mut s = Session::start();
    s.setup(host_id(2));
    s.exec(1, &["/bin/sleep", "30"], 20);
    std::thread::sleep(Duration::from_millis(300));
    s.w.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(s.exit_code(Duration::from_secs(10)), Some(0));
}

#[test]
fn the_route_out_is_relayed_to_the_host() {
    if !can_run("the agent's egress relay") {
        return;
    }
    let mut s = Session::start();
    let mut plan = plan(&s.work, host_id(3));
    plan["proxy_port"] = serde_json::json!(3128);
    s.setup_with(plan);
    // The workload talks to its proxy port; the host answers for the proxy.
    s.exec(
        1,
        &[
            "/bin/bash",
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/3128; echo ping >&3; cat <&3",
        ],
        20,
    );
    let conn = match s.next_of(|m| matches!(m, Msg::ConnOpen { .. })).0 {
        Msg::ConnOpen { conn } => conn,
        _ => unreachable!(),
    };
    let mut got = Vec::new();
    while !got.ends_with(b"\n") {
        let (_, d) = s.next_of(|m| matches!(m, Msg::ConnData { conn: c } if *c == conn));
        got.extend(d);
    }
    assert_eq!(got, b"ping\n");
    s.send(&Msg::ConnData { conn }, b"pong\n");
    s.send(&Msg::ConnClose { conn }, &[]);
    let r = s.collect(1);
    assert_eq!(r.out(), "pong\n", "{r:?}");
    assert_eq!(r.status, Some(Status::Code { code: 0 }), "{r:?}");
    // The workload's side closed too.
    let closed = s.next_of(|m| matches!(m, Msg::ConnClose { .. }));
    assert_eq!(closed.0, Msg::ConnClose { conn });
    // Any other port stays closed: the proxy port is the only route.
    s.exec(
        2,
        &[
            "/bin/bash",
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/80 && echo connected",
        ],
        20,
    );
    let r = s.collect(2);
    assert_ne!(r.status, Some(Status::Code { code: 0 }), "{r:?}");
    assert!(!r.out().contains("connected"));
    assert!(!r.stderr.is_empty(), "bash says why: {r:?}");
}

const CA: &str = "-----BEGIN CERTIFICATE-----\nQ0FGT1JURVNU\n-----END CERTIFICATE-----\n";

/// The egress CA placed by `trust` before `setup`: the workload finds the
/// CA alone and the bundle (the image's, then the CA) at
/// `/run/cordon/trust`, and the bundle over the image's system bundle,
/// none of it writable; a plan that does not name what was placed, a
/// second `trust` and one after `setup` are refused.
#[test]
fn the_egress_ca_is_placed_before_setup_and_trusted_in_the_sandbox() {
    if !can_run("the agent's placing of the egress CA") {
        return;
    }
    let mut s = Session::start();
    let top = s.work.parent().unwrap().to_path_buf();
    // The sandbox's init reaches the trust directory as its own uid.
    std::fs::set_permissions(&top, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let trust = top.join("trust");
    let mut named = plan(&s.work, host_id(4));
    named["trust_dir"] = serde_json::json!(trust);
    // Named before anything was placed: refused, and the agent serves on.
    match s.try_setup(2, named.clone()) {
        Err(Msg::Error { kind, message, .. }) => {
            assert_eq!(kind, ErrKind::Refused);
            assert!(message.contains("nothing was placed"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let place = |req: u64, dir: &Path| Msg::Trust {
        req,
        dir: dir.display().to_string(),
        image_root: "/".into(),
        ca_pem: CA.into(),
    };
    let got = s.request(3, &place(3, &trust), &[]);
    assert!(matches!(got[..], [(Msg::Done { req: 3 }, _)]), "{got:?}");
    let got = s.request(4, &place(4, &top.join("again")), &[]);
    assert!(
        matches!(
            &got[..],
            [(
                Msg::Error {
                    kind: ErrKind::Refused,
                    ..
                },
                _
            )]
        ),
        "{got:?}"
    );
    // Placed, but a plan that does not name it is refused too.
    match s.try_setup(5, plan(&s.work, host_id(4))) {
        Err(Msg::Error { message, .. }) => assert!(message.contains("does not name"), "{message}"),
        other => panic!("{other:?}"),
    }
    s.try_setup(6, named).unwrap();
    let has_system =
        std::fs::symlink_metadata("/etc/ssl/certs/ca-certificates.crt").is_ok_and(|m| m.is_file());
    let r = s.sh(
        7,
        "cat /run/cordon/trust/egress-ca.pem; echo @@; tail -n 3 /run/cordon/trust/ca-certificates.crt; echo @@; \
         [ -f /etc/ssl/certs/ca-certificates.crt ] && tail -n 3 /etc/ssl/certs/ca-certificates.crt; echo @@; \
         echo x > /run/cordon/trust/egress-ca.pem && echo wrote; echo x > /etc/ssl/certs/ca-certificates.crt && echo wrote; true",
    );
    assert_eq!(r.status, Some(Status::Code { code: 0 }), "{r:?}");
    let out = r.out();
    let parts: Vec<&str> = out.split("@@\n").collect();
    assert_eq!(parts[0], CA, "{r:?}");
    assert_eq!(parts[1], CA, "the bundle ends with the CA: {r:?}");
    if has_system {
        assert_eq!(parts[2], CA, "the system bundle is the sandbox's: {r:?}");
    }
    assert!(!parts[3].contains("wrote"), "{r:?}");
    // The bundle begins with the image's (here the host's) own.
    let bundle = std::fs::read_to_string(trust.join("ca-certificates.crt")).unwrap();
    if has_system {
        let image = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap();
        assert!(bundle.starts_with(&image) && bundle.ends_with(CA));
    }
    let got = s.request(8, &place(8, &top.join("late")), &[]);
    match &got[..] {
        [(Msg::Error { kind, message, .. }, _)] => {
            assert_eq!(*kind, ErrKind::Refused);
            assert!(message.contains("already set up"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!top.join("again").exists() && !top.join("late").exists());
}

/// Writes `body` at `path` through the channel: `Done`, or the error.
fn write_in(s: &mut Session, req: u64, path: &str, body: &[u8]) -> Msg {
    s.send(
        &Msg::WriteStart {
            req,
            path: path.to_string(),
            mode: 0o400,
            size: body.len() as u64,
        },
        &[],
    );
    if !body.is_empty() {
        s.send(&Msg::WriteData { req }, body);
    }
    s.next_of(|m| matches!(m, Msg::Done { req: r } | Msg::Error { req: r, .. } if *r == req))
        .0
}

/// A plan naming a secrets directory: the agent makes it (refusing one
/// already there), a write to `/run/cordon/secrets/…` lands there and the
/// workload reads it and can neither change nor remove it; a plan naming
/// none refuses such a write, and nothing lands in the work dir; the
/// directory goes with the agent's session.
#[test]
fn a_secret_is_written_where_the_plan_binds_it_and_held_read_only() {
    if !can_run("the agent's secrets directory") {
        return;
    }
    // No secrets directory named: a write there is refused.
    let mut s = Session::start();
    s.setup(host_id(5));
    match write_in(&mut s, 2, "/run/cordon/secrets/a/key", b"v") {
        Msg::Error { kind, message, .. } => {
            assert_eq!(kind, ErrKind::PathRefused);
            assert!(message.contains("names no secrets"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let r = s.sh(3, "ls -A /run/cordon/secrets 2>&1; ls -A");
    assert!(!r.out().contains("key"), "{r:?}");
    drop(s);

    let mut s = Session::start();
    let top = s.work.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&top, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let secrets = top.join("secrets");
    // One already there is never used.
    std::fs::create_dir(&secrets).unwrap();
    let mut named = plan(&s.work, host_id(6));
    named["secrets_dir"] = serde_json::json!(secrets);
    match s.try_setup(2, named.clone()) {
        Err(Msg::Error { message, .. }) => assert!(message.contains("exists"), "{message}"),
        other => panic!("{other:?}"),
    }
    drop(s);

    let mut s = Session::start();
    let top = s.work.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&top, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let secrets = top.join("secrets");
    let mut named = plan(&s.work, host_id(6));
    named["secrets_dir"] = serde_json::json!(secrets);
    s.try_setup(2, named).unwrap();
    assert_eq!(
        write_in(&mut s, 3, "/run/cordon/secrets/a/key", b"s3cr3t"),
        Msg::Done { req: 3 }
    );
    let r = s.sh(
        4,
        "cat /run/cordon/secrets/a/key; echo; (echo x > /run/cordon/secrets/a/key) 2>/dev/null && echo WROTE; \
         rm -f /run/cordon/secrets/a/key 2>/dev/null && echo REMOVED; cat /run/cordon/secrets/a/key; echo; ls -A",
    );
    assert_eq!(r.out(), "s3cr3t\ns3cr3t\n", "{r:?}");
    let meta = std::fs::metadata(secrets.join("a/key")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o440));
    s.send(&Msg::Shutdown {}, &[]);
    assert_eq!(s.exit_code(Duration::from_secs(10)), Some(0));
    assert!(
        !secrets.exists(),
        "the secrets directory outlived the session"
    );
}
