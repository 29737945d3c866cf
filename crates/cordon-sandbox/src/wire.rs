//! The wire form of the protocol's types: one serialised shape for a spec,
//! used by the keeper's brief, the state record, and every surface that
//! carries a spec between processes.
//!
//! A [`SandboxSpec`] serialises to its canonical document: the same fields
//! as the YAML form, every one written out (defaults included), in a fixed
//! order, with scalars as strings. Deserialising goes through
//! [`SandboxSpec::from_yaml`] — JSON is YAML — so a spec read off the wire
//! is checked by the very code that checks a spec file, and can only exist
//! when valid. [`SandboxSpec::fingerprint`] is the SHA-256 of the canonical
//! JSON, so two specs have one fingerprint exactly when they are equal.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::spec::SandboxSpec;

/// The version of every wire document cordon writes (briefs, records).
/// A reader refuses any other, naming both.
pub const WIRE_VERSION: u32 = 2;

#[derive(Serialize)]
struct SpecDoc<'a> {
    kind: &'a str,
    image: &'a str,
    work_dir: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<&'a str>,
    egress_allow: Vec<String>,
    requires: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_isolation: Option<&'static str>,
    resources: ResourcesDoc,
    secrets: Vec<SecretDoc<'a>>,
    declared_outputs: Vec<OutputDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    files_out: Option<LimitsDoc>,
    outputs_named_at_call_time: bool,
}

/// A secret: its name, or (asked for as a placeholder) the map form.
#[derive(Serialize)]
#[serde(untagged)]
enum SecretDoc<'a> {
    Name(&'a str),
    Placeholder {
        name: &'a str,
        #[serde(rename = "as")]
        delivery: &'static str,
        to: &'a [String],
    },
}

#[derive(Serialize)]
struct ResourcesDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_seconds: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wall_seconds: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<String>,
}

#[derive(Serialize)]
struct OutputDoc<'a> {
    path: &'a str,
    media_type: &'a str,
    required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    disposition: &'static str,
}

#[derive(Serialize)]
struct LimitsDoc {
    max_bytes_per_file: String,
    max_total_bytes: String,
    max_files: String,
}

impl SandboxSpec {
    fn doc(&self) -> SpecDoc<'_> {
        let s = |v: Option<u64>| v.map(|n| n.to_string());
        let r = self.resources();
        SpecDoc {
            kind: self.kind(),
            image: self.image(),
            work_dir: self.work_dir(),
            workspace: self.workspace(),
            egress_allow: self.egress_allow().iter().map(|e| e.to_string()).collect(),
            requires: self.requires().iter().map(|c| c.as_str()).collect(),
            min_isolation: self.min_isolation().map(|i| i.as_str()),
            resources: ResourcesDoc {
                memory: s(r.memory),
                processes: s(r.processes),
                cpu_seconds: s(r.cpu_seconds),
                wall_seconds: s(r.wall_seconds),
                disk: s(r.disk),
            },
            secrets: self
                .secrets()
                .iter()
                .map(|n| match self.placeholder(n) {
                    Some(p) => SecretDoc::Placeholder {
                        name: n.as_str(),
                        delivery: "placeholder",
                        to: &p.to,
                    },
                    None => SecretDoc::Name(n.as_str()),
                })
                .collect(),
            declared_outputs: self
                .declared_outputs()
                .iter()
                .map(|o| OutputDoc {
                    path: o.path(),
                    media_type: o.media_type(),
                    required: o.required(),
                    name: (o.name() != o.path()).then(|| o.name()),
                    disposition: o.disposition().as_str(),
                })
                .collect(),
            files_out: self.files_out().map(|l| LimitsDoc {
                max_bytes_per_file: l.max_bytes_per_file.to_string(),
                max_total_bytes: l.max_total_bytes.to_string(),
                max_files: l.max_files.to_string(),
            }),
            outputs_named_at_call_time: self.outputs_named_at_call_time(),
        }
    }

    /// The canonical JSON document of this spec (see the module docs).
    pub fn to_canonical_json(&self) -> String {
        // Strings, bools and arrays of them: serialising cannot fail.
        serde_json::to_string(&self.doc()).unwrap_or_default()
    }

    /// Reads a spec from its wire form (or any JSON or YAML spec text),
    /// with the checks of [`SandboxSpec::from_yaml`].
    pub fn from_wire(text: &str) -> Result<SandboxSpec, crate::spec::SpecError> {
        SandboxSpec::from_yaml("spec (wire form)", text)
    }

    /// SHA-256 (hex) of the canonical JSON: equal exactly when the specs
    /// are equal, across processes and builds that share [`WIRE_VERSION`].
    pub fn fingerprint(&self) -> String {
        Sha256::digest(self.to_canonical_json().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl Serialize for SandboxSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.doc().serialize(s)
    }
}

impl<'de> Deserialize<'de> for SandboxSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SandboxSpec, D::Error> {
        // Taken as a JSON value, written back as JSON text and read by the
        // spec loader: one set of checks for every way a spec arrives.
        let value = serde_json::Value::deserialize(d)?;
        let text = serde_json::to_string(&value).map_err(serde::de::Error::custom)?;
        SandboxSpec::from_wire(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> SandboxSpec {
        SandboxSpec::from_yaml(
            "full.yaml",
            r#"
kind: diagram
image: diagram-sandbox:1
work_dir: /work
egress_allow: [pypi.org, "*.pythonhosted.org:443", api.openai.com]
requires: [exec, files_in]
min_isolation: microvm
resources: {memory: 256MiB, processes: 16, wall_seconds: 120}
secrets:
  - team-a/pypi-token
  - {name: openai/key, as: placeholder, to: [api.openai.com]}
declared_outputs:
  - {path: out/chart.png, media_type: image/png, required: false}
  - {path: result.json, media_type: application/json, disposition: consume, name: r.json}
files_out: {max_bytes_per_file: 8MiB, max_total_bytes: 16MiB, max_files: 4}
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_spec_survives_its_wire_form_exactly() {
        for spec in [full(), SandboxSpec::new("run", "host").unwrap()] {
            let json = serde_json::to_string(&spec).unwrap();
            let back: SandboxSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(back, spec, "{json}");
            assert_eq!(back.fingerprint(), spec.fingerprint());
            assert_eq!(back.to_canonical_json(), json);
        }
    }

    #[test]
    fn the_fingerprint_tells_specs_apart() {
        let a = SandboxSpec::new("run", "host").unwrap();
        let b = SandboxSpec::new("sandbox", "host").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(full().fingerprint(), a.fingerprint());
    }

    #[test]
    fn the_wire_form_is_checked_like_a_spec_file() {
        for bad in [
            r#"{"kind":"run","image":"host","surprise":"1"}"#,
            r#"{"kind":"run","image":"host","work_dir":"relative"}"#,
            r#"{"kind":"run","image":"host","secrets":["../other-tenant/x"]}"#,
            r#"{"kind":"run","image":"host","resources":{"memory":"0"}}"#,
            r#"{"kind":"run"}"#,
        ] {
            assert!(
                serde_json::from_str::<SandboxSpec>(bad).is_err(),
                "accepted {bad}"
            );
        }
    }
}
