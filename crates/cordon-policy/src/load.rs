//! Loading: `extends` expanded depth-first into layers, every rule compiled
//! and checked, any layer that would widen refused, and the indexes a
//! decision uses built. Load is the only time a rule is parsed or checked.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::diag::{Diagnostic, Diagnostics, Severity, SourceMap};
use crate::expr;
use crate::model::{
    AllowRange, Bound, Bounds, Effect, Layer, LayerIndex, Rule, RuleId, StatedBounds, SurfaceRules,
    MAX_LAYERS, MAX_RULES,
};
use crate::parse::{self, ParsedFile, Pos};
use crate::plan;
use crate::policy::Policy;
use crate::resolve::{self, FsResolver, NoFiles, Resolve, Unit};
use crate::vocab::Surface;

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
            inspect: Vec::new(),
            warnings: diags,
            digest: a
                .digest
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        })
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
            if let Some(msg) = plan::lint(&rule) {
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
