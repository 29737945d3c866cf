//! The classifier's tests: every table row checked at its edges, embedded
//! forms unwrapped, allow ranges opened only where named, the proxy's own
//! listeners and the host's addresses never.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// Every row of every table: its range and the kind a denial inside it
/// must have when this row is the most specific.
fn all_rows() -> Vec<(IpNet, Option<DenialKind>)> {
    let mut v = Vec::new();
    for r in SPECIAL_V4.iter().chain(SPECIAL_V6) {
        v.push((r.net, None));
    }
    for r in METADATA {
        v.push((r.net, Some(DenialKind::Metadata)));
    }
    for e in EMBEDDING {
        v.push((e.net, Some(DenialKind::Embedding)));
    }
    v
}

fn to_u128(ip: IpAddr) -> (u128, u128) {
    match ip {
        IpAddr::V4(a) => (u32::from(a) as u128, u32::MAX as u128),
        IpAddr::V6(a) => (u128::from(a), u128::MAX),
    }
}

fn from_u128(like: IpAddr, n: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

fn step(a: IpAddr, up: bool) -> Option<IpAddr> {
    let (n, max) = to_u128(a);
    let m = if up {
        n.checked_add(1).filter(|m| *m <= max)?
    } else {
        n.checked_sub(1)?
    };
    Some(from_u128(a, m))
}

fn in_any_row(a: IpAddr) -> bool {
    all_rows().iter().any(|(n, _)| n.contains(&a))
}

fn denied(s: &str) -> Denial {
    special(ip(s)).unwrap_or_else(|| panic!("{s} should be denied"))
}

fn allowed(s: &str) {
    if let Some(d) = special(ip(s)) {
        panic!("{s} should be allowed, got: {d}");
    }
}

#[test]
fn rows_are_networks_with_names_and_sources() {
    for (n, _) in all_rows() {
        assert_eq!(n.addr(), n.network(), "{n} has host bits set");
    }
    for r in SPECIAL_V4.iter().chain(SPECIAL_V6).chain(METADATA) {
        assert!(!r.what.is_empty() && !r.source.is_empty(), "{}", r.net);
    }
    for r in SPECIAL_V4 {
        assert!(r.net.addr().is_ipv4());
    }
    for r in SPECIAL_V6 {
        assert!(r.net.addr().is_ipv6());
    }
    for e in EMBEDDING {
        assert!(e.net.addr().is_ipv6() && !e.what.is_empty() && !e.source.is_empty());
    }
    // No range twice: most-specific lookup must never face a tie.
    let rows = all_rows();
    for (i, (a, _)) in rows.iter().enumerate() {
        for (b, _) in &rows[i + 1..] {
            assert_ne!(a, b, "{a} appears twice");
        }
    }
    for r in METADATA {
        assert_eq!(r.net.prefix_len(), r.net.max_prefix_len(), "{}", r.net);
        assert_eq!(r.what, "cloud metadata");
    }
}

/// Each row's first and last address are denied, by that row or a
/// narrower one inside it; the address just outside on each side is
/// denied exactly when some other row holds it.
#[test]
fn every_row_edges() {
    let mut checked = 0;
    for (n, kind) in all_rows() {
        for inside in [n.network(), n.broadcast()] {
            let d = special(inside).unwrap_or_else(|| panic!("{inside} (edge of {n}) allowed"));
            checked += 1;
            match kind {
                Some(k) if !(n == COMPATIBLE && to_u128(inside).0 <= 1) => {
                    assert_eq!(d.kind, k, "{inside} in {n}: {d}");
                    assert_eq!(d.range, n, "{inside} in {n}: {d}");
                }
                _ => assert!(
                    n.contains(&d.range),
                    "{inside} in {n} named by a wider {}",
                    d.range
                ),
            }
            // An IPv4 edge, IPv4-mapped, is an embedding naming it.
            if let IpAddr::V4(v4) = inside {
                let mapped = IpAddr::V6(v4.to_ipv6_mapped());
                let d = special(mapped).unwrap();
                assert_eq!(d.kind, DenialKind::Embedding);
                assert_eq!(d.embedded, Some(v4));
                assert!(d.embedded_denial.is_some(), "{mapped}: {d}");
            }
        }
        for outside in [step(n.network(), false), step(n.broadcast(), true)]
            .into_iter()
            .flatten()
        {
            assert!(!n.contains(&outside));
            checked += 1;
            match special(outside) {
                Some(d) => {
                    assert!(in_any_row(outside), "{outside} denied by no row: {d}");
                    assert_ne!(d.range, n);
                }
                None => assert!(!in_any_row(outside), "{outside} in a row but allowed"),
            }
        }
    }
    assert!(checked > 250, "{checked}");
}

#[test]
fn ipv4_spot_checks() {
    for s in [
        "0.0.0.0",
        "0.255.255.255",
        "10.0.0.0",
        "10.255.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "127.0.0.1",
        "127.255.255.255",
        "169.254.0.0",
        "169.254.255.255",
        "172.16.0.0",
        "172.31.255.255",
        "192.0.0.0",
        "192.0.0.9",
        "192.0.0.255",
        "192.0.2.1",
        "192.31.196.1",
        "192.52.193.1",
        "192.88.99.1",
        "192.168.0.0",
        "192.168.255.255",
        "192.175.48.1",
        "198.18.0.0",
        "198.19.255.255",
        "198.51.100.7",
        "203.0.113.255",
        "224.0.0.0",
        "239.255.255.255",
        "240.0.0.0",
        "255.255.255.254",
        "255.255.255.255",
        "168.63.129.16",
    ] {
        denied(s);
    }
    for s in [
        "1.0.0.0",
        "1.1.1.1",
        "8.8.8.8",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.1",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.1",
        "192.0.1.255",
        "192.0.3.0",
        "192.88.98.255",
        "192.88.100.0",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "223.255.255.255",
        "168.63.129.15",
        "168.63.129.17",
    ] {
        allowed(s);
    }
    assert_eq!(denied("127.0.0.1").range, net("127.0.0.0/8"));
    assert_eq!(denied("172.31.255.255").range, net("172.16.0.0/12"));
    assert_eq!(denied("100.127.255.255").range, net("100.64.0.0/10"));
    assert_eq!(denied("198.19.255.255").range, net("198.18.0.0/15"));
    assert_eq!(denied("0.0.0.0").range, net("0.0.0.0/32"));
    assert_eq!(denied("0.0.0.1").range, net("0.0.0.0/8"));
    assert_eq!(denied("192.0.0.8").range, net("192.0.0.8/32"));
    assert_eq!(denied("192.0.0.7").range, net("192.0.0.0/29"));
    assert_eq!(denied("192.0.0.100").range, net("192.0.0.0/24"));
    assert_eq!(denied("224.0.0.0").what, "multicast");
    assert_eq!(denied("10.1.2.3").kind, DenialKind::Special);
}

#[test]
fn ipv6_spot_checks() {
    for s in [
        "::",
        "::1",
        "fe80::1",
        "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fc00::",
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fec0::1",
        "ff02::1",
        "ff00::",
        "2001:db8::1",
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        "3fff::1",
        "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
        "5f00::1",
        "100::1",
        "100:0:0:1::5",
        "2001:2::1",
        "2001:3::1",
        "2001:4:112::1",
        "2001:20::1",
        "2001:1ff:ffff::",
        "2620:4f:8000::1",
        "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "4000::",
        "8000::1",
        "fe00::",
        "::2:0:0:0",
    ] {
        denied(s);
    }
    for s in [
        "2606:4700::1111",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2000::",
        "2001:200::",
        "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db9::",
        "3fff:1000::",
        "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "2003::",
        "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
        "2620:4f:8001::",
        "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    ] {
        allowed(s);
    }
    assert_eq!(
        denied("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff").what,
        "reserved by IETF"
    );
    assert_eq!(denied("fc00::").what, "unique-local");
    assert_eq!(denied("::1").what, "loopback");
    assert_eq!(denied("::").what, "unspecified");
    assert_eq!(denied("2001:20::1").what, "ORCHIDv2");
    assert_eq!(denied("2001:1::1").range, net("2001:1::1/128"));
    assert_eq!(denied("2001:1::4").range, net("2001::/23"));
}

#[test]
fn metadata_is_named() {
    for s in [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.169.123",
        "169.254.170.23",
        "100.100.100.200",
        "192.0.0.192",
        "168.63.129.16",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "fd00:ec2::123",
    ] {
        let d = denied(s);
        assert_eq!(d.kind, DenialKind::Metadata, "{s}");
        assert_eq!(d.what, "cloud metadata");
        assert_eq!(d.range, IpNet::from(ip(s)));
    }
    assert_eq!(denied("169.254.169.253").kind, DenialKind::Special);
}

#[test]
fn embedded_forms_are_unwrapped() {
    let d = denied("::ffff:127.0.0.1");
    assert_eq!(
        (d.kind, d.embedded),
        (DenialKind::Embedding, Some(Ipv4Addr::LOCALHOST))
    );
    assert_eq!(d.range, net("::ffff:0:0/96"));
    assert_eq!(
        d.embedded_denial.as_ref().unwrap().range,
        net("127.0.0.0/8")
    );

    let d = denied("::ffff:8.8.8.8");
    assert_eq!(
        (d.kind, d.embedded),
        (DenialKind::Embedding, Some(Ipv4Addr::new(8, 8, 8, 8)))
    );
    assert!(d.embedded_denial.is_none());

    let d = denied("64:ff9b::a9fe:a9fe");
    assert_eq!(d.range, net("64:ff9b::/96"));
    assert_eq!(d.embedded, Some(Ipv4Addr::new(169, 254, 169, 254)));
    assert_eq!(
        d.embedded_denial.as_ref().unwrap().kind,
        DenialKind::Metadata
    );
    assert!(d.to_string().contains("169.254.169.254"), "{d}");

    let d = denied("64:ff9b:1::7f00:1");
    assert_eq!(d.range, net("64:ff9b:1::/48"));
    assert_eq!(d.embedded, Some(Ipv4Addr::LOCALHOST));

    let d = denied("2002:7f00:1::");
    assert_eq!(d.range, net("2002::/16"));
    assert_eq!(d.embedded, Some(Ipv4Addr::LOCALHOST));
    let d = denied("2002:808:808:1::1");
    assert_eq!(d.embedded, Some(Ipv4Addr::new(8, 8, 8, 8)));

    // Teredo: server 65.54.227.120, client 127.0.0.1 inverted.
    let d = denied("2001:0:4136:e378:8000:63bf:80ff:fffe");
    assert_eq!(d.range, net("2001::/32"));
    assert_eq!(d.what, "Teredo");
    assert_eq!(d.embedded, Some(Ipv4Addr::LOCALHOST));
    assert_eq!(d.embedded_denial.as_ref().unwrap().what, "loopback");

    // IPv4-compatible, but not :: and ::1.
    let d = denied("::7f00:1");
    assert_eq!(
        (d.kind, d.embedded),
        (DenialKind::Embedding, Some(Ipv4Addr::LOCALHOST))
    );
    let d = denied("::2");
    assert_eq!(
        (d.kind, d.embedded),
        (DenialKind::Embedding, Some(Ipv4Addr::new(0, 0, 0, 2)))
    );
    assert_eq!(denied("::1").kind, DenialKind::Special);
    assert_eq!(denied("::").kind, DenialKind::Special);
    // Just outside ::ffff:0:0/96 and ::/96.
    assert_eq!(denied("::1:0:0:0").kind, DenialKind::Special);
    assert_eq!(denied("::1:0:0").kind, DenialKind::Special);
}

#[test]
fn display_is_one_line_naming_the_address() {
    let d = denied("127.0.0.1");
    let s = d.to_string();
    assert!(
        s.starts_with("127.0.0.1 is in 127.0.0.0/8 (loopback; IANA IPv4 special-purpose registry"),
        "{s}"
    );
    assert!(!s.contains('\n'));
    let s = denied("::ffff:127.0.0.1").to_string();
    assert!(
        s.contains("it embeds 127.0.0.1, in 127.0.0.0/8 (loopback)"),
        "{s}"
    );
    let s = denied("::ffff:8.8.8.8").to_string();
    assert!(s.contains("never dialled"), "{s}");
    let c = Classifier::with_own(vec![], vec![]);
    let s = c.check(sock("[::1]:22"), "x", &[]).unwrap_err().to_string();
    assert!(s.starts_with("[::1]:22 is in ::1/128 (loopback"), "{s}");
}

fn range(cidr: &str, hosts: &[&str]) -> AllowRange {
    AllowRange {
        cidr: net(cidr),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
    }
}

#[test]
fn allow_ranges_open_for_named_hosts_only() {
    let c = Classifier::with_own(vec![], vec![sock("127.0.0.1:3128")]);
    let allow = [
        range("127.0.0.0/8", &["test.local"]),
        range("::ffff:0:0/96", &["test.local"]),
    ];
    assert_eq!(
        c.check(sock("127.0.0.1:8080"), "test.local", &allow),
        Ok(())
    );
    assert_eq!(c.check(sock("127.9.9.9:80"), "test.local", &allow), Ok(()));
    let d = c
        .check(sock("127.0.0.1:8080"), "other.local", &allow)
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::Special);
    assert_eq!(d.port, Some(8080));
    // Not a prefix or case-insensitive match: names are canonical.
    assert!(c
        .check(sock("127.0.0.1:8080"), "test.loca", &allow)
        .is_err());
    assert!(c
        .check(sock("127.0.0.1:8080"), "", &[range("127.0.0.0/8", &[""])])
        .is_err());
    // Outside the cidr.
    assert!(c.check(sock("10.0.0.1:80"), "test.local", &allow).is_err());
    // Never an embedding form, even with a range naming it.
    let d = c
        .check(sock("[::ffff:127.0.0.1]:8080"), "test.local", &allow)
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::Embedding);
    // Never the proxy itself.
    let d = c
        .check(sock("127.0.0.1:3128"), "test.local", &allow)
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::ProxyItself);
    // Nothing opens nothing.
    assert_eq!(c.check(sock("8.8.8.8:443"), "dns.google", &[]), Ok(()));
}

