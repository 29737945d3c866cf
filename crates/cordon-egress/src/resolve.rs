//! Step 3: names to addresses, only after the policy has not denied the
//! name. A static map (the `/etc/hosts` format) pins names for tests and
//! internal services; DNS is the system's resolver or named nameservers.
//! Every lookup is bounded in time; failure or timeout is a denial.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, NameServerConfigGroup, ResolveHosts, ResolverConfig,
    ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;

/// The most addresses one name may answer with; more is refused.
pub const MAX_ANSWERS: usize = 32;

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveFailure {
    #[error("`{0}` does not exist (no address)")]
    NoAddress(String),
    #[error("resolving `{0}` timed out")]
    Timeout(String),
    #[error("resolving `{name}` failed: {why}")]
    Failed { name: String, why: String },
    #[error("`{0}` answered with more than 32 addresses")]
    TooMany(String),
}

pub type LookupFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, ResolveFailure>> + Send + 'a>>;

/// Turns a canonical name into addresses.
pub trait Resolve: Send + Sync {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a>;
}

/// Names pinned to addresses, read from the `/etc/hosts` format.
#[derive(Debug, Clone, Default)]
pub struct StaticHosts {
    map: HashMap<String, Vec<IpAddr>>,
}

impl StaticHosts {
    /// Parses `/etc/hosts` text: `ADDRESS NAME [ALIAS...]`, `#` comments.
    /// Names are canonicalised; a line that does not parse is an error
    /// naming it (a pin that silently does nothing is worse than none).
    pub fn parse(text: &str) -> Result<StaticHosts, String> {
        let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let addr = words.next().unwrap_or_default();
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("line {}: `{addr}` is not an IP address", i + 1))?;
            let mut any = false;
            for name in words {
                let canon =
                    cordon_policy::canon::host(name).map_err(|e| format!("line {}: {e}", i + 1))?;
                let list = map.entry(canon).or_default();
                if !list.contains(&ip) {
                    list.push(ip);
                }
                any = true;
            }
            if !any {
                return Err(format!("line {}: `{addr}` names no host", i + 1));
            }
        }
        Ok(StaticHosts { map })
    }

    pub fn load(path: &Path) -> Result<StaticHosts, String> {
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("reading hosts file {}: {e}", path.display()))?;
        if !meta.is_file() || meta.len() > 1 << 20 {
            return Err(format!(
                "hosts file {} is not a regular file of at most 1 MiB",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading hosts file {}: {e}", path.display()))?;
        StaticHosts::parse(&text).map_err(|e| format!("hosts file {}: {e}", path.display()))
    }

    pub fn insert(&mut self, name: &str, ip: IpAddr) {
        self.map.entry(name.to_string()).or_default().push(ip);
    }

    pub fn get(&self, name: &str) -> Option<&[IpAddr]> {
        self.map.get(name).map(Vec::as_slice)
    }
}

/// Where names go after the static map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dns {
    /// The system's configuration (`/etc/resolv.conf`, `/etc/hosts`).
    System,
    /// These nameservers (UDP, then TCP), nothing else.
    Servers(Vec<SocketAddr>),
    /// No DNS: only the static map answers.
    Off,
}

/// The resolver the proxy uses: the static map first, then DNS.
pub struct Resolver {
    hosts: StaticHosts,
    dns: Option<TokioResolver>,
    timeout: Duration,
}

impl Resolver {
    /// Builds a resolver. Must be called inside a tokio runtime when `dns`
    /// is not [`Dns::Off`].
    pub fn new(hosts: StaticHosts, dns: &Dns, timeout: Duration) -> Result<Resolver, String> {
        let mut opts = ResolverOpts::default();
        // Both families, so every answer a name has is classified.
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.timeout = timeout;
        opts.attempts = 1;
        // Names are looked up as given (absolute): no search domains.
        opts.ndots = 0;
        let dns = match dns {
            Dns::Off => None,
            Dns::System => {
                let mut b = TokioResolver::builder(TokioConnectionProvider::default()).map_err(|e| {
                    format!("reading the system's resolver configuration: {e}; give --nameserver ADDR")
                })?;
                let o = b.options_mut();
                o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
                o.timeout = timeout;
                o.attempts = 1;
                Some(b.build())
            }
            Dns::Servers(addrs) => {
                let mut group = Vec::new();
                for a in addrs {
                    group.push(NameServerConfig::new(*a, Protocol::Udp));
                    group.push(NameServerConfig::new(*a, Protocol::Tcp));
                }
                let config =
                    ResolverConfig::from_parts(None, vec![], NameServerConfigGroup::from(group));
                opts.use_hosts_file = ResolveHosts::Never;
                Some(
                    TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
                        .with_options(opts)
                        .build(),
                )
            }
        };
        Ok(Resolver {
            hosts,
            dns,
            timeout,
        })
    }
}

impl Resolve for Resolver {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        Box::pin(async move {
            if let Some(ips) = self.hosts.get(name) {
                return Ok(ips.to_vec());
            }
            let Some(dns) = &self.dns else {
                return Err(ResolveFailure::NoAddress(name.to_string()));
            };
            // Absolute: a trailing dot, so no search domain is tried.
            let fqdn = format!("{name}.");
            let answer = tokio::time::timeout(self.timeout, dns.lookup_ip(fqdn.as_str()))
                .await
                .map_err(|_| ResolveFailure::Timeout(name.to_string()))?;
            match answer {
                Ok(lookup) => {
                    let mut ips: Vec<IpAddr> = Vec::new();
                    for ip in lookup.iter() {
                        if ips.len() == MAX_ANSWERS {
                            return Err(ResolveFailure::TooMany(name.to_string()));
                        }
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                    }
                    if ips.is_empty() {
                        return Err(ResolveFailure::NoAddress(name.to_string()));
                    }
                    Ok(ips)
                }
                Err(e) if e.is_no_records_found() => {
                    Err(ResolveFailure::NoAddress(name.to_string()))
                }
                Err(e) => Err(ResolveFailure::Failed {
                    name: name.to_string(),
                    why: e.to_string(),
                }),
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_format() {
        let h = StaticHosts::parse(
            "# comment\n127.0.0.1 Test.Local. alias.local # trailing\n::1 test.local\n\n",
        )
        .unwrap();
        assert_eq!(
            h.get("test.local").unwrap(),
            &[
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(h.get("alias.local").is_some());
        assert!(StaticHosts::parse("127.1 x").is_err());
        assert!(StaticHosts::parse("127.0.0.1").is_err());
        assert!(StaticHosts::parse("127.0.0.1 bad/name").is_err());
    }
}
