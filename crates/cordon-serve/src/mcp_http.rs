//! `/mcp`: the MCP server over streamable HTTP, each request bound to
//! the credential it carries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use cordon_sandbox::{ErrorKind, Sandbox, SandboxSpec};
use serde_json::json;

use crate::config::Credential;
use crate::refusal::refused;
use crate::request::{caller, who, Address};
use crate::served::Served;
use crate::{auth, mcp};

/// `/mcp`: the MCP server over streamable HTTP. Each request must carry a
/// credential (checked here, before the protocol is read, and again when a
/// tool resolves its sandbox) and no `Origin` but a configured one.
pub(crate) fn mcp_routes(state: Arc<Served>) -> Router<Arc<Served>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let mut hosts = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    hosts.push(state.config.listen.ip().to_string());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(state.config.mcp.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(state.config.limits.max_request_bytes);
    config.sse_keep_alive = Some(Duration::from_secs(15));
    let host = Arc::new(HttpMcp {
        served: state.clone(),
    });
    let manager = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(mcp::CordonMcp::new(host.clone())),
        manager.clone(),
        config,
    );
    let sessions = McpSessions {
        served: state.clone(),
        manager,
        owners: Arc::new(Mutex::new(BTreeMap::new())),
        making: Arc::new(Mutex::new(BTreeMap::new())),
    };
    Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(
            sessions,
            mcp_credential,
        ))
}

/// The header an MCP session's id travels in, both ways.
const SESSION_HEADER: &str = "mcp-session-id";

/// Who made each MCP session: a session is its maker's alone.
#[derive(Clone)]
pub(crate) struct McpSessions {
    served: Arc<Served>,
    manager: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    /// By session id: the name of the credential whose `initialize` made
    /// it.
    owners: Arc<Mutex<BTreeMap<String, String>>>,
    /// Sessions being made, by credential: counted against the cap with
    /// the live ones, so racing `initialize`s cannot both pass it.
    making: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// One session being made, counted under its credential until dropped.
struct Making {
    of: Arc<Mutex<BTreeMap<String, usize>>>,
    cred: String,
}

impl Drop for Making {
    fn drop(&mut self) {
        let mut making = self.of.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = making.get_mut(&self.cred) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                making.remove(&self.cred);
            }
        }
    }
}

impl McpSessions {
    fn owner(&self, id: &str) -> Option<String> {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn forget(&self, id: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Whether the session manager still holds `id` (a session ends when
    /// deleted, or when it idles out).
    async fn live(&self, id: &str) -> bool {
        use rmcp::transport::streamable_http_server::session::SessionManager as _;
        self.manager
            .has_session(&id.to_string().into())
            .await
            .unwrap_or(false)
    }

    /// Forgets `cred`'s sessions that ended.
    async fn prune(&self, cred: &str) {
        let mine: Vec<String> = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, o)| o.as_str() == cred)
            .map(|(id, _)| id.clone())
            .collect();
        for id in mine {
            if !self.live(&id).await {
                self.forget(&id);
            }
        }
    }

    /// The sessions bound to `cred`.
    fn bound_to(&self, cred: &str) -> usize {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|o| o.as_str() == cred)
            .count()
    }
}