#[test]
fn metadata_opens_only_for_a_range_inside_it() {
    let c = Classifier::with_own(vec![], vec![]);
    let broad = [range("169.254.0.0/16", &["dev.local"])];
    assert_eq!(c.check(sock("169.254.1.1:80"), "dev.local", &broad), Ok(()));
    let d = c
        .check(sock("169.254.169.254:80"), "dev.local", &broad)
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::Metadata);
    let exact = [range("169.254.169.254/32", &["imds.local"])];
    assert_eq!(
        c.check(sock("169.254.169.254:80"), "imds.local", &exact),
        Ok(())
    );
    let d = c
        .check(sock("168.63.129.16:80"), "x", &[range("0.0.0.0/0", &["x"])])
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::Metadata);
}

#[test]
fn proxy_itself_is_never_opened() {
    let c = Classifier::with_own(
        vec![ip("10.1.2.3")],
        vec![sock("0.0.0.0:3128"), sock("[fd00::7]:8080")],
    );
    let all = [range("0.0.0.0/0", &["h"]), range("::/0", &["h"])];
    for s in [
        "10.1.2.3:3128",
        "127.0.0.5:3128",
        "0.0.0.0:3128",
        "[::1]:3128",
        "[::]:3128",
        "[fd00::7]:8080",
    ] {
        let d = c.check(sock(s), "h", &all).unwrap_err();
        assert_eq!(d.kind, DenialKind::ProxyItself, "{s}");
    }
    // Another port, or an address that is not local, is not the proxy.
    assert_eq!(c.check(sock("10.1.2.3:3129"), "h", &all), Ok(()));
    assert_eq!(c.check(sock("8.8.8.8:3128"), "h", &all), Ok(()));
    assert_eq!(c.check(sock("[fd00::8]:8080"), "h", &all), Ok(()));
    let d = c.check(sock("[fd00::8]:8080"), "h", &[]).unwrap_err();
    assert_eq!(d.kind, DenialKind::Special);

    let c = Classifier::with_own(vec![], vec![sock("[::]:3128")]);
    let d = c.check(sock("127.0.0.1:3128"), "h", &all).unwrap_err();
    assert_eq!(d.kind, DenialKind::ProxyItself);
}

