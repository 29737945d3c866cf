//! cordon's collection of declared outputs, the host side of files out:
//! [`collect_outputs`] reads a spec's declared outputs back out of a
//! sandbox and lands them, in the four phases of
//! [`cordon_sandbox::outputs`]. The phase order is the contract:
//!
//! 1. the declaration alone (no sandbox call, no sink call);
//! 2. stat every output and check every cap (sandbox stats only);
//! 3. read every present output, bounded, and check the caps again;
//! 4. deliver the landing ones, in declaration order.
//!
//! It drives only the protocol — the [`Sandbox`] file hooks and an
//! [`OutputSink`] — so it works over any backend, and no backend needs it:
//! what a backend implements (the hooks, [`cordon_sandbox::DeclaredOutput`],
//! [`cordon_sandbox::TransferLimits`]) stays in `cordon-sandbox`. A warm
//! sandbox's rounds each write into a fresh [`CallDir`] ([`calldir`]) and
//! are collected from there ([`Collection::in_call_dir`]).

use std::fmt;

pub mod calldir;

use cordon_sandbox::confined::kind_name;
use cordon_sandbox::outputs::{
    names_collide, shown_name, validate_artifact_name, ArtifactNameError, Collision,
    DeclaredOutput, Disposition,
};
use cordon_sandbox::{
    Artifact, FileKind, LandedArtifact, OutputSink, Sandbox, SandboxError, SandboxSpec, SinkError,
};

pub use crate::calldir::CallDir;

/// Which cap of [`cordon_sandbox::TransferLimits`] a collection breached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    BytesPerFile,
    TotalBytes,
    Files,
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cap::BytesPerFile => "files_out.max_bytes_per_file",
            Cap::TotalBytes => "files_out.max_total_bytes",
            Cap::Files => "files_out.max_files",
        })
    }
}

/// A collection that is refused. Every variant but [`CollectError::Delivery`]
/// arrives before anything is delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    #[error(
        "spec `{kind}` declares outputs without `files_out` caps; add `files_out` to the spec"
    )]
    NoLimits { kind: String },
    #[error("spec `{kind}` does not set `outputs_named_at_call_time`, so outputs cannot be named at collect time: the tool was attached with no sink required of it and no outbound cap agreed; declare the outputs in the spec, or set the flag")]
    CallTimeRefused { kind: String },
    #[error("output `{name}` lands, but no sink was given; pass a sink, or declare the output `consume`")]
    NoSink { name: String },
    #[error("output name `{name}` is refused: {source}")]
    Name {
        name: String,
        source: ArtifactNameError,
    },
    #[error("output `{path}` is declared twice; declare each output once")]
    DuplicatePath { path: String },
    #[error("landing names {} and {} {how}, so they are one file at the destination; give one a distinct `name`", shown_name(first), shown_name(second))]
    Collision {
        first: String,
        second: String,
        how: Collision,
    },
    #[error("required output `{path}` is not there; the workload did not produce it (its diagnostics say why), or declare it `required: false` if its absence is normal")]
    Missing { path: String },
    #[error("output `{path}` is a {found}, not a regular file; cordon reads only regular files and follows no links")]
    NotRegular { path: String, found: &'static str },
    #[error("the backend could not report the size of output `{path}`, so no cap can hold it; it is refused rather than guessed")]
    SizeUnknown { path: String },
    #[error("output `{path}` breaches `{cap}` of {limit} ({observed} {unit}); raise `{cap}` in the spec, or produce less")]
    CapExceeded {
        cap: Cap,
        limit: u64,
        path: String,
        observed: u64,
        unit: &'static str,
    },
    /// The backend refused or failed a stat or a read. Its error names the
    /// path where it can; `path` is always the guest path.
    #[error("{}", sandbox_message(path, source))]
    Sandbox { path: String, source: SandboxError },
    #[error("landing `{name}` failed after {} artifact(s) were delivered: {source}", delivered.len())]
    Delivery {
        name: String,
        /// What reached the sink before the failure; it cannot be taken back.
        delivered: Vec<LandedArtifact>,
        source: SinkError,
    },
}

