//! The MCP server's file tools over the files API (issue 32):
//! `write_file`, `remove_file`'s operation, `list_files` and `read_file`
//! (ranged). Each goes through the sandbox's guard, which decides every
//! path with the policy's storage surface.

use std::sync::Arc;

use cordon_sandbox::{FileKind, SandboxSpec};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{json, Value};

use crate::mcp::{
    args_of, blocking, in_work_dir, sandbox_of, string_arg, text_result, McpHost, MAX_TOOL_DEPTH,
    MAX_TOOL_ENTRIES, MAX_TOOL_OUTPUT_BYTES,
};

pub(crate) fn bool_arg(args: &JsonObject, name: &str) -> Result<bool, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{name}` must be true or false")),
    }
}

/// One files-API operation on the bound sandbox (the guard decides each
/// path with the policy's storage surface), its error in the model's words.
pub(crate) async fn files_op<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    op: cordon_sandbox::FileOp,
) -> Result<cordon_sandbox::FileAnswer, String> {
    let sandbox = sandbox_of(host, ctx).await?;
    blocking(move || sandbox.files(&op))
        .await?
        .map_err(|e| e.to_string())
}

/// The `write_file` tool: created or replaced (a link there replaced, never
/// followed), or appended to.
pub(crate) async fn write_file<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    params: &CallToolRequestParams,
    spec: &SandboxSpec,
) -> Result<CallToolResult, String> {
    let args = args_of(
        params,
        &["path", "content", "executable", "append"],
        &["path", "content"],
    )?;
    let path = in_work_dir(spec, &string_arg(&args, "path")?.unwrap_or_default());
    let content = string_arg(&args, "content")?.unwrap_or_default();
    let mode = if bool_arg(&args, "executable")? {
        0o755
    } else {
        0o644
    };
    let how = if bool_arg(&args, "append")? {
        cordon_sandbox::WriteHow::Append
    } else {
        cordon_sandbox::WriteHow::Truncate
    };
    let n = content.len();
    let op = cordon_sandbox::FileOp::Write {
        path: path.clone(),
        data: content.into_bytes(),
        mode,
        how,
    };
    files_op(host, ctx, op).await?;
    Ok(text_result(json!({"wrote": path, "bytes": n})))
}

/// The `list_files` tool: a directory of the sandbox (to a depth), links
/// listed never followed, entries the policy keeps from reading left out.
pub(crate) async fn list_files<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    params: &CallToolRequestParams,
    spec: &SandboxSpec,
) -> Result<CallToolResult, String> {
    let args = args_of(params, &["path", "depth"], &[])?;
    let path = in_work_dir(spec, &string_arg(&args, "path")?.unwrap_or_default());
    let depth = match args.get("depth") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= u64::from(MAX_TOOL_DEPTH) => n as u32,
            _ => {
                return Err(format!(
                    "`depth` must be a whole number from 0 to {MAX_TOOL_DEPTH}"
                ))
            }
        },
    };
    let op = cordon_sandbox::FileOp::List {
        path: path.clone(),
        depth,
    };
    let cordon_sandbox::FileAnswer::Listing {
        entries,
        mut truncated,
    } = files_op(host, ctx, op).await?
    else {
        return Err("the sandbox answered a listing oddly".into());
    };
    if entries.len() > MAX_TOOL_ENTRIES {
        truncated = true;
    }
    let listed: Vec<Value> = entries
        .iter()
        .take(MAX_TOOL_ENTRIES)
        .map(|e| {
            let kind = match e.kind {
                FileKind::File => "file",
                FileKind::Dir => "dir",
                FileKind::Symlink => "link",
                FileKind::Other => "other",
            };
            json!({"path": e.path, "kind": kind, "size": e.size, "mode": format!("{:o}", e.mode)})
        })
        .collect();
    let mut v = json!({"path": path, "entries": listed});
    if truncated {
        v["truncated"] = true.into();
    }
    Ok(text_result(v))
}

/// The `read_file` tool over the files API: at most
/// [`MAX_TOOL_OUTPUT_BYTES`] from `offset`, as text or base64.
pub(crate) async fn read_range<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    params: &CallToolRequestParams,
    spec: &SandboxSpec,
) -> Result<CallToolResult, String> {
    let args = args_of(params, &["path", "offset"], &["path"])?;
    let path = in_work_dir(spec, &string_arg(&args, "path")?.unwrap_or_default());
    let offset = match args.get("offset") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .ok_or("`offset` must be a whole number of bytes")?,
    };
    let op = cordon_sandbox::FileOp::Read {
        path: path.clone(),
        offset,
        len: MAX_TOOL_OUTPUT_BYTES,
    };
    let cordon_sandbox::FileAnswer::Read { data, size } = files_op(host, ctx, op).await? else {
        return Err("the sandbox answered a read oddly".into());
    };
    let end = offset.saturating_add(data.len() as u64);
    let mut v = match String::from_utf8(data) {
        Ok(text) => json!({"path": path, "text": text}),
        Err(e) => {
            use base64::Engine as _;
            json!({"path": path, "base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes())})
        }
    };
    v["size"] = size.into();
    if end < size {
        v["more_from_offset"] = end.into();
    }
    Ok(text_result(v))
}