/// The answer for a session id this credential did not make, whether
/// another credential made it or nobody did: rmcp's own answer for an
/// unknown session, byte for byte, so the two cannot be told apart.
fn no_such_session() -> Response {
    // As rmcp builds it: no content type, this body.
    let mut r = Response::new(axum::body::Body::from("Not Found: Session not found"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// `/mcp` answers only a request with a credential, and a request naming
/// a session (`POST`, `GET` to resume its events, `DELETE`) only when that
/// credential made the session; a request without one may make one, up to
/// `limits.max_mcp_sessions` live at once per credential.
pub(crate) async fn mcp_credential(
    State(sessions): State<McpSessions>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let cred = match who(&sessions.served, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if let Some(id) = req.headers().get(SESSION_HEADER) {
        let Ok(id) = id.to_str().map(str::to_string) else {
            return no_such_session();
        };
        if sessions.owner(&id).as_deref() != Some(cred.name.as_str()) {
            return no_such_session();
        }
        if !sessions.live(&id).await {
            sessions.forget(&id);
            return no_such_session();
        }
        let deleting = req.method() == axum::http::Method::DELETE;
        let response = next.run(req).await;
        if deleting && response.status().is_success() {
            sessions.forget(&id);
            // rmcp answers an ended session `202`; MCP clients (the
            // official SDKs) expect `200` or `204` and report anything
            // else as a failed termination. It ended: `204`. (The
            // sandbox is the credential's thread's, not the session's,
            // and stays until it is disposed of or idles out.)
            if response.status() == StatusCode::ACCEPTED {
                return StatusCode::NO_CONTENT.into_response();
            }
        }
        return response;
    }
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    // A POST without a session may be an `initialize`: it takes a place
    // under the cap before rmcp reads it, given back unless a session
    // came of it.
    let cap = sessions.served.config.limits.max_mcp_sessions;
    // Those that ended are forgotten first; then, under the lock, the
    // bound ones and those being made are counted together. (A session
    // made meanwhile is bound before its place is given back: counted
    // once at least, twice at most, never not at all.)
    sessions.prune(&cred.name).await;
    let making = {
        let mut making = sessions.making.lock().unwrap_or_else(|p| p.into_inner());
        let held = sessions.bound_to(&cred.name);
        let pending = making.entry(cred.name.clone()).or_default();
        if held + *pending >= cap {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({"error": format!(
                    "this credential holds {held} MCP sessions, the most `limits.max_mcp_sessions` ({cap}) allows; end one you no longer use (`DELETE /mcp` with its `Mcp-Session-Id`), or wait for one to idle out (5 minutes after its last request)"
                )})),
            )
                .into_response();
        }
        *pending += 1;
        Making {
            of: sessions.making.clone(),
            cred: cred.name.clone(),
        }
    };
    // Run to its end even if the client goes away: a session rmcp makes
    // is then bound (and counted) all the same, never left unowned.
    let name = cred.name.clone();
    let made = tokio::spawn(async move {
        let response = next.run(req).await;
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            sessions
                .owners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.to_string(), name);
        }
        drop(making);
        response
    });
    match made.await {
        Ok(response) => response,
        Err(e) => refused(ErrorKind::Failed, format!("the MCP request failed: {e}")),
    }
}

/// The header a host binds an MCP connection's thread with (default
/// `mcp`: one sandbox per credential), and its agent dir's.
pub const MCP_THREAD_HEADER: &str = "cordon-thread";

pub const MCP_AGENT_DIR_HEADER: &str = "cordon-agent-dir";

/// MCP over HTTP: each request's sandbox is the one its own credential and
/// `cordon-thread`/`cordon-agent-dir` headers name; nothing a tool call
/// carries reaches the key.
pub(crate) struct HttpMcp {
    pub(crate) served: Arc<Served>,
}

impl HttpMcp {
    pub(crate) fn bound(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<(Credential, Address), String> {
        let parts = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .ok_or("this request came without its HTTP headers; it is not served")?;
        let header = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let cred = auth::authenticate(&self.served.config.credentials, header)
            .cloned()
            .ok_or("this request carries no credential this server holds")?;
        let named = |h: &str, default: &str| -> Result<String, String> {
            match parts.headers.get(h) {
                None => Ok(default.to_string()),
                Some(v) => v
                    .to_str()
                    .map(str::to_string)
                    .map_err(|_| format!("the `{h}` header is not text")),
            }
        };
        Ok((
            cred,
            Address {
                thread: named(MCP_THREAD_HEADER, "mcp")?,
                agent_dir: named(MCP_AGENT_DIR_HEADER, "default")?,
            },
        ))
    }
}

impl mcp::McpHost for HttpMcp {
    fn spec(&self) -> &SandboxSpec {
        &self.served.mcp_spec
    }

