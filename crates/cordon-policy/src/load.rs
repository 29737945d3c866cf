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
    AllowRange, Bound, Bounds, Effect, Inspection, Layer, LayerIndex, Rule, RuleId, StatedBounds,
    SurfaceRules, MAX_LAYERS, MAX_RULES,
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
            inspections: Vec::new(),
            diags: Vec::new(),
            root_bounds: None,
            root_allows: Vec::new(),
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
            inspections: a.inspections,
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
    inspections: Vec<Inspection>,
    diags: Vec<Diagnostic>,
    /// The root's bounds with where each came from (None: the default).
    root_bounds: Option<(Arc<str>, StatedBounds)>,
    /// The surfaces the root layer states an allow rule on (a later
    /// layer's allow elsewhere can never take effect).
    root_allows: Vec<Surface>,
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

    /// A layer's `egress.inspect`: the root may name `ca` files (read now,
    /// relative to the layer, and hashed into the digest: they change what
    /// the proxy trusts); a later layer may only add hosts.
    fn inspections(&mut self, unit: &Unit, root: bool, parsed: &ParsedFile) {
        for e in &parsed.inspect {
            let roots_pem = match &e.ca {
                None => None,
                Some((_, pos, width)) if !root => {
                    let root_name = self.layers[0].origin.clone();
                    self.err(
                        unit,
                        *pos,
                        *width,
                        format!("`ca` adds trusted roots for `{}`; only the root layer may add trust ({root_name} is the root)", e.host),
                        Some("drop `ca` here (the host is then inspected with the public roots and any `ca` the root names for it), or move the entry into the root layer".into()),
                    );
                    continue;
                }
                Some((spec, pos, width)) => {
                    let read = if spec.starts_with("cordon:") {
                        Err((
                            "a `ca` file cannot be a built-in layer".to_string(),
                            String::new(),
                        ))
                    } else {
                        self.resolver.resolve(unit, spec)
                    };
                    let text = match read {
                        Ok(u) => u.text,
                        Err((msg, _)) => {
                            self.err(
                                unit,
                                *pos,
                                *width,
                                format!("the `ca` file `{spec}` of `{}` cannot be read: {msg}", e.host),
                                Some("name a PEM file of CA certificates relative to this policy file, beneath the top policy file's directory".into()),
                            );
                            continue;
                        }
                    };
                    match pem_certificates(&text) {
                        Ok(pem) => {
                            for part in [spec.as_bytes(), text.as_bytes()] {
                                self.digest.update((part.len() as u64).to_le_bytes());
                                self.digest.update(part);
                            }
                            Some(Arc::<str>::from(pem))
                        }
                        Err(why) => {
                            self.err(
                                unit,
                                *pos,
                                *width,
                                format!("the `ca` file `{spec}` of `{}` is refused: {why}", e.host),
                                Some("put the CA's certificates in it, PEM-encoded: `-----BEGIN CERTIFICATE-----`, base64, `-----END CERTIFICATE-----`".into()),
                            );
                            continue;
                        }
                    }
                }
            };
            self.inspections.push(Inspection {
                host: e.host.clone(),
                roots_pem,
                file: unit.name.clone(),
                line: e.pos.0,
            });
        }
    }

    /// The warning on a later layer's allow rule that can never take
    /// effect: the root allows nothing on its surface, and a later layer
    /// only narrows. Said once per layer and surface, at its first allow.
    fn dead_allow(&self, unit: &Unit, rule: &Rule) -> Diagnostic {
        let root = self.layers[0].origin.clone();
        let surface = rule.surface.key();
        let map = SourceMap {
            name: &unit.name,
            text: &unit.text,
        };
        let off = map.offset_of(rule.line, rule.column);
        let help = if rule.surface == Surface::Egress && &*root == crate::resolve::DEFAULT_NAME {
            "extend `cordon:spec-egress` instead of `cordon:default` (the same policy, with egress to the hosts a sandbox's spec names, public addresses only); this layer then narrows it. Or make your own root: `cordon policy show-default` prints the default to start from".to_string()
        } else {
            format!("state the allow in the root layer ({root}), or make a root of your own that allows it; later layers can only narrow what the root allows (docs/policy.md, \"Layers\")")
        };
        let mut d = map.at(
            off,
            off + rule.source.chars().count(),
            Some(&rule.name),
            format!("this allow can never take effect: the root layer {root} allows nothing on the {surface} surface, and every later layer only narrows"),
            Some(help),
        );
        d.severity = Severity::Warning;
        d
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
        self.inspections(unit, root, &parsed);
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
        let mut dead_warned: Vec<Surface> = Vec::new();
        for mut rule in parsed.rules {
            // One lookup per rule: the root's allowed surfaces are kept as
            // it loads, not found again by a walk of every rule.
            if rule.effect == Effect::Allow {
                if root {
                    if !self.root_allows.contains(&rule.surface) {
                        self.root_allows.push(rule.surface);
                    }
                } else if !self.root_allows.contains(&rule.surface)
                    && !dead_warned.contains(&rule.surface)
                {
                    dead_warned.push(rule.surface);
                    let d = self.dead_allow(unit, &rule);
                    self.diags.push(d);
                }
            }
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

/// The certificates of a PEM file, each block as written, joined by
/// newlines: at least one `CERTIFICATE` block, every one of them closed and
/// its base64 decoding to something that starts as DER does (a SEQUENCE).
/// A private key in the file is refused: it has no place in a trust file.
/// This checks shape only; the proxy parses the certificates.
pub(crate) fn pem_certificates(text: &str) -> Result<String, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    if text.contains("PRIVATE KEY-----") {
        return Err("it holds a private key".into());
    }
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN) {
        let body_start = at + BEGIN.len();
        let Some(len) = rest[body_start..].find(END) else {
            return Err(format!("certificate {} has no `{END}`", blocks.len() + 1));
        };
        let body = &rest[body_start..body_start + len];
        match base64_decode(body) {
            Some(der) if der.first() == Some(&0x30) => {}
            _ => {
                return Err(format!(
                    "certificate {} is not base64 of a DER certificate",
                    blocks.len() + 1
                ))
            }
        }
        let end = body_start + len + END.len();
        blocks.push(&rest[at..end]);
        rest = &rest[end..];
    }
    if blocks.is_empty() {
        return Err(format!(
            "it holds no `{BEGIN}` block (is it empty, or DER rather than PEM?)"
        ));
    }
    let mut out = blocks.join("\n");
    out.push('\n');
    Ok(out)
}

