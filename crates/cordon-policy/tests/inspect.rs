//! Issue 30: what an inspected https request shows (`query`, `headers`,
//! and `url`, `method`, `path`), and where a brokered secret may go
//! (`destination`). Negative first: what each stays undetermined for.
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

fn req(facts: SurfaceFacts) -> Request {
    Request {
        identity: Identity {
            namespace: "team-a".into(),
            ..Identity::default()
        },
        env: Deployment::default(),
        now: 0,
        facts,
    }
}

fn headers(hs: &[(&str, &str)]) -> Vec<(String, String)> {
    hs.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn egress(url: &str, method: &str, hs: &[(&str, &str)], inspected: bool) -> Request {
    req(SurfaceFacts::Egress(
        EgressFacts::for_request(url, method, &headers(hs), inspected).unwrap(),
    ))
}

// ---- the new egress facts ----

const HEADERS: &str = r#"
policy:
  egress:
    allow:
      - name: api
        when: host == "api.example.com" && method == "POST" && path.startsWith("/v1/")
    deny:
      - name: no-debug
        when: '"debug" in query && query.debug.exists(v, v == "1")'
      - name: no-cookies
        when: '"cookie" in headers'
"#;

#[test]
fn headers_and_query_rules_are_undetermined_for_an_uninspected_https_request() {
    let p = load(HEADERS);
    let r = egress(
        "https://api.example.com/v1/x?debug=1",
        "POST",
        &[("Cookie", "a=b")],
        false,
    );
    let SurfaceFacts::Egress(e) = &r.facts else {
        unreachable!()
    };
    assert_eq!(
        e,
        &EgressFacts::from_url("https://api.example.com/v1/x?debug=1").unwrap(),
        "uninspected https is exactly from_url"
    );
    assert!(e.query.is_none() && e.headers.is_none() && e.method.is_none());
    let d = p.decide(&r);
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert!(d.unknown.contains(&Fact::Query), "{d:?}");
    assert!(d.unknown.contains(&Fact::Headers), "{d:?}");
}

#[test]
fn headers_and_query_rules_decide_for_an_inspected_request() {
    let p = load(HEADERS);
    let ok = egress(
        "https://api.example.com/v1/x?debug=0&debug=2",
        "post",
        &[("Accept", "x")],
        true,
    );
    assert_eq!(p.decide(&ok).verdict, Verdict::Allow);
    let debug = egress(
        "https://api.example.com/v1/x?a=b&debug=2&debug=1",
        "POST",
        &[],
        true,
    );
    let d = p.decide(&debug);
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(p.rule(d.deciding[0]).name, "no-debug");
    let cookie = egress(
        "https://api.example.com/v1/x",
        "POST",
        &[("COOKIE", "a=b")],
        true,
    );
    let d = p.decide(&cookie);
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(p.rule(d.deciding[0]).name, "no-cookies");
    // The method and path decide too: GET and another path are not allowed.
    for (url, m) in [
        ("https://api.example.com/v1/x", "GET"),
        ("https://api.example.com/v2/x", "POST"),
    ] {
        let d = p.decide(&egress(url, m, &[], true));
        assert!(d.no_allow_matched(), "{url} {m}: {d:?}");
    }
    // Plain http: the proxy reads the request, so they are known there too.
    let d = p.decide(&egress(
        "http://api.example.com/v1/x",
        "POST",
        &[("cookie", "1")],
        false,
    ));
    assert_eq!(d.verdict, Verdict::Deny);
}

#[test]
fn for_request_keeps_url_canonical_and_without_the_query() {
    let f = EgressFacts::for_request(
        "https://API.example.com:443/a/./b?x=%41&y",
        "get",
        &headers(&[("X-A", "1"), ("x-a", "2")]),
        true,
    )
    .unwrap();
    assert_eq!(f.url.as_deref(), Some("https://api.example.com/a/b"));
    assert_eq!(f.method.as_deref(), Some("GET"));
    assert_eq!(f.path.as_deref(), Some("/a/b"));
    let q = f.query.unwrap();
    assert_eq!(q["x"], ["A"]);
    assert_eq!(q["y"], [""]);
    assert_eq!(f.headers.unwrap()["x-a"], "1, 2");
    assert!(f.ip.is_none());
    // What cannot be read unambiguously is refused, not guessed.
    for (url, m, h) in [
        ("https://x.example/?a=%zz", "GET", vec![]),
        ("https://x.example/", "GE T", vec![]),
        ("https://x.example/", "GET", headers(&[("a b", "1")])),
        ("https://x.example/", "GET", headers(&[("a", "1\r\nb: 2")])),
    ] {
        assert!(
            EgressFacts::for_request(url, m, &h, true).is_err(),
            "{url} {m} {h:?}"
        );
    }
}

#[test]
fn headers_and_query_type_check_as_maps() {
    let e = errors(
        r#"
policy:
  egress:
    allow:
      - headers == "x"
      - query.a == "x"
"#,
    );
    assert!(e.contains("p.yaml:5:"), "{e}");
    assert!(e.contains("p.yaml:6:"), "{e}");
    // ... and as what they are.
    load(
        r#"
policy:
  egress:
    allow:
      - headers["user-agent"].startsWith("curl/") && size(query) < 3
      - query.q.all(v, v.size() < 10) && has(headers.authorization)
"#,
    );
}

#[test]
fn the_wire_form_carries_the_new_facts_and_omits_unknown_ones() {
    let f = EgressFacts::from_url("https://x.example/").unwrap();
    let s = serde_json::to_string(&f).unwrap();
    assert!(!s.contains("query") && !s.contains("headers"), "{s}");
    let f = EgressFacts::for_request(
        "http://x.example/?a=1",
        "GET",
        &headers(&[("A", "b")]),
        false,
    )
    .unwrap();
    let back: EgressFacts = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f);
}

