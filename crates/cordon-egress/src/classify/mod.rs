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
mod tests;
