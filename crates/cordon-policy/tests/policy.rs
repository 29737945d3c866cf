//! Loader, checker and decision tests. Negative first: what each rule stops.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use cordon_policy::*;

fn load(src: &str) -> Policy {
    match Policy::load_str("p.yaml", src) {
        Ok(p) => p,
        Err(d) => panic!("policy did not load:\n{}", d.render()),
    }
}

fn errors(src: &str) -> String {
    match Policy::load_str("p.yaml", src) {
        Ok(_) => panic!("policy loaded but should not have"),
        Err(d) => d.render(),
    }
}

fn ident(ns: &str) -> Identity {
    Identity {
        namespace: ns.into(),
        name: "builder".into(),
        attested: true,
        labels: Default::default(),
    }
}

fn egress(ns: &str, url: &str) -> Request {
    Request {
        identity: ident(ns),
        env: Deployment {
            name: "prod".into(),
        },
        now: 0,
        facts: SurfaceFacts::Egress(EgressFacts::from_url(url).unwrap()),
    }
}

fn compute(ns: &str, cmd: &str, target: &str, args: Option<&[&str]>) -> Request {
    Request {
        identity: ident(ns),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Compute(ComputeFacts {
            command: cmd.into(),
            command_target: target.into(),
            args: args.map(|a| a.iter().map(|s| s.to_string()).collect()),
            cpu: Some(1),
            memory: Some(1 << 20),
            work_dir: Some("/work".into()),
        }),
    }
}

fn storage(path: &str, mode: Mode, bytes: Option<i64>) -> Request {
    Request {
        identity: ident("team-a"),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Storage(StorageFacts {
            path: cordon_policy::canon::fs_path(path).unwrap(),
            mode,
            bytes,
            work_dir: Some("/work".into()),
        }),
    }
}

// ---- the issue's policy shape loads exactly as written ----

const SHAPE: &str = r#"
policy:
  egress:
    allow:
      - name: partner-a
        when: identity.namespace == "team-a" && host == "partner-a.example.com"
      - host.endsWith(".pypi.org")          # a bare string is a rule too; it is named after its file and line
    deny:
      - port != 443
    max_response_bytes: 10MiB
  compute:
    deny: [command.startsWith("/usr/bin/sudo")]
    max_memory: 512MiB
    max_processes: 32
    max_cpu_seconds: 60
    max_wall_seconds: 600
  storage:
    allow: [path.startsWith("/work/") && mode == "read"]
    deny:  [path.startsWith("/work/.ssh/")]
  secret:
    allow: [identity.namespace == "team-a" && secret.name.startsWith("team-a/")]
"#;

#[test]
fn the_documented_shape_loads() {
    let p = load(SHAPE);
    assert_eq!(p.rules.len(), 7);
    assert_eq!(p.bounds.max_memory, 512 << 20);
    assert_eq!(p.bounds.max_response_bytes, 10 << 20);
    assert_eq!(p.bounds.max_processes, 32);
    let bare = p.rules.iter().find(|r| r.source.contains("pypi")).unwrap();
    assert_eq!(bare.name, "p.yaml:7");
}

#[test]
fn tenant_rule_allows_its_tenant_and_refuses_the_other() {
    let p = load(SHAPE);
    let a = p.decide(&egress("team-a", "https://partner-a.example.com/v1"));
    assert_eq!(a.verdict, Verdict::Allow);
    assert_eq!(p.rule(a.deciding[0]).name, "partner-a");
    let b = p.decide(&egress("team-b", "https://partner-a.example.com/v1"));
    assert_eq!(b.verdict, Verdict::Deny);
    assert!(b.no_allow_matched());
}

#[test]
fn deny_beats_allow() {
    let p = load(SHAPE);
    let d = p.decide(&egress("team-a", "https://partner-a.example.com:8443/v1"));
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(p.rule(d.deciding[0]).source, "port != 443");
}

#[test]
fn a_surface_without_allow_rules_allows_nothing() {
    let p = load(SHAPE);
    let d = p.decide(&compute(
        "team-a",
        "/usr/bin/python3",
        "/usr/bin/python3.11",
        Some(&[]),
    ));
    assert_eq!(d.verdict, Verdict::Deny);
}

#[test]
fn canonical_host_matches_rules_written_in_lowercase() {
    let p = load(SHAPE);
    let d = p.decide(&egress("team-a", "https://Partner-A.Example.COM./v1"));
    assert_eq!(d.verdict, Verdict::Allow);
}

