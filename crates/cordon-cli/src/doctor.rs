//! `cordon doctor`: every backend cordon knows, what it claims, whether this
//! machine can run it, and whether the configured floor admits it. Exits
//! non-zero when no backend can serve under the floor, with the line that
//! would opt down.

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_host::catalogue::{DoctorReport, DoctorRow};
use cordon_host::config::{resolve_floor, ConfigError, Floor, HostConfig, FLOOR_ENV};
use cordon_sandbox::Isolation;

/// Exit codes: 0 a backend can serve, 1 none can, 2 the configuration is refused.
use crate::exit::{PROBLEMS as EXIT_NONE_CAN_SERVE, USAGE as EXIT_CONFIG};

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// The weakest isolation rung this host accepts: none, runtime, process,
    /// container, hardened_container, microvm or vm. Overrides
    /// `CORDON_MIN_ISOLATION` and the configuration file; the default is microvm.
    #[arg(long, value_name = "RUNG")]
    pub min_isolation: Option<String>,
    /// A host configuration file (YAML) whose `min_isolation:` sets the
    /// floor (default: the user's, which `cordon setup` writes, when it
    /// exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DoctorFormat::Human)]
    pub format: DoctorFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DoctorFormat {
    Human,
    Json,
}

pub fn run(args: DoctorArgs) -> ExitCode {
    let floor = match floor(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let report = report(floor.rung);
    match args.format {
        DoctorFormat::Human => print_human(&floor, &report),
        DoctorFormat::Json => print_json(&floor, &report),
    }
    if report.can_serve() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NONE_CAN_SERVE)
    }
}

/// Every registered backend, probed on this machine.
pub fn report(floor: Isolation) -> DoctorReport {
    let builder = crate::host_builder();
    let setup = builder
        .backend_setup()
        .unwrap_or_else(|_| cordon_sandbox::BackendSetup {
            deployment: String::new(),
            init: None,
            work_dir: None,
            scratch: std::env::temp_dir(),
            egress: Default::default(),
            engines: cordon_host::builtin_engine_settings(),
        });
    DoctorReport::from_registry(floor, builder.registry(), &setup)
}

/// Each enforcement mechanism of this machine and what the probe found.
fn mechanisms() -> Vec<(String, String)> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let Ok(exe) = std::env::current_exe() else {
            return vec![("probe".into(), "cannot find the cordon binary".into())];
        };
        let init = cordon_host::roles::SelfCommands::of(&exe).init;
        let program = init
            .args
            .into_iter()
            .fold(cordon_linux::InitProgram::new(init.path), |p, a| p.arg(a));
        let enforcer = cordon_linux::LinuxEnforcer::new(program);
        let m = enforcer.mechanisms();
        let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
        let mut out = vec![("running as root".to_string(), yes(m.root))];
        for (mech, ok) in &m.namespaces {
            out.push((
                mech.to_string(),
                if *ok { "available" } else { "missing" }.into(),
            ));
        }
        let abi = m.landlock_abi;
        out.push((
            "landlock".into(),
            if abi == 0 {
                "missing".into()
            } else {
                let mut what = vec!["filesystem (read, write, execute)"];
                if abi >= 4 {
                    what.push("TCP bind and connect");
                }
                if abi >= 6 {
                    what.push("signal and abstract-socket scoping");
                }
                format!("ABI {abi}: {}", what.join(", "))
            },
        ));
        out.push((
            "seccomp".into(),
            if m.seccomp {
                format!(
                    "available; {} syscalls are denied to workloads",
                    cordon_linux::seccomp_deny_list().len()
                )
            } else {
                "missing".into()
            },
        ));
        out.push((
            "cgroup controllers".into(),
            match &m.cgroups {
                Ok(()) => "memory, pids and CPU accounting available".into(),
                Err(missing) => missing
                    .absent
                    .iter()
                    .map(|a| format!("{}: {}", a.mechanism, a.found))
                    .collect::<Vec<_>>()
                    .join("; "),
            },
        ));
        out.push((
            "rlimits".into(),
            "available (a second layer under the cgroup bounds)".into(),
        ));
        out.push((
            "disk bound (max_disk)".into(),
            match cordon_linux::volume::probe() {
                Ok(how) => format!("available: {how}; a `--work-dir` is taken only on a filesystem no larger than max_disk"),
                Err(missing) => format!("missing: {missing}"),
            },
        ));
        out.push((
            "work dir owner mapping".into(),
            "a `--work-dir` is mounted idmapped (its owner shows as the sandbox's user); refused, with the kernel's reason, on a filesystem that cannot be idmapped".into(),
        ));
        out
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    vec![(
        "platform".into(),
        "cordon enforces on Linux x86_64 only".into(),
    )]
}

fn floor(args: &DoctorArgs) -> Result<Floor, ConfigError> {
    let config = crate::config_file(args.config.as_ref())
        .as_deref()
        .map(HostConfig::from_file)
        .transpose()?;
    let env = match std::env::var_os(FLOOR_ENV) {
        None => None,
        Some(v) => Some(v.into_string().map_err(|raw| ConfigError::Env {
            source: cordon_sandbox::IsolationError::Unknown {
                raw: raw.to_string_lossy().into_owned(),
            },
        })?),
    };
    resolve_floor(
        args.min_isolation.as_deref(),
        env.as_deref(),
        config.as_ref(),
    )
}

