//! Canonical facts: one spelling for each, before any rule sees it.
//!
//! Every function here either returns the single canonical spelling of a
//! fact or refuses it with a [`CanonError`] that says what to write instead.
//! Nothing is guessed: an input with two plausible readings is refused.

use std::net::{IpAddr, Ipv6Addr};

mod request;
pub use request::{headers, method, query, MAX_ENTRIES};

/// A fact that cannot be canonicalised; the request or policy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    /// A host name or IP literal that is not usable.
    #[error(
        "host `{raw}` is refused: {why}; write a bare DNS name like `api.example.com` or an IP address like `10.0.0.1`"
    )]
    Host { raw: String, why: &'static str },
    /// A filesystem path that is not absolute or not usable.
    #[error("path `{raw}` is refused: {why}; write an absolute path like `/work/data`")]
    FsPath { raw: String, why: &'static str },
    /// An HTTP request path that is ambiguous or malformed.
    #[error(
        "request path `{raw}` is refused: {why}; write a path from `/` with plain `/` separators and no encoded `/`, `\\` or dot-segments, like `/v1/items`"
    )]
    HttpPath { raw: String, why: &'static str },
    /// A secret name with an unsafe segment.
    #[error(
        "secret name `{raw}` is refused: {why}; write `/`-separated segments like `team-a/db-password`"
    )]
    SecretName { raw: String, why: &'static str },
    /// An egress URL that is not usable.
    #[error(
        "url `{raw}` is refused: {why}; write an `http` or `https` URL like `https://api.example.com/v1`"
    )]
    Url { raw: String, why: String },
    /// An HTTP method that is not a token.
    #[error("method `{raw}` is refused: {why}; write an HTTP method like `GET` or `POST`")]
    Method { raw: String, why: &'static str },
    /// An HTTP header that cannot be read unambiguously.
    #[error(
        "header `{name}` is refused: {why}; write a token name like `authorization` and a value on one line"
    )]
    Header { name: String, why: &'static str },
    /// A query string that cannot be decoded unambiguously.
    #[error(
        "query `{raw}` is refused: {why}; write `key=value` pairs joined by `&`, percent-encoded UTF-8"
    )]
    Query { raw: String, why: &'static str },
    /// A byte size that is not in binary units.
    #[error(
        "size `{raw}` is refused: {why}; use binary units like `512MiB`, `4KiB` or `1GiB`, or plain bytes like `1024`"
    )]
    Size { raw: String, why: &'static str },
}

fn host_err(raw: &str, why: &'static str) -> CanonError {
    CanonError::Host {
        raw: raw.to_string(),
        why,
    }
}

/// Lowercase ASCII (IDNA `to_ascii`), no trailing dot.
///
/// IP literals are accepted and returned normalised (IPv6 without brackets).
/// Refuses empty input, userinfo, ports, paths, spaces and invalid labels.
pub fn host(raw: &str) -> Result<String, CanonError> {
    if raw.is_empty() {
        return Err(host_err(raw, "it is empty"));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(host_err(raw, "it holds spaces or control characters"));
    }
    if raw.contains('@') {
        return Err(host_err(raw, "it holds userinfo (`@`)"));
    }
    if raw.contains(['/', '?', '#', '\\']) {
        return Err(host_err(raw, "it holds a path, query or fragment"));
    }
    // Bracketed IPv6 literal.
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| host_err(raw, "it holds a port or an unclosed `[`"))?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| ip.to_string())
            .map_err(|_| host_err(raw, "the bracketed part is not an IPv6 address"));
    }
    if let Ok(ip) = raw.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    if raw.contains(':') {
        return Err(host_err(raw, "it holds a port (`:`)"));
    }
    if raw.contains(['[', ']', '%']) {
        return Err(host_err(raw, "it holds `[`, `]` or `%`"));
    }
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if trimmed.is_empty() {
        return Err(host_err(raw, "it has no labels"));
    }
    // A dotted quad with a trailing dot is still an IPv4 address.
    if let Ok(ip) = trimmed.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let ascii = idna::domain_to_ascii(trimmed)
        .map_err(|_| host_err(raw, "it is not a valid internationalised domain name"))?;
    if ascii.is_empty() || ascii.len() > 253 {
        return Err(host_err(raw, "it is empty or longer than 253 characters"));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(host_err(raw, "it has an empty label"));
        }
        if label.len() > 63 {
            return Err(host_err(raw, "a label is longer than 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(host_err(raw, "a label starts or ends with `-`"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(host_err(
                raw,
                "a label holds a character outside `a-z`, `0-9`, `-`, `_`",
            ));
        }
    }
    // A numeric last label is an IPv4 spelling (`127.1`, `0x7f.0.0.1`,
    // `2130706433`) that resolvers read differently; only dotted quads pass.
    if let Some(last) = labels.last() {
        let numeric = last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()));
        if numeric {
            return Err(host_err(
                raw,
                "it looks like an IPv4 address but is not a dotted quad",
            ));
        }
    }
    Ok(ascii)
}

