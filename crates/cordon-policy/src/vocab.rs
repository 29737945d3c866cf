//! The one vocabulary: the base every surface shares, and what each surface adds.
//!
//! A subject is spelled `identity` everywhere with one declared type, so an
//! expression over the base type-checks in every surface and means the same
//! thing there. Each surface extends the base with its own facts; nothing is
//! redefined per surface.

use std::fmt;

/// The five policy surfaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Surface {
    /// Network connections and requests leaving a sandbox.
    Egress,
    /// Processes a sandbox starts.
    Compute,
    /// Filesystem accesses.
    Storage,
    /// Secrets handed into a sandbox.
    Secret,
    /// Connections into a sandbox from the host: a port a workload
    /// listens on, forwarded to a caller.
    Ingress,
}

impl Surface {
    /// Every surface, in file order.
    pub const ALL: [Surface; 5] = [
        Surface::Egress,
        Surface::Compute,
        Surface::Storage,
        Surface::Secret,
        Surface::Ingress,
    ];

    /// The key this surface has in a policy file and a test file.
    pub fn key(self) -> &'static str {
        match self {
            Surface::Egress => "egress",
            Surface::Compute => "compute",
            Surface::Storage => "storage",
            Surface::Secret => "secret",
            Surface::Ingress => "ingress",
        }
    }

    /// Parses a surface key.
    pub fn from_key(s: &str) -> Option<Surface> {
        Surface::ALL.into_iter().find(|x| x.key() == s)
    }
}

impl fmt::Display for Surface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The static type of a value in a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Timestamp,
    Duration,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    /// Only the element type of an empty list literal: unifies with anything.
    Dyn,
}

impl Ty {
    /// Whether a value of type `self` can be compared with one of `other`.
    pub fn compatible(&self, other: &Ty) -> bool {
        match (self, other) {
            (Ty::Dyn, _) | (_, Ty::Dyn) => true,
            (Ty::List(a), Ty::List(b)) => a.compatible(b),
            (Ty::Map(ka, va), Ty::Map(kb, vb)) => ka.compatible(kb) && va.compatible(vb),
            (a, b) => a == b,
        }
    }

    /// The more specific of two compatible types.
    pub fn unify(&self, other: &Ty) -> Ty {
        match (self, other) {
            (Ty::Dyn, t) | (t, Ty::Dyn) => t.clone(),
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.unify(b))),
            (Ty::Map(ka, va), Ty::Map(kb, vb)) => {
                Ty::Map(Box::new(ka.unify(kb)), Box::new(va.unify(vb)))
            }
            (a, _) => a.clone(),
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::String => f.write_str("string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::Null => f.write_str("null"),
            Ty::Timestamp => f.write_str("timestamp"),
            Ty::Duration => f.write_str("duration"),
            Ty::List(t) => write!(f, "list({t})"),
            Ty::Map(k, v) => write!(f, "map({k}, {v})"),
            Ty::Dyn => f.write_str("dyn"),
        }
    }
}

/// A fact a rule can read. Member paths (`identity.namespace`) are resolved to
/// a fact when a rule loads, so evaluation never walks a map of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fact {
    IdentityNamespace,
    IdentityName,
    IdentityAttested,
    IdentityLabels,
    EnvName,
    Now,
    Url,
    Scheme,
    Host,
    Port,
    Method,
    HttpPath,
    Ip,
    Query,
    Headers,
    Command,
    Args,
    Cpu,
    Memory,
    Path,
    Mode,
    Bytes,
    SecretName,
    WorkDir,
    DestinationHost,
    DestinationMethod,
    DestinationPath,
    DestinationHeader,
    CallerNamespace,
    CallerName,
    CallerAttested,
    Listen,
}

impl Fact {
    /// The spelling a rule author writes.
    pub fn spelling(self) -> &'static str {
        match self {
            Fact::IdentityNamespace => "identity.namespace",
            Fact::IdentityName => "identity.name",
            Fact::IdentityAttested => "identity.attested",
            Fact::IdentityLabels => "identity.labels",
            Fact::EnvName => "env.name",
            Fact::Now => "now",
            Fact::Url => "url",
            Fact::Scheme => "scheme",
            Fact::Host => "host",
            Fact::Port => "port",
            Fact::Method => "method",
            Fact::HttpPath => "path",
            Fact::Ip => "ip",
            Fact::Query => "query",
            Fact::Headers => "headers",
            Fact::Command => "command",
            Fact::Args => "args",
            Fact::Cpu => "cpu",
            Fact::Memory => "memory",
            Fact::Path => "path",
            Fact::Mode => "mode",
            Fact::Bytes => "bytes",
            Fact::SecretName => "secret.name",
            Fact::WorkDir => "work_dir",
            Fact::DestinationHost => "destination.host",
            Fact::DestinationMethod => "destination.method",
            Fact::DestinationPath => "destination.path",
            Fact::DestinationHeader => "destination.header",
            Fact::CallerNamespace => "caller.namespace",
            Fact::CallerName => "caller.name",
            Fact::CallerAttested => "caller.attested",
            Fact::Listen => "listen",
        }
    }

    /// The fact's declared type.
    pub fn ty(self) -> Ty {
        match self {
            Fact::IdentityAttested | Fact::CallerAttested => Ty::Bool,
            Fact::IdentityLabels | Fact::Headers => {
                Ty::Map(Box::new(Ty::String), Box::new(Ty::String))
            }
            Fact::Query => Ty::Map(
                Box::new(Ty::String),
                Box::new(Ty::List(Box::new(Ty::String))),
            ),
            Fact::Now => Ty::Timestamp,
            Fact::Port | Fact::Cpu | Fact::Memory | Fact::Bytes => Ty::Int,
            Fact::Args => Ty::List(Box::new(Ty::String)),
            _ => Ty::String,
        }
    }

    /// A bit for sets of facts (unknowns, facts a rule reads).
    pub fn bit(self) -> u32 {
        1u32 << (self as u32)
    }

    /// Every fact, for turning a bit set back into names.
    pub const ALL: [Fact; 32] = [
        Fact::IdentityNamespace,
        Fact::IdentityName,
        Fact::IdentityAttested,
        Fact::IdentityLabels,
        Fact::EnvName,
        Fact::Now,
        Fact::Url,
        Fact::Scheme,
        Fact::Host,
        Fact::Port,
        Fact::Method,
        Fact::HttpPath,
        Fact::Ip,
        Fact::Query,
        Fact::Headers,
        Fact::Command,
        Fact::Args,
        Fact::Cpu,
        Fact::Memory,
        Fact::Path,
        Fact::Mode,
        Fact::Bytes,
        Fact::SecretName,
        Fact::WorkDir,
        Fact::DestinationHost,
        Fact::DestinationMethod,
        Fact::DestinationPath,
        Fact::DestinationHeader,
        Fact::CallerNamespace,
        Fact::CallerName,
        Fact::CallerAttested,
        Fact::Listen,
    ];

    /// The facts in a bit set, in declaration order.
    pub fn from_bits(bits: u32) -> Vec<Fact> {
        Fact::ALL
            .into_iter()
            .filter(|f| bits & f.bit() != 0)
            .collect()
    }
}

