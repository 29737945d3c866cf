//! A loaded policy: a sequence of layers, the first (the root) defining all
//! that can ever be allowed and every later one only narrowing. Loading
//! expands `extends` depth-first, compiles and checks every rule, refuses any
//! layer that would widen, and builds the indexes a decision uses. Load is the
//! only time a rule is parsed or checked; a decision never compiles anything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::diag::{Diagnostic, Diagnostics, Severity, SourceMap};
use crate::expr::{self, Compiled};
use crate::parse::{self, ParsedFile, Pos};
use crate::resolve::{self, FsResolver, NoFiles, Resolve, Unit};
use crate::vocab::Surface;
use sha2::{Digest as _, Sha256};

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
    /// The layer the rule belongs to (0 is the root).
    pub layer: u32,
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
    pub(crate) fn add(&mut self, id: RuleId, compiled: &Compiled) {
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

/// The bounds a policy can state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    MaxResponseBytes,
    MaxMemory,
    MaxProcesses,
    MaxCpuSeconds,
    MaxWallSeconds,
}

impl Bound {
    pub const ALL: [Bound; 5] = [
        Bound::MaxResponseBytes,
        Bound::MaxMemory,
        Bound::MaxProcesses,
        Bound::MaxCpuSeconds,
        Bound::MaxWallSeconds,
    ];

    /// The key a policy writes.
    pub fn key(self) -> &'static str {
        match self {
            Bound::MaxResponseBytes => "max_response_bytes",
            Bound::MaxMemory => "max_memory",
            Bound::MaxProcesses => "max_processes",
            Bound::MaxCpuSeconds => "max_cpu_seconds",
            Bound::MaxWallSeconds => "max_wall_seconds",
        }
    }

    pub fn from_key(key: &str) -> Option<Bound> {
        Bound::ALL.into_iter().find(|b| b.key() == key)
    }

    /// A value as a policy would write it.
    pub fn show(self, v: u64) -> String {
        match self {
            Bound::MaxResponseBytes | Bound::MaxMemory => crate::canon::show_size(v),
            _ => v.to_string(),
        }
    }
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

    pub fn get(&self, b: Bound) -> u64 {
        match b {
            Bound::MaxResponseBytes => self.max_response_bytes,
            Bound::MaxMemory => self.max_memory,
            Bound::MaxProcesses => self.max_processes,
            Bound::MaxCpuSeconds => self.max_cpu_seconds,
            Bound::MaxWallSeconds => self.max_wall_seconds,
        }
    }

    pub fn set(&mut self, b: Bound, v: u64) {
        match b {
            Bound::MaxResponseBytes => self.max_response_bytes = v,
            Bound::MaxMemory => self.max_memory = v,
            Bound::MaxProcesses => self.max_processes = v,
            Bound::MaxCpuSeconds => self.max_cpu_seconds = v,
            Bound::MaxWallSeconds => self.max_wall_seconds = v,
        }
    }

    /// Lowers each bound to `stated` where that is lower.
    pub fn narrow(&mut self, stated: &StatedBounds) {
        for b in Bound::ALL {
            if let Some(s) = stated.get(b) {
                if s.value < self.get(b) {
                    self.set(b, s.value);
                }
            }
        }
    }
}

/// A bound one layer states, with where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatedBound {
    pub value: u64,
    pub line: usize,
    pub column: usize,
}

/// The bounds one layer states, by [`Bound`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatedBounds(pub [Option<StatedBound>; 5]);

impl StatedBounds {
    pub fn get(&self, b: Bound) -> Option<StatedBound> {
        self.0[b as usize]
    }
}

/// An address range the egress proxy may reach, for the named hosts only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRange {
    pub cidr: ipnet::IpNet,
    pub hosts: Vec<String>,
}

/// A layer's `applies_to` condition, over `identity` and `env` only.
#[derive(Debug, Clone)]
pub struct Guard {
    pub source: String,
    pub line: usize,
    pub column: usize,
    pub compiled: Compiled,
}

