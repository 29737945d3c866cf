//! Which addresses the egress proxy may dial.
//!
//! The proxy dials an address only if it is globally reachable. What is not
//! is written down here as data: three tables of special-purpose ranges
//! ([`SPECIAL_V4`], [`SPECIAL_V6`]), cloud metadata endpoints ([`METADATA`])
//! and IPv6 forms that carry an IPv4 address inside them ([`EMBEDDING`]).
//! Each row names its range, what it is, and where that comes from, so a
//! denial can say exactly why.
//!
//! Lookup is by most specific match: where rows nest (192.0.0.8/32 inside
//! 192.0.0.0/24) the denial names the narrower one. A metadata row wins over
//! any special-purpose row, and an embedding row over both.
//!
//! [`Classifier::check`] adds what only this host knows (its own interface
//! addresses and the proxy's own listening sockets) and the policy's
//! `allow_ranges`, which may open a special-purpose range for named hosts but
//! never an embedding form nor the proxy itself.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use cordon_policy::policy::AllowRange;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// One range the proxy will not dial, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub net: IpNet,
    /// A short name: "loopback", "private-use".
    pub what: &'static str,
    /// Where the row comes from: registry and RFC.
    pub source: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    // `new_assert` panics on a prefix longer than 32; in a `static`
    // initialiser that panic is a compile error, so no bad row can ship.
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len))
}

const fn v6(s: [u16; 8], len: u8) -> IpNet {
    IpNet::V6(Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    ))
}

const fn row(net: IpNet, what: &'static str, source: &'static str) -> Row {
    Row { net, what, source }
}

/// Every row of the IANA IPv4 Special-Purpose Address Registry (RFC 6890),
/// plus multicast, which lives in its own registry.
///
/// Conservative choices, each marked "denied anyway" in its source:
/// - 192.0.0.0/24 is denied whole, although IANA marks 192.0.0.9/32 (PCP
///   anycast) and 192.0.0.10/32 (TURN anycast) globally reachable: neither is
///   anything an agent's HTTP(S) egress should reach, and `allow_ranges` can
///   open them for a named host.
/// - AS112 (192.31.196.0/24, 192.175.48.0/24) and AMT (192.52.193.0/24) are
///   marked globally reachable by IANA but are DNS sinks and multicast
///   relays, not destinations; denied likewise.
#[rustfmt::skip]
pub static SPECIAL_V4: &[Row] = &[
    row(v4(0, 0, 0, 0, 8), "this network", "IANA IPv4 special-purpose registry, RFC 791 §3.2"),
    row(v4(0, 0, 0, 0, 32), "this host on this network", "IANA IPv4 special-purpose registry, RFC 1122 §3.2.1.3"),
    row(v4(10, 0, 0, 0, 8), "private-use", "IANA IPv4 special-purpose registry, RFC 1918"),
    row(v4(100, 64, 0, 0, 10), "shared address space (carrier-grade NAT)", "IANA IPv4 special-purpose registry, RFC 6598"),
    row(v4(127, 0, 0, 0, 8), "loopback", "IANA IPv4 special-purpose registry, RFC 1122 §3.2.1.3"),
    row(v4(169, 254, 0, 0, 16), "link-local", "IANA IPv4 special-purpose registry, RFC 3927"),
    row(v4(172, 16, 0, 0, 12), "private-use", "IANA IPv4 special-purpose registry, RFC 1918"),
    row(v4(192, 0, 0, 0, 24), "IETF protocol assignments", "IANA IPv4 special-purpose registry, RFC 6890 §2.1"),
    row(v4(192, 0, 0, 0, 29), "IPv4 service continuity prefix", "IANA IPv4 special-purpose registry, RFC 7335"),
    row(v4(192, 0, 0, 8, 32), "IPv4 dummy address", "IANA IPv4 special-purpose registry, RFC 7600"),
    row(v4(192, 0, 0, 9, 32), "port control protocol anycast", "IANA IPv4 special-purpose registry, RFC 7723 (IANA: globally reachable; denied anyway with 192.0.0.0/24)"),
    row(v4(192, 0, 0, 10, 32), "TURN anycast", "IANA IPv4 special-purpose registry, RFC 8155 (IANA: globally reachable; denied anyway with 192.0.0.0/24)"),
    row(v4(192, 0, 0, 170, 32), "NAT64/DNS64 discovery", "IANA IPv4 special-purpose registry, RFC 7050 §2.2, RFC 8880"),
    row(v4(192, 0, 0, 171, 32), "NAT64/DNS64 discovery", "IANA IPv4 special-purpose registry, RFC 7050 §2.2, RFC 8880"),
    row(v4(192, 0, 2, 0, 24), "documentation (TEST-NET-1)", "IANA IPv4 special-purpose registry, RFC 5737"),
    row(v4(192, 31, 196, 0, 24), "AS112-v4", "IANA IPv4 special-purpose registry, RFC 7535 (IANA: globally reachable; denied anyway: a DNS sink)"),
    row(v4(192, 52, 193, 0, 24), "AMT", "IANA IPv4 special-purpose registry, RFC 7450 (IANA: globally reachable; denied anyway: multicast relays)"),
    row(v4(192, 88, 99, 0, 24), "deprecated 6to4 relay anycast", "IANA IPv4 special-purpose registry, RFC 7526"),
    row(v4(192, 168, 0, 0, 16), "private-use", "IANA IPv4 special-purpose registry, RFC 1918"),
    row(v4(192, 175, 48, 0, 24), "direct delegation AS112 service", "IANA IPv4 special-purpose registry, RFC 7534 (IANA: globally reachable; denied anyway: a DNS sink)"),
    row(v4(198, 18, 0, 0, 15), "benchmarking", "IANA IPv4 special-purpose registry, RFC 2544"),
    row(v4(198, 51, 100, 0, 24), "documentation (TEST-NET-2)", "IANA IPv4 special-purpose registry, RFC 5737"),
    row(v4(203, 0, 113, 0, 24), "documentation (TEST-NET-3)", "IANA IPv4 special-purpose registry, RFC 5737"),
    row(v4(224, 0, 0, 0, 4), "multicast", "IANA IPv4 multicast address space registry, RFC 5771"),
    row(v4(240, 0, 0, 0, 4), "reserved", "IANA IPv4 special-purpose registry, RFC 1112 §4"),
    row(v4(255, 255, 255, 255, 32), "limited broadcast", "IANA IPv4 special-purpose registry, RFC 8190, RFC 919 §7"),
];