#[test]
fn storage_paths_are_normalised_before_rules_see_them() {
    let p = load(SHAPE);
    assert_eq!(
        p.decide(&storage("/work/src/main.rs", Mode::Read, None))
            .verdict,
        Verdict::Allow
    );
    // `/work/../etc/shadow` is `/etc/shadow`: not under /work/.
    assert_eq!(
        p.decide(&storage("/work/../etc/shadow", Mode::Read, None))
            .verdict,
        Verdict::Deny
    );
    // `/work/x/../.ssh/id` is `/work/.ssh/id`: the deny sees through it.
    assert_eq!(
        p.decide(&storage("/work/x/../.ssh/id", Mode::Read, None))
            .verdict,
        Verdict::Deny
    );
}

// ---- two spellings of command ----

const SUDO: &str = r#"
policy:
  compute:
    allow: [command.startsWith("/usr/bin/")]
    deny: [command == "/usr/bin/sudo"]
"#;

#[test]
fn a_deny_matches_either_spelling_of_command() {
    let p = load(SUDO);
    // Invoked as a link whose target is sudo: the target spelling is denied.
    let d = p.decide(&compute(
        "team-a",
        "/usr/bin/innocent",
        "/usr/bin/sudo",
        Some(&[]),
    ));
    assert_eq!(d.verdict, Verdict::Deny);
    let d = p.decide(&compute(
        "team-a",
        "/usr/bin/sudo",
        "/usr/bin/sudo",
        Some(&[]),
    ));
    assert_eq!(d.verdict, Verdict::Deny);
}

#[test]
fn an_allow_matches_either_spelling_of_command() {
    let p = load(
        r#"
policy:
  compute:
    allow: [command == "/usr/bin/python3.11"]
"#,
    );
    let d = p.decide(&compute(
        "team-a",
        "/usr/bin/python3",
        "/usr/bin/python3.11",
        Some(&[]),
    ));
    assert_eq!(d.verdict, Verdict::Allow);
    let d = p.decide(&compute(
        "team-a",
        "/usr/bin/perl",
        "/usr/bin/perl",
        Some(&[]),
    ));
    assert_eq!(d.verdict, Verdict::Deny);
}

// ---- three-valued evaluation, each ending in deny where it must ----

#[test]
fn unknown_fact_in_an_allow_rule_is_undetermined_not_allow() {
    let p = load(
        r#"
policy:
  egress:
    allow: [host == "api.example.com" && method == "GET"]
"#,
    );
    // https: the method is inside the tunnel, unknown.
    let d = p.decide(&egress("team-a", "https://api.example.com/"));
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert_eq!(d.unknown, vec![Fact::Method]);
    assert!(!d.is_allowed());
    // Plain http: known, allowed.
    let d = p.decide(&egress("team-a", "http://api.example.com/"));
    assert_eq!(d.verdict, Verdict::Allow);
}

#[test]
fn unknown_fact_in_a_deny_rule_keeps_an_allow_open() {
    let p = load(
        r#"
policy:
  egress:
    allow: [host == "api.example.com"]
    deny: [ip.inCidr("10.0.0.0/8")]
"#,
    );
    let d = p.decide(&egress("team-a", "https://api.example.com/"));
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert_eq!(d.unknown, vec![Fact::Ip]);
    let mut req = egress("team-a", "https://api.example.com/");
    if let SurfaceFacts::Egress(e) = &mut req.facts {
        e.ip = Some("10.1.2.3".into());
    }
    assert_eq!(p.decide(&req).verdict, Verdict::Deny);
    if let SurfaceFacts::Egress(e) = &mut req.facts {
        e.ip = Some("93.184.216.34".into());
    }
    assert_eq!(p.decide(&req).verdict, Verdict::Allow);
}

#[test]
fn short_circuit_around_an_unknown_decides() {
    let p = load(
        r#"
policy:
  egress:
    allow:
      - method == "GET" || host == "api.example.com"
      - ip == "1.2.3.4" && host == "nope"
"#,
    );
    // `unknown || true` is true; `unknown && false` is false, in either order.
    let d = p.decide(&egress("team-a", "https://api.example.com/"));
    assert_eq!(d.verdict, Verdict::Allow);
}

