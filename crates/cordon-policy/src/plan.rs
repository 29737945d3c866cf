//! Confinement plans: the storage and compute surfaces, partially evaluated
//! for one identity, as static rules a kernel can hold.
//!
//! Once the identity is known, `identity`, `env` and `now` are bound and
//! every storage and compute rule of the layers that apply is reduced to a
//! formula over what is left (`path`, `mode`, `command`, ...), then to a
//! union of clauses, each a set of paths (prefixes, exact paths, suffixes)
//! with the rights it grants or denies. Facts the kernel cannot see when the
//! workload itself accesses a file or starts a process — `bytes` of a write,
//! `args`, `cpu` and `memory` of a process it spawns — and forms it cannot
//! hold are **unknown**: an allow clause that depends on one grants nothing,
//! a deny clause that depends on one denies as if it held. So a plan is
//! never wider than the policy ([`ConfinementPlan::may`] implies the policy
//! allows the same access with those facts unknown; a property test checks
//! it), and [`lint`] tells the author at load where a rule is held narrower
//! or wider than it reads.
//!
//! The plan is data; turning it into Landlock rules, mounts and masks is the
//! enforcer's job (`cordon-linux`), which refuses what it cannot hold.

use std::collections::BTreeSet;

use crate::decide::{Base, Deployment, Identity};
use crate::expr::{self, Const, FactSource, Kind, NoTrace, Node, Val};
use crate::model::{Bounds, Effect, Rule, RuleId};
use crate::policy::Policy;
use crate::vocab::{Fact, Surface};

/// Access rights over a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Rights(pub u8);

impl Rights {
    pub const NONE: Rights = Rights(0);
    pub const READ: Rights = Rights(1);
    pub const WRITE: Rights = Rights(2);
    pub const EXECUTE: Rights = Rights(4);
    pub const ALL: Rights = Rights(7);

    pub fn contains(self, r: Rights) -> bool {
        self.0 & r.0 == r.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    fn and(self, r: Rights) -> Rights {
        Rights(self.0 & r.0)
    }
    fn complement(self) -> Rights {
        Rights(!self.0 & 7)
    }
    fn of_mode(mode: &str) -> Option<Rights> {
        match mode {
            "read" => Some(Rights::READ),
            "write" => Some(Rights::WRITE),
            "execute" => Some(Rights::EXECUTE),
            _ => None,
        }
    }
    /// `read`, `read+write`, ...
    pub fn show(self) -> String {
        let names: Vec<&str> = [(1, "read"), (2, "write"), (4, "execute")]
            .into_iter()
            .filter(|(b, _)| self.0 & b != 0)
            .map(|(_, n)| n)
            .collect();
        if names.is_empty() {
            "nothing".into()
        } else {
            names.join("+")
        }
    }
}

/// One constraint on a path (or a command's path).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PathAtom {
    /// `startsWith`: a directory when it ends in `/`, else any name that
    /// begins so (the enforcer can list those only in a read-only tree).
    Prefix(String),
    Exact(String),
    /// `endsWith`: the enforcer can list those only in a read-only tree.
    Suffix(String),
}

impl PathAtom {
    fn matches(&self, p: &str) -> bool {
        match self {
            PathAtom::Prefix(x) => p.starts_with(x.as_str()),
            PathAtom::Exact(x) => p == x,
            PathAtom::Suffix(x) => p.ends_with(x.as_str()),
        }
    }
}

/// A set of paths: those meeting every atom (none: every path).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
pub struct PathSet {
    pub all_of: Vec<PathAtom>,
}

impl PathSet {
    pub fn matches(&self, p: &str) -> bool {
        self.all_of.iter().all(|a| a.matches(p))
    }

    pub fn is_everything(&self) -> bool {
        self.all_of.is_empty()
    }

