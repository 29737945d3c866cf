//! Explaining a decision: which rules decided it, what stayed unknown, and —
//! when no allow rule matched — the allow rule that came nearest and the
//! inputs that kept it from matching.
//!
//! An explanation is read off the same evaluation that decides:
//! [`Policy::explain`] runs [`Policy::decide_with`] with an evaluator that
//! records each rule's outcome as the decision path computes it. Only the
//! search for the nearest allow rule evaluates more (rules the namespace
//! index skipped, conjunct by conjunct), and it changes nothing decided.

use crate::decide::{eval_rule, Decision, Outcome, Request, RuleEval, SurfaceFacts, Verdict, View};
use crate::expr::{self, FactSource, Kind, NoTrace, Node, Open, Val};
use crate::model::RuleId;
use crate::policy::Policy;
use crate::vocab::Fact;

/// Records every rule outcome the decision path computes, in order.
#[derive(Debug, Default)]
pub struct Recorder {
    pub outcomes: Vec<(RuleId, Outcome)>,
}

impl RuleEval for Recorder {
    fn eval(&mut self, policy: &Policy, id: RuleId, views: &[View<'_>; 2]) -> Outcome {
        let o = eval_rule(policy, id, views, &mut NoTrace);
        self.outcomes.push((id, o.clone()));
        o
    }
}

/// A decision and why.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub decision: Decision,
    /// The layers that applied to the identity, the root first.
    pub layers: Vec<u32>,
    /// Every rule the decision evaluated, with its outcome, in order.
    pub evaluated: Vec<(RuleId, Outcome)>,
    /// When no allow rule matched: the nearest allow rule of the layer that
    /// refused.
    pub nearest: Option<Nearest>,
}

/// The allow rule with the most conjuncts true.
#[derive(Debug, Clone)]
pub struct Nearest {
    pub rule: RuleId,
    pub conjuncts: Vec<Conjunct>,
}

/// One top-level conjunct of a rule (`a && b && c` has three).
#[derive(Debug, Clone)]
pub struct Conjunct {
    pub source: String,
    pub state: State,
    /// The facts it reads and their values (`None`: unknown).
    pub inputs: Vec<(Fact, Option<String>)>,
    pub errors: Vec<String>,
}

/// A conjunct's three values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    True,
    False,
    Unknown,
}

impl Policy {
    /// Decides `req` and says why.
    pub fn explain(&self, req: &Request) -> Explanation {
        let mut rec = Recorder::default();
        let decision = self.decide_with(req, &mut rec);
        let layers = self.applying_layers(&req.identity, &req.env);
        let nearest = if decision.no_allow_matched() {
            self.nearest(req, decision.layer.unwrap_or(0))
        } else {
            None
        };
        Explanation {
            decision,
            layers,
            evaluated: rec.outcomes,
            nearest,
        }
    }

    /// The allow rule of `layer` with the most conjuncts true for `req`
    /// (the first in file order on a tie). Every allow rule of the layer is
    /// a candidate, including those the namespace index skips: a tenant's
    /// rule is the most useful answer to "why not me".
    fn nearest(&self, req: &Request, layer: u32) -> Option<Nearest> {
        let surface = req.facts.surface();
        let rules = self.layers.get(layer as usize)?.surfaces.get(&surface)?;
        let mut ids: Vec<RuleId> = rules
            .allow
            .always
            .iter()
            .chain(rules.allow.by_namespace.values().flatten())
            .copied()
            .collect();
        ids.sort_unstable();
        let views = [View { req, spelling: 0 }, View { req, spelling: 1 }];
        // Most conjuncts true, then fewest not true, then file order.
        let mut best: Option<((usize, std::cmp::Reverse<usize>), Nearest)> = None;
        for id in ids {
            let conjuncts = self.conjuncts(id, &views);
            let hits = conjuncts.iter().filter(|c| c.state == State::True).count();
            let score = (hits, std::cmp::Reverse(conjuncts.len() - hits));
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((
                    score,
                    Nearest {
                        rule: id,
                        conjuncts,
                    },
                ));
            }
        }
        best.map(|(_, n)| n)
    }

    fn conjuncts(&self, id: RuleId, views: &[View<'_>; 2]) -> Vec<Conjunct> {
        let rule = self.rule(id);
        let mut nodes = Vec::new();
        flatten_and(&rule.compiled.root, &mut nodes);
        let mut texts = Vec::new();
        split_and(&rule.source, &mut texts);
        if texts.len() != nodes.len() {
            // The source does not split as the tree does; show it whole.
            nodes = vec![&rule.compiled.root];
            texts = vec![one_line(&rule.source)];
        }
        let both = match &views[0].req.facts {
            SurfaceFacts::Compute(c) => c.command != c.command_target,
            _ => false,
        };
        nodes
            .into_iter()
            .zip(texts)
            .map(|(n, source)| {
                let mut facts = Vec::new();
                facts_read(n, &mut facts);
                let mut state = State::False;
                let mut errors = Vec::new();
                let spellings = if both && facts.contains(&Fact::Command) {
                    &views[..]
                } else {
                    &views[..1]
                };
                for v in spellings {
                    match expr::eval(n, v, &mut NoTrace) {
                        Ok(Val::Bool(true)) => state = State::True,
                        Ok(Val::Bool(false)) => {}
                        Ok(other) => errors.push(format!("yielded {other}, not a bool")),
                        Err(Open { errors: e, .. }) => {
                            if state != State::True {
                                state = State::Unknown;
                            }
                            errors.extend(e);
                        }
                    }
                }
                let inputs = facts
                    .iter()
                    .map(|f| (*f, views[0].fact(*f).map(|v| v.to_string())))
                    .collect();
                Conjunct {
                    source,
                    state,
                    inputs,
                    errors,
                }
            })
            .collect()
    }
}

