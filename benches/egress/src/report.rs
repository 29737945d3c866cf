//! The markdown tables: absolute figures, then ratios from the same run.

use crate::client::Target;
use crate::{Measured, Slot};
use std::fmt::Write;

pub struct Spec {
    pub concurrency: usize,
    pub bulk_mib: u64,
    pub tunnel_n: usize,
    pub new_conn_n: usize,
    pub keepalive_n: usize,
    pub rps_secs: f64,
    pub bulk_reps: usize,
    pub scale: f64,
}

#[derive(Clone, Copy)]
enum Metric {
    TunnelP50,
    TunnelP90,
    NewP50,
    NewP90,
    KeepP50,
    KeepP90,
    Rps,
    Bulk,
}

const METRICS: [Metric; 8] = [
    Metric::TunnelP50,
    Metric::TunnelP90,
    Metric::NewP50,
    Metric::NewP90,
    Metric::KeepP50,
    Metric::KeepP90,
    Metric::Rps,
    Metric::Bulk,
];

impl Metric {
    fn label(self, s: &Spec) -> String {
        match self {
            Metric::TunnelP50 => "1. CONNECT tunnel → first upstream byte, p50 (µs)".into(),
            Metric::TunnelP90 => "1. CONNECT tunnel → first upstream byte, p90 (µs)".into(),
            Metric::NewP50 => "2a. GET /small, new connection each, p50 (µs)".into(),
            Metric::NewP90 => "2a. GET /small, new connection each, p90 (µs)".into(),
            Metric::KeepP50 => "2b. GET /small, keep-alive, p50 (µs)".into(),
            Metric::KeepP90 => "2b. GET /small, keep-alive, p90 (µs)".into(),
            Metric::Rps => format!("3. GET /small, {} concurrent keep-alive clients (req/s)", s.concurrency),
            Metric::Bulk => format!("4. {} MiB through a CONNECT tunnel, median (MiB/s)", s.bulk_mib),
        }
    }

    fn higher_is_better(self) -> bool {
        matches!(self, Metric::Rps | Metric::Bulk)
    }

    fn value(self, m: &Measured) -> Option<f64> {
        match self {
            Metric::TunnelP50 => pct(&m.tunnel, 50.0),
            Metric::TunnelP90 => pct(&m.tunnel, 90.0),
            Metric::NewP50 => pct(&m.new_conn, 50.0),
            Metric::NewP90 => pct(&m.new_conn, 90.0),
            Metric::KeepP50 => pct(&m.keep, 50.0),
            Metric::KeepP90 => pct(&m.keep, 90.0),
            Metric::Rps => (m.rps_secs > 0.0 && m.rps_ok > 0).then(|| m.rps_ok as f64 / m.rps_secs),
            Metric::Bulk => pct(&m.bulk, 50.0),
        }
    }
}

/// Nearest-rank percentile.
fn pct(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    Some(s[rank.clamp(1, s.len()) - 1])
}

