//! The first command as the policy sees it: `argv[0]` found and
//! canonicalised in the filesystem it will run in (a [`FsView`]: the host's
//! own, or an image's root with the work dir bound in).

use std::path::{Path, PathBuf};

use crate::view::FsView;

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
    #[error("`{0}` is not in the image: no program of that name in its PATH ({IMAGE_PATH}). Install it into the image the spec names (`cordon image` builds and imports images; `image: host` is this machine's /usr), or, if it is there outside the PATH, name it by its absolute path")]
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

/// Resolves `argv0` as the sandbox will, in `fs`: a bare name through
/// [`IMAGE_PATH`], an absolute path as is; then canonicalises it (links
/// resolve inside `fs`).
pub fn resolve(fs: &dyn FsView, argv0: &str) -> Result<Canonical, CommandError> {
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
            .find(|p| fs.metadata(p).is_ok_and(|m| m.is_file()))
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
    let command = fs.canonical(parent).map_err(unresolvable)?.join(name);
    let target = fs.canonical(&command).map_err(unresolvable)?;
    Ok(Canonical {
        command: utf8(&command)?,
        command_target: utf8(&target)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{HostFs, RootedFs};

    #[test]
    fn a_bare_name_and_a_linked_directory_are_canonical() {
        let sh = resolve(&HostFs, "sh").unwrap_or_else(|e| panic!("{e}"));
        assert!(sh.command.starts_with("/usr/") || sh.command.starts_with("/bin/"));
        // `/bin` is a link to `/usr/bin` on merged-/usr systems: `command`
        // names the real directory, so a rule on `/usr/bin/X` sees `/bin/X`.
        if Path::new("/bin").read_link().is_ok() {
            let c = resolve(&HostFs, "/bin/sh").unwrap_or_else(|e| panic!("{e}"));
            assert!(c.command.starts_with("/usr/bin/"), "{c:?}");
        }
    }

    #[test]
    fn in_an_image_links_resolve_inside_it() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/python3.11"), b"").unwrap();
        std::os::unix::fs::symlink("python3.11", root.join("usr/bin/python3")).unwrap();
        std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
        // An absolute link points into the image, not at the host's file.
        std::os::unix::fs::symlink("/usr/bin/python3.11", root.join("usr/bin/py")).unwrap();
        let image = RootedFs::new(root);
        let c = resolve(&image, "python3").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.command, "/usr/bin/python3");
        assert_eq!(c.command_target, "/usr/bin/python3.11");
        let c = resolve(&image, "/bin/py").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (c.command.as_str(), c.command_target.as_str()),
            ("/usr/bin/py", "/usr/bin/python3.11")
        );
        // A link climbing out stays inside.
        std::os::unix::fs::symlink("../../../../etc/passwd", root.join("usr/bin/esc")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), b"image's").unwrap();
        let c = resolve(&image, "/usr/bin/esc").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.command_target, "/etc/passwd");
        assert!(matches!(
            resolve(&image, "sh"),
            Err(CommandError::NotFound(_))
        ));
    }

    #[test]
    fn relative_and_missing_commands_are_refused() {
        assert_eq!(
            resolve(&HostFs, "./x"),
            Err(CommandError::Relative("./x".to_string()))
        );
        assert!(matches!(
            resolve(&HostFs, "cordon-no-such-program"),
            Err(CommandError::NotFound(_))
        ));
        assert_eq!(resolve(&HostFs, ""), Err(CommandError::Empty));
    }
}
