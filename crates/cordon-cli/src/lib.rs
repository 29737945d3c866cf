//! The `cordon` command. This file maps flags to library calls and errors to
//! exit codes; it decides nothing itself.
//!
//! A library too, so that a binary registering backends of its own (a
//! test's engine) is the whole `cordon` over them: [`main_with`].

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod conformance;
mod doctor;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod escape;
mod exit;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod files_cmd;
#[cfg(target_os = "linux")]
mod image_cmd;
mod json_out;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod mcp_cmd;
mod policy_cmd;
mod port_cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod proxy_cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod run;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sandbox_cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod serve_cmd;
mod setup_cmd;
mod snapshot_cmd;
mod spec_cmd;
mod state_open;
mod workspace_cmd;

/// cordon: a sandbox for code that AI agents write and run.
#[derive(Parser)]
#[command(
    name = "cordon",
    version,
    about = "cordon: a sandbox for code that AI agents write and run",
    long_about = None,
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with policies: one CEL vocabulary for egress, compute, storage and secrets.
    Policy {
        #[command(subcommand)]
        command: policy_cmd::PolicyCommand,
    },
    /// Work with sandbox specs: what a sandbox is for, what it may reach
    /// and what it returns (`--spec FILE`; `docs/spec.md`).
    Spec {
        #[command(subcommand)]
        command: spec_cmd::SpecCommand,
    },
    /// Choose this host's floor once, on purpose: shows what this machine
    /// can hold; with `--min-isolation RUNG`, records it in the user's host
    /// configuration, so no later command needs the flag.
    Setup(setup_cmd::SetupArgs),
    /// Show every backend cordon knows, its rung, egress and capabilities,
    /// whether this machine can run it, and whether the floor admits it.
    Doctor(doctor::DoctorArgs),
    /// Attack a backend's files-out surface with the conformance kit: one
    /// line per probe, then `N passed, M failed`.
    Conformance(conformance::ConformanceArgs),
    /// Attack a backend with the escape kit: hostile workloads, each judged
    /// on what it did and on the host afterwards; one line per case, then
    /// `N passed, M failed`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Escape(escape::EscapeArgs),
    /// Run one command in a sandbox under a policy (default `cordon:default`):
    /// checked before it starts, confined while it runs, disposed after.
    /// Exits with its status; 124 when a bound killed it, 125 when cordon
    /// refused it or could not run it (a usage error too).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Run(run::RunArgs),
    /// Warm sandboxes that outlive one command: `up` once, `exec` many
    /// times, `down` (or let `gc`, the idle timeout or the maximum age do it).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Sandbox {
        /// Output format: `json` prints one JSON document on stdout (NDJSON
        /// events for `exec`; docs/cli-json.md).
        #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
        format: Format,
        #[command(subcommand)]
        command: sandbox_cmd::SandboxCommand,
    },
    /// Run the egress proxy alone: CONNECT and absolute-form HTTP decided by
    /// the policy's egress surface (and an allowlist), resolved, classified
    /// and dialled by checked address, every decision audited.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Proxy(proxy_cmd::ProxyArgs),
    /// Serve cordon over HTTP (and MCP at `/mcp`) to agent hosts, each
    /// request's identity and scope bound to its bearer token
    /// (docs/serve.md).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Serve(serve_cmd::ServeArgs),
    /// Serve one sandbox's tools (exec, run_code, files) to an MCP client
    /// on stdio; the command line binds the sandbox, never a tool's
    /// arguments. Disposed of when the client closes stdio.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Mcp(mcp_cmd::McpArgs),
    #[cfg(target_os = "linux")]
    /// Manage the image store: the root trees a sandbox's `image` names
    /// (build with debootstrap, import, list, remove).
    Image {
        #[command(subcommand)]
        command: image_cmd::ImageCommand,
    },
}

/// Output formats every command offers.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

pub use exit::{PROBLEMS as EXIT_PROBLEMS, USAGE as EXIT_USAGE};

/// The exit-code rule, in `--help`.
const EXIT_CODES: &str = "Exit codes:
  run, sandbox exec  the workload's own status (128+N: signal N), except
                     124  a bound (memory, CPU, processes, wall clock) killed it
                     125  cordon refused it or could not run it, usage errors included;
                          nothing of the workload ran
  other commands     0 done, 1 problems found (check, test, kit, doctor),
                     2 usage error, 3 a kit's backend cannot run here, 125 refused";

pub use cordon_host::roles::{EGRESS_ARG, INIT_ARG};

/// The registry [`main_with`] was given.
static REGISTRY: std::sync::OnceLock<fn() -> cordon_sandbox::Registry> = std::sync::OnceLock::new();