#[test]
fn own_addresses_are_denied() {
    let c = Classifier::with_own(vec![ip("8.8.4.4"), ip("2606:4700::6810:1")], vec![]);
    let d = c.check(sock("8.8.4.4:443"), "dns.google", &[]).unwrap_err();
    assert_eq!(d.kind, DenialKind::OwnHost);
    assert_eq!(d.range, net("8.8.4.4/32"));
    let d = c
        .check(sock("[2606:4700::6810:1]:443"), "x", &[])
        .unwrap_err();
    assert_eq!(d.kind, DenialKind::OwnHost);
    assert_eq!(c.check(sock("8.8.8.8:443"), "dns.google", &[]), Ok(()));
    // allow_ranges opens an own address for its named hosts (step 3
    // comes before step 5).
    assert_eq!(
        c.check(sock("8.8.4.4:443"), "h", &[range("8.8.4.0/24", &["h"])]),
        Ok(())
    );
}

#[test]
fn reads_this_hosts_interfaces() {
    let c = Classifier::new(vec![sock("127.0.0.1:3128")]).unwrap();
    c.refresh().unwrap();
    for a in c.own() {
        assert!(c.is_local(a));
    }
    assert_eq!(c.proxy_listens(), &[sock("127.0.0.1:3128")]);
}
