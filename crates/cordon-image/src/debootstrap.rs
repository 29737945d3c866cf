//! Building an image with `debootstrap --variant=minbase`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use crate::ImageError;

/// The default suite.
pub const DEFAULT_SUITE: &str = "bookworm";

/// The mirror used when neither `$CORDON_DEBIAN_MIRROR` nor apt's sources
/// name one.
pub const FALLBACK_MIRROR: &str = "http://deb.debian.org/debian";

/// What `build_debootstrap` installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebootstrapOpts {
    /// Debian suite (`bookworm`, `trixie`, ...).
    pub suite: String,
    /// `None`: the configured Debian mirror ([`configured_mirror`]).
    pub mirror: Option<String>,
    /// Extra packages (`--include`).
    pub include: Vec<String>,
    /// The `debootstrap` program; `None` looks it up on `PATH`, then in
    /// `/usr/sbin` and `/sbin`.
    pub program: Option<PathBuf>,
}

impl Default for DebootstrapOpts {
    fn default() -> Self {
        DebootstrapOpts {
            suite: DEFAULT_SUITE.into(),
            mirror: None,
            include: Vec::new(),
            program: None,
        }
    }
}

fn ok_word(s: &str, extra: &[char]) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || extra.contains(&c))
}

impl DebootstrapOpts {
    /// Refuses a suite, package or mirror that could be read as another
    /// argument or option of debootstrap.
    pub(crate) fn validate(&self, mirror: &str) -> Result<(), ImageError> {
        if !ok_word(&self.suite, &['-']) {
            return Err(ImageError::BadOption {
                what: "suite",
                value: self.suite.clone(),
                help: "a Debian suite name such as `bookworm`",
            });
        }
        for p in &self.include {
            if !ok_word(p, &['+', '-', '.']) {
                return Err(ImageError::BadOption {
                    what: "package",
                    value: p.clone(),
                    help: "Debian package names: lowercase letters, digits, `+`, `-`, `.`",
                });
            }
        }
        let scheme_ok = ["http://", "https://", "file:///"]
            .iter()
            .any(|s| mirror.starts_with(s));
        if !scheme_ok || mirror.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ImageError::BadOption {
                what: "mirror",
                value: mirror.into(),
                help: "an http://, https:// or file:/// URL of a Debian archive",
            });
        }
        Ok(())
    }
}

/// The configured Debian mirror for `suite`: `$CORDON_DEBIAN_MIRROR`, else
/// the first apt source (`/etc/apt/sources.list.d/*.sources` in name order,
/// then `/etc/apt/sources.list`) that offers `suite` with the `main`
/// component, else [`FALLBACK_MIRROR`]. Requiring the suite and `main` keeps
/// a security archive or a third-party repository from being picked.
pub fn configured_mirror(suite: &str) -> String {
    if let Some(m) = std::env::var("CORDON_DEBIAN_MIRROR")
        .ok()
        .filter(|m| !m.trim().is_empty())
    {
        return m.trim().to_string();
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir("/etc/apt/sources.list.d")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sources"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    for f in &files {
        if let Some(m) = std::fs::read_to_string(f)
            .ok()
            .and_then(|t| mirror_from_deb822(&t, suite))
        {
            return m;
        }
    }
    std::fs::read_to_string("/etc/apt/sources.list")
        .ok()
        .and_then(|t| mirror_from_one_line(&t, suite))
        .unwrap_or_else(|| FALLBACK_MIRROR.to_string())
}

/// The first `URIs:` of a deb822 stanza with `Types: deb`, `suite` among its
/// `Suites:` and `main` among its `Components:`.
pub(crate) fn mirror_from_deb822(text: &str, suite: &str) -> Option<String> {
    for stanza in text.split("\n\n") {
        let field = |key: &str| {
            stanza
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(key)
                        .then(|| v.trim().to_string())
                })
        };
        let has = |key: &str, want: &str| {
            field(key).is_some_and(|v| v.split_whitespace().any(|w| w == want))
        };
        if has("Types", "deb")
            && has("Suites", suite)
            && has("Components", "main")
            && field("Enabled").is_none_or(|v| v != "no")
        {
            if let Some(uri) =
                field("URIs").and_then(|v| v.split_whitespace().next().map(String::from))
            {
                return Some(uri);
            }
        }
    }
    None
}

