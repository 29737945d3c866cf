//! cordon's Model Context Protocol server: the tools a model calls to use
//! one sandbox, over stdio (`cordon mcp`) or streamable HTTP (`/mcp` on
//! `cordon serve`), on the official Rust SDK (`rmcp`).
//!
//! A model never names a sandbox. Every tool works on the one sandbox the
//! *host* bound the connection to: `cordon mcp`'s flags, or on HTTP the
//! bearer credential (scope, identity) and the `cordon-thread` /
//! `cordon-agent-dir` headers of each request. No tool argument carries a
//! key, scope, thread or identity (the schemas refuse unknown fields), and
//! results carry `display` lines, never a host's artifact handle.
//!
//! A tool is offered only where the sandbox's spec requires the capability
//! behind it, which the router guarantees the chosen backend offers:
//! `exec` (exec), `run_code` (run_code), `write_file` and `remove_file`
//! (files_in), `list_files` and `read_file` (files_list: the files API,
//! each path decided by the policy's storage surface; without files_list,
//! `read_file` is offered for files_out with outputs named at call time,
//! through the confined files-out path), `collect_outputs` (files_out with
//! declared outputs, and a place to land them).

use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::{
    Capability, DeclaredOutput, ExecRequest, ExitStatus, Sandbox, SandboxError, SandboxSpec,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer};
use serde_json::{json, Value};

/// The most bytes of each of stdout and stderr a tool result keeps (a
/// model's context is the scarce thing; the result says when it was cut).
pub const MAX_TOOL_OUTPUT_BYTES: u64 = 64 << 10;
/// The most entries a `list_files` result holds.
pub const MAX_TOOL_ENTRIES: usize = 1000;
/// The deepest `list_files` goes.
pub const MAX_TOOL_DEPTH: u32 = 8;
/// The longest a tool's command may run unless the call asks for less.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The most a call may ask for.
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;

/// Languages `run_code` takes, and the argv that reads the source on stdin.
pub const LANGUAGES: [(&str, &[&str]); 3] = [
    ("python", &["python3", "-"]),
    ("bash", &["bash", "-s"]),
    ("sh", &["sh", "-s"]),
];

/// Where an MCP connection's sandbox comes from: the host's binding.
pub trait McpHost: Send + Sync + 'static {
    /// The spec every sandbox of this binding is made with (the tools
    /// offered follow from it).
    fn spec(&self) -> &SandboxSpec;
    /// The sandbox the request is bound to (made on first use), or why
    /// not, in words for the model.
    fn sandbox(&self, request: &RequestContext<RoleServer>) -> Result<Arc<dyn Sandbox>, String>;
    /// Lands collected outputs and returns their display lines; `None`
    /// when this binding has no place to land them (no tool offered).
    fn lands(&self) -> bool;
    fn land(
        &self,
        request: &RequestContext<RoleServer>,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<String>, String>;
    /// Whether this binding keeps snapshots (the `snapshot` and `restore`
    /// tools are offered only then).
    fn snapshots(&self) -> bool {
        false
    }
    /// Keeps the bound sandbox's files as a snapshot of its own thread.
    fn snapshot(
        &self,
        request: &RequestContext<RoleServer>,
        name: Option<&str>,
    ) -> Result<Value, String> {
        let _ = (request, name);
        Err("this server keeps no snapshots".into())
    }
    /// Makes the bound sandbox again from a snapshot of its own thread
    /// (never another's): what it has now is gone.
    fn restore(
        &self,
        request: &RequestContext<RoleServer>,
        snapshot: &str,
    ) -> Result<Value, String> {
        let _ = (request, snapshot);
        Err("this server keeps no snapshots".into())
    }
    /// Told of an exec that did not start (for counting policy denials).
    fn exec_failed(&self, request: &RequestContext<RoleServer>, error: &SandboxError) {
        let _ = (request, error);
    }
}

/// The MCP server over one [`McpHost`].
pub struct CordonMcp<H: McpHost> {
    host: Arc<H>,
}

