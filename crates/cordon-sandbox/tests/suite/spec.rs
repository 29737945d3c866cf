//! Loading a spec from YAML: unknown fields refused, errors positioned.

use cordon_sandbox::{Capability, Isolation, SandboxSpec, SecretName, SpecError};

const FULL: &str = "kind: diagram
image: diagram-sandbox:1
work_dir: /workspace/out
egress_allow:
  - pypi.org
  - \"*.pythonhosted.org\"
requires: [exec, files_in, network]
min_isolation: microvm
resources:
  memory: 256MiB
  processes: 16
  cpu_seconds: 30
  wall_seconds: 120
secrets: [team-a/pypi-token]
";

fn load(text: &str) -> Result<SandboxSpec, SpecError> {
    SandboxSpec::from_yaml("spec.yaml", text)
}

#[test]
fn a_full_spec_loads() {
    let s = load(FULL).unwrap();
    assert_eq!(s.kind(), "diagram");
    assert_eq!(s.work_dir(), "/workspace/out");
    let entries: Vec<String> = s.egress_allow().iter().map(ToString::to_string).collect();
    assert_eq!(entries, ["pypi.org:443", "*.pythonhosted.org:443"]);
    assert!(s.requires().contains(Capability::Network));
    assert_eq!(s.min_isolation(), Some(Isolation::Microvm));
    assert_eq!(s.resources().memory, Some(256 << 20));
    assert_eq!(s.resources().wall_seconds, Some(120));
    assert_eq!(
        s.secrets(),
        [SecretName::parse("team-a/pypi-token").unwrap()]
    );
}

#[test]
fn a_spec_that_says_nothing_gets_the_closed_configuration() {
    let s = load("kind: k\nimage: i\n").unwrap();
    assert!(s.egress_allow().is_empty());
    assert!(s.requires().is_empty());
    assert!(s.secrets().is_empty());
    assert_eq!(s.min_isolation(), None);
    assert_eq!(s.work_dir(), "/workspace");
    assert_eq!(s, SandboxSpec::new("k", "i").unwrap());
}

#[test]
fn every_refusal_is_positioned() {
    let cases = [
        (
            "unknown field",
            "kind: k\nimage: i\negress_allowed: [pypi.org]\n",
        ),
        (
            "unknown nested field",
            "kind: k\nimage: i\nresources:\n  mem: 1GiB\n",
        ),
        ("missing field", "kind: k\n"),
        ("duplicate key", "kind: k\nimage: i\nkind: j\n"),
        ("anchor", "kind: &a k\nimage: *a\n"),
        ("wrong shape", "kind: k\nimage: i\negress_allow: pypi.org\n"),
        (
            "unknown rung",
            "kind: k\nimage: i\nmin_isolation: microVM\n",
        ),
        (
            "old process meaning",
            "kind: k\nimage: i\nmin_isolation: no-boundary\n",
        ),
        (
            "bad entry",
            "kind: k\nimage: i\negress_allow:\n  - pypi.org\n  - 10.0.0.1\n",
        ),
        (
            "duplicate entry",
            "kind: k\nimage: i\negress_allow: [pypi.org, PyPI.org:443]\n",
        ),
        (
            "bad capability",
            "kind: k\nimage: i\nrequires: [exec, gpu]\n",
        ),
        ("bad size", "kind: k\nimage: i\nresources:\n  memory: 1GB\n"),
        (
            "zero count",
            "kind: k\nimage: i\nresources:\n  processes: 0\n",
        ),
        (
            "bad secret",
            "kind: k\nimage: i\nsecrets: [../etc/shadow]\n",
        ),
        (
            "relative work dir",
            "kind: k\nimage: i\nwork_dir: workspace\n",
        ),
        ("bad image", "kind: k\nimage: \"my image\"\n"),
        ("not a mapping", "- kind\n"),
    ];
    let mut report = String::new();
    for (what, text) in cases {
        match load(text) {
            Ok(s) => panic!("{what}: accepted {s:?}"),
            Err(e) => {
                let shown = e.to_string();
                assert!(shown.starts_with("spec.yaml:"), "{what}: {shown}");
                report.push_str(&format!("{what}\n  {shown}\n"));
            }
        }
    }
    insta::assert_snapshot!("spec_refusals", report);
}

