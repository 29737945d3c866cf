//! cordon's confinement translator, shared by every backend.
//!
//! A policy's [`ConfinementPlan`](cordon_policy::plan::ConfinementPlan)
//! says what the workload's own accesses may be; [`translate`] turns it
//! into a backend-neutral [`Confinement`] — path-beneath [`PathRule`]s,
//! masks and notes — never wider than the policy, refusing
//! ([`Unholdable`]) what cannot be held. [`command::resolve`] finds and
//! canonicalises the first command as the policy sees it.
//!
//! Both work in the workload's (guest) paths throughout: the plan is made
//! in them, and so is what comes out, so a backend maps the result to its
//! own mechanism (Landlock rules and mounts for the local rungs, OCI mounts
//! and masks elsewhere) without carrying paths back. Where they must look
//! at the disk (does the file exist, where does this link lead, what is in
//! this directory) they ask a [`FsView`]: [`HostFs`] when the workload sees
//! the host's own paths, [`RootedFs`] for a root (an image, or the host's
//! `/`) with trees bound into it, such as the work dir at the spec's
//! `work_dir`.
//!
//! What a backend can hold beyond rules is its [`Mode`]: with masks, a
//! denied path inside a granted tree is hidden; without them it is left out
//! of the rules around it, or refused.
//!
//! [`oci`] writes what an engine that takes OCI-shaped configuration needs
//! (gVisor's bundle, Docker's container and seccomp profile): the `host`
//! image's root, mounts and masks, rlimits, and the container rung's
//! syscall denials as a seccomp profile.

pub mod command;
pub mod oci;
mod translate;
mod view;

pub use translate::{translate, Confinement, Mode, PathRule, Target, Unholdable, MAX_WALK};
pub use view::{Entry, FsView, HostFs, LinkIndex, RootedFs};
