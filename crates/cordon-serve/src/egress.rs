//! Egress: a live sandbox's allowlist replaced (as `cordon sandbox egress`
//! does on the command line).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::{EgressChange, EgressEntry, ErrorKind, SandboxError};
use serde::Deserialize;
use serde_json::json;

use crate::refusal::refused;
use crate::request::{Address, Body};
use crate::served::Served;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EgressBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    /// The new allowlist, entries as a spec's `egress_allow`; empty: allow
    /// nothing (the route stays, every request is refused).
    pub(crate) egress_allow: Vec<String>,
}

/// Replaces the egress allowlist of the caller's sandbox at the body's
/// thread and agent dir (its scope and identity the credential's: a caller
/// reaches only the sandboxes it made). The sandbox's guard checks the
/// list against the policy for the sandbox's identity. A list that does
/// not load, or that the policy denies, closes the sandbox's egress (never
/// the old list left in force) and is refused, saying so.
pub(crate) async fn change_egress(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<EgressBody>,
) -> Response {
    let (cred, body, sandbox) = match crate::sandboxes::authed_sandbox(&s, &headers, body).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let by = format!(
        "`POST /v1/sandboxes/egress` (credential `{}`, scope `{}`)",
        cred.name, cred.scope
    );
    let parsed = EgressEntry::parse_list(&body.egress_allow);
    let changed = tokio::task::spawn_blocking(move || match parsed {
        Ok(list) => {
            let shown: Vec<String> = list.iter().map(ToString::to_string).collect();
            match sandbox.change_egress(EgressChange::Replace(list), &by) {
                Ok(generation) => {
                    Json(json!({"generation": generation, "egress_allow": shown})).into_response()
                }
                Err(e) => refused(e.kind(), e),
            }
        }
        Err(why) => match sandbox.change_egress(EgressChange::Close(why.clone()), &by) {
            // No route out to close: the sandbox's own answer says so.
            Err(SandboxError::Invalid { reason }) => {
                refused(ErrorKind::Invalid, format!("{why}; {reason}"))
            }
            _ => refused(
                ErrorKind::Invalid,
                format!(
                    "{why}; this sandbox's egress is now closed (every request refused) until a change that loads: POST /v1/sandboxes/egress again with entries the policy allows"
                ),
            ),
        },
    })
    .await;
    changed.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

impl crate::sandboxes::Addressed for EgressBody {
    fn at(&self) -> &Address {
        &self.at
    }
}