    /// The intersection, or `None` when it is certainly empty.
    pub fn intersect(&self, other: &PathSet) -> Option<PathSet> {
        let mut all: Vec<PathAtom> = self.all_of.clone();
        for a in &other.all_of {
            if !all.contains(a) {
                all.push(a.clone());
            }
        }
        let exacts: Vec<&String> = all
            .iter()
            .filter_map(|a| match a {
                PathAtom::Exact(x) => Some(x),
                _ => None,
            })
            .collect();
        if let Some(e) = exacts.first() {
            // One path at most: it must meet every atom.
            return all.iter().all(|a| a.matches(e)).then(|| PathSet {
                all_of: vec![PathAtom::Exact((*e).clone())],
            });
        }
        // Two prefixes meet only if one extends the other; keep the longer.
        let mut prefixes: Vec<String> = all
            .iter()
            .filter_map(|a| match a {
                PathAtom::Prefix(x) => Some(x.clone()),
                _ => None,
            })
            .collect();
        prefixes.sort_by_key(|p| std::cmp::Reverse(p.len()));
        if let Some(longest) = prefixes.first() {
            if !prefixes.iter().all(|p| longest.starts_with(p.as_str())) {
                return None;
            }
            all.retain(|a| !matches!(a, PathAtom::Prefix(p) if p != longest));
        }
        all.sort();
        Some(PathSet { all_of: all })
    }

    /// As a policy would write it.
    pub fn show(&self, var: &str) -> String {
        if self.all_of.is_empty() {
            return "every path".into();
        }
        self.all_of
            .iter()
            .map(|a| match a {
                PathAtom::Prefix(x) => format!("{var}.startsWith({x:?})"),
                PathAtom::Exact(x) => format!("{var} == {x:?}"),
                PathAtom::Suffix(x) => format!("{var}.endsWith({x:?})"),
            })
            .collect::<Vec<_>>()
            .join(" && ")
    }
}

/// Paths with the rights granted (or denied) on them, and the rules it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Grant {
    pub paths: PathSet,
    pub rights: Rights,
    #[serde(skip)]
    pub rules: Vec<RuleId>,
}

/// How a rule was held where the kernel cannot see everything it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanNote {
    pub rule: RuleId,
    pub message: String,
}

/// Static rules for the workload's own accesses, for one identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinementPlan {
    /// Storage: what may be accessed (a union of grants).
    pub storage_allow: Vec<Grant>,
    /// Storage: what may not (a union; subtracted from the grants).
    pub storage_deny: Vec<Grant>,
    /// Compute: what may be executed (rights are `execute`).
    pub exec_allow: Vec<Grant>,
    /// Compute: what may not be executed.
    pub exec_deny: Vec<Grant>,
    pub bounds: Bounds,
    pub notes: Vec<PlanNote>,
}

impl ConfinementPlan {
    /// Whether the plan lets the workload access `path` with `right` (one
    /// of read, write, execute). Executing needs the storage surface's
    /// `execute` and the compute surface's allow, and no deny of either.
    pub fn may(&self, path: &str, right: Rights) -> bool {
        let granted = |gs: &[Grant], r: Rights| {
            gs.iter()
                .any(|g| g.rights.contains(r) && g.paths.matches(path))
        };
        let storage = granted(&self.storage_allow, right) && !granted(&self.storage_deny, right);
        if right != Rights::EXECUTE {
            return storage;
        }
        storage && granted(&self.exec_allow, right) && !granted(&self.exec_deny, right)
    }
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("rule `{rule}` expands to more than {MAX_CLAUSES} alternatives when partially evaluated; split it into several rules")]
    TooLarge { rule: String },
    #[error("the {surface} allow rules of the applying layers intersect to more than {MAX_GRANTS} grants; merge rules so the plan stays small")]
    TooManyGrants { surface: Surface },
}

/// The most alternatives one rule may reduce to.
pub const MAX_CLAUSES: usize = 256;
/// The most grants one surface's plan may hold.
pub const MAX_GRANTS: usize = 4096;

