//! Walking the granted trees: finding what a deny matches, and carving a
//! denied path out of the rules around it where there are no masks.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cordon_policy::plan::PathSet;

use super::{refuse, PathRule, Translation, Unholdable, MAX_WALK};
use crate::view::FsView;

/// Existing paths beneath `root` (itself included) that `set` matches, not
/// following links below `root`; `Err` at the bound.
pub(super) fn enumerate(
    fs: &dyn FsView,
    root: &Path,
    set: &PathSet,
    budget: &mut usize,
) -> Result<Vec<PathBuf>, ()> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if *budget == 0 {
            return Err(());
        }
        *budget -= 1;
        if let Some(s) = p.to_str() {
            if set.matches(s) {
                out.push(p.clone());
            }
        }
        let is_dir = if p == root {
            fs.metadata(&p).is_ok_and(|m| m.is_dir())
        } else {
            fs.symlink_metadata(&p).is_ok_and(|m| m.is_dir())
        };
        if is_dir {
            if let Ok(entries) = fs.read_dir(&p) {
                stack.extend(entries);
            }
        }
    }
    Ok(out)
}

impl Translation<'_> {
    /// Leaves `denied` out of every read-only rule that holds it by
    /// replacing such a rule with rules on the siblings along the way down
    /// (no masks; Landlock grants whole trees). Narrower, never wider:
    /// links among the siblings are left out (a rule on a link would grant
    /// its target), and so is whatever appears in those directories later.
    /// A writable rule holding `denied` is refused: the workload needs the
    /// directory itself to create files in it.
    pub(super) fn carve_around(&mut self, denied: &Path, who: &str) -> Result<bool, Unholdable> {
        let mut carved = false;
        let mut i = 0;
        while i < self.fs.len() {
            if !(denied.starts_with(&self.fs[i].path) && denied != self.fs[i].path) {
                i += 1;
                continue;
            }
            if self.fs[i].write {
                return Err(refuse(format!(
                    "{who} denies `{}` inside `{}`, which the policy lets the workload write; the process rung cannot hide one path inside a writable tree (the workload needs the directory itself to create files)\nhelp: run at the container rung (`--min-isolation container`), which masks it",
                    denied.display(),
                    self.fs[i].path.display()
                )));
            }
            let rule = self.fs.remove(i);
            let siblings = self.siblings_on_the_way(&rule.path, denied, who)?;
            self.fs.extend(siblings.into_iter().map(|path| PathRule {
                path,
                ..rule.clone()
            }));
            carved = true;
        }
        Ok(carved)
    }

    /// Every entry beside the way from `top` down to `denied`, links and
    /// other names of `denied` (hard links) left out.
    fn siblings_on_the_way(
        &mut self,
        top: &Path,
        denied: &Path,
        who: &str,
    ) -> Result<Vec<PathBuf>, Unholdable> {
        let fs = self.view();
        let Ok(rel) = denied.strip_prefix(top) else {
            return Ok(Vec::new());
        };
        // Another name for the same file (a hard link beside it, like
        // `perl` and `perl5.36.0`) is the same inode to Landlock: leave it
        // out too.
        let same = fs
            .symlink_metadata(denied)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (m.dev(), m.ino()));
        let mut kept = Vec::new();
        let mut dir = top.to_path_buf();
        for comp in rel.components() {
            let next = dir.join(comp);
            let entries = fs.read_dir(&dir).map_err(|e| {
                refuse(format!(
                    "{who}: cannot list `{}` to leave `{}` out of the grant around it: {e}",
                    dir.display(),
                    denied.display()
                ))
            })?;
            for c in entries {
                if self.budget == 0 {
                    return Err(refuse(format!(
                        "{who}: leaving `{}` out of the grant around it passed {MAX_WALK} entries",
                        denied.display()
                    )));
                }
                self.budget -= 1;
                let meta = fs.symlink_metadata(&c).ok();
                let is_link = meta.as_ref().is_some_and(|m| m.file_type().is_symlink());
                let alias =
                    same.is_some_and(|id| meta.as_ref().is_some_and(|m| (m.dev(), m.ino()) == id));
                if c != next && !is_link && !alias {
                    kept.push(c);
                }
            }
            dir = next;
        }
        Ok(kept)
    }
}