/// The backends this binary knows: doctor, `--backend`, the router, the
/// keeper and the kits all read this one registry.
pub fn registry() -> cordon_sandbox::Registry {
    REGISTRY
        .get()
        .copied()
        .unwrap_or(cordon_host::builtin_registry)()
}

/// A host builder over [`registry`]: every command's host comes from it.
pub fn host_builder() -> cordon_host::HostBuilder {
    cordon_host::HostBuilder::new(registry())
}

/// `CORDON_LOG=error|warn|info|debug|trace` writes cordon's own events to
/// stderr (a keeper's go to its log in the state directory); at `debug`,
/// how long each phase of `cordon run` took. Unset: only what a command
/// prints itself.
fn init_logging() {
    let Some(level) = std::env::var_os("CORDON_LOG") else {
        return;
    };
    let level = match level.to_str().map(str::to_ascii_lowercase).as_deref() {
        Some("error") => tracing::Level::ERROR,
        Some("warn") => tracing::Level::WARN,
        Some("info") => tracing::Level::INFO,
        Some("debug") => tracing::Level::DEBUG,
        Some("trace") => tracing::Level::TRACE,
        _ => {
            eprintln!(
                "warning: CORDON_LOG={} is not a level; use error, warn, info, debug or trace",
                level.to_string_lossy()
            );
            return;
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        // A span's close line carries its time: `cordon run`'s phases.
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// The user's host configuration: `$XDG_CONFIG_HOME/cordon/config.yaml`,
/// else `$HOME/.config/cordon/config.yaml` (XDG's own fallback); only from
/// an absolute base, never the current directory, so a cloned repository
/// cannot lower anyone's floor. `None`: neither is set absolute.
pub(crate) fn user_config_path() -> Option<std::path::PathBuf> {
    let abs = |v: std::ffi::OsString| {
        let p = std::path::PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .and_then(abs)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(abs)
                .map(|h| h.join(".config"))
        })?;
    Some(base.join("cordon/config.yaml"))
}

/// The host configuration a command reads: `--config FILE`, else the
/// user's ([`user_config_path`]) when it exists and is the user's own.
pub(crate) fn config_file(flag: Option<&std::path::PathBuf>) -> Option<std::path::PathBuf> {
    if let Some(f) = flag {
        return Some(f.clone());
    }
    let f = user_config_path().filter(|f| f.is_file())?;
    match owned_alone(&f) {
        Ok(()) => Some(f),
        Err(why) => {
            // Ignored, never obeyed: it can only lower the floor, so
            // without it the stricter default holds.
            eprintln!(
                "warning: ignoring `{}`: {why}; a floor is read only from a file of your own that no one else can write (`chmod go-w`, or write it again with `cordon setup`)",
                f.display()
            );
            None
        }
    }
}

/// Whether `f` (and the directory holding it) belong to this process's
/// user and no one else may write them: the user configuration sets the
/// floor, so a file another user controls (a `HOME` that is not root's
/// under `sudo`, say) must not.
fn owned_alone(f: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    for p in [Some(f), f.parent()].into_iter().flatten() {
        let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if m.uid() != me {
            return Err(format!(
                "`{}` belongs to uid {}, not to you (uid {me})",
                p.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "`{}` may be written by others (mode {:o})",
                p.display(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// The `cordon` binary over `registry`'s backends: its process roles
/// (sandbox init, keeper, egress proxy) and its commands.
pub fn main_with(registry: fn() -> cordon_sandbox::Registry) -> ExitCode {
    let _ = REGISTRY.set(registry);
    // The sandbox init re-executes this binary; it must run before anything
    // else (no argument parsing, no threads, no logging).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(INIT_ARG)) {
        cordon_host::roles::dispatch(registry);
    }
    init_logging();
    // The keeper and the egress proxy (which confines itself before it
    // reads a byte from a sandbox).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    cordon_host::roles::dispatch(registry);
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if exit::is_workload_command(&args) {
        exit::passing_workload_status();
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return exit::parse_failed(&e, &args),
    };
    match cli.command {
        Command::Policy { command } => policy_cmd::run(command),
        Command::Spec { command } => spec_cmd::run(command),
        Command::Setup(args) => setup_cmd::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Conformance(args) => conformance::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Escape(args) => escape::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Run(args) => run::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Proxy(args) => proxy_cmd::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Serve(args) => serve_cmd::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Mcp(args) => mcp_cmd::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Sandbox { format, command } => {
            if format == Format::Json {
                json_out::enable();
            }
            sandbox_cmd::run(command)
        }
        #[cfg(target_os = "linux")]
        Command::Image { command } => image_cmd::run(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every flag, argument and command says what it is for in `--help`.
    #[test]
    fn every_flag_and_argument_says_what_it_is_for() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path}: {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "cordon", &mut missing);
        assert!(missing.is_empty(), "without a description: {missing:#?}");
    }
}
