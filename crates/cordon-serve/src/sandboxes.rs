//! Sandboxes: create or get, attach a recorded one, dispose.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::{ErrorKind, Sandbox, SandboxKey, SandboxSpec};
use serde::Deserialize;
use serde_json::json;

use crate::config::Credential;
use crate::limits::{ScopeGuard, CAP_LOCK_WAIT};
use crate::refusal::{no_such_sandbox, refused, Refusal};
use crate::request::{authed, caller, who, Address, Body};
use crate::served::Served;

pub(crate) async fn backends(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    // The probe's detail (host tool paths and versions, why a backend
    // cannot run) is the operator's: a tenant learns names, rungs and
    // whether each can serve, nothing of the host's installation.
    let available: Vec<serde_json::Value> = s
        .catalogue
        .iter()
        .map(|row| {
            let used = row["name"]
                .as_str()
                .is_some_and(|n| s.backends.iter().any(|b| b == n));
            let mut row = if cred.operator {
                row.clone()
            } else {
                json!({
                    "name": row["name"],
                    "rung": row["rung"],
                    "admitted": row["admitted"],
                    "runnable": row["runnable"],
                })
            };
            row["used"] = used.into();
            row
        })
        .collect();
    Json(json!({
        "backends": s.backends,
        "available": available,
        "floor": s.floor.as_str(),
        "identity": {"namespace": cred.identity.namespace, "name": cred.identity.name},
        "scope": cred.scope,
    }))
    .into_response()
}

