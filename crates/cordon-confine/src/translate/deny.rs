//! Storage denies: rights removed from the rules they cover, and what lies
//! inside a granted tree masked (or, without masks, carved out).

use std::path::{Path, PathBuf};

use cordon_policy::plan::{Grant, PathAtom, PathSet, Rights};

use super::walk::enumerate;
use super::{has, one_path, refuse, remove, Mode, Translation, Unholdable, MAX_WALK};

/// A tree a deny reaches: a rule's path or one of the launcher's trees.
struct Tree {
    root: PathBuf,
    writable: bool,
}

impl Translation<'_> {
    /// Holds the storage deny `d`, or refuses what cannot be held.
    pub(super) fn deny_storage(&mut self, d: &Grant) -> Result<(), Unholdable> {
        let who = self.rules_of(d);
        if d.paths.is_everything() {
            return self.deny_everywhere(d, &who);
        }
        let exact = one_path(&d.paths)
            .filter(|(_, dir)| *dir || matches!(d.paths.all_of.as_slice(), [PathAtom::Exact(_)]))
            .map(|(p, _)| p);
        let trees = self.trees_reached(d.rights);
        let targets = match &exact {
            Some(p) => vec![p.clone()],
            None => self.find_denied(d, &trees, &who)?,
        };
        self.check_creatable(d, exact.as_deref(), &trees, &who)?;
        for p in targets {
            let p = self.real(&p);
            self.deny_path(d, &p, &trees, &who)?;
        }
        Ok(())
    }

    /// A deny of every path: its rights go from every rule; reading or
    /// writing cannot go from the launcher's trees, so that is refused.
    fn deny_everywhere(&mut self, d: &Grant, who: &str) -> Result<(), Unholdable> {
        for r in &mut self.fs {
            remove(r, d.rights);
        }
        if d.rights.contains(Rights::READ) || d.rights.contains(Rights::WRITE) {
            return Err(refuse(format!(
                "{who} denies {} of every path, but the {} rung always gives the workload its work dir and temporary directory read-write; the workload is refused, not run wider",
                d.rights.show(),
                self.target.rung
            )));
        }
        Ok(())
    }

    /// The trees a deny of `rights` reaches: the rules holding any of them,
    /// plus the launcher's (writable) trees.
    fn trees_reached(&self, rights: Rights) -> Vec<Tree> {
        let rules = self.fs.iter().filter(|r| has(r, rights)).map(|r| Tree {
            root: r.path.clone(),
            writable: r.write,
        });
        let launcher = self.launcher.iter().map(|(dir, _)| Tree {
            root: dir.to_path_buf(),
            writable: true,
        });
        rules.chain(launcher).collect()
    }

    /// The existing paths beneath `trees` that `d` matches (bounded).
    fn find_denied(
        &mut self,
        d: &Grant,
        trees: &[Tree],
        who: &str,
    ) -> Result<Vec<PathBuf>, Unholdable> {
        let mut found = Vec::new();
        for t in trees {
            let hits = enumerate(self.view(), &t.root, &d.paths, &mut self.budget).map_err(|()| {
                refuse(format!(
                    "{who} denies `{}`, which cordon must find beneath the granted trees, and the walk passed {MAX_WALK} entries; write the deny as a directory (`path.startsWith(\"/dir/\")`) or exact paths",
                    d.paths.show("path")
                ))
            })?;
            found.extend(hits);
        }
        Ok(found)
    }

    /// New paths the deny could match in a writable tree cannot be masked:
    /// refused.
    fn check_creatable(
        &self,
        d: &Grant,
        exact: Option<&Path>,
        trees: &[Tree],
        who: &str,
    ) -> Result<(), Unholdable> {
        for t in trees.iter().filter(|t| t.writable) {
            let root = &t.root;
            let beneath = PathSet {
                all_of: vec![PathAtom::Prefix(format!("{}/", root.display()))],
            };
            let could_match = d.paths.intersect(&beneath).is_some();
            let missing_exact = match exact {
                Some(p) => p.starts_with(root) && p != root && !self.view().exists(p),
                None => could_match,
            };
            if could_match && missing_exact {
                return Err(refuse(format!(
                    "{who} denies `{}` inside the writable tree `{}`, where the workload could create what it denies; a path that does not exist cannot be masked, so the workload is refused, not run weaker\nhelp: create the denied path before the run (it is then masked), or narrow the write grant",
                    d.paths.show("path"),
                    root.display()
                )));
            }
        }
        Ok(())
    }

    /// One denied (resolved) path `p`: its rights go from every rule it
    /// covers; inside a granted tree it is masked, or carved out without
    /// masks.
    fn deny_path(
        &mut self,
        d: &Grant,
        p: &Path,
        trees: &[Tree],
        who: &str,
    ) -> Result<(), Unholdable> {
        for r in &mut self.fs {
            if r.path.starts_with(p) {
                // The deny covers this whole rule.
                remove(r, d.rights);
            }
        }
        if self.holds_launcher(p) {
            return Err(refuse(format!(
                "{who} denies `{}`, which holds the work dir or the temporary directory the rung always gives read-write; the workload is refused, not run wider",
                p.display()
            )));
        }
        let strictly_inside = trees.iter().any(|t| p.starts_with(&t.root) && p != t.root);
        if !strictly_inside || !self.view().exists(p) {
            return Ok(());
        }
        if self.target.mode == Mode::NoMasks {
            // The work dir and the temporary directory are the launcher's
            // own writable trees: nothing can be carved out of them.
            if self.inside_launcher(p) || !self.carve_around(p, who)? {
                return Err(refuse(format!(
                    "{who} denies `{}` inside a tree the workload may write; the process rung cannot hide one path there (Landlock grants whole trees and the workload needs the directory to create files)\nhelp: run at the container rung (`--min-isolation container`), which masks it",
                    p.display()
                )));
            }
            self.notes.push(format!(
                "{who}: `{}` is left out of the grants around it (the process rung has no masks)",
                p.display()
            ));
            return Ok(());
        }
        if self.masks.insert(p.to_path_buf()) {
            self.notes.push(format!(
                "{who}: `{}` is hidden entirely (masked), stronger than denying only {}",
                p.display(),
                d.rights.show()
            ));
        }
        Ok(())
    }
}
