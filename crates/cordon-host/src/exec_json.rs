//! An exec's events as JSON, one shape for every surface that reports
//! them (`cordon run --format json`, `cordon sandbox exec`, `cordon serve`):
//! output chunks, and how the command ended.

use base64::Engine as _;
use serde_json::{json, Value};

use cordon_sandbox::{ExitStatus, Stream};

/// A chunk of output: `{"event": "stdout"|"stderr", "data": TEXT}`, or
/// `"data_base64"` for a chunk that is not UTF-8.
pub fn output_event(stream: Stream, bytes: &[u8]) -> Value {
    let name = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({"event": name, "data": text}),
        Err(_) => json!({
            "event": name,
            "data_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
        }),
    }
}

/// How a command ended: `{"code": N}`, `{"signal": N}` or `{"killed":
/// BOUND}`, and the bound that killed it if one did.
pub fn status(status: ExitStatus) -> (Value, Option<&'static str>) {
    match status {
        ExitStatus::Code(c) => (json!({"code": c}), None),
        ExitStatus::Signal(n) => (json!({"signal": n}), None),
        ExitStatus::TimedOut => (
            json!({"killed": "max_wall_seconds"}),
            Some("max_wall_seconds"),
        ),
        ExitStatus::Bound { bound } => (json!({"killed": bound}), Some(bound)),
    }
}
