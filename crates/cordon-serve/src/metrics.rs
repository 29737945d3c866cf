//! `/metrics`: what is counted per scope, and the egress audit follower.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::counts::{ScopeMetrics, EXEC_BUCKETS};
use crate::refusal::unauthorized;
use crate::request::who;
use crate::served::Served;
use crate::{auth, tls};

impl Served {
    /// Counts one egress audit line under the scope of the sandbox it
    /// names (`scope/thread/agent_dir`; the longest credential scope that
    /// prefixes it, so a line names no tenant the configuration lacks).
    pub(crate) fn audit_line(&self, line: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return;
        };
        let Some(sandbox) = v["sandbox"].as_str() else {
            return;
        };
        let Some(scope) = self
            .config
            .credentials
            .iter()
            .map(|c| c.scope.as_str())
            .filter(|sc| sandbox.strip_prefix(sc).is_some_and(|r| r.starts_with('/')))
            .max_by_key(|sc| sc.len())
        else {
            return;
        };
        match v["verdict"].as_str() {
            Some("deny") => {
                let rules = v["rules"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| r.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                self.denied(scope, "egress", rules);
            }
            Some("end") => {
                let (up, down) = (v["bytes_up"].as_u64(), v["bytes_down"].as_u64());
                if up.is_some() || down.is_some() {
                    self.count(scope, |m| {
                        m.proxy_bytes.0 += up.unwrap_or(0);
                        m.proxy_bytes.1 += down.unwrap_or(0);
                    });
                }
            }
            _ => {}
        }
    }

    pub(crate) fn count(&self, scope: &str, f: impl FnOnce(&mut ScopeMetrics)) {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        f(m.entry(scope.to_string()).or_default());
    }

    /// Counts a policy denial on `surface` by `rules` (none: no allow rule
    /// matched).
    pub(crate) fn denied(&self, scope: &str, surface: &'static str, rules: Vec<String>) {
        let rules = if rules.is_empty() {
            vec!["none".to_string()]
        } else {
            rules
        };
        self.count(scope, |m| {
            for r in rules {
                *m.denials.entry((surface, r)).or_default() += 1;
            }
        });
    }

    /// Counts an exec refused by the compute guard.
    pub(crate) fn exec_refused(&self, scope: &str, e: &cordon_sandbox::SandboxError) {
        if let Some(rules) = e.denied_rules() {
            self.denied(scope, "compute", rules);
        }
    }

    pub(crate) fn exec_took(&self, scope: &str, seconds: f64) {
        self.count(scope, |m| {
            m.execs += 1;
            m.exec_seconds_sum += seconds;
            for (i, le) in EXEC_BUCKETS.iter().enumerate() {
                if seconds <= *le {
                    m.exec_buckets[i] += 1;
                }
            }
        });
    }
}

/// How often the egress audit log is read for new lines.
pub(crate) const AUDIT_POLL: Duration = Duration::from_millis(500);

/// The most read of it at once, and the longest line kept.
pub(crate) const AUDIT_CHUNK: u64 = 1 << 20;

/// Reads the egress audit log's new lines as they are appended (from its
/// end when the server starts; from its start again when it is truncated
/// or replaced), for `/metrics`.
pub(crate) async fn follow_audit(s: Arc<Served>, path: PathBuf) {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
    let mut offset = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
    let mut partial: Vec<u8> = Vec::new();
    loop {
        tokio::time::sleep(AUDIT_POLL).await;
        let Ok(mut f) = tokio::fs::File::open(&path).await else {
            continue;
        };
        let len = f.metadata().await.map_or(0, |m| m.len());
        if len < offset {
            offset = 0;
            partial.clear();
        }
        if len == offset {
            continue;
        }
        if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let Ok(n) = (&mut f).take(AUDIT_CHUNK).read_to_end(&mut buf).await else {
            continue;
        };
        offset += n as u64;
        partial.extend_from_slice(&buf);
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            s.audit_line(&line);
        }
        if partial.len() as u64 > AUDIT_CHUNK {
            partial.clear();
        }
    }
}

