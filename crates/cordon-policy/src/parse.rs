//! Reading one policy file: YAML with positions, every rule compiled and
//! checked. Where the file stands among the layers is decided by
//! the loader (`load.rs`); this module only says what the file states.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, Node};

use crate::canon;
use crate::diag::{Diagnostic, SourceMap};
use crate::expr;
use crate::model::{AllowRange, Bound, Effect, Guard, Rule, StatedBound, StatedBounds, MAX_RULES};
use crate::vocab::{self, Fact, Surface};

/// What one file says, before it takes its place among the layers.
pub(crate) struct ParsedFile {
    pub rules: Vec<Rule>,
    /// Surfaces the file names, and those it states an `allow` key for.
    pub surfaces: BTreeSet<Surface>,
    pub allow_stated: BTreeSet<Surface>,
    pub bounds: StatedBounds,
    pub allow_ranges: Vec<(AllowRange, Pos)>,
    /// `egress.inspect` entries in order.
    pub inspect: Vec<InspectEntry>,
    /// `extends` entries in order, with their positions and widths.
    pub extends: Vec<(String, Pos, usize)>,
    pub applies_to: Option<Guard>,
    /// Where `policy:` itself starts, for errors about the whole layer.
    pub start: Pos,
}

/// One `egress.inspect` entry as written: its canonical host (or
/// `*.suffix`) and, when stated, the `ca` file it names.
pub(crate) struct InspectEntry {
    pub host: String,
    pub pos: Pos,
    /// The path as written, where it stands and its width.
    pub ca: Option<(String, Pos, usize)>,
}

/// Parses one policy file. Diagnostics are appended to `diags`; the parsed
/// file is returned even when some of it was wrong, so that every problem of
/// every layer is reported in one pass.
pub(crate) fn parse_file(name: &Arc<str>, text: &str, diags: &mut Vec<Diagnostic>) -> ParsedFile {
    let map = SourceMap { name, text };
    let mut l = Loader {
        map: &map,
        file: name.clone(),
        diags: Vec::new(),
        out: ParsedFile {
            rules: Vec::new(),
            surfaces: BTreeSet::new(),
            allow_stated: BTreeSet::new(),
            bounds: StatedBounds::default(),
            allow_ranges: Vec::new(),
            inspect: Vec::new(),
            extends: Vec::new(),
            applies_to: None,
            start: (1, 1),
        },
        names: HashSet::new(),
    };
    let opts = marked_yaml::LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    if let Some((line, col)) = crate::canon::yaml_too_deep(text) {
        let off = map.offset_of(line, col);
        l.diags.push(map.at(
            off,
            off + 1,
            None,
            format!(
                "collections nest deeper than {} levels here",
                crate::canon::MAX_YAML_NESTING
            ),
            Some("flatten the file: a policy needs only a few levels".into()),
        ));
        diags.append(&mut l.diags);
        return l.out;
    }
    match marked_yaml::parse_yaml_with_options(0, text, opts) {
        Ok(root) => l.root(&root),
        Err(e) => {
            let (line, col, msg) = yaml_error(&e);
            let off = map.offset_of(line, col);
            l.diags
                .push(map.at(off, off + 1, None, msg, Some(yaml_help(&e).into())));
        }
    }
    diags.append(&mut l.diags);
    l.out
}

/// A 1-based line and column.
pub type Pos = (usize, usize);

/// What to do about a YAML error.
pub(crate) fn yaml_help(e: &marked_yaml::LoadError) -> &'static str {
    match e {
        marked_yaml::LoadError::DuplicateKey(_) => "merge the two into one: to change a surface of a policy you copied (`cordon policy show-default`), edit the section that is there rather than adding another; to narrow a policy, `extends:` it from a file of your own",
        _ => "fix the YAML syntax; anchors, aliases and tags are not accepted",
    }
}

pub(crate) fn yaml_error(e: &marked_yaml::LoadError) -> (usize, usize, String) {
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
            let first = d
                .prev_key
                .span()
                .start()
                .map_or(String::new(), |p| format!(" (first at line {})", p.line()));
            let msg = format!("duplicate key `{key}`: it is given twice in one mapping{first}; a key may appear once — put everything under `{key}` in one place");
            return match m {
                Some(m) => (m.line(), m.column(), msg),
                None => (1, 1, msg),
            };
        }
    };
    (m.line(), m.column(), msg)
}

