//! Loading a policy file: parse YAML keeping positions, compile and check
//! every rule, and build the per-surface index. Load is the only time a rule
//! is parsed or checked; a decision never compiles anything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, Node};

use crate::canon;
use crate::diag::{Diagnostic, Diagnostics, Severity, SourceMap};
use crate::expr::{self, Compiled};
use crate::vocab::Surface;

/// Whether a rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Allow,
    Deny,
}

/// One loaded, checked rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Unique within its file; a bare string is named `FILE:LINE`.
    pub name: String,
    pub file: Arc<str>,
    pub line: usize,
    pub column: usize,
    /// The CEL source as written.
    pub source: String,
    pub surface: Surface,
    pub effect: Effect,
    pub compiled: Compiled,
}

/// Where a rule stands, for decisions and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

/// Rules of one effect in one surface, indexed by namespace guard.
#[derive(Debug, Clone, Default)]
pub struct RuleIndex {
    /// Rules that may apply to any identity.
    pub always: Vec<RuleId>,
    /// Rules guarded by `identity.namespace == "lit"`: false for any other.
    pub by_namespace: HashMap<String, Vec<RuleId>>,
}

impl RuleIndex {
    fn add(&mut self, id: RuleId, compiled: &Compiled) {
        match expr::namespace_guard(&compiled.root) {
            Some(ns) => self
                .by_namespace
                .entry(ns.to_string())
                .or_default()
                .push(id),
            None => self.always.push(id),
        }
    }

    /// The rules that can be true for `namespace`, in file order within each group.
    pub fn candidates<'a>(&'a self, namespace: &str) -> impl Iterator<Item = RuleId> + 'a {
        let guarded = self
            .by_namespace
            .get(namespace)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        self.always.iter().chain(guarded.iter()).copied()
    }
}

/// One surface's rules.
#[derive(Debug, Clone, Default)]
pub struct SurfaceRules {
    /// Whether the file states an `allow` key for this surface.
    pub allow_stated: bool,
    pub allow: RuleIndex,
    pub deny: RuleIndex,
}

/// Bounds a policy states. There is no "unlimited": an unstated bound is the
/// documented default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Bounds {
    pub max_response_bytes: u64,
    pub max_memory: u64,
    pub max_processes: u64,
    pub max_cpu_seconds: u64,
    pub max_wall_seconds: u64,
}

impl Bounds {
    /// cordon's built-in defaults, used for any bound no policy states.
    pub const DEFAULT: Bounds = Bounds {
        max_response_bytes: 10 << 20,
        max_memory: 512 << 20,
        max_processes: 64,
        max_cpu_seconds: 60,
        max_wall_seconds: 300,
    };
}

/// An address range the egress proxy may reach, for the named hosts only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRange {
    pub cidr: ipnet::IpNet,
    pub hosts: Vec<String>,
}

/// A loaded policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub surfaces: BTreeMap<Surface, SurfaceRules>,
    pub bounds: Bounds,
    pub allow_ranges: Vec<AllowRange>,
    /// Warnings found at load (errors refuse the load).
    pub warnings: Diagnostics,
}

/// The most rules one policy may hold.
pub const MAX_RULES: usize = 10_000;

impl Policy {
    /// Loads and checks a policy file.
    pub fn load_file(path: &Path) -> Result<Policy, Diagnostics> {
        let name = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::load_str(&name, &text),
            Err(e) => Err(Diagnostics(vec![Diagnostic {
                file: name,
                line: 1,
                column: 1,
                width: 1,
                rule: None,
                message: format!("cannot read the policy: {e}"),
                help: Some("check the path and its permissions".into()),
                source_line: String::new(),
                severity: Severity::Error,
            }])),
        }
    }

    /// Loads and checks a policy from text; `name` is used in diagnostics.
    pub fn load_str(name: &str, text: &str) -> Result<Policy, Diagnostics> {
        let map = SourceMap { name, text };
        let mut l = Loader {
            map: &map,
            file: Arc::from(name),
            diags: Vec::new(),
            rules: Vec::new(),
            surfaces: BTreeMap::new(),
            bounds: Bounds::DEFAULT,
            allow_ranges: Vec::new(),
            names: HashSet::new(),
        };
        let opts = marked_yaml::LoaderOptions::default()
            .error_on_duplicate_keys(true)
            .prevent_coercion(true);
        match marked_yaml::parse_yaml_with_options(0, text, opts) {
            Ok(root) => l.root(&root),
            Err(e) => {
                let (line, col, msg) = yaml_error(&e);
                let off = map.offset_of(line, col);
                l.diags.push(map.at(
                    off,
                    off + 1,
                    None,
                    msg,
                    Some("fix the YAML syntax; anchors, aliases and tags are not accepted".into()),
                ));
            }
        }
        let diags = Diagnostics(l.diags);
        if diags.has_errors() {
            return Err(diags);
        }
        Ok(Policy {
            rules: l.rules,
            surfaces: l.surfaces,
            bounds: l.bounds,
            allow_ranges: l.allow_ranges,
            warnings: diags,
        })
    }

    /// A rule by id.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.0 as usize]
    }

    /// One line summarising the policy, for `cordon policy check`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for s in Surface::ALL {
            let n = self.rules.iter().filter(|r| r.surface == s).count();
            if n > 0 {
                parts.push(format!("{s} {n}"));
            }
        }
        format!("{} rules ({})", self.rules.len(), parts.join(", "))
    }
}

