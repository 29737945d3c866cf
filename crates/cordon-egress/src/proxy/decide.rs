//! Steps 2 to 5 of every request: the caller's allowlist and the policy
//! with `ip` unknown, resolution, the classifier on every answer, and the
//! policy again for each address.

use std::net::{IpAddr, SocketAddr};

use cordon_policy::{Decision, Request, SurfaceFacts};
use hyper::StatusCode;

use super::http::Body;
use super::record::Record;
use super::Proxy;
use crate::target::{Authority, Host};

/// The facts of a request inside an inspected tunnel: unknown at the
/// tunnel, known at each request.
const REQUEST_FACTS: &[&str] = &["url", "method", "path", "query", "headers"];

/// Why a request is refused, and the decision that refused it if the
/// policy did.
type Refusal = (String, Option<Decision>);

impl Proxy {
    pub(super) fn request(&self, r: &Record<'_>) -> Request {
        Request {
            identity: r.caller.identity.clone(),
            env: self.cfg.env.clone(),
            now: r.now,
            facts: SurfaceFacts::Egress(r.facts.clone()),
        }
    }

    /// Steps 2 to 5, in this order for every request: decide with `ip`
    /// unknown (only a deny stops), resolve, classify every answer, decide
    /// again for each address. The addresses that may be dialled, with the
    /// decision that allowed each, or the `403` that was answered (and
    /// audited).
    ///
    /// `inspected`: a tunnel the proxy will end TLS for, whose every
    /// request is decided again with the request's own facts known; at
    /// the tunnel those facts (and only those) may be unknown.
    pub(super) async fn steps(
        &self,
        r: &mut Record<'_>,
        a: &Authority,
        inspected: bool,
    ) -> Result<Vec<(IpAddr, Decision)>, hyper::Response<Body>> {
        if let Err((why, d)) = self.first_decision(r, a) {
            return Err(self.refuse(r, StatusCode::FORBIDDEN, &why, d.as_ref()));
        }
        let ips = match self.addresses(a).await {
            Ok(ips) => ips,
            Err((logged, shown)) => {
                return Err(self.refuse_shown(r, StatusCode::FORBIDDEN, &logged, &shown, None))
            }
        };
        self.checked(r, ips, inspected)
            .map_err(|(why, d)| self.refuse(r, StatusCode::FORBIDDEN, &why, d.as_ref()))
    }

    /// Step 2: the caller's allowlist, then the policy with `ip` unknown.
    fn first_decision(
        &self,
        r: &Record<'_>,
        a: &Authority,
    ) -> Result<(), (String, Option<Decision>)> {
        super::live::allowlist_admits(r.caller.allow.as_deref(), a, r.kind == "connect")
            .map_err(|why| (why, None))?;
        let d = self.cfg.policy.decide(&self.request(r));
        if d.verdict == cordon_policy::decide::Verdict::Deny {
            return Err((self.why(&d), Some(d)));
        }
        Ok(())
    }

    pub(super) fn why(&self, d: &Decision) -> String {
        if d.no_allow_matched() {
            return "no allow rule of the policy matches".into();
        }
        let places = self.places(d);
        match d.verdict {
            cordon_policy::decide::Verdict::Deny => {
                format!("denied by the policy ({})", places.join(", "))
            }
            _ => {
                let unknown: Vec<&str> = d.unknown.iter().map(|f| f.spelling()).collect();
                if unknown.is_empty() {
                    format!("the policy could not decide ({})", places.join(", "))
                } else {
                    format!(
                        "the policy's rules need {} which this request does not show ({})",
                        unknown.join(", "),
                        places.join(", ")
                    )
                }
            }
        }
    }

    /// Steps 3 and 4: the addresses that may be dialled, or why none: for
    /// the log, and for the workload (which is never told an address a
    /// name resolved to: that would make the proxy a lookup oracle).
    async fn addresses(&self, a: &Authority) -> Result<Vec<IpAddr>, (String, String)> {
        let (name, ips) = match &a.host {
            Host::Ip(ip) => (ip.to_string(), vec![*ip]),
            Host::Name(n) => match self.cfg.resolver.lookup(n).await {
                Ok(ips) => (n.clone(), ips),
                Err(e @ crate::resolve::ResolveFailure::Failed { .. }) => {
                    return Err((
                        e.to_string(),
                        format!("resolving `{n}` failed (the egress audit log says why)"),
                    ))
                }
                Err(e) => return Err((e.to_string(), e.to_string())),
            },
        };
        for ip in &ips {
            if let Err(d) = self.cfg.classifier.check(
                SocketAddr::new(*ip, a.port),
                &name,
                &self.cfg.policy.allow_ranges,
            ) {
                return Err(if a.host == Host::Ip(*ip) {
                    // The workload's own literal: nothing it did not know.
                    (format!("{d}"), format!("{d}"))
                } else {
                    (
                        format!("`{name}` resolves to {d}; the whole name is refused"),
                        format!("`{name}` resolves to an address this proxy does not dial; the whole name is refused"),
                    )
                });
            }
        }
        Ok(ips)
    }

    /// Step 5 for one address: the policy again with `ip` bound; this is
    /// the final enforcing point, so only allow passes.
    fn final_decision(
        &self,
        r: &mut Record<'_>,
        ip: IpAddr,
        inspected: bool,
    ) -> Result<Decision, (String, Decision)> {
        r.facts.ip = Some(ip.to_string());
        let d = self.cfg.policy.decide(&self.request(r));
        let open_only_inside = inspected
            && d.verdict == cordon_policy::decide::Verdict::Undetermined
            && !d.unknown.is_empty()
            && d.unknown
                .iter()
                .all(|f| REQUEST_FACTS.contains(&f.spelling()));
        if d.is_allowed() || open_only_inside {
            Ok(d)
        } else {
            Err((self.why(&d), d))
        }
    }

    /// Step 5 for every address: those the policy allows with `ip` bound,
    /// in the resolver's order; none is a refusal with the last reason.
    fn checked(
        &self,
        r: &mut Record<'_>,
        ips: Vec<IpAddr>,
        inspected: bool,
    ) -> Result<Vec<(IpAddr, Decision)>, Refusal> {
        let mut checked = Vec::new();
        let mut last = None;
        for ip in ips {
            match self.final_decision(r, ip, inspected) {
                Ok(d) => checked.push((ip, d)),
                Err(e) => last = Some(e),
            }
        }
        if checked.is_empty() {
            return Err(match last {
                Some((why, d)) => (why, Some(d)),
                None => ("the name has no address".to_string(), None),
            });
        }
        Ok(checked)
    }
}
