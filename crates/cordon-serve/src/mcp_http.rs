//! `/mcp`: the MCP server over streamable HTTP, each request bound to
//! the credential it carries.

use super::*;

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
    let service = StreamableHttpService::new(
        move || Ok(mcp::CordonMcp::new(host.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(state, mcp_credential))
}

/// `/mcp` answers only a request with a credential (within its budget).
pub(crate) async fn mcp_credential(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match who(&s, req.headers()) {
        Ok(_) => next.run(req).await,
        Err(r) => *r,
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
                return Ok(h);
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
            // keeper idled out) is looked up afresh by the next call.
            if error.denied_rules().is_none() {
                self.served.forget(&cred, &at);
            }
        }
    }
}
