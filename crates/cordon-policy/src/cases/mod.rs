//! Test cases for `cordon policy test` and the facts of `cordon policy
//! explain`: requests written by hand, built exactly as the enforcing layer
//! builds them — typed by the vocabulary, canonicalised by [`crate::canon`],
//! and with the same facts unknown.

use std::sync::Arc;

use crate::decide::Request;

mod facts;
mod load;
mod run;

pub use facts::{
    surface_fields, FactError, FactsBuilder, DEFAULT_WORK_DIR, DESTINATION_KEYS, IDENTITY_KEYS,
};
pub use load::{load_file, load_one_file, load_one_str, load_str};
pub use run::{rule_matches, rule_place, run, uncovered, unknown_rules, CaseResult};

/// What a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Allow,
    Deny,
}

/// One test case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub file: Arc<str>,
    pub line: usize,
    pub column: usize,
    pub request: Request,
    pub expect: Expect,
    /// A rule that must be among those that decided, by name.
    pub rule: Option<String>,
}
