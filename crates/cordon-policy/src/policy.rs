//! A loaded policy: a sequence of layers, the first (the root) defining all
//! that can ever be allowed and every later one only narrowing. Loading
//! (`load.rs`) expands `extends` depth-first, compiles and checks every
//! rule, refuses any layer that would widen, and builds the indexes a
//! decision uses. Load is the only time a rule is parsed or checked; a
//! decision never compiles anything. The parts a policy is made of live in
//! `model.rs` and are re-exported here.

use crate::diag::Diagnostics;
use crate::vocab::Surface;

pub use crate::model::{
    AllowRange, Bound, Bounds, Effect, Guard, Inspection, Layer, LayerIndex, Rule, RuleId,
    RuleIndex, StatedBound, StatedBounds, SurfaceRules, MAX_FILE_BYTES, MAX_LAYERS, MAX_RULES,
};

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
    /// Hosts the egress proxy terminates TLS for, the root layer's first,
    /// then each later layer's in order. See [`Policy::inspection`].
    pub inspections: Vec<Inspection>,
    /// Warnings found at load (errors refuse the load).
    pub warnings: Diagnostics,
    /// SHA-256 over every layer's name and text in layer order, hex. Two
    /// loads with the same digest decide alike; a warm sandbox is reattached
    /// only under the policy it was created under.
    pub digest: String,
}

impl Policy {
    /// A rule by id.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.0 as usize]
    }

    /// The entry inspecting `host` (canonical), if any; an exact entry wins
    /// over a wildcard; with several, the root's `ca` entry.
    ///
    /// Among wildcards the longer suffix wins after that, then the first
    /// listed. Only the chosen entry's `roots_pem` is trusted for `host`.
    pub fn inspection(&self, host: &str) -> Option<&Inspection> {
        self.inspections
            .iter()
            .enumerate()
            .filter(|(_, i)| i.matches(host))
            .min_by_key(|(n, i)| {
                (
                    i.is_wildcard(),
                    i.roots_pem.is_none(),
                    std::cmp::Reverse(i.host.len()),
                    *n,
                )
            })
            .map(|(_, i)| i)
    }

    /// Whether the policy names any host to inspect.
    pub fn inspects_any(&self) -> bool {
        !self.inspections.is_empty()
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
