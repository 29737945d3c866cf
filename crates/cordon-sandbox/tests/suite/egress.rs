//! Allowlist entry syntax: every malformed form is refused.

use cordon_sandbox::egress::HostPattern;
use cordon_sandbox::EgressEntry;

#[test]
fn each_malformed_entry_is_refused() {
    let cases = [
        "",
        " pypi.org",
        "https://pypi.org",
        "user@pypi.org",
        "user:pw@pypi.org",
        "pypi.org/simple",
        "pypi.org?x=1",
        "10.0.0.1",
        "10.0.0.1:443",
        "[::1]",
        "[::1]:443",
        "::1",
        "169.254.169.254.",
        "2130706433",
        "pypi.org:",
        "pypi.org:0",
        "pypi.org:65536",
        "pypi.org:+443",
        "pypi.org:https",
        "pypi.org:443:443",
        "*",
        "*.",
        "*.com",
        "*pypi.org",
        "a*.pypi.org",
        "files.*.org",
        "*.*.pypi.org",
        "pypi.*",
        "-bad-.example.com",
        "exa mple.com",
        "a..b.com",
    ];
    let mut report = String::new();
    for raw in cases {
        match EgressEntry::parse(raw) {
            Ok(e) => panic!("{raw:?} was accepted as {e}"),
            Err(e) => report.push_str(&format!("{raw:?}\n  {e}\n")),
        }
    }
    insta::assert_snapshot!("malformed_entries", report);
}

#[test]
fn well_formed_entries_are_canonical() {
    for (raw, want) in [
        ("pypi.org", "pypi.org:443"),
        ("PyPI.org.", "pypi.org:443"),
        ("pypi.org:8443", "pypi.org:8443"),
        ("*.pythonhosted.org", "*.pythonhosted.org:443"),
        (
            "*.Files.PythonHosted.org:443",
            "*.files.pythonhosted.org:443",
        ),
        ("münchen.example", "xn--mnchen-3ya.example:443"),
    ] {
        assert_eq!(EgressEntry::parse(raw).unwrap().to_string(), want, "{raw}");
    }
    let w = EgressEntry::parse("*.example.com").unwrap();
    assert_eq!(w.host(), &HostPattern::Subdomains("example.com".into()));
    assert_eq!(w.exact_host(), None);
    assert!(w.matches("deep.sub.example.com", 443));
    assert!(!w.matches("example.com", 443), "never the apex");
}