/// Absolute and lexically normalised: `//` collapsed, `.` removed, `..`
/// resolved (never above `/`), no trailing slash except for the root.
pub fn fs_path(raw: &str) -> Result<String, CanonError> {
    let bad = |why| CanonError::FsPath {
        raw: raw.to_string(),
        why,
    };
    if raw.is_empty() {
        return Err(bad("it is empty"));
    }
    if raw.contains('\0') {
        return Err(bad("it holds a NUL byte"));
    }
    if !raw.starts_with('/') {
        return Err(bad("it is relative"));
    }
    let mut out: Vec<&str> = Vec::new();
    for seg in raw.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    Ok(format!("/{}", out.join("/")))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn push_pct(out: &mut String, b: u8) {
    out.push('%');
    out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
    out.push(char::from(HEX_UPPER[usize::from(b & 0x0f)]));
}

/// Decodes unreserved percent-escapes in one segment; other escapes are kept
/// with uppercase hex, non-ASCII bytes are percent-encoded. `None` when an
/// escape is malformed.
fn decode_segment(seg: &str) -> Option<String> {
    let bytes = seg.as_bytes();
    let mut out = String::with_capacity(seg.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hi = hex_val(*bytes.get(i + 1)?)?;
            let lo = hex_val(*bytes.get(i + 2)?)?;
            let v = (hi << 4) | lo;
            if is_unreserved(v) {
                out.push(char::from(v));
            } else {
                push_pct(&mut out, v);
            }
            i += 3;
        } else if b.is_ascii() {
            out.push(char::from(b));
            i += 1;
        } else {
            push_pct(&mut out, b);
            i += 1;
        }
    }
    Some(out)
}

/// RFC 3986 section 5.2.4, `remove_dot_segments`.
fn remove_dot_segments(path: &str) -> String {
    let mut input: &str = path;
    let mut output = String::with_capacity(path.len());
    let pop = |output: &mut String| match output.rfind('/') {
        Some(i) => output.truncate(i),
        None => output.clear(),
    };
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            pop(&mut output);
        } else if input == "/.." {
            input = "/";
            pop(&mut output);
        } else if input == "." || input == ".." {
            input = "";
        } else {
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| i + start);
            output.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    output
}

