//! What a sandbox may reach: the level a backend can confine to, and the
//! allowlist a spec states.
//!
//! An allowlist entry is `host[:port]` or `*.domain[:port]`. The port
//! defaults to 443. `*.` matches subdomains at any depth and never the apex.
//! Hosts are canonicalised like policy facts ([`cordon_policy::canon::host`]:
//! lowercase, IDNA, no trailing dot), so an entry and a rule compare the same
//! spelling. IP literals, wildcards anywhere but a leading `*.`, userinfo,
//! schemes and paths are refused when the entry is read.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use cordon_policy::canon::{self, CanonError};

/// How far a backend can confine a sandbox's network. Declared by the
/// backend; a backend that declares nothing is [`Egress::Unrestricted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Egress {
    /// Deny by default, allow the named hosts.
    Allowlist,
    /// All or nothing; cordon only ever asks for nothing.
    Closed,
    /// Cannot confine egress at all. Refused for every spec.
    Unrestricted,
}

impl Egress {
    pub fn as_str(self) -> &'static str {
        match self {
            Egress::Allowlist => "allowlist",
            Egress::Closed => "closed",
            Egress::Unrestricted => "unrestricted",
        }
    }
}

impl fmt::Display for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of a live sandbox's egress allowlist (`cordon sandbox egress`):
/// a new *generation*, decided for every new connection and for every open
/// one (closed when the new list no longer admits it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressChange {
    /// This allowlist from now on.
    Replace(Vec<EgressEntry>),
    /// The replacement did not load (why): egress is closed — every request
    /// refused, saying so, and every open connection closed — until a
    /// change that loads. Never the old, wider list left in place.
    Close(String),
}

/// The port an entry without one means.
pub const DEFAULT_PORT: u16 = 443;

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostPattern {
    /// Exactly this canonical host.
    Exact(String),
    /// Any subdomain of this canonical domain, at any depth; never the
    /// domain itself.
    Subdomains(String),
}

/// One canonical allowlist entry. Only [`EgressEntry::parse`] makes one, so
/// an entry that exists is well formed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EgressEntry {
    host: HostPattern,
    port: u16,
}

/// An allowlist entry that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressEntryError {
    #[error("egress entry `{raw}` is refused: {why}; write `host[:port]` or `*.domain[:port]`, like `api.example.com` or `*.pythonhosted.org:443`")]
    Shape { raw: String, why: &'static str },
    #[error("egress entry `{raw}` is refused: it is an IP address; name the host (`api.example.com`), because the policy and the egress proxy decide on names and resolve them themselves")]
    IpLiteral { raw: String },
    #[error("egress entry `{raw}` is refused: port `{port}` is not a number from 1 to 65535; write it like `api.example.com:8443`, or leave it out for 443")]
    Port { raw: String, port: String },
    #[error("egress entry `{raw}` is refused: `*.{domain}` would match every name under a top-level domain; name a registrable domain, like `*.example.com`")]
    WildcardTooWide { raw: String, domain: String },
    #[error("egress entry `{raw}` is refused: {source}")]
    Host { raw: String, source: CanonError },
}

impl EgressEntry {
    /// Reads a whole allowlist given at run time (`cordon sandbox egress`,
    /// `cordon serve`'s `POST /v1/sandboxes/egress`), each entry trimmed
    /// and read as [`EgressEntry::parse`] reads it, none twice; else why
    /// not, for the first entry that does not load.
    pub fn parse_list<S: AsRef<str>>(raw: &[S]) -> Result<Vec<EgressEntry>, String> {
        let mut list: Vec<EgressEntry> = Vec::with_capacity(raw.len());
        for r in raw {
            let r = r.as_ref().trim();
            let e = EgressEntry::parse(r).map_err(|e| e.to_string())?;
            if list.contains(&e) {
                return Err(format!("egress entry `{r}` is listed twice; name it once"));
            }
            list.push(e);
        }
        Ok(list)
    }

