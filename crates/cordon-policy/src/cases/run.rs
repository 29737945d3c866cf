//! Running cases against a policy, and what they covered.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Case, Expect};
use crate::explain::Explanation;
use crate::model::RuleId;
use crate::policy::Policy;

/// How one case came out.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub passed: bool,
    /// The verdict as enforced: undetermined is deny.
    pub got: Expect,
    /// The decision and why, from the evaluation that decided.
    pub explanation: Explanation,
    /// Set when `rule:` named a rule that was not among those that decided.
    pub missing_rule: Option<String>,
}

/// Decides a case as the final enforcing point decides it.
pub fn run(policy: &Policy, case: &Case) -> CaseResult {
    let explanation = policy.explain(&case.request);
    let decision = &explanation.decision;
    let got = if decision.is_allowed() {
        Expect::Allow
    } else {
        Expect::Deny
    };
    let missing_rule = case.rule.as_ref().and_then(|want| {
        let hit = decision
            .deciding
            .iter()
            .any(|id| rule_matches(policy, *id, want));
        (!hit).then(|| want.clone())
    });
    CaseResult {
        passed: got == case.expect && missing_rule.is_none(),
        got,
        explanation,
        missing_rule,
    }
}

/// The `rule:` entries of `cases` that name no rule of `policy`: a test
/// that names a rule the policy lacks is wrong, not failing.
pub fn unknown_rules<'c>(policy: &Policy, cases: &'c [Case]) -> Vec<&'c Case> {
    cases
        .iter()
        .filter(|c| {
            c.rule.as_ref().is_some_and(|want| {
                !(0..policy.rules.len() as u32).any(|i| rule_matches(policy, RuleId(i), want))
            })
        })
        .collect()
}

/// Whether `want` names rule `id`: by its name, or as `FILE:NAME`.
pub fn rule_matches(policy: &Policy, id: RuleId, want: &str) -> bool {
    let r = policy.rule(id);
    r.name == want || format!("{}:{}", r.file, r.name) == want
}

/// Rules are the same rule when they stand at the same place in the same
/// file, so a file reached along two paths is covered by either inclusion.
pub fn rule_place(policy: &Policy, id: RuleId) -> (Arc<str>, usize, usize) {
    let r = policy.rule(id);
    (r.file.clone(), r.line, r.column)
}

/// The rules no case exercised (none decided any case), in file order.
pub fn uncovered(policy: &Policy, results: &[CaseResult]) -> Vec<RuleId> {
    let covered: BTreeSet<_> = results
        .iter()
        .flat_map(|r| {
            r.explanation
                .decision
                .deciding
                .iter()
                .map(|id| rule_place(policy, *id))
        })
        .collect();
    let mut seen = BTreeSet::new();
    (0..policy.rules.len() as u32)
        .map(RuleId)
        .filter(|id| {
            let p = rule_place(policy, *id);
            !covered.contains(&p) && seen.insert(p)
        })
        .collect()
}