/// An HTTP request path: unreserved characters percent-decoded, then
/// dot-segments removed (RFC 3986 5.2.4). The query (from `?`) and any
/// fragment (from `#`) are not part of the path. Empty becomes `/`.
///
/// Refuses encoded `/` or `\`, a literal `\`, and encoded dot-segments
/// (`%2e%2e`, `.%2E`), which are judged before decoding.
pub fn http_path(raw: &str) -> Result<String, CanonError> {
    let bad = |why| CanonError::HttpPath {
        raw: raw.to_string(),
        why,
    };
    let path = raw.split(['?', '#']).next().unwrap_or_default();
    if path.is_empty() {
        return Ok("/".to_string());
    }
    if path.contains('\\') {
        return Err(bad("it holds a `\\`"));
    }
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(bad("it holds spaces or control characters"));
    }
    if !path.starts_with('/') {
        return Err(bad("it does not start with `/`"));
    }
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") {
        return Err(bad("it holds an encoded `/` (`%2F`)"));
    }
    if lower.contains("%5c") {
        return Err(bad("it holds an encoded `\\` (`%5C`)"));
    }
    let mut decoded = String::with_capacity(path.len());
    for (i, seg) in path.split('/').enumerate() {
        let d = decode_segment(seg).ok_or_else(|| bad("it holds a malformed `%` escape"))?;
        if (d == "." || d == "..") && d != seg {
            return Err(bad("it holds an encoded dot-segment"));
        }
        if i > 0 {
            decoded.push('/');
        }
        decoded.push_str(&d);
    }
    let out = remove_dot_segments(&decoded);
    if out.is_empty() {
        Ok("/".to_string())
    } else {
        Ok(out)
    }
}

/// A secret name like `team-a/db-password`: refused, never normalised, when
/// it is empty, absolute, has empty, `.` or `..` segments, control characters
/// or a backslash. Valid names are returned unchanged.
pub fn secret_name(raw: &str) -> Result<String, CanonError> {
    let bad = |why| CanonError::SecretName {
        raw: raw.to_string(),
        why,
    };
    if raw.is_empty() {
        return Err(bad("it is empty"));
    }
    if raw.starts_with('/') {
        return Err(bad("it is absolute (leading `/`)"));
    }
    if raw.chars().any(char::is_control) {
        return Err(bad("it holds NUL or control characters"));
    }
    if raw.contains('\\') {
        return Err(bad("it holds a `\\`"));
    }
    for seg in raw.split('/') {
        match seg {
            "" => return Err(bad("it has an empty segment")),
            "." | ".." => return Err(bad("it has a `.` or `..` segment")),
            _ => {}
        }
    }
    Ok(raw.to_string())
}

/// Egress facts from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlFacts {
    /// Canonical form: `scheme://host[:port]path`, port only when non-default.
    pub url: String,
    /// `http` or `https`.
    pub scheme: String,
    /// Canonical host, see [`host`].
    pub host: String,
    /// Explicit port or the scheme default (80 or 443).
    pub port: i64,
    /// Canonical request path, see [`http_path`].
    pub path: String,
}

/// Parses and canonicalises an egress URL (`http` or `https` only).
pub fn url(raw: &str) -> Result<UrlFacts, CanonError> {
    let err = |why: &str| CanonError::Url {
        raw: raw.to_string(),
        why: why.to_string(),
    };
    if raw.is_empty() {
        return Err(err("it is empty"));
    }
    // The url crate silently strips tabs, newlines and edge spaces; refuse
    // them so the raw path below is the path that was parsed.
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err("it holds spaces or control characters"));
    }
    let (raw_scheme, rest) = raw
        .split_once("://")
        .ok_or_else(|| err("it is not of the form `scheme://host/path`"))?;
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    if authority.contains('\\') {
        return Err(err("its authority holds a `\\`"));
    }
    if authority.contains('@') {
        return Err(err(
            "it holds userinfo (`user@`); credentials in a URL are refused",
        ));
    }
    let after = &rest[auth_end..];
    let raw_path = after.split(['?', '#']).next().unwrap_or_default();

    let u = url::Url::parse(raw).map_err(|e| err(&e.to_string()))?;
    let scheme = u.scheme().to_ascii_lowercase();
    if !raw_scheme.eq_ignore_ascii_case(&scheme) {
        return Err(err("its scheme could not be read unambiguously"));
    }
    let default_port: u16 = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return Err(err("only `http` and `https` are egress schemes")),
    };
    if !u.username().is_empty() || u.password().is_some() {
        return Err(err("it holds userinfo; credentials in a URL are refused"));
    }
    let canon_host = match u.host() {
        Some(url::Host::Domain(d)) => host(d)?,
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err(err("it names no host")),
    };
    let port_u16 = u.port().unwrap_or(default_port);
    let port = i64::from(port_u16);
    let path = http_path(raw_path)?;
    let shown_host = if canon_host.contains(':') {
        format!("[{canon_host}]")
    } else {
        canon_host.clone()
    };
    let url = if port_u16 == default_port {
        format!("{scheme}://{shown_host}{path}")
    } else {
        format!("{scheme}://{shown_host}:{port}{path}")
    };
    Ok(UrlFacts {
        url,
        scheme,
        host: canon_host,
        port,
        path,
    })
}