#[test]
fn equal_specs_compare_equal_and_differences_are_named() {
    let a = load(FULL).unwrap();
    let b = load(FULL).unwrap();
    assert_eq!(a, b);
    assert!(a.differences(&b).is_empty());
    let c = load(&FULL.replace("256MiB", "128MiB").replace("microvm", "vm")).unwrap();
    assert_eq!(a.differences(&c), ["min_isolation", "resources"]);
}

const WITH_OUTPUTS: &str = "kind: diagram
image: diagram-sandbox:1
requires: [exec]
declared_outputs:
  - path: out/diagram.png
    media_type: image/png
    required: false
    name: diagram.png
  - path: out/render.json
    media_type: application/json
    disposition: consume
files_out: {max_bytes_per_file: 8MiB, max_total_bytes: 16MiB, max_files: 4}
";

#[test]
fn declared_outputs_load_and_bring_files_out_into_requires() {
    let s = load(WITH_OUTPUTS).unwrap();
    let o = s.declared_outputs();
    assert_eq!(o.len(), 2);
    assert_eq!(
        (o[0].path(), o[0].name(), o[0].required()),
        ("out/diagram.png", "diagram.png", false)
    );
    assert_eq!(o[1].disposition(), cordon_sandbox::Disposition::Consume);
    assert!(o[1].required());
    assert_eq!(s.files_out().unwrap().max_total_bytes, 16 << 20);
    assert!(s.requires().contains(Capability::FilesOut));
    assert!(!s.outputs_named_at_call_time());
    let other = load(&WITH_OUTPUTS.replace("max_files: 4", "max_files: 5")).unwrap();
    assert_eq!(s.differences(&other), ["files_out"]);
}

#[test]
fn every_output_refusal_is_positioned() {
    let base = "kind: k\nimage: i\n";
    let limits = "files_out: {max_bytes_per_file: 1MiB, max_total_bytes: 2MiB, max_files: 2}\n";
    let cases = [
        (
            "glob",
            format!("{base}{limits}declared_outputs:\n  - {{path: \"*.png\", media_type: image/png}}\n"),
        ),
        (
            "traversal",
            format!("{base}{limits}declared_outputs:\n  - {{path: ../x.png, media_type: image/png}}\n"),
        ),
        (
            "absolute",
            format!("{base}{limits}declared_outputs:\n  - {{path: /etc/x, media_type: image/png}}\n"),
        ),
        (
            "bad media type",
            format!("{base}{limits}declared_outputs:\n  - {{path: x.png, media_type: png}}\n"),
        ),
        (
            "bad name",
            format!("{base}{limits}declared_outputs:\n  - {{path: x.png, media_type: image/png, name: \"a\\\\b\"}}\n"),
        ),
        (
            "bad disposition",
            format!("{base}{limits}declared_outputs:\n  - {{path: x.png, media_type: image/png, disposition: keep}}\n"),
        ),
        (
            "not a boolean",
            format!("{base}{limits}declared_outputs:\n  - {{path: x.png, media_type: image/png, required: maybe}}\n"),
        ),
        (
            "unknown output field",
            format!("{base}{limits}declared_outputs:\n  - {{path: x.png, media_type: image/png, glob: true}}\n"),
        ),
        (
            "collision by case",
            format!("{base}{limits}declared_outputs:\n  - {{path: a.png, media_type: image/png}}\n  - {{path: b.png, media_type: image/png, name: A.png}}\n"),
        ),
        (
            "outputs without files_out",
            format!("{base}declared_outputs:\n  - {{path: x.png, media_type: image/png}}\n"),
        ),
        (
            "call time without files_out",
            format!("{base}outputs_named_at_call_time: true\n"),
        ),
        (
            "missing cap",
            format!("{base}files_out: {{max_bytes_per_file: 1MiB, max_files: 2}}\n"),
        ),
        (
            "zero cap",
            format!("{base}files_out: {{max_bytes_per_file: 1MiB, max_total_bytes: 2MiB, max_files: 0}}\n"),
        ),
        (
            "unknown cap",
            format!("{base}files_out: {{max_bytes_per_file: 1MiB, max_total_bytes: 2MiB, max_files: 2, max_dirs: 1}}\n"),
        ),
    ];
    let mut report = String::new();
    for (what, text) in cases {
        match load(&text) {
            Ok(s) => panic!("{what}: accepted {s:?}"),
            Err(e) => {
                let shown = e.to_string();
                assert!(shown.starts_with("spec.yaml:"), "{what}: {shown}");
                report.push_str(&format!("{what}\n  {shown}\n"));
            }
        }
    }
    insta::assert_snapshot!("spec_output_refusals", report);
}

