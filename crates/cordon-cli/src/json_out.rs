//! `--format json`: what the CLI prints for a program instead of a person.
//!
//! One JSON document on stdout for a command that returns once (`sandbox
//! up`, `ls`, `collect`, `down`, `gc`); NDJSON events, one per line, for a
//! command that streams a workload's output (`run`, `sandbox exec`): a
//! `sandbox` event, `stdout`/`stderr` events as the bytes arrive, and one
//! `exit` event last. A failure of cordon's own is one `error` line or
//! document (`"ok": false`) with the exit code and the message, which is
//! also printed on stderr. docs/cli-json.md lists every field.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Value};

static ON: AtomicBool = AtomicBool::new(false);

/// From here on this process prints JSON on stdout.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether this process prints JSON.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Prints `v` as one line of stdout and flushes it.
pub fn emit(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}").and_then(|()| out.flush());
}

/// A failure of cordon's own, as a program reads it.
pub fn error(code: u8, message: &str) {
    emit(&json!({"event": "error", "ok": false, "exit_code": code, "error": message}));
}
