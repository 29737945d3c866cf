//! A private Docker Engine for a test: Debian's `dockerd` with its own
//! data root, exec root, pid file and socket, no bridge and no iptables
//! rules, its own containerd (in its own namespace), stopped when the
//! [`Dockerd`] is dropped — on a panic too — with nothing left mounted.
//!
//! Without root or `dockerd` a test skips loudly; with `CI=true` that is a
//! failure (`.ci/run` installs `docker.io`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{is_root, skip};

fn dockerd_bin() -> Option<PathBuf> {
    // Debian's engine; never a newer one elsewhere on PATH.
    let debian = Path::new("/usr/sbin/dockerd");
    debian.is_file().then(|| debian.to_path_buf())
}

/// One running engine of the test's own.
pub struct Dockerd {
    pub dir: tempfile::TempDir,
    bin: PathBuf,
    /// `None` while stopped ([`Dockerd::stop`]).
    child: Option<Child>,
}

impl Dockerd {
    /// Starts an engine for `case`, or says loudly why not (`None`).
    pub fn start(case: &str) -> Option<Dockerd> {
        let missing = match (is_root(), dockerd_bin()) {
            (true, Some(bin)) => return Some(Dockerd::spawn(&bin)),
            (false, _) => "a Docker Engine of the test's own needs root",
            (true, None) => "`/usr/sbin/dockerd` is not installed (`apt-get install docker.io`)",
        };
        skip(case, missing);
        None
    }

    fn spawn(bin: &Path) -> Dockerd {
        let dir = tempfile::Builder::new()
            .prefix("cordon-dockerd-")
            .tempdir_in("/var/tmp")
            .expect("a directory for dockerd");
        let mut engine = Dockerd {
            dir,
            bin: bin.to_path_buf(),
            child: None,
        };
        engine.launch();
        engine
    }

    /// Starts `dockerd` over this engine's directory (its data root, exec
    /// root and socket) and waits until it answers.
    fn launch(&mut self) {
        let d = self.dir.path();
        let ns = format!(
            "cordon-test-{}",
            d.file_name().unwrap().to_string_lossy().replace('.', "")
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("dockerd.log"))
            .expect("dockerd's log");
        let child = Command::new(&self.bin)
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", d.join("docker.sock").display()))
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .args(["--containerd-namespace", &ns])
            .args(["--containerd-plugins-namespace", &format!("{ns}-plugins")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        self.child = Some(child);
        let started = Instant::now();
        while self.get("/_ping").as_deref() != Some("OK") {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "dockerd did not answer within 60 s:\n{}",
                std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the engine (as a machine going away), keeping its directory:
    /// [`Dockerd::restart`] brings it back with what it held.
    pub fn stop(&mut self) {
        self.halt();
    }

    /// Starts the engine again on the same data root and socket.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the engine is running");
        self.launch();
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("docker.sock")
    }

    /// What cordon is pointed at (`CORDON_DOCKER_HOST`).
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// A GET on the Engine API; the body, if it answered 200.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut s = UnixStream::connect(self.socket()).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200").then(|| body.to_string())
    }

    /// Every container on the engine, running or not: (name, labels).
    pub fn containers(&self) -> Vec<(String, serde_json::Value)> {
        let body = self
            .get("/containers/json?all=1")
            .expect("the engine lists its containers");
        let list: serde_json::Value = serde_json::from_str(&body).expect("a JSON list");
        list.as_array()
            .expect("a JSON list")
            .iter()
            .map(|c| {
                (
                    c["Names"][0].as_str().unwrap_or("").to_string(),
                    c["Labels"].clone(),
                )
            })
            .collect()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Dockerd {
    /// Stops `dockerd` and its containerd, and unmounts what they left.
    fn halt(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its containerd, if it outlived it.
        let cpid = self.dir.path().join("exec/containerd/containerd.pid");
        if let Ok(p) = std::fs::read_to_string(cpid) {
            let p = p.trim();
            if !p.is_empty() && Path::new(&format!("/proc/{p}")).exists() {
                let _ = Command::new("kill").args(["-KILL", p]).status();
            }
        }
        // Nothing of it stays mounted (deepest first), so the directory
        // goes and no mount points into a removed tree.
        let root = self.dir.path().display().to_string();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(String::from))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
    }
}
