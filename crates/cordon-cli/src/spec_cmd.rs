//! `cordon spec`: sandbox spec files (the reference is `docs/spec.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_policy::diag::{Diagnostic, Diagnostics, Severity};
use cordon_sandbox::{SandboxSpec, SpecError};
use serde_json::json;

use crate::exit::PROBLEMS;
use crate::Format;

#[derive(clap::Subcommand)]
pub enum SpecCommand {
    /// Load and check spec files (`--spec FILE` of `run` and `sandbox up`):
    /// every field as a sandbox would take it, a problem reported with its
    /// position and a fix. Exit status: 0 when every file loads, 1 when any
    /// does not.
    Check {
        /// Spec files to check (YAML; `docs/spec.md` says what goes in one).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Print the JSON Schema of a spec file (for editors; the same as
    /// docs/spec.schema.json), generated from the types the loader reads.
    Schema,
}

pub fn run(cmd: SpecCommand) -> ExitCode {
    match cmd {
        SpecCommand::Check { files, format } => check(&files, format),
        SpecCommand::Schema => {
            let schema = cordon_sandbox::spec_json_schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
    }
}

fn check(files: &[PathBuf], format: Format) -> ExitCode {
    let mut problems = Diagnostics::default();
    let mut loaded = Vec::new();
    for f in files {
        match SandboxSpec::from_file(f) {
            Ok(s) => loaded.push((f.display().to_string(), s)),
            Err(e) => problems.0.push(diagnostic(f, &e)),
        }
    }
    let failed = !problems.0.is_empty();
    match format {
        Format::Json => {
            let specs: Vec<_> = loaded
                .iter()
                .map(|(f, s)| json!({"file": f, "spec": summary_json(s)}))
                .collect();
            println!(
                "{}",
                json!({"ok": !failed, "diagnostics": problems.0, "specs": specs})
            );
        }
        Format::Human => {
            for (f, s) in &loaded {
                println!("ok    {f}: {}", summary(s));
            }
            if failed {
                eprintln!("{}", problems.render());
                eprintln!(
                    "\n{} of {} file(s) do not load",
                    problems.0.len(),
                    files.len()
                );
            }
        }
    }
    if failed {
        ExitCode::from(PROBLEMS)
    } else {
        ExitCode::SUCCESS
    }
}

/// A load error as a positioned diagnostic (the line shown, the column
/// marked), as `policy check` shows a policy's.
fn diagnostic(path: &std::path::Path, e: &SpecError) -> Diagnostic {
    let (line, column, message, help) = match e {
        SpecError::Syntax {
            line,
            column,
            message,
            ..
        } => (
            *line,
            *column,
            message.clone(),
            Some(
                "fix the YAML syntax (anchors, aliases, tags and duplicate keys are not accepted)"
                    .to_string(),
            ),
        ),
        SpecError::Structure {
            line,
            column,
            message,
            ..
        } => (
            *line,
            *column,
            message.clone(),
            Some("docs/spec.md lists every field".to_string()),
        ),
        SpecError::Value {
            line,
            column,
            field,
            reason,
            ..
        } => (*line, *column, format!("`{field}`: {reason}"), None),
        other => (0, 0, other.to_string(), None),
    };
    let source_line = if line > 0 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.lines().nth(line - 1).map(str::to_string))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Diagnostic {
        file: path.display().to_string(),
        line,
        column,
        width: 1,
        rule: None,
        message,
        help,
        source_line,
        severity: Severity::Error,
    }
}

fn summary(s: &SandboxSpec) -> String {
    let mut parts = vec![
        format!("kind `{}`", s.kind()),
        format!("image `{}`", s.image()),
        format!("work dir `{}`", s.work_dir()),
    ];
    if !s.egress_allow().is_empty() {
        parts.push(format!("{} egress entries", s.egress_allow().len()));
    }
    if let Some(m) = s.min_isolation() {
        parts.push(format!("at least `{m}`"));
    }
    if !s.secrets().is_empty() {
        parts.push(format!("{} secret(s)", s.secrets().len()));
    }
    if !s.declared_outputs().is_empty() {
        parts.push(format!("{} declared output(s)", s.declared_outputs().len()));
    }
    parts.join(", ")
}

fn summary_json(s: &SandboxSpec) -> serde_json::Value {
    let r = s.resources();
    json!({
        "kind": s.kind(),
        "image": s.image(),
        "work_dir": s.work_dir(),
        "egress_allow": s.egress_allow().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "requires": s.requires().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        "min_isolation": s.min_isolation().map(|m| m.to_string()),
        "resources": {
            "memory": r.memory, "processes": r.processes, "cpu_seconds": r.cpu_seconds,
            "wall_seconds": r.wall_seconds, "disk": r.disk,
        },
        "secrets": s.secrets().iter().map(|n| n.as_str().to_string()).collect::<Vec<_>>(),
        "declared_outputs": s.declared_outputs().iter().map(|o| o.path().to_string()).collect::<Vec<_>>(),
        "outputs_named_at_call_time": s.outputs_named_at_call_time(),
    })
}