/// Every row of the IANA IPv6 Special-Purpose Address Registry (RFC 6890)
/// that is not an embedding form (those are in [`EMBEDDING`]), plus every
/// block the IANA IPv6 Address Space registry does not allocate as global
/// unicast: only 2000::/3 is global unicast (RFC 4291 §2.4), so everything
/// else (multicast, link-local, ULA, site-local, reserved) is denied. The
/// reserved blocks are listed one by one so each denial names its block.
///
/// Conservative choice: 2001::/23 (IETF protocol assignments) is denied
/// whole, although IANA marks some blocks inside it globally reachable
/// (2001:1::1/128 PCP anycast, 2001:1::2/128 TURN anycast, 2001:1::3/128
/// DNS-SD SRP anycast, 2001:3::/32 AMT, 2001:4:112::/48 AS112-v6,
/// 2001:20::/28 ORCHIDv2, 2001:30::/28 DETs). They are listed so a denial
/// names them. 2620:4f:8000::/48 (AS112) is denied likewise.
#[rustfmt::skip]
pub static SPECIAL_V6: &[Row] = &[
    row(v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified", "IANA IPv6 special-purpose registry, RFC 4291"),
    row(v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback", "IANA IPv6 special-purpose registry, RFC 4291"),
    row(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "discard-only", "IANA IPv6 special-purpose registry, RFC 6666"),
    row(v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64), "dummy IPv6 prefix", "IANA IPv6 special-purpose registry, RFC 9780"),
    row(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "IETF protocol assignments", "IANA IPv6 special-purpose registry, RFC 2928"),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128), "port control protocol anycast", "IANA IPv6 special-purpose registry, RFC 7723 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128), "TURN anycast", "IANA IPv6 special-purpose registry, RFC 8155 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128), "DNS-SD SRP anycast", "IANA IPv6 special-purpose registry, RFC 9665 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48), "benchmarking", "IANA IPv6 special-purpose registry, RFC 5180"),
    row(v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32), "AMT", "IANA IPv6 special-purpose registry, RFC 7450 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48), "AS112-v6", "IANA IPv6 special-purpose registry, RFC 7535 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28), "deprecated ORCHID", "IANA IPv6 special-purpose registry, RFC 4843"),
    row(v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28), "ORCHIDv2", "IANA IPv6 special-purpose registry, RFC 7343 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28), "drone remote ID entity tags", "IANA IPv6 special-purpose registry, RFC 9374 (IANA: globally reachable; denied anyway with 2001::/23)"),
    row(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "documentation", "IANA IPv6 special-purpose registry, RFC 3849"),
    row(v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48), "direct delegation AS112 service", "IANA IPv6 special-purpose registry, RFC 7534 (IANA: globally reachable; denied anyway: a DNS sink)"),
    row(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "documentation", "IANA IPv6 special-purpose registry, RFC 9637"),
    row(v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), "segment routing (SRv6) SIDs", "IANA IPv6 special-purpose registry, RFC 9602"),
    row(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique-local", "IANA IPv6 special-purpose registry, RFC 4193"),
    row(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local", "IANA IPv6 special-purpose registry, RFC 4291"),
    // Outside the special-purpose registry.
    row(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "site-local (deprecated)", "IANA IPv6 address space registry, RFC 3879"),
    row(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast", "IANA IPv6 address space registry, RFC 4291 §2.7"),
    // Not global unicast: the IANA IPv6 Address Space registry's blocks
    // "reserved by IETF" (RFC 4291 §2.4: only 2000::/3 is global unicast).
    row(v6([0, 0, 0, 0, 0, 0, 0, 0], 8), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 8), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x200, 0, 0, 0, 0, 0, 0, 0], 7), "reserved by IETF", "IANA IPv6 address space registry, RFC 4048"),
    row(v6([0x400, 0, 0, 0, 0, 0, 0, 0], 6), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x800, 0, 0, 0, 0, 0, 0, 0], 5), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x1000, 0, 0, 0, 0, 0, 0, 0], 4), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x4000, 0, 0, 0, 0, 0, 0, 0], 3), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x6000, 0, 0, 0, 0, 0, 0, 0], 3), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0x8000, 0, 0, 0, 0, 0, 0, 0], 3), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xa000, 0, 0, 0, 0, 0, 0, 0], 3), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xc000, 0, 0, 0, 0, 0, 0, 0], 3), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xe000, 0, 0, 0, 0, 0, 0, 0], 4), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xf000, 0, 0, 0, 0, 0, 0, 0], 5), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xf800, 0, 0, 0, 0, 0, 0, 0], 6), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
    row(v6([0xfe00, 0, 0, 0, 0, 0, 0, 0], 9), "reserved by IETF", "IANA IPv6 address space registry, RFC 4291"),
];