impl<H: McpHost> Clone for CordonMcp<H> {
    fn clone(&self) -> Self {
        CordonMcp {
            host: self.host.clone(),
        }
    }
}

impl<H: McpHost> CordonMcp<H> {
    pub fn new(host: Arc<H>) -> CordonMcp<H> {
        CordonMcp { host }
    }
}

/// The spec `cordon mcp` and `/mcp` use when the host names none: an
/// offline sandbox on the host image whose work dir a model may list,
/// write, read back (1 MiB a read) and remove from, through the files API
/// every backend serves.
pub fn default_spec() -> Result<SandboxSpec, cordon_sandbox::SpecError> {
    SandboxSpec::new("mcp", "host")?
        .with_requires([
            Capability::Exec,
            Capability::RunCode,
            Capability::FilesIn,
            Capability::FilesList,
        ])
        .with_outputs_named_at_call_time(cordon_sandbox::TransferLimits::DEFAULT)
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => unreachable!("a tool schema is an object"),
    }
}

fn timeout_property() -> Value {
    json!({
        "type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS,
        "description": "Seconds before the command is killed (default 120). The sandbox's own wall-clock bound may be shorter."
    })
}

/// Every tool cordon has, with what it needs of the spec.
fn all_tools(spec: &SandboxSpec, lands: bool) -> Vec<Tool> {
    let requires = spec.requires();
    let work_dir = spec.work_dir();
    let mut tools = Vec::new();
    if requires.contains(Capability::Exec) {
        tools.push(Tool::new(
            "exec",
            format!("Run a program in your sandbox (a Linux machine with no network unless its policy allows it) and get its exit status, stdout and stderr. The working directory is {work_dir}, which persists between calls. argv is run directly, not through a shell: use [\"sh\", \"-c\", \"...\"] for pipes and globs. Output past 64 KiB per stream is cut (the result says so)."),
            schema(json!({
                "type": "object",
                "properties": {
                    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                             "description": "The program and its arguments, e.g. [\"ls\", \"-l\"]."},
                    "stdin": {"type": "string", "description": "Text given to the program on standard input."},
                    "timeout_seconds": timeout_property(),
                },
                "required": ["argv"],
                "additionalProperties": false,
            })),
        ));
    }
    if requires.contains(Capability::RunCode) {
        let names: Vec<&str> = LANGUAGES.iter().map(|(n, _)| *n).collect();
        tools.push(Tool::new(
            "run_code",
            format!("Run a snippet of source code in your sandbox and get its exit status, stdout and stderr. Files it writes under {work_dir} persist between calls. python runs python3; bash and sh run a shell script."),
            schema(json!({
                "type": "object",
                "properties": {
                    "language": {"type": "string", "enum": names},
                    "source": {"type": "string", "description": "The program's source text."},
                    "timeout_seconds": timeout_property(),
                },
                "required": ["language", "source"],
                "additionalProperties": false,
            })),
        ));
    }
    if requires.contains(Capability::FilesIn) {
        tools.push(Tool::new(
            "write_file",
            format!("Create or replace a text file in your sandbox (parent directories are made), or add to its end. A relative path is under {work_dir}."),
            schema(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where to write, e.g. \"data/input.csv\"."},
                    "content": {"type": "string", "description": "The file's text (UTF-8)."},
                    "executable": {"type": "boolean", "description": "Make it executable (mode 0755 instead of 0644)."},
                    "append": {"type": "boolean", "description": "Add to the end of the existing file instead of replacing it."},
                },
                "required": ["path", "content"],
                "additionalProperties": false,
            })),
        ));
    }
    if requires.contains(Capability::FilesList) {
        tools.push(Tool::new(
            "list_files",
            format!("List a directory of your sandbox: each entry's path (relative to {work_dir}), kind (file, dir, link), size and mode. Links are listed, never followed. At most {MAX_TOOL_ENTRIES} entries (the result says when more were left out)."),
            schema(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The directory; a relative path is under the working directory. Default: the working directory."},
                    "depth": {"type": "integer", "minimum": 0, "maximum": MAX_TOOL_DEPTH, "description": "How many levels below the directory to list too (default 0: the directory's own entries)."},
                },
                "additionalProperties": false,
            })),
        ));
        tools.push(Tool::new(
            "read_file",
            format!("Read a regular file of your sandbox (links are not followed), up to {} KiB from `offset`. Text comes back as text; other bytes as base64. The result gives the file's size, so a larger file is read in parts.", MAX_TOOL_OUTPUT_BYTES >> 10),
            schema(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The file; a relative path is under the working directory."},
                    "offset": {"type": "integer", "minimum": 0, "description": "The byte to start at (default 0)."},
                },
                "required": ["path"],
                "additionalProperties": false,
            })),
        ));
    }
    if requires.contains(Capability::FilesIn) {
        tools.push(Tool::new(
            "remove_file",
            format!("Remove a file or a link (never what it points to) from your sandbox; a directory only with `recursive`. A relative path is under {work_dir}."),
            schema(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "What to remove."},
                    "recursive": {"type": "boolean", "description": "Remove a directory and everything in it."},
                },
                "required": ["path"],
                "additionalProperties": false,
            })),
        ));
    }
    if let (Some(limits), true, false) = (
        spec.files_out(),
        spec.outputs_named_at_call_time(),
        requires.contains(Capability::FilesList),
    ) {
        tools.push(Tool::new(
            "read_file",
            format!("Read a regular file under {work_dir} (links are not followed), up to {} bytes. Text comes back as text; other bytes as base64.", limits.max_bytes_per_file),
            schema(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The file, relative to the working directory (or an absolute path beneath it)."},
                },
                "required": ["path"],
                "additionalProperties": false,
            })),
        ));
    }
    if spec.files_out().is_some() && !spec.declared_outputs().is_empty() && lands {
        let names: Vec<&str> = spec.declared_outputs().iter().map(|o| o.path()).collect();
        tools.push(Tool::new(
            "collect_outputs",
            format!("Hand the task's declared outputs ({}) to the user once you have produced them; returns one line per file delivered.", names.join(", ")),
            schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        ));
    }
    tools
}