// ---- a secret's destination ----

const SECRET: &str = r#"
policy:
  secret:
    allow:
      - name: openai-brokered
        when: >-
          secret.name == "openai/key" && destination.host == "api.openai.com"
          && destination.header == "authorization" && destination.method == "POST"
          && destination.path.startsWith("/v1/")
    deny:
      - name: never-to-plain-hosts
        when: destination.host.endsWith(".internal")
"#;

fn secret(name: &str, dest: Option<Destination>) -> Request {
    req(SurfaceFacts::Secret(SecretFacts {
        name: name.into(),
        destination: dest,
    }))
}

fn dest(host: &str, method: &str, path: &str, header: &str) -> Destination {
    Destination {
        host: host.into(),
        method: Some(method.into()),
        path: Some(path.into()),
        header: Some(header.into()),
    }
}

#[test]
fn a_destination_rule_is_undetermined_where_the_secret_is_granted() {
    let p = load(SECRET);
    let d = p.decide(&secret("openai/key", None));
    assert_eq!(d.verdict, Verdict::Undetermined);
    assert!(d.unknown.contains(&Fact::DestinationHost), "{d:?}");
    assert!(!d.is_allowed(), "undetermined is not allowed");
}

#[test]
fn a_destination_rule_decides_where_the_secret_is_substituted() {
    let p = load(SECRET);
    let ok = dest("api.openai.com", "POST", "/v1/chat", "authorization");
    assert_eq!(
        p.decide(&secret("openai/key", Some(ok.clone()))).verdict,
        Verdict::Allow
    );
    for bad in [
        dest("evil.example", "POST", "/v1/chat", "authorization"),
        dest("api.openai.com", "GET", "/v1/chat", "authorization"),
        dest("api.openai.com", "POST", "/v2/chat", "authorization"),
        dest("api.openai.com", "POST", "/v1/chat", "x-debug"),
    ] {
        let d = p.decide(&secret("openai/key", Some(bad.clone())));
        assert!(d.no_allow_matched(), "{bad:?}: {d:?}");
    }
    let d = p.decide(&secret(
        "openai/key",
        Some(dest("db.internal", "POST", "/v1/", "authorization")),
    ));
    assert_eq!(d.verdict, Verdict::Deny);
    // Another secret is not allowed there.
    let d = p.decide(&secret("other/key", Some(ok)));
    assert!(d.no_allow_matched(), "{d:?}");
    // A field the substitution leaves unbound is unknown, never "".
    let mut partial = dest("api.openai.com", "POST", "/v1/chat", "x");
    partial.header = None;
    let d = p.decide(&secret("openai/key", Some(partial)));
    assert_eq!(d.verdict, Verdict::Undetermined);
}