impl CollectError {
    /// The kind at the protocol boundary: a spec's or a workload's output
    /// that cannot be collected is the caller's to fix (`Invalid`; a cap
    /// breached is `Refused`, a required output absent `NotFound`), a
    /// backend's or sink's failure is `Failed`.
    pub fn kind(&self) -> cordon_sandbox::ErrorKind {
        use cordon_sandbox::ErrorKind;
        match self {
            CollectError::NoLimits { .. }
            | CollectError::CallTimeRefused { .. }
            | CollectError::NoSink { .. }
            | CollectError::Name { .. }
            | CollectError::DuplicatePath { .. }
            | CollectError::Collision { .. }
            | CollectError::NotRegular { .. } => ErrorKind::Invalid,
            CollectError::Missing { .. } => ErrorKind::NotFound,
            CollectError::CapExceeded { .. } => ErrorKind::Refused,
            CollectError::SizeUnknown { .. } | CollectError::Delivery { .. } => ErrorKind::Failed,
            CollectError::Sandbox { source, .. } => source.kind(),
        }
    }
}

fn sandbox_message(path: &str, source: &SandboxError) -> String {
    match source {
        SandboxError::NotFound { .. }
        | SandboxError::PathRefused { .. }
        | SandboxError::NotRegularFile { .. }
        | SandboxError::ConfinementUnavailable { .. } => source.to_string(),
        SandboxError::Unsupported { .. }
        | SandboxError::Failed { .. }
        | SandboxError::Refused { .. }
        | SandboxError::Unavailable { .. }
        | SandboxError::Invalid { .. } => format!("output `{path}`: {source}"),
    }
}

/// What a collection produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The landing outputs, in declaration order.
    pub landed: Vec<LandedArtifact>,
    /// The `consume` outputs, read and capped, for the kind to parse.
    pub consumed: Vec<Artifact>,
}

/// One collection: a spec, optionally a per-call directory and outputs
/// named at call time. [`collect_outputs`] is the common case.
#[derive(Debug, Clone)]
pub struct Collection<'a> {
    spec: &'a SandboxSpec,
    call_dir: Option<CallDir>,
    call_time: Option<Vec<DeclaredOutput>>,
}

impl<'a> Collection<'a> {
    pub fn of(spec: &'a SandboxSpec) -> Collection<'a> {
        Collection {
            spec,
            call_dir: None,
            call_time: None,
        }
    }

    /// Reads the declared paths beneath this call's fresh directory (see
    /// [`cordon_sandbox::outputs`] on warm reuse); landing names do not include it.
    pub fn in_call_dir(mut self, dir: &CallDir) -> Collection<'a> {
        self.call_dir = Some(dir.clone());
        self
    }