impl Served {
    /// Disposes of every sandbox this server made (at shutdown: they
    /// live and die with it until replicas share a state directory).
    pub(crate) fn dispose_all(&self) {
        self.drain_pools();
        let held: Vec<(SandboxKey, Arc<dyn Sandbox>)> = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *live).into_iter().collect()
        };
        let threads: std::collections::BTreeSet<(String, String)> = held
            .iter()
            .map(|(k, _)| (k.scope().to_string(), k.thread_id().to_string()))
            .collect();
        drop(held);
        for (scope, thread) in threads {
            if let Err(e) = self.router.try_dispose_scope(&scope, &thread) {
                tracing::warn!(scope, thread, "at shutdown: {e}");
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    /// A spec as YAML text (docs/spec.md); default: an offline `run` spec
    /// on the host image (or, with `from`, the snapshot's).
    #[serde(default)]
    pub(crate) spec: Option<String>,
    /// Make it from this snapshot of the credential's scope (its id or
    /// name): its files are the work dir, copy-on-write.
    #[serde(default)]
    pub(crate) from: Option<String>,
}

/// The caller's live sandbox at `at` (its scope, that thread and agent
/// dir), or the answer for one it has not made.
///
/// A sandbox another replica made, or this server made before a restart,
/// is found in the shared state directory and attached again (through the
/// router, which checks that it was made for this identity and policy).
/// A request body that names a sandbox (its thread and agent dir).
pub(crate) trait Addressed {
    fn at(&self) -> &Address;
}

/// The request's credential, its body and the live sandbox the body
/// names (the credential's own: another's is the `404` of none) — or the
/// refusal to answer.
pub(crate) async fn authed_sandbox<B: Addressed>(
    s: &Arc<Served>,
    headers: &axum::http::HeaderMap,
    body: crate::request::Body<B>,
) -> Result<(Credential, B, Arc<dyn Sandbox>), Box<Response>> {
    let (cred, body) = crate::request::authed(s, headers, body)?;
    let sandbox = live_sandbox(s, &cred, body.at()).await?;
    Ok((cred, body, sandbox))
}

pub(crate) async fn live_sandbox(
    s: &Arc<Served>,
    cred: &Credential,
    at: &Address,
) -> Result<Arc<dyn Sandbox>, Box<Response>> {
    let key = caller(cred, at)
        .resolve()
        .map_err(|e| Box::new(refused(ErrorKind::Invalid, e)))?
        .key;
    let held = s
        .live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if let Some(h) = held {
        // A kept sandbox whose record is gone was disposed of (by a
        // replica, its idle timeout): not handed out again.
        let gone = s
            .state
            .as_ref()
            .is_some_and(|st| !st.record_path(h.id()).exists());
        if !gone {
            return Ok(h);
        }
        s.forget(cred, at);
    }
    let (served, cred, at) = (s.clone(), cred.clone(), at.clone());
    let found = tokio::task::spawn_blocking(move || served.attach_recorded(&cred, &at)).await;
    match found {
        Ok(Ok(Some(sandbox))) => Ok(sandbox),
        Ok(Ok(None)) => Err(Box::new(no_such_sandbox())),
        Ok(Err(r)) => Err(Box::new(r.into_response())),
        Err(e) => Err(Box::new(refused(ErrorKind::Failed, e))),
    }
}

impl Served {
    /// The recorded sandbox of `cred`'s scope at `at`, attached and held;
    /// `None` when the state directory has none (or there is none). Blocks.
    pub(crate) fn attach_recorded(
        &self,
        cred: &Credential,
        at: &Address,
    ) -> Result<Option<Arc<dyn Sandbox>>, Refusal> {
        let Some(state) = &self.state else {
            return Ok(None);
        };
        let key = cordon_host::state::KeyRecord {
            scope: cred.scope.clone(),
            thread: at.thread.clone(),
            agent_dir: at.agent_dir.clone(),
        };
        let rec = match state.find(&key) {
            Ok(Some(r)) => r,
            Ok(None) => return self.resurrect(cred, at, false),
            Err(e) => return Err(Refusal::of(ErrorKind::Failed, e)),
        };
        if rec.orphaned_or_expired(cordon_host::state::now()) {
            // Its keeper died: a paused one is found again from its files.
            let dead = !rec.keeper.alive();
            if dead {
                let _ = self.router.dispose(&caller(cred, at));
            }
            return self.resurrect(cred, at, dead);
        }
        // Attached only: one disposed of since it was found is not made
        // again by an exec (nor outside the cap).
        match self.acquire_counted(
            cred,
            at,
            &rec.provenance.spec,
            false,
            rec.provenance.origin.clone(),
        ) {
            Ok(m) => Ok(Some(m.sandbox)),
            Err(r) if r.status == StatusCode::NOT_FOUND => Ok(None),
            Err(r) => Err(r),
        }
    }

    /// Forgets a held sandbox that failed (its keeper gone, say): the next
    /// request finds it again, or finds it gone.
    pub(crate) fn forget(&self, cred: &Credential, at: &Address) {
        if let Ok(c) = caller(cred, at).resolve() {
            self.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&c.key);
        }
    }

    /// How many sandboxes `scope` holds (every replica's, from the state
    /// directory, when there is one; else this server's), and whether
    /// `key`'s is one of them: both from one listing.
    /// A state directory that cannot be listed is a refusal, not a count
    /// of this server's own: the cap would fail open across replicas.
    pub(crate) fn held_and_exists(
        &self,
        scope: &str,
        key: &SandboxKey,
    ) -> Result<(usize, bool), Refusal> {
        if let Some(state) = &self.state {
            let (records, _) = state.list().map_err(|e| {
                Refusal::of(
                    ErrorKind::Unavailable,
                    format!("cannot count this credential's sandboxes: {e}"),
                )
            })?;
            let now = cordon_host::state::now();
            let live: Vec<_> = records
                .iter()
                .filter(|r| {
                    r.key.scope == scope
                        && !r.orphaned_or_expired(now)
                        && !r.key.thread.starts_with(crate::pools::POOL_THREAD_PREFIX)
                })
                .collect();
            let exists = live
                .iter()
                .any(|r| r.key.thread == key.thread_id() && r.key.agent_dir == key.agent_dir());
            return Ok((live.len(), exists));
        }
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        Ok((
            live.keys().filter(|k| k.scope() == scope).count(),
            live.contains_key(key),
        ))
    }
}

