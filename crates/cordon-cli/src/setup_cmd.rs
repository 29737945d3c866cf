//! `cordon setup`: the first run's one explicit choice of floor, recorded.
//!
//! Without `--min-isolation` it shows what this machine can hold — each
//! rung and the backends that can run there, and why the ones that cannot
//! do not — and records nothing. With it, it checks that some backend
//! here serves at or above that rung and writes `min_isolation:` into the
//! user's host configuration (`$XDG_CONFIG_HOME/cordon/config.yaml`, else
//! `~/.config/cordon/config.yaml`; `--config FILE` for another), keeping
//! whatever else the file says. Every later command reads the floor from
//! there, so none needs a flag; a `--min-isolation` flag or
//! `CORDON_MIN_ISOLATION` still overrides it for one command.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_host::catalogue::DoctorReport;
use cordon_host::config::{HostConfig, FLOOR_ENV};
use cordon_sandbox::Isolation;

use crate::exit::{PROBLEMS, USAGE};

#[derive(clap::Args)]
pub struct SetupArgs {
    /// The floor to record: the weakest isolation rung this host accepts
    /// (none, runtime, process, container, hardened_container, microvm or
    /// vm). Without it, `setup` shows what this machine can hold and
    /// records nothing.
    #[arg(long, value_name = "RUNG")]
    pub min_isolation: Option<String>,
    /// The host configuration file to write (default:
    /// `$XDG_CONFIG_HOME/cordon/config.yaml`, else
    /// `~/.config/cordon/config.yaml`, which every command reads).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(args: SetupArgs) -> ExitCode {
    let Some(file) = args.config.clone().or_else(crate::user_config_path) else {
        eprintln!("error: no place for the configuration: neither `XDG_CONFIG_HOME` nor `HOME` is an absolute path\nhelp: name the file: `cordon setup --config FILE --min-isolation RUNG` (then pass `--config FILE` to each command)");
        return ExitCode::from(USAGE);
    };
    let report = crate::doctor::report(Isolation::DEFAULT_FLOOR);
    print_machine(&report);
    let Some(raw) = args.min_isolation else {
        let strongest = strongest(&report);
        println!();
        match strongest {
            Some(r) => println!(
                "nothing recorded. Choose this host's floor once, on purpose — the weakest rung a workload may run at:\n  cordon setup --min-isolation {r}    # the strongest this machine holds\nIt is written to {}; every command then uses it (a `--min-isolation` flag still overrides it for one command).",
                file.display()
            ),
            None => println!(
                "nothing recorded: no backend can run on this machine (see why above; `cordon doctor` shows the mechanisms)."
            ),
        }
        return ExitCode::SUCCESS;
    };
    let rung: Isolation = match raw.parse() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: `--min-isolation {raw}`: {e}\nhelp: one of none, runtime, process, container, hardened_container, microvm, vm");
            return ExitCode::from(USAGE);
        }
    };
    // As a run would use them under that floor: the default order, then
    // what is used only when named.
    let under = DoctorReport {
        floor: rung,
        rows: report
            .rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.admitted = r.backend.admitted_by(rung);
                r
            })
            .collect(),
    };
    let serving: Vec<&str> = under
        .rows
        .iter()
        .filter(|r| r.used_by_default(rung))
        .map(|r| r.backend.name)
        .collect();
    let named: Vec<String> = under
        .rows
        .iter()
        .filter(|r| r.can_serve() && !r.used_by_default(rung))
        .map(|r| {
            format!(
                "`{}` only when named (`--backend {}`)",
                r.backend.name, r.backend.name
            )
        })
        .collect();
    if serving.is_empty() && named.is_empty() {
        let hint = strongest(&report).map_or(String::new(), |r| {
            format!("\nhelp: the strongest rung this machine holds is `{r}`: `cordon setup --min-isolation {r}`")
        });
        eprintln!("error: no backend on this machine can run at `{rung}` or above, so a floor of `{rung}` would refuse every workload; nothing recorded{hint}");
        return ExitCode::from(PROBLEMS);
    }
    if let Err(e) = record(&file, rung) {
        eprintln!("error: {e}");
        return ExitCode::from(PROBLEMS);
    }
    println!(
        "\nrecorded `min_isolation: {rung}` in {}\nevery command now holds workloads to `{rung}` or above with no flag (`--min-isolation` or `{FLOOR_ENV}` still overrides it for one command); here a workload runs on {}{}",
        file.display(),
        if serving.is_empty() {
            "no backend unless named".to_string()
        } else {
            format!("`{}`", serving.join("`, then `"))
        },
        if named.is_empty() {
            String::new()
        } else {
            format!("; {}", named.join(", "))
        }
    );
    if let Ok(v) = std::env::var(FLOOR_ENV) {
        println!(
            "note: `{FLOOR_ENV}={v}` is set in this environment and overrides the file while it is"
        );
    }
    if rung < Isolation::DEFAULT_FLOOR {
        println!(
            "note: `{rung}` is below cordon's default floor `{}`: {}",
            Isolation::DEFAULT_FLOOR,
            why_not_default(&report)
        );
    }
    ExitCode::SUCCESS
}

