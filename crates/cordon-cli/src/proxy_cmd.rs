//! `cordon proxy`: the egress proxy alone, for hosts that want only egress
//! control. It binds, opens its audit log, confines itself, then serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use cordon_egress::Caller;
use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{AuditBounds, EgressEntry, EgressSetup};

use crate::exit::{refuse, usage};

/// Flags of `cordon proxy`.
#[derive(Args)]
#[command(after_help = "\
Every request is decided in this order, so nothing is resolved or dialled before it is allowed: \
the target is normalised; the allowlist (--allow) and the policy decide with the address unknown; \
the name is resolved; every address is classified (loopback, private, link-local, metadata, \
this host's own and every other non-global address is refused unless the policy's root layer \
opens it for that name with `allow_ranges`); the policy decides again with `ip` known; the \
checked address is dialled, never the name. Tunnels (CONNECT) carry TLS whose SNI names the \
CONNECT host; plain HTTP comes in absolute form. Every decision is one JSON line in the audit \
log, which `cordon policy explain POLICY --facts LINE_FILE` replays; a request's allow line is \
written before anything is dialled or sent (a line that cannot be written refuses the request), \
and its answer follows on an `end` line. The log is bounded: rotated by size (--audit-rotate-bytes, \
--audit-keep), and the lines clients cause are rate-limited (--audit-bytes-per-sec, \
--audit-burst-bytes): past the budget requests are refused (429), never carried unaudited.

