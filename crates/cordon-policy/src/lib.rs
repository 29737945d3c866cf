// Module graph (acyclic; each module uses only those below it):
//   cases -> explain -> decide; load -> plan -> decide -> policy
//   load -> parse, resolve -> model; policy -> model -> expr -> vocab
//   canon, diag, vocab use nothing in the crate.
// The parts of a loaded policy (rules, layers, bounds, limits) live in
// `model` so that `parse`, `resolve` and `policy` need not import each other;
// loading (`load`) sits above `plan` because it runs `plan::lint`.

//! cordon's deciding half.
//!
//! One vocabulary ([`vocab`]) for every surface — egress, compute, storage,
//! secret — with the subject spelled `identity` everywhere. A [`Policy`] is
//! loaded from YAML: every rule is parsed with the `cel` crate, type-checked
//! and compiled by [`expr`] when it loads, never at request time, with
//! positioned [`Diagnostics`] for everything wrong at once. [`Policy::decide`]
//! answers a [`Request`] with a three-valued [`Decision`]: allow, deny, or
//! undetermined (naming the unknown facts and errors); the final enforcing
//! point treats undetermined as deny. Facts are canonicalised ([`canon`])
//! before any rule sees them.
//!
//! Deciding is portable; enforcing is not and lives in other crates.

pub mod canon;
pub mod cases;
pub mod decide;
pub mod diag;
pub mod explain;
pub mod expr;
#[doc(hidden)]
pub mod fuzz;
mod load;
mod model;
mod parse;
pub mod plan;
pub mod policy;
pub mod resolve;
pub mod vocab;

pub use decide::{
    ComputeFacts, Decision, Deployment, Destination, EgressFacts, Identity, IngressFacts, Mode,
    Request, SecretFacts, StorageFacts, SurfaceFacts, Verdict,
};
pub use diag::{Diagnostic, Diagnostics, Severity};
pub use policy::{AllowRange, Bound, Bounds, Effect, Inspection, Layer, Policy, Rule, RuleId};
pub use vocab::{Fact, Surface};
