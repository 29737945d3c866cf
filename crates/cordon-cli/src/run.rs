//! `cordon run`: acquire a sandbox from the router, run one command in it,
//! print its output, exit with its status, dispose.
//!
//! The floor comes from `--min-isolation`, then `CORDON_MIN_ISOLATION`, then
//! the configuration file (`--config FILE`, else
//! `$XDG_CONFIG_HOME/cordon/config.yaml`, or `~/.config/cordon/config.yaml`
//! without it, when present — what `cordon setup` writes; never a file from
//! the current directory, so a cloned repository cannot lower anyone's
//! floor), then `microvm`. The router is given only the local backends the
//! floor admits and this machine can hold, strongest first.
//!
//! Exit codes: the workload's own status; 128+N when a signal N ended it;
//! [`EXIT_BOUND`] when a resource bound killed it; `crate::exit::REFUSED` (125) when
//! cordon refused or could not start it (nothing of the workload ran).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cordon_host::config::{FloorSource, HostConfig};
use cordon_host::{Host, HostError, Keep};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{
    CallerContext, ExecRequest, ExitStatus, Isolation, Router, SandboxSpec, Stream,
};

pub use crate::exit::BOUND as EXIT_BOUND;

/// Each of stdout and stderr is cut at this many bytes, by `cordon run`
/// and `cordon sandbox exec` alike (the `output_cap_bytes` their JSON
/// reports). The policy's `max_response_bytes` bounds what the egress proxy
/// carries, not what a command prints.
pub const MAX_OUTPUT_BYTES: u64 = 16 << 20;

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Output format: `json` prints NDJSON events on stdout (the sandbox,
    /// the workload's output, how it ended; docs/cli-json.md).
    #[arg(long, value_enum, default_value_t = crate::Format::Human)]
    pub format: crate::Format,
    /// With `--workspace`: when the command exits 0, write what it
    /// changed back into the directory (listed on stderr; a change whose
    /// path was changed in the directory meanwhile, or a link that would
    /// point out of it, is refused and named, and the exit is then 125).
    /// Without it, a run's changes go with its sandbox.
    #[arg(long, requires = "workspace")]
    pub apply: bool,
    /// The command and its arguments, after `--` (e.g. `-- python3 job.py`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The flags that choose a policy, a spec, an identity and a backend; the
/// same for `cordon run` and `cordon sandbox up`.
#[derive(clap::Args, Clone)]
pub struct Selection {
    /// The policy (default: the built-in `cordon:default`).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// A sandbox spec (YAML); default: an offline `run` spec on the host image.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Who runs it, as the host operator states it: namespace=, name=,
    /// attested=true|false, labels.KEY=.
    #[arg(long = "identity", value_name = "KEY=VALUE")]
    pub identity: Vec<String>,
    /// The deployment's name (`env.name` in rules).
    #[arg(long = "env", value_name = "name=X")]
    pub env: Option<String>,
    /// The weakest isolation rung accepted (default `microvm`).
    #[arg(long, value_name = "RUNG")]
    pub min_isolation: Option<String>,
    /// Use this backend only (a name from `cordon doctor`), still held to the floor.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// Run in this directory instead of a fresh one (the container rung
    /// shows it at the spec's `work_dir`, `/workspace` by default; the
    /// process rung at the path of an idmapped mount of it). Its owner is
    /// mapped into the sandbox, so what the workload makes there is owned
    /// by the directory's owner (cordon never chowns it); it must be on a
    /// filesystem no larger than `max_disk`, which is what holds the bound.
    #[arg(long, value_name = "DIR", conflicts_with = "workspace")]
    pub work_dir: Option<PathBuf>,
    /// Work in this project directory copy-on-write: the sandbox sees its
    /// files at the spec's `work_dir`; what it changes stays on the
    /// sandbox's own volume (held to `max_disk`, however large the
    /// directory's filesystem) and reaches DIR only when applied (`cordon
    /// run --apply`, `cordon sandbox diff` and `apply`). Sets the spec's
    /// `workspace`.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Route only to a backend that offers this capability (repeatable;
    /// added to the spec's `requires`): e.g. `snapshot_memory`, for a
    /// sandbox whose running processes `cordon sandbox snapshot --memory`
    /// can save (gvisor). `cordon doctor` lists what each backend offers.
    #[arg(long = "require", value_name = "CAPABILITY")]
    pub require: Vec<cordon_sandbox::Capability>,
    /// Where the secrets a spec names are read from: the secret
    /// `team-a/db-password` is the file `DIR/team-a/db-password` (links
    /// refused, at most 1 MiB). Each secret the policy grants is handed to
    /// the workload as a read-only file under /run/cordon/secrets, never
    /// through the environment.
    #[arg(long, value_name = "DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// A host configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print no notices (the one that says a run is below the default
    /// floor); errors and warnings are still printed.
    #[arg(short, long)]
    pub quiet: bool,
}

/// What a [`Selection`] resolved to: a router over the chosen backends.
pub struct Prepared {
    pub router: Router,
    pub policy: Arc<Policy>,
    pub env: Deployment,
    pub identity: Identity,
    pub spec: SandboxSpec,
    /// The backend the router picked for the spec, its rung, the floor it
    /// was held to and the router's warnings (for `--format json`).
    pub chosen: serde_json::Value,
}

pub use crate::exit::{fail, refuse, usage};

pub(crate) use crate::config_file;

pub(crate) fn identity(args: &[String]) -> Result<Identity, String> {
    let mut id = Identity {
        namespace: "local".into(),
        name: "operator".into(),
        ..Identity::default()
    };
    for kv in args {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(format!(
                "`--identity {kv}`: --identity takes KEY=VALUE, e.g. `namespace=team-a`"
            ));
        };
        match k {
            "namespace" => id.namespace = v.into(),
            "name" => id.name = v.into(),
            "attested" => {
                id.attested = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("`attested` is `true` or `false`, not `{v}`")),
                }
            }
            _ => match k.strip_prefix("labels.") {
                Some(l) if !l.is_empty() => {
                    id.labels.insert(l.into(), v.into());
                }
                _ => {
                    return Err(format!(
                        "unknown identity field `{k}`; use namespace, name, attested or labels.KEY"
                    ))
                }
            },
        }
    }
    Ok(id)
}

