//! Snapshots on the command line: `cordon sandbox snapshot` (a kept
//! sandbox's files into cordon's store), `snapshots` (list), `forget`,
//! `up --from` (a new sandbox made from one) and `fork` (a snapshot and N
//! sandboxes made from it).

use std::process::ExitCode;
use std::time::Duration;

use cordon_host::config::SnapshotConfig;
use cordon_host::keeper::KeptSandbox;
use cordon_host::snapshots::{Capture, Snapshot, SnapshotStore};
use cordon_sandbox::{CallerContext, Capability, Sandbox};
use serde_json::json;

use crate::exit::{fail, refuse, usage};
use crate::json_out;
use crate::run::{prepare_with, Selection};

/// The store the configuration (or the environment) names.
pub fn store(cfg: &SnapshotConfig) -> Result<SnapshotStore, ExitCode> {
    let dir = cfg.dir.clone().unwrap_or_else(SnapshotStore::default_path);
    SnapshotStore::open(&dir, cfg.quota_per_scope).map_err(refuse)
}

fn store_for(sel: &Selection) -> Result<SnapshotStore, ExitCode> {
    store_in(sel.config.as_ref())
}

/// The store the host configuration `config` (or the user's) names.
pub fn store_in(config: Option<&std::path::PathBuf>) -> Result<SnapshotStore, ExitCode> {
    let cfg = crate::run::config_file(config)
        .map(|f| cordon_host::config::HostConfig::from_file(&f))
        .transpose()
        .map_err(usage)?
        .map(|c| c.snapshots)
        .unwrap_or_default();
    store(&cfg)
}

fn shown(s: &Snapshot) -> serde_json::Value {
    json!({
        "id": s.id, "name": s.name, "scope": s.scope, "thread": s.thread,
        "created": s.created, "backend": s.backend, "files": s.files,
        "bytes": s.bytes, "kind": s.provenance.spec.kind(),
        "processes": s.processes, "memory_bytes": s.memory_bytes,
        "policy_digest": s.provenance.policy_digest,
    })
}

/// Takes a snapshot of a kept sandbox; prints its id.
fn take(
    st: &SnapshotStore,
    s: &KeptSandbox,
    name: Option<&str>,
    capture: Capture,
) -> Result<Snapshot, ExitCode> {
    let rec = s.record();
    let (snap, warning) = st
        .take(
            s,
            &rec.backend,
            &rec.key.scope,
            &rec.key.thread,
            name,
            capture,
        )
        .map_err(refuse)?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    Ok(snap)
}

/// `cordon sandbox snapshot H [--name N] [--memory]`.
pub fn snapshot(
    s: &KeptSandbox,
    name: Option<&str>,
    memory: bool,
    config: Option<&std::path::PathBuf>,
) -> Result<ExitCode, ExitCode> {
    let st = store_in(config)?;
    let capture = if memory {
        Capture::Memory
    } else {
        Capture::Files
    };
    let snap = take(&st, s, name, capture)?;
    if json_out::on() {
        let mut doc = shown(&snap);
        doc["ok"] = true.into();
        json_out::emit(&doc);
    } else {
        println!("{}", snap.id);
        let processes = match snap.processes {
            Some(n) => format!(
                ", {n} process{} ({} bytes of memory)",
                if n == 1 { "" } else { "es" },
                snap.memory_bytes
            ),
            None => String::new(),
        };
        eprintln!(
            "snapshot `{}`: {} file{}, {} bytes{processes}, of sandbox `{}`",
            snap.id,
            snap.files,
            if snap.files == 1 { "" } else { "s" },
            snap.bytes,
            s.id()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox snapshots [--scope S]`.
pub fn list(
    scope: Option<&str>,
    config: Option<&std::path::PathBuf>,
) -> Result<ExitCode, ExitCode> {
    let st = store_in(config)?;
    let all: Vec<Snapshot> = st
        .list()
        .into_iter()
        .filter(|s| scope.is_none_or(|sc| s.scope == sc))
        .collect();
    if json_out::on() {
        let v: Vec<serde_json::Value> = all.iter().map(shown).collect();
        json_out::emit(&json!({"ok": true, "snapshots": v}));
    } else {
        println!(
            "{:<30} {:<16} {:>10} {:>7}  SCOPE/THREAD",
            "SNAPSHOT", "NAME", "BYTES", "FILES"
        );
        for s in &all {
            println!(
                "{:<30} {:<16} {:>10} {:>7}  {}/{}",
                s.id,
                s.name.as_deref().unwrap_or("-"),
                s.bytes,
                s.files,
                s.scope,
                s.thread
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox forget SNAPSHOT --scope S`.
pub fn forget(
    what: &str,
    scope: &str,
    config: Option<&std::path::PathBuf>,
) -> Result<ExitCode, ExitCode> {
    let st = store_in(config)?;
    let s = st.remove(what, scope).map_err(refuse)?;
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "removed": s.id}));
    } else {
        eprintln!("snapshot `{}` removed ({} bytes)", s.id, s.bytes);
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a restored sandbox goes.
pub struct Place<'a> {
    pub scope: &'a str,
    pub thread: &'a str,
    pub agent_dir: &'a str,
}