impl Policy {
    /// The confinement plan for one identity: the storage and compute rules
    /// of the layers that apply to it, partially evaluated with `identity`,
    /// `env`, `now` and the sandbox's `work_dir` (as the workload sees it)
    /// bound, as static grants and denials.
    pub fn plan(
        &self,
        identity: &Identity,
        env: &Deployment,
        now: i64,
        work_dir: &str,
    ) -> Result<ConfinementPlan, PlanError> {
        let base = Base {
            identity,
            env,
            now: Some(now),
            work_dir: Some(work_dir),
        };
        let layers = self.applying_layers(identity, env);
        let mut notes = Vec::new();
        let mut surface = |s: Surface| -> Result<(Vec<Grant>, Vec<Grant>), PlanError> {
            let mut allow: Option<Vec<Grant>> = None;
            let mut deny: Vec<Grant> = Vec::new();
            for &l in &layers {
                let Some(rules) = self.layers[l as usize].surfaces.get(&s) else {
                    if l == 0 {
                        // What the root does not allow, nothing allows.
                        allow = Some(Vec::new());
                    }
                    continue;
                };
                let ids = |idx: &crate::model::RuleIndex| -> Vec<RuleId> {
                    let mut v: Vec<RuleId> = idx
                        .always
                        .iter()
                        .chain(idx.by_namespace.values().flatten())
                        .copied()
                        .collect();
                    v.sort_unstable();
                    v
                };
                for id in ids(&rules.deny) {
                    deny.extend(self.hold(id, &base, &mut notes)?);
                }
                if !rules.allow_stated {
                    if l == 0 {
                        allow = Some(Vec::new());
                    }
                    continue;
                }
                let mut here = Vec::new();
                for id in ids(&rules.allow) {
                    here.extend(self.hold(id, &base, &mut notes)?);
                }
                allow = Some(match allow {
                    None => here,
                    Some(prev) => intersect(&prev, &here, s)?,
                });
            }
            Ok((allow.unwrap_or_default(), deny))
        };
        let (storage_allow, storage_deny) = surface(Surface::Storage)?;
        let (exec_allow, exec_deny) = surface(Surface::Compute)?;
        Ok(ConfinementPlan {
            storage_allow,
            storage_deny,
            exec_allow,
            exec_deny,
            bounds: self.bounds_for(identity, env),
            notes,
        })
    }

    /// One rule as grants (allow) or denials (deny) under bound base facts.
    fn hold(
        &self,
        id: RuleId,
        base: &Base<'_>,
        notes: &mut Vec<PlanNote>,
    ) -> Result<Vec<Grant>, PlanError> {
        let rule = self.rule(id);
        let f = formula(&rule.compiled.root, true, rule.surface, &Bind::Known(base));
        let clauses = dnf(&f).ok_or_else(|| PlanError::TooLarge {
            rule: rule.name.clone(),
        })?;
        let mut out = Vec::new();
        for mut c in clauses {
            if rule.surface == Surface::Compute {
                // A compute rule is about starting a process: execute.
                c.rights = Rights::EXECUTE;
            }
            if !c.unknown.is_empty() {
                let why: Vec<String> = c.unknown.iter().cloned().collect();
                match rule.effect {
                    Effect::Allow => {
                        notes.push(PlanNote {
                            rule: id,
                            message: format!(
                                "an alternative of `{}` grants nothing to the workload's own accesses: {}",
                                rule.name,
                                why.join("; ")
                            ),
                        });
                        continue;
                    }
                    Effect::Deny => notes.push(PlanNote {
                        rule: id,
                        message: format!(
                            "`{}` denies {} of {} to the workload's own accesses whatever it cannot see: {}",
                            rule.name,
                            c.rights.show(),
                            c.paths.show(var(rule.surface)),
                            why.join("; ")
                        ),
                    }),
                }
            }
            out.push(Grant {
                paths: c.paths,
                rights: c.rights,
                rules: vec![id],
            });
        }
        Ok(out)
    }
}

fn var(s: Surface) -> &'static str {
    if s == Surface::Compute {
        "command"
    } else {
        "path"
    }
}