pub fn run(args: RunArgs) -> ExitCode {
    if args.format == crate::Format::Json {
        crate::json_out::enable();
    }
    // Each phase is a span: `CORDON_LOG=debug` prints how long each took.
    let phase = |name: &'static str| tracing::debug_span!("phase", name).entered();
    let prepared = {
        let _p = phase("prepare");
        prepare(&args.sel, None)
    };
    let p = match prepared {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Prepared {
        router,
        policy,
        env,
        identity,
        spec,
        chosen,
    } = p;
    let id = identity.clone();
    let scope = format!("run-{}", std::process::id());
    let caller = CallerContext::new(
        move || scope.clone(),
        || "main".to_string(),
        || "run".to_string(),
        move || id.clone(),
    );
    let acquired = {
        let _p = phase("acquire");
        router.acquire(&caller, &spec)
    };
    let sandbox = match acquired {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if crate::json_out::on() {
        let mut ev = chosen.clone();
        ev["event"] = "sandbox".into();
        ev["handle"] = sandbox.id().into();
        crate::json_out::emit(&ev);
    }
    let limits = policy.bounds_for(&identity, &env);
    let req = ExecRequest {
        argv: args.command.clone(),
        env: Default::default(),
        stdin: Vec::new(),
        timeout: Duration::from_secs(limits.max_wall_seconds),
        max_output_bytes: MAX_OUTPUT_BYTES,
    };
    let result = {
        let _p = phase("exec");
        exec_attached(&*sandbox, &req, false)
    };
    let applied = match &result {
        Ok(out) if args.apply && out.status == ExitStatus::Code(0) => {
            let _p = phase("apply");
            Some(crate::workspace_cmd::apply_after_run(&*sandbox))
        }
        _ => None,
    };
    {
        let _p = phase("dispose");
        drop(sandbox);
        // The exit code stays the workload's; a sandbox left running is
        // said, never passed over.
        if let Err(e) = router.dispose(&caller) {
            eprintln!("error: the sandbox was not disposed of: {e}");
        }
    }
    match result {
        Ok(out) => {
            if out.status != ExitStatus::Code(0) && !crate::json_out::on() && !args.sel.quiet {
                if let Some(note) = not_in_the_work_dir(&args) {
                    eprintln!("{note}");
                }
            }
            // What it ran under: the spec's asks, else the policy's bounds.
            let ran_under = cordon_sandbox::Limits::of(&limits, spec.resources());
            let code = exit_for(&out, req.max_output_bytes, Some(&ran_under));
            match applied {
                Some(Err(refused)) => refused,
                _ => code,
            }
        }
        Err(e) => fail(e),
    }
}

/// After a failed run in a fresh work dir: the first argument that names
/// a file of the caller's current directory by a relative path, which the
/// sandbox did not have — the new user's `cordon run -- python3
/// script.py` — with the flag that shows it the directory.
fn not_in_the_work_dir(args: &RunArgs) -> Option<String> {
    if args.sel.work_dir.is_some() || args.sel.workspace.is_some() || args.sel.spec.is_some() {
        return None;
    }
    let arg = args.command.iter().skip(1).find(|a| {
        !a.starts_with('/') && !a.starts_with('-') && std::path::Path::new(a.as_str()).is_file()
    })?;
    Some(format!(
        "note: `{arg}` is a file of this directory, but a run starts in a fresh, empty work dir; to let the sandbox see this directory, add `--workspace .` (copy-on-write: your files change only with `--apply`)"
    ))
}

/// The policy file named by `--policy`, canonical: the digest covers each
/// layer's name, so every process that loads it (a keeper too) must name
/// it the same way.
pub fn policy_path(args: &Selection) -> Result<Option<std::path::PathBuf>, ExitCode> {
    match &args.policy {
        Some(p) => p
            .canonicalize()
            .map(Some)
            .map_err(|e| {
                usage(format!(
                    "policy `{}`: {e}\nhelp: check the path given to `--policy`; without `--policy` the built-in `cordon:default` applies (`cordon policy show-default` prints it)",
                    p.display()
                ))
            }),
        None => Ok(None),
    }
}

/// Runs `req` with this process's stdin streamed into it (end-of-file when
/// ours ends: `</dev/null` gives an empty stdin) and its output shown as it
/// arrives. The bytes are copied through a pipe: the sandbox never holds
/// our terminal, or any descriptor of ours. With `tty`, it runs on a
/// terminal of the sandbox's own: ours (when stdin is one) is put in raw
/// mode until it ends, and its size is passed on as it changes.
pub fn exec_attached(
    sandbox: &dyn cordon_sandbox::Sandbox,
    req: &ExecRequest,
    tty: bool,
) -> Result<cordon_sandbox::ExecOutput, cordon_sandbox::SandboxError> {
    use cordon_sandbox::{Attach, TtySize};
    let ours = std::io::stdin();
    // A terminal we are not in the foreground of (`cordon run ... &`) is
    // neither read nor put in raw mode: either would stop us (SIGTTIN,
    // SIGTTOU). The exec gets end-of-file instead, as with `</dev/null`.
    let background = rustix::termios::isatty(&ours)
        && rustix::termios::tcgetpgrp(&ours).ok() != Some(rustix::process::getpgrp());
    let terminal = tty && rustix::termios::isatty(&ours) && !background;
    let size_now = || {
        rustix::termios::tcgetwinsize(std::io::stdin())
            .ok()
            .filter(|w| w.ws_row > 0 && w.ws_col > 0)
            .map(|w| TtySize {
                rows: w.ws_row,
                cols: w.ws_col,
            })
    };
    let attach = match tty {
        true => Attach::terminal(size_now().unwrap_or_default()),
        false => Attach::streamed_stdin(),
    };
    let mut handle = sandbox.start_exec(req, attach)?;
    let _raw = terminal.then(RawMode::enter).flatten();
    if let (true, Some(resizer)) = (terminal, handle.resizer()) {
        // Polled rather than signalled: no handler to install, and a
        // quarter of a second is soon enough for a window being dragged.
        std::thread::spawn(move || {
            let mut last = size_now();
            loop {
                std::thread::sleep(Duration::from_millis(250));
                let now = size_now();
                if now != last {
                    if let Some(s) = now {
                        if resizer(s).is_err() {
                            return;
                        }
                    }
                    last = now;
                }
            }
        });
    }
    if background {
        drop(handle.take_stdin());
    }
    if let Some(mut input) = handle.take_stdin() {
        // Detached: a terminal's read may block past the exec's end, and
        // the process exits then anyway.
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut input);
            if tty && !terminal {
                // Piped input to a terminal: its end is the end-of-file
                // character, as a person at a terminal would type it.
                let _ = input.write_all(b"\x04");
            }
        });
    }
    handle.wait_streaming(&show)
}