/// One layer: one inclusion of one file.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The file as it is shown (relative to the top file's name), or `cordon:NAME`.
    pub origin: Arc<str>,
    /// When absent the layer applies to every identity.
    pub applies_to: Option<Guard>,
    pub surfaces: BTreeMap<Surface, SurfaceRules>,
    pub bounds: StatedBounds,
}

/// Later layers (never the root) indexed by an `applies_to` of the form
/// `identity.namespace == "lit" && ...`.
#[derive(Debug, Clone, Default)]
pub struct LayerIndex {
    pub always: Vec<u32>,
    pub by_namespace: HashMap<String, Vec<u32>>,
}

/// A loaded policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub rules: Vec<Rule>,
    /// In order; `layers[0]` is the root.
    pub layers: Vec<Layer>,
    pub layer_index: LayerIndex,
    /// The root layer's bounds (stated, else the default): no identity ever
    /// gets more. [`Policy::bounds_for`] gives one identity's bounds.
    pub bounds: Bounds,
    /// Ranges the egress proxy may reach; only the root may state them.
    pub allow_ranges: Vec<AllowRange>,
    /// Warnings found at load (errors refuse the load).
    pub warnings: Diagnostics,
    /// SHA-256 over every layer's name and text in layer order, hex. Two
    /// loads with the same digest decide alike; a warm sandbox is reattached
    /// only under the policy it was created under.
    pub digest: String,
}

/// The most rules one policy may hold, counted per inclusion after `extends`
/// is expanded.
pub const MAX_RULES: usize = 10_000;
/// The most layers (inclusions) one policy may expand to.
pub const MAX_LAYERS: usize = 256;
/// The largest policy file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl Policy {
    /// Loads and checks a policy file and every layer it extends. Files it
    /// extends must lie beneath this file's directory.
    pub fn load_file(path: &Path) -> Result<Policy, Diagnostics> {
        let name = path.display().to_string();
        let fail = |message: String, help: &str| {
            Diagnostics(vec![Diagnostic {
                file: name.clone(),
                line: 1,
                column: 1,
                width: 1,
                rule: None,
                message,
                help: Some(help.into()),
                source_line: String::new(),
                severity: Severity::Error,
            }])
        };
        let (resolver, unit) = FsResolver::top(path).map_err(|(m, h)| fail(m, &h))?;
        Policy::assemble(unit, &resolver)
    }

    /// The built-in `cordon:default`: what applies when no policy is named.
    pub fn load_default() -> Result<Policy, Diagnostics> {
        let text = resolve::builtin("default")
            .map(|u| u.text)
            .unwrap_or_default();
        Policy::load_str(resolve::DEFAULT_NAME, &text)
    }

    /// Loads and checks a policy from text; `name` is used in diagnostics.
    /// It may extend only `cordon:NAME` layers.
    pub fn load_str(name: &str, text: &str) -> Result<Policy, Diagnostics> {
        Policy::load_with(name, text, &NoFiles)
    }

    /// Loads a policy from text, reading the files it extends through
    /// `resolver` (e.g. [`resolve::MemoryFiles`] in tests).
    pub fn load_with(
        name: &str,
        text: &str,
        resolver: &dyn Resolve,
    ) -> Result<Policy, Diagnostics> {
        Policy::assemble(
            Unit {
                name: Arc::from(name),
                key: name.to_string(),
                text: text.to_string(),
            },
            resolver,
        )
    }

    fn assemble(top: Unit, resolver: &dyn Resolve) -> Result<Policy, Diagnostics> {
        tracing::debug!(target: "cordon::load", policy = %top.name, "loading a policy");
        let mut a = Assembler {
            resolver,
            rules: Vec::new(),
            layers: Vec::new(),
            allow_ranges: Vec::new(),
            diags: Vec::new(),
            root_bounds: None,
            inclusions: 0,
            digest: Sha256::new(),
        };
        let mut stack = Vec::new();
        a.include(top, &mut stack);
        // A file included along two paths reports its problems once.
        let mut seen = HashSet::new();
        let diags: Vec<Diagnostic> = a
            .diags
            .into_iter()
            .filter(|d| seen.insert(d.render()))
            .collect();
        let diags = Diagnostics(diags);
        if diags.has_errors() {
            return Err(diags);
        }
        let mut layer_index = LayerIndex::default();
        for (i, l) in a.layers.iter().enumerate().skip(1) {
            let i = i as u32;
            match l
                .applies_to
                .as_ref()
                .and_then(|g| expr::namespace_guard(&g.compiled.root))
            {
                Some(ns) => layer_index
                    .by_namespace
                    .entry(ns.to_string())
                    .or_default()
                    .push(i),
                None => layer_index.always.push(i),
            }
        }
        let mut bounds = Bounds::DEFAULT;
        if let Some(root) = a.layers.first() {
            for b in Bound::ALL {
                if let Some(s) = root.bounds.get(b) {
                    bounds.set(b, s.value);
                }
            }
        }
        Ok(Policy {
            rules: a.rules,
            layers: a.layers,
            layer_index,
            bounds,
            allow_ranges: a.allow_ranges,
            warnings: diags,
            digest: a
                .digest
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
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
        let layers = match self.layers.len() {
            1 => String::new(),
            n => format!(" in {n} layers"),
        };
        format!("{} rules ({}){layers}", self.rules.len(), parts.join(", "))
    }
}

struct Assembler<'r> {
    resolver: &'r dyn Resolve,
    rules: Vec<Rule>,
    layers: Vec<Layer>,
    allow_ranges: Vec<AllowRange>,
    diags: Vec<Diagnostic>,
    /// The root's bounds with where each came from (None: the default).
    root_bounds: Option<(Arc<str>, StatedBounds)>,
    inclusions: usize,
    digest: Sha256,
}