/// The tools a binding offers: [`all_tools`] of its spec, and `snapshot`
/// and `restore` where it keeps snapshots.
fn offered<H: McpHost>(host: &H) -> Vec<Tool> {
    let mut tools = all_tools(host.spec(), host.lands());
    if host.snapshots() {
        let work_dir = host.spec().work_dir();
        tools.push(Tool::new(
            "snapshot",
            format!("Keep the files under {work_dir} as they are now, to come back to later with `restore` (a checkpoint before a risky change). Returns the snapshot's id."),
            schema(json!({
                "type": "object",
                "properties": {"name": {"type": "string", "description": "A name to restore it by (1-64 of a-z A-Z 0-9 - _ .)."}},
                "additionalProperties": false,
            })),
        ));
        tools.push(Tool::new(
            "restore",
            format!("Put the files under {work_dir} back as a snapshot of yours kept them (by its id or name); everything since, files and running programs, is gone."),
            schema(json!({
                "type": "object",
                "properties": {"snapshot": {"type": "string", "description": "The snapshot's id or name."}},
                "required": ["snapshot"],
                "additionalProperties": false,
            })),
        ));
    }
    tools
}

/// A tool's refusal or failure, as the model reads it.
fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

pub(crate) fn text_result(v: Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(
        serde_json::to_string_pretty(&v).unwrap_or_default(),
    )])
}

/// The arguments, checked against what the tool takes: an unknown field is
/// refused (a model must not think it can pass a key or a thread).
pub(crate) fn args_of(
    params: &CallToolRequestParams,
    allowed: &[&str],
    required: &[&str],
) -> Result<JsonObject, String> {
    let args = params.arguments.clone().unwrap_or_default();
    for k in args.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "`{}` takes no argument `{k}`; it takes {}",
                params.name,
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for r in required {
        if !args.contains_key(*r) {
            return Err(format!("`{}` needs `{r}`", params.name));
        }
    }
    Ok(args)
}

