//! Decision latency and load+check time on a generated multi-tenant policy.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench panics on a broken fixture
//!
//! `cargo bench -p cordon-policy --bench decide`. Besides criterion's own
//! figures, this prints p50/p99 per decision (facts built inside the timed
//! region) and decisions per second on one core. The Cedar comparison lives
//! in `benches/policy-vs-cedar` (outside the default build).

use std::hint::black_box;
use std::time::Instant;

use cordon_policy::*;
use criterion::{criterion_group, criterion_main, Criterion};

const TENANTS: usize = 40;
const RULES_PER_TENANT: usize = 10;

/// A platform floor plus `TENANTS` x `RULES_PER_TENANT` tenant rules spread
/// over the four surfaces.
pub fn generated_policy() -> String {
    let mut egress = String::new();
    let mut compute = String::new();
    let mut storage = String::new();
    let mut secret = String::new();
    for t in 0..TENANTS {
        let ns = format!("team-{t}");
        for r in 0..RULES_PER_TENANT {
            let line = match r % 4 {
                0 | 1 => {
                    egress.push_str(&format!(
                        "      - name: t{t}-egress-{r}\n        when: identity.namespace == \"{ns}\" && identity.attested && host == \"svc{r}.{ns}.example.com\"\n"
                    ));
                    continue;
                }
                2 => &mut compute,
                _ => &mut storage,
            };
            if r % 4 == 2 {
                line.push_str(&format!(
                    "      - name: t{t}-compute-{r}\n        when: identity.namespace == \"{ns}\" && command == \"/opt/{ns}/tool{r}\"\n"
                ));
            } else {
                line.push_str(&format!(
                    "      - name: t{t}-storage-{r}\n        when: identity.namespace == \"{ns}\" && path.startsWith(\"/data/{ns}/{r}/\") && mode == \"read\"\n"
                ));
            }
        }
        secret.push_str(&format!(
            "      - name: t{t}-secret\n        when: identity.namespace == \"{ns}\" && secret.name.startsWith(\"{ns}/\")\n"
        ));
    }
    format!(
        r#"policy:
  egress:
    allow:
      - name: package-index
        when: identity.attested && (host == "pypi.org" || host.endsWith(".pythonhosted.org"))
{egress}    deny:
      - name: tls-only
        when: port != 443
      - name: no-plain-http
        when: scheme != "https"
  compute:
    allow:
      - name: interpreters
        when: identity.attested && command in ["/usr/bin/python3", "/bin/sh"]
{compute}    deny:
      - name: unattested
        when: "!identity.attested"
      - name: no-sudo
        when: command.startsWith("/usr/bin/sudo")
  storage:
    allow:
      - name: work-read
        when: path.startsWith("/work/") && mode == "read"
{storage}    deny:
      - name: no-ssh
        when: path.startsWith("/work/.ssh/")
  secret:
    allow:
{secret}"#
    )
}