#[test]
fn a_missing_map_key_is_an_error_and_never_allows() {
    let p = load(
        r#"
policy:
  secret:
    allow:
      - identity.labels["team"] == "a"
"#,
    );
    let req = Request {
        identity: ident("team-a"),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Secret(SecretFacts {
            name: "a/x".into(),
            destination: None,
        }),
    };
    let d = p.decide(&req);
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert!(d.errors[0].contains("no such key"), "{:?}", d.errors);
}

#[test]
fn a_missing_key_in_a_deny_rule_does_not_let_the_request_through() {
    let p = load(
        r#"
policy:
  secret:
    allow:
      - secret.name.startsWith("a/")
    deny:
      - identity.labels["clearance"] != "high"
"#,
    );
    let req = Request {
        identity: ident("team-a"),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Secret(SecretFacts {
            name: "a/x".into(),
            destination: None,
        }),
    };
    assert_ne!(p.decide(&req).verdict, Verdict::Allow);
}

#[test]
fn division_by_zero_is_undetermined() {
    let p = load(
        r#"
policy:
  compute:
    allow: [memory / (cpu - 1) > 0]
"#,
    );
    let d = p.decide(&compute("team-a", "/bin/true", "/bin/true", Some(&[])));
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert!(d.errors.iter().any(|e| e.contains("division by zero")));
}

#[test]
fn an_error_hidden_behind_a_short_circuit_does_not_decide() {
    let p = load(
        r#"
policy:
  compute:
    allow: [command == "/bin/true" || memory / 0 > 1]
    deny: [command == "/bin/false" && memory / 0 > 1]
"#,
    );
    // The allow's left side is true: the error on its right does not matter.
    assert_eq!(
        p.decide(&compute("t", "/bin/true", "/bin/true", Some(&[])))
            .verdict,
        Verdict::Allow
    );
    // For /bin/false the deny's left is true and its right errors: open, not allow.
    assert_eq!(
        p.decide(&compute("t", "/bin/false", "/bin/false", Some(&[])))
            .verdict,
        Verdict::Undetermined
    );
}

#[test]
fn unknown_args_make_an_args_rule_open() {
    let p = load(
        r#"
policy:
  compute:
    allow: [command == "/bin/sh"]
    deny:
      - args.exists(a, a == "-c")
"#,
    );
    assert_eq!(
        p.decide(&compute("t", "/bin/sh", "/bin/sh", Some(&["x.sh"])))
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        p.decide(&compute("t", "/bin/sh", "/bin/sh", Some(&["-c", "x"])))
            .verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&compute("t", "/bin/sh", "/bin/sh", None)).verdict,
        Verdict::Undetermined
    );
}

#[test]
fn comprehensions_evaluate() {
    let p = load(
        r#"
policy:
  compute:
    allow:
      - args.all(a, !a.startsWith("--")) && args.map(a, size(a)).exists(n, n > 3) && args.filter(a, a == "x").size() == 1
"#,
    );
    assert_eq!(
        p.decide(&compute("t", "/bin/a", "/bin/a", Some(&["x", "long"])))
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        p.decide(&compute("t", "/bin/a", "/bin/a", Some(&["x", "--long"])))
            .verdict,
        Verdict::Deny
    );
}

/// The verdict computed by evaluating every rule, with no index.
fn unindexed(p: &Policy, req: &Request) -> Verdict {
    use cordon_policy::decide::{eval_rule, Outcome, View};
    use cordon_policy::expr::NoTrace;
    let views = [View { req, spelling: 0 }, View { req, spelling: 1 }];
    let surface = req.facts.surface();
    let mut deny_true = false;
    let mut deny_open = false;
    let mut allow_true = false;
    let mut allow_open = false;
    for (i, r) in p.rules.iter().enumerate() {
        if r.surface != surface {
            continue;
        }
        let o = eval_rule(p, RuleId(i as u32), &views, &mut NoTrace);
        match (r.effect, o) {
            (Effect::Deny, Outcome::True) => deny_true = true,
            (Effect::Deny, Outcome::Open(_)) => deny_open = true,
            (Effect::Allow, Outcome::True) => allow_true = true,
            (Effect::Allow, Outcome::Open(_)) => allow_open = true,
            _ => {}
        }
    }
    match (deny_true, deny_open, allow_true, allow_open) {
        (true, ..) => Verdict::Deny,
        (_, true, ..) => Verdict::Undetermined,
        (_, _, true, _) => Verdict::Allow,
        (_, _, _, true) => Verdict::Undetermined,
        _ => Verdict::Deny,
    }
}