fn flatten_and<'a>(n: &'a Node, out: &mut Vec<&'a Node>) {
    match &n.kind {
        Kind::And(a, b) => {
            flatten_and(a, out);
            flatten_and(b, out);
        }
        _ => out.push(n),
    }
}

fn facts_read(n: &Node, out: &mut Vec<Fact>) {
    if let Kind::Fact(f) = n.kind {
        if !out.contains(&f) {
            out.push(f);
        }
    }
    expr::children(n, &mut |c| facts_read(c, out));
}

/// Splits CEL source at its top-level `&&`, looking through parentheses
/// that wrap a whole part, the way the parser's tree nests `And`.
fn split_and(src: &str, out: &mut Vec<String>) {
    let s = src.trim();
    if let Some(inner) = strip_wrapping_parens(s) {
        return split_and(inner, out);
    }
    let parts = split_top_level(s);
    if parts.len() == 1 {
        out.push(one_line(s));
    } else {
        for p in parts {
            split_and(p, out);
        }
    }
}

/// Walks `s` outside string literals, calling `f(index, byte, depth)` with
/// the bracket depth after the byte; stops when `f` returns false.
fn scan(s: &str, mut f: impl FnMut(usize, u8, i32) -> bool) {
    let b = s.as_bytes();
    let (mut depth, mut i, mut quote) = (0i32, 0usize, None::<u8>);
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(_) if c == b'\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => {
                match c {
                    b'"' | b'\'' => quote = Some(c),
                    b'(' | b'[' | b'{' => depth += 1,
                    b')' | b']' | b'}' => depth -= 1,
                    _ => {}
                }
                if quote.is_none() && !f(i, c, depth) {
                    return;
                }
            }
        }
        i += 1;
    }
}

/// The parts of `s` between its top-level `&&`s.
fn split_top_level(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let (mut parts, mut start) = (Vec::new(), 0usize);
    scan(s, |i, c, depth| {
        if c == b'&' && depth == 0 && i >= start && b.get(i + 1) == Some(&b'&') {
            parts.push(&s[start..i]);
            start = i + 2;
        }
        true
    });
    parts.push(&s[start..]);
    parts
}

/// `(x)` to `x` when the parentheses wrap the whole of `s`.
fn strip_wrapping_parens(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('(')?.strip_suffix(')')?;
    // The opening parenthesis must close at the very end.
    let mut wraps = true;
    scan(s, |i, c, depth| {
        if c == b')' && depth == 0 && i + 1 != s.len() {
            wraps = false;
        }
        wraps
    });
    wraps.then_some(inner)
}

/// Source on one line, runs of white space folded.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Why a fact is unknown where it is, for people.
pub fn why_unknown(f: Fact) -> &'static str {
    match f {
        Fact::Method | Fact::HttpPath | Fact::Query | Fact::Headers => {
            "it travels inside the TLS tunnel of an https request the proxy does not inspect; the proxy cannot see it (`egress.inspect` names the hosts it does)"
        }
        Fact::DestinationHost
        | Fact::DestinationMethod
        | Fact::DestinationPath
        | Fact::DestinationHeader => {
            "a secret's destination is known only where the egress proxy substitutes it into a request, not where the secret is granted"
        }
        Fact::Ip => "it is not known until the proxy resolves the name",
        Fact::Args => "it is not known for processes the workload starts itself",
        Fact::Bytes => "the kernel does not see the size of a write when it checks access",
        Fact::Url | Fact::Scheme | Fact::Host => {
            "it is not known before a connection is made (an allowlist entry)"
        }
        Fact::Cpu | Fact::Memory => "the request did not state it",
        _ => "it is not known at this point",
    }
}

