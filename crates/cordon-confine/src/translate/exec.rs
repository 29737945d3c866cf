//! Compute denies: a denied executable beneath the execute-granted trees
//! is masked, or carved out of every rule without masks — by file, not by
//! name: every other name of the file (a hard link) the workload reaches
//! goes with it.

use std::path::{Path, PathBuf};

use cordon_policy::plan::{Grant, PathAtom, PathSet};

use super::links::names_of;
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
        // Where another name of a denied file could be run from: the
        // executable trees, and (`ld.so NAME` runs a readable file) every
        // readable one, the launcher's included.
        let mut reached: Vec<PathBuf> = exec_trees.clone();
        reached.extend(self.fs.iter().filter(|r| r.read).map(|r| r.path.clone()));
        reached.extend(self.launcher.iter().map(|(d, _)| d.to_path_buf()));
        let reached: Vec<PathBuf> = reached.iter().map(|p| self.real(p)).collect();
        for e in exec_deny {
            let who = self.rules_of(e);
            if e.paths.is_everything() {
                for r in &mut self.fs {
                    r.execute = false;
                }
                continue;
            }
            let files = self.denied_files(e, &exec_trees, &who)?;
            let mut done = std::collections::BTreeSet::new();
            for f in files {
                let f = self.real(&f);
                if !done.insert(f.clone()) {
                    continue;
                }
                for name in self.names_of(&f, &reached, &who)? {
                    if name != f && done.insert(name.clone()) {
                        self.notes.push(format!(
                            "{who}: `{}` is the same file as `{}` (a hard link), denied with it",
                            name.display(),
                            f.display()
                        ));
                    }
                    self.deny_executable(&name, &who)?;
                }
            }
        }
        Ok(())
    }

    /// Every name of the denied file `f` beneath the `reached` trees.
    fn names_of(
        &mut self,
        f: &Path,
        reached: &[PathBuf],
        who: &str,
    ) -> Result<Vec<PathBuf>, Unholdable> {
        let names = names_of(self.view(), f, reached, &mut self.budget).map_err(|_| {
            refuse(format!(
                "{who} denies running `{}`, which has other names (hard links), and looking for them beneath the trees the workload reaches passed {MAX_WALK} entries; the workload is refused, not run with a name left open\nhelp: grant narrower trees, or remove the other names of the file",
                f.display()
            ))
        })?;
        // The names as Landlock resolves them (a tree's root may be a link).
        Ok(names.iter().map(|n| self.real(n)).collect())
    }

    /// The files `e` names: its exact path; with a literal prefix, what
    /// the listing of the directory the prefix ends in matches (and what
    /// lies beneath a matching directory); else every match beneath the
    /// executable trees. All bounded.
    fn denied_files(
        &mut self,
        e: &Grant,
        exec_trees: &[PathBuf],
        who: &str,
    ) -> Result<Vec<PathBuf>, Unholdable> {
        let over = |how: &str| {
            refuse(format!(
                "{who} denies running `{}`, which cordon must find {how}, and that passed {MAX_WALK} entries; the workload is refused, not run with the deny unheld\nhelp: name the programs exactly (`command == \"/usr/bin/perl\"`) or by a longer literal prefix (`command.startsWith(\"/usr/bin/perl\")`: cordon lists the directory it ends in)",
                e.paths.show("command")
            ))
        };
        let atoms = e.paths.all_of.as_slice();
        if let Some(p) = atoms.iter().find_map(|a| match a {
            PathAtom::Exact(p) => Some(p),
            _ => None,
        }) {
            return Ok(if e.paths.matches(p) {
                vec![PathBuf::from(p)]
            } else {
                Vec::new()
            });
        }
        if let Some(prefix) = longest_prefix(&e.paths) {
            return self
                .list_prefix(prefix, &e.paths)
                .map_err(|()| over(&format!("beneath `{prefix}`")));
        }
        let mut found = Vec::new();
        for root in exec_trees {
            found.extend(
                enumerate(self.view(), root, &e.paths, &mut self.budget).map_err(|()| {
                    over("by walking every executable tree (it names no directory)")
                })?,
            );
        }
        Ok(found)
    }

    /// The existing paths `set` matches that begin with `prefix`: the
    /// entries of the directory `prefix` ends in whose names begin with
    /// the rest of it, and whatever lies beneath those that are
    /// directories (beneath the directory itself when `prefix` ends in `/`).
    fn list_prefix(&mut self, prefix: &str, set: &PathSet) -> Result<Vec<PathBuf>, ()> {
        let cut = prefix.rfind('/').map_or(0, |i| i + 1);
        let (dir, stem) = prefix.split_at(cut);
        let dir = Path::new(if dir.is_empty() { "/" } else { dir });
        let Ok(entries) = self.view().read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for p in entries {
            let begins = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem));
            if begins {
                found.extend(enumerate(self.view(), &p, set, &mut self.budget)?);
            }
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
        // The work dir and the temporary directory are always readable.
        let launcher = self.inside_launcher(f);
        if !launcher && !reachable(|r| r.read) && !reachable(|r| r.execute) {
            return Ok(());
        }
        if self.target.mode == Mode::NoMasks {
            if launcher {
                return Err(refuse(format!(
                    "{who} denies running `{}`, which is in the work dir or the temporary directory the rung always gives read-write; the process rung cannot leave one file out of a writable tree, and a readable file runs through `ld.so`\nhelp: remove that file (it is another name of a denied program), or run at the container rung (`--min-isolation container`), which masks it",
                    f.display()
                )));
            }
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

/// The longest literal prefix `set` requires (a path it matches begins
/// with it), if any.
fn longest_prefix(set: &PathSet) -> Option<&str> {
    set.all_of
        .iter()
        .filter_map(|a| match a {
            PathAtom::Prefix(p) if p.starts_with('/') => Some(p.as_str()),
            _ => None,
        })
        .max_by_key(|p| p.len())
}