/// The same deployment as layers: a platform root that allows what any
/// tenant may ever do, and one layer per tenant bound by `applies_to`,
/// narrowing it to that tenant's rules. Returns the top file and the files
/// it extends.
pub fn generated_layers() -> (String, resolve::MemoryFiles) {
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        "platform.yaml".to_string(),
        r#"policy:
  egress:
    allow:
      - name: package-index
        when: identity.attested && (host == "pypi.org" || host.endsWith(".pythonhosted.org"))
      - name: tenant-services
        when: identity.attested && host.endsWith(".example.com")
    deny:
      - name: tls-only
        when: port != 443
      - name: no-plain-http
        when: scheme != "https"
  compute:
    allow:
      - name: interpreters
        when: identity.attested && command in ["/usr/bin/python3", "/bin/sh"]
      - name: tenant-tools
        when: command.startsWith("/opt/")
    deny:
      - name: unattested
        when: "!identity.attested"
      - name: no-sudo
        when: command.startsWith("/usr/bin/sudo")
  storage:
    allow:
      - name: work-read
        when: path.startsWith("/work/") && mode == "read"
      - name: tenant-data
        when: path.startsWith("/data/") && mode == "read"
    deny:
      - name: no-ssh
        when: path.startsWith("/work/.ssh/")
  secret:
    allow:
      - name: own-secrets
        when: secret.name.startsWith(identity.namespace + "/")
"#
        .to_string(),
    );
    let mut extends = vec!["./platform.yaml".to_string()];
    for t in 0..TENANTS {
        let ns = format!("team-{t}");
        let (mut egress, mut compute, mut storage) = (String::new(), String::new(), String::new());
        for r in 0..RULES_PER_TENANT {
            match r % 4 {
                0 | 1 => egress.push_str(&format!(
                    "      - name: egress-{r}\n        when: host == \"svc{r}.{ns}.example.com\"\n"
                )),
                2 => compute.push_str(&format!(
                    "      - name: compute-{r}\n        when: command == \"/opt/{ns}/tool{r}\"\n"
                )),
                _ => storage.push_str(&format!(
                    "      - name: storage-{r}\n        when: path.startsWith(\"/data/{ns}/{r}/\")\n"
                )),
            }
        }
        files.insert(
            format!("{ns}.yaml"),
            format!(
                "policy:\n  applies_to: identity.namespace == \"{ns}\"\n  egress:\n    allow:\n      - name: packages\n        when: host == \"pypi.org\" || host.endsWith(\".pythonhosted.org\")\n{egress}  compute:\n    allow:\n      - name: interpreters\n        when: command in [\"/usr/bin/python3\", \"/bin/sh\"]\n{compute}  storage:\n    allow:\n      - name: work\n        when: path.startsWith(\"/work/\")\n{storage}"
            ),
        );
        extends.push(format!("./{ns}.yaml"));
    }
    let top = format!("policy:\n  extends: [{}]\n", extends.join(", "));
    (top, resolve::MemoryFiles(files))
}