pub(crate) fn string_arg(args: &JsonObject, name: &str) -> Result<Option<String>, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{name}` must be a string")),
    }
}

fn timeout_arg(args: &JsonObject) -> Result<Duration, String> {
    match args.get("timeout_seconds") {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_TIMEOUT_SECONDS).contains(&n) => Ok(Duration::from_secs(n)),
            _ => Err(format!(
                "`timeout_seconds` must be a whole number from 1 to {MAX_TIMEOUT_SECONDS}"
            )),
        },
    }
}

/// A guest path for a model's `path`: relative ones are under the work dir.
pub(crate) fn in_work_dir(spec: &SandboxSpec, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() || path == "." {
        spec.work_dir().to_string()
    } else {
        format!("{}/{}", spec.work_dir(), path.trim_start_matches("./"))
    }
}

/// Runs a command to its end on a blocking thread; if the call is dropped
/// first (the client went away, or cancelled), the command is killed.
async fn run<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    sandbox: Arc<dyn Sandbox>,
    req: ExecRequest,
) -> CallToolResult {
    let started = tokio::task::spawn_blocking(move || {
        sandbox.start_exec(&req, cordon_sandbox::Attach::default())
    })
    .await;
    let handle = match started {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            host.exec_failed(ctx, &e);
            return tool_error(e.to_string());
        }
        Err(e) => return tool_error(format!("the exec did not start: {e}")),
    };
    let killer = handle.killer();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let guard = KillOnDrop {
        killer,
        done: done.clone(),
    };
    let ended = tokio::task::spawn_blocking(move || handle.wait()).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(guard);
    let out = match ended {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return tool_error(e.to_string()),
        Err(e) => return tool_error(format!("the exec failed: {e}")),
    };
    let mut v = json!({
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
    });
    match out.status {
        ExitStatus::Code(c) => v["exit_code"] = c.into(),
        ExitStatus::Signal(n) => v["killed_by_signal"] = n.into(),
        ExitStatus::TimedOut => v["killed"] = "it ran past its time limit".into(),
        ExitStatus::Bound { bound } => {
            v["killed"] = format!("it reached the sandbox's `{bound}` bound").into()
        }
    }
    if out.stdout_truncated {
        v["stdout_truncated"] = true.into();
    }
    if out.stderr_truncated {
        v["stderr_truncated"] = true.into();
    }
    text_result(v)
}

struct KillOnDrop {
    killer: cordon_sandbox::Killer,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.done.load(std::sync::atomic::Ordering::SeqCst) {
            self.killer.kill();
        }
    }
}

impl<H: McpHost> CordonMcp<H> {
    async fn call(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let spec = self.host.spec().clone();
        let offered = offered(&*self.host);
        if !offered.iter().any(|t| t.name == params.name) {
            return Ok(tool_error(format!(
                "no tool `{}` here; the tools are {}",
                params.name,
                offered
                    .iter()
                    .map(|t| format!("`{}`", t.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let host = self.host.clone();
        let result = async move {
            match params.name.as_ref() {
                "exec" => {
                    let args = args_of(&params, &["argv", "stdin", "timeout_seconds"], &["argv"])?;
                    let argv: Vec<String> = match args.get("argv") {
                        Some(Value::Array(a)) if !a.is_empty() => a
                            .iter()
                            .map(|x| x.as_str().map(str::to_string))
                            .collect::<Option<_>>()
                            .ok_or("`argv` must be a list of strings")?,
                        _ => return Err("`argv` must be a non-empty list of strings".into()),
                    };
                    let req = ExecRequest {
                        argv,
                        env: Default::default(),
                        stdin: string_arg(&args, "stdin")?.unwrap_or_default().into_bytes(),
                        timeout: timeout_arg(&args)?,
                        max_output_bytes: MAX_TOOL_OUTPUT_BYTES,
                    };
                    let sandbox = sandbox_of(&host, &ctx).await?;
                    Ok(run(&host, &ctx, sandbox, req).await)
                }
                "run_code" => {
                    let args = args_of(
                        &params,
                        &["language", "source", "timeout_seconds"],
                        &["language", "source"],
                    )?;
                    let language = string_arg(&args, "language")?.unwrap_or_default();
                    let Some((_, argv)) = LANGUAGES.iter().find(|(n, _)| *n == language) else {
                        return Err(format!(
                            "`language` must be one of {}",
                            LANGUAGES.map(|(n, _)| n).join(", ")
                        ));
                    };
                    let req = ExecRequest {
                        argv: argv.iter().map(|s| s.to_string()).collect(),
                        env: Default::default(),
                        stdin: string_arg(&args, "source")?
                            .unwrap_or_default()
                            .into_bytes(),
                        timeout: timeout_arg(&args)?,
                        max_output_bytes: MAX_TOOL_OUTPUT_BYTES,
                    };
                    let sandbox = sandbox_of(&host, &ctx).await?;
                    Ok(run(&host, &ctx, sandbox, req).await)
                }
                "write_file" => crate::mcp_files::write_file(&host, &ctx, &params, &spec).await,
                "remove_file" => {
                    let args = args_of(&params, &["path", "recursive"], &["path"])?;
                    let path = in_work_dir(&spec, &string_arg(&args, "path")?.unwrap_or_default());
                    let recursive = crate::mcp_files::bool_arg(&args, "recursive")?;
                    let op = cordon_sandbox::FileOp::Remove {
                        path: path.clone(),
                        recursive,
                    };
                    match crate::mcp_files::files_op(&host, &ctx, op).await? {
                        cordon_sandbox::FileAnswer::Done(removed) => {
                            Ok(text_result(json!({"path": path, "removed": removed})))
                        }
                        other => Err(format!("an odd answer: {other:?}")),
                    }
                }
                "list_files" => crate::mcp_files::list_files(&host, &ctx, &params, &spec).await,
                "snapshot" => {
                    let args = args_of(&params, &["name"], &[])?;
                    let name = string_arg(&args, "name")?;
                    Ok(text_result(
                        blocking(move || host.snapshot(&ctx, name.as_deref())).await??,
                    ))
                }
                "restore" => {
                    let args = args_of(&params, &["snapshot"], &["snapshot"])?;
                    let snap = string_arg(&args, "snapshot")?.unwrap_or_default();
                    Ok(text_result(
                        blocking(move || host.restore(&ctx, &snap)).await??,
                    ))
                }
                "read_file" if spec.requires().contains(Capability::FilesList) => {
                    crate::mcp_files::read_range(&host, &ctx, &params, &spec).await
                }
                "read_file" => read_file(&host, &ctx, &params, spec).await,
                "collect_outputs" => {
                    args_of(&params, &[], &[])?;
                    let sandbox = sandbox_of(&host, &ctx).await?;
                    let lines = blocking(move || host.land(&ctx, &*sandbox)).await??;
                    Ok(text_result(json!({"delivered": lines})))
                }
                other => Err(format!("no tool `{other}`")),
            }
        }
        .await;
        Ok(result.unwrap_or_else(tool_error))
    }
}

/// The `read_file` tool: one file under the work dir, read as a declared
/// output named at call time (capped, no link followed), as text or base64.
async fn read_file<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
    params: &CallToolRequestParams,
    spec: SandboxSpec,
) -> Result<CallToolResult, String> {
    let args = args_of(params, &["path"], &["path"])?;
    let raw = string_arg(&args, "path")?.unwrap_or_default();
    let prefix = format!("{}/", spec.work_dir());
    let rel = match raw.strip_prefix(&prefix) {
        Some(r) => r.to_string(),
        None if raw.starts_with('/') => {
            return Err(format!(
                "`read_file` reads only under the working directory {}",
                spec.work_dir()
            ))
        }
        None => raw.trim_start_matches("./").to_string(),
    };
    let wanted = DeclaredOutput::new(&rel, "application/octet-stream")
        .map_err(|e| e.to_string())?
        .optional()
        .consumed();
    let sandbox = sandbox_of(host, ctx).await?;
    let got = blocking(move || {
        cordon_collect::Collection::of(&spec)
            .named_at_call_time(&[wanted])
            .collect(&*sandbox, None)
    })
    .await?
    .map_err(|e| e.to_string())?;
    let Some(a) = got.consumed.into_iter().next() else {
        return Err(format!("there is no file `{rel}` in the working directory"));
    };
    Ok(match String::from_utf8(a.bytes) {
        Ok(text) => text_result(json!({"path": rel, "text": text})),
        Err(e) => {
            use base64::Engine as _;
            text_result(json!({
                "path": rel,
                "base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            }))
        }
    })
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the operation failed: {e}"))
}

pub(crate) async fn sandbox_of<H: McpHost>(
    host: &Arc<H>,
    ctx: &RequestContext<RoleServer>,
) -> Result<Arc<dyn Sandbox>, String> {
    let (host, ctx) = (host.clone(), ctx.clone());
    blocking(move || host.sandbox(&ctx)).await?
}

impl<H: McpHost> rmcp::ServerHandler for CordonMcp<H> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools that run code and handle files in one sandbox of your own: a Linux machine confined by cordon, kept between calls. It has no network unless its policy grants some.",
            )
    }

    fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> impl std::future::Future<Output = Result<ListToolsResult, ErrorData>> + MaybeSendFuture + '_
    {
        std::future::ready(Ok(ListToolsResult::with_all_items(offered(&*self.host))))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        offered(&*self.host).into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await.map(Into::into)
    }
}

/// `cordon mcp`: one sandbox, bound by the host's command line (scope,
/// thread, agent dir, identity), made on first use and disposed of when
/// the client closes stdio.
pub struct StdioHost {
    router: cordon_sandbox::Router,
    caller: cordon_sandbox::CallerContext,
    spec: SandboxSpec,
    /// Where `collect_outputs` lands files (`None`: the tool is not offered).
    outputs: Option<std::path::PathBuf>,
    made: std::sync::Mutex<Option<Arc<dyn Sandbox>>>,
}

impl StdioHost {
    pub fn new(
        router: cordon_sandbox::Router,
        caller: cordon_sandbox::CallerContext,
        spec: SandboxSpec,
        outputs: Option<std::path::PathBuf>,
    ) -> StdioHost {
        StdioHost {
            router,
            caller,
            spec,
            outputs,
            made: std::sync::Mutex::new(None),
        }
    }

    /// Disposes of the sandbox, if one was made: how many; a dispose that
    /// did not dispose is the error, with why.
    pub fn dispose(&self) -> Result<usize, String> {
        let held = self.made.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(held);
        self.router.dispose(&self.caller).map_err(|e| e.to_string())
    }
}

impl McpHost for StdioHost {
    fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    fn sandbox(&self, _: &RequestContext<RoleServer>) -> Result<Arc<dyn Sandbox>, String> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = made.as_ref() {
            return Ok(s.clone());
        }
        let s = self
            .router
            .acquire(&self.caller, &self.spec)
            .map_err(|e| e.to_string())?;
        *made = Some(s.clone());
        Ok(s)
    }

    fn lands(&self) -> bool {
        self.outputs.is_some()
    }

    fn land(
        &self,
        _: &RequestContext<RoleServer>,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<String>, String> {
        let dir = self
            .outputs
            .as_ref()
            .ok_or("this server has no place to deliver outputs")?;
        std::fs::create_dir_all(dir).map_err(|e| format!("the outputs directory: {e}"))?;
        let sink = cordon_files::FsSink::new(dir).map_err(|e| e.to_string())?;
        let got = cordon_collect::collect_outputs(sandbox, &self.spec, Some(&sink))
            .map_err(|e| e.to_string())?;
        Ok(got.landed.into_iter().map(|a| a.display).collect())
    }
}

/// Serves MCP on this process's stdin and stdout until the client closes
/// them, or SIGTERM or SIGINT arrives; then disposes of the sandbox. The
/// signals are handled from the start, so a client that closes stdin and
/// then signals (as MCP's stdio shutdown does after two seconds) does not
/// kill the process halfway through the dispose. Returns how many were
/// disposed of.
pub async fn serve_stdio(host: Arc<StdioHost>) -> Result<usize, String> {
    use rmcp::ServiceExt as _;
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    let running = CordonMcp::new(host.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP client did not start a session: {e}"))?;
    let stop = running.cancellation_token();
    let ended = tokio::select! {
        ended = running.waiting() => ended,
        _ = term.recv() => { stop.cancel(); Ok(rmcp::service::QuitReason::Cancelled) }
        _ = int.recv() => { stop.cancel(); Ok(rmcp::service::QuitReason::Cancelled) }
    };
    let disposed = tokio::task::spawn_blocking(move || host.dispose())
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    ended.map_err(|e| format!("the MCP session failed: {e}"))?;
    disposed.map_err(|e| format!("the sandbox was not disposed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_spec_offers_what_every_local_rung_holds() {
        let names: Vec<String> = all_tools(&default_spec().unwrap(), true)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "exec",
                "run_code",
                "write_file",
                "list_files",
                "read_file",
                "remove_file"
            ]
        );
        let no_listing = default_spec().unwrap().with_requires([Capability::Exec]);
        let names: Vec<String> = all_tools(&no_listing, true)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, ["exec", "read_file"], "read through files out");
    }

    #[test]
    fn a_spec_without_capabilities_offers_nothing() {
        let spec = SandboxSpec::new("run", "host").unwrap();
        assert!(all_tools(&spec, true).is_empty());
        let only_exec = spec.with_requires([Capability::Exec]);
        let names: Vec<String> = all_tools(&only_exec, true)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, ["exec"]);
    }

    #[test]
    fn collect_is_offered_with_declared_outputs_and_a_place_to_land() {
        let spec = SandboxSpec::new("chart", "host")
            .unwrap()
            .with_outputs(
                cordon_sandbox::TransferLimits::DEFAULT,
                [DeclaredOutput::new("out/chart.png", "image/png").unwrap()],
            )
            .unwrap();
        let has = |lands| {
            all_tools(&spec, lands)
                .iter()
                .any(|t| t.name == "collect_outputs")
        };
        assert!(has(true));
        assert!(!has(false));
    }

    #[test]
    fn every_schema_refuses_unknown_fields() {
        let every = default_spec().unwrap().with_requires([
            Capability::Exec,
            Capability::RunCode,
            Capability::FilesIn,
            Capability::FilesList,
        ]);
        for t in all_tools(&every, true) {
            assert_eq!(
                t.input_schema.get("additionalProperties"),
                Some(&Value::Bool(false)),
                "{}",
                t.name
            );
            let props = t.input_schema["properties"].as_object().unwrap();
            for forbidden in ["scope", "thread", "key", "identity", "agent_dir", "handle"] {
                assert!(!props.contains_key(forbidden), "{}: {forbidden}", t.name);
            }
        }
    }

    #[test]
    fn relative_paths_are_under_the_work_dir() {
        let spec = default_spec().unwrap();
        assert_eq!(in_work_dir(&spec, "a/b"), "/workspace/a/b");
        assert_eq!(in_work_dir(&spec, "./a"), "/workspace/a");
        assert_eq!(in_work_dir(&spec, ""), "/workspace");
        assert_eq!(in_work_dir(&spec, "/etc/x"), "/etc/x");
    }
}
