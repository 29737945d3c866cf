//! Compute denies: a denied executable beneath the execute-granted trees
//! is masked, or carved out of every rule without masks.

use std::path::{Path, PathBuf};

use cordon_policy::plan::{Grant, PathAtom};

use super::walk::enumerate;
use super::{refuse, Mode, PathRule, Translation, Unholdable, MAX_WALK};

impl Translation<'_> {
    /// Holds every compute deny of `exec_deny`.
    pub(super) fn deny_exec(&mut self, exec_deny: &[Grant]) -> Result<(), Unholdable> {
        // The trees as they are before any deny carves them.
        let exec_trees: Vec<PathBuf> = self
            .fs
            .iter()
            .filter(|r| r.execute)
            .map(|r| r.path.clone())
            .collect();
        for e in exec_deny {
            let who = self.rules_of(e);
            if e.paths.is_everything() {
                for r in &mut self.fs {
                    r.execute = false;
                }
                continue;
            }
            let files = self.denied_files(e, &exec_trees, &who)?;
            for f in files {
                let f = self.real(&f);
                self.deny_executable(&f, &who)?;
            }
        }
        Ok(())
    }

    /// The files `e` names: its one exact path, or every match beneath the
    /// executable trees (bounded).
    fn denied_files(
        &mut self,
        e: &Grant,
        exec_trees: &[PathBuf],
        who: &str,
    ) -> Result<Vec<PathBuf>, Unholdable> {
        if let [PathAtom::Exact(p)] = e.paths.all_of.as_slice() {
            return Ok(vec![PathBuf::from(p)]);
        }
        let mut found = Vec::new();
        for root in exec_trees {
            found.extend(enumerate(self.view(), root, &e.paths, &mut self.budget).map_err(|()| {
                refuse(format!(
                    "{who} denies running `{}`, which cordon must find beneath the executable trees, and the walk passed {MAX_WALK} entries; name the programs exactly",
                    e.paths.show("command")
                ))
            })?);
        }
        Ok(found)
    }

    /// The denied (resolved) file `f`, when a rule reaches it: masked, or
    /// without masks left out of every rule — out of reading too, since
    /// Landlock checks execute at `execve` only and `ld.so FILE` would run
    /// a readable file.
    fn deny_executable(&mut self, f: &Path, who: &str) -> Result<(), Unholdable> {
        if !self.view().metadata(f).is_ok_and(|m| m.is_file()) {
            return Ok(());
        }
        let reachable = |right: fn(&PathRule) -> bool| {
            self.fs.iter().any(|r| right(r) && f.starts_with(&r.path))
        };
        if !reachable(|r| r.read) && !reachable(|r| r.execute) {
            return Ok(());
        }
        if self.target.mode == Mode::NoMasks {
            self.carve_around(f, who)?;
            self.fs.retain(|r| r.path != f);
            self.notes.push(format!(
                "{who}: `{}` is left out of the grants (the process rung has no masks)",
                f.display()
            ));
            return Ok(());
        }
        self.mask_exec.insert(f.to_path_buf());
        Ok(())
    }
}