/// Cloud metadata and credential endpoints. Most already sit in a denied
/// range (169.254/16, 100.64/10, 192.0.0/24, fc00::/7); this table names
/// them, and a broad `allow_ranges` entry does not open them (see
/// [`Classifier::check`]). 168.63.129.16 is in Microsoft's public space and
/// is caught only here.
#[rustfmt::skip]
pub static METADATA: &[Row] = &[
    row(v4(169, 254, 169, 254, 32), "cloud metadata", "instance metadata service (AWS IMDS, GCP, Azure IMDS, OpenStack, Oracle, DigitalOcean and others)"),
    row(v4(169, 254, 169, 123, 32), "cloud metadata", "AWS time sync service (link-local, beside IMDS)"),
    row(v4(169, 254, 170, 2, 32), "cloud metadata", "AWS ECS task metadata and credentials endpoint"),
    row(v4(169, 254, 170, 23, 32), "cloud metadata", "AWS EKS Pod Identity agent (credentials)"),
    row(v4(100, 100, 100, 200, 32), "cloud metadata", "Alibaba Cloud ECS metadata service"),
    row(v4(192, 0, 0, 192, 32), "cloud metadata", "Oracle Cloud metadata service (legacy address)"),
    row(v4(168, 63, 129, 16, 32), "cloud metadata", "Azure WireServer / platform virtual IP (guest agent configuration)"),
    row(v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128), "cloud metadata", "AWS IMDS over IPv6 (Nitro)"),
    row(v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123], 128), "cloud metadata", "AWS time sync service over IPv6"),
    row(v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23], 128), "cloud metadata", "AWS EKS Pod Identity agent over IPv6 (credentials)"),
];