#[test]
fn the_index_skips_other_tenants_rules_without_changing_verdicts() {
    let p = load(SHAPE);
    let eg = p.layers[0].surfaces.get(&Surface::Egress).unwrap();
    assert!(eg.allow.by_namespace.contains_key("team-a"));
    assert_eq!(eg.allow.candidates("team-b").count(), 1);
    assert_eq!(eg.allow.candidates("team-a").count(), 2);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/platform.yaml"
    );
    let example = Policy::load_file(std::path::Path::new(path)).unwrap();
    let mut checked = 0;
    for p in [&p, &example] {
        for ns in ["team-a", "team-b", "team-c", ""] {
            for url in [
                "https://partner-a.example.com/v1",
                "https://partner-b.example.com/",
                "https://files.pythonhosted.org/x",
                "http://partner-a.example.com/",
                "https://x.pypi.org:8443/",
            ] {
                let req = egress(ns, url);
                assert_eq!(p.decide(&req).verdict, unindexed(p, &req), "{ns} {url}");
                checked += 1;
            }
            for (cmd, args) in [
                ("/usr/bin/python3", &["-c", "1"][..]),
                ("/bin/sh", &["-c", "x"][..]),
            ] {
                let req = compute(ns, cmd, cmd, Some(args));
                assert_eq!(p.decide(&req).verdict, unindexed(p, &req), "{ns} {cmd}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 56);
}

// ---- the checker ----

#[test]
fn a_typo_behind_a_short_circuit_is_caught_at_load() {
    let out = errors(
        r#"
policy:
  egress:
    allow:
      - name: r
        when: host == "x" && idnetity.namespace == "a"
"#,
    );
    insta::assert_snapshot!(out);
}

#[test]
fn every_error_class_has_a_message() {
    let out = errors(
        r#"
policy:
  egress:
    allow:
      - port == "443"
      - host.startWith("api.")
      - identity.namespce == "a"
      - host.size()
      - port + 1
      - host == "a" ||
      - host.matches("(")
      - ip.inCidr("nope")
      - url in 3
    deny:
      - command == "/bin/sh"
  compute:
    max_memory: 512MB
    max_procs: 10
  storag:
    allow: []
"#,
    );
    insta::assert_snapshot!(out);
}

#[test]
fn rule_names_are_unique_within_a_file() {
    let out = errors(
        r#"
policy:
  egress:
    allow:
      - {name: same, when: host == "a"}
      - {name: same, when: host == "b"}
"#,
    );
    assert!(out.contains("rule name `same` is used twice"), "{out}");
}

#[test]
fn an_expression_in_one_surface_checks_in_another_when_it_uses_only_the_base() {
    let base = r#"identity.namespace == "a" && identity.attested && env.name == "prod" && now > timestamp("2026-01-01T00:00:00Z") && identity.labels["x"] == "y""#;
    for s in ["egress", "compute", "storage", "secret"] {
        load(&format!("policy:\n  {s}:\n    allow:\n      - '{base}'\n"));
    }
    // A surface fact is not visible elsewhere.
    let out = errors("policy:\n  storage:\n    allow: [host == \"a\"]\n");
    assert!(
        out.contains("undeclared name `host` in the storage surface"),
        "{out}"
    );
}

#[test]
fn ambiguous_sizes_are_errors() {
    for bad in ["512MB", "512mb", "1.5GiB", "-1", "lots"] {
        let out = errors(&format!("policy:\n  compute:\n    max_memory: {bad}\n"));
        assert!(out.contains("512MiB"), "{bad}: {out}");
    }
}

#[test]
fn yaml_anchors_are_refused() {
    let out = errors("policy:\n  egress:\n    allow: &a [host == \"a\"]\n    deny: *a\n");
    assert!(out.contains("anchors"), "{out}");
}

#[test]
fn allow_ranges_need_hosts() {
    let p = load("policy:\n  egress:\n    allow_ranges:\n      - {cidr: 10.20.0.0/16, hosts: [git.internal.example.com]}\n");
    assert_eq!(p.allow_ranges.len(), 1);
    let out = errors("policy:\n  egress:\n    allow_ranges:\n      - {cidr: 10.20.0.0/16}\n");
    assert!(out.contains("non-empty `hosts`"), "{out}");
}

#[test]
fn the_example_deployment_checks() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/deployment.yaml"
    );
    let p = Policy::load_file(std::path::Path::new(path)).unwrap();
    // team-b cannot reach team-a's partner; an unattested run is refused.
    assert_eq!(
        p.decide(&egress("team-b", "https://partner-a.example.com/v1"))
            .verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&egress("team-a", "https://partner-a.example.com/v1"))
            .verdict,
        Verdict::Allow
    );
    let mut r = compute(
        "team-a",
        "/usr/bin/python3",
        "/usr/bin/python3.11",
        Some(&["-c", "1"]),
    );
    assert_eq!(p.decide(&r).verdict, Verdict::Allow);
    r.identity.attested = false;
    assert_eq!(p.decide(&r).verdict, Verdict::Deny);
}