/// The fields of `identity`.
pub const IDENTITY_FIELDS: &[(&str, Fact)] = &[
    ("namespace", Fact::IdentityNamespace),
    ("name", Fact::IdentityName),
    ("attested", Fact::IdentityAttested),
    ("labels", Fact::IdentityLabels),
];

/// The fields of `env`.
pub const ENV_FIELDS: &[(&str, Fact)] = &[("name", Fact::EnvName)];

/// The fields of `secret` (secret surface only).
pub const SECRET_FIELDS: &[(&str, Fact)] = &[("name", Fact::SecretName)];

/// The fields of `destination` (secret surface only): where a brokered
/// secret is being substituted. Unknown where the secret is granted.
pub const DESTINATION_FIELDS: &[(&str, Fact)] = &[
    ("host", Fact::DestinationHost),
    ("method", Fact::DestinationMethod),
    ("path", Fact::DestinationPath),
    ("header", Fact::DestinationHeader),
];

/// The fields of `caller` (ingress surface only): who asks for a port —
/// the credential's identity on `cordon serve`, the host operator's on the
/// command line.
pub const CALLER_FIELDS: &[(&str, Fact)] = &[
    ("namespace", Fact::CallerNamespace),
    ("name", Fact::CallerName),
    ("attested", Fact::CallerAttested),
];

/// The top-level names a surface adds to the base (`identity`, `env`, `now`).
pub fn surface_vars(surface: Surface) -> &'static [(&'static str, Fact)] {
    match surface {
        Surface::Egress => &[
            ("url", Fact::Url),
            ("scheme", Fact::Scheme),
            ("host", Fact::Host),
            ("port", Fact::Port),
            ("method", Fact::Method),
            ("path", Fact::HttpPath),
            ("ip", Fact::Ip),
            ("query", Fact::Query),
            ("headers", Fact::Headers),
        ],
        Surface::Compute => &[
            ("command", Fact::Command),
            ("args", Fact::Args),
            ("cpu", Fact::Cpu),
            ("memory", Fact::Memory),
            ("work_dir", Fact::WorkDir),
        ],
        Surface::Storage => &[
            ("path", Fact::Path),
            ("mode", Fact::Mode),
            ("bytes", Fact::Bytes),
            ("work_dir", Fact::WorkDir),
        ],
        Surface::Secret => &[],
        Surface::Ingress => &[("port", Fact::Port), ("listen", Fact::Listen)],
    }
}

/// Every top-level name visible in a surface, for "did you mean".
pub fn names_in(surface: Surface) -> Vec<&'static str> {
    let mut v = vec!["identity", "env", "now"];
    if surface == Surface::Secret {
        v.push("secret");
        v.push("destination");
    }
    if surface == Surface::Ingress {
        v.push("caller");
    }
    v.extend(surface_vars(surface).iter().map(|(n, _)| *n));
    v
}

/// The help for a key that is not among `known`: the nearest one, or the
/// whole list ("`what` takes ...").
pub fn unknown_key_help(word: &str, known: &[&str], what: &str) -> String {
    match did_you_mean(word, known.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!(
            "{what} takes {}",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The longest word [`did_you_mean`] looks at.
const MAX_GUESSED: usize = 64;

/// The closest candidate to `word` within a small edit distance.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    // No name cordon suggests is this long, and the distance table is
    // word x candidate cells: a hostile megabyte-long value (a spec's
    // `min_isolation`, a key) must not cost a 100 MB table per candidate.
    if word.len() > MAX_GUESSED {
        return None;
    }
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    // Optimal string alignment: a transposition (`idnetity`) is one edit.
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guess_is_made_for_a_near_miss_and_never_for_a_huge_word() {
        assert_eq!(
            did_you_mean("idnetity", ["identity", "env"]),
            Some("identity")
        );
        let huge = "identity".repeat(MAX_GUESSED);
        assert_eq!(did_you_mean(&huge, ["identity"]), None);
        let just_over = format!("{}x", "i".repeat(MAX_GUESSED));
        assert_eq!(
            did_you_mean(&just_over, [just_over.as_str()]),
            None,
            "not even itself"
        );
    }
}
