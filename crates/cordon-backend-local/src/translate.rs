//! A [`ConfinementPlan`] (what the policy allows the workload's own
//! accesses) translated into the [`FsRule`]s and masks cordon-linux holds —
//! never wider, and refused where it cannot be held.
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
//!   work dir or the temporary directory.
//! - **the launcher's own trees**: cordon-linux always gives the work dir and
//!   the temporary directory read-write. A policy that grants less there is
//!   refused rather than run wider.
//! - **storage deny**: a deny covering a whole rule removes those rights
//!   from it; a deny of every path removes the rights everywhere; a deny
//!   inside a granted tree is a mask at the container rung (hiding is
//!   stronger than denying some rights: noted); at the process rung, which
//!   has no masks, a read-only rule holding it is replaced by rules on the
//!   siblings along the way down (links among them left out), and a
//!   writable one is refused; a `Suffix` or a non-`/` prefix is enumerated beneath the granted
//!   trees (bounded; refused at the bound). A denied path that does not
//!   exist inside a writable tree cannot be masked (the workload could
//!   create it) and is refused.
//! - **exec deny**: every matching file beneath the execute-granted trees is
//!   masked (container rung); at the process rung it is carved out of every
//!   read-only rule as above — out of reading too, since Landlock checks
//!   execute at `execve` only and `ld.so FILE` would run a readable file.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cordon_linux::{FsRule, Rung};
use cordon_policy::plan::{ConfinementPlan, Grant, PathAtom, PathSet, Rights};
use cordon_policy::Policy;

/// The most directory entries one translation may walk.
pub const MAX_WALK: usize = 200_000;

/// What the translation is for.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub rung: Rung,
    /// The work dir as the workload sees it (and as it is on the host).
    pub work_dir: &'a Path,
    /// The temporary directory as the workload sees it: `/tmp` at the
    /// container rung, the per-sandbox directory at the process rung.
    pub tmp_dir: &'a Path,
}

/// The kernel's share of the plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translated {
    pub fs: Vec<FsRule>,
    pub mask_paths: Vec<PathBuf>,
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

/// `rule `a` (file:line), rule `b` ...` for messages.
fn rules_of(policy: &Policy, g: &Grant) -> String {
    let names: Vec<String> = g
        .rules
        .iter()
        .map(|id| {
            let r = policy.rule(*id);
            format!("`{}` ({}:{})", r.name, r.file, r.line)
        })
        .collect();
    if names.is_empty() {
        "a rule".into()
    } else {
        format!("rule {}", names.join(", "))
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

fn covers_tree(g: &Grant, dir: &Path, rights: Rights) -> bool {
    if !g.rights.contains(rights) {
        return false;
    }
    let want = format!("{}/", dir.display());
    match g.paths.all_of.as_slice() {
        [] => true,
        [PathAtom::Prefix(p)] => p.ends_with('/') && want.starts_with(p.as_str()),
        _ => false,
    }
}

fn has(r: &FsRule, rights: Rights) -> bool {
    (rights.contains(Rights::READ) && r.read)
        || (rights.contains(Rights::WRITE) && r.write)
        || (rights.contains(Rights::EXECUTE) && r.execute)
}

fn remove(r: &mut FsRule, rights: Rights) {
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

/// Existing paths beneath `root` (itself included) that `set` matches, not
/// following links below `root`; `Err` at the bound.
fn enumerate(root: &Path, set: &PathSet, budget: &mut usize) -> Result<Vec<PathBuf>, ()> {
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
            p.is_dir()
        } else {
            std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir())
        };
        if is_dir {
            if let Ok(rd) = std::fs::read_dir(&p) {
                for e in rd.flatten() {
                    stack.push(e.path());
                }
            }
        }
    }
    Ok(out)
}