/// Grants allowed by both lists.
fn intersect(a: &[Grant], b: &[Grant], s: Surface) -> Result<Vec<Grant>, PlanError> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let rights = x.rights.and(y.rights);
            if rights.is_empty() {
                continue;
            }
            if let Some(paths) = x.paths.intersect(&y.paths) {
                let mut rules = x.rules.clone();
                rules.extend(&y.rules);
                out.push(Grant {
                    paths,
                    rights,
                    rules,
                });
                if out.len() > MAX_GRANTS {
                    return Err(PlanError::TooManyGrants { surface: s });
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Partial evaluation
// ---------------------------------------------------------------------------

/// How base-only parts are treated: evaluated (a plan), or left opaque
/// (the load-time lint, before any identity is known).
enum Bind<'a> {
    Known(&'a Base<'a>),
    Later,
}

const BASE: u32 = (1 << Fact::IdentityNamespace as u32)
    | (1 << Fact::IdentityName as u32)
    | (1 << Fact::IdentityAttested as u32)
    | (1 << Fact::IdentityLabels as u32)
    | (1 << Fact::EnvName as u32)
    | (1 << Fact::Now as u32)
    | (1 << Fact::WorkDir as u32);

fn reads(n: &Node) -> u32 {
    let mut bits = match n.kind {
        Kind::Fact(f) => f.bit(),
        // A comprehension variable ranges over a surface list (`args`) or
        // a literal; what it reads is counted at the range.
        _ => 0,
    };
    expr::children(n, &mut |c| bits |= reads(c));
    bits
}

fn has_local(n: &Node) -> bool {
    let mut found = matches!(n.kind, Kind::Local(_));
    expr::children(n, &mut |c| found |= has_local(c));
    found
}

/// A formula over atoms the kernel can hold, negations pushed to atoms.
#[derive(Debug, Clone)]
enum F {
    True,
    False,
    Path(PathAtom),
    /// The modes that satisfy it.
    Mode(Rights),
    /// Something the kernel cannot hold, and why.
    Unknown(String),
    /// A base-only part left for later (lint only): may be either.
    Opaque,
    And(Vec<F>),
    Or(Vec<F>),
}

/// The formula of `n` (or of `!n` when `positive` is false).
fn formula(n: &Node, positive: bool, s: Surface, bind: &Bind<'_>) -> F {
    let r = reads(n);
    if r & !BASE == 0 && !has_local(n) {
        // Only identity, env, now: a constant once they are bound.
        return match bind {
            Bind::Later => F::Opaque,
            Bind::Known(b) => match expr::eval(n, *b, &mut NoTrace) {
                Ok(Val::Bool(v)) => {
                    if v == positive {
                        F::True
                    } else {
                        F::False
                    }
                }
                Ok(_) | Err(_) => F::Unknown(format!(
                    "`{}` cannot be decided for this identity",
                    describe(n)
                )),
            },
        };
    }
    match &n.kind {
        Kind::And(a, b) | Kind::Or(a, b) => {
            let is_and = matches!(n.kind, Kind::And(..)) == positive;
            let parts = vec![formula(a, positive, s, bind), formula(b, positive, s, bind)];
            if is_and {
                F::And(parts)
            } else {
                F::Or(parts)
            }
        }
        Kind::Not(a) => formula(a, !positive, s, bind),
        Kind::Cond(c, a, b) => {
            // (c && a) || (!c && b), under the polarity.
            let yes = F::And(vec![
                formula(c, true, s, bind),
                formula(a, positive, s, bind),
            ]);
            let no = F::And(vec![
                formula(c, false, s, bind),
                formula(b, positive, s, bind),
            ]);
            F::Or(vec![yes, no])
        }
        Kind::Ne(a, b) => atom_eq(a, b, !positive, s, bind),
        Kind::Eq(a, b) => atom_eq(a, b, positive, s, bind),
        Kind::StartsWith(a, b) | Kind::EndsWith(a, b) => {
            let prefix = matches!(n.kind, Kind::StartsWith(..));
            match (subject(a, s), constant_str(b, bind)) {
                (Some(_), Some(Some(x))) if positive => F::Path(if prefix {
                    PathAtom::Prefix(x)
                } else {
                    PathAtom::Suffix(x)
                }),
                (Some(_), Some(None)) => F::Opaque,
                (Some(v), Some(Some(_))) => F::Unknown(format!(
                    "a negated `{v}.{}` cannot be held by the kernel",
                    if prefix { "startsWith" } else { "endsWith" }
                )),
                _ => unknown(n, s),
            }
        }
        Kind::In(a, b) => {
            let Some(list) = constant_list(b, bind) else {
                return unknown(n, s);
            };
            let Some(list) = list else {
                return F::Opaque;
            };
            let alts: Vec<F> = list
                .into_iter()
                .map(|x| atom_value(a, &x, positive, s))
                .collect();
            if positive {
                F::Or(alts)
            } else {
                F::And(alts)
            }
        }
        _ => unknown(n, s),
    }
}

/// `path`/`command` (the subject of a path atom) in this surface.
fn subject(n: &Node, s: Surface) -> Option<&'static str> {
    match (&n.kind, s) {
        (Kind::Fact(Fact::Path), Surface::Storage) => Some("path"),
        (Kind::Fact(Fact::Command), Surface::Compute) => Some("command"),
        _ => None,
    }
}