/// A size as a policy would write it: the largest binary unit that divides
/// it exactly, else bytes. `size(&show_size(n)) == Ok(n)`.
pub fn show_size(n: u64) -> String {
    for (u, m) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{u}", n / m);
        }
    }
    n.to_string()
}

/// A byte size: plain bytes (`1024`, `0`) or a binary unit (`4KiB`, `10MiB`,
/// `1GiB`, `2TiB`), exact case. Decimal units, fractions, signs, spaces and
/// overflow are refused.
pub fn size(raw: &str) -> Result<u64, CanonError> {
    let bad = |why| CanonError::Size {
        raw: raw.to_string(),
        why,
    };
    if raw.is_empty() {
        return Err(bad("it is empty"));
    }
    if raw.chars().any(char::is_whitespace) {
        return Err(bad("it holds spaces"));
    }
    if raw.starts_with('-') {
        return Err(bad("it is negative"));
    }
    const UNITS: [(&str, u64); 4] = [
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("TiB", 1 << 40),
    ];
    let (num, mult) = UNITS
        .iter()
        .find_map(|(u, m)| raw.strip_suffix(u).map(|n| (n, *m)))
        .unwrap_or((raw, 1));
    if num.contains(['.', ',']) {
        return Err(bad("it is not a whole number"));
    }
    if num.is_empty() {
        return Err(bad("it has a unit but no number"));
    }
    if !num.bytes().all(|b| b.is_ascii_digit()) {
        let digits = num.bytes().take_while(u8::is_ascii_digit).count();
        return Err(
            if digits > 0 && num[digits..].bytes().all(|b| b.is_ascii_alphabetic()) {
                bad("its unit is not one of `KiB`, `MiB`, `GiB`, `TiB`")
            } else {
                bad("it is not a number")
            },
        );
    }
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| bad("it overflows 64 bits"))
}

/// How deep flow collections (`[`, `{`) may nest in a YAML file cordon
/// loads: the YAML parser recurses once per level, and a file nested
/// deeper took a debug build's 2 MiB thread stack down (found by the
/// load_policy fuzz target).
pub const MAX_YAML_NESTING: usize = 64;

