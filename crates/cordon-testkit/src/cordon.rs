//! The `cordon` binary as a test runs it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// An absolute directory that holds no `cordon/config.yaml`.
pub const NO_USER_CONFIG: &str = "/nonexistent/cordon-test-has-no-user-config";

/// The built `cordon` binary and the environment a test gives it: every
/// invocation through it gets the same variables.
///
/// cordon-cli's own integration tests name the binary with
/// `Cordon::new(env!("CARGO_BIN_EXE_cordon"))`; another crate's tests
/// find it in their target directory with [`Cordon::built`].
#[derive(Debug, Clone)]
pub struct Cordon {
    bin: PathBuf,
    env: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
}

impl Cordon {
    /// The binary at `bin`, run with no `CORDON_MIN_ISOLATION` of the
    /// caller's environment and none of the user's host configuration
    /// (`XDG_CONFIG_HOME` names a directory with none in it): a test says
    /// the floor it means, whatever `cordon setup` recorded on the machine.
    pub fn new(bin: impl Into<PathBuf>) -> Cordon {
        Cordon {
            bin: bin.into(),
            env: Vec::new(),
            dir: None,
        }
        .env_remove("CORDON_MIN_ISOLATION")
        .env("XDG_CONFIG_HOME", NO_USER_CONFIG)
    }

    /// The `cordon` built beside this test binary
    /// (`target/<profile>/deps/<test>` → `target/<profile>/cordon`), for the
    /// tests of crates other than cordon-cli. Panics, saying how to build
    /// it, if it is not there.
    pub fn built() -> Cordon {
        let exe = std::env::current_exe().expect("the test binary's path");
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("cordon"))
            .filter(|b| b.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "no `cordon` beside {} (`cargo build -p cordon-cli` builds it)",
                    exe.display()
                )
            });
        Cordon::new(bin)
    }

    /// The binary's path.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Every invocation gets `key=value`.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Cordon {
        self.env
            .push((key.as_ref().into(), Some(value.as_ref().into())));
        self
    }

    /// Every invocation gets each of `vars`.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Cordon {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// No invocation inherits `key`.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Cordon {
        self.env.push((key.as_ref().into(), None));
        self
    }

    /// Every invocation runs in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Cordon {
        self.dir = Some(dir.into());
        self
    }

    /// `cordon ARGS` with this environment, to add to (stdin, more
    /// variables) and run.
    pub fn command<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args);
        for (k, v) in &self.env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        c
    }

    /// Runs `cordon ARGS` to its end with no stdin: (exit code or -1,
    /// stdout, stderr).
    pub fn run<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> (i32, String, String) {
        self.run_env(args, &[] as &[(&str, &str)])
    }

    /// [`Cordon::run`] with `env` added for this invocation.
    pub fn run_env<S: AsRef<OsStr>, K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &self,
        args: impl IntoIterator<Item = S>,
        env: &[(K, V)],
    ) -> (i32, String, String) {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        output(c.stdin(Stdio::null()).output().expect("run cordon"))
    }

    /// `cordon run ARGS -- /bin/sh -c SCRIPT`.
    pub fn sh(&self, args: &[&str], script: &str) -> (i32, String, String) {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend(["--", "/bin/sh", "-c", script]);
        self.run(all)
    }
}

/// An ended process as (exit code or -1, stdout, stderr).
pub fn output(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
