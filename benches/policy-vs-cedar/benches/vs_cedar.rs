//! The same egress decisions, written once as a cordon policy and once as
//! Cedar policies, decided side by side in one run. Prints the ratio.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::str::FromStr;
use std::time::Instant;

use cedar_policy as cedar;
use cordon_policy as cp;

const TENANTS: usize = 40;
const RULES: usize = 10;

fn cordon_src() -> String {
    let mut allow = String::new();
    for t in 0..TENANTS {
        for r in 0..RULES {
            allow.push_str(&format!(
                "      - name: t{t}-r{r}\n        when: identity.namespace == \"team-{t}\" && identity.attested && host == \"svc{r}.team-{t}.example.com\"\n"
            ));
        }
    }
    format!(
        "policy:\n  egress:\n    allow:\n      - name: pypi\n        when: identity.attested && host.endsWith(\".pythonhosted.org\")\n{allow}    deny:\n      - port != 443\n      - scheme != \"https\"\n"
    )
}

fn cedar_src() -> String {
    let mut s = String::from(
        "permit(principal, action == Action::\"connect\", resource) when { principal.attested && context.host like \"*.pythonhosted.org\" };\n\
         forbid(principal, action, resource) when { context.port != 443 };\n\
         forbid(principal, action, resource) when { context.scheme != \"https\" };\n",
    );
    for t in 0..TENANTS {
        for r in 0..RULES {
            s.push_str(&format!(
                "permit(principal, action == Action::\"connect\", resource) when {{ principal.namespace == \"team-{t}\" && principal.attested && context.host == \"svc{r}.team-{t}.example.com\" }};\n"
            ));
        }
    }
    s
}

fn requests() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for t in 0..TENANTS {
        let other = (t + 1) % TENANTS;
        v.push((format!("team-{t}"), format!("https://svc{}.team-{t}.example.com/x", t % RULES)));
        v.push((format!("team-{t}"), format!("https://svc0.team-{other}.example.com/x")));
        v.push((format!("team-{t}"), format!("http://svc0.team-{t}.example.com/x")));
        v.push((format!("team-{t}"), "https://files.pythonhosted.org/p".into()));
    }
    v
}

fn cordon_decide(p: &cp::Policy, ns: &str, url: &str) -> bool {
    let req = cp::Request {
        identity: cp::Identity {
            namespace: ns.to_string(),
            name: "builder".into(),
            attested: true,
            labels: Default::default(),
        },
        env: cp::Deployment { name: "prod".into() },
        now: 0,
        facts: cp::SurfaceFacts::Egress(cp::EgressFacts::from_url(url).unwrap()),
    };
    p.decide(&req).is_allowed()
}

fn cedar_decide(ps: &cedar::PolicySet, auth: &cedar::Authorizer, ns: &str, url: &str) -> bool {
    // The same work per request as cordon: parse the URL into facts, build
    // the principal and context.
    let f = cp::canon::url(url).unwrap();
    let uid = cedar::EntityUid::from_type_name_and_id(
        cedar::EntityTypeName::from_str("Workload").unwrap(),
        cedar::EntityId::new("builder"),
    );
    let attrs = HashMap::from([
        ("namespace".to_string(), cedar::RestrictedExpression::new_string(ns.to_string())),
        ("attested".to_string(), cedar::RestrictedExpression::new_bool(true)),
    ]);
    let principal = cedar::Entity::new(uid.clone(), attrs, HashSet::new()).unwrap();
    let entities = cedar::Entities::from_entities([principal], None).unwrap();
    let action = cedar::EntityUid::from_type_name_and_id(
        cedar::EntityTypeName::from_str("Action").unwrap(),
        cedar::EntityId::new("connect"),
    );
    let resource = cedar::EntityUid::from_type_name_and_id(
        cedar::EntityTypeName::from_str("Host").unwrap(),
        cedar::EntityId::new(&f.host),
    );
    let ctx = cedar::Context::from_pairs([
        ("host".to_string(), cedar::RestrictedExpression::new_string(f.host.clone())),
        ("port".to_string(), cedar::RestrictedExpression::new_long(f.port)),
        ("scheme".to_string(), cedar::RestrictedExpression::new_string(f.scheme.clone())),
    ])
    .unwrap();
    let req = cedar::Request::new(uid, action, resource, ctx, None).unwrap();
    auth.is_authorized(&req, ps, &entities).decision() == cedar::Decision::Allow
}

fn time<F: FnMut(&str, &str) -> bool>(reqs: &[(String, String)], rounds: usize, mut f: F) -> (u64, u64, f64) {
    let mut samples = Vec::with_capacity(rounds * reqs.len());
    for _ in 0..rounds {
        for (ns, url) in reqs {
            let t0 = Instant::now();
            black_box(f(ns, url));
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    samples.sort_unstable();
    let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64;
    (samples[samples.len() / 2], samples[samples.len() * 99 / 100], mean)
}

fn main() {
    let policy = cp::Policy::load_str("gen.yaml", &cordon_src()).unwrap();
    let ps = cedar::PolicySet::from_str(&cedar_src()).unwrap();
    let auth = cedar::Authorizer::new();
    let reqs = requests();
    // Both engines must agree on every request before timing means anything.
    for (ns, url) in &reqs {
        assert_eq!(cordon_decide(&policy, ns, url), cedar_decide(&ps, &auth, ns, url), "{ns} {url}");
    }
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    // Interleave to share the machine's noise.
    let mut c = Vec::new();
    let mut k = Vec::new();
    for _ in 0..5 {
        c.push(time(&reqs, rounds / 5, |ns, url| cordon_decide(&policy, ns, url)));
        k.push(time(&reqs, rounds / 5, |ns, url| cedar_decide(&ps, &auth, ns, url)));
    }
    let med = |v: &mut Vec<(u64, u64, f64)>, i: usize| {
        let mut xs: Vec<f64> = v.iter().map(|x| [x.0 as f64, x.1 as f64, x.2][i]).collect();
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        xs[xs.len() / 2]
    };
    let (cp50, cp99, cmean) = (med(&mut c, 0), med(&mut c, 1), med(&mut c, 2));
    let (kp50, kp99, kmean) = (med(&mut k, 0), med(&mut k, 1), med(&mut k, 2));
    println!("requests: {} per round, {} policies/rules", reqs.len(), policy.rules.len());
    println!("cordon: p50 {cp50:.0} ns  p99 {cp99:.0} ns  mean {cmean:.0} ns");
    println!("cedar:  p50 {kp50:.0} ns  p99 {kp99:.0} ns  mean {kmean:.0} ns");
    println!("ratio cedar/cordon: p50 {:.1}x  mean {:.1}x", kp50 / cp50, kmean / cmean);
}
