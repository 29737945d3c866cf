//! Deciding: facts built once per request, rules chosen through the index,
//! three-valued verdicts that never fail open.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::canon::{self, CanonError};
use crate::expr::{self, FactSource, NoTrace, Open, Trace, Val};
use crate::model::{Bounds, RuleId, RuleIndex};
use crate::policy::Policy;
use crate::vocab::{Fact, Surface};

/// The subject of every decision, from the host's authenticated request.
/// Its wire form (serde) is how it is recorded and handed between a host's
/// processes; it never comes from a workload or a model.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub namespace: String,
    pub name: String,
    /// Set only by the host's own configuration of its credentials.
    pub attested: bool,
    pub labels: BTreeMap<String, String>,
}

/// The deployment a decision is made in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    pub name: String,
}

/// Egress facts. `None` is unknown at the point that decides. Its wire
/// form (serde; an unknown fact is absent) is how the egress proxy's audit
/// log records them, for `cordon policy explain` to replay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressFacts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Unknown only where no single host is named (a `*.domain` allowlist
    /// entry checked at acquire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The request's query, decoded ([`canon::query`]): keys, and each
    /// key's values in the order sent. Known where `path` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<BTreeMap<String, Vec<String>>>,
    /// The request's headers ([`canon::headers`]): names lowercased, a
    /// repeated header's values joined with `", "`. Known where the proxy
    /// reads the request (plain http, an inspected https host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

impl EgressFacts {
    /// Facts for a URL as the egress proxy sees it: for `https` the method,
    /// the path, the query and so the whole URL travel inside the tunnel
    /// and are unknown; the address is unknown until the name is resolved.
    /// For `http` the method is taken to be `GET`; headers are not given,
    /// so they are unknown ([`EgressFacts::for_request`] states them).
    pub fn from_url(raw: &str) -> Result<EgressFacts, CanonError> {
        let u = canon::url(raw)?;
        let inside_tunnel = u.scheme == "https";
        Ok(EgressFacts {
            url: if inside_tunnel { None } else { Some(u.url) },
            scheme: Some(u.scheme),
            host: Some(u.host),
            port: u.port,
            method: if inside_tunnel {
                None
            } else {
                Some("GET".into())
            },
            path: if inside_tunnel { None } else { Some(u.path) },
            ip: None,
            query: if inside_tunnel {
                None
            } else {
                Some(canon::query(raw)?)
            },
            headers: None,
        })
    }

    /// What the egress proxy sees of one request: `scheme_url` as the
    /// client asked for it (`http://...`, or `https://...` rebuilt from the
    /// CONNECT target and the request line inside the tunnel), its method
    /// and headers in the order sent, and whether the proxy terminates TLS
    /// for this host ([`crate::Policy::inspection`]).
    ///
    /// For `https` with `inspected == false` it is exactly
    /// [`EgressFacts::from_url`]: `url`, `method`, `path`, `query` and
    /// `headers` are unknown. Otherwise all of them are known: `url` is
    /// canonical and never holds the query (read it from `query`), the
    /// method is uppercased ([`canon::method`]). `ip` is unknown until the
    /// name is resolved.
    pub fn for_request(
        scheme_url: &str,
        method: &str,
        headers: &[(String, String)],
        inspected: bool,
    ) -> Result<EgressFacts, CanonError> {
        let u = canon::url(scheme_url)?;
        if u.scheme == "https" && !inspected {
            return EgressFacts::from_url(scheme_url);
        }
        Ok(EgressFacts {
            query: Some(canon::query(scheme_url)?),
            headers: Some(canon::headers(headers)?),
            method: Some(canon::method(method)?),
            url: Some(u.url),
            scheme: Some(u.scheme),
            host: Some(u.host),
            port: u.port,
            path: Some(u.path),
            ip: None,
        })
    }

    /// Facts for an endpoint named before any connection is made (an
    /// allowlist entry): the host (unknown for a wildcard) and port are
    /// known, everything else is unknown. A rule that denies here denies
    /// every connection the entry could stand for.
    pub fn endpoint(host: Option<String>, port: u16) -> EgressFacts {
        EgressFacts {
            url: None,
            scheme: None,
            host,
            port: i64::from(port),
            method: None,
            path: None,
            ip: None,
            query: None,
            headers: None,
        }
    }
}

