//! Test cases for `cordon policy test` and the facts of `cordon policy
//! explain`: requests written by hand, built exactly as the enforcing layer
//! builds them — typed by the vocabulary, canonicalised by [`crate::canon`],
//! and with the same facts unknown.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, Node};

use crate::canon;
use crate::decide::{
    ComputeFacts, Deployment, EgressFacts, Identity, Mode, Request, SecretFacts, StorageFacts,
    SurfaceFacts,
};
use crate::diag::{Diagnostic, Diagnostics, Severity, SourceMap};
use crate::explain::Explanation;
use crate::expr::{self, MAX_LIST_LEN};
use crate::model::{RuleId, MAX_FILE_BYTES};
use crate::parse::{scalar_start, start_of, yaml_error, Pos};
use crate::policy::Policy;
use crate::vocab::{self, Surface};

/// What a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Allow,
    Deny,
}

/// One test case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub file: Arc<str>,
    pub line: usize,
    pub column: usize,
    pub request: Request,
    pub expect: Expect,
    /// A rule that must be among those that decided, by name.
    pub rule: Option<String>,
}

/// A refusal of one fact: what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactError {
    /// The field it is about (`url`, `identity.attested`, ...), when one.
    pub field: Option<String>,
    pub message: String,
    pub help: Option<String>,
}

impl FactError {
    fn new(field: &str, message: impl Into<String>, help: impl Into<String>) -> FactError {
        FactError {
            field: Some(field.to_string()),
            message: message.into(),
            help: Some(help.into()),
        }
    }
}

impl std::fmt::Display for FactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// The fields each surface's facts take, as a case or the command line
/// spells them.
pub fn surface_fields(s: Surface) -> &'static [&'static str] {
    match s {
        Surface::Egress => &["url", "scheme", "host", "port", "method", "path", "ip"],
        Surface::Compute => &[
            "command",
            "command_target",
            "args",
            "cpu",
            "memory",
            "work_dir",
        ],
        Surface::Storage => &["path", "mode", "bytes", "work_dir"],
        Surface::Secret => &["secret"],
    }
}

/// The fields of `identity` a case may state.
pub const IDENTITY_KEYS: &[&str] = &["namespace", "name", "attested", "labels"];

/// Builds one request from hand-written facts. Both the test-file loader and
/// the command line feed it, so both type and canonicalise facts the same way.
#[derive(Debug, Clone)]
pub struct FactsBuilder {
    surface: Surface,
    identity: Identity,
    env: Deployment,
    now: Option<i64>,
    fields: BTreeMap<&'static str, String>,
    args: Option<Vec<String>>,
}

impl FactsBuilder {
    pub fn new(surface: Surface) -> FactsBuilder {
        FactsBuilder {
            surface,
            identity: Identity::default(),
            env: Deployment::default(),
            now: None,
            fields: BTreeMap::new(),
            args: None,
        }
    }

    pub fn surface(&self) -> Surface {
        self.surface
    }

