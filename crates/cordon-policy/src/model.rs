//! The parts a loaded policy is made of — rules and their indexes, layers,
//! bounds — and the limits a load holds to. Below every module that builds
//! or reads a policy (`parse`, `resolve`, `load`, `policy`, `decide`,
//! `plan`), so none of them depends on another through these types.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
    MaxDisk,
}

impl Bound {
    pub const ALL: [Bound; 6] = [
        Bound::MaxResponseBytes,
        Bound::MaxMemory,
        Bound::MaxProcesses,
        Bound::MaxCpuSeconds,
        Bound::MaxWallSeconds,
        Bound::MaxDisk,
    ];

    /// The key a policy writes.
    pub fn key(self) -> &'static str {
        match self {
            Bound::MaxResponseBytes => "max_response_bytes",
            Bound::MaxMemory => "max_memory",
            Bound::MaxProcesses => "max_processes",
            Bound::MaxCpuSeconds => "max_cpu_seconds",
            Bound::MaxWallSeconds => "max_wall_seconds",
            Bound::MaxDisk => "max_disk",
        }
    }

    pub fn from_key(key: &str) -> Option<Bound> {
        Bound::ALL.into_iter().find(|b| b.key() == key)
    }

    /// A value as a policy would write it.
    pub fn show(self, v: u64) -> String {
        match self {
            Bound::MaxResponseBytes | Bound::MaxMemory | Bound::MaxDisk => {
                crate::canon::show_size(v)
            }
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
    /// What a sandbox may write, in bytes, to each writable filesystem it
    /// has (its work dir; see `docs/security.md`, "How disk is bounded").
    pub max_disk: u64,
}

impl Bounds {
    /// cordon's built-in defaults, used for any bound no policy states.
    pub const DEFAULT: Bounds = Bounds {
        max_response_bytes: 10 << 20,
        max_memory: 512 << 20,
        max_processes: 64,
        max_cpu_seconds: 60,
        max_wall_seconds: 300,
        max_disk: 1 << 30,
    };

    pub fn get(&self, b: Bound) -> u64 {
        match b {
            Bound::MaxResponseBytes => self.max_response_bytes,
            Bound::MaxMemory => self.max_memory,
            Bound::MaxProcesses => self.max_processes,
            Bound::MaxCpuSeconds => self.max_cpu_seconds,
            Bound::MaxWallSeconds => self.max_wall_seconds,
            Bound::MaxDisk => self.max_disk,
        }
    }

    pub fn set(&mut self, b: Bound, v: u64) {
        match b {
            Bound::MaxResponseBytes => self.max_response_bytes = v,
            Bound::MaxMemory => self.max_memory = v,
            Bound::MaxProcesses => self.max_processes = v,
            Bound::MaxCpuSeconds => self.max_cpu_seconds = v,
            Bound::MaxWallSeconds => self.max_wall_seconds = v,
            Bound::MaxDisk => self.max_disk = v,
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
pub struct StatedBounds(pub [Option<StatedBound>; 6]);

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

/// A host the egress proxy terminates TLS for (`egress.inspect`), so that
/// an `https` request to it shows `url`, `method`, `path`, `query` and
/// `headers` as a plain `http` one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// As written, canonical: an exact name (`api.example.com`) or
    /// `*.suffix`, which names every host strictly under the suffix.
    pub host: String,
    /// Extra CA certificates (PEM) the proxy trusts toward this entry's
    /// hosts only, besides the public roots. Only the root layer states them.
    pub roots_pem: Option<Arc<str>>,
    pub file: Arc<str>,
    pub line: usize,
}

impl Inspection {
    /// Whether this entry names the canonical `host`.
    pub fn matches(&self, host: &str) -> bool {
        match self.host.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.')),
            None => self.host == host,
        }
    }

    /// Whether this entry is a `*.suffix` wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.host.starts_with("*.")
    }
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

/// The most rules one policy may hold, counted per inclusion after `extends`
/// is expanded.
pub const MAX_RULES: usize = 10_000;
/// The most layers (inclusions) one policy may expand to.
pub const MAX_LAYERS: usize = 256;
/// The largest policy file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
