//! Step 1 of every request: the target, parsed and normalised before
//! anything else happens. A name comes out lowercase ASCII (IDNA to
//! punycode) without a trailing dot; a number comes out only when it was
//! written as a canonical dotted quad or a bracketed IPv6 address. Every
//! other spelling of a number (decimal, octal, hex, short, full-width) is
//! refused here and never reaches a resolver as a name.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host of a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A canonical name (see [`cordon_policy::canon::host`]).
    Name(String),
    /// An address written as a literal.
    Ip(IpAddr),
}

impl Host {
    /// The host as the policy sees it (`host` in rules): the canonical name,
    /// or the address in its standard text form.
    pub fn fact(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
        }
    }
}

/// A host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a target was refused (answered `400`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("target `{raw}` is refused: {why}")]
pub struct TargetError {
    pub raw: String,
    pub why: String,
}

fn refuse(raw: &str, why: impl Into<String>) -> TargetError {
    // Shown in a response and a log line: bound it and keep it printable.
    let shown: String = raw
        .chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    TargetError {
        raw: shown,
        why: why.into(),
    }
}

/// The most bytes of an authority read.
const MAX_AUTHORITY: usize = 300;

/// Parses an authority (`host:port`, `[v6]:port`). `default_port` is used
/// when the port is absent; `None` means a port is required (CONNECT).
pub fn authority(raw: &str, default_port: Option<u16>) -> Result<Authority, TargetError> {
    if raw.is_empty() {
        return Err(refuse(raw, "it is empty"));
    }
    if raw.len() > MAX_AUTHORITY {
        return Err(refuse(raw, "it is longer than 300 bytes"));
    }
    if raw
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '\u{0}')
    {
        return Err(refuse(raw, "it holds spaces, NUL or control characters"));
    }
    if raw.contains('@') {
        return Err(refuse(
            raw,
            "it holds userinfo (`user@`); credentials in a target are refused",
        ));
    }
    if raw.contains('\\') {
        return Err(refuse(raw, "it holds a backslash"));
    }
    if raw.contains('%') {
        return Err(refuse(raw, "it holds `%` (an escape or an IPv6 zone)"));
    }
    if raw.contains(['/', '?', '#']) {
        return Err(refuse(raw, "it holds a path, query or fragment"));
    }
    let (host_part, port_part) = if let Some(rest) = raw.strip_prefix('[') {
        let (inner, after) = rest
            .split_once(']')
            .ok_or_else(|| refuse(raw, "its `[` is not closed"))?;
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| refuse(raw, "the bracketed part is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| refuse(raw, "something follows `]` that is not `:port`"))?,
            ),
        };
        (HostPart::V6(ip), port)
    } else {
        if raw.contains(['[', ']']) {
            return Err(refuse(raw, "it holds `[` or `]` outside an IPv6 literal"));
        }
        match raw.matches(':').count() {
            0 => (HostPart::Text(raw), None),
            1 => {
                let (h, p) = raw.split_once(':').unwrap_or((raw, ""));
                (HostPart::Text(h), Some(p))
            }
            _ => {
                return Err(refuse(
                    raw,
                    "an IPv6 address must be written in brackets, like `[2001:db8::1]:443`",
                ))
            }
        }
    };
    let port = match port_part {
        Some(p) => parse_port(raw, p)?,
        None => default_port.ok_or_else(|| refuse(raw, "it names no port"))?,
    };
    let host = match host_part {
        HostPart::V6(ip) => Host::Ip(IpAddr::V6(ip)),
        HostPart::Text(h) => host(raw, h)?,
    };
    Ok(Authority { host, port })
}

enum HostPart<'a> {
    V6(Ipv6Addr),
    Text(&'a str),
}

fn parse_port(raw: &str, p: &str) -> Result<u16, TargetError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(raw, "its port is not a number from 1 to 65535"));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(refuse(raw, "its port is not a number from 1 to 65535")),
        Ok(n) => Ok(n),
    }
}

