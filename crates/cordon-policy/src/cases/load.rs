//! Loading test files: `tests:` and a list of cases, or one request for
//! `explain`, with positioned diagnostics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, Node};

use super::facts::{surface_fields, FactError, FactsBuilder, DESTINATION_KEYS, IDENTITY_KEYS};
use super::{Case, Expect};
use crate::decide::Request;
use crate::diag::{Diagnostic, Diagnostics, Severity, SourceMap};
use crate::model::MAX_FILE_BYTES;
use crate::parse::{scalar_start, start_of, yaml_error, Pos};
use crate::policy::Policy;
use crate::vocab::Surface;

/// Loads a test file: `tests:` and a list of cases, each built as the
/// enforcing layer builds it under `policy` (which https hosts it inspects).
pub fn load_file(path: &Path, policy: &Policy) -> Result<Vec<Case>, Diagnostics> {
    let name = path.display().to_string();
    let text = read(path, &name)?;
    load_str(&name, &text, policy)
}

/// Loads one case for `explain --facts`: a mapping like a test case, in
/// which `name` and `expect` are optional.
pub fn load_one_file(path: &Path, policy: &Policy) -> Result<Request, Diagnostics> {
    let name = path.display().to_string();
    let text = read(path, &name)?;
    load_one_str(&name, &text, policy)
}

fn read(path: &Path, name: &str) -> Result<String, Diagnostics> {
    let fail = |message: String| {
        Diagnostics(vec![Diagnostic {
            file: name.to_string(),
            line: 1,
            column: 1,
            width: 1,
            rule: None,
            message,
            help: Some("check the path and its permissions".into()),
            source_line: String::new(),
            severity: Severity::Error,
        }])
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read the file: {e}")))?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!(
            "not a regular file of at most {MAX_FILE_BYTES} bytes"
        )));
    }
    std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read the file: {e}")))
}

/// Loads test cases from text (see [`load_file`]).
pub fn load_str(name: &str, text: &str, policy: &Policy) -> Result<Vec<Case>, Diagnostics> {
    let map = SourceMap { name, text };
    let mut l = CaseLoader {
        map: &map,
        file: Arc::from(name),
        diags: Vec::new(),
        policy,
    };
    let mut cases = Vec::new();
    if let Some(root) = l.parse() {
        l.tests(&root, &mut cases);
    }
    finish(l.diags, cases)
}

/// Loads one case from text (see [`load_one_file`]).
pub fn load_one_str(name: &str, text: &str, policy: &Policy) -> Result<Request, Diagnostics> {
    let map = SourceMap { name, text };
    let mut l = CaseLoader {
        map: &map,
        file: Arc::from(name),
        diags: Vec::new(),
        policy,
    };
    let mut out = None;
    if let Some(root) = l.parse() {
        out = l.case(&root, false).map(|c| c.request);
    }
    finish(l.diags, ())?;
    out.ok_or_else(|| Diagnostics(vec![map.at(0, 1, None, "the file holds no case", None)]))
}

fn finish<T>(diags: Vec<Diagnostic>, v: T) -> Result<T, Diagnostics> {
    let d = Diagnostics(diags);
    if d.has_errors() {
        Err(d)
    } else {
        Ok(v)
    }
}

struct CaseLoader<'a> {
    map: &'a SourceMap<'a>,
    file: Arc<str>,
    diags: Vec<Diagnostic>,
    policy: &'a Policy,
}

