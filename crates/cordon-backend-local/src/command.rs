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

/// Canonicalises `p` as if `root` were `/`: links inside resolve within
/// `root` (`openat2` with `RESOLVE_IN_ROOT`), and the result is the path
/// the kernel reached, read back and made relative to `root` again.
fn canonical_in(root: &Path, p: &Path) -> std::io::Result<PathBuf> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let rel = p.strip_prefix("/").unwrap_or(p);
    let fd = openat2(
        &root_fd,
        if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        },
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )?;
    let reached = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))?;
    let root_real = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&root_fd)
    ))?;
    match reached.strip_prefix(&root_real) {
        Ok(rest) => Ok(Path::new("/").join(rest)),
        Err(_) => Err(std::io::Error::other("the path resolved outside the image")),
    }
}

/// Resolves `argv0` as the sandbox will: a bare name through
/// [`IMAGE_PATH`], an absolute path as is; then canonicalises it. With
/// `image`, inside that image's root (its links resolve within it).
pub fn resolve_in(image: Option<&Path>, argv0: &str) -> Result<Canonical, CommandError> {
    let Some(root) = image else {
        return resolve(argv0);
    };
    let in_image = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    resolve_with(
        argv0,
        &|p| {
            canonical_in(root, p)
                .is_ok_and(|real| std::fs::metadata(in_image(&real)).is_ok_and(|m| m.is_file()))
        },
        &|p| canonical_in(root, p),
    )
}

/// Resolves `argv0` as the sandbox will: a bare name through
/// [`IMAGE_PATH`], an absolute path as is; then canonicalises it.
pub fn resolve(argv0: &str) -> Result<Canonical, CommandError> {
    resolve_with(argv0, &|p| p.is_file(), &|p| p.canonicalize())
}

/// The resolution, over a filesystem view: `is_file` for the `PATH`
/// search, `canonical` to resolve links.
fn resolve_with(
    argv0: &str,
    is_file: &dyn Fn(&Path) -> bool,
    canonical: &dyn Fn(&Path) -> std::io::Result<PathBuf>,
) -> Result<Canonical, CommandError> {
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
            .find(|p| is_file(p))
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
    let command = canonical(parent).map_err(unresolvable)?.join(name);
    let target = canonical(&command).map_err(unresolvable)?;
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
    fn in_an_image_links_resolve_inside_it() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/python3.11"), b"").unwrap();
        std::os::unix::fs::symlink("python3.11", root.join("usr/bin/python3")).unwrap();
        std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
        // An absolute link points into the image, not at the host's file.
        std::os::unix::fs::symlink("/usr/bin/python3.11", root.join("usr/bin/py")).unwrap();
        let c = resolve_in(Some(root), "python3").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.command, "/usr/bin/python3");
        assert_eq!(c.command_target, "/usr/bin/python3.11");
        let c = resolve_in(Some(root), "/bin/py").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (c.command.as_str(), c.command_target.as_str()),
            ("/usr/bin/py", "/usr/bin/python3.11")
        );
        // A link climbing out stays inside.
        std::os::unix::fs::symlink("../../../../etc/passwd", root.join("usr/bin/esc")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), b"image's").unwrap();
        let c = resolve_in(Some(root), "/usr/bin/esc").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.command_target, "/etc/passwd");
        assert!(matches!(
            resolve_in(Some(root), "sh"),
            Err(CommandError::NotFound(_))
        ));
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