/// This process's terminal in raw mode, restored when dropped.
struct RawMode(rustix::termios::Termios);

impl RawMode {
    fn enter() -> Option<RawMode> {
        use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(&stdin, OptionalActions::Now, &raw).ok()?;
        Some(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.0,
        );
    }
}

/// Shows a workload's output as it arrives.
pub fn show(stream: Stream, bytes: &[u8]) {
    use std::io::Write;
    if crate::json_out::on() {
        crate::json_out::emit(&cordon_host::exec_json::output_event(stream, bytes));
        return;
    }
    let _ = match stream {
        Stream::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|()| o.flush())
        }
        Stream::Stderr => std::io::stderr().lock().write_all(bytes),
    };
}

/// The exit code for how a workload ended (and a note on cut output).
pub fn exit_for(
    out: &cordon_sandbox::ExecOutput,
    cap: u64,
    limits: Option<&cordon_sandbox::Limits>,
) -> ExitCode {
    let json = crate::json_out::on();
    for (cut, which) in [
        (out.stdout_truncated, "stdout"),
        (out.stderr_truncated, "stderr"),
    ] {
        if cut && !json {
            eprintln!("cordon: the workload's {which} was cut at {cap} bytes");
        }
    }
    let (status, killed_by) = cordon_host::exec_json::status(out.status);
    let code = match out.status {
        ExitStatus::Code(c) => u8::try_from(c & 0xff).unwrap_or(1),
        ExitStatus::Signal(n) => u8::try_from((128 + n) & 0xff).unwrap_or(1),
        ExitStatus::TimedOut | ExitStatus::Bound { .. } => EXIT_BOUND,
    };
    if json {
        crate::json_out::emit(&serde_json::json!({
            "event": "exit",
            "ok": true,
            "exit_code": code,
            "status": status,
            "killed_by": killed_by,
            "stdout_truncated": out.stdout_truncated,
            "stderr_truncated": out.stderr_truncated,
            "output_cap_bytes": cap,
        }));
    } else if let Some(bound) = &killed_by {
        eprintln!("{}", killed_note(bound, limits));
    }
    ExitCode::from(code)
}

