//! Where the workload's paths are on the disk.
//!
//! The translator and the command resolver work in the workload's (guest)
//! paths and ask a [`FsView`] whenever they must look at a file: what it
//! is, what a directory holds, where its links lead. [`HostFs`] is the
//! host's own tree (the workload sees the host's paths); [`RootedFs`] is a
//! root directory with trees bound into it (an image, or the host's own
//! `/`, with the work dir bound at the spec's `work_dir`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{FileType, Metadata};
use std::io;
use std::os::unix::fs::DirEntryExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// How many links one resolution follows before giving up (the kernel's
/// `ELOOP` bound).
const MAX_LINKS: usize = 40;

fn nowhere(guest: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("`{}` is nowhere in the sandbox's view", guest.display()),
    )
}

/// A filesystem as the workload sees it. Every path in and out is the
/// workload's own (absolute); only [`FsView::host_path`] names the host.
pub trait FsView {
    /// Where `guest` is on the host (its links not resolved), or `None`
    /// when the view has no place for it.
    fn host_path(&self, guest: &Path) -> Option<PathBuf>;

    /// `guest` with every link resolved as the workload would resolve it
    /// (links inside the view stay inside it); an error when it does not
    /// exist.
    fn canonical(&self, guest: &Path) -> io::Result<PathBuf>;

    /// What `guest` itself is (a link is not followed).
    fn symlink_metadata(&self, guest: &Path) -> io::Result<Metadata> {
        std::fs::symlink_metadata(self.host_path(guest).ok_or_else(|| nowhere(guest))?)
    }

    /// What `guest` is, its links followed inside the view.
    fn metadata(&self, guest: &Path) -> io::Result<Metadata> {
        self.symlink_metadata(&self.canonical(guest)?)
    }

    /// The entries of the directory `guest` (its links followed), as
    /// workload paths beneath `guest`. Entries that cannot be read are
    /// left out.
    fn read_dir(&self, guest: &Path) -> io::Result<Vec<PathBuf>> {
        let dir = self.canonical(guest)?;
        let host = self.host_path(&dir).ok_or_else(|| nowhere(guest))?;
        Ok(std::fs::read_dir(host)?
            .flatten()
            .map(|e| guest.join(e.file_name()))
            .collect())
    }

    /// Whether `guest` exists (its links followed).
    fn exists(&self, guest: &Path) -> bool {
        self.metadata(guest).is_ok()
    }

    /// The entries of the directory `guest`, which must be reached without
    /// links (a walk that does not follow them), with what `readdir` says
    /// of each: no `stat`. Entries that cannot be read are left out.
    fn entries(&self, guest: &Path) -> io::Result<Vec<Entry>> {
        let host = self.host_path(guest).ok_or_else(|| nowhere(guest))?;
        Ok(std::fs::read_dir(host)?
            .flatten()
            .map(|e| Entry {
                path: guest.join(e.file_name()),
                ino: e.ino(),
                kind: e.file_type().ok(),
            })
            .collect())
    }

    /// Whether the inode number `readdir` gives for an entry on the
    /// filesystem holding `guest` is the one `stat` gives (true of ext2/3/4,
    /// xfs, btrfs and tmpfs; not promised by overlayfs and others, which
    /// are then `stat`ed entry by entry).
    fn readdir_ino_is_stat_ino(&self, guest: &Path) -> bool {
        self.host_path(guest)
            .is_some_and(|h| readdir_ino_is_stat_ino(&h))
    }

    /// Other names the view already knows for the file `guest` (an image's
    /// cached hard-link index): hints only, each checked by the caller.
    fn link_hints(&self, _guest: &Path) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// One directory entry as `readdir` gives it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The workload's path of the entry.
    pub path: PathBuf,
    /// `d_ino`.
    pub ino: u64,
    /// `d_type`, when the filesystem gives it.
    pub kind: Option<FileType>,
}

/// Whether `readdir`'s `d_ino` is `stat`'s `st_ino` on the filesystem of
/// the host path `host`.
fn readdir_ino_is_stat_ino(host: &Path) -> bool {
    const EXT: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    const TMPFS: i64 = 0x0102_1994;
    rustix::fs::statfs(host).is_ok_and(|s| {
        #[allow(clippy::unnecessary_cast)] // the field's width differs by target
        let kind = s.f_type as i64;
        [EXT, XFS, BTRFS, TMPFS].contains(&kind)
    })
}