Examples:
  cordon proxy --policy egress.yaml --listen 127.0.0.1:3128 --allow pypi.org --allow files.pythonhosted.org
  cordon proxy --policy egress.yaml --listen 127.0.0.1:3128 --hosts pins.txt --nameserver 127.0.0.53:53 --audit /var/log/cordon-egress.jsonl
  cordon proxy --policy inspect.yaml --listen 127.0.0.1:3128 --ca-out /tmp/cordon-proxy-ca.pem
    (then e.g. curl --proxy http://127.0.0.1:3128 --cacert /tmp/cordon-proxy-ca.pem https://api.example.com/)")]
pub struct ProxyArgs {
    /// The policy whose egress surface decides (default: the built-in
    /// `cordon:default`, which allows no egress at all).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Where to listen (`ADDR:PORT`). A listener on anything but loopback
    /// serves whoever can reach it, so bind loopback or a private link.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Who every connection is decided for: namespace=, name=,
    /// attested=true|false, labels.KEY= (the proxy cannot tell clients
    /// apart; run one per identity).
    #[arg(long = "identity", value_name = "KEY=VALUE")]
    pub identity: Vec<String>,
    /// The deployment's name (`env.name` in rules).
    #[arg(long = "env", value_name = "name=X")]
    pub env: Option<String>,
    /// An allowlist entry, `HOST[:PORT]` or `*.DOMAIN[:PORT]` (port 443 when
    /// absent), as a spec's `egress_allow`: everything not named is refused.
    /// Absent: the policy alone decides, tunnels go to port 443 only and
    /// plain HTTP to port 80 only.
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Names pinned to addresses (the /etc/hosts format), asked before DNS.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Ask these nameservers (`ADDR` for port 53, or `ADDR:PORT`) instead of
    /// the system's resolver. `--nameserver none`: no DNS, only --hosts
    /// answers.
    #[arg(long = "nameserver", value_name = "ADDR[:PORT]")]
    pub nameserver: Vec<String>,
    /// Append one JSON line per decision here (default: standard error).
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Rotate the audit file when a line would take it past this size:
    /// FILE.1 is the newest old file (default 33554432, 32 MiB).
    #[arg(long, value_name = "BYTES")]
    pub audit_rotate_bytes: Option<u64>,
    /// Old audit files kept, FILE.1 to FILE.N (default 3).
    #[arg(long, value_name = "N")]
    pub audit_keep: Option<u32>,
    /// The audit lines this proxy's clients may cause, sustained, in bytes
    /// a second (default 65536); past it and the burst, requests are
    /// refused (429), never carried unaudited.
    #[arg(long, value_name = "BYTES")]
    pub audit_bytes_per_sec: Option<u64>,
    /// The audit lines its clients may cause at once (default 2097152).
    #[arg(long, value_name = "BYTES")]
    pub audit_burst_bytes: Option<u64>,
    /// Write the proxy's CA certificate (PEM, mode 0644) to this new file
    /// before it serves, for clients to trust: the proxy terminates TLS
    /// for the hosts the policy's `egress.inspect` names, with a leaf its
    /// own per-channel CA signs (made at start, never stored elsewhere).
    /// Refused when FILE exists or when the policy inspects no host.
    #[arg(long, value_name = "FILE")]
    pub ca_out: Option<PathBuf>,
    /// Run without confining this process (no Landlock, seccomp or
    /// capability drop). Only for machines that lack them; the proxy
    /// parses hostile input.
    #[arg(long)]
    pub unconfined: bool,
}

pub fn run(a: ProxyArgs) -> ExitCode {
    let policy = match &a.policy {
        Some(p) => Policy::load_file(p),
        None => Policy::load_default(),
    };
    let policy = match policy {
        Ok(p) => Arc::new(p),
        Err(d) => {
            eprintln!("{}", d.render());
            return usage("the policy does not load");
        }
    };
    if a.ca_out.is_some() && !policy.inspects_any() {
        return usage(
            "--ca-out: the policy inspects no host (its `egress.inspect` is empty), so this proxy terminates no TLS and has no CA to write",
        );
    }
    let identity = match crate::run::identity(&a.identity) {
        Ok(i) => i,
        Err(e) => return usage(e),
    };
    let mut allow = None;
    if !a.allow.is_empty() {
        let mut list = Vec::new();
        for raw in &a.allow {
            match EgressEntry::parse(raw) {
                Ok(e) => list.push(e),
                Err(e) => return usage(format!("--allow: {e}")),
            }
        }
        allow = Some(list);
    }
    let nameservers = match a.nameserver.as_slice() {
        [] => None,
        [one] if one == "none" => Some(Vec::new()),
        many => {
            let mut out = Vec::new();
            for s in many {
                match s.parse::<SocketAddr>() {
                    Ok(addr) => out.push(addr),
                    // A bare address means port 53.
                    Err(_) => match s.parse::<std::net::IpAddr>() {
                        Ok(ip) => out.push(SocketAddr::new(ip, 53)),
                        Err(_) => {
                            return usage(format!(
                                "--nameserver `{s}` is not an address (`127.0.0.53`, `127.0.0.53:5353`, `[::1]:53`), or `none`"
                            ))
                        }
                    },
                }
            }
            Some(out)
        }
    };
    let defaults = AuditBounds::default();
    let audit_bounds = AuditBounds {
        rotate_bytes: a.audit_rotate_bytes.unwrap_or(defaults.rotate_bytes),
        keep: a.audit_keep.unwrap_or(defaults.keep),
        sandbox_bytes_per_sec: a
            .audit_bytes_per_sec
            .unwrap_or(defaults.sandbox_bytes_per_sec),
        sandbox_burst_bytes: a.audit_burst_bytes.unwrap_or(defaults.sandbox_burst_bytes),
    };
    if let Err(e) = audit_bounds.check() {
        let e = e
            .replace("`rotate_bytes`", "--audit-rotate-bytes")
            .replace("`keep`", "--audit-keep")
            .replace("`sandbox_bytes_per_sec`", "--audit-bytes-per-sec")
            .replace("`sandbox_burst_bytes`", "--audit-burst-bytes");
        return usage(e);
    }
    let setup = EgressSetup {
        nameservers,
        hosts_file: a.hosts.clone(),
        audit: a.audit.clone(),
        audit_bounds,
        // This process is the proxy, and confines itself below.
        proxy: None,
        policy_file: a.policy.clone(),
    };
    let env = Deployment {
        name: a
            .env
            .as_deref()
            .map(|e| e.strip_prefix("name=").unwrap_or(e).to_string())
            .unwrap_or_default(),
    };
    let listener = match std::net::TcpListener::bind(a.listen) {
        Ok(l) => l,
        Err(e) => return refuse(format!("listening on {}: {e}", a.listen)),
    };
    let local = listener.local_addr().unwrap_or(a.listen);
    // Everything the proxy opens on the host is opened before it confines
    // itself (and switches to its own uid); nothing is opened after.
    let opened = match cordon_egress::Opened::open(&setup, vec![local], policy.inspects_any()) {
        Ok(o) => o,
        Err(e) => return usage(e),
    };
    // Opened now, written once the CA exists: a confined proxy can open
    // nothing on the host later.
    let mut ca_out = match &a.ca_out {
        Some(path) => match CaOut::create(path) {
            Ok(c) => Some(c),
            Err(e) => return usage(e),
        },
        None => None,
    };
    if a.unconfined {
        eprintln!("cordon proxy: running UNCONFINED (--unconfined): no Landlock, seccomp or capability drop");
    } else if let Err(e) = cordon_host::roles::confine_proxy(&setup) {
        if let Some(c) = ca_out.take() {
            c.abandon();
        }
        return refuse(format!(
            "{e}; cordon proxy parses hostile input and confines itself before it serves — run it where Landlock and seccomp work, or pass --unconfined to accept the risk"
        ));
    }
    let host = match opened.start(policy, env) {
        Ok(h) => h,
        Err(e) => return refuse(e),
    };
    let caller = Caller {
        sandbox: format!("proxy@{local}"),
        identity,
        allow,
        brokered: Vec::new(),
    };
    let serving = match host.serve(listener, caller) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    if let Some(out) = ca_out.take() {
        let Some(pem) = serving.ca_pem() else {
            return refuse("--ca-out: the policy inspects, but the channel has no CA");
        };
        match out.write(pem) {
            Ok(path) => eprintln!(
                "cordon proxy: CA certificate in {} (clients trust it for the inspected hosts)",
                path.display()
            ),
            Err(e) => return refuse(e),
        }
    }
    eprintln!("cordon proxy: listening on {local}");
    let _serving = serving;
    loop {
        std::thread::park();
    }
}

/// The `--ca-out` file: created (never over an existing one) before the
/// proxy confines itself, written once its channel has a CA.
struct CaOut {
    path: PathBuf,
    file: std::fs::File,
}

impl CaOut {
    fn create(path: &std::path::Path) -> Result<CaOut, String> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    format!(
                        "--ca-out {}: the file exists; cordon proxy writes a new file only (remove it, or name another)",
                        path.display()
                    )
                } else {
                    format!("--ca-out {}: {e}", path.display())
                }
            })?;
        // 0644 whatever the umask: the certificate is public, and clients
        // running as other users read it.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("--ca-out {}: {e}", path.display()))?;
        Ok(CaOut {
            path: path.to_path_buf(),
            file,
        })
    }

    fn write(mut self, pem: &str) -> Result<PathBuf, String> {
        use std::io::Write;
        self.file
            .write_all(pem.as_bytes())
            .and_then(|()| self.file.sync_all())
            .map_err(|e| format!("--ca-out {}: {e}", self.path.display()))?;
        Ok(self.path)
    }

    /// Removes the still-empty file (best effort) when the proxy gives up
    /// before it confines itself.
    fn abandon(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