fn fmt_val(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// A column's state: measured, or the reason it was not.
enum Col<'a> {
    Got(&'a Measured),
    Not(String),
}

pub fn render(
    spec: &Spec,
    slots: &[Slot],
    ready: &[Target],
    m: &[Measured],
    failed: &[(String, String)],
    subject: &str,
) -> String {
    let col = |name: &str| -> Col<'_> {
        if let Some(i) = ready.iter().position(|t| t.name == name) {
            return Col::Got(&m[i]);
        }
        if let Some((_, e)) = failed.iter().find(|(n, _)| n == name) {
            return Col::Not(format!("failed ({})", e.replace('|', "/")));
        }
        match slots.iter().find(|s| s.name() == name) {
            Some(Slot::Missing { why, .. }) => Col::Not(why.clone()),
            _ => Col::Not("absent".into()),
        }
    };
    let cell = |name: &str, metric: Metric| -> String {
        match col(name) {
            Col::Got(x) => metric.value(x).map(fmt_val).unwrap_or_else(|| "no data".into()),
            Col::Not(why) => why,
        }
    };
    let names: Vec<&str> = slots.iter().map(Slot::name).collect();
    let is_direct = |n: &str| matches!(slots.iter().find(|s| s.name() == n), Some(Slot::Ready(t)) if t.proxy.is_none());
    let direct = names.iter().copied().find(|n| is_direct(n));

    let mut o = String::new();
    let _ = writeln!(o, "### Absolute figures (same run, loopback)\n");
    let _ = writeln!(
        o,
        "scale {}: figure 1 {} tunnels, 2a {} requests, 2b {} requests per target; figure 3 {:.1} s per target; figure 4 {} run(s) per target. Latency: lower is better; req/s and MiB/s: higher is better.\n",
        spec.scale, spec.tunnel_n, spec.new_conn_n, spec.keepalive_n, spec.rps_secs, spec.bulk_reps
    );
    let _ = write!(o, "| figure |");
    for n in &names {
        let _ = write!(o, " {n} |");
    }
    let _ = write!(o, "\n|---|");
    for _ in &names {
        let _ = write!(o, "---:|");
    }
    o.push('\n');
    for metric in METRICS {
        let _ = write!(o, "| {} |", metric.label(spec));
        for n in &names {
            let _ = write!(o, " {} |", cell(n, metric));
        }
        o.push('\n');
    }
    let _ = write!(o, "| connections opened in 2b / in 3 |");
    for n in &names {
        match col(n) {
            Col::Got(x) => {
                let _ = write!(o, " {} / {} |", x.keep_opened, x.rps_opened);
            }
            Col::Not(_) => o.push_str(" – |"),
        }
    }
    o.push('\n');
    let _ = write!(o, "| errors |");
    for n in &names {
        match col(n) {
            Col::Got(x) => {
                let total: u64 = x.errors.iter().map(|e| e.1).sum();
                let _ = write!(o, " {total} |");
            }
            Col::Not(_) => o.push_str(" – |"),
        }
    }
    o.push_str("\n\n");

    // Ratio pairs: every proxy against direct, then the subject against
    // every other proxy.
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if let Some(d) = direct {
        for n in &names {
            if *n != d {
                pairs.push((n, d));
            }
        }
    }
    for n in &names {
        if *n != subject && Some(*n) != direct {
            pairs.push((subject, n));
        }
    }
    if !pairs.is_empty() {
        let _ = writeln!(o, "### Ratios (X / Y of the figures above, same run)\n");
        let _ = writeln!(
            o,
            "For latencies a ratio below 1 means X is faster; for req/s and MiB/s a ratio above 1 means X is faster.\n"
        );
        let _ = write!(o, "| figure |");
        for (a, b) in &pairs {
            let _ = write!(o, " {a} / {b} |");
        }
        let _ = write!(o, "\n|---|");
        for _ in &pairs {
            let _ = write!(o, "---:|");
        }
        o.push('\n');
        for metric in METRICS {
            let _ = write!(o, "| {} |", metric.label(spec));
            for (a, b) in &pairs {
                let _ = write!(o, " {} |", ratio_cell(col(a), col(b), metric));
            }
            o.push('\n');
        }
        o.push('\n');
    }

    // The project's targets, for the subject.
    let _ = writeln!(o, "### Targets for {subject}\n");
    match col(subject) {
        Col::Not(why) => {
            let _ = writeln!(o, "- {subject}: {why}; targets not evaluated.");
        }
        Col::Got(sm) => {
            let peers: Vec<&str> =
                names.iter().copied().filter(|n| *n != subject && Some(*n) != direct).collect();
            let mut all = true;
            let mut lines = Vec::new();
            let mut unmeasured = std::collections::BTreeSet::new();
            for metric in METRICS {
                let Some(sv) = metric.value(sm) else {
                    all = false;
                    lines.push(format!("  - {}: no data", metric.label(spec)));
                    continue;
                };
                for p in &peers {
                    let pv = match col(p) {
                        Col::Got(x) => metric.value(x),
                        Col::Not(_) => None,
                    };
                    let Some(pv) = pv else {
                        all = false;
                        unmeasured.insert(p.to_string());
                        continue;
                    };
                    let better = if metric.higher_is_better() { sv > pv } else { sv < pv };
                    if !better {
                        all = false;
                        lines.push(format!("  - {}: not faster than {p} ({} vs {})", metric.label(spec), fmt_val(sv), fmt_val(pv)));
                    }
                }
            }
            let verdict = if all {
                "yes".to_string()
            } else if unmeasured.is_empty() || !lines.is_empty() {
                "no".to_string()
            } else {
                format!("not evaluated (no figures from {})", unmeasured.iter().cloned().collect::<Vec<_>>().join(", "))
            };
            let _ = writeln!(o, "- faster than every peer on every figure: **{verdict}**");
            for p in &unmeasured {
                let _ = writeln!(o, "  - not compared with {p}: no figures");
            }
            for l in lines {
                let _ = writeln!(o, "{l}");
            }
            if let Some(Col::Got(dm)) = direct.map(col) {
                if let (Some(s), Some(d)) = (Metric::Bulk.value(sm), Metric::Bulk.value(dm)) {
                    let r = s / d;
                    let _ = writeln!(
                        o,
                        "- bulk ≥ 50% of direct: **{}** ({:.0}%)",
                        if r >= 0.5 { "yes" } else { "no" },
                        r * 100.0
                    );
                }
            }
        }
    }

    let mut errs = String::new();
    for n in &names {
        if let Col::Got(x) = col(n) {
            for (fig, count, first) in &x.errors {
                let _ = writeln!(errs, "- {n}, figure {fig}: {count} error(s), first: {first}");
            }
        }
    }
    for (n, e) in failed {
        let _ = writeln!(errs, "- {n}: failed the preflight: {e}");
    }
    if !errs.is_empty() {
        let _ = writeln!(o, "\n### Errors\n\n{errs}");
    }
    o
}

fn ratio_cell(a: Col<'_>, b: Col<'_>, metric: Metric) -> String {
    match (a, b) {
        (Col::Got(x), Col::Got(y)) => match (metric.value(x), metric.value(y)) {
            (Some(p), Some(q)) if q > 0.0 => format!("{:.2}", p / q),
            _ => "no data".into(),
        },
        (Col::Not(why), _) | (_, Col::Not(why)) => why,
    }
}