#[test]
fn destination_is_secret_vocabulary_only() {
    let e = errors(
        r#"
policy:
  egress:
    allow: [destination.host == "x"]
  secret:
    allow:
      - destination.hots == "x"
      - destination == "x"
"#,
    );
    assert!(
        e.contains("undeclared name `destination` in the egress surface"),
        "{e}"
    );
    assert!(e.contains("did you mean `destination.host`?"), "{e}");
    assert!(e.contains("`destination` is a record"), "{e}");
}

// ---- egress.inspect ----

/// A certificate-shaped PEM (its base64 decodes to a DER SEQUENCE); the
/// proxy parses it, the loader only checks its shape.
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n";

fn load_files(files: &[(&str, &str)]) -> Result<Policy, Diagnostics> {
    let mut mem = resolve::MemoryFiles::default();
    for (n, t) in files {
        mem.0.insert(n.to_string(), t.to_string());
    }
    let (top, text) = files[0];
    Policy::load_with(top, text, &mem)
}

const ROOT: &str = r#"
policy:
  extends: [./platform.yaml, ./tenant.yaml]
"#;

const PLATFORM: &str = r#"
policy:
  egress:
    inspect:
      - API.Example.com.
      - {host: "*.corp.example", ca: ./corp-ca.pem}
    allow:
      - host == "api.example.com" && method == "GET"
"#;

#[test]
fn the_root_names_hosts_and_trusted_roots_for_them_only() {
    let p = load_files(&[
        ("top.yaml", ROOT),
        ("platform.yaml", PLATFORM),
        ("tenant.yaml", "policy: {}\n"),
        ("corp-ca.pem", PEM),
    ])
    .unwrap_or_else(|d| panic!("{}", d.render()));
    assert!(p.inspects_any());
    let api = p.inspection("api.example.com").unwrap();
    assert_eq!(api.host, "api.example.com");
    assert!(api.roots_pem.is_none());
    assert_eq!((&*api.file, api.line), ("platform.yaml", 5));
    let git = p.inspection("git.corp.example").unwrap();
    assert_eq!(git.host, "*.corp.example");
    assert_eq!(git.roots_pem.as_deref(), Some(PEM));
    // Strictly under the suffix, and nothing else.
    assert!(p.inspection("corp.example").is_none());
    assert!(p.inspection("evilcorp.example").is_none());
    assert!(p.inspection("example.com").is_none());
    assert!(p.inspection("x.api.example.com").is_none());
    let plain = load("policy: {egress: {allow: [\"true\"]}}\n");
    assert!(!plain.inspects_any());
    assert!(plain.inspection("api.example.com").is_none());
}

#[test]
fn a_later_layer_may_add_hosts_to_inspect() {
    let tenant = r#"
policy:
  applies_to: identity.namespace == "team-a"
  egress:
    inspect: [uploads.example.net, "*.api.corp.example"]
"#;
    let p = load_files(&[
        ("top.yaml", ROOT),
        ("platform.yaml", PLATFORM),
        ("tenant.yaml", tenant),
        ("corp-ca.pem", PEM),
    ])
    .unwrap_or_else(|d| panic!("{}", d.render()));
    let up = p.inspection("uploads.example.net").unwrap();
    assert_eq!((&*up.file, up.line), ("tenant.yaml", 5));
    assert!(up.roots_pem.is_none());
    // Two wildcards name it; the root's `ca` entry is the one that holds.
    let deep = p.inspection("x.api.corp.example").unwrap();
    assert_eq!(deep.host, "*.corp.example");
    assert!(deep.roots_pem.is_some());
}

#[test]
fn an_exact_entry_wins_over_a_wildcard() {
    let p = load(
        r#"
policy:
  egress:
    inspect: ["*.example.com", git.example.com]
"#,
    );
    assert_eq!(
        p.inspection("git.example.com").unwrap().host,
        "git.example.com"
    );
    assert_eq!(p.inspection("x.example.com").unwrap().host, "*.example.com");
}