/// Where a rule stands and what it says, on one line:
/// `FILE:LINE  SOURCE` and `(NAME)` for a named rule.
pub fn place(policy: &Policy, id: RuleId) -> String {
    let r = policy.rule(id);
    let anon = format!("{}:{}", r.file, r.line);
    let name = if r.name == anon || r.name.ends_with(&format!(":{}", r.line)) {
        String::new()
    } else {
        format!("  ({})", r.name)
    };
    format!("{anon}  {}{name}", one_line(&r.source))
}

impl Explanation {
    /// `allowed` or `denied`: the verdict as the final enforcing point
    /// applies it (undetermined is denied).
    pub fn headline(&self) -> &'static str {
        if self.decision.is_allowed() {
            "allowed"
        } else {
            "denied"
        }
    }

    /// The unknown facts and errors that kept rule `id` open.
    pub fn open_of(&self, id: RuleId) -> Option<&Open> {
        self.evaluated.iter().find_map(|(r, o)| match o {
            Outcome::Open(open) if *r == id => Some(open),
            _ => None,
        })
    }

    /// The lines under the headline, unindented.
    pub fn why(&self, policy: &Policy, surface: crate::vocab::Surface) -> Vec<String> {
        let d = &self.decision;
        let mut out = Vec::new();
        match d.verdict {
            Verdict::Allow => {
                for id in &d.deciding {
                    out.push(format!("allowed by: {}", place(policy, *id)));
                }
            }
            Verdict::Deny if !d.deciding.is_empty() => {
                for id in &d.deciding {
                    out.push(format!("denied by: {}", place(policy, *id)));
                }
            }
            Verdict::Deny => {
                let layer = d.layer.unwrap_or(0);
                let origin = policy
                    .layers
                    .get(layer as usize)
                    .map(|l| l.origin.to_string())
                    .unwrap_or_default();
                let stated = policy
                    .layers
                    .get(layer as usize)
                    .and_then(|l| l.surfaces.get(&surface))
                    .is_some_and(|s| s.allow_stated);
                if !stated {
                    out.push(format!(
                        "no allow rule matched: the root layer ({origin}) states no {surface} allow rules, so nothing is allowed"
                    ));
                } else if layer == 0 {
                    out.push("no allow rule matched".into());
                } else {
                    out.push(format!(
                        "no allow rule of layer {origin} matched (every applying layer that states {surface} allow rules must allow)"
                    ));
                }
                if let Some(n) = &self.nearest {
                    out.push(format!("nearest: {}", place(policy, n.rule)));
                    out.extend(n.misses().into_iter().map(|l| format!("         {l}")));
                }
            }
            Verdict::Undetermined => {
                out.push(
                    "undetermined, so denied: a rule depends on what is not known here".into(),
                );
                for id in &d.deciding {
                    let kind = match policy.rule(*id).effect {
                        crate::model::Effect::Deny => "deny rule that might match",
                        crate::model::Effect::Allow => "allow rule that might match",
                    };
                    out.push(format!("{kind}: {}", place(policy, *id)));
                    if let Some(open) = self.open_of(*id) {
                        for f in Fact::from_bits(open.unknown) {
                            out.push(format!("  {} is unknown: {}", f.spelling(), why_unknown(f)));
                        }
                        for e in &open.errors {
                            out.push(format!("  error: {e}"));
                        }
                    }
                }
            }
        }
        out
    }
}

impl Nearest {
    /// For each conjunct that is not true, the inputs it read.
    pub fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for c in self.conjuncts.iter().filter(|c| c.state != State::True) {
            if c.inputs.is_empty() {
                out.push(format!("`{}` is {}", c.source, state_word(c.state)));
            }
            for (f, v) in &c.inputs {
                if seen.contains(f) {
                    continue;
                }
                seen.push(*f);
                out.push(match v {
                    Some(v) => format!("{} was {v}", f.spelling()),
                    None => format!("{} is unknown: {}", f.spelling(), why_unknown(*f)),
                });
            }
            for e in &c.errors {
                out.push(format!("`{}` failed: {e}", c.source));
            }
        }
        out
    }
}

fn state_word(s: State) -> &'static str {
    match s {
        State::True => "true",
        State::False => "false",
        State::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        let mut v = Vec::new();
        split_and(s, &mut v);
        v
    }

    #[test]
    fn source_splits_at_top_level_and_only() {
        assert_eq!(split("a && b && c"), ["a", "b", "c"]);
        assert_eq!(split("(a && b) && c"), ["a", "b", "c"]);
        assert_eq!(split("(a || b) && c"), ["a || b", "c"]);
        assert_eq!(
            split("x == \"&&\" && f(a && b)"),
            ["x == \"&&\"", "f(a && b)"]
        );
        assert_eq!(split("(a) || (b)"), ["(a) || (b)"]);
        assert_eq!(split("a &&\n   b"), ["a", "b"]);
    }
}