#[test]
fn label_presence_can_be_tested_without_an_error() {
    let p = load(
        r#"
policy:
  secret:
    allow:
      - has(identity.labels.team) && identity.labels.team == "a"
      - '"role" in identity.labels && identity.labels["role"] == "admin"'
"#,
    );
    let mut req = Request {
        identity: ident("team-a"),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Secret(SecretFacts {
            name: "a/x".into(),
            destination: None,
        }),
    };
    // No labels: both rules are definitely false, so a plain deny, not open.
    let d = p.decide(&req);
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(d.errors.is_empty());
    req.identity.labels.insert("team".into(), "a".into());
    assert_eq!(p.decide(&req).verdict, Verdict::Allow);
}

#[test]
fn the_same_evaluation_can_record_every_node_value() {
    use cordon_policy::decide::View;
    use cordon_policy::expr::{eval, FullTrace, Val};
    let p = load(SHAPE);
    let rule = p.rules.iter().find(|r| r.name == "partner-a").unwrap();
    let req = egress("team-b", "https://partner-a.example.com/v1");
    let view = View {
        req: &req,
        spelling: 0,
    };
    let mut trace = FullTrace::default();
    let r = eval(&rule.compiled.root, &view, &mut trace);
    assert_eq!(r, Ok(Val::Bool(false)));
    // The namespace fact was read and recorded with its value; the root too.
    let recorded: Vec<String> = trace
        .values
        .iter()
        .flatten()
        .map(|v| format!("{v:?}"))
        .collect();
    assert!(
        recorded.iter().any(|v| v.contains("team-b")),
        "{recorded:?}"
    );
    assert_eq!(
        trace.values[rule.compiled.root.id as usize],
        Some(Ok(Val::Bool(false)))
    );
}

fn ingress(sandbox_ns: &str, caller_ns: &str, port: i64, listen: &str) -> Request {
    Request {
        identity: ident(sandbox_ns),
        env: Deployment::default(),
        now: 0,
        facts: SurfaceFacts::Ingress(IngressFacts {
            port,
            listen: listen.into(),
            caller: ident(caller_ns),
        }),
    }
}

#[test]
fn ingress_is_decided_by_port_listen_and_caller_and_nothing_without_a_rule() {
    let p = load(
        "policy:\n  ingress:\n    allow:\n      - name: own\n        when: caller.namespace == identity.namespace && port == 8000 && listen == \"127.0.0.1\"\n",
    );
    assert_eq!(
        p.decide(&ingress("a", "b", 8000, "127.0.0.1")).verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&ingress("a", "a", 8001, "127.0.0.1")).verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&ingress("a", "a", 8000, "0.0.0.0")).verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&ingress("a", "a", 8000, "127.0.0.1")).verdict,
        Verdict::Allow
    );
    // A policy with no ingress section exposes nothing.
    let none =
        load("policy:\n  storage:\n    allow:\n      - name: x\n        when: mode == \"read\"\n");
    assert_eq!(
        none.decide(&ingress("a", "a", 8000, "127.0.0.1")).verdict,
        Verdict::Deny
    );
}

#[test]
fn caller_is_an_ingress_fact_only_and_misspellings_are_named() {
    let e = errors("policy:\n  storage:\n    allow:\n      - name: x\n        when: caller.namespace == \"a\"\n");
    assert!(e.contains("caller"), "{e}");
    let e = errors("policy:\n  ingress:\n    allow:\n      - name: x\n        when: caller.nmespace == \"a\"\n");
    assert!(e.contains("did you mean `caller.namespace`"), "{e}");
    let e =
        errors("policy:\n  ingress:\n    allow:\n      - name: x\n        when: host == \"a\"\n");
    assert!(e.contains("host"), "{e}");
}