/// Standard base64 with padding; white space between characters is
/// skipped. `None` when anything else is wrong.
fn base64_decode(body: &str) -> Option<Vec<u8>> {
    let chars: Vec<u8> = body.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if chars.is_empty() || !chars.len().is_multiple_of(4) {
        return None;
    }
    let pad = chars.iter().rev().take_while(|&&b| b == b'=').count();
    if pad > 2 || chars[..chars.len() - pad].contains(&b'=') {
        return None;
    }
    let val = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => 0,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(chars.len() / 4 * 3);
    for quad in chars.chunks(4) {
        let mut n = 0u32;
        for &c in quad {
            n = (n << 6) | val(c)?;
        }
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    out.truncate(out.len() - pad);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_strictly() {
        assert_eq!(base64_decode("MA==").unwrap(), [0x30]);
        assert_eq!(base64_decode("TWFu\n").unwrap(), b"Man");
        for bad in ["", "MA=", "M===", "MA=A", "M!==", "=MA="] {
            assert!(base64_decode(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_pem_file_needs_a_closed_decodable_certificate_and_no_key() {
        let one = "junk\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\ntrailer";
        assert_eq!(
            pem_certificates(one).unwrap(),
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        );
        assert!(pem_certificates("").unwrap_err().contains("no `-----BEGIN"));
        assert!(pem_certificates("-----BEGIN CERTIFICATE-----\nMIIB\n")
            .unwrap_err()
            .contains("no `-----END"));
        assert!(pem_certificates(
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----"
        )
        .unwrap_err()
        .contains("not base64"));
        let with_key =
            format!("{one}\n-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----");
        assert!(pem_certificates(&with_key)
            .unwrap_err()
            .contains("private key"));
    }
}
