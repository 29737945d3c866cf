//! The first command as the policy sees it: `argv[0]` found and
//! canonicalised where it will run (the built-in `host` image is the host's
//! own system directories).

use std::path::{Path, PathBuf};

/// The image's `PATH`, searched for a bare `argv[0]`.
pub const IMAGE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `command` (as invoked, directory links resolved) and `command_target`
/// (every link resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    pub command: String,
    pub command_target: String,
}

/// Why `argv[0]` cannot be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("the command is empty")]
    Empty,
    #[error("`{0}` is not found in the image's PATH ({IMAGE_PATH}); name it by its absolute path")]
    NotFound(String),
    #[error("`{0}` is a relative path; name the command by its absolute path or a bare name looked up in {IMAGE_PATH}")]
    Relative(String),
    #[error("`{path}` cannot be resolved: {reason}")]
    Unresolvable { path: String, reason: String },
}

fn utf8(p: &Path) -> Result<String, CommandError> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| CommandError::Unresolvable {
            path: p.display().to_string(),
            reason: "it is not UTF-8".into(),
        })
}

/// Resolves `argv0` as the sandbox will: a bare name through
/// [`IMAGE_PATH`], an absolute path as is; then canonicalises it.
pub fn resolve(argv0: &str) -> Result<Canonical, CommandError> {
    if argv0.is_empty() {
        return Err(CommandError::Empty);
    }
    let invoked: PathBuf = if argv0.starts_with('/') {
        PathBuf::from(argv0)
    } else if argv0.contains('/') {
        return Err(CommandError::Relative(argv0.to_string()));
    } else {
        IMAGE_PATH
            .split(':')
            .map(|d| Path::new(d).join(argv0))
            .find(|p| p.is_file())
            .ok_or_else(|| CommandError::NotFound(argv0.to_string()))?
    };
    let unresolvable = |e: std::io::Error| CommandError::Unresolvable {
        path: invoked.display().to_string(),
        reason: e.to_string(),
    };
    let lexical = cordon_policy::canon::fs_path(&utf8(&invoked)?).map_err(|e| {
        CommandError::Unresolvable {
            path: argv0.to_string(),
            reason: e.to_string(),
        }
    })?;
    let lexical = PathBuf::from(lexical);
    let name = lexical
        .file_name()
        .ok_or_else(|| CommandError::Unresolvable {
            path: argv0.to_string(),
            reason: "it names a directory".into(),
        })?;
    let parent = lexical.parent().unwrap_or(Path::new("/"));
    let command = parent.canonicalize().map_err(unresolvable)?.join(name);
    let target = command.canonicalize().map_err(unresolvable)?;
    Ok(Canonical {
        command: utf8(&command)?,
        command_target: utf8(&target)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_and_a_linked_directory_are_canonical() {
        let sh = resolve("sh").unwrap_or_else(|e| panic!("{e}"));
        assert!(sh.command.starts_with("/usr/") || sh.command.starts_with("/bin/"));
        // `/bin` is a link to `/usr/bin` on merged-/usr systems: `command`
        // names the real directory, so a rule on `/usr/bin/X` sees `/bin/X`.
        if Path::new("/bin").read_link().is_ok() {
            let c = resolve("/bin/sh").unwrap_or_else(|e| panic!("{e}"));
            assert!(c.command.starts_with("/usr/bin/"), "{c:?}");
        }
    }

    #[test]
    fn relative_and_missing_commands_are_refused() {
        assert_eq!(
            resolve("./x"),
            Err(CommandError::Relative("./x".to_string()))
        );
        assert!(matches!(
            resolve("cordon-no-such-program"),
            Err(CommandError::NotFound(_))
        ));
        assert_eq!(resolve(""), Err(CommandError::Empty));
    }
}
