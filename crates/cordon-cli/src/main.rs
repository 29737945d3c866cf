//! The `cordon` command. This file maps flags to library calls and errors to
//! exit codes; it decides nothing itself.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use cordon_policy::{Diagnostics, Policy};

/// cordon: a sandbox for code that AI agents write and run.
#[derive(Parser)]
#[command(name = "cordon", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with policies: one CEL vocabulary for egress, compute, storage and secrets.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Load and check policy files: every rule parsed and type-checked, every
    /// problem reported at once with its position and a fix.
    Check {
        /// Policy files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Exit codes: 0 clean, 1 a check found problems, 2 usage errors (clap).
const EXIT_PROBLEMS: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Policy {
            command: PolicyCommand::Check { files, format },
        } => check(&files, format),
    }
}

fn check(files: &[PathBuf], format: Format) -> ExitCode {
    let mut all = Diagnostics::default();
    let mut summaries = Vec::new();
    for f in files {
        match Policy::load_file(f) {
            Ok(p) => {
                all.0.extend(p.warnings.0.iter().cloned());
                summaries.push((f.display().to_string(), p.summary()));
            }
            Err(d) => all.0.extend(d.0),
        }
    }
    let failed = all.has_errors();
    match format {
        Format::Json => {
            let out = serde_json::json!({
                "ok": !failed,
                "diagnostics": all.0,
                "policies": summaries.iter().map(|(f, s)| serde_json::json!({"file": f, "summary": s})).collect::<Vec<_>>(),
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
                    .filter(|d| d.severity == cordon_policy::Severity::Error)
                    .count();
                eprintln!("\n{n} error(s) in {} file(s)", files.len());
            } else {
                for (f, s) in &summaries {
                    println!("ok    {f}: {s}");
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