#[test]
fn a_later_layer_cannot_add_trust() {
    let tenant = r#"
policy:
  egress:
    inspect:
      - {host: uploads.example.net, ca: ./corp-ca.pem}
"#;
    let e = load_files(&[
        ("top.yaml", ROOT),
        ("platform.yaml", PLATFORM),
        ("tenant.yaml", tenant),
        ("corp-ca.pem", PEM),
    ])
    .unwrap_err()
    .render();
    assert!(e.contains("tenant.yaml:5:41"), "{e}");
    assert!(e.contains("only the root layer may add trust"), "{e}");
}

#[test]
fn a_missing_or_broken_ca_file_is_refused_where_it_is_named() {
    for (pem, why) in [
        (None, "cannot be read"),
        (Some(""), "holds no `-----BEGIN CERTIFICATE-----` block"),
        (
            Some("-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n"),
            "not base64",
        ),
    ] {
        let mut files = vec![
            ("top.yaml", ROOT),
            ("platform.yaml", PLATFORM),
            ("tenant.yaml", "policy: {}\n"),
        ];
        if let Some(pem) = pem {
            files.push(("corp-ca.pem", pem));
        }
        let e = load_files(&files).unwrap_err().render();
        assert!(e.contains("platform.yaml:6:38"), "{e}");
        assert!(e.contains("the `ca` file `./corp-ca.pem`"), "{e}");
        assert!(e.contains(why), "{why}: {e}");
        assert!(e.contains("help: "), "{e}");
    }
}

#[test]
fn inspect_entries_are_checked_like_the_allowlist() {
    let e = errors(
        r#"
policy:
  egress:
    inspect:
      - 10.0.0.1
      - "*.com"
      - "a.*.example"
      - {host: x.example, cert: ./ca.pem}
      - {ca: ./ca.pem}
      - dup.example
      - DUP.example.
"#,
    );
    for needle in [
        "p.yaml:5:9: error: `10.0.0.1` cannot be inspected",
        "p.yaml:6:9: error: `*.com` cannot be inspected",
        "p.yaml:7:9: error: `a.*.example` cannot be inspected",
        "unknown key `cert` in an `inspect` entry",
        "an `inspect` entry needs a `host`",
        "p.yaml:11:9: error: `dup.example` is inspected twice",
    ] {
        assert!(e.contains(needle), "missing {needle:?} in\n{e}");
    }
    // A policy loaded from a string reads no files.
    let e = errors("policy: {egress: {inspect: [{host: x.example, ca: ./ca.pem}]}}\n");
    assert!(e.contains("cannot be read"), "{e}");
}

#[test]
fn the_ca_file_is_part_of_the_digest() {
    let files = |pem: &'static str| {
        vec![
            ("top.yaml", ROOT),
            ("platform.yaml", PLATFORM),
            ("tenant.yaml", "policy: {}\n"),
            ("corp-ca.pem", pem),
        ]
    };
    let other = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIV\n-----END CERTIFICATE-----\n";
    let a = load_files(&files(PEM)).unwrap().digest;
    let b = load_files(&files(other)).unwrap().digest;
    assert_ne!(a, b);
}

// ---- cases and explain see what the proxy sees ----

const INSPECTING: &str = r#"
policy:
  egress:
    inspect: [api.example.com]
    allow:
      - name: read-only-api
        when: host == "api.example.com" && method == "GET" && path.startsWith("/v1/")
      - name: other-hosts
        when: host == "other.example.com"
    deny:
      - name: no-tokens-in-queries
        when: '"token" in query'
      - name: no-debug-header
        when: '"x-debug" in headers && headers["x-debug"] == "1"'

"#;

const SUITE: &str = r#"
tests:
  - name: GET under /v1/ on the inspected host
    egress: {url: "https://api.example.com/v1/items?page=2"}
    expect: allow
  - name: POST on the inspected host
    egress: {url: "https://api.example.com/v1/items", method: post}
    expect: deny
  - name: another path on the inspected host
    egress: {url: "https://api.example.com/admin"}
    expect: deny
  - name: a token in the query
    egress: {url: "https://api.example.com/v1/x?token=abc"}
    expect: deny
    rule: no-tokens-in-queries
  - name: the debug header
    egress:
      url: https://api.example.com/v1/x
      headers: {X-Debug: "1", Accept: [a, b]}
    expect: deny
    rule: no-debug-header
  - name: an uninspected host is undetermined on the query rule
    egress: {url: "https://other.example.com/v1/"}
    expect: deny