/// What a bound's kill says: which bound, its value where known, and the
/// two ways to give the workload more.
fn killed_note(bound: &str, limits: Option<&cordon_sandbox::Limits>) -> String {
    let b = cordon_policy::Bound::from_key(bound);
    let value = match (b, limits.and_then(|l| l.named(bound))) {
        (Some(b), Some(v)) => format!(" ({} here)", b.show(v)),
        _ => String::new(),
    };
    let ask = match bound {
        "max_memory" => "resources.memory",
        "max_processes" => "resources.processes",
        "max_cpu_seconds" => "resources.cpu_seconds",
        "max_wall_seconds" => "resources.wall_seconds",
        "max_disk" => "resources.disk",
        _ => return format!("cordon: the workload was killed at the `{bound}` bound{value}"),
    };
    format!(
        "cordon: the workload was killed at the `{bound}` bound{value}. To give it more: ask in the spec (`{ask}`, up to the policy's `{bound}`), or run under a policy whose root layer sets a higher `{bound}` (`cordon policy check` shows a policy's bounds)"
    )
}

/// Resolves the floor, the policy, the spec and the identity, and builds the
/// host (through the one host builder) over the backends the floor admits
/// and this machine holds; `keep`: sandboxes outlive this process.
pub fn prepare(args: &Selection, keep: Option<Keep>) -> Result<Prepared, ExitCode> {
    prepare_with(args, keep, None)
}

/// The host configuration `--config` (or the user's) names, if any.
pub fn host_config(args: &Selection) -> Result<Option<HostConfig>, ExitCode> {
    config_file(args.config.as_ref())
        .map(|f| HostConfig::from_file(&f))
        .transpose()
        .map_err(usage)
}

