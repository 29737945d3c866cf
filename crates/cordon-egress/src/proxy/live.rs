//! A channel's egress allowlist, replaced while the channel serves (a
//! kept sandbox's `cordon sandbox egress`).
//!
//! Each replacement is a new *generation*: one value swapped at once in a
//! `watch` channel. Every request takes the generation current when it
//! starts (and is decided by it alone); every open tunnel and every client
//! connection that opened an upstream connection watches the channel and,
//! on a change, decides its own target again under the new generation —
//! one it no longer admits is closed, one it still admits stays. A failed
//! replacement is a *closed* generation: every request refused, saying
//! why and how to fix it, and every open connection closed; never the
//! wider list left in place.
//!
//! Only the allowlist changes: the policy (and with it every rule and
//! bound) is the channel's for its life, so a target the new list admits
//! was already decided by the policy when it was opened.

use std::sync::Arc;

pub use cordon_sandbox::EgressChange;
use cordon_sandbox::EgressEntry;
use tokio::sync::watch;

use super::{Caller, Proxy};
use crate::audit::{rfc3339, AuditLine};
use crate::target::{Authority, Host};

/// One generation of a channel's allowlist.
#[derive(Debug)]
pub struct Generation {
    /// 1 for the allowlist the channel was served with; one more for each
    /// change.
    pub number: u64,
    /// Who is calling, with this generation's allowlist.
    pub caller: Arc<Caller>,
    /// Set when the change that made this generation failed: nothing is
    /// carried, and this says why and what to do.
    pub closed: Option<String>,
}

impl Generation {
    /// Whether this generation admits a connection to `a` (`tunnel`: a
    /// CONNECT; else plain HTTP), by its allowlist alone: why not, if not.
    pub(super) fn admits(&self, a: &Authority, tunnel: bool) -> Result<(), String> {
        if let Some(why) = &self.closed {
            return Err(why.clone());
        }
        allowlist_admits(self.caller.allow.as_deref(), a, tunnel)
    }
}

/// The caller's allowlist on a target: step 2's first half.
pub(super) fn allowlist_admits(
    allow: Option<&[EgressEntry]>,
    a: &Authority,
    tunnel: bool,
) -> Result<(), String> {
    match allow {
        Some(list) => {
            let named = match &a.host {
                Host::Name(n) => list.iter().any(|e| e.matches(n, a.port)),
                // Allowlist entries are names; an address never matches.
                Host::Ip(_) => false,
            };
            if named {
                Ok(())
            } else {
                Err(format!("{a} is not in the egress allowlist"))
            }
        }
        None => {
            let default = if tunnel { 443 } else { 80 };
            if a.port == default {
                Ok(())
            } else {
                Err(format!(
                    "port {} is not open: without an allowlist a tunnel goes to 443 and plain HTTP to 80",
                    a.port
                ))
            }
        }
    }
}

/// A channel's allowlist, replaceable while it serves.
#[derive(Debug)]
pub struct LiveEgress {
    tx: watch::Sender<Arc<Generation>>,
}

impl LiveEgress {
    /// Generation 1: `caller` as the channel was served with.
    pub fn new(caller: Arc<Caller>) -> Arc<LiveEgress> {
        let (tx, _) = watch::channel(Arc::new(Generation {
            number: 1,
            caller,
            closed: None,
        }));
        Arc::new(LiveEgress { tx })
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<Generation> {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every change from now on.
    pub(super) fn watch(&self) -> watch::Receiver<Arc<Generation>> {
        self.tx.subscribe()
    }
}

/// The text a refused request is told while egress is closed.
fn closed_reason(why: &str) -> String {
    format!(
        "this sandbox's egress is closed: the last change of its egress allowlist failed ({why}); nothing is carried until a change that loads (`cordon sandbox egress HANDLE --spec-egress ...` with entries the policy allows)"
    )
}

fn shown_list(allow: Option<&[EgressEntry]>) -> String {
    match allow {
        None => "(none: the policy alone)".into(),
        Some(l) => format!(
            "[{}]",
            l.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Proxy {
    /// Replaces `live`'s allowlist (or closes it: [`EgressChange::Close`])
    /// at once, for `by` (who asked, as written in the audit line). The
    /// change's audit line (old and new lists, who asked) is written first;
    /// one that cannot be written closes egress instead, and says so.
    /// Returns the new generation's number, or why the change left egress
    /// closed.
    pub fn change_egress(
        &self,
        live: &LiveEgress,
        change: EgressChange,
        by: &str,
    ) -> Result<u64, String> {
        let old = live.current();
        let number = old.number + 1;
        let (new_allow, closed) = match change {
            EgressChange::Replace(list) => (Some(list), None),
            EgressChange::Close(why) => (Some(Vec::new()), Some(closed_reason(&why))),
        };
        let was = match &old.closed {
            Some(_) => "closed".to_string(),
            None => shown_list(old.caller.allow.as_deref()),
        };
        let now_is = match &closed {
            Some(_) => "closed".to_string(),
            None => shown_list(new_allow.as_deref()),
        };
        let reason = match &closed {
            Some(why) => format!(
                "egress allowlist generation {number}, asked by {by}: {was} -> closed; {why}"
            ),
            None => {
                format!("egress allowlist generation {number}, asked by {by}: {was} -> {now_is}")
            }
        };
        let written =
            self.cfg
                .audit
                .record(self.change_line(&old.caller, &reason, closed.is_some()));
        let (caller, closed) = if written {
            let mut c = (*old.caller).clone();
            c.allow = new_allow;
            (Arc::new(c), closed)
        } else {
            let mut c = (*old.caller).clone();
            c.allow = Some(Vec::new());
            (
                Arc::new(c),
                Some(closed_reason(
                    "its audit line could not be written, so the change was not made",
                )),
            )
        };
        let failed = closed.clone();
        live.tx.send_replace(Arc::new(Generation {
            number,
            caller,
            closed,
        }));
        tracing::info!(target: "cordon::egress", sandbox = %old.caller.sandbox, "{reason}");
        match failed {
            Some(why) => Err(why),
            None => Ok(number),
        }
    }

    fn change_line(&self, caller: &Caller, reason: &str, closed: bool) -> AuditLine {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        AuditLine {
            time: rfc3339(now),
            now,
            sandbox: caller.sandbox.clone(),
            identity: caller.identity.clone(),
            env: self.cfg.env.name.clone(),
            kind: "egress_allow".into(),
            target: String::new(),
            ip: None,
            verdict: if closed { "closed" } else { "changed" }.into(),
            status: 0,
            rules: Vec::new(),
            unknown: Vec::new(),
            reason: reason.to_string(),
            facts: cordon_policy::EgressFacts::endpoint(None, 0),
            bytes_up: None,
            bytes_down: None,
            secrets: Vec::new(),
        }
    }
}