struct Loader<'a> {
    map: &'a SourceMap<'a>,
    file: Arc<str>,
    diags: Vec<Diagnostic>,
    out: ParsedFile,
    names: HashSet<String>,
}

pub(crate) fn start_of(n: &Node) -> (usize, usize) {
    n.span().start().map_or((1, 1), |m| (m.line(), m.column()))
}

pub(crate) fn scalar_start(n: &MarkedScalarNode) -> (usize, usize) {
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
        let help = crate::vocab::unknown_key_help(key.as_str(), known, what);
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
        self.out.start = start_of(n);
        let Some(m) = self.mapping(n, "`policy`") else {
            return;
        };
        for (k, v) in m.iter() {
            match (k.as_str(), Surface::from_key(k.as_str())) {
                (_, Some(s)) => self.surface(s, v),
                ("extends", _) => self.extends(v),
                ("applies_to", _) => self.applies_to(v),
                _ => self.unknown_key(
                    k,
                    &[
                        "extends",
                        "applies_to",
                        "egress",
                        "compute",
                        "storage",
                        "secret",
                    ],
                    "`policy`",
                ),
            }
        }
    }

    fn extends(&mut self, v: &Node) {
        let Node::Sequence(seq) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                "`extends` must be a list of policy files".into(),
                Some("write `extends: [./base.yaml, cordon:NAME]`".into()),
            );
            return;
        };
        for item in seq.iter() {
            match item {
                Node::Scalar(sc) => {
                    let pos = scalar_start(sc);
                    self.out.extends.push((
                        sc.as_str().to_string(),
                        pos,
                        sc.as_str().chars().count(),
                    ));
                }
                other => self.err_at(
                    start_of(other),
                    1,
                    None,
                    "an `extends` entry must be a path or `cordon:NAME`".into(),
                    None,
                ),
            }
        }
    }

    fn applies_to(&mut self, v: &Node) {
        let Node::Scalar(sc) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                "`applies_to` must be one CEL expression".into(),
                Some("write e.g. `applies_to: identity.namespace == \"team-a\"`".into()),
            );
            return;
        };
        let (line, column) = scalar_start(sc);
        let source = sc.as_str().to_string();
        // The base vocabulary is the same in every surface; compile in one and
        // then hold the guard to `identity` and `env`.
        match expr::compile(Surface::Secret, &source) {
            Ok(compiled) => {
                let base = vocab::IDENTITY_FIELDS
                    .iter()
                    .chain(vocab::ENV_FIELDS)
                    .fold(0u32, |acc, (_, f)| acc | f.bit());
                let other = compiled.reads & !base;
                if other != 0 {
                    let names: Vec<_> = Fact::from_bits(other)
                        .into_iter()
                        .map(|f| format!("`{}`", f.spelling()))
                        .collect();
                    self.err_at(
                        (line, column),
                        source.chars().count(),
                        None,
                        format!(
                            "`applies_to` may read only `identity` and `env`, not {}",
                            names.join(", ")
                        ),
                        Some(
                            "a layer applies to identities; put conditions on requests in its rules"
                                .into(),
                        ),
                    );
                    return;
                }
                self.out.applies_to = Some(Guard {
                    source,
                    line,
                    column,
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
                    // Compiled in the secret surface, but that is not
                    // where the author wrote it.
                    let message = e.message.replace(
                        "in the secret surface",
                        "in `applies_to`, which reads only `identity` and `env`",
                    );
                    let d = self.map.at(start, end, Some("applies_to"), message, e.help);
                    self.diags.push(d);
                }
            }
        }
    }

    fn surface(&mut self, s: Surface, n: &Node) {
        let Some(m) = self.mapping(n, &format!("`{s}`")) else {
            return;
        };
        self.out.surfaces.insert(s);
        let bounds: &[&str] = match s {
            Surface::Egress => &["max_response_bytes"],
            Surface::Compute => &[
                "max_memory",
                "max_processes",
                "max_cpu_seconds",
                "max_wall_seconds",
                "max_disk",
            ],
            _ => &[],
        };
        for (k, v) in m.iter() {
            match k.as_str() {
                "allow" => {
                    self.out.allow_stated.insert(s);
                    self.rule_list(s, Effect::Allow, v);
                }
                "deny" => self.rule_list(s, Effect::Deny, v),
                "allow_ranges" if s == Surface::Egress => self.allow_ranges(v),
                "inspect" if s == Surface::Egress => self.inspect(v),
                key if bounds.contains(&key) => self.bound(key, v),
                _ => {
                    let mut known = vec!["allow", "deny"];
                    if s == Surface::Egress {
                        known.extend(["allow_ranges", "inspect"]);
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
        let sized = matches!(key, "max_memory" | "max_response_bytes" | "max_disk");
        let parsed = if sized {
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
            Ok(value) => {
                if let Some(b) = Bound::from_key(key) {
                    let (line, column) = scalar_start(sc);
                    self.out.bounds.0[b as usize] = Some(StatedBound {
                        value,
                        line,
                        column,
                    });
                }
            }
            Err(msg) => {
                let help = if sized {
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
                (Some(cidr), true) => self
                    .out
                    .allow_ranges
                    .push((AllowRange { cidr, hosts }, start_of(item))),
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

    /// `egress.inspect`: bare hosts, or `{host: H, ca: PATH}`.
    fn inspect(&mut self, v: &Node) {
        let Node::Sequence(seq) = v else {
            self.err_at(
                start_of(v),
                1,
                None,
                "`inspect` must be a list of hosts".into(),
                Some("write `inspect: [api.example.com, \"*.corp.example\"]` or `- {host: H, ca: ./ca.pem}` items".into()),
            );
            return;
        };
        for item in seq.iter() {
            let (host, ca) = match item {
                Node::Scalar(h) => (Some(h), None),
                Node::Mapping(m) => {
                    let (mut host, mut ca) = (None, None);
                    for (k, v) in m.iter() {
                        match (k.as_str(), v) {
                            ("host", Node::Scalar(x)) => host = Some(x),
                            ("ca", Node::Scalar(x)) => ca = Some(x),
                            ("host" | "ca", other) => self.err_at(
                                start_of(other),
                                1,
                                None,
                                format!("`{}` must be a string", k.as_str()),
                                None,
                            ),
                            _ => self.unknown_key(k, &["host", "ca"], "an `inspect` entry"),
                        }
                    }
                    if host.is_none() {
                        self.err_at(
                            start_of(item),
                            1,
                            None,
                            "an `inspect` entry needs a `host`".into(),
                            Some("write `{host: api.example.com}` or the host alone".into()),
                        );
                    }
                    (host, ca)
                }
                Node::Sequence(_) => {
                    self.err_at(
                        start_of(item),
                        1,
                        None,
                        "an `inspect` entry is a host or a `{host, ca}` mapping, not a list".into(),
                        None,
                    );
                    (None, None)
                }
            };
            let Some(h) = host else { continue };
            let pos = scalar_start(h);
            let raw = h.as_str();
            match inspect_host(raw) {
                Ok(host) => {
                    if self.out.inspect.iter().any(|e| e.host == host) {
                        self.err_at(
                            pos,
                            raw.chars().count(),
                            None,
                            format!("`{host}` is inspected twice in this file"),
                            Some("list each host once".into()),
                        );
                        continue;
                    }
                    let ca = ca.map(|c| {
                        (
                            c.as_str().to_string(),
                            scalar_start(c),
                            c.as_str().chars().count(),
                        )
                    });
                    self.out.inspect.push(InspectEntry { host, pos, ca });
                }
                Err(why) => self.err_at(
                    pos,
                    raw.chars().count(),
                    None,
                    format!("`{raw}` cannot be inspected: {why}"),
                    Some("write an exact name like `api.example.com`, or `*.example.com` for every name under it".into()),
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
        if self.out.rules.len() >= MAX_RULES {
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
                self.out.rules.push(Rule {
                    name,
                    layer: 0,
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

/// An `inspect` host, canonical: an exact DNS name, or `*.suffix` with a
/// suffix of at least two labels. IP literals are refused: TLS to an
/// address names no host to check a certificate against.
fn inspect_host(raw: &str) -> Result<String, String> {
    let (wildcard, name) = match raw.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    if name.contains('*') {
        return Err("`*` may only stand as the whole first label (`*.domain`)".into());
    }
    let canonical = canon::host(name).map_err(|e| e.to_string())?;
    if canonical.parse::<std::net::IpAddr>().is_ok() {
        return Err("it is an IP address; inspection names hosts".into());
    }
    if !wildcard {
        return Ok(canonical);
    }
    if !canonical.contains('.') {
        return Err(format!(
            "`*.{canonical}` would inspect a whole top-level domain"
        ));
    }
    Ok(format!("*.{canonical}"))
}

fn valid_rule_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:".contains(c))
}
