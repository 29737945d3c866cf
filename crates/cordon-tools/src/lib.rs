//! cordon's host tools: the contract before the capability.
//!
//! A host tool is a function in the host process, with the host's
//! privileges, called by code a model wrote, bypassing whatever middleware
//! the host runs. No backend cordon ships declares
//! [`Capability::HostTools`](cordon_sandbox::Capability::HostTools) yet; this crate
//! is the safety contract that exists before anything can use it:
//!
//! - [`HostToolRegistry`] starts empty. Registering logs a one-time warning
//!   per registry (suppress it with [`HostToolRegistry::acknowledge_risk`]).
//! - Every [`HostTool`] carries a [`ToolDeclaration`] answering source, sink
//!   and identity. The struct has no defaults, so leaving a leg out does not
//!   compile; `None` is an answer ("not that role").
//! - Registration is the only place a declaration is read: the registry
//!   keeps its own copy, and [`HostToolRegistry::aggregate`] consumes the
//!   registry, sealing it, and derives the surface's [`SurfacePolicy`].
//! - [`ToolRun::dispatch`] is the one door: a per-run dispatch cap that
//!   counts refusals too, arguments checked against the tool's [`Schema`]
//!   host-side, and response caps in the same [`TransferLimits`] as files out.
//!
//! **[`ToolIdentity::App`] is not the safe option, only the declared one.**
//! It is the application's full authority. The only real bounds on it are
//! what the host registers and the dispatch cap: least privilege for host
//! tools comes from what is registered, never from what is declared.
//! [`ToolIdentity::User`] is declarable but not servable: registering one
//! raises the surface to approval-gated, and dispatching one is refused.
//!
//! A declaration answers every leg:
//!
//! ```
//! use cordon_sandbox::ToolIdentity;
//! use cordon_tools::{HostTool, HostToolRegistry, Schema, Sink, ToolDeclaration};
//!
//! let mut registry = HostToolRegistry::new().acknowledge_risk();
//! registry
//!     .register(HostTool {
//!         name: "post_status".into(),
//!         declaration: ToolDeclaration {
//!             source: None,
//!             sink: Some(Sink::External),
//!             identity: Some(ToolIdentity::App),
//!         },
//!         schema: Schema::object([]),
//!         handler: Box::new(|_| Ok(serde_json::json!("posted"))),
//!     })
//!     .unwrap();
//! let surface = registry.aggregate();
//! assert_eq!(surface.policy().external_sinks, ["post_status"]);
//! ```
//!
//! Leaving one out does not compile:
//!
//! ```compile_fail,E0063
//! use cordon_sandbox::ToolIdentity;
//! use cordon_tools::ToolDeclaration;
//! let d = ToolDeclaration { source: None, identity: Some(ToolIdentity::App) };
//! ```
//!
//! and there is no default to fall back on:
//!
//! ```compile_fail,E0599
//! let d = cordon_tools::ToolDeclaration::default();
//! ```
//!
//! A sealed registry cannot take another tool:
//!
//! ```compile_fail,E0382
//! let mut registry = cordon_tools::HostToolRegistry::new();
//! let surface = registry.aggregate();
//! registry.register(todo!());
//! ```

pub mod schema;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use cordon_sandbox::{ToolIdentity, TransferLimits};

pub use crate::schema::{Schema, SchemaError};

/// Where the data a tool hands back to the sandbox comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Content anyone could have written (web pages, public APIs): untrusted.
    Public,
    /// The host's or its users' private data.
    Private,
}

/// Where a tool sends what the sandbox gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sink {
    /// Stays within the host's own systems.
    Internal,
    /// Leaves them: a message, a post, a third-party API.
    External,
}

/// A tool's answers to the three information-flow questions. Every field
/// must be written; `None` means "not that role".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolDeclaration {
    pub source: Option<Source>,
    pub sink: Option<Sink>,
    pub identity: Option<ToolIdentity>,
}

/// A tool's body: JSON arguments in, JSON response out, or an error message.
pub type Handler = Box<dyn Fn(&Value) -> Result<Value, String> + Send + Sync>;

/// A tool to register. Every field is required.
pub struct HostTool {
    /// `a-z`, `0-9`, `_`, at most 64 bytes, starting with a letter.
    pub name: String,
    pub declaration: ToolDeclaration,
    /// The arguments' schema; its top level is an object.
    pub schema: Schema,
    pub handler: Handler,
}

/// The most dispatches one run may make, refusals included.
pub const DEFAULT_MAX_DISPATCHES_PER_RUN: u32 = 32;