impl CaseLoader<'_> {
    fn err(&mut self, pos: Pos, width: usize, msg: impl Into<String>, help: Option<String>) {
        let off = self.map.offset_of(pos.0, pos.1);
        let d = self.map.at(off, off + width.max(1), None, msg, help);
        self.diags.push(d);
    }

    fn unknown(&mut self, k: &MarkedScalarNode, known: &[&str], what: &str) {
        let help = crate::vocab::unknown_key_help(k.as_str(), known, what);
        self.err(
            scalar_start(k),
            k.as_str().chars().count(),
            format!("unknown key `{}` in {what}", k.as_str()),
            Some(help),
        );
    }

    fn parse(&mut self) -> Option<Node> {
        let opts = marked_yaml::LoaderOptions::default()
            .error_on_duplicate_keys(true)
            .prevent_coercion(true);
        match marked_yaml::parse_yaml_with_options(0, self.map.text, opts) {
            Ok(root) => Some(root),
            Err(e) => {
                let (line, col, msg) = yaml_error(&e);
                self.err(
                    (line, col),
                    1,
                    msg,
                    Some(crate::parse::yaml_help(&e).into()),
                );
                None
            }
        }
    }

    fn mapping<'n>(&mut self, n: &'n Node, what: &str) -> Option<&'n MarkedMappingNode> {
        match n {
            Node::Mapping(m) => Some(m),
            other => {
                self.err(
                    start_of(other),
                    1,
                    format!("{what} must be a mapping"),
                    None,
                );
                None
            }
        }
    }

    fn scalar<'n>(&mut self, n: &'n Node, what: &str) -> Option<&'n MarkedScalarNode> {
        match n {
            Node::Scalar(s) => Some(s),
            other => {
                self.err(
                    start_of(other),
                    1,
                    format!("{what} must be a single value"),
                    None,
                );
                None
            }
        }
    }

    fn tests(&mut self, root: &Node, out: &mut Vec<Case>) {
        let Some(m) = self.mapping(root, "a test file") else {
            return;
        };
        let mut saw = false;
        for (k, v) in m.iter() {
            if k.as_str() != "tests" {
                self.unknown(k, &["tests"], "a test file");
                continue;
            }
            saw = true;
            let Node::Sequence(seq) = v else {
                self.err(start_of(v), 1, "`tests` must be a list of cases", None);
                continue;
            };
            let mut names = BTreeSet::new();
            for item in seq.iter() {
                if let Some(c) = self.case(item, true) {
                    if !names.insert(c.name.clone()) {
                        self.err(
                            (c.line, c.column),
                            1,
                            format!("case name `{}` is used twice in this file", c.name),
                            Some("give each case a unique name".into()),
                        );
                    }
                    out.push(c);
                }
            }
        }
        if !saw {
            self.err(
                start_of(root),
                1,
                "the file has no `tests` key",
                Some("start the file with `tests:`".into()),
            );
        }
    }

    fn case(&mut self, n: &Node, strict: bool) -> Option<Case> {
        let m = self.mapping(n, "a case")?;
        let pos = start_of(n);
        let mut name = None;
        let mut expect = None;
        let mut expect_seen = false;
        let mut rule = None;
        let mut body: Option<(Surface, &Node, Pos)> = None;
        let mut ok = true;
        for (k, v) in m.iter() {
            match (k.as_str(), Surface::from_key(k.as_str())) {
                ("name", _) => name = self.scalar(v, "`name`").map(|s| s.as_str().to_string()),
                ("rule", _) => rule = self.scalar(v, "`rule`").map(|s| s.as_str().to_string()),
                ("expect", _) => {
                    expect_seen = true;
                    let s = self.scalar(v, "`expect`")?;
                    expect = match s.as_str() {
                        "allow" => Some(Expect::Allow),
                        "deny" => Some(Expect::Deny),
                        other => {
                            self.err(
                                scalar_start(s),
                                other.chars().count(),
                                format!("`expect` is `allow` or `deny`, not `{other}`"),
                                Some(
                                    "an undetermined verdict is enforced as deny; expect `deny`"
                                        .into(),
                                ),
                            );
                            ok = false;
                            None
                        }
                    }
                }
                (_, Some(s)) => {
                    if let Some((prev, _, _)) = body {
                        self.err(
                            scalar_start(k),
                            k.as_str().len(),
                            format!("a case names one surface; this one names `{prev}` and `{s}`"),
                            Some("split it into two cases".into()),
                        );
                        ok = false;
                    } else {
                        body = Some((s, v, scalar_start(k)));
                    }
                }
                _ => {
                    self.unknown(
                        k,
                        &[
                            "name", "expect", "rule", "egress", "compute", "storage", "secret",
                        ],
                        "a case",
                    );
                    ok = false;
                }
            }
        }
        let Some((surface, body, body_pos)) = body else {
            if !ok {
                // An unknown key was reported; it was most likely the surface.
                return None;
            }
            self.err(
                pos,
                1,
                "a case names no surface",
                Some("add one of `egress`, `compute`, `storage`, `secret`".into()),
            );
            return None;
        };
        if strict && name.is_none() {
            self.err(
                pos,
                1,
                "a case needs a `name`",
                Some("add `name: ...`".into()),
            );
            ok = false;
        }
        if strict && !expect_seen {
            self.err(
                pos,
                1,
                "a case needs `expect: allow` or `expect: deny`",
                None,
            );
            ok = false;
        }
        let request = self.facts(surface, body, body_pos)?;
        if !ok {
            return None;
        }
        Some(Case {
            name: name.unwrap_or_default(),
            file: self.file.clone(),
            line: pos.0,
            column: pos.1,
            request,
            expect: expect.unwrap_or(Expect::Deny),
            rule,
        })
    }

    fn facts(&mut self, surface: Surface, n: &Node, body_pos: Pos) -> Option<Request> {
        let m = self.mapping(n, &format!("`{surface}`"))?;
        let mut b = FactsBuilder::new(surface);
        let mut at: BTreeMap<String, (Pos, usize)> = BTreeMap::new();
        let mut ok = true;
        let record = |at: &mut BTreeMap<String, (Pos, usize)>, key: &str, s: &MarkedScalarNode| {
            at.insert(
                key.to_string(),
                (scalar_start(s), s.as_str().chars().count()),
            );
        };
        for (k, v) in m.iter() {
            let key = k.as_str();
            let res: Result<(), FactError> = match key {
                "identity" => {
                    ok &= self.identity_facts(v, &mut b);
                    continue;
                }
                "env" => {
                    ok &= self.env_facts(v, &mut b);
                    continue;
                }
                "args" if surface == Surface::Compute => {
                    ok &= self.args_facts(v, &mut b);
                    continue;
                }
                "headers" if surface == Surface::Egress => {
                    if let Node::Mapping(hm) = v {
                        if let Some((hk, _)) = hm.iter().next() {
                            record(&mut at, "headers", hk);
                        }
                    }
                    ok &= self.header_facts(v, &mut b);
                    continue;
                }
                "destination" if surface == Surface::Secret => {
                    ok &= self.destination_facts(v, &mut b, &mut at);
                    continue;
                }
                "caller" if surface == Surface::Ingress => {
                    ok &= self.caller_facts(v, &mut b);
                    continue;
                }
                "secret" if surface == Surface::Secret => {
                    let Some(sm) = self.mapping(v, "`secret`") else {
                        ok = false;
                        continue;
                    };
                    for (sk, sv) in sm.iter() {
                        if sk.as_str() != "name" {
                            self.unknown(sk, &["name"], "`secret`");
                            ok = false;
                            continue;
                        }
                        if let Some(s) = self.scalar(sv, "`secret.name`") {
                            record(&mut at, "secret", s);
                            let _ = b.field("secret", s.as_str());
                        }
                    }
                    continue;
                }
                "now" => match self.scalar(v, "`now`") {
                    Some(s) => {
                        record(&mut at, "now", s);
                        b.now(s.as_str())
                    }
                    None => {
                        ok = false;
                        continue;
                    }
                },
                _ => {
                    let extra: &[&str] = match surface {
                        Surface::Egress => &["headers"],
                        Surface::Secret => &["destination"],
                        Surface::Ingress => &["caller"],
                        _ => &[],
                    };
                    let known: Vec<&str> = ["identity", "env", "now"]
                        .into_iter()
                        .chain(surface_fields(surface).iter().copied())
                        .chain(extra.iter().copied())
                        .collect();
                    if !known.contains(&key) {
                        self.unknown(k, &known, &format!("a {surface} case"));
                        ok = false;
                        continue;
                    }
                    match self.scalar(v, &format!("`{key}`")) {
                        Some(s) => {
                            record(&mut at, key, s);
                            b.field(key, s.as_str())
                        }
                        None => {
                            ok = false;
                            continue;
                        }
                    }
                }
            };
            if let Err(e) = res {
                let (p, w) = at.get(key).copied().unwrap_or((scalar_start(k), key.len()));
                self.fact_err(e, p, w);
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        match b.build(self.policy) {
            Ok(r) => Some(r),
            Err(e) => {
                let (p, w) = e
                    .field
                    .as_ref()
                    .and_then(|f| at.get(f).copied())
                    .unwrap_or((body_pos, surface.key().len()));
                self.fact_err(e, p, w);
                None
            }
        }
    }

    /// A case's `identity`: its keys and its `labels`. `false` when any was
    /// refused (each said why).
    fn caller_facts(&mut self, v: &Node, b: &mut FactsBuilder) -> bool {
        let mut ok = true;
        let Some(cm) = self.mapping(v, "`caller`") else {
            return false;
        };
        for (ck, cv) in cm.iter() {
            if !super::facts::CALLER_KEYS.contains(&ck.as_str()) {
                self.unknown(ck, super::facts::CALLER_KEYS, "`caller`");
                ok = false;
                continue;
            }
            let Some(s) = self.scalar(cv, &format!("`caller.{}`", ck.as_str())) else {
                ok = false;
                continue;
            };
            if let Err(e) = b.caller(ck.as_str(), s.as_str()) {
                self.fact_err(e, scalar_start(s), s.as_str().chars().count());
                ok = false;
            }
        }
        ok
    }

    fn identity_facts(&mut self, v: &Node, b: &mut FactsBuilder) -> bool {
        let mut ok = true;
        let Some(im) = self.mapping(v, "`identity`") else {
            return false;
        };
        for (ik, iv) in im.iter() {
            if ik.as_str() == "labels" {
                let Some(lm) = self.mapping(iv, "`identity.labels`") else {
                    ok = false;
                    continue;
                };
                for (lk, lv) in lm.iter() {
                    let Some(s) = self.scalar(lv, "a label") else {
                        ok = false;
                        continue;
                    };
                    let f = format!("labels.{}", lk.as_str());
                    if let Err(e) = b.identity(&f, s.as_str()) {
                        self.fact_err(e, scalar_start(s), s.as_str().len());
                        ok = false;
                    }
                }
                continue;
            }
            if !IDENTITY_KEYS.contains(&ik.as_str()) {
                self.unknown(ik, IDENTITY_KEYS, "`identity`");
                ok = false;
                continue;
            }
            let Some(s) = self.scalar(iv, &format!("`identity.{}`", ik.as_str())) else {
                ok = false;
                continue;
            };
            if let Err(e) = b.identity(ik.as_str(), s.as_str()) {
                self.fact_err(e, scalar_start(s), s.as_str().chars().count());
                ok = false;
            }
        }
        ok
    }

    /// A case's `env`: its `name`. `false` when it was refused.
    fn env_facts(&mut self, v: &Node, b: &mut FactsBuilder) -> bool {
        let mut ok = true;
        let Some(em) = self.mapping(v, "`env`") else {
            return false;
        };
        for (ek, ev) in em.iter() {
            if ek.as_str() != "name" {
                self.unknown(ek, &["name"], "`env`");
                ok = false;
                continue;
            }
            if let Some(s) = self.scalar(ev, "`env.name`") {
                let _ = b.env("name", s.as_str());
            }
        }
        ok
    }

    /// An egress case's `headers`: a mapping of names to a value, or to a
    /// list of values for a header sent more than once. `false` when any
    /// was refused.
    fn header_facts(&mut self, v: &Node, b: &mut FactsBuilder) -> bool {
        let mut ok = true;
        let Some(hm) = self.mapping(v, "`headers`") else {
            return false;
        };
        for (hk, hv) in hm.iter() {
            let values: Vec<&MarkedScalarNode> = match hv {
                Node::Scalar(s) => vec![s],
                Node::Sequence(seq) => seq
                    .iter()
                    .filter_map(|x| self.scalar(x, "a header value"))
                    .collect(),
                Node::Mapping(_) => {
                    self.err(
                        start_of(hv),
                        1,
                        "a header's value is a string or a list of strings",
                        None,
                    );
                    ok = false;
                    continue;
                }
            };
            for s in values {
                if let Err(e) = b.header(hk.as_str(), s.as_str()) {
                    self.fact_err(e, scalar_start(hk), hk.as_str().chars().count());
                    ok = false;
                }
            }
        }
        ok
    }

    /// A secret case's `destination`: `host`, `method`, `path`, `header`.
    /// `false` when any was refused.
    fn destination_facts(
        &mut self,
        v: &Node,
        b: &mut FactsBuilder,
        at: &mut BTreeMap<String, (Pos, usize)>,
    ) -> bool {
        let mut ok = true;
        let Some(dm) = self.mapping(v, "`destination`") else {
            return false;
        };
        for (dk, dv) in dm.iter() {
            if !DESTINATION_KEYS.contains(&dk.as_str()) {
                self.unknown(dk, DESTINATION_KEYS, "`destination`");
                ok = false;
                continue;
            }
            let Some(s) = self.scalar(dv, &format!("`destination.{}`", dk.as_str())) else {
                ok = false;
                continue;
            };
            at.insert(
                format!("destination.{}", dk.as_str()),
                (scalar_start(s), s.as_str().chars().count()),
            );
            if let Err(e) = b.destination(dk.as_str(), s.as_str()) {
                self.fact_err(e, scalar_start(s), s.as_str().chars().count());
                ok = false;
            }
        }
        if ok && !dm.is_empty() && !dm.iter().any(|(k, _)| k.as_str() == "host") {
            at.insert("destination.host".into(), (start_of(v), 1));
        }
        ok
    }

    /// A compute case's `args`: a list of strings. `false` when it was refused.
    fn args_facts(&mut self, v: &Node, b: &mut FactsBuilder) -> bool {
        let mut ok = true;
        let Node::Sequence(seq) = v else {
            self.err(
                start_of(v),
                1,
                "`args` must be a list",
                Some("write `args: [\"-c\", \"print(1)\"]`".into()),
            );
            return false;
        };
        b.args_given();
        for a in seq.iter() {
            let Some(s) = self.scalar(a, "an argument") else {
                ok = false;
                continue;
            };
            if let Err(e) = b.arg(s.as_str()) {
                self.fact_err(e, scalar_start(s), 1);
                ok = false;
                break;
            }
        }
        ok
    }

    fn fact_err(&mut self, e: FactError, pos: Pos, width: usize) {
        self.err(pos, width, e.message, e.help);
    }
}