/// Where an embedding form keeps its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The last 32 bits.
    Last32,
    /// Bits 16..48 (6to4, 2002:VVVV:VVVV::/48).
    SixToFour,
    /// Teredo: server in bits 32..64, client in the last 32 bits, inverted.
    /// The client is the one reported: it is the host a dial would reach.
    Teredo,
}

/// An IPv6 form that carries an IPv4 address. Denied outright: dialling it
/// could reach the IPv4 address by a path (a translator, a tunnel, the
/// kernel's own dual stack) that the IPv4 checks never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedding {
    pub net: IpNet,
    pub what: &'static str,
    pub source: &'static str,
    pub layout: Layout,
}

const fn embed(net: IpNet, what: &'static str, source: &'static str, layout: Layout) -> Embedding {
    Embedding {
        net,
        what,
        source,
        layout,
    }
}

/// ::/96, the IPv4-compatible form.
const COMPATIBLE: IpNet = v6([0, 0, 0, 0, 0, 0, 0, 0], 96);

/// The embedding forms. ::/96 excludes :: and ::1, which are the unspecified
/// and loopback addresses in [`SPECIAL_V6`], not embeddings.
///
/// 64:ff9b:1::/48 is for local-use translators, which may use any RFC 6052
/// prefix length within it; the IPv4 address reported is read as for a /96
/// prefix (the last 32 bits). The denial does not depend on it.
#[rustfmt::skip]
pub static EMBEDDING: &[Embedding] = &[
    embed(v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), "IPv4-mapped", "IANA IPv6 special-purpose registry, RFC 4291 §2.5.5.2", Layout::Last32),
    embed(COMPATIBLE, "IPv4-compatible (deprecated)", "RFC 4291 §2.5.5.1", Layout::Last32),
    embed(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "NAT64 well-known prefix", "IANA IPv6 special-purpose registry, RFC 6052 (IANA: globally reachable; denied as an embedding)", Layout::Last32),
    embed(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "local-use IPv4/IPv6 translation", "IANA IPv6 special-purpose registry, RFC 8215", Layout::Last32),
    embed(v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4", "IANA IPv6 special-purpose registry, RFC 3056", Layout::SixToFour),
    embed(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "Teredo", "IANA IPv6 special-purpose registry, RFC 4380", Layout::Teredo),
];

/// Why an address was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// A special-purpose range; `allow_ranges` may open it for named hosts.
    Special,
    /// A cloud metadata endpoint; only an `allow_ranges` entry inside the
    /// endpoint itself opens it.
    Metadata,
    /// An IPv6 form embedding an IPv4 address; never opened.
    Embedding,
    /// One of this host's own interface addresses.
    OwnHost,
    /// The egress proxy's own listening socket; never opened.
    ProxyItself,
}