/// The groups of names that are one file (hard links) in a tree, as an
/// image's cached index records them: a hint to be checked, never trusted
/// alone (see `translate`: a file's names are complete only when as many
/// are found as its link count says).
#[derive(Debug, Clone, Default)]
pub struct LinkIndex {
    groups: Vec<Vec<PathBuf>>,
    by_name: HashMap<PathBuf, usize>,
}

impl LinkIndex {
    /// An index of `groups`, each the workload's names of one file.
    pub fn new(groups: Vec<Vec<PathBuf>>) -> LinkIndex {
        let mut by_name = HashMap::new();
        for (i, g) in groups.iter().enumerate() {
            for p in g {
                by_name.insert(p.clone(), i);
            }
        }
        LinkIndex { groups, by_name }
    }

    /// The names recorded with `p` (itself included), if any.
    pub fn names_with(&self, p: &Path) -> &[PathBuf] {
        self.by_name
            .get(p)
            .map_or(&[][..], |&i| self.groups[i].as_slice())
    }
}

/// The host's own tree: the workload's paths are the host's (the process
/// rung).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostFs;

impl FsView for HostFs {
    fn host_path(&self, guest: &Path) -> Option<PathBuf> {
        Some(guest.to_path_buf())
    }

    fn canonical(&self, guest: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(guest)
    }

    fn metadata(&self, guest: &Path) -> io::Result<Metadata> {
        std::fs::metadata(guest)
    }

    fn read_dir(&self, guest: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(std::fs::read_dir(guest)?
            .flatten()
            .map(|e| e.path())
            .collect())
    }
}

/// A root directory with host trees bound into it, as a mount namespace
/// shows them: `/` is `root`, and each bind's workload path is its host
/// directory (the most specific bind wins). A bind's own path is a mount
/// point, never resolved as a link; links resolve inside the view
/// (an absolute link starts again at the view's `/`, `..` stops there).
#[derive(Debug, Clone)]
pub struct RootedFs {
    root: PathBuf,
    /// `(guest, host)`, most specific guest first.
    binds: Vec<(PathBuf, PathBuf)>,
    /// The root's cached hard-link index (an image's), if any.
    links: Option<Arc<LinkIndex>>,
}

impl RootedFs {
    /// `root` (a host directory) as the workload's `/`.
    pub fn new(root: impl Into<PathBuf>) -> RootedFs {
        RootedFs {
            root: root.into(),
            binds: Vec::new(),
            links: None,
        }
    }

    /// The root's hard-link index (paths as the workload sees them), used
    /// as hints for the names of a denied file.
    pub fn with_links(mut self, index: Arc<LinkIndex>) -> RootedFs {
        self.links = Some(index);
        self
    }

    /// The host directory `host` shown at the workload path `guest`.
    pub fn bind(mut self, guest: impl Into<PathBuf>, host: impl Into<PathBuf>) -> RootedFs {
        self.binds.push((guest.into(), host.into()));
        self.binds
            .sort_by_key(|(g, _)| std::cmp::Reverse(g.components().count()));
        self
    }

    fn mount_at(&self, guest: &Path) -> bool {
        self.binds.iter().any(|(g, _)| g == guest)
    }

    /// The most specific bind holding `guest` (lexically) and what of
    /// `guest` lies beneath it.
    fn bind_of<'a>(&self, guest: &'a Path) -> Option<(&Path, &Path, &'a Path)> {
        self.binds.iter().find_map(|(g, h)| {
            guest
                .strip_prefix(g)
                .ok()
                .map(|rest| (g.as_path(), h.as_path(), rest))
        })
    }
}

/// `base` with `rest` beneath it (`base` itself for an empty `rest`, with
/// no trailing `/`).
fn beneath(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

impl FsView for RootedFs {
    fn host_path(&self, guest: &Path) -> Option<PathBuf> {
        let lexical = guest.is_absolute()
            && guest
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !lexical {
            return None;
        }
        Some(match self.bind_of(guest) {
            Some((_, host, rest)) => beneath(host, rest),
            None => beneath(&self.root, guest.strip_prefix("/").ok()?),
        })
    }

    fn canonical(&self, guest: &Path) -> io::Result<PathBuf> {
        if !guest.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not absolute", guest.display()),
            ));
        }
        // A bind's path is where the mount is, whatever the root holds on
        // the way there.
        let (mut done, rest) = match self.bind_of(guest) {
            Some((g, _, rest)) => (g.to_path_buf(), rest),
            None => (PathBuf::from("/"), guest),
        };
        let mut todo: Vec<OsString> = names(rest);
        todo.reverse();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            if name == ".." {
                done.pop();
                continue;
            }
            let next = done.join(&name);
            if self.mount_at(&next) {
                done = next;
                continue;
            }
            let host = self.host_path(&next).ok_or_else(|| nowhere(&next))?;
            let meta = std::fs::symlink_metadata(&host)?;
            if meta.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::other(format!(
                        "more than {MAX_LINKS} links resolving `{}`",
                        guest.display()
                    )));
                }
                let target = std::fs::read_link(&host)?;
                if target.is_absolute() {
                    done = PathBuf::from("/");
                }
                todo.extend(names(&target).into_iter().rev());
            } else if !todo.is_empty() && !meta.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("`{}` is not a directory", next.display()),
                ));
            } else {
                done = next;
            }
        }
        Ok(done)
    }

    fn link_hints(&self, guest: &Path) -> Vec<PathBuf> {
        self.links
            .as_ref()
            .map(|l| l.names_with(guest).to_vec())
            .unwrap_or_default()
    }
}

