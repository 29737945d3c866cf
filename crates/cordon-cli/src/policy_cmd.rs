//! `cordon policy check | test | explain`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use cordon_policy::cases::{self, Case, CaseResult, Expect, FactsBuilder};
use cordon_policy::explain::{place, Explanation};
use cordon_policy::{Diagnostics, Policy, RuleId, Severity, Surface, Verdict};
use serde_json::json;

use crate::{Format, EXIT_PROBLEMS, EXIT_USAGE};

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Print the built-in `cordon:default` (what `cordon run` applies
    /// without `--policy`) as a policy file; name it as your root with
    /// `extends: ["cordon:default"]` to narrow it.
    ShowDefault,
    /// Load and check policy files: every rule parsed and type-checked, every
    /// problem reported at once with its position and a fix.
    Check {
        /// Policy files to check (each with the layers it extends).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Run test cases against a policy. Each case is decided as the final
    /// enforcing point decides it (undetermined is deny).
    ///
    /// Exit status: 0 when every case passes, 1 when any fails (or, with
    /// --coverage, when a rule decided no case), 2 when the policy or a test
    /// file does not load.
    Test {
        /// The policy (with the layers it extends).
        policy: PathBuf,
        /// Test files: `tests:` and a list of cases.
        #[arg(required = true)]
        tests: Vec<PathBuf>,
        /// List the rules no case exercised, and fail the run if there are any.
        #[arg(long)]
        coverage: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Decide one request and say why: the rules that decided, the unknowns
    /// that kept it open, or the nearest allow rule and the inputs that kept
    /// it from matching.
    ///
    /// Exit status: 0 allowed, 1 denied, 2 when the policy or the facts do
    /// not load.
    Explain(Box<ExplainArgs>),
}

/// The facts of one request, mirroring a test case.
#[derive(Args)]
#[command(group = clap::ArgGroup::new("surface").args(["egress", "compute", "storage", "ingress"]))]
pub struct ExplainArgs {
    /// The policy (with the layers it extends).
    policy: PathBuf,
    /// Decide an egress request (give --url).
    #[arg(long)]
    egress: bool,
    /// Decide a process start (give --command, --arg ...).
    #[arg(long)]
    compute: bool,
    /// Decide a filesystem access (give --path and --mode).
    #[arg(long)]
    storage: bool,
    /// Decide a port reached from the host (give --port, --caller ...).
    #[arg(long)]
    ingress: bool,
    /// A YAML file holding one case (as in a test file; `name` and `expect`
    /// optional), or one line of the egress audit log (JSON), instead of the
    /// flags below; `-` reads standard input.
    #[arg(long, value_name = "FILE", conflicts_with = "surface")]
    facts: Option<PathBuf>,
    /// An identity field: namespace=, name=, attested=true|false, labels.KEY=.
    #[arg(long = "identity", value_name = "KEY=VALUE")]
    identity: Vec<String>,
    /// The deployment: name=NAME.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The time of the decision, RFC 3339 (default: now).
    #[arg(long)]
    now: Option<String>,
    /// egress: the URL (scheme, host, port and path are derived from it).
    #[arg(long)]
    url: Option<String>,
    /// egress: override the scheme derived from --url.
    #[arg(long)]
    scheme: Option<String>,
    /// egress: override the host derived from --url.
    #[arg(long)]
    host: Option<String>,
    /// egress: override the port derived from --url; ingress: the port.
    #[arg(long)]
    port: Option<String>,
    /// ingress: where it would listen on the host (default 127.0.0.1).
    #[arg(long)]
    listen: Option<String>,
    /// ingress: who asks, one field of namespace=, name=, attested=
    /// (repeat).
    #[arg(long = "caller", value_name = "KEY=VALUE")]
    caller: Vec<String>,
    /// egress (http, or https to a host the policy inspects): the method,
    /// default GET.
    #[arg(long)]
    method: Option<String>,
    /// egress (http, or https to an inspected host): one request header
    /// (repeat for each, in the order sent).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// egress (http, or https to an inspected host): the request path;
    /// storage: the file path.
    #[arg(long)]
    path: Option<String>,
    /// egress: the resolved address.
    #[arg(long)]
    ip: Option<String>,
    /// compute: the command as invoked.
    #[arg(long)]
    command: Option<String>,
    /// compute: the command's final target with every link resolved.
    #[arg(long)]
    command_target: Option<String>,
    /// compute: one argument (repeat for each, in order).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    args: Vec<String>,
    /// compute: CPU-seconds asked.
    #[arg(long)]
    cpu: Option<String>,
    /// compute: memory asked (e.g. 256MiB).
    #[arg(long)]
    memory: Option<String>,
    /// storage: read, write or execute.
    #[arg(long)]
    mode: Option<String>,
    /// storage: the size of a write.
    #[arg(long)]
    bytes: Option<String>,
    /// storage, compute: the sandbox's work dir as the workload sees it
    /// (default /workspace).
    #[arg(long)]
    work_dir: Option<String>,
    /// Decide a secret hand-out: the secret's name (selects the secret surface).
    #[arg(long, conflicts_with = "surface")]
    secret: Option<String>,
    /// secret: where a brokered secret is being substituted, one field of
    /// host=, method=, path=, header= (repeat); none: unknown, as where the
    /// secret is granted.
    #[arg(long = "destination", value_name = "KEY=VALUE")]
    destination: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

pub fn run(cmd: PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Check { files, format } => check(&files, format),
        PolicyCommand::Test {
            policy,
            tests,
            coverage,
            format,
        } => test(&policy, &tests, coverage, format),
        PolicyCommand::Explain(args) => explain(*args),
        PolicyCommand::ShowDefault => {
            let text = cordon_policy::resolve::builtin("default")
                .map(|u| u.text)
                .unwrap_or_default();
            print!("{text}");
            ExitCode::SUCCESS
        }
    }
}

fn check(files: &[PathBuf], format: Format) -> ExitCode {
    // A file that is not there is a usage error (2), as for every other
    // command; problems found in a file that is are 1.
    if let Some(missing) = files.iter().find(|f| !f.exists()) {
        eprintln!(
            "error: policy `{}`: no such file\nhelp: check the path; `cordon policy show-default` prints the built-in policy to start from",
            missing.display()
        );
        return ExitCode::from(crate::exit::USAGE);
    }
    let mut all = Diagnostics::default();
    let mut summaries = Vec::new();
    for f in files {
        match Policy::load_file(f) {
            Ok(p) => {
                all.0.extend(p.warnings.0.iter().cloned());
                summaries.push((
                    f.display().to_string(),
                    p.summary(),
                    bounds_of(&p),
                    inspected_of(&p),
                    lowered_of(&p),
                ));
            }
            Err(d) => all.0.extend(d.0),
        }
    }
    let failed = all.has_errors();
    match format {
        Format::Json => {
            let out = json!({
                "ok": !failed,
                "diagnostics": all.0,
                "policies": summaries.iter().map(|(f, s, b, i, l)| json!({"file": f, "summary": s, "bounds": b, "inspect": i, "lowered": l.iter().map(|(o, a, b)| json!({"layer": o, "applies_to": a, "bounds": b})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            });
            println!("{out}");
        }
        Format::Human => {
            if !all.0.is_empty() {
                eprintln!("{}", all.render());
            }
            if failed {
                let n = all
                    .0
                    .iter()
                    .filter(|d| d.severity == Severity::Error)
                    .count();
                eprintln!("\n{n} error(s) in {} file(s)", files.len());
            } else {
                for (f, s, b, i, lowered) in &summaries {
                    println!("ok    {f}: {s}");
                    let shown: Vec<String> = b.iter().map(|(k, v)| format!("{k} {v}")).collect();
                    println!("      root bounds: {}", shown.join(", "));
                    for (origin, applies, b) in lowered {
                        let shown: Vec<String> =
                            b.iter().map(|(k, v)| format!("{k} {v}")).collect();
                        let whom = if *applies {
                            " (for whom it applies to)"
                        } else {
                            ""
                        };
                        println!("      lowered by {origin}{whom}: {}", shown.join(", "));
                    }
                    if !i.is_empty() {
                        let shown: Vec<String> = i
                            .iter()
                            .map(|x| {
                                let host = x["host"].as_str().unwrap_or_default();
                                if x["ca"].as_bool() == Some(true) {
                                    format!("{host} (with its own CA roots)")
                                } else {
                                    host.to_string()
                                }
                            })
                            .collect();
                        println!(
                            "      inspected (TLS terminated by the proxy): {}",
                            shown.join(", ")
                        );
                    }
                }
            }
        }
    }
    if failed {
        ExitCode::from(EXIT_PROBLEMS)
    } else {
        ExitCode::SUCCESS
    }
}

/// The root's bounds (every identity gets these or narrower), as a policy
/// writes them; an unstated one is the built-in default.
fn bounds_of(p: &Policy) -> std::collections::BTreeMap<&'static str, String> {
    cordon_policy::Bound::ALL
        .into_iter()
        .map(|b| (b.key(), b.show(p.bounds.get(b))))
        .collect()
}

/// Each later layer that lowers a bound: its name, whether it applies to
/// some identities only (`applies_to`), and the bounds it states.
#[allow(clippy::type_complexity)]
fn lowered_of(
    p: &Policy,
) -> Vec<(
    String,
    bool,
    std::collections::BTreeMap<&'static str, String>,
)> {
    p.layers
        .iter()
        .skip(1)
        .filter_map(|l| {
            let stated: std::collections::BTreeMap<&'static str, String> =
                cordon_policy::Bound::ALL
                    .into_iter()
                    .filter_map(|b| l.bounds.get(b).map(|s| (b.key(), b.show(s.value))))
                    .collect();
            (!stated.is_empty()).then(|| (l.origin.to_string(), l.applies_to.is_some(), stated))
        })
        .collect()
}

/// The hosts the proxy terminates TLS for, in load order, each with where
/// it is named and whether it brings its own CA roots.
fn inspected_of(p: &Policy) -> Vec<serde_json::Value> {
    p.inspections
        .iter()
        .map(|i| {
            json!({
                "host": i.host,
                "file": &*i.file,
                "line": i.line,
                "ca": i.roots_pem.is_some(),
            })
        })
        .collect()
}

/// Prints load diagnostics and returns the exit code for "does not load".
fn not_loaded(d: &Diagnostics, format: Format) -> ExitCode {
    match format {
        Format::Json => println!("{}", json!({"ok": false, "diagnostics": d.0})),
        Format::Human => eprintln!("{}", d.render()),
    }
    ExitCode::from(EXIT_USAGE)
}

fn load_policy(path: &Path, format: Format) -> Result<Policy, ExitCode> {
    let p = Policy::load_file(path).map_err(|d| not_loaded(&d, format))?;
    if format == Format::Human && !p.warnings.0.is_empty() {
        eprintln!("{}", p.warnings.render());
    }
    Ok(p)
}

fn test(policy: &Path, tests: &[PathBuf], coverage: bool, format: Format) -> ExitCode {
    let policy = match load_policy(policy, format) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut cases: Vec<Case> = Vec::new();
    let mut diags = Diagnostics::default();
    for t in tests {
        match cases::load_file(t, &policy) {
            Ok(c) => cases.extend(c),
            Err(d) => diags.0.extend(d.0),
        }
    }
    // A case naming a rule the policy does not have is a broken test, not a
    // failing one: it could never pass, and a typo would hide forever.
    for c in cases::unknown_rules(&policy, &cases) {
        diags.0.push(cordon_policy::Diagnostic {
            file: c.file.to_string(),
            line: c.line,
            column: c.column,
            width: 1,
            rule: None,
            message: format!(
                "case `{}` names rule `{}`, which the policy does not have",
                c.name,
                c.rule.as_deref().unwrap_or_default()
            ),
            help: Some("name a rule by its `name` (or `FILE:NAME`); `cordon policy check` lists none of them, the policy file does".into()),
            source_line: String::new(),
            severity: Severity::Error,
        });
    }
    if diags.has_errors() {
        return not_loaded(&diags, format);
    }
    if cases.is_empty() {
        // A run that tests nothing must not read as a pass.
        eprintln!("error: the test files hold no cases\n  help: add cases under `tests:`");
        return ExitCode::from(EXIT_USAGE);
    }
    let results: Vec<CaseResult> = cases.iter().map(|c| cases::run(&policy, c)).collect();
    let passed = results.iter().filter(|r| r.passed).count();
    let failed = results.len() - passed;
    let uncovered = coverage.then(|| cases::uncovered(&policy, &results));
    let surface_of = |c: &Case| c.request.facts.surface();
    match format {
        Format::Json => {
            let out = json!({
                "cases": cases.iter().zip(&results).map(|(c, r)| json!({
                    "name": c.name,
                    "file": &*c.file,
                    "line": c.line,
                    "surface": surface_of(c).key(),
                    "expect": c.expect,
                    "got": r.got,
                    "verdict": r.explanation.decision.verdict,
                    "passed": r.passed,
                    "deciding": rules_json(&policy, &r.explanation.decision.deciding),
                    "why": r.explanation.why(&policy, surface_of(c)),
                    "missing_rule": r.missing_rule,
                })).collect::<Vec<_>>(),
                "uncovered": uncovered.as_ref().map(|u| rules_json(&policy, u)),
                "passed": passed,
                "failed": failed,
            });
            println!("{out}");
        }
        Format::Human => {
            let width = cases
                .iter()
                .map(|c| c.name.chars().count())
                .max()
                .unwrap_or(0);
            for (c, r) in cases.iter().zip(&results) {
                let status = if r.passed { "ok" } else { "FAIL" };
                let line = if c.expect == Expect::Deny {
                    format!("{status:<6}{:<width$}  (negative)", c.name)
                } else {
                    format!("{status:<6}{}", c.name)
                };
                println!("{line}");
                if !r.passed {
                    for l in failure_lines(&policy, c, r) {
                        println!("      {l}");
                    }
                }
            }
            if let Some(u) = &uncovered {
                if u.is_empty() {
                    println!(
                        "coverage: every rule decided at least one case ({} rules)",
                        policy.rules.len()
                    );
                } else {
                    println!("coverage: {} rule(s) decided no case:", u.len());
                    for id in u {
                        println!("  uncovered: {}", place(&policy, *id));
                    }
                }
            }
            println!("{passed} passed, {failed} failed");
        }
    }
    let uncovered_any = uncovered.is_some_and(|u| !u.is_empty());
    if failed > 0 || uncovered_any {
        ExitCode::from(EXIT_PROBLEMS)
    } else {
        ExitCode::SUCCESS
    }
}

fn word(e: Expect) -> &'static str {
    match e {
        Expect::Allow => "allow",
        Expect::Deny => "deny",
    }
}

fn failure_lines(policy: &Policy, c: &Case, r: &CaseResult) -> Vec<String> {
    let mut out = Vec::new();
    let verdict_note = if r.explanation.decision.verdict == Verdict::Undetermined {
        " (undetermined)"
    } else {
        ""
    };
    match &r.missing_rule {
        Some(want) if r.got == c.expect => out.push(format!(
            "expected: {} by rule `{want}`, got: {} by other rules",
            word(c.expect),
            word(r.got)
        )),
        _ => out.push(format!(
            "expected: {}, got: {}{verdict_note}",
            word(c.expect),
            word(r.got)
        )),
    }
    out.extend(matched_lines(
        policy,
        &r.explanation,
        c.request.facts.surface(),
    ));
    out
}

/// `matched:` and what follows it, from the explanation.
fn matched_lines(policy: &Policy, e: &Explanation, surface: Surface) -> Vec<String> {
    let d = &e.decision;
    let decided_by_rules =
        matches!(d.verdict, Verdict::Allow | Verdict::Deny) && !d.deciding.is_empty();
    let lines: Vec<String> = if decided_by_rules {
        d.deciding.iter().map(|id| place(policy, *id)).collect()
    } else {
        e.why(policy, surface)
    };
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("matched:  {l}")
            } else {
                format!("          {l}")
            }
        })
        .collect()
}

fn rules_json(policy: &Policy, ids: &[RuleId]) -> Vec<serde_json::Value> {
    ids.iter()
        .map(|id| {
            let r = policy.rule(*id);
            json!({
                "name": r.name,
                "file": &*r.file,
                "line": r.line,
                "layer": r.layer,
                "effect": r.effect,
                "source": r.source,
            })
        })
        .collect()
}

enum Facts {
    /// An egress audit line.
    Audit(Box<cordon_egress::AuditLine>),
    /// A case's text.
    Case(String),
}

/// `--facts`: a file (or `-`, standard input) holding a YAML case or one
/// JSON line of the egress audit log.
fn facts_file(f: &std::path::Path) -> Result<Facts, String> {
    use std::io::Read as _;
    let limit = cordon_policy::policy::MAX_FILE_BYTES;
    let mut text = String::new();
    let read = if f == std::path::Path::new("-") {
        std::io::stdin()
            .lock()
            .take(limit + 1)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(f).and_then(|h| h.take(limit + 1).read_to_string(&mut text))
    };
    read.map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > limit {
        return Err(format!("it is larger than {limit} bytes"));
    }
    if text.trim_start().starts_with('{') {
        return cordon_egress::AuditLine::parse(&text).map(|l| Facts::Audit(Box::new(l)));
    }
    Ok(Facts::Case(text))
}

fn explain(a: ExplainArgs) -> ExitCode {
    let format = a.format;
    let policy = match load_policy(&a.policy, format) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let request = match &a.facts {
        Some(f) => {
            if has_fact_flags(&a) {
                eprintln!("error: --facts holds the whole request; give no other fact flags with it\n  help: put the facts in the file, or drop --facts");
                return ExitCode::from(EXIT_USAGE);
            }
            match facts_file(f) {
                Ok(Facts::Audit(line)) => {
                    // The proxy's own refusals (the allowlist, an address
                    // class, DNS, SNI) are not policy rules: say what it
                    // recorded before the policy's explanation.
                    eprintln!(
                        "audit line: {} (status {}) for {} at {}: {}",
                        line.verdict, line.status, line.sandbox, line.time, line.reason
                    );
                    line.request()
                }
                Ok(Facts::Case(text)) => {
                    match cases::load_one_str(&f.display().to_string(), &text, &policy) {
                        Ok(r) => r,
                        Err(d) => return not_loaded(&d, format),
                    }
                }
                Err(msg) => {
                    eprintln!("error: --facts {}: {msg}\n  help: give a YAML case (as in a test file) or one line of an egress audit log (`tail -n 1 egress-audit.jsonl | cordon policy explain POLICY --facts -`)", f.display());
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
        None => match request_from_flags(&a, &policy) {
            Ok(r) => r,
            Err(msg) => {
                eprintln!("error: {msg}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    let e = policy.explain(&request);
    let surface = request.facts.surface();
    let why = e.why(&policy, surface);
    match format {
        Format::Json => {
            let nearest = e.nearest.as_ref().map(|n| {
                json!({
                    "rule": rules_json(&policy, &[n.rule])[0],
                    "conjuncts": n.conjuncts.iter().map(|c| json!({
                        "source": c.source,
                        "state": c.state,
                        "inputs": c.inputs.iter().map(|(f, v)| json!({"fact": f.spelling(), "value": v})).collect::<Vec<_>>(),
                        "errors": c.errors,
                    })).collect::<Vec<_>>(),
                })
            });
            let out = json!({
                "allowed": e.decision.is_allowed(),
                "verdict": e.decision.verdict,
                "surface": surface.key(),
                "deciding": rules_json(&policy, &e.decision.deciding),
                "unknown": e.decision.unknown.iter().map(|f| f.spelling()).collect::<Vec<_>>(),
                "errors": e.decision.errors,
                "layers": e.layers.iter().map(|l| policy.layers[*l as usize].origin.to_string()).collect::<Vec<_>>(),
                "nearest": nearest,
                "why": why,
            });
            println!("{out}");
        }
        Format::Human => {
            println!("{}", e.headline());
            for l in why {
                println!("  {l}");
            }
            if e.layers.len() > 1 {
                let names: Vec<String> = e
                    .layers
                    .iter()
                    .map(|l| policy.layers[*l as usize].origin.to_string())
                    .collect();
                println!("  layers applied: {}", names.join(", "));
            }
        }
    }
    if e.decision.is_allowed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_PROBLEMS)
    }
}

fn has_fact_flags(a: &ExplainArgs) -> bool {
    !a.identity.is_empty()
        || !a.env.is_empty()
        || !a.args.is_empty()
        || !a.headers.is_empty()
        || !a.destination.is_empty()
        || [
            &a.now,
            &a.url,
            &a.scheme,
            &a.host,
            &a.port,
            &a.method,
            &a.path,
            &a.ip,
            &a.command,
            &a.command_target,
            &a.cpu,
            &a.memory,
            &a.mode,
            &a.bytes,
            &a.work_dir,
            &a.secret,
        ]
        .iter()
        .any(|o| o.is_some())
}

fn request_from_flags(a: &ExplainArgs, policy: &Policy) -> Result<cordon_policy::Request, String> {
    let surface = if a.egress {
        Surface::Egress
    } else if a.compute {
        Surface::Compute
    } else if a.storage {
        Surface::Storage
    } else if a.secret.is_some() {
        Surface::Secret
    } else if a.ingress {
        Surface::Ingress
    } else {
        return Err("name the surface to decide: --egress, --compute, --storage, --ingress, or --secret NAME (or give --facts FILE)".into());
    };
    let mut b = FactsBuilder::new(surface);
    let fact_err = |e: cases::FactError| e.to_string();
    for kv in &a.identity {
        let (k, v) = split_kv(kv, "--identity", "namespace=team-a")?;
        b.identity(k, v).map_err(fact_err)?;
    }
    for kv in &a.env {
        let (k, v) = split_kv(kv, "--env", "name=prod")?;
        b.env(k, v).map_err(fact_err)?;
    }
    if let Some(n) = &a.now {
        b.now(n).map_err(fact_err)?;
    }
    let fields: [(&str, &Option<String>); 16] = [
        ("url", &a.url),
        ("scheme", &a.scheme),
        ("host", &a.host),
        ("port", &a.port),
        ("method", &a.method),
        ("path", &a.path),
        ("ip", &a.ip),
        ("command", &a.command),
        ("command_target", &a.command_target),
        ("cpu", &a.cpu),
        ("memory", &a.memory),
        ("mode", &a.mode),
        ("bytes", &a.bytes),
        ("work_dir", &a.work_dir),
        ("secret", &a.secret),
        ("listen", &a.listen),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            b.field(k, v)
                .map_err(|e| format!("--{}: {}", k.replace('_', "-"), fact_err(e)))?;
        }
    }
    if surface == Surface::Compute {
        b.args_given();
    }
    for x in &a.args {
        b.arg(x).map_err(fact_err)?;
    }
    for kv in &a.headers {
        let (k, v) = split_kv(kv, "--header", "authorization=Bearer x")?;
        b.header(k, v)
            .map_err(|e| format!("--header: {}", fact_err(e)))?;
    }
    for kv in &a.caller {
        let (k, v) = split_kv(kv, "--caller", "namespace=team-a")?;
        b.caller(k, v)
            .map_err(|e| format!("--caller: {}", fact_err(e)))?;
    }
    for kv in &a.destination {
        let (k, v) = split_kv(kv, "--destination", "host=api.example.com")?;
        b.destination(k, v)
            .map_err(|e| format!("--destination: {}", fact_err(e)))?;
    }
    b.build(policy).map_err(fact_err)
}

fn split_kv<'a>(kv: &'a str, flag: &str, example: &str) -> Result<(&'a str, &'a str), String> {
    kv.split_once('=').ok_or_else(|| {
        format!("{flag} takes KEY=VALUE, not `{kv}`\n  help: write e.g. `{flag} {example}`")
    })
}
