//! An HTTP request's own facts as a rule reads them: the method, the
//! headers and the query, each in one canonical spelling.

use std::collections::BTreeMap;

use super::{hex_val, CanonError};

/// The most entries a rule's map or list fact may hold (`expr::MAX_LIST_LEN`,
/// which bounds a rule's cost): a request with more query values or
/// headers is refused rather than decided at an unbounded cost.
pub const MAX_ENTRIES: usize = 256;

/// RFC 9110 `tchar`: what a method or a header name is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An HTTP method: a token, uppercased. Methods are case-sensitive on the
/// wire, but a server that accepts `delete` must not slip past a rule that
/// names `DELETE`, so one spelling is kept.
pub fn method(raw: &str) -> Result<String, CanonError> {
    if raw.is_empty() {
        return Err(CanonError::Method {
            raw: raw.to_string(),
            why: "it is empty",
        });
    }
    if !raw.bytes().all(is_tchar) {
        return Err(CanonError::Method {
            raw: raw.to_string(),
            why: "it holds a character that is not part of a token",
        });
    }
    Ok(raw.to_ascii_uppercase())
}

/// Request headers as a rule reads them: names lowercased, values with the
/// surrounding spaces and tabs removed, a repeated header's values joined
/// with `", "` in the order sent. Refuses a name that is not a token and a
/// value holding CR, LF or NUL.
pub fn headers(raw: &[(String, String)]) -> Result<BTreeMap<String, String>, CanonError> {
    if raw.len() > MAX_ENTRIES {
        return Err(CanonError::Header {
            name: raw.first().map(|(n, _)| n.clone()).unwrap_or_default(),
            why: "the request holds more headers than a rule may read (256)",
        });
    }
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in raw {
        let bad = |why| CanonError::Header {
            name: name.clone(),
            why,
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(bad("its name is not a token"));
        }
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(bad("its value holds CR, LF or NUL"));
        }
        let v = value.trim_matches([' ', '\t']);
        out.entry(name.to_ascii_lowercase())
            .and_modify(|prev| {
                prev.push_str(", ");
                prev.push_str(v);
            })
            .or_insert_with(|| v.to_string());
    }
    Ok(out)
}

/// The query of a URL, decoded: `&`-separated `key=value` pairs (a pair
/// without `=` has the value `""`, empty pairs are skipped), `+` read as a
/// space and percent-escapes decoded, as servers read a query. Keys are the
/// map's; each key's values keep their order. A malformed escape or one
/// that decodes to invalid UTF-8 is refused, never replaced: two spellings
/// must not decode alike by accident.
pub fn query(raw_url: &str) -> Result<BTreeMap<String, Vec<String>>, CanonError> {
    let rest = raw_url.split_once("://").map_or(raw_url, |(_, r)| r);
    let rest = rest.split('#').next().unwrap_or_default();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Some((_, q)) = rest.split_once('?') else {
        return Ok(out);
    };
    let bad = |why| CanonError::Query {
        raw: q.to_string(),
        why,
    };
    let decode = |s: &str| -> Result<String, CanonError> {
        let b = s.as_bytes();
        let mut bytes = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => bytes.push(b' '),
                b'%' => {
                    let hi = b.get(i + 1).copied().and_then(hex_val);
                    let lo = b.get(i + 2).copied().and_then(hex_val);
                    let (Some(hi), Some(lo)) = (hi, lo) else {
                        return Err(bad("it holds a malformed `%` escape"));
                    };
                    bytes.push((hi << 4) | lo);
                    i += 2;
                }
                c => bytes.push(c),
            }
            i += 1;
        }
        String::from_utf8(bytes).map_err(|_| bad("an escape decodes to invalid UTF-8"))
    };
    if q.split('&').filter(|p| !p.is_empty()).count() > MAX_ENTRIES {
        return Err(bad("it holds more pairs than a rule may read (256)"));
    }
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.entry(decode(k)?).or_default().push(decode(v)?);
    }
    Ok(out)
}