/// Compute facts. `command` is the path as invoked, made absolute with
/// directory links resolved; `command_target` the final target with every
/// link resolved. Both are produced by the enforcing layer where the command
/// will run, never by a validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeFacts {
    pub command: String,
    pub command_target: String,
    pub args: Option<Vec<String>>,
    pub cpu: Option<i64>,
    pub memory: Option<i64>,
    /// The sandbox's work dir as the workload sees it (canonical, absolute).
    pub work_dir: Option<String>,
}

/// Storage access modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
    Execute,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Execute => "execute",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "read" => Some(Mode::Read),
            "write" => Some(Mode::Write),
            "execute" => Some(Mode::Execute),
            _ => None,
        }
    }
}

/// Storage facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageFacts {
    pub path: String,
    pub mode: Mode,
    pub bytes: Option<i64>,
    /// The sandbox's work dir as the workload sees it (canonical, absolute).
    pub work_dir: Option<String>,
}

/// Secret facts. `destination` is unknown where the secret is granted
/// (the router, at acquire) and bound where the egress proxy substitutes a
/// brokered secret's placeholder into a request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretFacts {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
}

/// Where a brokered secret is about to be sent: the request the egress
/// proxy substitutes it into. Every field is canonical (`host` as
/// [`canon::host`], `method` as [`canon::method`], `path` as
/// [`canon::http_path`], `header` lowercased); an absent one is unknown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The header the placeholder is in (lowercased); absent when it is
    /// elsewhere in the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

/// Ingress facts: a port of the sandbox a caller asks to reach from the
/// host, at the host address `listen` (`127.0.0.1` for loopback; for
/// `cordon serve`, the server's own listening address).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressFacts {
    pub port: i64,
    pub listen: String,
    /// Who asks.
    pub caller: Identity,
}

/// The facts one surface adds to the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SurfaceFacts {
    Egress(EgressFacts),
    Compute(ComputeFacts),
    Storage(StorageFacts),
    Secret(SecretFacts),
    Ingress(IngressFacts),
}

impl SurfaceFacts {
    pub fn surface(&self) -> Surface {
        match self {
            SurfaceFacts::Egress(_) => Surface::Egress,
            SurfaceFacts::Compute(_) => Surface::Compute,
            SurfaceFacts::Storage(_) => Surface::Storage,
            SurfaceFacts::Secret(_) => Surface::Secret,
            SurfaceFacts::Ingress(_) => Surface::Ingress,
        }
    }
}

/// A request to decide. Built once; every rule reads the same facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub identity: Identity,
    pub env: Deployment,
    /// Seconds since the epoch.
    pub now: i64,
    pub facts: SurfaceFacts,
}

/// The three verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
    Undetermined,
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    /// The rules that decided: the deny rule(s) that were true, the allow
    /// rule(s) that were true, or the rules that stayed open.
    pub deciding: Vec<RuleId>,
    /// Facts whose being unknown kept the verdict open.
    pub unknown: Vec<Fact>,
    /// Errors that kept the verdict open.
    pub errors: Vec<String>,
    /// When no allow rule matched: the layer whose allow rules all came out
    /// false (0 is the root, also when it states no allow rules at all).
    pub layer: Option<u32>,
}

impl Decision {
    fn new(verdict: Verdict, deciding: Vec<RuleId>, open: Open, layer: Option<u32>) -> Decision {
        Decision {
            verdict,
            deciding,
            unknown: Fact::from_bits(open.unknown),
            errors: open.errors,
            layer,
        }
    }

    /// The verdict as the final enforcing point applies it: undetermined is deny.
    pub fn is_allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }

    /// True when no allow rule matched and nothing stayed open.
    pub fn no_allow_matched(&self) -> bool {
        self.verdict == Verdict::Deny && self.deciding.is_empty()
    }
}

/// The facts of a request seen through one spelling of `command`.
pub struct View<'r> {
    pub req: &'r Request,
    /// 0: the path as invoked; 1: the final target.
    pub spelling: u8,
}