    /// Collects these outputs instead of the spec's. Refused at collect time
    /// unless the spec sets `outputs_named_at_call_time`.
    pub fn named_at_call_time(mut self, outputs: &[DeclaredOutput]) -> Collection<'a> {
        self.call_time = Some(outputs.to_vec());
        self
    }

    fn guest_path(&self, output: &DeclaredOutput) -> String {
        let work = self.spec.work_dir().trim_end_matches('/');
        match &self.call_dir {
            Some(d) => format!("{work}/{}/{}", d.path(), output.path()),
            None => format!("{work}/{}", output.path()),
        }
    }

    /// Runs the four phases; see [`cordon_sandbox::outputs`].
    pub fn collect(
        &self,
        sandbox: &dyn Sandbox,
        sink: Option<&dyn OutputSink>,
    ) -> Result<Collected, CollectError> {
        let kind = || self.spec.kind().to_string();
        // Phase 1: the declaration alone. Nothing below touches the sandbox
        // or the sink until it passes.
        let outputs: &[DeclaredOutput] = match &self.call_time {
            None => self.spec.declared_outputs(),
            Some(o) if self.spec.outputs_named_at_call_time() => o,
            Some(_) => return Err(CollectError::CallTimeRefused { kind: kind() }),
        };
        if outputs.is_empty() {
            return Ok(Collected {
                landed: Vec::new(),
                consumed: Vec::new(),
            });
        }
        let limits = *self
            .spec
            .files_out()
            .ok_or_else(|| CollectError::NoLimits { kind: kind() })?;
        check_declaration(outputs, sink)?;

        // Phase 2: stat every output, check every cap.
        let present = self.stat_all(sandbox, outputs, &limits)?;

        // Phase 3: read, bounded; the caps again on what was read.
        let read = self.read_all(sandbox, present, &limits)?;

        // Phase 4: deliver, in declaration order. Nothing of cordon's own
        // can refuse from here on.
        let mut landed = Vec::new();
        let mut consumed = Vec::new();
        for (o, bytes) in read {
            let artifact = Artifact {
                name: o.name().to_string(),
                path: o.path().to_string(),
                media_type: o.media_type().to_string(),
                bytes,
            };
            match (o.disposition(), sink) {
                (Disposition::Consume, _) => consumed.push(artifact),
                (Disposition::Land, Some(sink)) => match sink.deliver(&artifact) {
                    Ok(l) => landed.push(l),
                    Err(source) => {
                        return Err(CollectError::Delivery {
                            name: artifact.name,
                            delivered: landed,
                            source,
                        })
                    }
                },
                // INVARIANT: phase 1 refused a landing output without a sink.
                (Disposition::Land, None) => {
                    return Err(CollectError::NoSink {
                        name: artifact.name,
                    })
                }
            }
        }
        Ok(Collected { landed, consumed })
    }

    /// Phase 2: every output stat-ed (no link followed) and every cap
    /// checked on what the stats say; the outputs present, in order.
    fn stat_all<'o>(
        &self,
        sandbox: &dyn Sandbox,
        outputs: &'o [DeclaredOutput],
        limits: &cordon_sandbox::TransferLimits,
    ) -> Result<Vec<&'o DeclaredOutput>, CollectError> {
        let mut present: Vec<&'o DeclaredOutput> = Vec::new();
        let mut total: u64 = 0;
        for o in outputs {
            let path = self.guest_path(o);
            let stat = sandbox
                .stat_no_follow(&path)
                .map_err(|source| CollectError::Sandbox {
                    path: path.clone(),
                    source,
                })?;
            let Some(stat) = stat else {
                if o.required() {
                    return Err(CollectError::Missing { path });
                }
                continue;
            };
            if stat.kind != FileKind::File {
                return Err(CollectError::NotRegular {
                    path,
                    found: kind_name(stat.kind),
                });
            }
            let size = stat
                .size
                .ok_or(CollectError::SizeUnknown { path: path.clone() })?;
            present.push(o);
            if present.len() as u64 > limits.max_files {
                return Err(exceeded(
                    Cap::Files,
                    limits.max_files,
                    path,
                    present.len() as u64,
                ));
            }
            if size > limits.max_bytes_per_file {
                return Err(exceeded(
                    Cap::BytesPerFile,
                    limits.max_bytes_per_file,
                    path,
                    size,
                ));
            }
            total = total.saturating_add(size);
            if total > limits.max_total_bytes {
                return Err(exceeded(
                    Cap::TotalBytes,
                    limits.max_total_bytes,
                    path,
                    total,
                ));
            }
        }
        Ok(present)
    }

    /// Phase 3: each present output read, bounded, the caps held again on
    /// what was read (neither the stat nor the backend is trusted).
    fn read_all<'o>(
        &self,
        sandbox: &dyn Sandbox,
        present: Vec<&'o DeclaredOutput>,
        limits: &cordon_sandbox::TransferLimits,
    ) -> Result<Vec<(&'o DeclaredOutput, Vec<u8>)>, CollectError> {
        let mut read: Vec<(&'o DeclaredOutput, Vec<u8>)> = Vec::new();
        let mut total: u64 = 0;
        for o in present {
            let path = self.guest_path(o);
            let left = limits.max_total_bytes.saturating_sub(total);
            let max = limits.max_bytes_per_file.min(left);
            let got = match sandbox.read_file(&path, max) {
                Ok(got) => got,
                Err(SandboxError::NotFound { .. }) if !o.required() => continue,
                Err(SandboxError::NotFound { .. }) => return Err(CollectError::Missing { path }),
                Err(source) => return Err(CollectError::Sandbox { path, source }),
            };
            // INVARIANT: neither the stat of phase 2 nor the backend's
            // honesty about the bound is trusted; the larger of what the
            // opened file reported and what came back is held to the cap.
            let seen = got.size.max(got.bytes.len() as u64);
            if seen > max {
                return Err(if seen > limits.max_bytes_per_file {
                    exceeded(Cap::BytesPerFile, limits.max_bytes_per_file, path, seen)
                } else {
                    exceeded(
                        Cap::TotalBytes,
                        limits.max_total_bytes,
                        path,
                        total.saturating_add(seen),
                    )
                });
            }
            total += got.bytes.len() as u64;
            read.push((o, got.bytes));
        }
        Ok(read)
    }
}

