//! A [`ConfinementPlan`] (what the policy allows the workload's own
//! accesses) translated into the path rules and masks a backend holds —
//! never wider, and refused where it cannot be held. Every path, in and
//! out, is the workload's own; the disk is looked at through the
//! [`Target`]'s [`FsView`].
//!
//! The rules, each tested below:
//!
//! - **storage allow**: one atom `Prefix("/dir/")` is a rule on the
//!   directory; `Exact(p)` a rule on the file when it exists (skipped
//!   otherwise); a `Prefix` not ending in `/` the path itself when it exists
//!   (path-beneath covers it and, if it is a directory, what is inside:
//!   narrower than every name that begins so). A `Suffix`, several atoms or
//!   every path grants nothing, with a note. Paths under `/proc`, `/sys`
//!   and `/dev` are provided by the launcher and not granted from here.
//! - **execute**: only where a storage grant has execute *and* an
//!   `exec_allow` grant covers it ([`PathSet::intersect`]); never on the
//!   work dir or the temporary directory, and a tree that would be
//!   executable and holds either refuses the workload (the container
//!   rung also mounts the work dir `noexec`).
//! - **the launcher's own trees**: the launcher always gives the work dir
//!   and the temporary directory read-write. A policy that grants less
//!   there (one `Prefix` atom that every path beneath the tree begins
//!   with) is refused rather than run wider.
//! - **storage deny**: a deny covering a whole rule removes those rights
//!   from it; a deny of every path removes the rights everywhere; a deny
//!   inside a granted tree is a mask where masks exist
//!   ([`Mode::MasksAvailable`]; hiding is stronger than denying some
//!   rights: noted); without masks ([`Mode::NoMasks`], the process rung) a
//!   read-only rule holding it is replaced by rules on the siblings along
//!   the way down (links and other names of the same file among them left
//!   out), and a writable one is refused; a `Suffix` or a non-`/` prefix
//!   is enumerated beneath the granted trees (bounded; refused at the
//!   bound). A denied path that does not exist inside a writable tree
//!   cannot be masked (the workload could create it) and is refused.
//! - **exec deny**: every matching file beneath the execute-granted trees is
//!   masked; without masks it is carved out of every read-only rule as
//!   above — out of reading too, since Landlock checks execute at `execve`
//!   only and `ld.so FILE` would run a readable file.
//! - **a shared `/tmp`** (the host's, [`Target::tmp_shared`]) is never
//!   granted whole: the workload has its own temporary directory.

mod allow;
mod deny;
mod exec;
mod links;
mod walk;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cordon_policy::plan::{ConfinementPlan, Grant, PathAtom, PathSet, Rights};
use cordon_policy::Policy;

use crate::view::FsView;

/// The most directory entries one translation may walk.
pub const MAX_WALK: usize = 200_000;

/// What the backend holds beyond path-beneath rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A path can be hidden entirely (masked), inside any tree.
    MasksAvailable,
    /// Nothing can be hidden: a denied path is left out of the rules around
    /// it, or refused where that cannot be done.
    NoMasks,
}

/// What the translation is for.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The rung's name, for messages (`the {rung} rung always gives...`).
    pub rung: &'a str,
    pub mode: Mode,
    /// Whether the view's `/tmp` is the host's, shared with other users
    /// (then a grant on all of it is left out).
    pub tmp_shared: bool,
    /// The work dir as the workload sees it, canonical in `fs`.
    pub work_dir: &'a Path,
    /// The temporary directory as the workload sees it: `/tmp` where it
    /// is the sandbox's own, else a per-sandbox directory.
    pub tmp_dir: &'a Path,
    /// The filesystem the workload sees.
    pub fs: &'a dyn FsView,
}

impl std::fmt::Debug for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("rung", &self.rung)
            .field("mode", &self.mode)
            .field("tmp_shared", &self.tmp_shared)
            .field("work_dir", &self.work_dir)
            .field("tmp_dir", &self.tmp_dir)
            .finish_non_exhaustive()
    }
}

/// Rights on a path and everything beneath it, in the workload's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    pub path: PathBuf,
    pub read: bool,
    pub write: bool,
    pub execute: bool,
}

/// The kernel's share of the plan, backend-neutral, in the workload's
/// paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    pub fs: Vec<PathRule>,
    /// Paths hidden entirely (storage denies).
    pub mask_paths: Vec<PathBuf>,
    /// Executables hidden entirely (compute denies).
    pub mask_executables: Vec<PathBuf>,
    /// Where the plan is held narrower (or, for masks, stronger) than the
    /// policy reads.
    pub notes: Vec<String>,
}

/// A plan that cannot be held here. Nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unholdable {
    pub message: String,
}

fn refuse(message: String) -> Unholdable {
    Unholdable { message }
}

/// Translates `plan` for `target`. `policy` names rules in messages.
pub fn translate(
    policy: &Policy,
    plan: &ConfinementPlan,
    target: &Target<'_>,
) -> Result<Confinement, Unholdable> {
    let mut t = Translation::new(policy, target);
    t.check_launcher_trees(plan)?;
    for g in &plan.storage_allow {
        t.allow(g, &plan.exec_allow)?;
    }
    for d in &plan.storage_deny {
        t.deny_storage(d)?;
    }
    t.leave_out_shared_tmp();
    t.fs.retain(|r| r.read || r.write || r.execute);
    t.deny_exec(&plan.exec_deny)?;
    Ok(t.finish())
}

