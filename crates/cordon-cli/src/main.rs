//! The `cordon` command. This file maps flags to library calls and errors to
//! exit codes; it decides nothing itself.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod conformance;
mod doctor;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod escape;
mod exit;
#[cfg(target_os = "linux")]
mod image_cmd;
mod policy_cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod proxy_cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod run;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sandbox_cmd;

/// cordon: a sandbox for code that AI agents write and run.
#[derive(Parser)]
#[command(name = "cordon", version, about = "cordon: a sandbox for code that AI agents write and run", long_about = None)]
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
    /// refused it.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Run(run::RunArgs),
    /// Warm sandboxes that outlive one command: `up` once, `exec` many
    /// times, `down` (or let `gc`, the idle timeout or the maximum age do it).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Sandbox {
        #[command(subcommand)]
        command: sandbox_cmd::SandboxCommand,
    },
    /// Run the egress proxy alone: CONNECT and absolute-form HTTP decided by
    /// the policy's egress surface (and an allowlist), resolved, classified
    /// and dialled by checked address, every decision audited.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Proxy(proxy_cmd::ProxyArgs),
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

/// The hidden first argument that makes this binary the sandbox init.
pub const INIT_ARG: &str = "__sandbox-init";
/// The hidden argument that runs this binary as the egress proxy process.
pub const EGRESS_ARG: &str = "__egress-proxy";

/// The backends this binary knows: doctor, `--backend`, the router, the
/// keeper and the kits all read this one registry.
pub fn registry() -> cordon_sandbox::Registry {
    cordon_host::builtin_registry()
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

fn main() -> ExitCode {
    // The sandbox init re-executes this binary; it must run before anything
    // else (no argument parsing, no threads).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(INIT_ARG)) {
        cordon_linux::init_main();
    }
    init_logging();
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(cordon_host::keeper::KEEPER_ARG))
    {
        cordon_host::keeper::keeper_main(&registry());
    }
    // The egress proxy of this process's sandboxes, in a process of its own
    // that confines itself before it reads a byte from any of them.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(EGRESS_ARG)) {
        cordon_egress::child_main(proxy_cmd::confine);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Policy { command } => policy_cmd::run(command),
        Command::Doctor(args) => doctor::run(args),
        Command::Conformance(args) => conformance::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Escape(args) => escape::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Run(args) => run::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Proxy(args) => proxy_cmd::run(args),
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        Command::Sandbox { command } => sandbox_cmd::run(command),
        #[cfg(target_os = "linux")]
        Command::Image { command } => image_cmd::run(command),
    }
}