/// docs/spec.schema.json is what `cordon spec schema` generates from the
/// loader's own types, and it names exactly the fields the loader takes.
#[test]
fn the_committed_json_schema_is_the_generated_one() {
    let schema = cordon_sandbox::spec_json_schema();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/spec.schema.json");
    let committed = std::fs::read_to_string(file).expect("docs/spec.schema.json");
    let generated = serde_json::to_string_pretty(&schema).expect("json") + "\n";
    assert!(
        committed == generated,
        "docs/spec.schema.json is stale: run `cordon spec schema > docs/spec.schema.json`"
    );
    let mut fields: Vec<&str> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    let err = SandboxSpec::from_yaml("s.yaml", "kind: k\nimage: i\nnot_a_field: 1\n")
        .expect_err("an unknown field")
        .to_string();
    for f in &fields {
        assert!(
            err.contains(&format!("`{f}`")),
            "{f} is not in the loader's list: {err}"
        );
    }
    assert_eq!(fields.len(), err.matches("`, `").count() + 1, "{err}");
    assert_eq!(schema["additionalProperties"], false);
}

/// An image is named, never a path out of a store (issue 28, item 9: a
/// `../../etc` image was `503`, no backend qualifying, not the spec's `400`).
#[test]
fn an_image_name_with_a_dot_segment_is_refused_by_the_spec() {
    for bad in ["../../etc", "a/../b", "./x", "/abs", "a//b", "a/"] {
        assert!(
            cordon_sandbox::SandboxSpec::new("run", bad).is_err(),
            "{bad}"
        );
    }
    for good in [
        "host",
        "python-3.12",
        "docker.io/library/python:3.12",
        "a.b",
    ] {
        assert!(
            cordon_sandbox::SandboxSpec::new("run", good).is_ok(),
            "{good}"
        );
    }
}