/// The value of a base-only node, converted: `Some(None)` when it is left
/// for later (the lint, before an identity is known), `None` when it is not
/// base-only or does not convert.
fn constant<T>(
    n: &Node,
    bind: &Bind<'_>,
    conv: impl FnOnce(Val<'_>) -> Option<T>,
) -> Option<Option<T>> {
    if reads(n) & !BASE != 0 || has_local(n) {
        return None;
    }
    let v = match bind {
        // A literal needs no identity.
        Bind::Later if reads(n) == 0 => expr::eval(n, &NoFacts, &mut NoTrace),
        Bind::Later => return Some(None),
        Bind::Known(b) => expr::eval(n, *b, &mut NoTrace),
    };
    v.ok().and_then(conv).map(Some)
}

fn constant_str(n: &Node, bind: &Bind<'_>) -> Option<Option<String>> {
    constant(n, bind, |v| match v {
        Val::Str(s) => Some(s.into_owned()),
        _ => None,
    })
}

fn constant_list(n: &Node, bind: &Bind<'_>) -> Option<Option<Vec<String>>> {
    constant(n, bind, |v| match v {
        Val::List(xs) => xs
            .into_iter()
            .map(|x| match x {
                Val::Str(s) => Some(s.into_owned()),
                _ => None,
            })
            .collect(),
        _ => None,
    })
}

/// No facts at all: for evaluating literals.
struct NoFacts;

impl FactSource for NoFacts {
    fn fact(&self, _: Fact) -> Option<Val<'_>> {
        None
    }
}

fn atom_eq(a: &Node, b: &Node, positive: bool, s: Surface, bind: &Bind<'_>) -> F {
    for (x, y) in [(a, b), (b, a)] {
        let is_mode = matches!(x.kind, Kind::Fact(Fact::Mode)) && s == Surface::Storage;
        if subject(x, s).is_some() || is_mode {
            return match constant_str(y, bind) {
                Some(Some(v)) => atom_value(x, &v, positive, s),
                Some(None) => F::Opaque,
                None => unknown(x, s),
            };
        }
    }
    let both = Node {
        id: 0,
        kind: Kind::Eq(Box::new(a.clone()), Box::new(b.clone())),
    };
    unknown(&both, s)
}

/// `x == v` (or `x != v`) for a subject or `mode`.
fn atom_value(x: &Node, v: &str, positive: bool, s: Surface) -> F {
    if matches!(x.kind, Kind::Fact(Fact::Mode)) {
        let r = Rights::of_mode(v).unwrap_or(Rights::NONE);
        return F::Mode(if positive { r } else { r.complement() });
    }
    match subject(x, s) {
        Some(_) if positive => F::Path(PathAtom::Exact(v.to_string())),
        Some(var) => F::Unknown(format!("`{var} != ...` cannot be held by the kernel")),
        None => unknown(x, s),
    }
}

fn unknown(n: &Node, s: Surface) -> F {
    let r = reads(n);
    let why = if r & Fact::Bytes.bit() != 0 {
        "the kernel does not see `bytes` (the size of a write) when it checks an access".to_string()
    } else if r & Fact::Args.bit() != 0 {
        "the kernel does not see `args` of a process the workload starts itself".to_string()
    } else if r & (Fact::Cpu.bit() | Fact::Memory.bit()) != 0 {
        "`cpu` and `memory` are not known for a process the workload starts itself; the plan's bounds hold them".to_string()
    } else {
        format!(
            "`{}` is not a form the kernel can hold; write `{v}.startsWith(\"/dir/\")`, `{v} == \"/file\"`, `{v}.endsWith(...)` or `{v} in [...]`",
            describe(n),
            v = var(s)
        )
    };
    F::Unknown(why)
}

/// A short description of a node for messages.
fn describe(n: &Node) -> String {
    let facts: Vec<&str> = Fact::from_bits(reads(n))
        .into_iter()
        .map(|f| f.spelling())
        .collect();
    match &n.kind {
        Kind::Matches(..) => "matches(...)".into(),
        Kind::Contains(..) => "contains(...)".into(),
        Kind::Comprehension(_) => "a macro over a list".into(),
        Kind::Cmp(..) => format!("a comparison of {}", facts.join(", ")),
        Kind::Const(Const::Bool(b)) => b.to_string(),
        _ => format!("an expression over {}", facts.join(", ")),
    }
}

/// One clause of a DNF: paths, rights, and what it could not hold.
#[derive(Debug, Clone)]
struct Clause {
    paths: PathSet,
    rights: Rights,
    unknown: BTreeSet<String>,
    opaque: bool,
}

impl Clause {
    fn top() -> Clause {
        Clause {
            paths: PathSet::default(),
            rights: Rights::ALL,
            unknown: BTreeSet::new(),
            opaque: false,
        }
    }