/// The raw inputs of a request, before facts are built.
#[derive(Clone)]
enum Raw {
    Egress(&'static str, String),
    Compute(&'static str, String),
    Storage(&'static str, String),
    Secret(&'static str, String),
}

fn build(ns: &str, raw: &Raw) -> Request {
    let identity = Identity {
        namespace: ns.to_string(),
        name: "builder".into(),
        attested: true,
        labels: Default::default(),
    };
    let facts = match raw {
        Raw::Egress(_, url) => SurfaceFacts::Egress(EgressFacts::from_url(url).unwrap()),
        Raw::Compute(_, c) => SurfaceFacts::Compute(ComputeFacts {
            command: c.clone(),
            command_target: c.clone(),
            args: Some(vec!["-c".into(), "print(1)".into()]),
            cpu: Some(10),
            memory: Some(64 << 20),
            work_dir: Some("/work".into()),
        }),
        Raw::Storage(_, p) => SurfaceFacts::Storage(StorageFacts {
            path: canon::fs_path(p).unwrap(),
            mode: Mode::Read,
            bytes: None,
            work_dir: Some("/work".into()),
        }),
        Raw::Secret(_, n) => SurfaceFacts::Secret(SecretFacts {
            name: canon::secret_name(n).unwrap(),
            destination: None,
        }),
    };
    Request {
        identity,
        env: Deployment {
            name: "prod".into(),
        },
        now: 1_800_000_000,
        facts,
    }
}

/// A realistic mix: about half allowed, half denied, over every surface.
fn mix() -> Vec<(String, Raw)> {
    let mut v = Vec::new();
    for t in 0..TENANTS {
        let ns = format!("team-{t}");
        let other = format!("team-{}", (t + 1) % TENANTS);
        v.push((
            ns.clone(),
            Raw::Egress("allow", format!("https://svc0.{ns}.example.com/x")),
        ));
        v.push((
            ns.clone(),
            Raw::Egress("deny", format!("https://svc0.{other}.example.com/x")),
        ));
        v.push((
            ns.clone(),
            Raw::Egress("deny", format!("http://svc1.{ns}.example.com/x")),
        ));
        v.push((
            ns.clone(),
            Raw::Egress("allow", "https://files.pythonhosted.org/p".into()),
        ));
        v.push((
            ns.clone(),
            Raw::Compute("allow", format!("/opt/{ns}/tool2")),
        ));
        v.push((ns.clone(), Raw::Compute("deny", "/usr/bin/sudo".into())));
        v.push((
            ns.clone(),
            Raw::Storage("allow", format!("/data/{ns}/3/file")),
        ));
        v.push((
            ns.clone(),
            Raw::Storage("deny", format!("/data/{other}/3/file")),
        ));
        v.push((ns.clone(), Raw::Secret("allow", format!("{ns}/db"))));
        v.push((ns.clone(), Raw::Secret("deny", format!("{other}/db"))));
    }
    v
}

fn expected(raw: &Raw) -> &'static str {
    match raw {
        Raw::Egress(e, _) | Raw::Compute(e, _) | Raw::Storage(e, _) | Raw::Secret(e, _) => e,
    }
}

/// p50, p99 and decisions per second over `rounds` passes of the mix.
fn percentiles(label: &str, policy: &Policy, mix: &[(String, Raw)]) {
    // Check the mix decides as labelled, so the bench measures real work.
    for (ns, raw) in mix {
        let d = policy.decide(&build(ns, raw));
        let got = if d.is_allowed() { "allow" } else { "deny" };
        assert_eq!(got, expected(raw), "{label}: {ns}");
    }
    let rounds = 200;
    let mut samples = Vec::with_capacity(rounds * mix.len());
    let start = Instant::now();
    for _ in 0..rounds {
        for (ns, raw) in mix {
            let t0 = Instant::now();
            let d = policy.decide(&build(ns, raw));
            black_box(&d);
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let total = start.elapsed();
    samples.sort_unstable();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    println!(
        "{label}: decide (facts built inside): p50 {} ns, p99 {} ns, {:.0} decisions/s on one core",
        p(0.50),
        p(0.99),
        samples.len() as f64 / total.as_secs_f64()
    );
}

fn load_time(label: &str, n_rules: usize, load: impl Fn() -> Policy) {
    let t0 = Instant::now();
    let n = 20;
    for _ in 0..n {
        black_box(load());
    }
    println!(
        "{label}: load+check {:.2} ms for {n_rules} rules",
        t0.elapsed().as_secs_f64() * 1e3 / n as f64,
    );
}

fn bench(c: &mut Criterion) {
    let src = generated_policy();
    let policy = Policy::load_str("gen.yaml", &src).unwrap();
    let (top, files) = generated_layers();
    let layered = Policy::load_with("top.yaml", &top, &files).unwrap();
    assert_eq!(layered.layers.len(), TENANTS + 2);
    let mix = mix();
    // Interleaved, so both see the same machine.
    for _ in 0..2 {
        percentiles("one file", &policy, &mix);
        percentiles("root + 40 tenant layers", &layered, &mix);
    }
    load_time("one file", policy.rules.len(), || {
        Policy::load_str("gen.yaml", &src).unwrap()
    });
    load_time("root + 40 tenant layers", layered.rules.len(), || {
        Policy::load_with("top.yaml", &top, &files).unwrap()
    });
    c.bench_function("decide/mix (per request, facts built)", |b| {
        let mut i = 0;
        b.iter(|| {
            let (ns, raw) = &mix[i % mix.len()];
            i += 1;
            black_box(policy.decide(&build(ns, raw)))
        })
    });
    c.bench_function(
        "decide/mix, root + 40 tenant layers (per request, facts built)",
        |b| {
            let mut i = 0;
            b.iter(|| {
                let (ns, raw) = &mix[i % mix.len()];
                i += 1;
                black_box(layered.decide(&build(ns, raw)))
            })
        },
    );
    c.bench_function("load+check/generated", |b| {
        b.iter(|| black_box(Policy::load_str("gen.yaml", &src).unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
