//! `cordon serve --config FILE`: the HTTP API (crates/cordon-serve),
//! over a host assembled here as `cordon run` assembles one. The server
//! refuses to start when the policy does not load or no backend this
//! machine can run meets the floor.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use std::time::Duration;

use cordon_host::builder::EGRESS_AUDIT;
use cordon_host::config::{Floor, FloorSource};
use cordon_host::keeper::KeptBackend;
use cordon_host::state::StateDir;
use cordon_host::{Host, HostBuilder, HostError, Keep};
use cordon_sandbox::Isolation;
use cordon_serve::{ServeConfig, Served};

use crate::exit::{fail, refuse, usage};

/// The owner name `cordon serve` records its sandboxes under (every
/// replica the same: each serves what any made).
pub const OWNER: &str = "cordon-serve";

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The server's configuration (YAML): listen address (loopback by
    /// default), policy, floor and the credentials (docs/serve.md).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: ServeArgs) -> ExitCode {
    let config = match ServeConfig::from_file(&args.config) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let floor = match config.min_isolation {
        Some(rung) => Floor {
            rung,
            source: FloorSource::Config {
                file: config.file.clone(),
            },
        },
        None => Floor {
            rung: Isolation::DEFAULT_FLOOR,
            source: FloorSource::Default,
        },
    };
    let policy_file = match config.policy.as_ref().map(|p| p.canonicalize()) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            return usage(format!(
                "`policy` in `{}`: {e}; name a policy file that exists",
                config.file
            ))
        }
    };
    // Sandboxes are kept (a keeper each) and recorded in the state
    // directory: replicas sharing it serve and dispose of each other's, and
    // a restarted server (after a crash, a kill -9) finds them again.
    let state_path = match &config.sandboxes.state_dir {
        Some(d) => match std::path::absolute(d) {
            Ok(p) => p,
            Err(e) => return usage(format!("`sandboxes.state_dir` in `{}`: {e}", config.file)),
        },
        None => StateDir::default_path(),
    };
    let state = match StateDir::open(&state_path) {
        Ok(s) => s,
        Err(e) => return refuse(format!("the state directory: {e}")),
    };
    let mut builder = crate::host_builder()
        .floor(floor.clone())
        .policy_file(policy_file)
        .order(config.backends.clone())
        .keep(Keep {
            state: state.clone(),
            owner: OWNER.to_string(),
            idle_timeout: Duration::from_secs(config.sandboxes.idle_timeout),
            max_age: Duration::from_secs(config.sandboxes.max_age),
            on_idle_pause: config
                .sandboxes
                .on_idle_pause
                .then(|| crate::snapshot_cmd::idle_pause(&config.snapshots)),
        });
    // Every egress decision of the server's sandboxes lands in the state
    // directory's audit log (unless the configuration names one), which
    // the server follows for `/metrics`.
    // (Its `audit_bounds` too: they were dropped here before the builder.)
    if let Some(e) = &config.egress {
        builder = builder.egress(e.clone());
    }
    builder = builder.audit_in(&state_path);
    builder = match secrets_of(&config, builder) {
        Ok(b) => b,
        Err(code) => return code,
    };
    // What a crashed replica (or this server, before a restart) left whose
    // keeper is gone too, or that is past its age, is reclaimed now; live
    // ones are served again.
    let before = state.list().map(|(r, _)| r).unwrap_or_default();
    let (reclaimed, failures) = KeptBackend::gc(&state, builder.registry());
    let after = state.list().map(|(r, _)| r).unwrap_or_default();
    // Their paused files (if they were paused) make them again on request.
    let dead_keys = cordon_serve::paused_files::reclaimed_keys(&before, &after);
    for f in failures {
        tracing::warn!("reclaiming at start: {f}");
    }
    if reclaimed > 0 {
        eprintln!("cordon serve: reclaimed {reclaimed} sandbox(es) whose keeper was gone");
    }
    // `audit_in` above: the configured log, else the state directory's.
    let audit = builder
        .egress_audit()
        .map_or_else(|| state_path.join(EGRESS_AUDIT), Path::to_path_buf);
    let host = match builder.build() {
        Ok(h) => h,
        Err(HostError::Policy { diagnostics }) => {
            eprintln!("{diagnostics}");
            return usage("the policy does not load");
        }
        Err(e) => return fail(e),
    };
    if let Err(code) = check_policy_root(&config, &host) {
        return code;
    }
    let mcp_spec = match mcp_spec_of(&config, &host) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if let Err(code) = startup_check(&config, &host, &mcp_spec) {
        return code;
    }
    let acceptor = match &config.tls {
        None => None,
        Some(t) => match cordon_serve::tls::acceptor(t) {
            Ok(a) => Some(a),
            Err(e) => return usage(format!("in `{}`: {e}", config.file)),
        },
    };
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let snapshots = crate::snapshot_cmd::store(&config.snapshots);
    let policy_digest = host.policy.digest.clone();
    let pools = match pools_of(&config) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let served = Served::new(
        config,
        host.backends.clone(),
        floor.rung,
        host.router,
        mcp_spec,
    )
    .kept_in(state)
    .following_egress_audit(audit)
    .with_catalogue(crate::doctor::backend_rows(&crate::doctor::report(
        floor.rung,
    )));
    let served = served
        .with_pools(pools, policy_digest.clone())
        .with_reclaimed(dead_keys);
    let served = with_store(served, snapshots, policy_digest);
    let served = Arc::new(match acceptor {
        Some(a) => served.with_tls(a),
        None => served,
    });
    cordon_serve::pools::run_pools(served.clone(), std::time::Duration::from_millis(200));
    serve_until_signalled(served, scheme)
}