fn yaml_error(e: &marked_yaml::LoadError) -> (usize, usize, String) {
    use marked_yaml::LoadError as E;
    let (m, msg) = match e {
        E::TopLevelMustBeMapping(m) => {
            (*m, "the file must be a mapping with a `policy` key".into())
        }
        E::TopLevelMustBeSequence(m) => (*m, "unexpected top-level sequence".into()),
        E::UnexpectedAnchor(m) => (*m, "YAML anchors and aliases are not accepted".into()),
        E::MappingKeyMustBeScalar(m) => (*m, "a mapping key must be a plain string".into()),
        E::UnexpectedTag(m) => (*m, "YAML tags are not accepted".into()),
        E::ScanError(m, s) => (*m, format!("invalid YAML: {s}")),
        E::DuplicateKey(d) => {
            let m = d.key.span().start().copied();
            let key = d.key.as_str().to_string();
            return match m {
                Some(m) => (m.line(), m.column(), format!("duplicate key `{key}`")),
                None => (1, 1, format!("duplicate key `{key}`")),
            };
        }
    };
    (m.line(), m.column(), msg)
}

struct Loader<'a> {
    map: &'a SourceMap<'a>,
    file: Arc<str>,
    diags: Vec<Diagnostic>,
    rules: Vec<Rule>,
    surfaces: BTreeMap<Surface, SurfaceRules>,
    bounds: Bounds,
    allow_ranges: Vec<AllowRange>,
    names: HashSet<String>,
}

fn start_of(n: &Node) -> (usize, usize) {
    n.span().start().map_or((1, 1), |m| (m.line(), m.column()))
}

fn scalar_start(n: &MarkedScalarNode) -> (usize, usize) {
    n.span().start().map_or((1, 1), |m| (m.line(), m.column()))
}

