//! A spec's `secrets`: names, or maps asking for a placeholder.

use cordon_policy::canon;
use marked_yaml::Spanned;
use serde::Deserialize;

use super::{At, SecretName, SpecError};
use crate::egress::EgressEntry;

/// A secret asked for as a placeholder: the workload gets a stand-in, and
/// the egress proxy puts the value in its place only in a request to one
/// of `to` (each inspected by the policy, in the spec's allowlist) that the
/// policy's secret surface allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlaceholderAsk {
    pub name: SecretName,
    /// Canonical host names.
    pub to: Vec<String>,
}

/// One secret asked for: a name (its value lands in a file), or a map.
/// (Its fields are plain: an untagged enum cannot hold positions; the
/// entry's own position is kept around it.)
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(super) enum RawSecret {
    Name(String),
    Asked(RawSecretAsk),
}

/// A secret asked for in full.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecretAsk {
    name: String,
    /// `file` (the value in `/run/cordon/secrets/NAME`, the default) or
    /// `placeholder` (a stand-in there; the egress proxy puts the value in
    /// its place toward `to` only).
    #[serde(default, rename = "as")]
    delivery: Option<String>,
    /// Where a placeholder's value may go: exact host names, each in
    /// `egress_allow` and inspected by the policy.
    #[serde(default)]
    to: Vec<String>,
}

/// `secrets`: names, each once; a placeholder's `to` exact hosts in the
/// allowlist.
pub(super) fn secrets_of(
    raw: &[Spanned<RawSecret>],
    egress_allow: &[EgressEntry],
    at: &At<'_>,
) -> Result<(Vec<SecretName>, Vec<PlaceholderAsk>), SpecError> {
    let mut secrets: Vec<SecretName> = Vec::new();
    let mut placeholders = Vec::new();
    for r in raw {
        let here = |text: &str| Spanned::new(*r.span(), text.to_string());
        let (s, ask) = match &**r {
            RawSecret::Name(s) => (here(s), None),
            RawSecret::Asked(a) => (here(&a.name), Some(a)),
        };
        let name = SecretName::parse(&s).map_err(|err| at("secrets", &s, err.to_string()))?;
        if secrets.contains(&name) {
            return Err(at(
                "secrets",
                &s,
                format!("`{name}` is listed twice; list each secret once"),
            ));
        }
        if let Some(a) = ask {
            let placeholder = match a.delivery.as_deref() {
                None | Some("file") => false,
                Some("placeholder") => true,
                Some(d) => {
                    return Err(at(
                        "secrets",
                        &s,
                        format!("`as: {d}` is not a delivery; write `as: file` (the default) or `as: placeholder`"),
                    ))
                }
            };
            if !placeholder && !a.to.is_empty() {
                return Err(at(
                    "secrets",
                    &s,
                    "`to` names where a placeholder's value may go; add `as: placeholder`, or drop `to`".into(),
                ));
            }
            if placeholder {
                placeholders.push(PlaceholderAsk {
                    name: name.clone(),
                    to: placeholder_hosts(&name, &a.to, egress_allow)
                        .map_err(|why| at("secrets", &s, why))?,
                });
            }
        }
        secrets.push(name);
    }
    Ok((secrets, placeholders))
}

/// A placeholder's `to`: exact names, canonical, each in the allowlist.
fn placeholder_hosts(
    name: &SecretName,
    to: &[String],
    egress_allow: &[EgressEntry],
) -> Result<Vec<String>, String> {
    if to.is_empty() {
        return Err(format!("`{name}` is asked for as a placeholder but `to` names no host; add `to: [api.example.com]`, the hosts its value may be sent to"));
    }
    let mut out = Vec::new();
    for h in to {
        let host = match h.contains('*') {
            true => String::new(),
            false => canon::host(h).map_err(|e| e.to_string())?,
        };
        if host.is_empty() || host.parse::<std::net::IpAddr>().is_ok() {
            return Err(format!(
                "`{h}`: `to` takes exact host names (no address, no wildcard)"
            ));
        }
        if !egress_allow.iter().any(|e| e.matches(&host, 443)) {
            return Err(format!("`{host}` is not in `egress_allow` (port 443); a placeholder goes only to a host the sandbox may reach: add it there"));
        }
        if !out.contains(&host) {
            out.push(host);
        }
    }
    Ok(out)
}