/// A refusal to dial, naming the range and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The address classified.
    pub addr: IpAddr,
    /// The port, when the classification was of a socket address.
    pub port: Option<u16>,
    pub range: IpNet,
    pub what: &'static str,
    pub source: &'static str,
    /// The IPv4 address an embedding form carries.
    pub embedded: Option<Ipv4Addr>,
    /// How the embedded address itself classifies, if it is special.
    pub embedded_denial: Option<Box<Denial>>,
    pub kind: DenialKind,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}", SocketAddr::new(self.addr, port))?,
            None => write!(f, "{}", self.addr)?,
        }
        write!(f, " is in {} ({}; {})", self.range, self.what, self.source)?;
        if let Some(v4) = self.embedded {
            write!(f, "; it embeds {v4}")?;
            match &self.embedded_denial {
                Some(inner) => write!(f, ", in {} ({})", inner.range, inner.what)?,
                None => write!(
                    f,
                    ", itself globally reachable, but embedded forms are never dialled"
                )?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for Denial {}

/// The most specific row containing `ip`.
fn most_specific(rows: &'static [Row], ip: IpAddr) -> Option<&'static Row> {
    rows.iter()
        .filter(|r| r.net.contains(&ip))
        .max_by_key(|r| r.net.prefix_len())
}

fn bits(ip: Ipv6Addr) -> u128 {
    u128::from_be_bytes(ip.octets())
}

/// The embedding form `ip` is in, and the IPv4 address it carries.
pub fn embedding(ip: Ipv6Addr) -> Option<(&'static Embedding, Ipv4Addr)> {
    let b = bits(ip);
    EMBEDDING
        .iter()
        .filter(|e| e.net.contains(&IpAddr::V6(ip)))
        // ::/96 holds the unspecified and loopback addresses too.
        .filter(|e| !(e.net == COMPATIBLE && b <= 1))
        .max_by_key(|e| e.net.prefix_len())
        .map(|e| {
            // Truncating casts are the point: each picks 32 bits out of 128.
            let v4 = match e.layout {
                Layout::Last32 => b as u32,
                Layout::SixToFour => (b >> 80) as u32,
                Layout::Teredo => !(b as u32),
            };
            (e, Ipv4Addr::from(v4))
        })
}

fn denial(addr: IpAddr, r: &Row, kind: DenialKind) -> Denial {
    Denial {
        addr,
        port: None,
        range: r.net,
        what: r.what,
        source: r.source,
        embedded: None,
        embedded_denial: None,
        kind,
    }
}

/// The registry + metadata + embedding classification alone: `None` if the
/// tables have nothing against `ip`.
pub fn special(ip: IpAddr) -> Option<Denial> {
    if let IpAddr::V6(v6) = ip {
        if let Some((e, v4)) = embedding(v6) {
            return Some(Denial {
                addr: ip,
                port: None,
                range: e.net,
                what: e.what,
                source: e.source,
                embedded: Some(v4),
                embedded_denial: special(IpAddr::V4(v4)).map(Box::new),
                kind: DenialKind::Embedding,
            });
        }
    }
    if let Some(r) = most_specific(METADATA, ip) {
        return Some(denial(ip, r, DenialKind::Metadata));
    }
    let table = match ip {
        IpAddr::V4(_) => SPECIAL_V4,
        IpAddr::V6(_) => SPECIAL_V6,
    };
    most_specific(table, ip).map(|r| denial(ip, r, DenialKind::Special))
}

fn host_net(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

/// This host's own addresses and the proxy's own listening sockets: what
/// [`special`] cannot know.
#[derive(Debug)]
pub struct Classifier {
    /// Re-read by [`Classifier::refresh`] while the proxy runs (an
    /// interface may gain an address).
    own: std::sync::RwLock<Vec<IpAddr>>,
    proxy_listens: Vec<SocketAddr>,
}

/// Every address on this host's interfaces.
pub fn interface_addrs() -> io::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let Some(a) = ifa.address else { continue };
        let ip = if let Some(s) = a.as_sockaddr_in() {
            IpAddr::V4(s.ip())
        } else if let Some(s) = a.as_sockaddr_in6() {
            IpAddr::V6(s.ip())
        } else {
            continue;
        };
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

impl Classifier {
    /// Reads this host's interface addresses (getifaddrs). [`Classifier::refresh`]
    /// reads them again.
    pub fn new(proxy_listens: Vec<SocketAddr>) -> io::Result<Classifier> {
        Ok(Classifier::with_own(interface_addrs()?, proxy_listens))
    }

    /// With the own addresses given rather than read (tests).
    pub fn with_own(own: Vec<IpAddr>, proxy_listens: Vec<SocketAddr>) -> Classifier {
        Classifier {
            own: std::sync::RwLock::new(own),
            proxy_listens,
        }
    }

    /// Reads this host's interface addresses again. On error the old ones
    /// are kept.
    pub fn refresh(&self) -> io::Result<()> {
        let fresh = interface_addrs()?;
        *self.own.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// This host's own addresses, as last read.
    pub fn own(&self) -> Vec<IpAddr> {
        self.own.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn is_own(&self, ip: &IpAddr) -> bool {
        self.own
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(ip)
    }

    /// The proxy's listening sockets.
    pub fn proxy_listens(&self) -> &[SocketAddr] {
        &self.proxy_listens
    }

    /// Would a connection to `ip` arrive at this host? Loopback and the
    /// unspecified address always do (a dial to 0.0.0.0 or :: reaches the
    /// local host on Linux).
    fn is_local(&self, ip: IpAddr) -> bool {
        ip.is_loopback() || ip.is_unspecified() || self.is_own(&ip)
    }

    /// The proxy's own listening socket `addr` reaches, if any. A listener
    /// on 0.0.0.0 or :: matches any local address of either family on its
    /// port (a :: listener usually takes IPv4 too; conservatively assumed
    /// for 0.0.0.0 the other way round as well).
    fn proxy_itself(&self, addr: SocketAddr) -> Option<Denial> {
        let ip = addr.ip();
        self.proxy_listens
            .iter()
            .filter(|l| l.port() == addr.port())
            .find_map(|l| {
                let what = if l.ip() == ip {
                    "the egress proxy's own listening socket"
                } else if l.ip().is_unspecified() && self.is_local(ip) {
                    "the egress proxy's own listening socket (listening on all addresses)"
                } else {
                    return None;
                };
                Some(Denial {
                    addr: ip,
                    port: Some(addr.port()),
                    range: host_net(ip),
                    what,
                    source: "the proxy's listen addresses",
                    embedded: None,
                    embedded_denial: None,
                    kind: DenialKind::ProxyItself,
                })
            })
    }

    /// May the proxy dial `addr` for the canonical `host` name? `allow` are
    /// the policy root's `allow_ranges`.
    ///
    /// In order:
    /// 1. the proxy's own listening socket: [`DenialKind::ProxyItself`],
    ///    never opened;
    /// 2. an embedding form: [`DenialKind::Embedding`], never opened;
    /// 3. an `allow_ranges` entry whose cidr contains `addr` and whose hosts
    ///    list `host` exactly opens it — but a cloud metadata address only
    ///    for an entry whose cidr lies inside the metadata row itself (names
    ///    it exactly), so that opening 169.254.0.0/16 for a link-local
    ///    device does not open 169.254.169.254 with it;
    /// 4. a special-purpose or metadata row: denied;
    /// 5. one of this host's own interface addresses: [`DenialKind::OwnHost`];
    /// 6. otherwise allowed.
    pub fn check(&self, addr: SocketAddr, host: &str, allow: &[AllowRange]) -> Result<(), Denial> {
        let with_port = |mut d: Denial| {
            d.port = Some(addr.port());
            d
        };
        if let Some(d) = self.proxy_itself(addr) {
            return Err(d);
        }
        let ip = addr.ip();
        let special = special(ip).map(with_port);
        if let Some(d) = &special {
            if d.kind == DenialKind::Embedding {
                return Err(d.clone());
            }
        }
        let opened = !host.is_empty()
            && allow.iter().any(|a| {
                a.cidr.contains(&ip)
                    && a.hosts.iter().any(|h| h == host)
                    && match &special {
                        Some(d) if d.kind == DenialKind::Metadata => d.range.contains(&a.cidr),
                        _ => true,
                    }
            });
        if opened {
            return Ok(());
        }
        if let Some(d) = special {
            return Err(d);
        }
        if self.is_own(&ip) {
            return Err(Denial {
                addr: ip,
                port: Some(addr.port()),
                range: host_net(ip),
                what: "this host's own interface address",
                source: "getifaddrs on this host",
                embedded: None,
                embedded_denial: None,
                kind: DenialKind::OwnHost,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
            s.starts_with(
                "127.0.0.1 is in 127.0.0.0/8 (loopback; IANA IPv4 special-purpose registry"
            ),
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
}