    fn sandbox(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<Arc<dyn Sandbox>, String> {
        let (cred, at) = self.bound(ctx)?;
        // Held already (made by an earlier call): no acquire per tool call.
        if let Ok(c) = caller(&cred, &at).resolve() {
            let held = self
                .served
                .live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&c.key)
                .cloned();
            if let Some(h) = held {
                // As `live_sandbox`: a kept sandbox whose record is gone
                // was disposed of (by a replica, its idle timeout).
                let gone = self
                    .served
                    .state
                    .as_ref()
                    .is_some_and(|st| !st.record_path(h.id()).exists());
                if !gone {
                    return Ok(h);
                }
                self.served.forget(&cred, &at);
            }
        }
        self.served
            .get_or_create(&cred, &at, &self.served.mcp_spec)
            .map(|m| m.sandbox)
            .map_err(|r| r.message)
    }

    fn lands(&self) -> bool {
        true
    }

    fn snapshots(&self) -> bool {
        self.served.snapshots.is_some()
    }

    fn snapshot(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        name: Option<&str>,
    ) -> Result<serde_json::Value, String> {
        let (cred, at) = self.bound(ctx)?;
        let sandbox = mcp::McpHost::sandbox(self, ctx)?;
        let (st, _) = self
            .served
            .snapshots
            .as_ref()
            .ok_or("this server keeps no snapshots")?;
        let backend = self
            .served
            .router
            .selected(&sandbox.provenance().spec)
            .map(|(b, _)| b.to_string())
            .unwrap_or_default();
        let (snap, _) = st.take(
            &*sandbox,
            &backend,
            &cred.scope,
            &at.thread,
            name,
            cordon_host::snapshots::Capture::Files,
        )?;
        Ok(
            serde_json::json!({"snapshot": snap.id, "name": snap.name, "files": snap.files, "bytes": snap.bytes}),
        )
    }

    /// The bound sandbox made again from a snapshot of its own thread:
    /// only at a backend that restores one (the one this binding's spec is
    /// served by), never from another thread's snapshot.
    fn restore(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        snapshot: &str,
    ) -> Result<serde_json::Value, String> {
        let (cred, at) = self.bound(ctx)?;
        let (st, digest) = self
            .served
            .snapshots
            .as_ref()
            .ok_or("this server keeps no snapshots")?;
        let snap = st.find(snapshot, &cred.scope)?;
        if snap.thread != at.thread {
            return Err(format!(
                "no snapshot `{snapshot}` of this conversation; `snapshot` makes one"
            ));
        }
        let spec = &self.served.mcp_spec;
        let plain = self
            .served
            .router
            .selected(spec)
            .map(|(b, _)| b.to_string());
        let restoring = self
            .served
            .router
            .selected(&spec.clone().requiring(cordon_sandbox::Capability::Snapshot))
            .map(|(b, _)| b.to_string());
        if plain.is_err() || plain.ok() != restoring.ok() {
            return Err(
                "this server's sandboxes run at a backend that cannot restore a snapshot".into(),
            );
        }
        cordon_host::snapshots::SnapshotStore::check_restore(&snap, spec, &cred.identity, digest)?;
        self.served.forget(&cred, &at);
        self.served
            .router
            .dispose(&caller(&cred, &at))
            .map_err(|e| e.to_string())?;
        self.served
            .get_or_create_from(&cred, &at, spec, st.origin(&snap))
            .map_err(|r| r.message)?;
        Ok(serde_json::json!({"restored": snap.id}))
    }

    fn land(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<String>, String> {
        let (cred, _) = self.bound(ctx)?;
        let landed = self
            .served
            .land_outputs(&cred, sandbox)
            .map_err(|r| r.message)?;
        Ok(landed.into_iter().map(|(display, _)| display).collect())
    }

    fn exec_failed(
        &self,
        ctx: &rmcp::service::RequestContext<rmcp::service::RoleServer>,
        error: &cordon_sandbox::SandboxError,
    ) {
        if let Ok((cred, at)) = self.bound(ctx) {
            self.served.exec_refused(&cred.scope, error);
            // A sandbox gone under this server (disposed at a replica, its
            // keeper idled out) is looked up afresh by the next call; one
            // that is still there is never forgotten (it would run
            // uncounted by the cap).
            if error.kind() == cordon_sandbox::ErrorKind::Unavailable {
                self.served.forget(&cred, &at);
            }
        }
    }
}