#[test]
fn a_secret_asked_as_a_placeholder_names_where_its_value_may_go() {
    let s = load(
        "kind: k\nimage: i\negress_allow: [api.openai.com, pypi.org]\nsecrets:\n  - team-a/pypi-token\n  - name: openai/key\n    as: placeholder\n    to: [API.OpenAI.com]\n",
    )
    .unwrap();
    let names: Vec<&str> = s.secrets().iter().map(|n| n.as_str()).collect();
    assert_eq!(names, ["team-a/pypi-token", "openai/key"]);
    assert_eq!(s.placeholders().len(), 1);
    assert_eq!(s.placeholders()[0].to, ["api.openai.com"]);
    let name = SecretName::parse("openai/key").unwrap();
    assert!(s.placeholder(&name).is_some());
    assert!(s
        .placeholder(&SecretName::parse("team-a/pypi-token").unwrap())
        .is_none());
    // A placeholder's destinations are part of what a kept sandbox is.
    let other = load(
        "kind: k\nimage: i\negress_allow: [api.openai.com, pypi.org]\nsecrets:\n  - team-a/pypi-token\n  - name: openai/key\n    as: placeholder\n    to: [pypi.org]\n",
    )
    .unwrap();
    assert_eq!(s.differences(&other), ["secrets"]);

    let refused = [
        ("to without placeholder", "egress_allow: [a.example]\nsecrets:\n  - {name: k, to: [a.example]}\n", "add `as: placeholder`"),
        ("placeholder without to", "egress_allow: [a.example]\nsecrets:\n  - {name: k, as: placeholder}\n", "names no host"),
        ("not in the allowlist", "egress_allow: [a.example]\nsecrets:\n  - {name: k, as: placeholder, to: [b.example]}\n", "not in `egress_allow`"),
        ("a wildcard", "egress_allow: ['*.a.example']\nsecrets:\n  - {name: k, as: placeholder, to: ['*.a.example']}\n", "exact host"),
        ("an address", "egress_allow: [a.example]\nsecrets:\n  - {name: k, as: placeholder, to: [10.0.0.1]}\n", "exact host"),
        ("another delivery", "egress_allow: [a.example]\nsecrets:\n  - {name: k, as: env}\n", "is not a delivery"),
        ("listed twice", "egress_allow: [a.example]\nsecrets:\n  - k\n  - {name: k, as: placeholder, to: [a.example]}\n", "listed twice"),
    ];
    for (what, rest, says) in refused {
        let text = format!("kind: k\nimage: i\n{rest}");
        match load(&text) {
            Ok(s) => panic!("{what}: accepted {s:?}"),
            Err(e) => assert!(e.to_string().contains(says), "{what}: {e}"),
        }
    }
}

/// What a restore may ask of a snapshot's spec: the same or narrower,
/// each widening named by its field.
#[test]
fn a_narrower_spec_is_not_wider_and_each_widening_is_named() {
    let was = load(
        "kind: run\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: container\negress_allow: [pypi.org:443, files.pythonhosted.org:443]\nresources: {memory: 512MiB, wall_seconds: 60}\n",
    )
    .unwrap();
    assert_eq!(was.wider_than(&was), Vec::<&str>::new());
    let cases = [
        // Narrower: fewer hosts, lower bounds, a bound the snapshot left
        // to the policy, a higher floor, one more requirement.
        ("kind: run\nimage: host\nrequires: [exec, snapshot, workspace]\nmin_isolation: hardened_container\negress_allow: [pypi.org:443]\nresources: {memory: 256MiB, wall_seconds: 30, cpu_seconds: 5}\n", vec![]),
        ("kind: other\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: container\negress_allow: [pypi.org:443]\nresources: {memory: 512MiB, wall_seconds: 60}\n", vec!["kind"]),
        ("kind: run\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: container\negress_allow: [pypi.org:443, example.com:443]\nresources: {memory: 512MiB, wall_seconds: 60}\n", vec!["egress_allow"]),
        ("kind: run\nimage: host\nrequires: [exec]\nmin_isolation: container\negress_allow: [pypi.org:443]\nresources: {memory: 512MiB, wall_seconds: 60}\n", vec!["requires"]),
        ("kind: run\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: process\negress_allow: [pypi.org:443]\nresources: {memory: 512MiB, wall_seconds: 60}\n", vec!["min_isolation"]),
        ("kind: run\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: container\negress_allow: [pypi.org:443]\nresources: {memory: 1GiB, wall_seconds: 60}\n", vec!["resources"]),
        // A bound left to the policy where the snapshot set one is wider.
        ("kind: run\nimage: host\nrequires: [exec, snapshot]\nmin_isolation: container\negress_allow: [pypi.org:443]\nresources: {memory: 512MiB}\n", vec!["resources"]),
    ];
    for (text, want) in cases {
        let now = load(text).unwrap();
        assert_eq!(now.wider_than(&was), want, "{text}");
    }
}