    /// Sets an identity field: `namespace`, `name`, `attested` (`true` or
    /// `false`) or `labels.KEY`.
    pub fn identity(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        let field = format!("identity.{key}");
        match key {
            "namespace" => self.identity.namespace = value.to_string(),
            "name" => self.identity.name = value.to_string(),
            "attested" => {
                self.identity.attested = match value {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(FactError::new(
                            &field,
                            format!("`identity.attested` is a bool, not `{value}`"),
                            "write `true` or `false`",
                        ))
                    }
                }
            }
            k => match k.strip_prefix("labels.") {
                Some(label) if !label.is_empty() => {
                    self.identity
                        .labels
                        .insert(label.to_string(), value.to_string());
                }
                _ => {
                    let help = match vocab::did_you_mean(k, IDENTITY_KEYS.iter().copied()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "identity takes `namespace`, `name`, `attested` and `labels.KEY`"
                            .to_string(),
                    };
                    return Err(FactError::new(
                        &field,
                        format!("unknown identity field `{k}`"),
                        help,
                    ));
                }
            },
        }
        Ok(())
    }

    /// Sets an `env` field (`name`).
    pub fn env(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        match key {
            "name" => {
                self.env.name = value.to_string();
                Ok(())
            }
            k => Err(FactError::new(
                &format!("env.{k}"),
                format!("unknown env field `{k}`"),
                "env takes `name`",
            )),
        }
    }

    /// Sets `now` from an RFC 3339 timestamp.
    pub fn now(&mut self, value: &str) -> Result<(), FactError> {
        match expr::parse_timestamp(value) {
            Some(t) => {
                self.now = Some(t);
                Ok(())
            }
            None => Err(FactError::new(
                "now",
                format!("`{value}` is not a timestamp"),
                "write RFC 3339, e.g. `2026-12-02T10:00:00Z`",
            )),
        }
    }

    /// Sets one of the surface's fields (see [`surface_fields`]); `args` is
    /// set with [`FactsBuilder::arg`].
    pub fn field(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        let known = surface_fields(self.surface);
        match known.iter().find(|k| **k == key && **k != "args") {
            Some(k) => {
                if self.fields.insert(k, value.to_string()).is_some() {
                    return Err(FactError::new(
                        key,
                        format!("`{key}` is given twice"),
                        "give each fact once",
                    ));
                }
                Ok(())
            }
            None => {
                let help = match vocab::did_you_mean(key, known.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!(
                        "a {} case takes {}",
                        self.surface,
                        known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                Err(FactError::new(
                    key,
                    format!("unknown {} fact `{key}`", self.surface),
                    help,
                ))
            }
        }
    }

    /// Appends one argument (compute only).
    pub fn arg(&mut self, value: &str) -> Result<(), FactError> {
        if self.surface != Surface::Compute {
            return Err(FactError::new(
                "args",
                format!("`args` is a compute fact, not a {} one", self.surface),
                "remove it",
            ));
        }
        let args = self.args.get_or_insert_with(Vec::new);
        if args.len() as u64 >= MAX_LIST_LEN {
            return Err(FactError::new(
                "args",
                format!("more than {MAX_LIST_LEN} arguments"),
                "the enforcing layer refuses a command with more arguments",
            ));
        }
        args.push(value.to_string());
        Ok(())
    }

    /// Marks `args` as given (an empty list is a list).
    pub fn args_given(&mut self) {
        self.args.get_or_insert_with(Vec::new);
    }

    /// The request, canonicalised, with the unknowns the enforcing layer has.
    pub fn build(self) -> Result<Request, FactError> {
        let f = &self.fields;
        let get = |k: &str| f.get(k).map(String::as_str);
        let canon_err = |field: &str, e: canon::CanonError| {
            FactError::new(
                field,
                e.to_string(),
                "write it as the workload would send it",
            )
        };
        let facts = match self.surface {
            Surface::Egress => {
                let raw = get("url").ok_or_else(|| {
                    FactError::new(
                        "url",
                        "an egress case needs `url`",
                        "add e.g. `url: https://example.com/`",
                    )
                })?;
                let u = canon::url(raw).map_err(|e| canon_err("url", e))?;
                let scheme = match get("scheme") {
                    None => u.scheme.clone(),
                    Some(s @ ("http" | "https")) => s.to_string(),
                    Some(s) => {
                        return Err(FactError::new(
                            "scheme",
                            format!("`{s}` is not an egress scheme"),
                            "write `http` or `https`",
                        ))
                    }
                };
                let host = match get("host") {
                    Some(h) => canon::host(h).map_err(|e| canon_err("host", e))?,
                    None => u.host.clone(),
                };
                let port = match get("port") {
                    Some(p) => match p.parse::<u16>() {
                        Ok(n) if n > 0 => i64::from(n),
                        _ => {
                            return Err(FactError::new(
                                "port",
                                format!("`{p}` is not a port"),
                                "write a number from 1 to 65535",
                            ))
                        }
                    },
                    None => u.port,
                };
                let tunnel = scheme == "https";
                for hidden in ["method", "path"] {
                    if tunnel && get(hidden).is_some() {
                        return Err(FactError::new(
                            hidden,
                            format!("an https request's `{hidden}` travels inside the TLS tunnel: the egress proxy cannot see it, so a case cannot state it"),
                            format!("remove `{hidden}` (rules that read it are undetermined for https), or use an http:// URL"),
                        ));
                    }
                }
                let method = match (tunnel, get("method")) {
                    (true, _) => None,
                    (false, None) => Some("GET".to_string()),
                    (false, Some(m)) => {
                        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
                            return Err(FactError::new(
                                "method",
                                format!("`{m}` is not an HTTP method"),
                                "write e.g. `GET` or `POST`",
                            ));
                        }
                        Some(m.to_ascii_uppercase())
                    }
                };
                let path = match (tunnel, get("path")) {
                    (true, _) => None,
                    (false, None) => Some(u.path.clone()),
                    (false, Some(p)) => {
                        Some(canon::http_path(p).map_err(|e| canon_err("path", e))?)
                    }
                };
                let ip = match get("ip") {
                    None => None,
                    Some(raw) => match raw.parse::<std::net::IpAddr>() {
                        Ok(a) => Some(a.to_string()),
                        Err(_) => {
                            return Err(FactError::new(
                                "ip",
                                format!("`{raw}` is not an IP address"),
                                "write e.g. `192.0.2.10`",
                            ))
                        }
                    },
                };
                SurfaceFacts::Egress(EgressFacts {
                    url: Some(u.url),
                    scheme: Some(scheme),
                    host: Some(host),
                    port,
                    method,
                    path,
                    ip,
                })
            }
            Surface::Compute => {
                let raw = get("command").ok_or_else(|| {
                    FactError::new(
                        "command",
                        "a compute case needs `command`",
                        "add e.g. `command: /usr/bin/python3`",
                    )
                })?;
                let command = canon::fs_path(raw).map_err(|e| canon_err("command", e))?;
                let command_target = match get("command_target") {
                    Some(t) => canon::fs_path(t).map_err(|e| canon_err("command_target", e))?,
                    None => command.clone(),
                };
                let int = |k: &str, v: &str| -> Result<i64, FactError> {
                    v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                        FactError::new(k, format!("`{v}` is not a whole number"), "write e.g. `60`")
                    })
                };
                let cpu = get("cpu").map(|v| int("cpu", v)).transpose()?;
                let memory = match get("memory") {
                    None => None,
                    Some(v) => {
                        let n = canon::size(v).map_err(|e| canon_err("memory", e))?;
                        Some(i64::try_from(n).map_err(|_| {
                            FactError::new(
                                "memory",
                                format!("`{v}` is too large"),
                                "write a smaller size",
                            )
                        })?)
                    }
                };
                SurfaceFacts::Compute(ComputeFacts {
                    command,
                    command_target,
                    // The first command of a sandbox is checked with its
                    // arguments known; none given is an empty list.
                    args: Some(self.args.unwrap_or_default()),
                    cpu,
                    memory,
                    work_dir: Some(work_dir(get("work_dir"))?),
                })
            }
            Surface::Storage => {
                let raw = get("path").ok_or_else(|| {
                    FactError::new(
                        "path",
                        "a storage case needs `path`",
                        "add e.g. `path: /work/src/main.rs`",
                    )
                })?;
                let path = canon::fs_path(raw).map_err(|e| canon_err("path", e))?;
                let mode = match get("mode") {
                    None => {
                        return Err(FactError::new(
                            "mode",
                            "a storage case needs `mode`",
                            "add `mode: read`, `write` or `execute`",
                        ))
                    }
                    Some(m) => Mode::parse(m).ok_or_else(|| {
                        FactError::new(
                            "mode",
                            format!("`{m}` is not a mode"),
                            "write `read`, `write` or `execute`",
                        )
                    })?,
                };
                let bytes = match get("bytes") {
                    None => None,
                    Some(v) => Some(
                        canon::size(v)
                            .ok()
                            .and_then(|n| i64::try_from(n).ok())
                            .ok_or_else(|| {
                                FactError::new(
                                    "bytes",
                                    format!("`{v}` is not a size"),
                                    "write e.g. `4096` or `1MiB`",
                                )
                            })?,
                    ),
                };
                SurfaceFacts::Storage(StorageFacts {
                    path,
                    mode,
                    bytes,
                    work_dir: Some(work_dir(get("work_dir"))?),
                })
            }
            Surface::Secret => {
                let raw = get("secret").ok_or_else(|| {
                    FactError::new(
                        "secret",
                        "a secret case needs `secret: {name: ...}`",
                        "add e.g. `secret: {name: team-a/db-password}`",
                    )
                })?;
                let name = canon::secret_name(raw).map_err(|e| canon_err("secret", e))?;
                SurfaceFacts::Secret(SecretFacts { name })
            }
        };
        let now = self.now.unwrap_or_else(now_secs);
        Ok(Request {
            identity: self.identity,
            env: self.env,
            now,
            facts,
        })
    }
}

