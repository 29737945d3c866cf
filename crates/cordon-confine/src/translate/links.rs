//! Every name of a denied file. A hard link is the same file under another
//! name (`/usr/bin/perl` and `/usr/bin/perl5.36.0`): the kernel runs
//! whichever name is asked, so a deny on a program holds only when every
//! name the workload can reach is denied.
//!
//! The link count says how many names a file has. The search stops as
//! soon as that many are found — most files have one, and the usual other
//! name sits in the same directory — and otherwise walks every tree the
//! workload reaches. A cached index (an image's) only suggests names; each
//! is checked, and the count decides when the search may stop, so a stale
//! index can cost time but never let a name through.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::reserved;
use crate::view::FsView;

/// A file as the kernel knows it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

/// The search for one file's names.
struct Search<'a> {
    fs: &'a dyn FsView,
    id: FileId,
    /// The file's link count: how many names there are in all.
    want: usize,
    /// Whether `readdir`'s inode numbers can be compared before `stat`.
    trust_ino: bool,
    found: BTreeSet<PathBuf>,
    budget: &'a mut usize,
}

/// What the search ran out of.
pub(super) struct OverBudget;

/// The names of the file `f` (a resolved path; itself included) beneath
/// `trees` (resolved, in the workload's paths). `f` alone when it is no
/// regular file or has one name. `Err` when the walk passes the budget
/// before it has found every name.
pub(super) fn names_of(
    fs: &dyn FsView,
    f: &Path,
    trees: &[PathBuf],
    budget: &mut usize,
) -> Result<Vec<PathBuf>, OverBudget> {
    let alone = vec![f.to_path_buf()];
    let Ok(meta) = fs.symlink_metadata(f) else {
        return Ok(alone);
    };
    if !meta.is_file() || meta.nlink() <= 1 {
        return Ok(alone);
    }
    let mut s = Search {
        fs,
        id: FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        },
        want: usize::try_from(meta.nlink()).unwrap_or(usize::MAX),
        trust_ino: fs.readdir_ino_is_stat_ino(f),
        found: BTreeSet::from([f.to_path_buf()]),
        budget,
    };
    for hint in fs.link_hints(f) {
        if s.same(&hint) {
            s.found.insert(hint);
        }
    }
    // Beside it first: where package managers put the other names.
    if !s.done() {
        if let Some(dir) = f.parent() {
            s.walk(dir, false)?;
        }
    }
    // Then every tree, outer trees first and each once.
    let mut roots: Vec<&PathBuf> = trees.iter().collect();
    roots.sort_by_key(|p| p.components().count());
    let mut walked: Vec<&Path> = Vec::new();
    for root in roots {
        if s.done() {
            break;
        }
        if walked.iter().any(|w| root.starts_with(w)) {
            continue;
        }
        walked.push(root);
        s.walk(root, true)?;
    }
    Ok(s.found.into_iter().collect())
}

impl Search<'_> {
    fn done(&self) -> bool {
        self.found.len() >= self.want
    }

    /// Whether `p` (not followed) is the file.
    fn same(&self, p: &Path) -> bool {
        self.fs.symlink_metadata(p).is_ok_and(|m| {
            m.is_file()
                && FileId {
                    dev: m.dev(),
                    ino: m.ino(),
                } == self.id
        })
    }

    fn spend(&mut self) -> Result<(), OverBudget> {
        if *self.budget == 0 {
            return Err(OverBudget);
        }
        *self.budget -= 1;
        Ok(())
    }

    /// The names of the file in `root` (a directory, or the file itself),
    /// and beneath it when `deep`; links are not followed.
    fn walk(&mut self, root: &Path, deep: bool) -> Result<(), OverBudget> {
        match self.fs.symlink_metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                if self.same(root) {
                    self.found.insert(root.to_path_buf());
                }
                return Ok(());
            }
            Err(_) => return Ok(()),
        }
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = self.fs.entries(&dir) else {
                continue;
            };
            for e in entries {
                self.spend()?;
                let (is_dir, maybe) = match e.kind {
                    Some(k) if k.is_dir() => (true, false),
                    Some(k) if k.is_symlink() => (false, false),
                    Some(k) if k.is_file() => (false, !self.trust_ino || e.ino == self.id.ino),
                    // No type from readdir: ask.
                    _ => match self.fs.symlink_metadata(&e.path) {
                        Ok(m) => (m.is_dir(), m.is_file()),
                        Err(_) => (false, false),
                    },
                };
                if is_dir {
                    if deep && !reserved(&e.path) {
                        stack.push(e.path);
                    }
                } else if maybe && self.same(&e.path) {
                    self.found.insert(e.path);
                    if self.done() {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }
}