/// [`prepare`], with `spec` in place of the one the flags name (a
/// snapshot's, for a restore).
pub fn prepare_with(
    args: &Selection,
    keep: Option<Keep>,
    spec: Option<SandboxSpec>,
) -> Result<Prepared, ExitCode> {
    let config = host_config(args)?;
    let given_spec = spec;
    let builder = crate::host_builder()
        .floor_from(args.min_isolation.as_deref(), config.as_ref())
        .map_err(usage)?;
    let identity = match identity(&args.identity) {
        Ok(i) => i,
        Err(e) => return Err(usage(e)),
    };
    let deployment = args
        .env
        .as_deref()
        .map(|e| e.strip_prefix("name=").unwrap_or(e).to_string())
        .unwrap_or_default();
    let spec = match (given_spec, &args.spec) {
        (Some(s), _) => Ok(s),
        (None, Some(f)) => SandboxSpec::from_file(f),
        (None, None) => SandboxSpec::new("run", "host"),
    };
    let spec = match spec {
        Ok(s) => s,
        Err(e) => return Err(fail(e)),
    };
    let spec = match &args.workspace {
        Some(dir) => crate::workspace_cmd::with_workspace(spec, dir)?,
        None => spec,
    };
    let spec = args.require.iter().fold(spec, |s, c| s.requiring(*c));
    let mut builder = builder
        .policy_file(policy_path(args)?)
        .only(args.backend.clone())
        .deployment(deployment)
        .work_dir(args.work_dir.clone())
        .egress(
            config
                .as_ref()
                .and_then(|c| c.egress.clone())
                .unwrap_or_default(),
        );
    // Every egress decision lands where an operator can read it: the
    // state directory's audit log, unless the configuration names one.
    if !spec.egress_allow().is_empty() {
        let dir = cordon_host::state::StateDir::default_path();
        crate::state_open::open_state(&dir)
            .map_err(|err| refuse(format!("the egress audit log's directory: {err}")))?;
        builder = builder.audit_in(&dir);
    }
    if let Some(k) = keep {
        builder = builder.keep(k);
    }
    if let Some(dir) = &args.secrets_dir {
        builder = builder
            .secrets_dir(dir)
            .map_err(|e| usage(format!("`--secrets-dir`: {e}")))?;
    }
    let floor = builder.chosen_floor().clone();
    let host = match builder.build() {
        Ok(h) => h,
        Err(HostError::Policy { diagnostics }) => {
            eprintln!("{diagnostics}");
            return Err(usage("the policy does not load"));
        }
        Err(e) => return Err(fail(e)),
    };
    let (selected, rung) = match host.router.selected(&spec) {
        Ok((name, rung)) => (name.to_string(), rung),
        Err(e) => return Err(fail(e)),
    };
    // What the router permits but says (a backend that confines more than
    // the spec asks): on stderr whatever the format or `--quiet`, and in
    // the JSON document as `warnings`.
    let warnings: Vec<String> = match host.router.ensure_can_serve(&spec) {
        Ok(w) => w.iter().map(ToString::to_string).collect(),
        Err(e) => return Err(fail(e)),
    };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let below = Host::below_default_floor(&floor);
    let chosen = serde_json::json!({
        "backend": selected,
        "rung": rung.as_str(),
        "floor": {
            "rung": floor.rung.as_str(),
            "source": match &floor.source {
                FloorSource::Flag => "flag".to_string(),
                FloorSource::Env => "env".to_string(),
                FloorSource::Config { file } => format!("config:{file}"),
                FloorSource::Default => "default".to_string(),
            },
            "below_default": below,
        },
        "warnings": warnings,
    });
    // Said where the floor was lowered for this one command (`--min-isolation`);
    // a floor from the environment or the configuration file is a
    // deliberate, recorded choice, and is not repeated on every run. Under
    // `--format json` it is the `floor` field instead.
    if below && floor.source == FloorSource::Flag && !args.quiet && !crate::json_out::on() {
        let source = floor.source.to_string();
        eprintln!(
            "cordon: running on the `{selected}` backend at the `{rung}` rung, below the default floor `{}`: the floor `{}` comes from {source} (`cordon setup` records a floor once)",
            Isolation::DEFAULT_FLOOR,
            floor.rung
        );
    }
    Ok(Prepared {
        router: host.router,
        policy: host.policy,
        env: host.deployment,
        identity,
        spec,
        chosen,
    })
}
