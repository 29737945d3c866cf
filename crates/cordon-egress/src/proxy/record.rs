//! The audit lines, written before anything is carried: each charged to
//! its sandbox's [`Budget`], an `allow` that cannot be written refusing
//! the request, and the refusals the workload is told.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cordon_policy::{Decision, EgressFacts};
use hyper::StatusCode;

use super::budget::{budget_spent, Budget, Charge, Take};
use http_body_util::BodyExt as _;

use super::http::{shown as shown_text, text, Body};
use super::{Caller, Proxy};
use crate::audit::{rfc3339, Audit, AuditLine};
use crate::splice::Moved;

/// What one request's audit line is built from.
pub(super) struct Record<'c> {
    pub(super) caller: &'c Caller,
    pub(super) budget: Arc<Budget>,
    pub(super) kind: &'static str,
    pub(super) target: String,
    pub(super) facts: EgressFacts,
    pub(super) now: i64,
    /// The brokered secrets put in this request (names).
    pub(super) secrets: Vec<String>,
}

impl<'c> Record<'c> {
    pub(super) fn new(
        caller: &'c Caller,
        budget: &Arc<Budget>,
        kind: &'static str,
        target: String,
    ) -> Record<'c> {
        Record {
            caller,
            budget: budget.clone(),
            kind,
            target,
            facts: EgressFacts {
                url: None,
                scheme: None,
                host: None,
                port: 0,
                method: None,
                path: None,
                ip: None,
                query: None,
                headers: None,
            },
            now: now(),
            secrets: Vec::new(),
        }
    }
}

impl Proxy {
    /// Writes one line of `r`'s sandbox, charged to its budget: a `deny`
    /// when the budget is spent is not written (the refusal stands, and is
    /// counted on the next line written); an `allow` is not written either,
    /// and the caller must then carry nothing; an `end` (something was
    /// carried) is always written, and its bytes are owed. Whether it was
    /// written.
    pub(super) fn record(
        &self,
        r: &Record<'_>,
        verdict: &str,
        status: u16,
        reason: &str,
        d: Option<&Decision>,
    ) -> bool {
        let charge = match verdict {
            "allow" => Charge::Gate,
            "end" => Charge::Force,
            _ => Charge::Note,
        };
        let line = self.line(r, verdict, status, reason, d);
        self.write_line(r, line, charge)
    }

    fn write_line(&self, r: &Record<'_>, line: AuditLine, charge: Charge) -> bool {
        let Some(text) = Audit::encode(&line) else {
            return false;
        };
        match r.budget.take(text.len() as u64, charge) {
            Take::Refused { spent_now } => {
                if spent_now {
                    self.note_spent(r);
                }
                false
            }
            Take::Write { refused_before } => {
                if refused_before > 0 {
                    let note = self.line(
                        r,
                        "deny",
                        429,
                        &format!("{refused_before} requests of this sandbox were refused, and not recorded one by one, while its audit budget was spent"),
                        None,
                    );
                    // The count is taken from the budget: unwritten, it
                    // would be lost, so nothing after it is written either.
                    if !self.write_forced(r, note) {
                        return false;
                    }
                }
                let ok = self.cfg.audit.write_encoded(line, &text);
                self.audit_failing.store(!ok, Ordering::Relaxed);
                ok
            }
        }
    }

    /// A line written whatever the budget (its bytes are owed).
    fn write_forced(&self, r: &Record<'_>, line: AuditLine) -> bool {
        let Some(text) = Audit::encode(&line) else {
            return false;
        };
        let _ = r.budget.take(text.len() as u64, Charge::Force);
        let ok = self.cfg.audit.write_encoded(line, &text);
        self.audit_failing.store(!ok, Ordering::Relaxed);
        ok
    }

    /// Once per spell of a spent budget: says so in the log.
    pub(super) fn note_spent(&self, r: &Record<'_>) {
        let b = &self.cfg.audit_bounds;
        let note = self.line(
            r,
            "deny",
            429,
            &format!(
                "this sandbox's audit budget is spent ({} bytes a second after a burst of {}): its requests are refused, and not recorded one by one, until it refills",
                b.sandbox_bytes_per_sec, b.sandbox_burst_bytes
            ),
            None,
        );
        self.write_forced(r, note);
    }