/// Prometheus text: a tenant's credential sees its own scope's series, an
/// operator's sees every scope's (the series name tenants).
pub(crate) async fn metrics(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    use std::fmt::Write as _;
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let m = s.metrics.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    let shown = m
        .iter()
        .filter(|(scope, _)| cred.operator || **scope == cred.scope);
    let _ = writeln!(out, "# TYPE cordon_sandboxes_created_total counter");
    let _ = writeln!(out, "# TYPE cordon_exec_seconds histogram");
    let _ = writeln!(out, "# TYPE cordon_requests_refused_total counter");
    let _ = writeln!(out, "# TYPE cordon_policy_denials_total counter");
    let _ = writeln!(out, "# TYPE cordon_egress_bytes_total counter");
    let _ = writeln!(out, "# TYPE cordon_sandboxes_paused gauge");
    {
        let paused = s.paused_keys.lock().unwrap_or_else(|p| p.into_inner());
        let mut by_scope: std::collections::BTreeMap<&str, usize> = Default::default();
        for scope in paused
            .values()
            .filter(|sc| cred.operator || **sc == cred.scope)
        {
            *by_scope.entry(scope.as_str()).or_default() += 1;
        }
        for (scope, n) in by_scope {
            let scope = scope.replace(['\\', '"', '\n'], "_");
            let _ = writeln!(out, "cordon_sandboxes_paused{{scope=\"{scope}\"}} {n}");
        }
    }
    let _ = writeln!(out, "# TYPE cordon_pool_ready gauge");
    let _ = writeln!(out, "# TYPE cordon_pool_claims_total counter");
    // Warm pools: each is a credential's, shown to it (and operators).
    for pool in s
        .pools
        .iter()
        .filter(|p| cred.operator || p.config.credential == cred.name)
    {
        let name = &pool.config.name;
        let _ = writeln!(out, "cordon_pool_ready{{pool=\"{name}\"}} {}", pool.ready());
        let _ = writeln!(
            out,
            "cordon_pool_claims_total{{pool=\"{name}\"}} {}",
            pool.warm.claims()
        );
    }
    for (scope, v) in shown {
        let scope = scope.replace(['\\', '"', '\n'], "_");
        for (rung, n) in &v.created {
            let _ = writeln!(
                out,
                "cordon_sandboxes_created_total{{scope=\"{scope}\",rung=\"{rung}\"}} {n}"
            );
        }
        for (i, le) in EXEC_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "cordon_exec_seconds_bucket{{scope=\"{scope}\",le=\"{le}\"}} {}",
                v.exec_buckets[i]
            );
        }
        let _ = writeln!(
            out,
            "cordon_exec_seconds_bucket{{scope=\"{scope}\",le=\"+Inf\"}} {}",
            v.execs
        );
        let _ = writeln!(
            out,
            "cordon_exec_seconds_sum{{scope=\"{scope}\"}} {}",
            v.exec_seconds_sum
        );
        let _ = writeln!(
            out,
            "cordon_exec_seconds_count{{scope=\"{scope}\"}} {}",
            v.execs
        );
        for (status, n) in &v.refused {
            let _ = writeln!(
                out,
                "cordon_requests_refused_total{{scope=\"{scope}\",status=\"{status}\"}} {n}"
            );
        }
        for ((surface, rule), n) in &v.denials {
            let rule = rule.replace(['\\', '"', '\n'], "_");
            let _ = writeln!(
                out,
                "cordon_policy_denials_total{{scope=\"{scope}\",surface=\"{surface}\",rule=\"{rule}\"}} {n}"
            );
        }
        let (up, down) = v.proxy_bytes;
        if up + down > 0 {
            let _ = writeln!(
                out,
                "cordon_egress_bytes_total{{scope=\"{scope}\",direction=\"up\"}} {up}"
            );
            let _ = writeln!(
                out,
                "cordon_egress_bytes_total{{scope=\"{scope}\",direction=\"down\"}} {down}"
            );
        }
    }
    ([("content-type", "text/plain; version=0.0.4")], out).into_response()
}

/// Counts each refused request (4xx, 5xx) under the scope of the credential
/// it presented, for `/metrics`; a request without a valid one is counted
/// nowhere (it names no tenant).
pub(crate) async fn count_refusals(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let cred = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| auth::authenticate(&s.config.credentials, Some(h)));
    // A token bound to a client certificate is good only over a mutual-TLS
    // connection that presented that very certificate.
    if let Some(bound) = cred.and_then(|c| c.client_cert_sha256) {
        let presented = req.extensions().get::<tls::PeerCert>().and_then(|p| p.0);
        let same = presented
            .is_some_and(|p| bool::from(subtle::ConstantTimeEq::ct_eq(&p[..], &bound[..])));
        if !same {
            return unauthorized();
        }
    }
    let scope = cred.map(|c| c.scope.clone());
    let response = next.run(req).await;
    let status = response.status().as_u16();
    if let (Some(scope), true) = (scope, status >= 400) {
        s.count(&scope, |m| *m.refused.entry(status).or_default() += 1);
    }
    response
}
