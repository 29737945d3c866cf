//! Rules: CEL parsed by the `cel` crate, then type-checked and compiled by
//! cordon into a small typed tree that a three-valued evaluator runs.
//!
//! The `cel` crate parses (grammar, macros, node offsets) but has no type
//! checker and no notion of an unknown fact, so checking and evaluation are
//! cordon's own. One evaluator serves deciding, explaining and (later) partial
//! evaluation: it can record the value of every node as it goes.

mod check;
mod cost;
mod eval;
mod node;
mod time;

pub use check::compile;
pub use eval::{eval, FactSource, FullTrace, NoTrace, Open, Res, Trace, Val};
pub use node::{children, namespace_guard, ArithOp, CmpOp, Comprehension, Const, Kind, Node};
pub use time::{parse_duration, parse_timestamp};

/// A compile error at a node, with a suggested fix.
#[derive(Debug, Clone)]
pub struct CompileError {
    /// Byte offsets into the expression source.
    pub start: u32,
    pub end: u32,
    pub message: String,
    pub help: Option<String>,
}

/// A checked rule body: the tree and what it costs.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub root: Node,
    /// Facts the rule can read.
    pub reads: u32,
    /// Number of nodes, the size of a trace.
    pub nodes: u32,
    /// The static cost bound (node visits in the worst case).
    pub cost: u64,
}

/// The longest expression source accepted.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// The largest static cost accepted for one rule.
pub const MAX_COST: u64 = 100_000;
/// The length a list fact (`args`) is assumed to have for cost bounding; the
/// enforcing layer refuses a request whose lists are longer.
pub const MAX_LIST_LEN: u64 = 256;