    fn line(
        &self,
        r: &Record<'_>,
        verdict: &str,
        status: u16,
        reason: &str,
        d: Option<&Decision>,
    ) -> AuditLine {
        let (rules, unknown) = match d {
            Some(d) => (
                self.places(d),
                d.unknown.iter().map(|f| f.spelling().to_string()).collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        AuditLine {
            time: rfc3339(r.now),
            now: r.now,
            sandbox: r.caller.sandbox.clone(),
            identity: r.caller.identity.clone(),
            env: self.cfg.env.name.clone(),
            kind: r.kind.to_string(),
            target: r.target.clone(),
            ip: r.facts.ip.clone(),
            verdict: verdict.to_string(),
            status,
            rules,
            unknown,
            reason: reason.to_string(),
            facts: audited(&r.facts),
            bytes_up: None,
            bytes_down: None,
            secrets: r.secrets.clone(),
        }
    }

    /// A tunnel's `end` line: why it ended and the bytes it carried.
    pub(super) fn record_end(&self, r: &Record<'_>, status: u16, reason: &str, moved: &Moved) {
        let mut line = self.line(r, "end", status, reason, None);
        line.bytes_up = Some(moved.up.load(Ordering::Relaxed));
        line.bytes_down = Some(moved.down.load(Ordering::Relaxed));
        self.write_line(r, line, Charge::Force);
    }

    pub(super) fn refuse(
        &self,
        r: &Record<'_>,
        status: StatusCode,
        reason: &str,
        d: Option<&Decision>,
    ) -> hyper::Response<Body> {
        self.refuse_shown(r, status, reason, reason, d)
    }

    /// A refusal whose reason for the log (`logged`, the host's: it may
    /// name the resolved address) differs from what the workload is told
    /// (`shown`, which never does).
    pub(super) fn refuse_shown(
        &self,
        r: &Record<'_>,
        status: StatusCode,
        logged: &str,
        shown: &str,
        d: Option<&Decision>,
    ) -> hyper::Response<Body> {
        let _ = self.record(r, "deny", status.as_u16(), logged, d);
        if status != StatusCode::FORBIDDEN {
            return text(status, shown);
        }
        self.denied(shown, d)
    }

    /// A `403` an agent can act on: JSON saying what refused it (the
    /// deciding rule and where it is written) and what to change, and an
    /// `x-cordon-denied` header naming the rule (or why, if no rule did).
    pub(super) fn denied(&self, why: &str, d: Option<&Decision>) -> hyper::Response<Body> {
        let rule = d
            .and_then(|d| d.deciding.first())
            .map(|id| self.cfg.policy.rule(*id));
        let (header, fix) = match (d, rule) {
            (Some(d), Some(rule)) if d.verdict == cordon_policy::decide::Verdict::Deny => (
                format!("rule={}", rule.name),
                format!(
                    "the deny rule `{}` ({}:{}) matches this request; send a request it does not match, or ask whoever runs the policy to change that rule",
                    rule.name, rule.file, rule.line
                ),
            ),
            (Some(d), _) if d.no_allow_matched() => (
                "no-allow-rule".to_string(),
                "no allow rule of the policy matches this request; ask whoever runs the policy for one that does".to_string(),
            ),
            (Some(d), _) => (
                "undetermined".to_string(),
                format!(
                    "the policy's rules need {} which the proxy cannot see in this request; a host whose requests are decided by method, path or headers must be inspected (`egress.inspect` in the root layer)",
                    d.unknown.iter().map(|f| format!("`{}`", f.spelling())).collect::<Vec<_>>().join(", ")
                ),
            ),
            (None, _) => (
                "not-allowed".to_string(),
                "the request was refused before the policy decided it (see `error`): the sandbox's egress allowlist, or the proxy's own checks".to_string(),
            ),
        };
        let body = serde_json::json!({
            "error": shown_text(why),
            "surface": "egress",
            "rule": rule.map(|r| r.name.clone()),
            "at": rule.map(|r| format!("{}:{}", r.file, r.line)),
            "fix": fix,
        });
        let mut resp = hyper::Response::new(
            http_body_util::Full::new(bytes::Bytes::from(format!("{body}\n")))
                .map_err(|n: std::convert::Infallible| match n {})
                .boxed(),
        );
        *resp.status_mut() = StatusCode::FORBIDDEN;
        let h = resp.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = hyper::header::HeaderValue::from_str(&shown_text(&header)) {
            h.insert("x-cordon-denied", v);
        }
        h.insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        resp
    }

    /// The answer when a request's `allow` line was not written: nothing
    /// was dialled or sent.
    pub(super) fn unrecorded(&self, r: &Record<'_>) -> hyper::Response<Body> {
        if r.budget.spent() {
            budget_spent(&self.cfg.audit_bounds)
        } else {
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the egress audit log cannot be written; nothing is carried or looked up until it can",
            )
        }
    }

    /// The deciding rules, `file:line`.
    pub(super) fn places(&self, d: &Decision) -> Vec<String> {
        d.deciding
            .iter()
            .map(|id| {
                let rule = self.cfg.policy.rule(*id);
                format!("{}:{}", rule.file, rule.line)
            })
            .collect()
    }
}

/// The facts as written in the audit log: a credential header's value
/// is `[redacted]` (so a replay of a rule on it is undetermined, never
/// decided on a value the log does not hold).
fn audited(f: &EgressFacts) -> EgressFacts {
    let mut f = f.clone();
    if let Some(h) = &mut f.headers {
        for (k, v) in h.iter_mut() {
            if super::http::is_credential_header(k) {
                *v = "[redacted]".to_string();
            }
        }
    }
    f
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
