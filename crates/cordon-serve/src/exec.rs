//! Exec: buffered and streamed.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_sandbox::{ErrorKind, ExecRequest, Sandbox};
use serde::Deserialize;
use serde_json::json;

use crate::config::Credential;
use crate::mcp;
use crate::refusal::refused;
use crate::request::{authed, Address, Body};
use crate::sandboxes::live_sandbox;
use crate::served::Served;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecBody {
    #[serde(flatten)]
    pub(crate) at: Address,
    pub(crate) argv: Vec<String>,
    #[serde(default)]
    pub(crate) stdin: String,
    #[serde(default)]
    pub(crate) timeout_seconds: Option<u64>,
    /// Answer NDJSON events as the command writes (`stdout`/`stderr`
    /// chunks, then `exit`) instead of one document at its end. A client
    /// that hangs up kills the command.
    #[serde(default)]
    pub(crate) stream: bool,
}

/// The largest output kept of each stream of a buffered exec.
pub(crate) const MAX_OUTPUT_BYTES: u64 = 1 << 20;

pub(crate) async fn exec(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<ExecBody>,
) -> Response {
    let (cred, body) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    // Bounded as MCP's tools are: a timeout is added to clocks downstream
    // (a keeper client's read deadline), where a huge one overflowed.
    let timeout = match body.timeout_seconds {
        None => mcp::MAX_TIMEOUT_SECONDS,
        Some(t @ 1..=mcp::MAX_TIMEOUT_SECONDS) => t,
        Some(t) => {
            return refused(
                ErrorKind::Invalid,
                format!(
                    "`timeout_seconds` is {t}; it must be a whole number from 1 to {}",
                    mcp::MAX_TIMEOUT_SECONDS
                ),
            )
        }
    };
    let sandbox = match live_sandbox(&s, &cred, &body.at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    // An exec resumes a paused sandbox: its kept files are stale now.
    if s.paused_keys
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&cordon_sandbox::key::key_id(
            &cred.scope,
            &body.at.thread,
            &body.at.agent_dir,
        ))
    {
        let (s2, c2, a2) = (s.clone(), cred.clone(), body.at.clone());
        let _ = tokio::task::spawn_blocking(move || s2.drop_paused_files(&c2, &a2, false)).await;
    }
    let req = ExecRequest {
        argv: body.argv,
        env: Default::default(),
        stdin: body.stdin.into_bytes(),
        timeout: Duration::from_secs(timeout),
        max_output_bytes: MAX_OUTPUT_BYTES,
    };
    if body.stream {
        return streamed(&s, &cred, sandbox, req).await;
    }
    let started = std::time::Instant::now();
    let ran = tokio::task::spawn_blocking(move || sandbox.exec(&req)).await;
    s.exec_took(&cred.scope, started.elapsed().as_secs_f64());
    let out = match ran {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            s.exec_refused(&cred.scope, &e);
            // A kept sandbox whose keeper went (idle timeout, disposed by
            // a replica) is looked up afresh next time. Only then: a
            // sandbox forgotten while its backend still holds it would run
            // uncounted by the cap, and be missed at shutdown.
            if e.kind() == ErrorKind::Unavailable {
                s.forget(&cred, &body.at);
            }
            return refused(e.kind(), &e);
        }
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let (status, killed_by) = cordon_host::exec_json::status(out.status);
    Json(json!({
        "status": status,
        "killed_by": killed_by,
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
        "stdout_truncated": out.stdout_truncated,
        "stderr_truncated": out.stderr_truncated,
    }))
    .into_response()
}

/// A streamed exec: NDJSON lines as the command writes, `exit` last. The
/// command is driven on a blocking thread; when the client goes away (the
/// body is dropped) the exec is killed at once, not at its next output.
pub(crate) async fn streamed(
    s: &Served,
    cred: &Credential,
    sandbox: Arc<dyn Sandbox>,
    req: ExecRequest,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(cordon_sandbox::exec::EVENTS_IN_FLIGHT);
    // Starting an exec blocks (a keeper's round trip, an init's fork): not
    // on the async runtime's threads.
    let started = {
        let req = req.clone();
        tokio::task::spawn_blocking(move || {
            sandbox.start_exec(&req, cordon_sandbox::Attach::streamed_stdin())
        })
        .await
    };
    let mut handle = match started {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            s.exec_refused(&cred.scope, &e);
            return refused(e.kind(), &e);
        }
        Err(e) => return refused(ErrorKind::Failed, e),
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Dropped with the response body: at its end, or when the client hangs
    // up, whichever comes first; in the second case the exec is killed at
    // once. (It holds no sender: the body ends when the exec's thread does.)
    let guard = KillUnlessDone {
        killer: handle.killer(),
        done: done.clone(),
    };
    let stdin = req.stdin;
    tokio::task::spawn_blocking(move || {
        if let Some(mut input) = handle.take_stdin() {
            use std::io::Write as _;
            let _ = input.write_all(&stdin);
        }
        while let Some(ev) = handle.next_event() {
            let line = match ev {
                cordon_sandbox::ExecEvent::Output(stream, bytes) => {
                    format!("{}\n", cordon_host::exec_json::output_event(stream, &bytes))
                }
                cordon_sandbox::ExecEvent::Exited(Ok(end)) => {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    let (status, killed_by) = cordon_host::exec_json::status(end.status);
                    format!(
                        "{}\n",
                        json!({
                            "event": "exit",
                            "status": status,
                            "killed_by": killed_by,
                            "stdout_truncated": end.stdout_truncated,
                            "stderr_truncated": end.stderr_truncated,
                        })
                    )
                }
                cordon_sandbox::ExecEvent::Exited(Err(e)) => {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    format!("{}\n", json!({"event": "error", "error": e.to_string()}))
                }
            };
            if tx.blocking_send(line).is_err() {
                break; // the client went away; dropping the handle kills it
            }
        }
    });
    let body = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(line), (rx, guard)))
    });
    (
        [("content-type", "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// Kills an exec when dropped before it ended.
pub(crate) struct KillUnlessDone {
    pub(crate) killer: cordon_sandbox::Killer,
    pub(crate) done: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for KillUnlessDone {
    fn drop(&mut self) {
        if !self.done.load(std::sync::atomic::Ordering::SeqCst) {
            self.killer.kill();
        }
    }
}