impl FactSource for View<'_> {
    #[inline]
    fn fact(&self, f: Fact) -> Option<Val<'_>> {
        fn s(x: &str) -> Option<Val<'_>> {
            Some(Val::Str(Cow::Borrowed(x)))
        }
        fn s_opt(x: &Option<String>) -> Option<Val<'_>> {
            x.as_deref().map(|x| Val::Str(Cow::Borrowed(x)))
        }
        let r = self.req;
        match (f, &r.facts) {
            (Fact::IdentityNamespace, _) => s(&r.identity.namespace),
            (Fact::IdentityName, _) => s(&r.identity.name),
            (Fact::IdentityAttested, _) => Some(Val::Bool(r.identity.attested)),
            (Fact::IdentityLabels, _) => Some(Val::StrMap(&r.identity.labels)),
            (Fact::EnvName, _) => s(&r.env.name),
            (Fact::Now, _) => Some(Val::Timestamp(r.now)),
            (Fact::Url, SurfaceFacts::Egress(e)) => s_opt(&e.url),
            (Fact::Scheme, SurfaceFacts::Egress(e)) => s_opt(&e.scheme),
            (Fact::Host, SurfaceFacts::Egress(e)) => s_opt(&e.host),
            (Fact::Port, SurfaceFacts::Egress(e)) => Some(Val::Int(e.port)),
            (Fact::Port, SurfaceFacts::Ingress(i)) => Some(Val::Int(i.port)),
            (Fact::Listen, SurfaceFacts::Ingress(i)) => s(&i.listen),
            (Fact::CallerNamespace, SurfaceFacts::Ingress(i)) => s(&i.caller.namespace),
            (Fact::CallerName, SurfaceFacts::Ingress(i)) => s(&i.caller.name),
            (Fact::CallerAttested, SurfaceFacts::Ingress(i)) => Some(Val::Bool(i.caller.attested)),
            (Fact::Method, SurfaceFacts::Egress(e)) => s_opt(&e.method),
            (Fact::HttpPath, SurfaceFacts::Egress(e)) => s_opt(&e.path),
            (Fact::Ip, SurfaceFacts::Egress(e)) => s_opt(&e.ip),
            (Fact::Query, SurfaceFacts::Egress(e)) => e.query.as_ref().map(Val::ListMap),
            (Fact::Headers, SurfaceFacts::Egress(e)) => e.headers.as_ref().map(Val::StrMap),
            (Fact::Command, SurfaceFacts::Compute(c)) => s(if self.spelling == 0 {
                &c.command
            } else {
                &c.command_target
            }),
            (Fact::Args, SurfaceFacts::Compute(c)) => c.args.as_ref().map(|a| {
                Val::List(
                    a.iter()
                        .map(|x| Val::Str(Cow::Borrowed(x.as_str())))
                        .collect(),
                )
            }),
            (Fact::Cpu, SurfaceFacts::Compute(c)) => c.cpu.map(Val::Int),
            (Fact::Memory, SurfaceFacts::Compute(c)) => c.memory.map(Val::Int),
            (Fact::Path, SurfaceFacts::Storage(st)) => s(&st.path),
            (Fact::Mode, SurfaceFacts::Storage(st)) => s(st.mode.as_str()),
            (Fact::Bytes, SurfaceFacts::Storage(st)) => st.bytes.map(Val::Int),
            (Fact::SecretName, SurfaceFacts::Secret(x)) => s(&x.name),
            (Fact::DestinationHost, SurfaceFacts::Secret(x)) => {
                x.destination.as_ref().and_then(|d| s(&d.host))
            }
            (Fact::DestinationMethod, SurfaceFacts::Secret(x)) => {
                x.destination.as_ref().and_then(|d| s_opt(&d.method))
            }
            (Fact::DestinationPath, SurfaceFacts::Secret(x)) => {
                x.destination.as_ref().and_then(|d| s_opt(&d.path))
            }
            (Fact::DestinationHeader, SurfaceFacts::Secret(x)) => {
                x.destination.as_ref().and_then(|d| s_opt(&d.header))
            }
            (Fact::WorkDir, SurfaceFacts::Storage(st)) => s_opt(&st.work_dir),
            (Fact::WorkDir, SurfaceFacts::Compute(c)) => s_opt(&c.work_dir),
            // A fact of another surface cannot be reached: rules are checked
            // per surface. Unknown is the fail-closed answer regardless.
            _ => None,
        }
    }
}