/// Phase 1 of a collection: what the declaration alone decides — a valid
/// name for each output, a sink for what lands, no path twice, no two
/// landing names that are one file at the destination.
fn check_declaration(
    outputs: &[DeclaredOutput],
    sink: Option<&dyn OutputSink>,
) -> Result<(), CollectError> {
    for (i, o) in outputs.iter().enumerate() {
        validate_artifact_name(o.name()).map_err(|source| CollectError::Name {
            name: o.name().to_string(),
            source,
        })?;
        if o.disposition() == Disposition::Land && sink.is_none() {
            return Err(CollectError::NoSink {
                name: o.name().to_string(),
            });
        }
        for earlier in &outputs[..i] {
            if earlier.path() == o.path() {
                return Err(CollectError::DuplicatePath {
                    path: o.path().to_string(),
                });
            }
            let both_land =
                earlier.disposition() == Disposition::Land && o.disposition() == Disposition::Land;
            if both_land {
                if let Some(how) = names_collide(earlier.name(), o.name()) {
                    return Err(CollectError::Collision {
                        first: earlier.name().to_string(),
                        second: o.name().to_string(),
                        how,
                    });
                }
            }
        }
    }
    Ok(())
}

fn exceeded(cap: Cap, limit: u64, path: String, observed: u64) -> CollectError {
    CollectError::CapExceeded {
        cap,
        limit,
        path,
        observed,
        unit: if cap == Cap::Files { "files" } else { "bytes" },
    }
}

/// Collects the spec's declared outputs from `sandbox` and lands the
/// `land` ones in `sink`; see [`cordon_sandbox::outputs`] for the phases.
pub fn collect_outputs(
    sandbox: &dyn Sandbox,
    spec: &SandboxSpec,
    sink: Option<&dyn OutputSink>,
) -> Result<Collected, CollectError> {
    Collection::of(spec).collect(sandbox, sink)
}

/// Collects outputs named at call time instead of the spec's; refused
/// unless the spec sets `outputs_named_at_call_time`.
pub fn collect_outputs_named(
    sandbox: &dyn Sandbox,
    spec: &SandboxSpec,
    outputs: &[DeclaredOutput],
    sink: Option<&dyn OutputSink>,
) -> Result<Collected, CollectError> {
    Collection::of(spec)
        .named_at_call_time(outputs)
        .collect(sandbox, sink)
}