/// The URI of the first `deb [options] URI suite components...` line of a
/// one-line-style sources.list with `suite` and `main`.
pub(crate) fn mirror_from_one_line(text: &str, suite: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']')?.1,
            None => rest,
        };
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(s)) = (words.next(), words.next()) else {
            continue;
        };
        if s == suite && words.any(|c| c == "main") {
            return Some(uri.to_string());
        }
    }
    None
}

/// `program`, or `debootstrap` on `PATH` or in the sbin directories.
pub(crate) fn find_program(program: Option<&Path>) -> Result<PathBuf, ImageError> {
    if let Some(p) = program {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(ImageError::DebootstrapMissing)
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("debootstrap"))
        .find(|p| p.is_file())
        .ok_or(ImageError::DebootstrapMissing)
}

/// Runs debootstrap into `target`, sending every output line (stdout and
/// stderr, as they arrive) to `progress`. Errors when it does not exit 0,
/// with the last lines it printed.
pub(crate) fn run(
    program: &Path,
    opts: &DebootstrapOpts,
    mirror: &str,
    target: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    let mut cmd = Command::new(program);
    cmd.arg("--variant=minbase");
    if !opts.include.is_empty() {
        cmd.arg(format!("--include={}", opts.include.join(",")));
    }
    cmd.arg(&opts.suite)
        .arg(target)
        .arg(mirror)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn_err = |source: std::io::Error| ImageError::Io {
        step: "start",
        path: program.to_path_buf(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_err)?;
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        }));
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        }));
    }
    drop(tx);
    let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    for line in rx {
        progress(&line);
        if tail.len() == 5 {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child.wait().map_err(spawn_err)?;
    if status.success() {
        Ok(())
    } else {
        Err(ImageError::DebootstrapFailed {
            status: status.to_string(),
            tail: tail.into_iter().collect::<Vec<_>>().join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_is_the_first_source_with_the_suite_and_main() {
        let deb822 = "Types: deb\n# http://snapshot.debian.org/archive/debian/2025\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n";
        assert_eq!(
            mirror_from_deb822(deb822, "bookworm").as_deref(),
            Some("http://mirror.example/debian")
        );
        // A security archive or a third-party repository is not a mirror.
        let other = "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\nComponents: stable\n\nTypes: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        assert_eq!(mirror_from_deb822(other, "bookworm"), None);
        let list = "# deb http://old.example/debian bookworm main\ndeb-src http://src.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main contrib\n";
        assert_eq!(
            mirror_from_one_line(list, "bookworm").as_deref(),
            Some("http://m.example/debian")
        );
        assert_eq!(mirror_from_one_line(list, "trixie"), None);
    }

    #[test]
    fn options_that_could_be_read_as_arguments_are_refused() {
        let ok = DebootstrapOpts {
            include: vec!["python3".into(), "libstdc++6".into()],
            ..Default::default()
        };
        assert!(ok.validate("http://deb.debian.org/debian").is_ok());
        for bad in [
            DebootstrapOpts {
                suite: "--foreign".into(),
                ..Default::default()
            },
            DebootstrapOpts {
                include: vec!["a,b".into()],
                ..Default::default()
            },
            DebootstrapOpts {
                include: vec!["--exclude=x".into()],
                ..Default::default()
            },
        ] {
            assert!(
                bad.validate("http://deb.debian.org/debian").is_err(),
                "{bad:?}"
            );
        }
        assert!(ok.validate("--keyring=/x").is_err());
        assert!(ok.validate("http://a b").is_err());
    }
}
