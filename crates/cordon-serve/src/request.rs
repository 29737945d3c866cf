//! What a handler reads of a request first: the credential it carries,
//! its JSON body, and the address of the sandbox it names.

use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use cordon_sandbox::CallerContext;
use serde::Deserialize;

use crate::auth;
use crate::config::Credential;
use crate::refusal::{bad_body, unauthorized};
use crate::served::Served;

/// The part of a sandbox's key a request names: its thread and agent dir.
/// The scope and the identity are the credential's.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct Address {
    pub(crate) thread: String,
    #[serde(default = "default_agent_dir")]
    pub(crate) agent_dir: String,
}

fn default_agent_dir() -> String {
    "default".into()
}

/// The caller a request acts as: `cred`'s scope and identity, `at`'s
/// thread and agent dir.
pub(crate) fn caller(cred: &Credential, at: &Address) -> CallerContext {
    let (scope, thread, agent, id) = (
        cred.scope.clone(),
        at.thread.clone(),
        at.agent_dir.clone(),
        cred.identity.clone(),
    );
    CallerContext::new(
        move || scope.clone(),
        move || thread.clone(),
        move || agent.clone(),
        move || id.clone(),
    )
}

/// A JSON body as axum hands it to a handler.
pub(crate) type Body<T> = Result<Json<T>, axum::extract::rejection::JsonRejection>;

/// The request's credential (within its budget) and its body, or the
/// refusal to answer: every `/v1` handler's first step.
pub(crate) fn authed<T>(
    s: &Served,
    headers: &HeaderMap,
    body: Body<T>,
) -> Result<(Credential, T), Box<Response>> {
    let cred = who(s, headers)?;
    match body {
        Ok(Json(b)) => Ok((cred, b)),
        Err(e) => Err(Box::new(bad_body(&e))),
    }
}

/// The request's credential: else the `401` to answer. (Its budget was
/// taken before the body was read, by `gate::credential_first`.)
pub(crate) fn who(s: &Served, headers: &HeaderMap) -> Result<Credential, Box<Response>> {
    let header = headers.get("authorization").and_then(|v| v.to_str().ok());
    auth::authenticate(&s.config.credentials, header)
        .cloned()
        .ok_or_else(|| Box::new(unauthorized()))
}