    /// Reads and canonicalises one entry.
    pub fn parse(raw: &str) -> Result<EgressEntry, EgressEntryError> {
        let shape = |why| EgressEntryError::Shape {
            raw: raw.to_string(),
            why,
        };
        if raw.is_empty() {
            return Err(shape("it is empty"));
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(shape("it holds spaces or control characters"));
        }
        if raw.contains("://") {
            return Err(shape("it holds a scheme; the entry is a host, not a URL"));
        }
        if raw.contains('@') {
            return Err(shape("it holds userinfo (`@`)"));
        }
        if raw.contains(['/', '?', '#', '\\']) {
            return Err(shape("it holds a path, query or fragment"));
        }
        // IP literals in every spelling the host could be written in:
        // bracketed IPv6 (with or without a port), bare IPv6, IPv4.
        let ip_err = || EgressEntryError::IpLiteral {
            raw: raw.to_string(),
        };
        if raw.starts_with('[') || raw.parse::<IpAddr>().is_ok() {
            return Err(ip_err());
        }
        if raw.matches(':').count() > 1 {
            return Err(shape("it holds more than one `:`"));
        }
        let (host, port) = match raw.rsplit_once(':') {
            Some((h, p)) => {
                let port_err = || EgressEntryError::Port {
                    raw: raw.to_string(),
                    port: p.to_string(),
                };
                // `u16::from_str` accepts a leading `+`; a port is digits only.
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(port_err());
                }
                match p.parse::<u16>() {
                    Ok(0) | Err(_) => return Err(port_err()),
                    Ok(n) => (h, n),
                }
            }
            None => (raw, DEFAULT_PORT),
        };
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') || (!wildcard && host.starts_with('*')) {
            return Err(shape(
                "`*` may only stand as the whole first label (`*.domain`)",
            ));
        }
        if name.is_empty() {
            return Err(shape("it names no host"));
        }
        let canonical = canon::host(name).map_err(|source| EgressEntryError::Host {
            raw: raw.to_string(),
            source,
        })?;
        // `canon::host` normalises IP literals rather than refusing them.
        if canonical.parse::<IpAddr>().is_ok() {
            return Err(ip_err());
        }
        let host = if wildcard {
            if !canonical.contains('.') {
                return Err(EgressEntryError::WildcardTooWide {
                    raw: raw.to_string(),
                    domain: canonical,
                });
            }
            HostPattern::Subdomains(canonical)
        } else {
            HostPattern::Exact(canonical)
        };
        Ok(EgressEntry { host, port })
    }

    pub fn host(&self) -> &HostPattern {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The single host this entry names; `None` for a wildcard.
    pub fn exact_host(&self) -> Option<&str> {
        match &self.host {
            HostPattern::Exact(h) => Some(h),
            HostPattern::Subdomains(_) => None,
        }
    }

    /// Whether a connection to a canonical `host` and `port` is named by
    /// this entry.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        match &self.host {
            HostPattern::Exact(h) => host == h,
            HostPattern::Subdomains(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.')),
        }
    }
}

impl FromStr for EgressEntry {
    type Err = EgressEntryError;

    fn from_str(s: &str) -> Result<EgressEntry, EgressEntryError> {
        EgressEntry::parse(s)
    }
}

impl fmt::Display for EgressEntry {
    /// The canonical spelling, port always written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(h) => write!(f, "{h}:{}", self.port),
            HostPattern::Subdomains(d) => write!(f, "*.{d}:{}", self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        match EgressEntry::parse(raw) {
            Ok(e) => e.to_string(),
            Err(e) => panic!("{raw:?} refused: {e}"),
        }
    }

    #[test]
    fn entries_are_canonicalised() {
        assert_eq!(ok("API.Example.COM"), "api.example.com:443");
        assert_eq!(ok("api.example.com."), "api.example.com:443");
        assert_eq!(ok("api.example.com:8443"), "api.example.com:8443");
        assert_eq!(ok("*.PyPI.org"), "*.pypi.org:443");
        assert_eq!(ok("bücher.example"), "xn--bcher-kva.example:443");
    }

    #[test]
    fn wildcards_match_subdomains_at_any_depth_and_never_the_apex() {
        let e = EgressEntry::parse("*.example.com").unwrap();
        assert!(e.matches("a.example.com", 443));
        assert!(e.matches("a.b.c.example.com", 443));
        assert!(!e.matches("example.com", 443));
        assert!(!e.matches("badexample.com", 443));
        assert!(!e.matches("a.example.com.evil.org", 443));
        assert!(!e.matches("a.example.com", 80));
        // A host that is not canonical (leading dot) is no subdomain either.
        assert!(!e.matches(".example.com", 443));
        let exact = EgressEntry::parse("example.com:80").unwrap();
        assert!(exact.matches("example.com", 80));
        assert!(!exact.matches("example.com", 443));
        assert!(!exact.matches("a.example.com", 80));
    }

    #[test]
    fn a_list_is_read_whole_or_refused_at_its_first_bad_or_repeated_entry() {
        let list = EgressEntry::parse_list(&[" ok.test:8080 ", "*.Example.com"]).unwrap();
        let shown: Vec<String> = list.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["ok.test:8080", "*.example.com:443"]);
        assert!(EgressEntry::parse_list::<&str>(&[]).unwrap().is_empty());
        let twice = EgressEntry::parse_list(&["a.test", "A.test:443"]).unwrap_err();
        assert!(twice.contains("`A.test:443` is listed twice"), "{twice}");
        let bad = EgressEntry::parse_list(&["a.test", "10.0.0.1", ""]).unwrap_err();
        assert!(
            bad.contains("`10.0.0.1`") && bad.contains("IP address"),
            "{bad}"
        );
    }
}