/// The names of `p` in order, `..` kept, `.` and the root dropped.
fn names(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_a_bind_are_its_host_side_and_others_the_roots() {
        let v = RootedFs::new("/").bind("/workspace", "/var/tmp/cordon-work-1");
        let host = |p: &str| v.host_path(Path::new(p)).unwrap();
        assert_eq!(host("/workspace"), PathBuf::from("/var/tmp/cordon-work-1"));
        assert_eq!(
            host("/workspace/.env"),
            PathBuf::from("/var/tmp/cordon-work-1/.env")
        );
        assert_eq!(host("/workspace2"), PathBuf::from("/workspace2"));
        assert_eq!(host("/usr/bin"), PathBuf::from("/usr/bin"));
        assert_eq!(v.host_path(Path::new("/workspace/../etc")), None);
    }

    #[test]
    fn with_an_image_every_path_but_the_binds_is_the_images() {
        let img = "/var/lib/cordon/images/blobs/sha256-ab/rootfs";
        let v = RootedFs::new(img)
            .bind("/tmp", "/tmp")
            .bind("/dev", "/dev")
            .bind("/workspace", "/var/tmp/w");
        let host = |p: &str| v.host_path(Path::new(p)).unwrap();
        assert_eq!(
            host("/usr/bin/perl"),
            PathBuf::from(format!("{img}/usr/bin/perl"))
        );
        assert_eq!(host("/"), PathBuf::from(img));
        assert_eq!(host("/workspace/a"), PathBuf::from("/var/tmp/w/a"));
        assert_eq!(host("/tmp/x"), PathBuf::from("/tmp/x"));
        assert_eq!(host("/dev/null"), PathBuf::from("/dev/null"));
    }

    #[test]
    fn links_resolve_inside_the_view_and_binds_are_mounts() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let work = d.path().join("work");
        for p in ["root/usr/bin", "root/etc", "work/sub", "outside"] {
            std::fs::create_dir_all(d.path().join(p)).unwrap();
        }
        std::fs::write(root.join("usr/bin/python3.11"), b"").unwrap();
        std::fs::write(root.join("etc/passwd"), b"").unwrap();
        std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3.11", root.join("usr/bin/py")).unwrap();
        std::os::unix::fs::symlink("../../../../etc/passwd", root.join("usr/bin/esc")).unwrap();
        // The work dir's own host path is a link: the bind is a mount, not
        // resolved, and a link in it to an absolute path lands in the view.
        std::os::unix::fs::symlink(&work, d.path().join("work-link")).unwrap();
        std::os::unix::fs::symlink("/etc", work.join("etc")).unwrap();
        let v = RootedFs::new(&root).bind("/workspace", d.path().join("work-link"));
        let c = |p: &str| v.canonical(Path::new(p)).unwrap();
        assert_eq!(c("/bin/py"), PathBuf::from("/usr/bin/python3.11"));
        assert_eq!(c("/usr/bin/esc"), PathBuf::from("/etc/passwd"));
        assert_eq!(c("/workspace"), PathBuf::from("/workspace"));
        assert_eq!(c("/workspace/sub/.."), PathBuf::from("/workspace"));
        assert_eq!(c("/workspace/etc"), PathBuf::from("/etc"));
        assert!(v.canonical(Path::new("/outside")).is_err());
        assert!(v.metadata(Path::new("/bin/py")).unwrap().is_file());
        assert!(v.symlink_metadata(Path::new("/bin")).unwrap().is_symlink());
        let mut listed = v.read_dir(Path::new("/bin")).unwrap();
        listed.sort();
        assert_eq!(
            listed,
            ["/bin/esc", "/bin/py", "/bin/python3.11"].map(PathBuf::from)
        );
        assert!(v.exists(Path::new("/workspace/sub")));
    }
}