/// A refusal at registration or dispatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("host tool name `{name}` is refused: {reason}; use `a-z`, `0-9` and `_`, starting with a letter, like `fetch_invoice`")]
    Name { name: String, reason: &'static str },
    #[error("host tool `{name}` is already registered; register each tool once")]
    Duplicate { name: String },
    #[error("host tool `{name}`'s schema is refused: its top level must be an object schema (`\"type\": \"object\"`), so every argument is named")]
    SchemaNotObject { name: String },
    #[error("dispatch {attempt} is refused: this run's cap is {cap} dispatches, refusals included; start a new run, or raise the cap if the workload needs it")]
    DispatchCap { attempt: u32, cap: u32 },
    #[error("no host tool `{name}` is registered; the registered tools are {known}")]
    Unknown { name: String, known: String },
    #[error("host tool `{tool}` acts as the user, which cordon does not serve: it needs per-call user approval and the user's delegated credentials, neither of which this version provides; declare it with `identity: Some(ToolIdentity::App)` only if the application's own authority is what it really uses")]
    UserNotServable { tool: String },
    #[error("host tool `{tool}`: {source}")]
    Arguments { tool: String, source: SchemaError },
    #[error("host tool `{tool}` failed: {reason}")]
    Failed { tool: String, reason: String },
    #[error("host tool `{tool}` returned {bytes} bytes, above the per-response cap of {cap}; have the tool return less (a page, a summary)")]
    ResponseTooLarge { tool: String, bytes: u64, cap: u64 },
    #[error("host tool `{tool}`'s response would bring this run to {total} bytes, above the run's cap of {cap}; start a new run, or have the tools return less")]
    RunBytes { tool: String, total: u64, cap: u64 },
    #[error("host tool `{tool}`'s response would be this run's response {count}, above the cap of {cap}; start a new run, or have the tools return fewer, larger answers")]
    RunResponses { tool: String, count: u64, cap: u64 },
}

struct Registered {
    declaration: ToolDeclaration,
    schema: Schema,
    handler: Handler,
}

/// Tools a host makes dispatchable. Starts empty.
pub struct HostToolRegistry {
    tools: BTreeMap<String, Registered>,
    warned: bool,
}

impl fmt::Debug for HostToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for HostToolRegistry {
    fn default() -> HostToolRegistry {
        HostToolRegistry::new()
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 64 {
        return Err("it is empty or longer than 64 bytes");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("it does not start with a letter `a-z`");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err("it holds a character outside `a-z`, `0-9`, `_`");
    }
    Ok(())
}

impl HostToolRegistry {
    pub fn new() -> HostToolRegistry {
        HostToolRegistry {
            tools: BTreeMap::new(),
            warned: false,
        }
    }

    /// Suppresses the registration warning, for a host that has read this
    /// crate's documentation.
    pub fn acknowledge_risk(mut self) -> HostToolRegistry {
        self.warned = true;
        self
    }

    /// Registers a tool; the declaration is read here and nowhere else.
    pub fn register(&mut self, tool: HostTool) -> Result<(), ToolError> {
        check_name(&tool.name).map_err(|reason| ToolError::Name {
            name: tool.name.clone(),
            reason,
        })?;
        if self.tools.contains_key(&tool.name) {
            return Err(ToolError::Duplicate { name: tool.name });
        }
        if !matches!(tool.schema, Schema::Object { .. }) {
            return Err(ToolError::SchemaNotObject { name: tool.name });
        }
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                tool = %tool.name,
                "host tools run in the host process with the host's privileges, driven by model-written code; register only what a workload needs (`ToolIdentity::App` is the application's full authority), or call `acknowledge_risk` to silence this"
            );
        }
        self.tools.insert(
            tool.name,
            Registered {
                declaration: tool.declaration,
                schema: tool.schema,
                handler: tool.handler,
            },
        );
        Ok(())
    }

    /// Seals the registry and derives the surface's policy from what was
    /// registered.
    pub fn aggregate(self) -> ToolSurface {
        let mut policy = SurfacePolicy::default();
        for (name, t) in &self.tools {
            let d = t.declaration;
            if d.identity == Some(ToolIdentity::User) {
                policy.approval_gated = true;
            }
            if d.source == Some(Source::Private) {
                policy.private_sources.push(name.clone());
            }
            if d.source == Some(Source::Public) {
                policy.public_sources.push(name.clone());
            }
            if d.sink == Some(Sink::External) {
                policy.external_sinks.push(name.clone());
            }
        }
        ToolSurface {
            tools: self.tools,
            policy,
        }
    }
}

