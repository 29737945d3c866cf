//! The host's secret stores: the concrete [`SecretProvider`]s a host
//! configures (`--secrets-dir`, `secrets: {dir: ...}` or `{command: ...}`).
//! The trait, the value and where a secret lands are the protocol's
//! ([`cordon_sandbox::secrets`]); the router reads through the trait.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use cordon_sandbox::secrets::MAX_SECRET_BYTES;
use cordon_sandbox::{SecretError, SecretName, SecretProvider, SecretValue};

/// Secrets as files under a host directory: `team-a/db-password` is
/// `ROOT/team-a/db-password`. Links anywhere below the root are refused, so
/// a secret name cannot be pointed at a file outside it.
#[derive(Debug, Clone)]
pub struct DirectorySecrets {
    root: PathBuf,
}

impl DirectorySecrets {
    pub fn new(root: impl Into<PathBuf>) -> DirectorySecrets {
        DirectorySecrets { root: root.into() }
    }

    fn walk(&self, name: &SecretName) -> Result<PathBuf, SecretError> {
        let refused = |reason: String| SecretError::Refused {
            name: name.to_string(),
            reason,
        };
        let mut path: PathBuf = self.root.clone();
        let segments: Vec<&str> = name.as_str().split('/').collect();
        for (i, seg) in segments.iter().enumerate() {
            path.push(seg);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(SecretError::Missing {
                        name: name.to_string(),
                    })
                }
                Err(e) => return Err(refused(e.to_string())),
            };
            let last = i + 1 == segments.len();
            if meta.file_type().is_symlink() {
                return Err(refused(format!(
                    "`{}` is a symbolic link; store the secret as a regular file",
                    show(&path)
                )));
            }
            if last && !meta.is_file() {
                return Err(refused(format!("`{}` is not a regular file", show(&path))));
            }
            if !last && !meta.is_dir() {
                return Err(SecretError::Missing {
                    name: name.to_string(),
                });
            }
            if last && meta.len() > MAX_SECRET_BYTES {
                return Err(refused("it is larger than 1 MiB".into()));
            }
        }
        Ok(path)
    }
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

impl SecretProvider for DirectorySecrets {
    fn read(&self, name: &SecretName) -> Result<SecretValue, SecretError> {
        let path = self.walk(name)?;
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_SECRET_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| SecretError::Refused {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        if bytes.len() as u64 > MAX_SECRET_BYTES {
            return Err(SecretError::Refused {
                name: name.to_string(),
                reason: "it is larger than 1 MiB".into(),
            });
        }
        Ok(SecretValue::new(bytes))
    }
}

/// Secrets from a command the host names: `COMMAND... NAME` is run (no
/// shell, stdin closed) and its standard output, at most 1 MiB, is the
/// value. Exit 0: the value; exit 2: the store has no such secret; any
/// other end, or more than [`CommandSecrets::TIMEOUT`]: refused, with the
/// first line of its standard error.
#[derive(Debug, Clone)]
pub struct CommandSecrets {
    argv: Vec<String>,
}

impl CommandSecrets {
    /// How long the command may take for one secret.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

    /// `argv` must name a program (an absolute path).
    pub fn new(argv: Vec<String>) -> Result<CommandSecrets, String> {
        match argv.first() {
            Some(p) if Path::new(p).is_absolute() => Ok(CommandSecrets { argv }),
            Some(p) => Err(format!(
                "the secret command `{p}` is not an absolute path; name the program by its full path"
            )),
            None => Err("the secret command is empty; name a program".into()),
        }
    }
}

impl SecretProvider for CommandSecrets {
    fn read(&self, name: &SecretName) -> Result<SecretValue, SecretError> {
        use std::process::{Command, Stdio};
        let refused = |reason: String| SecretError::Refused {
            name: name.to_string(),
            reason,
        };
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .arg(name.as_str())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| refused(format!("cannot run `{}`: {e}", self.argv[0])))?;
        let out = child.stdout.take();
        let err = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(o) = out {
                let _ = o.take(MAX_SECRET_BYTES + 1).read_to_end(&mut bytes);
            }
            bytes
        });
        let err_reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(e) = err {
                let _ = e.take(4096).read_to_end(&mut bytes);
            }
            bytes
        });
        let deadline = std::time::Instant::now() + CommandSecrets::TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(refused(format!(
                        "`{}` did not answer within {} seconds",
                        self.argv[0],
                        CommandSecrets::TIMEOUT.as_secs()
                    )));
                }
            }
        };
        let bytes = reader.join().unwrap_or_default();
        let stderr = err_reader.join().unwrap_or_default();
        let first = String::from_utf8_lossy(&stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        // Past the bound the reader stopped (and the command may have died
        // of the closed pipe): the size is the answer either way.
        if bytes.len() as u64 > MAX_SECRET_BYTES {
            return Err(refused("it is larger than 1 MiB".into()));
        }
        match status.code() {
            Some(0) => Ok(SecretValue::new(bytes)),
            Some(2) => Err(SecretError::Missing {
                name: name.to_string(),
            }),
            _ => Err(refused(format!(
                "`{}` ended with {status}{}",
                self.argv[0],
                if first.is_empty() {
                    String::new()
                } else {
                    format!(": {first}")
                }
            ))),
        }
    }
}