/// Leaves `denied` out of every read-only rule that holds it by replacing
/// such a rule with rules on the siblings along the way down (the process
/// rung has no masks; Landlock grants whole trees). Narrower, never wider:
/// links among the siblings are left out (a rule on a link would grant its
/// target), and so is whatever appears in those directories later. A
/// writable rule holding `denied` is refused: the workload needs the
/// directory itself to create files in it.
fn carve_around(
    fs: &mut Vec<FsRule>,
    denied: &Path,
    who: &str,
    budget: &mut usize,
) -> Result<bool, Unholdable> {
    let mut carved = false;
    let mut i = 0;
    while i < fs.len() {
        if !(denied.starts_with(&fs[i].path) && denied != fs[i].path) {
            i += 1;
            continue;
        }
        if fs[i].write {
            return Err(refuse(format!(
                "{who} denies `{}` inside `{}`, which the policy lets the workload write; the process rung cannot hide one path inside a writable tree (the workload needs the directory itself to create files)\nhelp: run at the container rung (`--min-isolation container`), which masks it",
                denied.display(),
                fs[i].path.display()
            )));
        }
        let rule = fs.remove(i);
        let Ok(rel) = denied.strip_prefix(&rule.path) else {
            continue;
        };
        // Another name for the same file (a hard link beside it, like
        // `perl` and `perl5.36.0`) is the same inode to Landlock: leave it
        // out too.
        let same = std::fs::symlink_metadata(denied)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (m.dev(), m.ino()));
        let mut dir = rule.path.clone();
        for comp in rel.components() {
            let next = dir.join(comp);
            let entries = std::fs::read_dir(&dir).map_err(|e| {
                refuse(format!(
                    "{who}: cannot list `{}` to leave `{}` out of the grant around it: {e}",
                    dir.display(),
                    denied.display()
                ))
            })?;
            for e in entries.flatten() {
                if *budget == 0 {
                    return Err(refuse(format!(
                        "{who}: leaving `{}` out of the grant around it passed {MAX_WALK} entries",
                        denied.display()
                    )));
                }
                *budget -= 1;
                let c = e.path();
                let is_link =
                    std::fs::symlink_metadata(&c).is_ok_and(|m| m.file_type().is_symlink());
                let alias = same.is_some_and(|id| {
                    std::fs::symlink_metadata(&c).is_ok_and(|m| (m.dev(), m.ino()) == id)
                });
                if c != next && !is_link && !alias {
                    fs.push(FsRule {
                        path: c,
                        ..rule.clone()
                    });
                }
            }
            dir = next;
        }
        carved = true;
    }
    Ok(carved)
}