/// Serves on a runtime of its own until SIGINT or SIGTERM: then stops
/// accepting, lets running requests finish (up to
/// `cordon_serve::SHUTDOWN_GRACE`) and disposes of every sandbox.
fn serve_until_signalled(served: Arc<Served>, scheme: &'static str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return refuse(format!("cannot start the server's runtime: {e}")),
    };
    // SIGINT or SIGTERM: stop accepting, let running requests finish
    // (up to cordon_serve::SHUTDOWN_GRACE), dispose of every sandbox.
    let shutdown = async {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
    };
    let result = runtime.block_on(cordon_serve::serve(
        served,
        |addr| {
            // The first line on stdout, for scripts and tests.
            println!("listening on {scheme}://{addr}");
        },
        shutdown,
    ));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => refuse(format!("cannot serve: {e}")),
    }
}

/// The spec of every sandbox made through `/mcp`, checked now: a spec that
/// does not load, or that no backend here can hold, is refused at start,
/// not at a model's first tool call.
fn mcp_spec_of(config: &ServeConfig, host: &Host) -> Result<cordon_sandbox::SandboxSpec, ExitCode> {
    let mcp_spec = match &config.mcp.spec {
        Some(f) => cordon_sandbox::SandboxSpec::from_file(f),
        None => cordon_serve::mcp::default_spec(),
    };
    let mcp_spec = match mcp_spec {
        Ok(s) => s,
        Err(e) => return Err(usage(format!("`mcp.spec` in `{}`: {e}", config.file))),
    };
    if let Err(e) = host.router.selected(&mcp_spec) {
        return Err(refuse(format!(
            "`mcp.spec` in `{}`: no backend here can serve it: {e}",
            config.file
        )));
    }
    Ok(mcp_spec)
}

/// The configured secret store, checked: a directory that exists, or a
/// command the provider accepts.
fn secrets_of(config: &ServeConfig, builder: HostBuilder) -> Result<HostBuilder, ExitCode> {
    match &config.secrets {
        None => Ok(builder),
        Some(cordon_serve::config::SecretStore::Dir(d)) => {
            if !d.is_dir() {
                return Err(usage(format!(
                    "`secrets.dir` in `{}`: `{}` is not a directory; create it, or name the directory that holds the secrets",
                    config.file,
                    d.display()
                )));
            }
            builder
                .secrets_dir(d)
                .map_err(|e| usage(format!("`secrets.dir` in `{}`: {e}", config.file)))
        }
        Some(cordon_serve::config::SecretStore::Command(argv)) => builder
            .secrets_command(argv.clone())
            .map_err(|e| usage(format!("`secrets.command` in `{}`: {e}", config.file))),
    }
}