"#;

#[test]
fn a_case_for_an_inspected_https_host_decides_by_method_and_path() {
    let p = load(INSPECTING);
    let cases = cases::load_str("t.yaml", SUITE, &p).unwrap_or_else(|d| panic!("{}", d.render()));
    let results: Vec<_> = cases.iter().map(|c| cases::run(&p, c)).collect();
    for (c, r) in cases.iter().zip(&results) {
        assert!(r.passed, "{}: {:?}", c.name, r.explanation.decision);
    }
    // The allow and the method/path denials are decided, not undetermined.
    let verdicts: Vec<_> = results
        .iter()
        .map(|r| r.explanation.decision.verdict)
        .collect();
    assert_eq!(verdicts[0], Verdict::Allow);
    assert_eq!(verdicts[1], Verdict::Deny);
    assert_eq!(verdicts[2], Verdict::Deny);
    assert_eq!(verdicts[5], Verdict::Undetermined);
    // The case is built exactly as the proxy will build it.
    let SurfaceFacts::Egress(e) = &cases[0].request.facts else {
        unreachable!()
    };
    let proxy =
        EgressFacts::for_request("https://api.example.com/v1/items?page=2", "GET", &[], true)
            .unwrap();
    assert_eq!(e, &proxy);
    let SurfaceFacts::Egress(e) = &cases[4].request.facts else {
        unreachable!()
    };
    assert_eq!(e.headers.as_ref().unwrap()["accept"], "a, b");
}

#[test]
fn a_case_stating_headers_for_an_uninspected_https_host_is_refused() {
    let p = load(INSPECTING);
    let err = cases::load_one_str(
        "c.yaml",
        "egress:\n  url: https://other.example.com/\n  headers: {accept: x}\n",
        &p,
    )
    .unwrap_err()
    .render();
    assert!(err.contains("c.yaml:3:13"), "{err}");
    assert!(
        err.contains("does not inspect `other.example.com`"),
        "{err}"
    );
    assert!(err.contains("egress.inspect"), "{err}");
    // The same case is fine where the policy inspects the host.
    cases::load_one_str(
        "c.yaml",
        "egress:\n  url: https://api.example.com/\n  headers: {accept: x}\n  method: PUT\n",
        &p,
    )
    .unwrap();
}

#[test]
fn a_secret_case_may_give_a_destination() {
    let p = load(SECRET);
    let at_acquire =
        cases::load_one_str("c.yaml", "secret: {secret: {name: openai/key}}\n", &p).unwrap();
    assert_eq!(p.decide(&at_acquire).verdict, Verdict::Undetermined);
    let text = "secret:\n  secret: {name: openai/key}\n  destination: {host: API.openai.com, method: post, path: /v1/chat, header: Authorization}\n";
    let r = cases::load_one_str("c.yaml", text, &p).unwrap();
    assert_eq!(p.decide(&r).verdict, Verdict::Allow);
    let SurfaceFacts::Secret(s) = &r.facts else {
        unreachable!()
    };
    assert_eq!(
        s.destination,
        Some(dest("api.openai.com", "POST", "/v1/chat", "authorization"))
    );
    for (bad, needle) in [
        (
            "destination: {method: POST}",
            "a `destination` needs `host`",
        ),
        (
            "destination: {host: x.example, verb: GET}",
            "unknown key `verb` in `destination`",
        ),
        (
            "destination: {host: x.example, path: /a%2Fb}",
            "encoded `/`",
        ),
    ] {
        let text = format!("secret:\n  secret: {{name: a/b}}\n  {bad}\n");
        let err = cases::load_one_str("c.yaml", &text, &p)
            .unwrap_err()
            .render();
        assert!(err.contains(needle), "{bad}: {err}");
        assert!(err.contains("c.yaml:3:"), "{bad}: {err}");
    }
}