/// The strongest rung some backend here can run at.
fn strongest(report: &DoctorReport) -> Option<Isolation> {
    report
        .rows
        .iter()
        .filter(|r| r.probe.runnable)
        .map(|r| r.backend.isolation)
        .max()
}

/// Each rung (strongest first) and the backends that can run there; then
/// the backends that cannot, and why.
fn print_machine(report: &DoctorReport) {
    println!("what this machine can hold (strongest first):");
    if strongest(report) < Some(Isolation::DEFAULT_FLOOR) {
        println!(
            "  {:<20} none: {}",
            Isolation::DEFAULT_FLOOR.as_str(),
            why_not_default(report)
        );
    }
    let mut rungs: Vec<Isolation> = report.rows.iter().map(|r| r.backend.isolation).collect();
    rungs.sort();
    rungs.dedup();
    for rung in rungs.into_iter().rev() {
        let here: Vec<&str> = report
            .rows
            .iter()
            .filter(|r| r.probe.runnable && r.backend.isolation == rung)
            .map(|r| r.backend.name)
            .collect();
        if !here.is_empty() {
            println!("  {:<20} {}", rung.as_str(), here.join(", "));
        }
    }
    for r in report.rows.iter().filter(|r| !r.probe.runnable) {
        println!(
            "cannot run here: {} ({}): {}",
            r.backend.name,
            r.backend.isolation,
            r.probe.reason.as_deref().unwrap_or("unknown")
        );
    }
}

/// Why no backend here holds the default floor: the microVM's own reason
/// when it runs at a lower rung (no KVM guest boots), else that none can.
fn why_not_default(report: &DoctorReport) -> String {
    let vm = report.rows.iter().find(|r| r.backend.name == "microvm");
    match vm {
        Some(r) if r.probe.runnable && r.backend.isolation < Isolation::DEFAULT_FLOOR => format!(
            "the microvm backend runs here, but at `{}`: no guest boots under KVM on this machine, so its guests run under TCG (an emulator, not a security boundary); with working KVM it declares `microvm`",
            r.backend.isolation
        ),
        Some(r) if !r.probe.runnable => format!(
            "the microvm backend cannot run here: {}",
            r.probe.reason.as_deref().unwrap_or("unknown")
        ),
        _ => "no backend here runs at that rung".into(),
    }
}

/// Writes `min_isolation: RUNG` into `file`: the line replaced where the
/// file has one, else added; the rest kept. The result must load as a
/// host configuration before it replaces the file (a temporary file
/// renamed over it).
fn record(file: &Path, rung: Isolation) -> Result<(), String> {
    let shown = file.display();
    let old = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("reading `{shown}`: {e}")),
    };
    let line = format!("min_isolation: {rung}");
    let mut replaced = false;
    let mut lines: Vec<String> = old
        .lines()
        .map(|l| {
            if !replaced && l.starts_with("min_isolation:") {
                replaced = true;
                line.clone()
            } else {
                l.to_string()
            }
        })
        .collect();
    if !replaced {
        if old.is_empty() {
            lines.push("# The host's floor, chosen with `cordon setup`.".into());
        }
        lines.push(line);
    }
    let text = lines.join("\n") + "\n";
    HostConfig::from_yaml(&shown.to_string(), &text).map_err(|e| {
        format!("`{shown}` would not load with the floor in it, so it was left as it was: {e}")
    })?;
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("making `{}`: {e}", dir.display()))?;
    }
    // A new file beside it (never one already there, nor through a link
    // planted at its name), renamed over it; only its owner may write it,
    // as every command requires of the file it reads the floor from.
    let tmp = file.with_extension("yaml.cordon-setup");
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, file));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("writing `{shown}`: {e}")
    })
}