/// The root layer the configuration requires (`policy_root`): the policy
/// may extend it (and so only narrow it), never replace it.
fn check_policy_root(config: &ServeConfig, host: &Host) -> Result<(), ExitCode> {
    let Some(want) = &config.policy_root else {
        return Ok(());
    };
    let root = host.policy.layers.first().map(|l| l.origin.to_string());
    let same = match (&root, want.strip_prefix("cordon:")) {
        (Some(r), Some(_)) => r == want,
        (Some(r), None) => {
            let canon = |p: &str| std::path::Path::new(p).canonicalize().ok();
            canon(r).is_some() && canon(r) == canon(want)
        }
        (None, _) => false,
    };
    if !same {
        return Err(usage(format!(
            "`policy_root` in `{}`: the policy's root layer is `{}`, not `{want}`; make the policy extend `{want}` (its `extends:` chain must end there)",
            config.file,
            root.as_deref().unwrap_or("(none)")
        )));
    }
    Ok(())
}

/// One sandbox made and disposed of before serving, under the first
/// credential's identity with the MCP spec: the backends and the enforcers
/// this machine has can hold what the policy requires (its plan translated,
/// its init confined), and can dispose, or the server does not start.
fn startup_check(
    config: &ServeConfig,
    host: &Host,
    mcp_spec: &cordon_sandbox::SandboxSpec,
) -> Result<(), ExitCode> {
    if let Some(first) = config.credentials.first() {
        let id = first.identity.clone();
        let thread = format!("startup-{}", std::process::id());
        let caller = cordon_sandbox::CallerContext::new(
            || "cordon-serve-check".to_string(),
            move || thread.clone(),
            || "default".to_string(),
            move || id.clone(),
        );
        let made = host.router.acquire(&caller, mcp_spec);
        let disposed = host.router.dispose(&caller);
        if let Err(e) = made {
            return Err(refuse(format!(
                "this machine cannot hold what the policy requires: a sandbox for `{}` could not be made: {e}\nhelp: `cordon doctor` says what each backend lacks here",
                first.name
            )));
        }
        // A server whose disposes fail would answer for sandboxes it
        // cannot remove: it does not start.
        if let Err(e) = disposed {
            return Err(refuse(format!(
                "the start-up check's sandbox could not be disposed of: {e}"
            )));
        }
    }
    Ok(())
}

/// The configured warm pools, their specs loaded.
fn pools_of(config: &ServeConfig) -> Result<Vec<cordon_serve::pools::Pool>, ExitCode> {
    let mut pools = Vec::new();
    for pc in &config.pools {
        let pool = cordon_sandbox::SandboxSpec::from_file(&pc.spec)
            .map_err(|e| e.to_string())
            .and_then(|spec| cordon_serve::pools::Pool::new(pc.clone(), spec, &config.credentials));
        match pool {
            Ok(p) => pools.push(p),
            Err(e) => {
                return Err(usage(format!(
                    "in `{}`: pool `{}`: {e}",
                    config.file, pc.name
                )))
            }
        }
    }
    Ok(pools)
}

/// The server with its snapshot store; a store that cannot be opened
/// refuses snapshots, not the server.
fn with_store(
    served: Served,
    store: Result<cordon_host::snapshots::SnapshotStore, ExitCode>,
    policy_digest: String,
) -> Served {
    match store {
        Ok(st) => served.with_snapshots(st, policy_digest),
        Err(_) => {
            eprintln!(
                "warning: snapshots are refused: the snapshot store could not be opened (above)"
            );
            served
        }
    }
}