/// A rule's three-valued outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    True,
    False,
    Open(Open),
}

/// Evaluates one rule against a request: over both spellings of `command`
/// when it reads `command` and they differ (a match on either counts).
pub fn eval_rule<'a, T: Trace<'a>>(
    policy: &'a Policy,
    id: RuleId,
    views: &'a [View<'a>; 2],
    t: &mut T,
) -> Outcome {
    let rule = policy.rule(id);
    let both = rule.compiled.reads & Fact::Command.bit() != 0 && {
        match &views[0].req.facts {
            SurfaceFacts::Compute(c) => c.command != c.command_target,
            _ => false,
        }
    };
    let first = outcome(expr::eval(&rule.compiled.root, &views[0], t));
    if !both || first == Outcome::True {
        return first;
    }
    let second = outcome(expr::eval(&rule.compiled.root, &views[1], &mut NoTrace));
    match (first, second) {
        (_, Outcome::True) => Outcome::True,
        (Outcome::Open(a), Outcome::Open(mut b)) => {
            b.unknown |= a.unknown;
            b.errors.extend(a.errors);
            Outcome::Open(b)
        }
        (Outcome::Open(a), _) | (_, Outcome::Open(a)) => Outcome::Open(a),
        _ => Outcome::False,
    }
}

fn outcome(r: expr::Res<'_>) -> Outcome {
    match r {
        Ok(Val::Bool(true)) => Outcome::True,
        Ok(Val::Bool(false)) => Outcome::False,
        Ok(other) => Outcome::Open(Open {
            unknown: 0,
            errors: vec![format!("rule yielded {other}, not a bool")],
        }),
        Err(o) => Outcome::Open(o),
    }
}

