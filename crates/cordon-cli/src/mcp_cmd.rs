//! `cordon mcp`: the MCP server on stdio, for a host that starts one per
//! conversation. The host's command line binds it to one sandbox key
//! (scope, thread, agent dir) and identity; no tool argument can name
//! another. The sandbox is made on the first tool call and disposed of
//! when the client closes the connection.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_sandbox::CallerContext;
use cordon_serve::mcp::{self, StdioHost};

use crate::exit::{fail, refuse};
use crate::run::Selection;

#[derive(clap::Args)]
pub struct McpArgs {
    /// Whom the sandbox belongs to (the tenant or team your host keeps
    /// apart). Scope, thread and agent dir are the sandbox's key.
    #[arg(long)]
    pub scope: String,
    /// The conversation this server is for (your host's thread id).
    #[arg(long)]
    pub thread: String,
    /// Which agent's sandbox within the thread.
    #[arg(long, default_value = "default")]
    pub agent_dir: String,
    /// Where `collect_outputs` delivers the spec's declared outputs (the
    /// tool is offered only with this and a spec that declares outputs).
    #[arg(long, value_name = "DIR")]
    pub outputs_dir: Option<PathBuf>,
    #[command(flatten)]
    pub sel: Selection,
}

pub fn run(args: McpArgs) -> ExitCode {
    let prepared = match crate::run::prepare(&args.sel, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // Without --spec: cordon's MCP spec (exec, run_code, files in, list and
    // read), not the bare `run` spec, which offers a model no tool.
    let spec = match &args.sel.spec {
        Some(_) => prepared.spec.clone(),
        None => match mcp::default_spec() {
            Ok(s) => s,
            Err(e) => return fail(e),
        },
    };
    if let Err(e) = prepared.router.selected(&spec) {
        return fail(e);
    }
    let id = prepared.identity.clone();
    let (scope, thread, agent) = (args.scope, args.thread, args.agent_dir);
    let caller = CallerContext::new(
        move || scope.clone(),
        move || thread.clone(),
        move || agent.clone(),
        move || id.clone(),
    );
    if let Err(e) = caller.resolve() {
        return crate::exit::usage(e);
    }
    let host = Arc::new(StdioHost::new(
        prepared.router,
        caller,
        spec,
        args.outputs_dir,
    ));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return refuse(format!("cannot start the MCP server's runtime: {e}")),
    };
    let served = runtime.block_on(mcp::serve_stdio(host));
    // The stdin reader may still be blocked in a read (a client that
    // signalled rather than closed): not waited for.
    runtime.shutdown_background();
    match served {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => refuse(e),
    }
}