    /// Conjoins two clauses; `None` when certainly unsatisfiable.
    fn and(&self, o: &Clause) -> Option<Clause> {
        let rights = self.rights.and(o.rights);
        if rights.is_empty() {
            return None;
        }
        let paths = self.paths.intersect(&o.paths)?;
        let mut unknown = self.unknown.clone();
        unknown.extend(o.unknown.iter().cloned());
        Some(Clause {
            paths,
            rights,
            unknown,
            opaque: self.opaque || o.opaque,
        })
    }
}

/// The formula as a union of clauses, or `None` when it has too many.
fn dnf(f: &F) -> Option<Vec<Clause>> {
    Some(match f {
        F::True => vec![Clause::top()],
        F::False => Vec::new(),
        F::Path(a) => vec![Clause {
            paths: PathSet {
                all_of: vec![a.clone()],
            },
            ..Clause::top()
        }],
        F::Mode(r) => {
            if r.is_empty() {
                Vec::new()
            } else {
                vec![Clause {
                    rights: *r,
                    ..Clause::top()
                }]
            }
        }
        F::Unknown(why) => vec![Clause {
            unknown: BTreeSet::from([why.clone()]),
            ..Clause::top()
        }],
        F::Opaque => vec![Clause {
            opaque: true,
            ..Clause::top()
        }],
        F::Or(parts) => {
            let mut out = Vec::new();
            for p in parts {
                out.extend(dnf(p)?);
                if out.len() > MAX_CLAUSES {
                    return None;
                }
            }
            out
        }
        F::And(parts) => {
            let mut acc = vec![Clause::top()];
            for p in parts {
                let rhs = dnf(p)?;
                let mut next = Vec::new();
                for a in &acc {
                    for b in &rhs {
                        if let Some(c) = a.and(b) {
                            next.push(c);
                        }
                    }
                }
                if next.len() > MAX_CLAUSES {
                    return None;
                }
                acc = next;
            }
            acc
        }
    })
}

/// What a storage or compute rule will mean for the workload's own accesses
/// where the kernel cannot see everything it reads: one message per rule
/// that is held narrower (an allow) or wider (a deny) than it reads, for
/// `cordon policy check` to show at the rule.
pub fn lint(rule: &Rule) -> Option<String> {
    if !matches!(rule.surface, Surface::Storage | Surface::Compute) {
        return None;
    }
    let f = formula(&rule.compiled.root, true, rule.surface, &Bind::Later);
    let clauses = dnf(&f)?;
    let why: BTreeSet<String> = clauses
        .iter()
        .flat_map(|c| c.unknown.iter().cloned())
        .collect();
    if why.is_empty() {
        return None;
    }
    let what = match (rule.effect, rule.surface) {
        (Effect::Allow, Surface::Storage) => "as an allow it grants nothing to the workload's own file accesses where this applies (the first command's facts are checked in full)",
        (Effect::Allow, _) => "as an allow it lets the workload start nothing itself where this applies (the first command is checked in full)",
        (Effect::Deny, Surface::Storage) => "as a deny it denies the workload's own file accesses as if it held",
        (Effect::Deny, _) => "as a deny it refuses the executables it names to the workload's own processes whatever their arguments",
    };
    Some(format!(
        "the kernel cannot hold all of this rule: {}; {what}",
        why.into_iter().collect::<Vec<_>>().join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(atoms: &[PathAtom]) -> PathSet {
        PathSet {
            all_of: atoms.to_vec(),
        }
    }

    #[test]
    fn path_sets_intersect_as_sets_do() {
        let p = |s: &str| PathAtom::Prefix(s.into());
        let e = |s: &str| PathAtom::Exact(s.into());
        assert_eq!(
            set(&[p("/work/")]).intersect(&set(&[p("/work/out/")])),
            Some(set(&[p("/work/out/")]))
        );
        assert_eq!(set(&[p("/work/")]).intersect(&set(&[p("/usr/")])), None);
        assert_eq!(
            set(&[p("/work/")]).intersect(&set(&[e("/work/a")])),
            Some(set(&[e("/work/a")]))
        );
        assert_eq!(set(&[e("/etc/a")]).intersect(&set(&[p("/work/")])), None);
        assert_eq!(set(&[e("/a")]).intersect(&set(&[e("/b")])), None);
        assert_eq!(
            set(&[]).intersect(&set(&[p("/x/")])),
            Some(set(&[p("/x/")]))
        );
    }
}