/// How [`Policy::decide_with`] evaluates one rule. The decision path uses
/// [`Plain`]; explain uses an evaluator that also records each outcome, so an
/// explanation is read off the very evaluation that decided.
pub trait RuleEval {
    fn eval(&mut self, policy: &Policy, id: RuleId, views: &[View<'_>; 2]) -> Outcome;
}

/// Evaluates and records nothing.
pub struct Plain;

impl RuleEval for Plain {
    #[inline(always)]
    fn eval(&mut self, policy: &Policy, id: RuleId, views: &[View<'_>; 2]) -> Outcome {
        eval_rule(policy, id, views, &mut NoTrace)
    }
}

/// The outcome of one group of rules.
struct Group {
    matched: Vec<RuleId>,
    open_rules: Vec<RuleId>,
    open: Open,
}

impl Policy {
    fn evaluate<E: RuleEval>(
        &self,
        index: &RuleIndex,
        ns: &str,
        views: &[View<'_>; 2],
        e: &mut E,
    ) -> Group {
        let mut g = Group {
            matched: Vec::new(),
            open_rules: Vec::new(),
            open: Open::default(),
        };
        for id in index.candidates(ns) {
            match e.eval(self, id, views) {
                Outcome::True => g.matched.push(id),
                Outcome::False => {}
                Outcome::Open(o) => {
                    g.open_rules.push(id);
                    g.open.unknown |= o.unknown;
                    g.open.errors.extend(o.errors);
                }
            }
        }
        g
    }

    /// The layers that apply to an identity, in layer order, the root
    /// first. A layer whose `applies_to` is undecidable applies.
    pub fn applying_layers(&self, identity: &Identity, env: &Deployment) -> Vec<u32> {
        let base = Base {
            identity,
            env,
            now: None,
            work_dir: None,
        };
        let mut out = vec![0];
        let guarded = self
            .layer_index
            .by_namespace
            .get(identity.namespace.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for &l in self.layer_index.always.iter().chain(guarded) {
            let applies = match &self.layers[l as usize].applies_to {
                None => true,
                Some(g) => !matches!(
                    expr::eval(&g.compiled.root, &base, &mut NoTrace),
                    Ok(Val::Bool(false))
                ),
            };
            if applies {
                out.push(l);
            }
        }
        out.sort_unstable();
        out
    }

    /// The bounds that hold for an identity: the root's, lowered by every
    /// layer that applies to it.
    pub fn bounds_for(&self, identity: &Identity, env: &Deployment) -> Bounds {
        let mut b = self.bounds;
        for l in self.applying_layers(identity, env).into_iter().skip(1) {
            b.narrow(&self.layers[l as usize].bounds);
        }
        b
    }

    /// Decides a request.
    ///
    /// Deny rules of every applying layer add: deny if any is true, and
    /// undetermined if none is true but one is open. Allow rules intersect:
    /// the root must state allow rules for the surface, and every applying
    /// layer that states them must allow. A layer whose allow rules are all
    /// false denies (whatever is open elsewhere); if every such layer has a
    /// true rule the request is allowed; otherwise it is undetermined.
    pub fn decide(&self, req: &Request) -> Decision {
        self.decide_with(req, &mut Plain)
    }

    /// [`Policy::decide`] with each rule evaluated through `e`.
    pub fn decide_with<E: RuleEval>(&self, req: &Request, e: &mut E) -> Decision {
        let surface = req.facts.surface();
        let views = [View { req, spelling: 0 }, View { req, spelling: 1 }];
        let ns = req.identity.namespace.as_str();
        let layers = self.applying_layers(&req.identity, &req.env);
        let mut deciding = Vec::new();
        let mut open_rules = Vec::new();
        let mut open = Open::default();
        for &l in &layers {
            if let Some(rules) = self.layers[l as usize].surfaces.get(&surface) {
                let g = self.evaluate(&rules.deny, ns, &views, e);
                deciding.extend(g.matched);
                open_rules.extend(g.open_rules);
                open.unknown |= g.open.unknown;
                open.errors.extend(g.open.errors);
            }
        }
        if !deciding.is_empty() {
            return Decision::new(Verdict::Deny, deciding, Open::default(), None);
        }
        if !open_rules.is_empty() {
            // An open deny keeps the verdict open whatever the allow rules
            // say, so they are not evaluated.
            return Decision::new(Verdict::Undetermined, open_rules, open, None);
        }
        for &l in &layers {
            let stated = self.layers[l as usize]
                .surfaces
                .get(&surface)
                .filter(|r| r.allow_stated);
            let Some(rules) = stated else {
                if l == 0 {
                    // What the root does not allow, nothing allows.
                    return Decision::new(Verdict::Deny, Vec::new(), Open::default(), Some(0));
                }
                continue;
            };
            let g = self.evaluate(&rules.allow, ns, &views, e);
            if !g.matched.is_empty() {
                deciding.extend(g.matched);
            } else if !g.open_rules.is_empty() {
                open_rules.extend(g.open_rules);
                open.unknown |= g.open.unknown;
                open.errors.extend(g.open.errors);
            } else {
                return Decision::new(Verdict::Deny, Vec::new(), Open::default(), Some(l));
            }
        }
        if !open_rules.is_empty() {
            return Decision::new(Verdict::Undetermined, open_rules, open, None);
        }
        Decision::new(Verdict::Allow, deciding, Open::default(), None)
    }
}

/// The base facts alone: `identity`, `env`, and `now` where it is known.
/// `applies_to` reads them before a request exists; a confinement plan
/// binds them for one identity.
pub(crate) struct Base<'r> {
    pub identity: &'r Identity,
    pub env: &'r Deployment,
    pub now: Option<i64>,
    /// Bound by a confinement plan (storage and compute only).
    pub work_dir: Option<&'r str>,
}

impl FactSource for Base<'_> {
    fn fact(&self, f: Fact) -> Option<Val<'_>> {
        match f {
            Fact::IdentityNamespace => Some(Val::Str(Cow::Borrowed(&self.identity.namespace))),
            Fact::IdentityName => Some(Val::Str(Cow::Borrowed(&self.identity.name))),
            Fact::IdentityAttested => Some(Val::Bool(self.identity.attested)),
            Fact::IdentityLabels => Some(Val::StrMap(&self.identity.labels)),
            Fact::EnvName => Some(Val::Str(Cow::Borrowed(&self.env.name))),
            Fact::Now => self.now.map(Val::Timestamp),
            Fact::WorkDir => self.work_dir.map(|w| Val::Str(Cow::Borrowed(w))),
            _ => None,
        }
    }
}