/// A host written without brackets: a canonical dotted quad, or a name.
fn host(raw: &str, h: &str) -> Result<Host, TargetError> {
    if h.is_empty() {
        return Err(refuse(raw, "it names no host"));
    }
    // Only an exact canonical dotted quad is a number: four decimal parts,
    // no leading zeros, no trailing dot.
    if let Some(ip) = canonical_dotted_quad(h) {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    let name = cordon_policy::canon::host(h).map_err(|e| refuse(raw, cause(&e)))?;
    // `canon::host` accepts numbers it can normalise (`127.0.0.1.`, a
    // full-width spelling); a number that is not written canonically is
    // refused, so a resolver never sees one as a name.
    if name.parse::<IpAddr>().is_ok() {
        return Err(refuse(
            raw,
            "an address must be written as a plain dotted quad or a bracketed IPv6 address",
        ));
    }
    Ok(Host::Name(name))
}

fn cause(e: &cordon_policy::canon::CanonError) -> String {
    match e {
        cordon_policy::canon::CanonError::Host { why, .. } => (*why).to_string(),
        other => other.to_string(),
    }
}

/// `a.b.c.d`, each part 0..=255 in decimal without leading zeros.
pub fn canonical_dotted_quad(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if p.len() > 1 && p.starts_with('0') {
            return None;
        }
        octets[i] = p.parse().ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ok(raw: &str, d: Option<u16>) -> Authority {
        authority(raw, d).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    fn bad(raw: &str, d: Option<u16>) -> String {
        match authority(raw, d) {
            Ok(a) => panic!("{raw} was accepted as {a}"),
            Err(e) => e.why,
        }
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            ok("API.Example.COM.:443", None).host,
            Host::Name("api.example.com".into())
        );
        assert_eq!(
            ok("bücher.example:443", None).host,
            Host::Name("xn--bcher-kva.example".into())
        );
        assert_eq!(ok("example.com", Some(80)).port, 80);
    }

    #[test]
    fn ports_are_required_for_connect_and_in_range() {
        bad("example.com", None);
        bad("example.com:", None);
        bad("example.com:0", None);
        bad("example.com:65536", None);
        bad("example.com:+443", None);
        bad("example.com:443:443", None);
        bad("example.com:0443x", None);
        assert_eq!(ok("example.com:65535", None).port, 65535);
    }

    #[test]
    fn junk_is_refused() {
        for raw in [
            "user@example.com:443",
            "user:pw@example.com:443",
            "exa\\mple.com:443",
            "example.com%2e:443",
            "exa mple.com:443",
            "example.com\0:443",
            "example.com/:443",
            "example.com?:443",
            "[::1%lo]:443",
            "[::1:443",
            "::1:443",
            "]example.com:443",
            "-bad-.example:443",
            "a..b:443",
            ".:443",
            "",
        ] {
            bad(raw, None);
        }
    }

    #[test]
    fn numbers_only_in_canonical_form() {
        assert_eq!(
            ok("127.0.0.1:80", None).host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(ok("[::1]:80", None).host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(
            ok("[::FFFF:127.0.0.1]:80", None).host,
            Host::Ip("::ffff:127.0.0.1".parse().unwrap())
        );
        for raw in [
            "2130706433:80",      // decimal
            "0177.0.0.1:80",      // octal
            "0x7f.0.0.1:80",      // hex part
            "0x7f000001:80",      // hex whole
            "127.1:80",           // short
            "127.0.1:80",         // short
            "127.0.0.01:80",      // leading zero
            "127.0.0.1.:80",      // trailing dot
            "１２７.０.０.１:80", // full-width
            "127。0。0。1:80",    // ideographic full stops
            "1.2.3.4.5:80",
            "256.0.0.1:80",
        ] {
            bad(raw, None);
        }
    }

    #[test]
    fn homographs_become_punycode_not_the_ascii_lookalike() {
        // Cyrillic `а` in "pаypal": never equal to the ASCII name.
        let a = ok("p\u{0430}ypal.com:443", None);
        assert_ne!(a.host, Host::Name("paypal.com".into()));
        assert!(a.host.fact().starts_with("xn--"));
    }
}