/// One translation under way.
struct Translation<'a> {
    policy: &'a Policy,
    target: &'a Target<'a>,
    /// The work dir and the temporary directory, with what to call them.
    launcher: [(&'a Path, &'static str); 2],
    fs: Vec<PathRule>,
    notes: Vec<String>,
    masks: BTreeSet<PathBuf>,
    mask_exec: BTreeSet<PathBuf>,
    /// Directory entries the walks may still visit.
    budget: usize,
}

impl<'a> Translation<'a> {
    fn new(policy: &'a Policy, target: &'a Target<'a>) -> Translation<'a> {
        Translation {
            policy,
            target,
            launcher: [
                (target.work_dir, "work dir"),
                (target.tmp_dir, "temporary directory"),
            ],
            fs: Vec::new(),
            notes: Vec::new(),
            masks: BTreeSet::new(),
            mask_exec: BTreeSet::new(),
            budget: MAX_WALK,
        }
    }

    fn finish(self) -> Confinement {
        Confinement {
            fs: self.fs,
            mask_paths: self.masks.into_iter().collect(),
            mask_executables: self.mask_exec.into_iter().collect(),
            notes: self.notes,
        }
    }

    fn view(&self) -> &'a dyn FsView {
        self.target.fs
    }

    /// `p` with every link resolved, as Landlock resolves it when it opens
    /// a rule's path: a rule on `/bin` is a rule on `/usr/bin` (merged
    /// `/usr`), so containment and carving must compare resolved paths, or
    /// a denied file stays reachable through a linked directory. `p`
    /// itself when it cannot be resolved.
    fn real(&self, p: &Path) -> PathBuf {
        self.view().canonical(p).unwrap_or_else(|_| p.to_path_buf())
    }

    fn inside_launcher(&self, p: &Path) -> bool {
        self.launcher.iter().any(|(d, _)| p.starts_with(d))
    }

    /// Whether `p` holds the work dir or the temporary directory.
    fn holds_launcher(&self, p: &Path) -> bool {
        self.launcher.iter().any(|(d, _)| d.starts_with(p))
    }

    /// `rule `a` (file:line), rule `b` ...` for messages.
    fn rules_of(&self, g: &Grant) -> String {
        let names: Vec<String> = g
            .rules
            .iter()
            .map(|id| {
                let r = self.policy.rule(*id);
                format!("`{}` ({}:{})", r.name, r.file, r.line)
            })
            .collect();
        if names.is_empty() {
            "a rule".into()
        } else {
            format!("rule {}", names.join(", "))
        }
    }

    /// The process rung has no private /tmp: a grant on all of /tmp is the
    /// host's shared /tmp, where the workload could leave files (or links)
    /// for other users that outlive it. The workload gets its own temporary
    /// directory (`TMPDIR`) instead, so that grant is left out — narrower.
    /// (A grant on a named path beneath /tmp is the operator's choice and
    /// kept.)
    fn leave_out_shared_tmp(&mut self) {
        if !self.target.tmp_shared {
            return;
        }
        let shared = |p: &Path| p == Path::new("/tmp");
        if self.fs.iter().any(|r| shared(&r.path)) {
            self.notes.push(format!(
                "the host's shared /tmp is not granted at the {} rung (it is not private there); the workload's temporary directory is `{}` (TMPDIR)",
                self.target.rung,
                self.target.tmp_dir.display()
            ));
        }
        self.fs.retain(|r| !shared(&r.path));
    }
}

fn reserved(p: &Path) -> bool {
    ["/proc", "/sys", "/dev"].iter().any(|r| p.starts_with(r))
}

/// The one path a path set is held as, if it has that form: the directory of
/// `Prefix("/dir/")`, the file of `Exact`, the path of a non-`/` prefix.
fn one_path(set: &PathSet) -> Option<(PathBuf, bool)> {
    match set.all_of.as_slice() {
        [PathAtom::Prefix(p)] if p.ends_with('/') && p.len() > 1 => {
            Some((PathBuf::from(p.trim_end_matches('/')), true))
        }
        [PathAtom::Exact(p)] => Some((PathBuf::from(p), false)),
        [PathAtom::Prefix(p)] if !p.ends_with('/') && p.len() > 1 => {
            Some((PathBuf::from(p), false))
        }
        _ => None,
    }
}

fn has(r: &PathRule, rights: Rights) -> bool {
    (rights.contains(Rights::READ) && r.read)
        || (rights.contains(Rights::WRITE) && r.write)
        || (rights.contains(Rights::EXECUTE) && r.execute)
}

fn remove(r: &mut PathRule, rights: Rights) {
    if rights.contains(Rights::READ) {
        r.read = false;
    }
    if rights.contains(Rights::WRITE) {
        r.write = false;
    }
    if rights.contains(Rights::EXECUTE) {
        r.execute = false;
    }
}