/// `p` with every link resolved, as Landlock resolves it when it opens a
/// rule's path: a rule on `/bin` is a rule on `/usr/bin` (merged `/usr`),
/// so containment and carving must compare resolved paths, or a denied
/// file stays reachable through a linked directory. `p` itself when it
/// cannot be resolved.
fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Translates `plan` for `target`. `policy` names rules in messages.
pub fn translate(
    policy: &Policy,
    plan: &ConfinementPlan,
    target: &Target<'_>,
) -> Result<Translated, Unholdable> {
    let mut t = Translated::default();
    let work = target.work_dir;
    let tmp = target.tmp_dir;
    let launcher_trees = [(work, "work dir"), (tmp, "temporary directory")];

    // The launcher's trees must be granted read-write by the policy.
    for (dir, what) in launcher_trees {
        let ok = [Rights::READ, Rights::WRITE]
            .into_iter()
            .all(|r| plan.storage_allow.iter().any(|g| covers_tree(g, dir, r)));
        if !ok {
            return Err(refuse(format!(
                "the policy does not grant read and write on everything beneath the {what} `{}`, and the {} rung always gives the workload its {what} read-write; cordon does not run it wider than the policy\nhelp: grant it (`path.startsWith({}) && mode in [\"read\", \"write\"]`), or build on the default with `extends: [\"cordon:default\"]`",
                dir.display(),
                target.rung,
                if *dir == *work { "work_dir + \"/\"".to_string() } else { format!("\"{}/\"", dir.display()) }
            )));
        }
    }

    let inside_launcher = |p: &Path| launcher_trees.iter().any(|(d, _)| p.starts_with(d));

    // Storage allow.
    for g in &plan.storage_allow {
        let Some((path, _dir)) = one_path(&g.paths) else {
            t.notes.push(format!(
                "{} grants `{}` only as the policy states it: the kernel holds no rule for it (narrower)",
                rules_of(policy, g),
                g.paths.show("path")
            ));
            continue;
        };
        if !path.exists() {
            continue;
        }
        let path = real(&path);
        if reserved(&path) || inside_launcher(&path) {
            // Provided by the launcher.
            continue;
        }
        t.fs.push(FsRule {
            path: path.clone(),
            read: g.rights.contains(Rights::READ),
            write: g.rights.contains(Rights::WRITE),
            execute: false,
        });
        if !g.rights.contains(Rights::EXECUTE) {
            continue;
        }
        for e in &plan.exec_allow {
            let Some(both) = g.paths.intersect(&e.paths) else {
                continue;
            };
            let Some((x, _)) = one_path(&both) else {
                t.notes.push(format!(
                    "execute on `{}` is not held (narrower)",
                    both.show("path")
                ));
                continue;
            };
            if !x.exists() {
                continue;
            }
            let x = real(&x);
            if reserved(&x) || inside_launcher(&x) {
                continue;
            }
            // INVARIANT: nothing beneath the work dir or the temporary
            // directory is ever executable.
            if launcher_trees.iter().any(|(d, _)| d.starts_with(&x)) {
                t.notes.push(format!(
                    "execute on `{}` is not held: it holds the work dir or the temporary directory (narrower)",
                    x.display()
                ));
                continue;
            }
            t.fs.push(FsRule {
                path: x,
                read: g.rights.contains(Rights::READ),
                write: false,
                execute: true,
            });
        }
    }

    let mut budget = MAX_WALK;
    let mut masks: BTreeSet<PathBuf> = BTreeSet::new();

    // Storage deny.
    for d in &plan.storage_deny {
        let who = rules_of(policy, d);
        if d.paths.is_everything() {
            for r in &mut t.fs {
                remove(r, d.rights);
            }
            if d.rights.contains(Rights::READ) || d.rights.contains(Rights::WRITE) {
                return Err(refuse(format!(
                    "{who} denies {} of every path, but the {} rung always gives the workload its work dir and temporary directory read-write; the workload is refused, not run wider",
                    d.rights.show(),
                    target.rung
                )));
            }
            continue;
        }
        let exact = one_path(&d.paths)
            .filter(|(_, dir)| *dir || matches!(d.paths.all_of.as_slice(), [PathAtom::Exact(_)]));
        // The trees this deny reaches: the plan's rules plus the launcher's.
        let mut trees: Vec<(PathBuf, bool, bool)> =
            t.fs.iter()
                .filter(|r| has(r, d.rights))
                .map(|r| (r.path.clone(), r.write, false))
                .collect();
        for (dir, _) in launcher_trees {
            trees.push((dir.to_path_buf(), true, true));
        }
        let targets: Vec<PathBuf> = match &exact {
            Some((p, _)) => vec![p.clone()],
            None => {
                let mut found = Vec::new();
                for (root, _, _) in &trees {
                    let hits = enumerate(root, &d.paths, &mut budget).map_err(|()| {
                        refuse(format!(
                            "{who} denies `{}`, which cordon must find beneath the granted trees, and the walk passed {MAX_WALK} entries; write the deny as a directory (`path.startsWith(\"/dir/\")`) or exact paths",
                            d.paths.show("path")
                        ))
                    })?;
                    found.extend(hits);
                }
                found
            }
        };
        // New paths the deny could match in a writable tree cannot be masked.
        for (root, writable, _) in &trees {
            if !*writable {
                continue;
            }
            let beneath = PathSet {
                all_of: vec![PathAtom::Prefix(format!("{}/", root.display()))],
            };
            let could_match = d.paths.intersect(&beneath).is_some();
            let missing_exact = match &exact {
                Some((p, _)) => p.starts_with(root) && p != root && !p.exists(),
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
        for p in targets.into_iter().map(|p| real(&p)) {
            for r in &mut t.fs {
                if r.path.starts_with(&p) {
                    // The deny covers this whole rule.
                    remove(r, d.rights);
                }
            }
            let inside: Vec<&(PathBuf, bool, bool)> = trees
                .iter()
                .filter(|(root, _, _)| p.starts_with(root))
                .collect();
            let launcher_whole = launcher_trees.iter().any(|(dir, _)| dir.starts_with(&p));
            if launcher_whole {
                return Err(refuse(format!(
                    "{who} denies `{}`, which holds the work dir or the temporary directory the rung always gives read-write; the workload is refused, not run wider",
                    p.display()
                )));
            }
            let strictly_inside = inside.iter().any(|(root, _, _)| p != *root);
            if !strictly_inside || !p.exists() {
                continue;
            }
            if target.rung == Rung::Process {
                // The work dir and the temporary directory are the launcher's
                // own writable trees: nothing can be carved out of them.
                let in_launcher = launcher_trees.iter().any(|(dir, _)| p.starts_with(dir));
                if in_launcher || !carve_around(&mut t.fs, &p, &who, &mut budget)? {
                    return Err(refuse(format!(
                        "{who} denies `{}` inside a tree the workload may write; the process rung cannot hide one path there (Landlock grants whole trees and the workload needs the directory to create files)\nhelp: run at the container rung (`--min-isolation container`), which masks it",
                        p.display()
                    )));
                }
                t.notes.push(format!(
                    "{who}: `{}` is left out of the grants around it (the process rung has no masks)",
                    p.display()
                ));
                continue;
            }
            if masks.insert(p.clone()) {
                t.notes.push(format!(
                    "{who}: `{}` is hidden entirely (masked), stronger than denying only {}",
                    p.display(),
                    d.rights.show()
                ));
            }
        }
    }
    // The process rung has no private /tmp: a grant on all of /tmp is the
    // host's shared /tmp, where the workload could leave files (or links)
    // for other users that outlive it. The workload gets its own temporary
    // directory (`TMPDIR`) instead, so that grant is left out — narrower. (A
    // grant on a named path beneath /tmp is the operator's choice and kept.)
    if target.rung == Rung::Process {
        let shared = |p: &Path| p == Path::new("/tmp");
        if t.fs.iter().any(|r| shared(&r.path)) {
            t.notes.push(format!(
                "the host's shared /tmp is not granted at the process rung (it is not private there); the workload's temporary directory is `{}` (TMPDIR)",
                tmp.display()
            ));
        }
        t.fs.retain(|r| !shared(&r.path));
    }
    t.fs.retain(|r| r.read || r.write || r.execute);

    // Exec deny.
    let exec_trees: Vec<PathBuf> =
        t.fs.iter()
            .filter(|r| r.execute)
            .map(|r| r.path.clone())
            .collect();
    let mut mask_exec: BTreeSet<PathBuf> = BTreeSet::new();
    for e in &plan.exec_deny {
        let who = rules_of(policy, e);
        if e.paths.is_everything() {
            for r in &mut t.fs {
                r.execute = false;
            }
            continue;
        }
        let files: Vec<PathBuf> = match e.paths.all_of.as_slice() {
            [PathAtom::Exact(p)] => vec![PathBuf::from(p)],
            _ => {
                let mut found = Vec::new();
                for root in &exec_trees {
                    found.extend(enumerate(root, &e.paths, &mut budget).map_err(|()| {
                        refuse(format!(
                            "{who} denies running `{}`, which cordon must find beneath the executable trees, and the walk passed {MAX_WALK} entries; name the programs exactly",
                            e.paths.show("command")
                        ))
                    })?);
                }
                found
            }
        };
        for f in files.into_iter().map(|f| real(&f)) {
            if !f.is_file() {
                continue;
            }
            let reachable = |right: fn(&FsRule) -> bool| {
                t.fs.iter().any(|r| right(r) && f.starts_with(&r.path))
            };
            let readable = reachable(|r| r.read);
            let executable = reachable(|r| r.execute);
            if !readable && !executable {
                continue;
            }
            if target.rung == Rung::Process {
                // Landlock checks execute at `execve` only, so `ld.so FILE`
                // would run a readable file: leave it out of reading too.
                carve_around(&mut t.fs, &f, &who, &mut budget)?;
                t.fs.retain(|r| r.path != f);
                t.notes.push(format!(
                    "{who}: `{}` is left out of the grants (the process rung has no masks)",
                    f.display()
                ));
                continue;
            }
            mask_exec.insert(f);
        }
    }
    t.mask_paths = masks.into_iter().collect();
    t.mask_executables = mask_exec.into_iter().collect();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{Deployment, Identity};

    /// A host tree: `root/sys/bin/{ok,bad}`, `root/data/{a.txt,.env,secret/k}`.
    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            let dir = tempfile::tempdir().unwrap();
            let r = dir.path();
            for d in ["sys/bin", "data/secret", "work", "tmp"] {
                std::fs::create_dir_all(r.join(d)).unwrap();
            }
            for f in [
                "sys/bin/ok",
                "sys/bin/bad",
                "data/a.txt",
                "data/.env",
                "data/secret/k",
            ] {
                std::fs::write(r.join(f), "x").unwrap();
            }
            Tree { dir }
        }
        fn p(&self, rel: &str) -> String {
            format!("{}/{rel}", self.dir.path().display())
        }
        /// Translates a policy whose `$R` stands for the tree's root.
        fn run(&self, rung: Rung, yaml: &str) -> Result<Translated, Unholdable> {
            let text = yaml.replace("$R", &self.p("")[..self.p("").len() - 1]);
            let policy =
                Policy::load_str("t.yaml", &text).unwrap_or_else(|d| panic!("{}", d.render()));
            let work = PathBuf::from(self.p("work"));
            let plan = policy
                .plan(
                    &Identity {
                        namespace: "t".into(),
                        ..Identity::default()
                    },
                    &Deployment::default(),
                    0,
                    work.to_str().unwrap(),
                )
                .unwrap();
            let tmp = PathBuf::from(self.p("tmp"));
            translate(
                &policy,
                &plan,
                &Target {
                    rung,
                    work_dir: &work,
                    tmp_dir: &tmp,
                },
            )
        }
    }

    const BASE: &str = r#"
policy:
  compute:
    allow:
      - name: sys-programs
        when: command.startsWith("$R/sys/")
    DENY_COMPUTE
  storage:
    allow:
      - name: sys
        when: path.startsWith("$R/sys/") && mode in ["read", "execute"]
      - name: data
        when: path.startsWith("$R/data/") && mode == "read"
      - name: missing-file
        when: path == "$R/data/nope" && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write", "execute"]
      - name: tmp
        when: path.startsWith("$R/tmp/") && mode in ["read", "write"]
    DENY_STORAGE
"#;

    fn policy(deny_compute: &str, deny_storage: &str) -> String {
        BASE.replace("DENY_COMPUTE", deny_compute)
            .replace("DENY_STORAGE", deny_storage)
    }

    fn rule<'a>(t: &'a Translated, path: &str) -> Vec<&'a FsRule> {
        t.fs.iter().filter(|r| r.path == Path::new(path)).collect()
    }

    #[test]
    fn execute_only_where_both_surfaces_allow_and_never_in_the_work_dir() {
        let tree = Tree::new();
        let t = tree.run(Rung::Container, &policy("", "")).unwrap();
        // data is readable, never executable or writable.
        let data = rule(&t, &tree.p("data"));
        assert!(!data.is_empty() && data.iter().all(|r| r.read && !r.write && !r.execute));
        // A missing exact file grants nothing.
        assert!(rule(&t, &tree.p("data/nope")).is_empty());
        // sys is executable (storage execute and compute allow).
        assert!(rule(&t, &tree.p("sys")).iter().any(|r| r.execute));
        // The work dir is the launcher's (read-write, never execute), even
        // though the policy grants execute there.
        assert!(t
            .fs
            .iter()
            .all(|r| !(r.execute && r.path.starts_with(tree.p("work")))));
        assert!(t.mask_paths.is_empty() && t.mask_executables.is_empty());
    }

    #[test]
    fn a_work_dir_the_policy_does_not_grant_read_write_is_refused() {
        let tree = Tree::new();
        let text = policy("", "").replace(
            r#"mode in ["read", "write", "execute"]"#,
            r#"mode == "read""#,
        );
        let e = tree.run(Rung::Container, &text).unwrap_err();
        assert!(e.message.contains("does not grant read and write"), "{e}");
    }

    /// No rule may reach `denied`: none on it or on a directory above it.
    fn reaches(t: &Translated, denied: &str) -> Vec<PathBuf> {
        t.fs.iter()
            .filter(|r| Path::new(denied).starts_with(&r.path))
            .map(|r| r.path.clone())
            .collect()
    }

    #[test]
    fn a_deny_inside_a_grant_is_masked_at_the_container_rung_and_carved_out_at_the_process_rung() {
        let tree = Tree::new();
        let deny = r#"deny:
      - name: no-secret
        when: path.startsWith("$R/data/secret/")"#;
        let t = tree.run(Rung::Container, &policy("", deny)).unwrap();
        assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("data/secret"))]);
        // The process rung has no masks: the read-only grant on `data` is
        // replaced by grants on its other entries.
        let t = tree.run(Rung::Process, &policy("", deny)).unwrap();
        assert!(t.mask_paths.is_empty());
        assert_eq!(
            reaches(&t, &tree.p("data/secret/k")),
            Vec::<PathBuf>::new(),
            "{t:?}"
        );
        assert!(
            !rule(&t, &tree.p("data/a.txt")).is_empty(),
            "siblings stay granted: {t:?}"
        );
        // A link among the siblings is not granted (it would grant its target).
        std::os::unix::fs::symlink("/etc", tree.p("data/link")).unwrap();
        let t = tree.run(Rung::Process, &policy("", deny)).unwrap();
        assert!(rule(&t, &tree.p("data/link")).is_empty(), "{t:?}");
        // Inside a writable tree it cannot be carved: refused.
        std::fs::create_dir(tree.p("work/.ssh")).unwrap();
        let deny = r#"deny:
      - name: no-keys
        when: path.startsWith(work_dir + "/.ssh/")"#;
        let e = tree.run(Rung::Process, &policy("", deny)).unwrap_err();
        assert!(
            e.message.contains("no-keys") && e.message.contains("container rung"),
            "{e}"
        );
    }

    #[test]
    fn a_grant_through_a_linked_directory_cannot_reach_a_carved_file() {
        // `lbin` links to `sys/bin` (as `/bin` links to `/usr/bin`); the
        // rule on it is a rule on `sys/bin` to Landlock, so the carve must
        // see it as one. A hard link beside the denied file goes too.
        let tree = Tree::new();
        std::os::unix::fs::symlink(tree.p("sys/bin"), tree.p("lbin")).unwrap();
        std::fs::hard_link(tree.p("sys/bin/bad"), tree.p("sys/bin/bad2")).unwrap();
        let text = policy(
            "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"",
            "",
        )
        .replace(
            "  storage:\n    allow:\n",
            &format!(
                "  storage:\n    allow:\n      - name: linked\n        when: path.startsWith(\"{}/\") && mode != \"write\"\n",
                tree.p("lbin")
            ),
        );
        let t = tree.run(Rung::Process, &text).unwrap();
        for denied in ["sys/bin/bad", "sys/bin/bad2"] {
            assert_eq!(
                reaches(&t, &tree.p(denied)),
                Vec::<PathBuf>::new(),
                "{denied}: {t:?}"
            );
        }
        assert!(
            t.fs.iter().all(|r| !r.path.starts_with(tree.p("lbin"))),
            "rules are on resolved paths: {t:?}"
        );
    }

    #[test]
    fn a_suffix_deny_is_enumerated_and_each_match_masked() {
        let tree = Tree::new();
        let deny = r#"deny:
      - name: no-env
        when: path.endsWith("/.env") && !path.startsWith(work_dir + "/") && !path.startsWith("$R/tmp/")"#;
        // The negations cannot be held, so the deny holds everywhere —
        // including the writable work dir, where a `.env` could be created.
        let e = tree.run(Rung::Container, &policy("", deny)).unwrap_err();
        assert!(e.message.contains("could create"), "{e}");
        let deny = r#"deny:
      - name: no-env
        when: path.endsWith("/.env") && path.startsWith("$R/data/")"#;
        let t = tree.run(Rung::Container, &policy("", deny)).unwrap();
        assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("data/.env"))]);
    }

    #[test]
    fn a_missing_deny_target_in_a_writable_tree_is_refused() {
        let tree = Tree::new();
        let deny = r#"deny:
      - name: no-keys
        when: path.startsWith(work_dir + "/.ssh/")"#;
        let e = tree.run(Rung::Container, &policy("", deny)).unwrap_err();
        assert!(
            e.message.contains("no-keys") && e.message.contains(".ssh"),
            "{e}"
        );
        // It exists: masked.
        std::fs::create_dir(tree.p("work/.ssh")).unwrap();
        let t = tree.run(Rung::Container, &policy("", deny)).unwrap();
        assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("work/.ssh"))]);
    }

    #[test]
    fn a_deny_of_every_read_is_refused_and_a_deny_of_a_whole_tree_removes_its_rule() {
        let tree = Tree::new();
        let e = tree
            .run(
                Rung::Container,
                &policy(
                    "",
                    "deny:\n      - name: all\n        when: mode == \"read\"",
                ),
            )
            .unwrap_err();
        assert!(e.message.contains("every path"), "{e}");
        let deny = "deny:\n      - name: no-data\n        when: path.startsWith(\"$R/data/\")";
        let t = tree.run(Rung::Process, &policy("", deny)).unwrap();
        assert!(rule(&t, &tree.p("data")).is_empty(), "{t:?}");
    }

    #[test]
    fn a_denied_executable_is_masked_at_the_container_rung_and_left_unreadable_at_the_process_rung()
    {
        let tree = Tree::new();
        let deny = "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"";
        let t = tree.run(Rung::Container, &policy(deny, "")).unwrap();
        assert_eq!(
            t.mask_executables,
            vec![PathBuf::from(tree.p("sys/bin/bad"))]
        );
        // The process rung cannot mask it, and Landlock checks execute only
        // at `execve` (`ld.so FILE` runs a readable file): it is left out of
        // reading as well as executing.
        let t = tree.run(Rung::Process, &policy(deny, "")).unwrap();
        assert_eq!(
            reaches(&t, &tree.p("sys/bin/bad")),
            Vec::<PathBuf>::new(),
            "{t:?}"
        );
        assert!(!rule(&t, &tree.p("sys/bin/ok")).is_empty(), "{t:?}");
        // A prefix deny is enumerated: every match is masked.
        let deny = "deny:\n      - name: no-b\n        when: command.startsWith(\"$R/sys/bin/b\")";
        let t = tree.run(Rung::Container, &policy(deny, "")).unwrap();
        assert_eq!(
            t.mask_executables,
            vec![PathBuf::from(tree.p("sys/bin/bad"))]
        );
    }
}
