//! The grants: the launcher's own trees checked, a rule per storage grant
//! the kernel can hold, execute where the compute surface allows it too.

use std::path::Path;

use cordon_policy::plan::{ConfinementPlan, Grant, PathAtom, Rights};

use super::{one_path, refuse, reserved, PathRule, Translation, Unholdable};

/// Whether `g` grants `rights` on everything beneath `dir`: every path,
/// or one prefix that every path beneath `dir` begins with.
fn covers_tree(g: &Grant, dir: &Path, rights: Rights) -> bool {
    if !g.rights.contains(rights) {
        return false;
    }
    let want = format!("{}/", dir.display());
    match g.paths.all_of.as_slice() {
        [] => true,
        [PathAtom::Prefix(p)] => want.starts_with(p.as_str()),
        _ => false,
    }
}

impl Translation<'_> {
    /// The launcher always gives the work dir and the temporary directory
    /// read-write: the policy must grant both there, or the workload is
    /// refused rather than run wider.
    pub(super) fn check_launcher_trees(&self, plan: &ConfinementPlan) -> Result<(), Unholdable> {
        let work = self.target.work_dir;
        for (dir, what) in self.launcher {
            let ok = [Rights::READ, Rights::WRITE]
                .into_iter()
                .all(|r| plan.storage_allow.iter().any(|g| covers_tree(g, dir, r)));
            if !ok {
                return Err(refuse(format!(
                    "the policy does not grant read and write on everything beneath the {what} `{}`, and the {} rung always gives the workload its {what} read-write; cordon does not run it wider than the policy\nhelp: grant it (`path.startsWith({}) && mode in [\"read\", \"write\"]`), or build on the default with `extends: [\"cordon:default\"]`",
                    dir.display(),
                    self.target.rung,
                    if *dir == *work { "work_dir + \"/\"".to_string() } else { format!("\"{}/\"", dir.display()) }
                )));
            }
        }
        Ok(())
    }

    /// A rule for the storage grant `g` when it has one path the kernel can
    /// hold (else a note), and execute where `exec_allow` covers it too.
    pub(super) fn allow(&mut self, g: &Grant, exec_allow: &[Grant]) -> Result<(), Unholdable> {
        let Some((path, _dir)) = one_path(&g.paths) else {
            self.notes.push(format!(
                "{} grants `{}` only as the policy states it: the kernel holds no rule for it (narrower)",
                self.rules_of(g),
                g.paths.show("path")
            ));
            return Ok(());
        };
        if !self.view().exists(&path) {
            return Ok(());
        }
        let path = self.real(&path);
        if reserved(&path) || self.inside_launcher(&path) {
            // Provided by the launcher.
            return Ok(());
        }
        self.fs.push(PathRule {
            path,
            read: g.rights.contains(Rights::READ),
            write: g.rights.contains(Rights::WRITE),
            execute: false,
        });
        if !g.rights.contains(Rights::EXECUTE) {
            return Ok(());
        }
        for e in exec_allow {
            self.allow_execute(g, e)?;
        }
        Ok(())
    }

    /// Execute where the storage grant `g` (which has execute) and the
    /// compute grant `e` meet, when that is one path the kernel can hold.
    ///
    /// A tree that would be executable and holds the work dir or the
    /// temporary directory refuses the workload: nothing beneath those is
    /// ever executable (the workload writes there), and holding the rest of
    /// the tree without them would leave every program in it unrunnable
    /// with nothing but `EACCES` to say why.
    fn allow_execute(&mut self, g: &Grant, e: &Grant) -> Result<(), Unholdable> {
        let Some(both) = g.paths.intersect(&e.paths) else {
            return Ok(());
        };
        let Some((x, _)) = one_path(&both) else {
            self.notes.push(format!(
                "execute on `{}` is not held (narrower)",
                both.show("path")
            ));
            return Ok(());
        };
        if !self.view().exists(&x) {
            return Ok(());
        }
        let x = self.real(&x);
        if reserved(&x) || self.inside_launcher(&x) {
            return Ok(());
        }
        // INVARIANT: nothing beneath the work dir or the temporary
        // directory is ever executable.
        if let Some((dir, what)) = self.launcher.iter().find(|(d, _)| d.starts_with(&x)) {
            return Err(refuse(format!(
                "the {what} `{}` lies beneath `{}`, where {} and {} let programs run; the workload writes in its {what}, which is never executable, so cordon cannot hold that grant around it\nhelp: put the {what} outside the trees programs run from (a spec's `work_dir` defaults to `/workspace`)",
                dir.display(),
                x.display(),
                self.rules_of(g),
                self.rules_of(e),
            )));
        }
        self.fs.push(PathRule {
            path: x,
            read: g.rights.contains(Rights::READ),
            write: false,
            execute: true,
        });
        Ok(())
    }
}