/// The policy a sealed registry implies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurfacePolicy {
    /// A tool acts as the user: the surface needs per-call approval.
    pub approval_gated: bool,
    /// Tools that bring private data into the sandbox.
    pub private_sources: Vec<String>,
    /// Tools that bring untrusted public content into the sandbox.
    pub public_sources: Vec<String>,
    /// Tools that send data out of the host's systems.
    pub external_sinks: Vec<String>,
}

impl SurfacePolicy {
    /// Private data in and an external sink out on one surface: code the
    /// model writes can carry one to the other.
    pub fn can_exfiltrate(&self) -> bool {
        !self.private_sources.is_empty() && !self.external_sinks.is_empty()
    }
}

/// A sealed set of host tools. Nothing more can be registered.
pub struct ToolSurface {
    tools: BTreeMap<String, Registered>,
    policy: SurfacePolicy,
}

impl fmt::Debug for ToolSurface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSurface")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("policy", &self.policy)
            .finish()
    }
}

/// Caps for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub max_dispatches: u32,
    /// Per response (`max_bytes_per_file`), per run (`max_total_bytes`) and
    /// the number of responses (`max_files`).
    pub responses: TransferLimits,
}

impl Default for RunLimits {
    fn default() -> RunLimits {
        RunLimits {
            max_dispatches: DEFAULT_MAX_DISPATCHES_PER_RUN,
            responses: TransferLimits::DEFAULT,
        }
    }
}

impl ToolSurface {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn policy(&self) -> &SurfacePolicy {
        &self.policy
    }

    /// Each tool's declaration as captured at registration.
    pub fn declarations(&self) -> impl Iterator<Item = (&str, &ToolDeclaration)> {
        self.tools.iter().map(|(k, t)| (k.as_str(), &t.declaration))
    }

    /// Each tool's name and declared identity: what
    /// [`Router::admit_tools`](cordon_sandbox::Router::admit_tools) checks
    /// against the host's hard stops.
    pub fn identities(&self) -> impl Iterator<Item = (&str, Option<ToolIdentity>)> {
        self.declarations().map(|(name, d)| (name, d.identity))
    }

    /// Starts a run: one model turn's worth of dispatches.
    pub fn run(&self, limits: RunLimits) -> ToolRun<'_> {
        ToolRun {
            surface: self,
            limits,
            attempts: 0,
            bytes: 0,
            responses: 0,
        }
    }
}

/// One run's dispatches, counted against its caps.
pub struct ToolRun<'s> {
    surface: &'s ToolSurface,
    limits: RunLimits,
    attempts: u32,
    bytes: u64,
    responses: u64,
}

impl ToolRun<'_> {
    /// Dispatches attempted so far, refused ones included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The one door: counts the attempt, then refuses past the cap, unknown
    /// tools, user-identity tools and arguments the schema refuses, calls
    /// the tool, and refuses a response past the caps.
    pub fn dispatch(&mut self, name: &str, args: &Value) -> Result<Value, ToolError> {
        // INVARIANT: counted before anything can refuse, so refusals use up
        // the cap too and a loop of bad calls still ends.
        self.attempts = self.attempts.saturating_add(1);
        if self.attempts > self.limits.max_dispatches {
            return Err(ToolError::DispatchCap {
                attempt: self.attempts,
                cap: self.limits.max_dispatches,
            });
        }
        let Some(tool) = self.surface.tools.get(name) else {
            let known: Vec<String> = self
                .surface
                .tools
                .keys()
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(ToolError::Unknown {
                name: name.to_string(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            });
        };
        if tool.declaration.identity == Some(ToolIdentity::User) {
            return Err(ToolError::UserNotServable {
                tool: name.to_string(),
            });
        }
        tool.schema
            .validate(args)
            .map_err(|source| ToolError::Arguments {
                tool: name.to_string(),
                source,
            })?;
        let value = (tool.handler)(args).map_err(|reason| ToolError::Failed {
            tool: name.to_string(),
            reason,
        })?;
        let bytes = serde_json::to_vec(&value).map_or(u64::MAX, |v| v.len() as u64);
        let caps = self.limits.responses;
        if bytes > caps.max_bytes_per_file {
            return Err(ToolError::ResponseTooLarge {
                tool: name.to_string(),
                bytes,
                cap: caps.max_bytes_per_file,
            });
        }
        let total = self.bytes.saturating_add(bytes);
        if total > caps.max_total_bytes {
            return Err(ToolError::RunBytes {
                tool: name.to_string(),
                total,
                cap: caps.max_total_bytes,
            });
        }
        let count = self.responses + 1;
        if count > caps.max_files {
            return Err(ToolError::RunResponses {
                tool: name.to_string(),
                count,
                cap: caps.max_files,
            });
        }
        self.bytes = total;
        self.responses = count;
        Ok(value)
    }
}
