//! The answers with an error that every handler shares: a [`Refusal`]
//! (a status from the error's kind and a message that says what to do),
//! and the fixed ones for a missing credential, an unreadable body and a
//! sandbox the caller has not made.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::ErrorKind;
use serde_json::json;

/// A request the server answers with an error: its status and a message
/// that says what to do.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn of(kind: ErrorKind, message: impl std::fmt::Display) -> Refusal {
        Refusal {
            status: status_of(kind),
            message: message.to_string(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"error": self.message}))).into_response()
    }
}

/// An error as the API answers it: a status from its kind and a message
/// that says what to do.
pub(crate) fn refused(kind: ErrorKind, message: impl std::fmt::Display) -> Response {
    Refusal::of(kind, message).into_response()
}

fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Refused => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Failed => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `401` with a body that says what to send; the same for a missing and a
/// wrong token.
pub(crate) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("www-authenticate", "Bearer")],
        Json(json!({"error": "send `Authorization: Bearer TOKEN` with a token this server's configuration holds the SHA-256 of"})),
    )
        .into_response()
}

/// A body that could not be read: too large (`413`, with the limit), or
/// not JSON, or with a field the endpoint does not take (`400`).
pub(crate) fn bad_body(e: &axum::extract::rejection::JsonRejection) -> Response {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            Json(json!({"error": "the request body is larger than this server's `limits.max_request_bytes`; send less (a file in parts, or fewer bytes)"})),
        )
            .into_response();
    }
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": e.body_text()})),
    )
        .into_response()
}

/// The one answer for a sandbox this credential has not made: it does not
/// say whether another credential's exists.
pub(crate) fn no_such_sandbox() -> Response {
    refused(
        ErrorKind::NotFound,
        "no sandbox for this thread and agent dir; create it with POST /v1/sandboxes",
    )
}