/// The work dir a case runs in: as stated, else [`DEFAULT_WORK_DIR`].
fn work_dir(raw: Option<&str>) -> Result<String, FactError> {
    canon::fs_path(raw.unwrap_or(DEFAULT_WORK_DIR)).map_err(|e| {
        FactError::new(
            "work_dir",
            e.to_string(),
            "write the absolute path the workload sees, e.g. `/workspace`",
        )
    })
}

/// The work dir a test case or `explain` assumes when it states none.
pub const DEFAULT_WORK_DIR: &str = "/workspace";

/// The current time, as the enforcing layer stamps a request.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Loads a test file: `tests:` and a list of cases.
pub fn load_file(path: &Path) -> Result<Vec<Case>, Diagnostics> {
    let name = path.display().to_string();
    let text = read(path, &name)?;
    load_str(&name, &text)
}

/// Loads one case for `explain --facts`: a mapping like a test case, in
/// which `name` and `expect` are optional.
pub fn load_one_file(path: &Path) -> Result<Request, Diagnostics> {
    let name = path.display().to_string();
    let text = read(path, &name)?;
    load_one_str(&name, &text)
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

/// Loads test cases from text.
pub fn load_str(name: &str, text: &str) -> Result<Vec<Case>, Diagnostics> {
    let map = SourceMap { name, text };
    let mut l = CaseLoader {
        map: &map,
        file: Arc::from(name),
        diags: Vec::new(),
    };
    let mut cases = Vec::new();
    if let Some(root) = l.parse() {
        l.tests(&root, &mut cases);
    }
    finish(l.diags, cases)
}

/// Loads one case from text (see [`load_one_file`]).
pub fn load_one_str(name: &str, text: &str) -> Result<Request, Diagnostics> {
    let map = SourceMap { name, text };
    let mut l = CaseLoader {
        map: &map,
        file: Arc::from(name),
        diags: Vec::new(),
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
                    Some("fix the YAML syntax; anchors, aliases and tags are not accepted".into()),
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
                    let Some(im) = self.mapping(v, "`identity`") else {
                        ok = false;
                        continue;
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
                        let Some(s) = self.scalar(iv, &format!("`identity.{}`", ik.as_str()))
                        else {
                            ok = false;
                            continue;
                        };
                        if let Err(e) = b.identity(ik.as_str(), s.as_str()) {
                            self.fact_err(e, scalar_start(s), s.as_str().chars().count());
                            ok = false;
                        }
                    }
                    continue;
                }
                "env" => {
                    let Some(em) = self.mapping(v, "`env`") else {
                        ok = false;
                        continue;
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
                    continue;
                }
                "args" if surface == Surface::Compute => {
                    let Node::Sequence(seq) = v else {
                        self.err(
                            start_of(v),
                            1,
                            "`args` must be a list",
                            Some("write `args: [\"-c\", \"print(1)\"]`".into()),
                        );
                        ok = false;
                        continue;
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
                    let known: Vec<&str> = ["identity", "env", "now"]
                        .into_iter()
                        .chain(surface_fields(surface).iter().copied())
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
        match b.build() {
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

    fn fact_err(&mut self, e: FactError, pos: Pos, width: usize) {
        self.err(pos, width, e.message, e.help);
    }
}

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