fn capabilities(row: &DoctorRow) -> Vec<&'static str> {
    row.backend
        .capabilities
        .iter()
        .map(|c| c.as_str())
        .collect()
}

fn machine(row: &DoctorRow) -> String {
    let mut s = if row.probe.runnable {
        "can run".to_string()
    } else {
        format!(
            "cannot run: {}",
            row.probe.reason.as_deref().unwrap_or("unknown")
        )
    };
    if !row.probe.found.is_empty() {
        s.push_str(&format!(" ({})", row.probe.found.join(", ")));
    }
    s
}

/// The strongest rung below the floor that a backend claims: where a host
/// would opt down to, and whether this machine can run a backend there.
fn opt_down(report: &DoctorReport) -> Option<(Isolation, bool)> {
    if let Some(r) = report.opt_down_to() {
        return Some((r, true));
    }
    report
        .rows
        .iter()
        .filter(|r| !r.admitted)
        .map(|r| r.backend.isolation)
        .max()
        .map(|r| (r, false))
}

fn print_human(floor: &Floor, report: &DoctorReport) {
    println!("floor: {} (from {})", floor.rung, floor.source);
    println!();
    let rows: Vec<[String; 6]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.backend.name.to_string(),
                r.backend.isolation.to_string(),
                r.backend.egress.to_string(),
                capabilities(r).join(","),
                if r.admitted {
                    "admits".to_string()
                } else {
                    format!("below `{}`", floor.rung)
                },
                machine(r),
            ]
        })
        .collect();
    let head = [
        "backend",
        "rung",
        "egress",
        "capabilities",
        "floor",
        "this machine",
    ];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(head);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
    }
    println!();
    println!("mechanisms on this machine:");
    let mech = mechanisms();
    let w = mech.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, found) in &mech {
        println!("  {name:<w$}  {found}");
    }
    println!();
    if report.can_serve() {
        let (used, named): (Vec<_>, Vec<_>) = report
            .rows
            .iter()
            .filter(|r| r.can_serve())
            .partition(|r| r.used_by_default(floor.rung));
        let used: Vec<&str> = used.iter().map(|r| r.backend.name).collect();
        let named: Vec<String> = named
            .iter()
            .map(|r| format!("`{}` (`--backend {}`)", r.backend.name, r.backend.name))
            .collect();
        let mut line = match used.split_first() {
            Some((first, [])) => format!(
                "ok: under the floor `{}`, a workload runs on `{first}`",
                floor.rung
            ),
            Some((first, rest)) => format!(
                "ok: under the floor `{}`, a workload runs on `{first}` (on `{}` when a spec needs what `{first}` does not offer, in that order)",
                floor.rung,
                rest.join("`, `")
            ),
            None => format!("ok: under the floor `{}`, no backend is used unless named", floor.rung),
        };
        if !named.is_empty() {
            line.push_str(&format!("; only when named: {}", named.join(", ")));
        }
        println!("{line}");
        return;
    }
    eprintln!(
        "error: no backend can serve under the floor `{}` on this machine",
        floor.rung
    );
    match opt_down(report) {
        Some((rung, true)) => eprintln!(
            "help: where a `{rung}` boundary is enough, choose it once for this host: `cordon setup --min-isolation {rung}` (or for one command: `--min-isolation {rung}`, or `{FLOOR_ENV}={rung}`)"
        ),
        Some((rung, false)) => eprintln!(
            "help: no backend below the floor can run here either, so opting down does not help yet; once one can, the line that opts down to the next rung is `--min-isolation {rung}` (or `min_isolation: {rung}` in the configuration file, or `{FLOOR_ENV}={rung}`)"
        ),
        None => eprintln!(
            "help: this floor admits every built-in backend and none can run here; the `this machine` column says what each lacks"
        ),
    }
}

/// Each registered backend as `--format json` and `cordon serve`'s
/// `/v1/backends` show it: rung, egress, capabilities, whether the floor
/// admits it and whether this machine can run it (and why not).
pub fn backend_rows(report: &DoctorReport) -> Vec<serde_json::Value> {
    report
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.backend.name,
                "rung": r.backend.isolation.as_str(),
                "egress": r.backend.egress.as_str(),
                "capabilities": capabilities(r),
                "admitted": r.admitted,
                "runnable": r.probe.runnable,
                "reason": r.probe.reason,
                "found": r.probe.found,
            })
        })
        .collect()
}

fn print_json(floor: &Floor, report: &DoctorReport) {
    let backends = backend_rows(report);
    let out = serde_json::json!({
        "floor": floor.rung.as_str(),
        "floor_source": floor.source.to_string(),
        "can_serve": report.can_serve(),
        "opt_down": opt_down(report).map(|(r, runnable)| serde_json::json!({
            "min_isolation": r.as_str(),
            "runnable": runnable,
        })),
        "backends": backends,
        "mechanisms": mechanisms()
            .into_iter()
            .map(|(name, found)| serde_json::json!({"name": name, "found": found}))
            .collect::<Vec<_>>(),
    });
    println!("{out}");
}