impl Assembler<'_> {
    fn err(&mut self, unit: &Unit, pos: Pos, width: usize, msg: String, help: Option<String>) {
        let map = SourceMap {
            name: &unit.name,
            text: &unit.text,
        };
        let off = map.offset_of(pos.0, pos.1);
        self.diags
            .push(map.at(off, off + width.max(1), None, msg, help));
    }

    /// Expands `unit` depth-first: its parents in the order listed, then
    /// the unit itself as a layer. `stack` holds the chain that led here.
    fn include(&mut self, unit: Unit, stack: &mut Vec<(String, Arc<str>)>) {
        self.inclusions += 1;
        let parsed = parse::parse_file(&unit.name, &unit.text, &mut self.diags);
        stack.push((unit.key.clone(), unit.name.clone()));
        for (spec, pos, width) in &parsed.extends {
            if self.inclusions >= MAX_LAYERS {
                self.err(
                    &unit,
                    *pos,
                    *width,
                    format!("`extends` expands to more than {MAX_LAYERS} layers"),
                    Some("a file reached along several paths counts once per path; flatten the imports".into()),
                );
                break;
            }
            let next = match spec.strip_prefix("cordon:") {
                Some(builtin) => resolve::builtin(builtin),
                None => self.resolver.resolve(&unit, spec),
            };
            let next = match next {
                Ok(n) => n,
                Err((msg, help)) => {
                    self.err(&unit, *pos, *width, msg, Some(help));
                    continue;
                }
            };
            if let Some(at) = stack.iter().position(|(k, _)| *k == next.key) {
                let mut chain: Vec<String> =
                    stack[at..].iter().map(|(_, n)| n.to_string()).collect();
                chain.push(next.name.to_string());
                self.err(
                    &unit,
                    *pos,
                    *width,
                    format!("import cycle: {}", chain.join(" -> ")),
                    Some(
                        "remove one of these `extends` entries; a layer cannot extend itself"
                            .into(),
                    ),
                );
                continue;
            }
            self.include(next, stack);
        }
        stack.pop();
        self.push_layer(&unit, parsed);
    }

    fn push_layer(&mut self, unit: &Unit, parsed: ParsedFile) {
        // Length-prefixed, so no two sequences of layers hash alike.
        for part in [unit.name.as_bytes(), unit.text.as_bytes()] {
            self.digest.update((part.len() as u64).to_le_bytes());
            self.digest.update(part);
        }
        let root = self.layers.is_empty();
        let index = self.layers.len() as u32;
        if root {
            if let Some(g) = &parsed.applies_to {
                self.err(
                    unit,
                    (g.line, g.column),
                    g.source.chars().count(),
                    "the root layer cannot carry `applies_to`: it defines what can be allowed for everyone".into(),
                    Some("move the tenant's rules into a layer that extends the root".into()),
                );
            }
            self.allow_ranges
                .extend(parsed.allow_ranges.iter().map(|(r, _)| r.clone()));
            self.root_bounds = Some((unit.name.clone(), parsed.bounds));
        } else {
            let root_name = self.layers[0].origin.clone();
            for (_, pos) in &parsed.allow_ranges {
                self.err(
                    unit,
                    *pos,
                    1,
                    format!("`allow_ranges` widens what egress may reach; only the root layer ({root_name}) may state it"),
                    Some("move the range into the root layer, or drop it".into()),
                );
            }
            let (root_file, root_stated) = self
                .root_bounds
                .clone()
                .unwrap_or_else(|| (root_name.clone(), StatedBounds::default()));
            for b in Bound::ALL {
                let Some(here) = parsed.bounds.get(b) else {
                    continue;
                };
                let (ceiling, whence) = match root_stated.get(b) {
                    Some(r) => (
                        r.value,
                        format!(
                            "the root layer sets {} at {root_file}:{}:{}",
                            b.show(r.value),
                            r.line,
                            r.column
                        ),
                    ),
                    None => {
                        let d = Bounds::DEFAULT.get(b);
                        (d, format!("the root layer ({root_file}) does not state it, so it is the built-in default of {}", b.show(d)))
                    }
                };
                if here.value > ceiling {
                    self.err(
                        unit,
                        (here.line, here.column),
                        b.show(here.value).len(),
                        format!(
                            "`{}` of {} is higher than the root allows: {whence}",
                            b.key(),
                            b.show(here.value)
                        ),
                        Some(format!(
                            "a later layer may only lower a bound; state at most {}",
                            b.show(ceiling)
                        )),
                    );
                }
            }
        }
        if self.rules.len() + parsed.rules.len() > MAX_RULES {
            self.err(
                unit,
                parsed.start,
                1,
                format!("the policy expands to more than {MAX_RULES} rules, counted per inclusion"),
                Some("a file reached along several paths counts once per path".into()),
            );
            return;
        }
        let mut surfaces: BTreeMap<Surface, SurfaceRules> = BTreeMap::new();
        for s in &parsed.surfaces {
            surfaces.entry(*s).or_default().allow_stated = parsed.allow_stated.contains(s);
        }
        for mut rule in parsed.rules {
            if let Some(msg) = crate::plan::lint(&rule) {
                let map = SourceMap {
                    name: &unit.name,
                    text: &unit.text,
                };
                let off = map.offset_of(rule.line, rule.column);
                let mut d = map.at(
                    off,
                    off + rule.source.chars().count(),
                    Some(&rule.name),
                    msg,
                    Some("see \"What the kernel can hold\" in docs/policy.md; state the condition on facts the kernel sees (`path`, `mode`, `command`) or accept this meaning".into()),
                );
                d.severity = Severity::Warning;
                self.diags.push(d);
            }
            let id = RuleId(self.rules.len() as u32);
            rule.layer = index;
            let entry = surfaces.entry(rule.surface).or_default();
            match rule.effect {
                Effect::Allow => entry.allow.add(id, &rule.compiled),
                Effect::Deny => entry.deny.add(id, &rule.compiled),
            }
            self.rules.push(rule);
        }
        self.layers.push(Layer {
            origin: unit.name.clone(),
            applies_to: parsed.applies_to,
            surfaces,
            bounds: parsed.bounds,
        });
    }
}