impl Loader<'_> {
    fn err_at(
        &mut self,
        pos: (usize, usize),
        width: usize,
        rule: Option<&str>,
        msg: String,
        help: Option<String>,
    ) {
        let off = self.map.offset_of(pos.0, pos.1);
        self.diags
            .push(self.map.at(off, off + width.max(1), rule, msg, help));
    }

    fn unknown_key(&mut self, key: &MarkedScalarNode, known: &[&str], what: &str) {
        let help = match crate::vocab::did_you_mean(key.as_str(), known.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!(
                "{what} takes {}",
                known
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        self.err_at(
            scalar_start(key),
            key.as_str().chars().count(),
            None,
            format!("unknown key `{}` in {what}", key.as_str()),
            Some(help),
        );
    }

    fn mapping<'n>(&mut self, n: &'n Node, what: &str) -> Option<&'n MarkedMappingNode> {
        match n {
            Node::Mapping(m) => Some(m),
            other => {
                self.err_at(
                    start_of(other),
                    1,
                    None,
                    format!("{what} must be a mapping"),
                    None,
                );
                None
            }
        }
    }

    fn root(&mut self, root: &Node) {
        let Some(m) = self.mapping(root, "the file") else {
            return;
        };
        let mut saw_policy = false;
        for (k, v) in m.iter() {
            if k.as_str() == "policy" {
                saw_policy = true;
                self.policy(v);
            } else {
                self.unknown_key(k, &["policy"], "the file");
            }
        }
        if !saw_policy {
            self.err_at(
                start_of(root),
                1,
                None,
                "the file has no `policy` key".into(),
                Some("start the file with `policy:`".into()),
            );
        }
    }

    fn policy(&mut self, n: &Node) {
        let Some(m) = self.mapping(n, "`policy`") else {
            return;
        };
        for (k, v) in m.iter() {
            match Surface::from_key(k.as_str()) {
                Some(s) => self.surface(s, v),
                None => {
                    self.unknown_key(k, &["egress", "compute", "storage", "secret"], "`policy`")
                }
            }
        }
    }

    fn surface(&mut self, s: Surface, n: &Node) {
        let Some(m) = self.mapping(n, &format!("`{s}`")) else {
            return;
        };
        self.surfaces.entry(s).or_default();
        let bounds: &[&str] = match s {
            Surface::Egress => &["max_response_bytes"],
            Surface::Compute => &[
                "max_memory",
                "max_processes",
                "max_cpu_seconds",
                "max_wall_seconds",
            ],
            _ => &[],
        };
        for (k, v) in m.iter() {
            match k.as_str() {
                "allow" => {
                    if let Some(e) = self.surfaces.get_mut(&s) {
                        e.allow_stated = true;
                    }
                    self.rule_list(s, Effect::Allow, v);
                }
                "deny" => self.rule_list(s, Effect::Deny, v),
                "allow_ranges" if s == Surface::Egress => self.allow_ranges(v),
                key if bounds.contains(&key) => self.bound(key, v),
                _ => {
                    let mut known = vec!["allow", "deny"];
                    if s == Surface::Egress {
                        known.push("allow_ranges");
                    }
                    known.extend_from_slice(bounds);
                    self.unknown_key(k, &known, &format!("`{s}`"));
                }
            }
        }
    }

    fn bound(&mut self, key: &str, v: &Node) {
        let Node::Scalar(sc) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                format!("`{key}` must be a number"),
                None,
            );
            return;
        };
        let raw = sc.as_str();
        let parsed = if key == "max_memory" || key == "max_response_bytes" {
            canon::size(raw).map_err(|e| e.to_string())
        } else {
            raw.parse::<u64>()
                .map_err(|_| format!("`{raw}` is not a whole number"))
        };
        match parsed {
            Ok(0) => self.err_at(
                scalar_start(sc),
                raw.len(),
                None,
                format!("`{key}` of 0 would refuse everything"),
                Some("state a positive bound, or deny with a rule".into()),
            ),
            Ok(val) => {
                let b = &mut self.bounds;
                match key {
                    "max_response_bytes" => b.max_response_bytes = val,
                    "max_memory" => b.max_memory = val,
                    "max_processes" => b.max_processes = val,
                    "max_cpu_seconds" => b.max_cpu_seconds = val,
                    _ => b.max_wall_seconds = val,
                }
            }
            Err(msg) => {
                let help = if key == "max_memory" || key == "max_response_bytes" {
                    "write a size with a binary unit, e.g. `512MiB`"
                } else {
                    "write a positive whole number, e.g. `60`"
                };
                self.err_at(scalar_start(sc), raw.len(), None, msg, Some(help.into()))
            }
        }
    }

    fn allow_ranges(&mut self, v: &Node) {
        let Node::Sequence(seq) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                "`allow_ranges` must be a list".into(),
                None,
            );
            return;
        };
        for item in seq.iter() {
            let Some(m) = self.mapping(item, "an `allow_ranges` entry") else {
                continue;
            };
            let mut cidr = None;
            let mut hosts = Vec::new();
            let mut hosts_seen = false;
            for (k, v) in m.iter() {
                match (k.as_str(), v) {
                    ("cidr", Node::Scalar(s)) => match s.as_str().parse::<ipnet::IpNet>() {
                        Ok(net) => cidr = Some(net),
                        Err(_) => self.err_at(
                            scalar_start(s),
                            s.as_str().len(),
                            None,
                            format!("`{}` is not an address range", s.as_str()),
                            Some("write it like `10.20.0.0/16`".into()),
                        ),
                    },
                    ("hosts", Node::Sequence(hs)) => {
                        hosts_seen = true;
                        for h in hs.iter() {
                            match h {
                                Node::Scalar(s) => match canon::host(s.as_str()) {
                                    Ok(h) => hosts.push(h),
                                    Err(e) => self.err_at(
                                        scalar_start(s),
                                        s.as_str().len(),
                                        None,
                                        e.to_string(),
                                        None,
                                    ),
                                },
                                other => self.err_at(
                                    start_of(other),
                                    1,
                                    None,
                                    "a host must be a string".into(),
                                    None,
                                ),
                            }
                        }
                    }
                    ("cidr" | "hosts", other) => self.err_at(
                        start_of(other),
                        1,
                        None,
                        format!("`{}` has the wrong shape", k.as_str()),
                        None,
                    ),
                    _ => self.unknown_key(k, &["cidr", "hosts"], "an `allow_ranges` entry"),
                }
            }
            match (cidr, hosts_seen && !hosts.is_empty()) {
                (Some(cidr), true) => self.allow_ranges.push(AllowRange { cidr, hosts }),
                _ => self.err_at(
                    start_of(item),
                    1,
                    None,
                    "an `allow_ranges` entry needs a `cidr` and a non-empty `hosts` list".into(),
                    Some("name the hosts that may resolve into the range: internal ranges are never implied".into()),
                ),
            }
        }
    }

    fn rule_list(&mut self, s: Surface, effect: Effect, v: &Node) {
        let Node::Sequence(seq) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                format!(
                    "`{s}.{}` must be a list of rules",
                    if effect == Effect::Allow {
                        "allow"
                    } else {
                        "deny"
                    }
                ),
                Some("write `- expression` or `- {name: ..., when: expression}` items".into()),
            );
            return;
        };
        for item in seq.iter() {
            match item {
                Node::Scalar(sc) => {
                    let (line, col) = scalar_start(sc);
                    // Named after file and line; two on one line (a flow
                    // list) take the column too.
                    let mut name = format!("{}:{line}", self.file);
                    if self.names.contains(&name) {
                        name = format!("{}:{line}:{col}", self.file);
                    }
                    self.add_rule(s, effect, name, sc);
                }
                Node::Mapping(m) => {
                    let mut name: Option<&MarkedScalarNode> = None;
                    let mut when: Option<&MarkedScalarNode> = None;
                    for (k, v) in m.iter() {
                        match (k.as_str(), v) {
                            ("name", Node::Scalar(x)) => name = Some(x),
                            ("when", Node::Scalar(x)) => when = Some(x),
                            ("name" | "when", other) => self.err_at(
                                start_of(other),
                                1,
                                None,
                                format!("`{}` must be a string", k.as_str()),
                                None,
                            ),
                            _ => self.unknown_key(k, &["name", "when"], "a rule"),
                        }
                    }
                    match (name, when) {
                        (Some(n), Some(w)) => {
                            if !valid_rule_name(n.as_str()) {
                                self.err_at(
                                    scalar_start(n),
                                    n.as_str().len(),
                                    Some(n.as_str()),
                                    format!("`{}` is not a valid rule name", n.as_str()),
                                    Some("use letters, digits, `-`, `_`, `.` and `/`".into()),
                                );
                                continue;
                            }
                            self.add_rule(s, effect, n.as_str().to_string(), w)
                        }
                        (_, None) => self.err_at(
                            start_of(item),
                            1,
                            name.map(|n| n.as_str()),
                            "a named rule needs a `when` expression".into(),
                            Some("add `when: <expression>`".into()),
                        ),
                        (None, Some(_)) => self.err_at(
                            start_of(item),
                            1,
                            None,
                            "a rule with `when` needs a `name`".into(),
                            Some("add `name: <unique-name>`, or write the expression alone".into()),
                        ),
                    }
                }
                Node::Sequence(_) => self.err_at(
                    start_of(item),
                    1,
                    None,
                    "a rule cannot be a list".into(),
                    None,
                ),
            }
        }
    }

    /// Where the expression text begins in the file, when it can be found
    /// verbatim (plain or simply quoted scalars); else the scalar's start.
    fn expr_origin(&self, sc: &MarkedScalarNode) -> (usize, bool) {
        let (line, col) = scalar_start(sc);
        let off = self.map.offset_of(line, col);
        let rest = &self.map.text[off.min(self.map.text.len())..];
        let src = sc.as_str();
        if rest.starts_with(src) {
            return (off, true);
        }
        if (rest.starts_with('"') || rest.starts_with('\'')) && rest[1..].starts_with(src) {
            return (off + 1, true);
        }
        (off, false)
    }

    fn add_rule(&mut self, s: Surface, effect: Effect, name: String, sc: &MarkedScalarNode) {
        let (line, column) = scalar_start(sc);
        if self.rules.len() >= MAX_RULES {
            self.err_at(
                (line, column),
                1,
                None,
                format!("more than {MAX_RULES} rules"),
                None,
            );
            return;
        }
        if !self.names.insert(name.clone()) {
            self.err_at(
                (line, column),
                1,
                Some(&name),
                format!("rule name `{name}` is used twice in this file"),
                Some("give each rule a unique name".into()),
            );
            return;
        }
        let source = sc.as_str().to_string();
        match expr::compile(s, &source) {
            Ok(compiled) => {
                let id = RuleId(self.rules.len() as u32);
                let entry = self.surfaces.entry(s).or_default();
                match effect {
                    Effect::Allow => entry.allow.add(id, &compiled),
                    Effect::Deny => entry.deny.add(id, &compiled),
                }
                self.rules.push(Rule {
                    name,
                    file: self.file.clone(),
                    line,
                    column,
                    source,
                    surface: s,
                    effect,
                    compiled,
                });
            }
            Err(errors) => {
                let (origin, exact) = self.expr_origin(sc);
                for e in errors {
                    let (start, end) = if exact {
                        (origin + e.start as usize, origin + e.end as usize)
                    } else {
                        (origin, origin + 1)
                    };
                    let d = self.map.at(start, end, Some(&name), e.message, e.help);
                    self.diags.push(d);
                }
            }
        }
    }
}

fn valid_rule_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:".contains(c))
}