/// A new kept sandbox at `place` made from `snap`: its spec (unless the
/// flags name one, which must then be the snapshot's), its identity
/// (unless `--identity` names one), under the policy the flags name, which
/// must be the one it was taken under. Returns the sandbox's handle.
pub fn restore(
    snap: &Snapshot,
    st: &SnapshotStore,
    sel: &Selection,
    keep: cordon_host::Keep,
    place: &Place<'_>,
) -> Result<(String, serde_json::Value), ExitCode> {
    if sel.workspace.is_some() || sel.work_dir.is_some() {
        return Err(usage(
            "a sandbox made from a snapshot has the snapshot's files as its work dir; drop `--workspace` / `--work-dir`",
        ));
    }
    let spec = match &sel.spec {
        Some(f) => cordon_sandbox::SandboxSpec::from_file(f).map_err(fail)?,
        None => snap.provenance.spec.clone(),
    }
    .requiring(Capability::Snapshot);
    let mut p = prepare_with(sel, Some(keep), Some(spec))?;
    if sel.identity.is_empty() {
        p.identity = snap.provenance.identity.clone();
    }
    SnapshotStore::check_restore(snap, &p.spec, &p.identity, &p.policy.digest).map_err(refuse)?;
    let id = p.identity.clone();
    let (scope, thread, agent) = (
        place.scope.to_string(),
        place.thread.to_string(),
        place.agent_dir.to_string(),
    );
    let caller = CallerContext::new(
        move || scope.clone(),
        move || thread.clone(),
        move || agent.clone(),
        move || id.clone(),
    );
    let s = p
        .router
        .acquire_from(&caller, &p.spec, Some(st.origin(snap)))
        .map_err(fail)?;
    Ok((s.id().to_string(), p.chosen))
}

/// `cordon sandbox up --from SNAPSHOT`: the snapshot is looked for in
/// the `--scope` given.
pub fn up_from(
    from: &str,
    sel: &Selection,
    keep: cordon_host::Keep,
    place: &Place<'_>,
) -> Result<ExitCode, ExitCode> {
    let st = store_for(sel)?;
    let snap = st.find(from, place.scope).map_err(refuse)?;
    let (handle, chosen) = restore(&snap, &st, sel, keep, place)?;
    if json_out::on() {
        let mut doc = chosen;
        doc["ok"] = true.into();
        doc["handle"] = handle.into();
        doc["snapshot"] = snap.id.into();
        json_out::emit(&doc);
    } else {
        println!("{handle}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox fork H --count N [--thread-prefix P]`: a snapshot of
/// H, then N sandboxes made from it in H's scope, threads `P-1`..`P-N`
/// (default prefix: H's thread and `-fork`), each independent.
pub fn fork(
    s: &KeptSandbox,
    f: &crate::sandbox_cmd::ForkArgs,
    keep: impl Fn() -> Result<cordon_host::Keep, ExitCode>,
) -> Result<ExitCode, ExitCode> {
    let (count, prefix, memory, sel) = (f.count, f.thread_prefix.as_deref(), f.memory, &f.sel);
    if count == 0 || count > 64 {
        return Err(usage("`--count` is 1 to 64"));
    }
    let st = store_for(sel)?;
    let capture = if memory {
        Capture::Memory
    } else {
        Capture::Files
    };
    let snap = take(&st, s, None, capture)?;
    let rec = s.record();
    let prefix = prefix
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}-fork", rec.key.thread));
    let mut sel = sel.clone();
    if sel.backend.is_none() {
        sel.backend = Some(rec.backend.clone());
    }
    let mut handles = Vec::new();
    for i in 1..=count {
        let thread = format!("{prefix}-{i}");
        let place = Place {
            scope: &rec.key.scope,
            thread: &thread,
            agent_dir: &rec.key.agent_dir,
        };
        let (h, _) = restore(&snap, &st, &sel, keep()?, &place)?;
        handles.push(json!({"handle": h, "thread": thread}));
        if !json_out::on() {
            println!("{h}");
        }
    }
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "snapshot": snap.id, "forks": handles}));
    } else {
        eprintln!(
            "forked `{}` into {count} sandboxes from snapshot `{}`",
            s.id(),
            snap.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The keep settings of a sandbox made by `up --from` or `fork`.
pub fn keep_for(state: cordon_host::state::StateDir, idle: u64, max_age: u64) -> cordon_host::Keep {
    cordon_host::Keep {
        state,
        owner: crate::sandbox_cmd::OWNER.to_string(),
        idle_timeout: Duration::from_secs(idle),
        max_age: Duration::from_secs(max_age),
        on_idle_pause: None,
    }
}

/// `on_idle: pause`: a keeper pauses its idle sandbox, then (idle as long
/// again) snapshots it into the store `cfg` names and disposes of it.
pub fn idle_pause(cfg: &SnapshotConfig) -> cordon_host::keeper::IdlePause {
    cordon_host::keeper::IdlePause {
        snapshots: Some(cfg.dir.clone().unwrap_or_else(SnapshotStore::default_path)),
        quota_per_scope: cfg.quota_per_scope,
    }
}
