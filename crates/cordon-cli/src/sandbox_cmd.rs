//! `cordon sandbox`: warm sandboxes for people and scripts. Each sandbox is
//! held by a keeper process and recorded in the state directory
//! (`$CORDON_STATE_DIR`, else `/run/cordon` for root), so every subcommand
//! works from a separate shell invocation.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cordon_collect::collect_outputs;
use cordon_host::keeper::{self, KeptBackend, KeptSandbox};
use cordon_host::state::{self, StateDir};
use cordon_sandbox::{CallerContext, ExecRequest, Sandbox};

use crate::exit::{fail, refuse, usage};
use crate::json_out;
use crate::run::{exit_for, prepare, Selection, MAX_OUTPUT_BYTES};
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum SandboxCommand {
    /// Get or create the sandbox for a key and print its handle (the same
    /// key twice gives the same sandbox).
    Up(Box<UpArgs>),
    /// Run a command in a sandbox; exits with its status (124: a bound
    /// killed it; 125: cordon refused or could not run it, a usage error
    /// too).
    Exec {
        /// The sandbox, by the handle `up` printed (e.g.
        /// `container-1a2b3c4d5e6f-0001`); `cordon sandbox ls` lists them.
        handle: String,
        /// Seconds before the command is killed (default: the policy's bound).
        #[arg(long)]
        timeout: Option<u64>,
        /// Run it on a terminal of the sandbox's own (for REPLs and
        /// interactive tools): this terminal goes raw while it runs, its
        /// size follows this one's, and everything it shows comes on stdout.
        #[arg(short = 't', long)]
        tty: bool,
        /// The command and its arguments, after `--` (e.g. `-- python3
        /// job.py`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Copy a local file into the sandbox's work dir (or its `/tmp`).
    Put {
        /// The sandbox, by its handle.
        handle: String,
        /// The file on this machine to copy in.
        local: PathBuf,
        /// The path inside the sandbox (relative paths are in the work dir;
        /// `/tmp/...` is the sandbox's own `/tmp`).
        remote: String,
    },
    /// Collect the outputs the sandbox's spec declares into DIR (through a
    /// confined sink).
    Collect {
        /// The sandbox, by its handle (made with `up --spec FILE`: the spec
        /// declares the outputs).
        handle: String,
        /// The directory on this machine the outputs land in.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Replace a live sandbox's egress allowlist at once: new connections
    /// are decided by the new list, and open ones (tunnels, kept-alive
    /// connections) it does not admit are closed. The policy still bounds
    /// what may be asked (each entry is checked for the sandbox's identity,
    /// as at `up`). A list that does not load, or that the policy denies,
    /// leaves the sandbox's egress closed — every request refused, saying
    /// so — until a change that loads; the error says which entry. Each
    /// change is a line in the egress audit log (old and new list, who
    /// asked). Only a sandbox made with an `egress_allow` has a route to
    /// change.
    Egress {
        /// The sandbox, by its handle.
        handle: String,
        /// The new allowlist, `host[:port]` or `*.domain[:port]` (port 443
        /// when left out), as a spec's `egress_allow`: repeat the flag or
        /// separate entries with commas.
        #[arg(
            long = "spec-egress",
            value_name = "HOST[:PORT]",
            value_delimiter = ',',
            required_unless_present = "none",
            conflicts_with = "none"
        )]
        spec_egress: Vec<String>,
        /// Allow nothing: the route stays, and every request is refused.
        #[arg(long)]
        none: bool,
    },
    /// Pause a live sandbox: every process of it is frozen (no CPU), its
    /// memory still counted against its bound and its files kept, until
    /// `resume` — or an `exec`, which resumes it first. The wall clock of
    /// a command in progress goes on. The container rung, docker, gvisor
    /// and the microvm pause; the process rung refuses, saying so.
    Pause {
        /// The sandbox, by its handle.
        handle: String,
    },
    /// Resume a paused sandbox (one not paused is left as it is).
    Resume {
        /// The sandbox, by its handle.
        handle: String,
    },
    /// What a sandbox made over a workspace (`up --workspace DIR`)
    /// changed there, one path a line: `A` added, `M` modified, `D`
    /// removed. Nothing reaches DIR until `apply`.
    Diff {
        /// The sandbox, by its handle.
        handle: String,
    },
    /// Write a sandbox's workspace changes back into its directory: all of
    /// them, or those at or beneath PATHS (relative to the workspace).
    /// Through confined writes (no link followed, none written that points
    /// out of the directory, no set-id bits); a change whose path was
    /// changed in the directory since the sandbox was made is refused, the
    /// others applied, and the exit is then 125.
    Apply {
        /// The sandbox, by its handle.
        handle: String,
        /// Only these paths (and what is beneath them).
        #[arg(value_name = "PATH")]
        paths: Vec<String>,
    },
    /// Capture a kept sandbox's files (its work dir) into cordon's snapshot
    /// store, paused meanwhile where the backend can pause; prints the
    /// snapshot's id (content-addressed: the same files under the same
    /// spec, identity and policy are one snapshot). `sandbox up --from ID`
    /// makes a new sandbox from it; `fork` does both at once.
    Snapshot {
        /// The sandbox, by its handle.
        handle: String,
        /// A name to find it by within its scope (besides its id).
        #[arg(long)]
        name: Option<String>,
        /// Capture its running processes and memory too: at gvisor (a
        /// sandbox made `--require snapshot_memory`; they end there) and
        /// at microvm (the whole guest saved; it goes on); refused
        /// elsewhere, saying why (never narrowed to files silently).
        #[arg(long)]
        memory: bool,
        /// A host configuration file (`snapshots: {dir, quota_per_scope}`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// List the snapshots in cordon's store.
    Snapshots {
        /// Only this scope's.
        #[arg(long)]
        scope: Option<String>,
        /// A host configuration file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Remove a snapshot (by id or name) of a scope from the store.
    Forget {
        /// The snapshot's id (`snap-…`) or name.
        snapshot: String,
        /// The scope it was taken in.
        #[arg(long)]
        scope: String,
        /// A host configuration file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Snapshot a kept sandbox and make N new sandboxes from it in its
    /// scope (threads PREFIX-1..PREFIX-N), each independent: what one
    /// writes, no other (nor the source) sees. They share the snapshot's
    /// files underneath, copy-on-write (a microVM guest is given a copy
    /// of its own). Prints their handles.
    Fork(Box<ForkArgs>),
    /// List the recorded sandboxes; with a HANDLE, the files of that
    /// sandbox's work dir (or its `/tmp`) instead (PATH in it, `--depth` levels down): kind
    /// and mode, size, path; links listed, never followed. Like every
    /// subcommand but `gc`, it first reclaims sandboxes whose keeper was
    /// killed (said on stderr).
    Ls {
        /// A sandbox, by its handle: list its files.
        handle: Option<String>,
        /// The directory to list (relative to the work dir, or absolute
        /// within it or the sandbox's `/tmp`; default the work dir).
        #[arg(requires = "handle")]
        path: Option<String>,
        /// How many levels below PATH to list too (at most 32).
        #[arg(long, default_value_t = 0, requires = "handle")]
        depth: u32,
    },
    /// Print a file of a sandbox's work dir or `/tmp` (a regular file only; no link
    /// followed): all of it up to the cap (16 MiB, or the spec's
    /// `files_out.max_bytes_per_file`), or `--len` bytes from `--offset`.
    Cat {
        /// The sandbox, by its handle.
        handle: String,
        /// The file (relative to the work dir, or absolute within it or
        /// the sandbox's `/tmp`).
        path: String,
        /// The first byte to read.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// How many bytes to read (default: to the end, or the cap).
        #[arg(long)]
        len: Option<u64>,
    },
    /// Remove a file or link (the link itself) from a sandbox's work dir or `/tmp`;
    /// a directory with `-r` (links inside removed, never followed).
    Rm {
        /// The sandbox, by its handle.
        handle: String,
        /// What to remove (relative to the work dir, or absolute within it
        /// or the sandbox's `/tmp`).
        path: String,
        /// A directory and everything in it.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Make a directory, and its parents, in a sandbox's work dir or `/tmp`.
    Mkdir {
        /// The sandbox, by its handle.
        handle: String,
        /// The directory to make (relative to the work dir, or absolute
        /// within it or the sandbox's `/tmp`).
        path: String,
    },
    /// Rename FROM to TO within a sandbox's work dir (or within its
    /// `/tmp`); something at TO is refused, never replaced.
    Mv {
        /// The sandbox, by its handle.
        handle: String,
        /// What to rename (relative to the work dir, or absolute within it
        /// or the sandbox's `/tmp`).
        from: String,
        /// Its new path; its directory must exist.
        to: String,
    },
    /// Stream what changes in a sandbox's work dir (or its `/tmp`), one JSON object a line
    /// (`created`, `modified`, `removed`, `renamed` with `to`, `overflow`
    /// when events were lost), until the sandbox goes (`ended`, with why)
    /// or this is stopped.
    Watch {
        /// The sandbox, by its handle.
        handle: String,
        /// The directory to watch (relative to the work dir, or absolute
        /// within it or the sandbox's `/tmp`; default the work dir).
        path: Option<String>,
        /// The directories beneath it too.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Forward a port the workload listens on to an address on the host,
    /// as the policy's ingress surface allows, until stopped or the
    /// sandbox goes. Prints the host address it listens on.
    Port {
        /// The sandbox, by its handle.
        handle: String,
        /// The port in the sandbox (its server listens on 127.0.0.1 or
        /// 0.0.0.0 there).
        port: u16,
        /// Where on the host to listen (`0`: any free port); the policy
        /// decides the address (`cordon:default`: loopback only).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Who asks, as the policy's `caller` sees it: namespace=,
        /// name=, attested=true|false (default: as `--identity` defaults).
        #[arg(long = "caller", value_name = "KEY=VALUE")]
        caller: Vec<String>,
    },
    /// Dispose of a sandbox by handle, or of every sandbox of a scope and thread.
    Down {
        /// The sandbox, by its handle (or name `--scope` and `--thread`).
        handle: Option<String>,
        /// With `--thread`: dispose of every sandbox of this scope and
        /// thread (each agent dir's).
        #[arg(long, requires = "thread", conflicts_with = "handle")]
        scope: Option<String>,
        /// With `--scope`: the thread whose sandboxes go.
        #[arg(long, requires = "scope")]
        thread: Option<String>,
    },
    /// Reclaim every sandbox whose keeper is gone or that is past its maximum
    /// age (prints how many), and the cgroups, volumes and directories of
    /// sandboxes whose owner was killed before it could dispose or record
    /// them (the cgroups named on stderr).
    Gc,
}

#[derive(clap::Args)]
pub struct ForkArgs {
    /// The sandbox, by its handle.
    pub handle: String,
    /// How many sandboxes to make.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Their threads' prefix (default: the source's thread and `-fork`).
    #[arg(long)]
    pub thread_prefix: Option<String>,
    /// Fork its running processes too, with their memory (a snapshot
    /// `--memory`): at microvm the source goes on; at gvisor (a sandbox
    /// made `--require snapshot_memory`) its execs end there; refused
    /// elsewhere, saying why.
    #[arg(long)]
    pub memory: bool,
    /// Dispose of each after this many seconds without a request.
    #[arg(long, default_value_t = 1800)]
    pub idle_timeout: u64,
    /// Dispose of each this many seconds after creation.
    #[arg(long, default_value_t = 86_400)]
    pub max_age: u64,
    #[command(flatten)]
    pub sel: Selection,
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Whom the sandbox belongs to: the tenant, team or session your host
    /// keeps apart (e.g. `team-a`). Scope, thread and agent dir together
    /// are the sandbox's key: the same three give the same sandbox.
    #[arg(long)]
    pub scope: String,
    /// The conversation or job within the scope (e.g. your host's thread
    /// id, `t-42`): each thread gets a sandbox of its own.
    #[arg(long)]
    pub thread: String,
    /// Which agent's sandbox within the thread, when several agents of one
    /// thread each need their own (e.g. `planner`).
    #[arg(long, default_value = "default")]
    pub agent_dir: String,
    /// Dispose after this many seconds without a request.
    #[arg(long, default_value_t = 1800)]
    pub idle_timeout: u64,
    /// Dispose this many seconds after creation, busy or not.
    #[arg(long, default_value_t = 86_400)]
    pub max_age: u64,
    /// What an idle timeout does: `dispose` (default) or `pause` — the
    /// sandbox is paused (no CPU, nothing lost; an exec resumes it), and
    /// idle as long again, its files are snapshotted (`cordon sandbox
    /// snapshots` lists it; `up --from` restores it) and it is disposed of.
    #[arg(long, value_name = "pause|dispose", default_value = "dispose", value_parser = ["pause", "dispose"])]
    pub on_idle: String,
    /// Make it from a snapshot of this scope (its id or name): the
    /// snapshot's files are its work dir (copy-on-write), its spec and
    /// identity the snapshot's unless given (and then they must match);
    /// the policy must be the one it was taken under.
    #[arg(long, value_name = "SNAPSHOT")]
    pub from: Option<String>,
    #[command(flatten)]
    pub sel: Selection,
}

/// The owner name `cordon sandbox` records its sandboxes under.
pub const OWNER: &str = "cordon-sandbox-cli";

fn state() -> Result<StateDir, ExitCode> {
    crate::state_open::open_state(&StateDir::default_path()).map_err(fail)
}

/// What a sandbox was made for, at debug level (`CORDON_LOG=debug`).
fn log_provenance(what: &str, s: &dyn Sandbox) {
    let p = s.provenance();
    tracing::debug!(
        target: "cordon::provenance",
        handle = s.id(),
        kind = p.spec.kind(),
        image = p.spec.image(),
        spec = %p.spec.fingerprint(),
        identity = %format!("{}/{}", p.identity.namespace, p.identity.name),
        policy = %p.policy_digest,
        "{what}"
    );
}

fn attach(handle: &str) -> Result<KeptSandbox, ExitCode> {
    let st = state()?;
    let rec = match st.read(handle) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(refuse(format!(
                "no sandbox `{handle}` in {}; `cordon sandbox ls` lists them",
                st.path().display()
            )))
        }
        Err(e) => return Err(fail(e)),
    };
    let s = KeptSandbox::new(st, rec).map_err(fail)?;
    log_provenance("attached", &s);
    Ok(s)
}

/// What the router warned of when `s` was made, said again on each exec
/// (the workload's failures follow from it): its backend's egress, as
/// registered, against the spec it was made for.
fn warnings_of(s: &KeptSandbox) -> Vec<String> {
    let spec = &s.provenance().spec;
    if spec.egress_allow().is_empty() {
        // Nothing to confine more than: the registry is not needed.
        return Vec::new();
    }
    crate::registry()
        .get(&s.record().backend)
        .map(|r| cordon_sandbox::Warning::of(r.name(), r.info.egress, spec))
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect()
}

pub fn run(cmd: SandboxCommand) -> ExitCode {
    match go(cmd) {
        Ok(c) | Err(c) => c,
    }
}

fn go(cmd: SandboxCommand) -> Result<ExitCode, ExitCode> {
    match cmd {
        SandboxCommand::Up(a) => up(*a),
        SandboxCommand::Exec {
            handle,
            timeout,
            tty,
            command,
        } => {
            let s = attach(&handle)?;
            let warnings = warnings_of(&s);
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            if json_out::on() {
                json_out::emit(&json!({
                    "event": "sandbox",
                    "handle": handle,
                    "backend": s.record().backend,
                    "warnings": warnings,
                }));
            }
            let req = ExecRequest {
                argv: command,
                env: Default::default(),
                stdin: Vec::new(),
                timeout: Duration::from_secs(timeout.unwrap_or(3600)),
                max_output_bytes: MAX_OUTPUT_BYTES,
            };
            let out = crate::run::exec_attached(&s, &req, tty).map_err(fail)?;
            Ok(exit_for(&out, req.max_output_bytes, None))
        }
        SandboxCommand::Put {
            handle,
            local,
            remote,
        } => {
            let s = attach(&handle)?;
            let bytes = std::fs::read(&local)
                .map_err(|e| usage(format!("reading `{}`: {e}", local.display())))?;
            let remote = if remote.starts_with('/') {
                remote
            } else {
                // Relative to the work dir as the workload sees it.
                let guest = match &s.record().host_work_dir {
                    Some(d) => d.guest.clone(),
                    None => s.provenance().spec.work_dir().to_string(),
                };
                format!("{guest}/{remote}")
            };
            s.write_file(&remote, &bytes, 0o644).map_err(fail)?;
            if json_out::on() {
                json_out::emit(&json!({"ok": true, "path": remote, "bytes": bytes.len()}));
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCommand::Collect { handle, to } => collect(&handle, &to),
        SandboxCommand::Egress {
            handle,
            spec_egress,
            none: _,
        } => egress(&handle, &spec_egress),
        SandboxCommand::Pause { handle } => pause(&handle, true),
        SandboxCommand::Resume { handle } => pause(&handle, false),
        SandboxCommand::Diff { handle } => crate::workspace_cmd::diff(&attach(&handle)?, &handle),
        SandboxCommand::Apply { handle, paths } => {
            crate::workspace_cmd::apply(&attach(&handle)?, &paths)
        }
        SandboxCommand::Snapshot {
            handle,
            name,
            memory,
            config,
        } => crate::snapshot_cmd::snapshot(
            &attach(&handle)?,
            name.as_deref(),
            memory,
            config.as_ref(),
        ),
        SandboxCommand::Snapshots { scope, config } => {
            crate::snapshot_cmd::list(scope.as_deref(), config.as_ref())
        }
        SandboxCommand::Forget {
            snapshot,
            scope,
            config,
        } => crate::snapshot_cmd::forget(&snapshot, &scope, config.as_ref()),
        SandboxCommand::Fork(f) => {
            let s = attach(&f.handle)?;
            let keep = || {
                let st = state()?;
                Ok(crate::snapshot_cmd::keep_for(st, f.idle_timeout, f.max_age))
            };
            crate::snapshot_cmd::fork(&s, &f, keep)
        }
        SandboxCommand::Ls { handle: None, .. } => ls(),
        SandboxCommand::Ls {
            handle: Some(h),
            path,
            depth,
        } => crate::files_cmd::ls(&attach(&h)?, path.as_deref().unwrap_or(""), depth),
        SandboxCommand::Cat {
            handle,
            path,
            offset,
            len,
        } => crate::files_cmd::cat(&attach(&handle)?, &path, offset, len),
        SandboxCommand::Rm {
            handle,
            path,
            recursive,
        } => crate::files_cmd::change(
            &attach(&handle)?,
            cordon_sandbox::FileOp::Remove { path, recursive },
        ),
        SandboxCommand::Mkdir { handle, path } => {
            crate::files_cmd::change(&attach(&handle)?, cordon_sandbox::FileOp::Mkdir { path })
        }
        SandboxCommand::Mv { handle, from, to } => crate::files_cmd::change(
            &attach(&handle)?,
            cordon_sandbox::FileOp::Rename { from, to },
        ),
        SandboxCommand::Watch {
            handle,
            path,
            recursive,
        } => crate::files_cmd::watch(&attach(&handle)?, path.as_deref().unwrap_or(""), recursive),
        SandboxCommand::Port {
            handle,
            port,
            listen,
            caller,
        } => {
            let caller = crate::run::identity(&caller).map_err(refuse)?;
            let st = state()?;
            let s = attach(&handle)?;
            let alive = || matches!(st.read(&handle), Ok(Some(rec)) if cordon_host::keeper::ping(&st, &rec));
            crate::port_cmd::forward(&s, port, &listen, caller, &alive)
        }
        SandboxCommand::Down {
            handle,
            scope,
            thread,
        } => down(handle, scope, thread),
        SandboxCommand::Gc => gc(),
    }
}

/// `cordon sandbox egress`: the sandbox's allowlist replaced; one that
/// does not load closes its egress, and says so.
fn egress(handle: &str, raw: &[String]) -> Result<ExitCode, ExitCode> {
    let s = attach(handle)?;
    let by = format!(
        "`cordon sandbox egress` (uid {})",
        rustix::process::getuid().as_raw()
    );
    let list = match cordon_sandbox::EgressEntry::parse_list(raw) {
        Ok(list) => list,
        Err(why) => {
            // Never the old list left in force: closed, and said so.
            return Err(
            match s.change_egress(cordon_sandbox::EgressChange::Close(why.clone()), &by) {
                Err(cordon_sandbox::SandboxError::Invalid { reason }) => {
                    refuse(format!("{why}; {reason}"))
                }
                _ => refuse(format!(
                    "{why}; sandbox `{handle}`'s egress is now closed (every request refused) until a change that loads: run `cordon sandbox egress {handle} --spec-egress ...` again"
                )),
            },
        );
        }
    };
    let shown: Vec<String> = list.iter().map(|e| e.to_string()).collect();
    let generation = s
        .change_egress(cordon_sandbox::EgressChange::Replace(list), &by)
        .map_err(fail)?;
    if json_out::on() {
        json_out::emit(
            &json!({"ok": true, "handle": handle, "generation": generation, "egress_allow": shown}),
        );
    } else {
        eprintln!(
            "sandbox `{handle}`: egress allowlist generation {generation}: [{}]",
            shown.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox pause` / `resume`.
fn pause(handle: &str, paused: bool) -> Result<ExitCode, ExitCode> {
    let s = attach(handle)?;
    if paused { s.pause() } else { s.resume() }.map_err(fail)?;
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "handle": handle, "paused": paused}));
    } else {
        eprintln!(
            "sandbox `{handle}` is {}",
            if paused {
                "paused (an exec resumes it)"
            } else {
                "running"
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox collect`: the declared outputs, landed in `to`.
fn collect(handle: &str, to: &std::path::Path) -> Result<ExitCode, ExitCode> {
    let s = attach(handle)?;
    let spec = &s.provenance().spec;
    if spec.declared_outputs().is_empty() && !spec.outputs_named_at_call_time() {
        return Err(refuse(format!(
            "sandbox `{handle}` was made with a spec that declares no outputs (kind `{}`); create it with `cordon sandbox up --spec FILE` naming `declared_outputs`",
            spec.kind()
        )));
    }
    if !to.is_dir() {
        return Err(usage(format!(
            "`{}` is not a directory; make it first (`mkdir -p {}`): outputs land only in a directory that exists",
            to.display(),
            to.display()
        )));
    }
    let sink = cordon_files::FsSink::new(to).map_err(fail)?;
    let got = collect_outputs(&s, &s.provenance().spec, Some(&sink)).map_err(fail)?;
    if json_out::on() {
        let landed: Vec<_> = got
            .landed
            .iter()
            .map(|a| json!({"path": a.handle.reveal().to_string(), "display": a.display}))
            .collect();
        json_out::emit(&json!({"ok": true, "landed": landed}));
        return Ok(ExitCode::SUCCESS);
    }
    // The operator is the host here: print where each landed.
    for a in &got.landed {
        println!("{}  ({})", a.handle.reveal(), a.display);
    }
    if got.landed.is_empty() {
        eprintln!("nothing to collect: no declared output exists in the sandbox");
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox ls`: each recorded sandbox, and whether its keeper lives.
fn ls() -> Result<ExitCode, ExitCode> {
    let st = state()?;
    let (records, bad) = st.list().map_err(fail)?;
    let now = state::now();
    let state_of = |r: &state::Record| {
        if !r.keeper.alive() {
            "orphaned"
        } else if r.orphaned_or_expired(now) {
            "expired"
        } else {
            "live"
        }
    };
    if json_out::on() {
        let list: Vec<_> = records
            .iter()
            .map(|r| {
                json!({
                    "handle": r.handle,
                    "backend": r.backend,
                    "state": state_of(r),
                    "age_seconds": now.saturating_sub(r.created),
                    "scope": r.key.scope,
                    "thread": r.key.thread,
                    "agent_dir": r.key.agent_dir,
                })
            })
            .collect();
        let unreadable: Vec<_> = bad.iter().map(|b| b.display().to_string()).collect();
        json_out::emit(&json!({"ok": true, "sandboxes": list, "unreadable": unreadable}));
        return Ok(ExitCode::SUCCESS);
    }
    // A reader that stops early (`| head`) ends the listing, not
    // the process with a panic.
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let mut shown = writeln!(
        out,
        "{:<44} {:<10} {:<8} {:>8}  SCOPE/THREAD",
        "HANDLE", "BACKEND", "STATE", "AGE"
    );
    for r in &records {
        if shown.is_err() {
            break;
        }
        shown = writeln!(
            out,
            "{:<44} {:<10} {:<8} {:>7}s  {}/{}",
            r.handle,
            r.backend,
            state_of(r),
            now.saturating_sub(r.created),
            r.key.scope,
            r.key.thread
        );
    }
    if let Err(e) = shown.and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("cordon: writing the listing: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    for b in bad {
        eprintln!("warning: unreadable record `{}`", b.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox down`: one sandbox by its handle, or a scope's thread.
fn down(
    handle: Option<String>,
    scope: Option<String>,
    thread: Option<String>,
) -> Result<ExitCode, ExitCode> {
    let st = state()?;
    match (handle, scope, thread) {
        (Some(h), None, None) => {
            let Some(rec) = st.read(&h).map_err(fail)? else {
                // Its keeper was gone, and it went as this command began.
                if crate::state_open::reclaimed_at_start(|r| r.handle == h) == 1 {
                    print_disposed(1);
                    return Ok(ExitCode::SUCCESS);
                }
                return Err(refuse(format!(
                    "no sandbox `{h}`; `cordon sandbox ls` lists them"
                )));
            };
            let lock = st.lock(&rec.key, Duration::from_secs(120)).map_err(fail)?;
            // A record that does not hold up is left alone: refused.
            keeper::vet_record(&st, &crate::registry(), &rec).map_err(refuse)?;
            let failures = keeper::dispose_record(&st, &crate::registry(), &rec);
            lock.unlock_and_remove();
            if !failures.is_empty() {
                // What was left (an engine that did not answer) is
                // the outcome, never a warning beside a success.
                return Err(refuse(format!(
                    "`{h}` was not wholly disposed: {}",
                    failures.join("; ")
                )));
            }
            print_disposed(1);
            Ok(ExitCode::SUCCESS)
        }
        (None, Some(s), Some(t)) => {
            let (n, failures) =
                keeper::dispose_scope(&st, &crate::registry(), None, &s, &t).map_err(refuse)?;
            // With those whose keeper was gone, reclaimed as it began.
            let n = n + crate::state_open::reclaimed_at_start(|r| {
                r.key.scope == s && r.key.thread == t
            });
            if !failures.is_empty() {
                // Never a bare count over what was left.
                return Err(refuse(format!(
                    "{n} disposed, and not all of scope `{s}` thread `{t}`: {}",
                    failures.join("; ")
                )));
            }
            print_disposed(n);
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(usage("name a HANDLE, or both `--scope S --thread T`")),
    }
}

/// `cordon sandbox gc`: every sandbox whose keeper is gone or past its age,
/// and what no record names.
fn gc() -> Result<ExitCode, ExitCode> {
    // Not `state()`: gc reclaims everything that sweep would, itself.
    let st = StateDir::open(&StateDir::default_path()).map_err(fail)?;
    let builder = crate::host_builder();
    let (n, mut failures) = KeptBackend::gc(&st, builder.registry());
    // Swept where the host's settings point (the Docker Engines named).
    let setup = builder.backend_setup().map_err(fail)?;
    let (unrecorded, more) = KeptBackend::gc_unrecorded(builder.registry(), &setup);
    failures.extend(more);
    for f in failures {
        eprintln!("warning: {f}");
    }
    if !unrecorded.is_empty() {
        eprintln!(
            "also reclaimed {} sandbox cgroup(s) no record named, left by owners that were killed: {}",
            unrecorded.len(),
            unrecorded.join(", ")
        );
    }
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "disposed": n, "unrecorded_cgroups": unrecorded}));
    } else {
        println!("{n}");
    }
    Ok(ExitCode::SUCCESS)
}

fn up(a: UpArgs) -> Result<ExitCode, ExitCode> {
    let kept = cordon_host::Keep {
        state: state()?,
        owner: OWNER.to_string(),
        idle_timeout: Duration::from_secs(a.idle_timeout),
        max_age: Duration::from_secs(a.max_age),
        on_idle_pause: match a.on_idle.as_str() {
            "pause" => {
                let cfg = crate::run::host_config(&a.sel)?
                    .map(|c| c.snapshots)
                    .unwrap_or_default();
                Some(crate::snapshot_cmd::idle_pause(&cfg))
            }
            _ => None,
        },
    };
    if let Some(from) = &a.from {
        let place = crate::snapshot_cmd::Place {
            scope: &a.scope,
            thread: &a.thread,
            agent_dir: &a.agent_dir,
        };
        return crate::snapshot_cmd::up_from(from, &a.sel, kept, &place);
    }
    let p = prepare(&a.sel, Some(kept))?;
    let id = p.identity.clone();
    let (scope, thread, agent) = (a.scope.clone(), a.thread.clone(), a.agent_dir.clone());
    let caller = CallerContext::new(
        move || scope.clone(),
        move || thread.clone(),
        move || agent.clone(),
        move || id.clone(),
    );
    let s = p.router.acquire(&caller, &p.spec).map_err(fail)?;
    log_provenance("created", &*s);
    if json_out::on() {
        let mut doc = p.chosen.clone();
        doc["ok"] = true.into();
        doc["handle"] = s.id().into();
        json_out::emit(&doc);
    } else {
        println!("{}", s.id());
    }
    Ok(ExitCode::SUCCESS)
}

/// What `down` prints: `disposed 1 sandbox`, `disposed 0 sandboxes` (or
/// `{"ok": true, "disposed": N}`).
fn print_disposed(n: usize) {
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "disposed": n}));
    } else {
        println!("disposed {n} sandbox{}", if n == 1 { "" } else { "es" });
    }
}