pub(crate) async fn create(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<CreateBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Some(from) = body.from.clone() {
        return crate::snapshots::create_from(s, cred, body.at, body.spec, &from).await;
    }
    let spec = match &body.spec {
        Some(text) => SandboxSpec::from_yaml("spec", text),
        None => SandboxSpec::new("run", "host"),
    };
    let spec = match spec {
        Ok(s) => s,
        Err(e) => return refused(ErrorKind::Invalid, e),
    };
    if let Some(dir) = spec.workspace() {
        if let Err(why) = workspace_allowed(dir, &s.config.sandboxes.workspace_roots) {
            return refused(ErrorKind::Refused, why);
        }
    }
    let served = s.clone();
    let made = tokio::task::spawn_blocking(move || -> Response {
        match served.get_or_create(&cred, &body.at, &spec) {
            Ok(made) => Json(json!({
                "handle": made.sandbox.id(),
                "backend": made.backend,
                "rung": made.rung,
                "warnings": made.warnings,
                "thread": body.at.thread,
                "agent_dir": body.at.agent_dir,
            }))
            .into_response(),
            Err(r) => r.into_response(),
        }
    })
    .await;
    made.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

/// A sandbox got or made for a request.
pub(crate) struct Made {
    pub(crate) sandbox: Arc<dyn Sandbox>,
    pub(crate) backend: String,
    pub(crate) rung: &'static str,
    /// What the host should know (a backend that confines more than the
    /// spec asks, say).
    pub(crate) warnings: Vec<String>,
}

impl Served {
    /// The sandbox of `cred`'s scope at `at`, made with `spec` when it does
    /// not exist (counted against the credential's cap); one made with
    /// another spec is refused by the router. Blocks.
    pub(crate) fn get_or_create(
        &self,
        cred: &Credential,
        at: &Address,
        spec: &SandboxSpec,
    ) -> Result<Made, Refusal> {
        self.acquire_counted(cred, at, spec, true, None)
    }

    /// [`Served::get_or_create`], a new sandbox made from `origin` (a
    /// snapshot the caller has checked).
    pub(crate) fn get_or_create_from(
        &self,
        cred: &Credential,
        at: &Address,
        spec: &SandboxSpec,
        origin: cordon_sandbox::Origin,
    ) -> Result<Made, Refusal> {
        self.acquire_counted(cred, at, spec, true, Some(origin))
    }

    /// The scope's cap lock: this server's threads queue on a mutex, and
    /// with a state directory, replicas on its scope lock file. Held from
    /// the count until the sandbox is recorded (or refused).
    fn cap_lock(&self, scope: &str) -> Result<CapLock<'_>, Refusal> {
        let local = ScopeGuard::take(&self.scope_locks, scope)?;
        let file = match &self.state {
            Some(st) => Some(st.lock_scope(scope, CAP_LOCK_WAIT).map_err(|e| {
                Refusal::of(
                    ErrorKind::Unavailable,
                    format!("cannot count this credential's sandboxes: {e}"),
                )
            })?),
            None => None,
        };
        Ok(CapLock {
            file,
            _local: local,
        })
    }

    /// [`Served::get_or_create`]; with `may_create` false, only a sandbox
    /// that exists is got (`None` otherwise: an exec never makes one).
    ///
    /// Every path that can end in a new sandbox comes here, and the count
    /// and the create are one step under the scope's cap lock: whether the
    /// key's sandbox exists is judged from the same listing as the count,
    /// so a dispose landing between them cannot let a create through
    /// uncounted (a sandbox that went frees the slot its re-creation takes).
    fn acquire_counted(
        &self,
        cred: &Credential,
        at: &Address,
        spec: &SandboxSpec,
        may_create: bool,
        origin: Option<cordon_sandbox::Origin>,
    ) -> Result<Made, Refusal> {
        if at.thread.starts_with(crate::pools::POOL_THREAD_PREFIX) {
            return Err(Refusal::of(
                ErrorKind::Invalid,
                format!(
                    "a thread may not begin with `{}` (warm pools keep theirs there)",
                    crate::pools::POOL_THREAD_PREFIX
                ),
            ));
        }
        let caller = caller(cred, at);
        let key = caller
            .resolve()
            .map_err(|e| Refusal::of(ErrorKind::Invalid, e))?
            .key;
        let cap_lock = self.cap_lock(&cred.scope)?;
        let (held, exists) = self.held_and_exists(&cred.scope, &key)?;
        if !exists {
            if !may_create {
                return Err(Refusal::of(
                    ErrorKind::NotFound,
                    "no sandbox for this thread and agent dir; create it with POST /v1/sandboxes",
                ));
            }
            let cap = self.config.limits.max_sandboxes;
            if held >= cap {
                return Err(Refusal {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    message: format!(
                        "this credential holds {held} live sandboxes, its limit; dispose one (POST /v1/sandboxes/dispose) first"
                    ),
                });
            }
        }
        // A create a warm pool serves is a claim of one of its sandboxes.
        let claimed = match (exists, &origin) {
            (false, None) => self
                .pool_for(cred, spec)
                .and_then(|pool| self.claim(pool, cred, &key)),
            _ => None,
        };
        let acquired = match claimed {
            Some(s) => Ok(s),
            None => self.router.acquire_from(&caller, spec, origin),
        };
        let sandbox = acquired.map_err(|e| {
            if let Some((surface, rules)) = e.denial() {
                self.denied(&cred.scope, surface, rules);
            }
            Refusal::of(e.kind(), &e)
        })?;
        // Held before anything else can fail: a sandbox acquired is always
        // one the server can find again (and dispose of).
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, sandbox.clone());
        // Recorded (the keeper wrote its record before it said ready) and
        // held: the next count sees it.
        cap_lock.release();
        // The backend that just served the acquire (the same selection).
        let (backend, rung) = self
            .router
            .selected(spec)
            .map(|(name, rung)| (name.to_string(), rung.as_str()))
            .map_err(|e| Refusal::of(e.kind(), &e))?;
        if !exists {
            self.count(&cred.scope, |m| *m.created.entry(rung).or_default() += 1);
        }
        let warnings = self
            .router
            .ensure_can_serve(spec)
            .map(|w| w.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        Ok(Made {
            sandbox,
            backend,
            rung,
            warnings,
        })
    }
}