/// Where `text`'s flow collections first nest deeper than
/// [`MAX_YAML_NESTING`] (1-based line and column), outside quoted strings
/// and comments; `None` when they do not.
pub fn yaml_too_deep(text: &str) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut col) = (0usize, 1usize, 0usize);
    let (mut quote, mut escaped, mut comment, mut prev) = (None, false, false, ' ');
    for c in text.chars() {
        col += 1;
        if c == '\n' {
            line += 1;
            col = 0;
            comment = false;
            prev = c;
            continue;
        }
        if comment {
            continue;
        }
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '#' if prev.is_whitespace() => comment = true,
                '"' | '\'' => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_YAML_NESTING {
                        return Some((line, col));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = c;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- host ----

    #[test]
    fn host_lowercases_and_drops_trailing_dot() {
        assert_eq!(
            host("Partner-A.Example.COM.").unwrap(),
            "partner-a.example.com"
        );
        assert_eq!(host("api.example.com").unwrap(), "api.example.com");
        assert_eq!(host("localhost").unwrap(), "localhost");
    }

    #[test]
    fn host_idna() {
        assert_eq!(host("bücher.example").unwrap(), "xn--bcher-kva.example");
        assert_eq!(host("BÜCHER.example").unwrap(), "xn--bcher-kva.example");
        assert_eq!(
            host("xn--bcher-kva.example").unwrap(),
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn host_ip_literals() {
        assert_eq!(host("10.0.0.1").unwrap(), "10.0.0.1");
        assert_eq!(host("10.0.0.1.").unwrap(), "10.0.0.1");
        assert_eq!(host("::1").unwrap(), "::1");
        assert_eq!(host("[::1]").unwrap(), "::1");
        assert_eq!(host("[2001:DB8:0:0::1]").unwrap(), "2001:db8::1");
        assert_eq!(host("2001:0db8::0001").unwrap(), "2001:db8::1");
    }

    #[test]
    fn host_refusals() {
        for bad in [
            "",
            ".",
            "a..b",
            "user@x.example",
            "x.example:443",
            "[::1]:443",
            "[::1",
            "[not-ip]",
            "x.example/path",
            "x.example?q",
            "x.example#f",
            "x .example",
            " x.example",
            "x\\y",
            "-bad.example",
            "bad-.example",
            "a%2eb",
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
            "1.2.3.4.5",
        ] {
            assert!(host(bad).is_err(), "{bad:?} should be refused");
        }
        let long_label = format!("{}.example", "a".repeat(64));
        assert!(host(&long_label).is_err());
    }

    #[test]
    fn host_error_message() {
        let e = host("user@x.example").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("`user@x.example`"), "{msg}");
        assert!(msg.contains("write"), "{msg}");
    }

    // ---- fs_path ----

    #[test]
    fn fs_path_normalises() {
        assert_eq!(fs_path("/work/../etc/shadow").unwrap(), "/etc/shadow");
        assert_eq!(fs_path("/../etc").unwrap(), "/etc");
        assert_eq!(fs_path("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(fs_path("//a///b//").unwrap(), "/a/b");
        assert_eq!(fs_path("/").unwrap(), "/");
        assert_eq!(fs_path("/..").unwrap(), "/");
        assert_eq!(fs_path("/a/b/").unwrap(), "/a/b");
        assert_eq!(fs_path("/a/..").unwrap(), "/");
        assert_eq!(fs_path("/a/...").unwrap(), "/a/...");
    }

    #[test]
    fn fs_path_refusals() {
        for bad in ["", "a/b", "./a", "../etc", "~/x", "/a\0b"] {
            assert!(fs_path(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(fs_path("etc").unwrap_err().to_string().contains("`etc`"));
    }

    // ---- http_path ----

    #[test]
    fn http_path_normalises() {
        assert_eq!(http_path("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(http_path("/%61bc").unwrap(), "/abc");
        assert_eq!(http_path("/%7Euser/%2D%5F").unwrap(), "/~user/-_");
        assert_eq!(http_path("").unwrap(), "/");
        assert_eq!(http_path("/").unwrap(), "/");
        assert_eq!(http_path("/v1?x=/../y").unwrap(), "/v1");
        assert_eq!(http_path("?q").unwrap(), "/");
        assert_eq!(http_path("/v1#frag").unwrap(), "/v1");
        assert_eq!(http_path("/../a").unwrap(), "/a");
        assert_eq!(http_path("/a/b/..").unwrap(), "/a/");
        assert_eq!(http_path("/a/b/.").unwrap(), "/a/b/");
        assert_eq!(http_path("/a/").unwrap(), "/a/");
        assert_eq!(http_path("/a%2eb").unwrap(), "/a.b");
        assert_eq!(http_path("/...").unwrap(), "/...");
        // Reserved escapes are kept, with uppercase hex.
        assert_eq!(http_path("/a%3fb").unwrap(), "/a%3Fb");
        assert_eq!(http_path("/a%20b").unwrap(), "/a%20b");
        // Non-ASCII is percent-encoded, so both spellings agree.
        assert_eq!(http_path("/ü").unwrap(), http_path("/%c3%bc").unwrap());
        assert_eq!(http_path("/ü").unwrap(), "/%C3%BC");
    }

    #[test]
    fn http_path_refusals() {
        for bad in [
            "/a%2Fb",
            "/a%2fb",
            "/a%5Cb",
            "/a%5cb",
            "/a\\b",
            "/a/%2e%2e/b",
            "/a/%2E%2E/b",
            "/a/.%2E/b",
            "/a/%2e./b",
            "/a/%2e/b",
            "/a/%2e",
            "/%",
            "/%4",
            "/%zz",
            "a/b",
            "/a b",
            "/a\tb",
        ] {
            assert!(http_path(bad).is_err(), "{bad:?} should be refused");
        }
        let msg = http_path("/a%2Fb").unwrap_err().to_string();
        assert!(msg.contains("`/a%2Fb`"), "{msg}");
    }

    // ---- secret_name ----

    #[test]
    fn secret_name_unchanged_when_valid() {
        for ok in ["team-a/db-password", "x", "a/b/c", "A.B/c..d", "..x/y."] {
            assert_eq!(secret_name(ok).unwrap(), ok);
        }
    }

    #[test]
    fn secret_name_refusals() {
        for bad in [
            "",
            "/team-a/x",
            "a//b",
            "a/",
            "./a",
            "a/./b",
            "team-a/../team-b/x",
            "..",
            "a/..",
            "a\0b",
            "a\nb",
            "a\u{7f}b",
            "a\\b",
        ] {
            assert!(secret_name(bad).is_err(), "{bad:?} should be refused");
        }
    }

    // ---- url ----

    #[test]
    fn url_https_default_port() {
        let f = url("https://Partner-A.example.com/v1").unwrap();
        assert_eq!(f.scheme, "https");
        assert_eq!(f.host, "partner-a.example.com");
        assert_eq!(f.port, 443);
        assert_eq!(f.path, "/v1");
        assert_eq!(f.url, "https://partner-a.example.com/v1");
    }

    #[test]
    fn url_explicit_port() {
        let f = url("http://x.example:8080/").unwrap();
        assert_eq!(f.scheme, "http");
        assert_eq!(f.port, 8080);
        assert_eq!(f.path, "/");
        assert_eq!(f.url, "http://x.example:8080/");
        let f = url("HTTP://x.example:80").unwrap();
        assert_eq!(f.scheme, "http");
        assert_eq!(f.port, 80);
        assert_eq!(f.path, "/");
        assert_eq!(f.url, "http://x.example/");
    }

    #[test]
    fn url_path_and_host_forms() {
        let f = url("https://x.example/a/./b/../c?q=1#f").unwrap();
        assert_eq!(f.path, "/a/c");
        assert_eq!(f.url, "https://x.example/a/c");
        let f = url("https://x.example?q=1").unwrap();
        assert_eq!(f.path, "/");
        let f = url("https://bücher.example/").unwrap();
        assert_eq!(f.host, "xn--bcher-kva.example");
        let f = url("https://[2001:DB8::1]:8443/x").unwrap();
        assert_eq!(f.host, "2001:db8::1");
        assert_eq!(f.port, 8443);
        assert_eq!(f.url, "https://[2001:db8::1]:8443/x");
        let f = url("http://10.0.0.1/%61").unwrap();
        assert_eq!(f.host, "10.0.0.1");
        assert_eq!(f.path, "/a");
        let f = url("https://x.example./v1").unwrap();
        assert_eq!(f.host, "x.example");
    }

    #[test]
    fn url_refusals() {
        for bad in [
            "",
            "https://user@x.example/",
            "https://user:pw@x.example/",
            "https://@x.example/",
            "ftp://x",
            "file:///etc/passwd",
            "x.example/v1",
            "https://x.example/a/%2e%2e/b",
            "https://x.example/a%2Fb",
            "https://x.example/a\\b",
            "https:\\\\x.example\\a",
            "https://x.example/a b",
            "https://x.exa\tmple/",
            " https://x.example/",
            "https://",
            "https://x.example:99999/",
        ] {
            assert!(url(bad).is_err(), "{bad:?} should be refused");
        }
        let msg = url("ftp://x").unwrap_err().to_string();
        assert!(msg.contains("`ftp://x`") && msg.contains("https"), "{msg}");
    }

    // ---- method, headers, query ----

    #[test]
    fn method_is_an_uppercased_token() {
        assert_eq!(method("post").unwrap(), "POST");
        assert_eq!(method("M-SEARCH").unwrap(), "M-SEARCH");
        for bad in ["", "GE T", "GET\r\n", "G(ET"] {
            assert!(method(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn headers_lowercase_names_and_join_repeats_in_order() {
        let h = headers(&[
            ("Accept".into(), " a/b ".into()),
            ("X-Trace".into(), "1".into()),
            ("accept".into(), "c/d".into()),
        ])
        .unwrap();
        assert_eq!(h["accept"], "a/b, c/d");
        assert_eq!(h["x-trace"], "1");
        assert!(headers(&[("Bad Name".into(), "x".into())]).is_err());
        assert!(headers(&[("x".into(), "a\r\nInjected: 1".into())]).is_err());
    }

    #[test]
    fn query_decodes_pairs_in_order_and_refuses_what_it_cannot_read() {
        let q = query("https://x.example/p?b=2&a=1&b=3&flag&&c=%41+b#frag").unwrap();
        assert_eq!(q["b"], ["2", "3"]);
        assert_eq!(q["a"], ["1"]);
        assert_eq!(q["flag"], [""]);
        assert_eq!(q["c"], ["A b"]);
        assert_eq!(q.len(), 4);
        assert!(query("https://x.example/p").unwrap().is_empty());
        assert!(query("https://x.example/p#?a=1").unwrap().is_empty());
        for bad in ["https://x/?a=%zz", "https://x/?a=%4", "https://x/?a=%ff"] {
            assert!(query(bad).is_err(), "{bad:?} should be refused");
        }
    }

    // ---- size ----

    #[test]
    fn size_units() {
        assert_eq!(size("512MiB").unwrap(), 512 << 20);
        assert_eq!(size("10MiB").unwrap(), 10 << 20);
        assert_eq!(size("1GiB").unwrap(), 1 << 30);
        assert_eq!(size("4KiB").unwrap(), 4096);
        assert_eq!(size("2TiB").unwrap(), 2 << 40);
        assert_eq!(size("1024").unwrap(), 1024);
        assert_eq!(size("0").unwrap(), 0);
        assert_eq!(size("0GiB").unwrap(), 0);
        assert_eq!(size("18446744073709551615").unwrap(), u64::MAX);
    }

    #[test]
    fn size_refusals() {
        for bad in [
            "",
            "10MB",
            "10mb",
            "10mib",
            "10K",
            "1.5GiB",
            "-1",
            "-1GiB",
            "+1",
            "10 MiB",
            " 10MiB",
            "1 0",
            "MiB",
            "abc",
            "18446744073709551616",
            "16777216TiB",
            "1MiBKiB",
        ] {
            let e = size(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("512MiB"), "{bad:?}: {msg}");
            assert!(msg.contains(&format!("`{bad}`")), "{bad:?}: {msg}");
        }
    }
}