/// A scope's cap lock, held (see [`Served::cap_lock`]).
struct CapLock<'a> {
    file: Option<cordon_host::state::KeyLock>,
    _local: ScopeGuard<'a>,
}

impl CapLock<'_> {
    /// Releases it (as dropping it does).
    fn release(self) {}
}

impl Drop for CapLock<'_> {
    /// Its lock file goes with it, however the request ended: it holds
    /// nothing, and `locks/` does not keep a file per scope ever used.
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            f.unlock_and_remove();
        }
    }
}

pub(crate) async fn dispose(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    let (cred, at) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || -> Response {
        let caller = caller(&cred, &at);
        let key = match caller.resolve() {
            Ok(c) => c.key,
            Err(e) => return refused(ErrorKind::Invalid, e),
        };
        let held = served
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        drop(held);
        served.drop_paused_files(&cred, &at, true);
        // A dispose that did not dispose is its error (with why), never
        // a count: the sandbox may still run.
        match served.router.dispose(&caller) {
            Ok(n) => Json(json!({"disposed": n})).into_response(),
            Err(e) => refused(e.kind(), e),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThreadBody {
    pub(crate) thread: String,
}

/// Disposes of every sandbox of the credential's scope and one thread
/// (each agent dir's): the count.
pub(crate) async fn dispose_thread(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ThreadBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if body.thread.is_empty() {
        return refused(ErrorKind::Invalid, "`thread` is empty");
    }
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || {
        let held: Vec<_> = {
            let mut live = served.live.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<SandboxKey> = live
                .keys()
                .filter(|k| k.scope() == cred.scope && k.thread_id() == body.thread)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| live.remove(k)).collect()
        };
        drop(held);
        served.router.try_dispose_scope(&cred.scope, &body.thread)
    })
    .await;
    match done {
        Ok(Ok(n)) => Json(json!({"disposed": n})).into_response(),
        Ok(Err(e)) => refused(e.kind(), e),
        Err(e) => refused(ErrorKind::Failed, e),
    }
}

/// Whether a caller's spec may name `dir` as its workspace: beneath one of
/// the roots the operator configured, named by its real path (no link on
/// it, so the directory mounted is the one checked).
fn workspace_allowed(dir: &str, roots: &[std::path::PathBuf]) -> Result<(), String> {
    if roots.is_empty() {
        return Err(format!(
            "this server allows no workspaces, so the spec's `workspace: {dir}` is refused; an operator lists the directories callers may name under `sandboxes.workspace_roots` in the server's configuration"
        ));
    }
    let real = std::path::Path::new(dir)
        .canonicalize()
        .map_err(|e| format!("workspace `{dir}`: {e}"))?;
    if real != std::path::Path::new(dir) {
        return Err(format!(
            "workspace `{dir}` has a link on its path; name it by its real path `{}`",
            real.display()
        ));
    }
    if !roots.iter().any(|r| real.starts_with(r)) {
        return Err(format!(
            "workspace `{dir}` is not beneath a directory this server allows (`sandboxes.workspace_roots`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::workspace_allowed;

    #[test]
    fn a_workspace_is_allowed_only_beneath_a_root_and_by_its_real_path() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let (root, other) = (t.join("root"), t.join("other"));
        std::fs::create_dir_all(root.join("p")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&other, root.join("l")).unwrap();
        let p = |x: &std::path::Path| x.to_str().unwrap().to_string();
        let err =
            |dir: &str, roots: &[std::path::PathBuf]| workspace_allowed(dir, roots).unwrap_err();
        assert!(err(&p(&root.join("p")), &[]).contains("allows no workspaces"));
        let roots = [root.clone()];
        assert!(workspace_allowed(&p(&root.join("p")), &roots).is_ok());
        assert!(err(&p(&other), &roots).contains("not beneath"));
        assert!(err(&p(&root.join("l")), &roots).contains("link on its path"));
        assert!(err(&p(&root.join("absent")), &roots).contains("No such file"));
    }
}
