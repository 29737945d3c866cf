//! What a workload asks for: a [`SandboxSpec`], loaded from YAML or built in
//! code, and valid whenever it exists.
//!
//! The YAML form refuses unknown fields, duplicate keys, anchors, aliases and
//! tags, and every error carries `file:line:column`. Scalars are read as
//! strings and typed here (a size by [`cordon_policy::canon::size`]), never
//! by YAML's guess.
//!
//! ```yaml
//! kind: diagram
//! image: diagram-sandbox:1
//! work_dir: /workspace
//! workspace: /home/me/project   # a host directory, copy-on-write (optional)
//! egress_allow: [pypi.org, "*.pythonhosted.org"]   # empty or absent: no network
//! requires: [exec, files_in]
//! min_isolation: microvm        # may raise the host's floor, never lower it
//! resources: {memory: 256MiB, processes: 16, cpu_seconds: 30, wall_seconds: 120, disk: 1GiB}
//! secrets: [team-a/pypi-token]
//! declared_outputs:             # literal paths under work_dir; no globs
//!   - path: diagram.png
//!     media_type: image/png     # declared, never sniffed
//!     required: false           # its absence is normal (default true)
//!     name: diagram.png         # the landing spelling (default: the path)
//!     disposition: land         # or consume (parsed by the kind)
//! files_out: {max_bytes_per_file: 8MiB, max_total_bytes: 16MiB, max_files: 4}
//! outputs_named_at_call_time: false
//! ```
//!
//! A spec that declares outputs (or names them at call time) must carry
//! `files_out`, and `files_out` joins its `requires`, so the router's
//! capability match refuses a backend that cannot serve it.

use std::fmt;
use std::path::Path;

use cordon_policy::canon;
use marked_yaml::Spanned;
use serde::Deserialize;

use crate::capability::{Capability, CapabilitySet};
use crate::egress::EgressEntry;
use crate::isolation::Isolation;
use crate::limits::TransferLimits;
use crate::outputs::{names_collide, shown_name, DeclaredOutput, Disposition, OutputError};
use crate::yaml::{self, pos};

mod checks;
mod compare;
mod secrets;
use checks::{check_count, check_image, check_memory, check_name, check_work_dir, check_workspace};
pub use secrets::PlaceholderAsk;
use secrets::{secrets_of, RawSecret};

/// The guest working directory a spec that names none gets.
pub const DEFAULT_WORK_DIR: &str = cordon_policy::cases::DEFAULT_WORK_DIR;

/// The largest spec file read.
pub const MAX_SPEC_BYTES: u64 = 1 << 20;

/// A secret's name, checked by [`cordon_policy::canon::secret_name`]: the
/// same spelling the policy's `secret.name` sees.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretName(String);

impl SecretName {
    pub fn parse(raw: &str) -> Result<SecretName, canon::CanonError> {
        canon::secret_name(raw).map(SecretName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Resources a workload asks for. An unstated ask gets the policy's bound
/// for the identity; an ask above that bound is refused at acquire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ResourceAsk {
    /// Bytes.
    pub memory: Option<u64>,
    pub processes: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub wall_seconds: Option<u64>,
    /// Bytes the workload may write to each writable filesystem it has
    /// (the policy's `max_disk`).
    pub disk: Option<u64>,
}

/// A sandbox spec. Built by [`SandboxSpec::new`] and the `with_*` methods, or
/// loaded by [`SandboxSpec::from_yaml`]; every field is checked on the way
/// in, so a spec that exists is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    kind: String,
    image: String,
    egress_allow: Vec<EgressEntry>,
    work_dir: String,
    /// A host directory the work dir is made from, copy-on-write.
    workspace: Option<String>,
    requires: CapabilitySet,
    min_isolation: Option<Isolation>,
    resources: ResourceAsk,
    secrets: Vec<SecretName>,
    /// The secrets (among `secrets`) asked for `as: placeholder`.
    placeholders: Vec<PlaceholderAsk>,
    declared_outputs: Vec<DeclaredOutput>,
    files_out: Option<TransferLimits>,
    outputs_named_at_call_time: bool,
}

/// A spec that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The text is not YAML cordon reads.
    #[error("{file}:{line}:{column}: {message}; fix the YAML syntax (anchors, aliases, tags and duplicate keys are not accepted)")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A field that is unknown, missing or of the wrong shape.
    #[error("{file}:{line}:{column}: {message}")]
    Structure {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A field whose value is refused.
    #[error("{file}:{line}:{column}: `{field}`: {reason}")]
    Value {
        file: String,
        line: usize,
        column: usize,
        field: &'static str,
        reason: String,
    },
    /// A value refused when a spec is built in code.
    #[error("spec field `{field}` is refused: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// The spec file could not be read.
    #[error("cannot read spec `{file}`: {reason}; check the path and that it is a file of at most 1 MiB")]
    Read { file: String, reason: String },
}

impl SandboxSpec {
    /// A spec with the closed configuration: no network, no required
    /// capabilities, no floor of its own, no resource asks, no secrets, work
    /// directory [`DEFAULT_WORK_DIR`].
    pub fn new(kind: &str, image: &str) -> Result<SandboxSpec, SpecError> {
        let invalid = |field| move |reason| SpecError::Invalid { field, reason };
        Ok(SandboxSpec {
            kind: check_name("diagram", kind).map_err(invalid("kind"))?,
            image: check_image(image).map_err(invalid("image"))?,
            egress_allow: Vec::new(),
            work_dir: DEFAULT_WORK_DIR.to_string(),
            workspace: None,
            requires: CapabilitySet::empty(),
            min_isolation: None,
            resources: ResourceAsk::default(),
            secrets: Vec::new(),
            placeholders: Vec::new(),
            declared_outputs: Vec::new(),
            files_out: None,
            outputs_named_at_call_time: false,
        })
    }

    /// Declares the outputs and the caps on reading them back; `files_out`
    /// joins `requires`. Two outputs at one path, or two landing names that
    /// are one file at the destination, are refused.
    pub fn with_outputs(
        mut self,
        files_out: TransferLimits,
        outputs: impl IntoIterator<Item = DeclaredOutput>,
    ) -> Result<SandboxSpec, SpecError> {
        let invalid = |field| move |reason| SpecError::Invalid { field, reason };
        check_limits(&files_out).map_err(invalid("files_out"))?;
        let outputs: Vec<DeclaredOutput> = outputs.into_iter().collect();
        check_outputs(&outputs).map_err(invalid("declared_outputs"))?;
        self.files_out = Some(files_out);
        self.declared_outputs = outputs;
        self.requires.insert(Capability::FilesOut);
        Ok(self)
    }

    /// Lets a collection name its outputs at call time
    /// (`cordon_collect::Collection::named_at_call_time`), under these caps;
    /// `files_out` joins `requires`. Without it, naming outputs at call time
    /// is refused: the tool would land artifacts behind both the sink and the
    /// cap the spec agreed.
    pub fn with_outputs_named_at_call_time(
        mut self,
        files_out: TransferLimits,
    ) -> Result<SandboxSpec, SpecError> {
        check_limits(&files_out).map_err(|reason| SpecError::Invalid {
            field: "files_out",
            reason,
        })?;
        if self.files_out.is_some_and(|l| l != files_out) {
            return Err(SpecError::Invalid {
                field: "files_out",
                reason: "the spec already has other caps; give one `files_out`".into(),
            });
        }
        self.files_out = Some(files_out);
        self.outputs_named_at_call_time = true;
        self.requires.insert(Capability::FilesOut);
        Ok(self)
    }

    /// Replaces the allowlist. Duplicates are refused.
    pub fn with_egress_allow(
        mut self,
        entries: impl IntoIterator<Item = EgressEntry>,
    ) -> Result<SandboxSpec, SpecError> {
        let mut out: Vec<EgressEntry> = Vec::new();
        for e in entries {
            if out.contains(&e) {
                return Err(SpecError::Invalid {
                    field: "egress_allow",
                    reason: format!("`{e}` is listed twice; list each entry once"),
                });
            }
            out.push(e);
        }
        self.egress_allow = out;
        Ok(self)
    }

    pub fn with_work_dir(mut self, dir: &str) -> Result<SandboxSpec, SpecError> {
        self.work_dir = check_work_dir(dir).map_err(|reason| SpecError::Invalid {
            field: "work_dir",
            reason,
        })?;
        Ok(self)
    }

    /// Replaces the required capabilities; `files_out` stays in while the
    /// spec declares outputs.
    pub fn with_requires(mut self, caps: impl IntoIterator<Item = Capability>) -> SandboxSpec {
        self.requires = caps.into_iter().collect();
        if self.files_out.is_some() {
            self.requires.insert(Capability::FilesOut);
        }
        if self.workspace.is_some() {
            self.requires.insert(Capability::Workspace);
        }
        self
    }

    /// The same spec, also requiring `cap`.
    pub fn requiring(mut self, cap: Capability) -> SandboxSpec {
        self.requires.insert(cap);
        self
    }

    /// A floor for this spec alone. The router applies the stricter of this
    /// and the host's floor, so it can only raise it.
    pub fn with_min_isolation(mut self, floor: Isolation) -> SandboxSpec {
        self.min_isolation = Some(floor);
        self
    }

    /// Resource asks; a zero ask is refused.
    pub fn with_resources(mut self, ask: ResourceAsk) -> Result<SandboxSpec, SpecError> {
        let fields = [
            ("resources.memory", ask.memory),
            ("resources.processes", ask.processes),
            ("resources.cpu_seconds", ask.cpu_seconds),
            ("resources.wall_seconds", ask.wall_seconds),
            ("resources.disk", ask.disk),
        ];
        for (field, v) in fields {
            if v == Some(0) {
                return Err(SpecError::Invalid {
                    field,
                    reason: "0 leaves nothing to run; leave the ask out to take the policy's bound"
                        .into(),
                });
            }
        }
        self.resources = ask;
        Ok(self)
    }

    /// Replaces the secrets. Duplicates are refused.
    pub fn with_secrets(
        mut self,
        names: impl IntoIterator<Item = SecretName>,
    ) -> Result<SandboxSpec, SpecError> {
        let mut out: Vec<SecretName> = Vec::new();
        for n in names {
            if out.contains(&n) {
                return Err(SpecError::Invalid {
                    field: "secrets",
                    reason: format!("`{n}` is listed twice; list each secret once"),
                });
            }
            out.push(n);
        }
        self.secrets = out;
        Ok(self)
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn image(&self) -> &str {
        &self.image
    }
    /// Everything not named is denied; empty means no network.
    pub fn egress_allow(&self) -> &[EgressEntry] {
        &self.egress_allow
    }
    pub fn work_dir(&self) -> &str {
        &self.work_dir
    }
    /// The host directory the work dir is made from, copy-on-write.
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }
    /// Makes the work dir from the host directory `dir` (absolute,
    /// canonical), copy-on-write: `workspace` joins `requires`.
    pub fn with_workspace(mut self, dir: &str) -> Result<SandboxSpec, SpecError> {
        self.workspace = Some(check_workspace(dir).map_err(|reason| SpecError::Invalid {
            field: "workspace",
            reason,
        })?);
        self.requires.insert(Capability::Workspace);
        Ok(self)
    }
    pub fn requires(&self) -> &CapabilitySet {
        &self.requires
    }
    pub fn min_isolation(&self) -> Option<Isolation> {
        self.min_isolation
    }
    pub fn resources(&self) -> &ResourceAsk {
        &self.resources
    }
    /// Every secret asked for, placeholders included.
    pub fn secrets(&self) -> &[SecretName] {
        &self.secrets
    }
    /// The secrets asked for `as: placeholder`, with where each may go.
    pub fn placeholders(&self) -> &[PlaceholderAsk] {
        &self.placeholders
    }
    /// Whether `name` is asked for as a placeholder.
    pub fn placeholder(&self, name: &SecretName) -> Option<&PlaceholderAsk> {
        self.placeholders.iter().find(|p| &p.name == name)
    }
    /// In declaration order.
    pub fn declared_outputs(&self) -> &[DeclaredOutput] {
        &self.declared_outputs
    }
    /// The caps on reading outputs back; present whenever outputs are
    /// declared or named at call time.
    pub fn files_out(&self) -> Option<&TransferLimits> {
        self.files_out.as_ref()
    }
    pub fn outputs_named_at_call_time(&self) -> bool {
        self.outputs_named_at_call_time
    }

    /// Reads a spec file.
    pub fn from_file(path: &Path) -> Result<SandboxSpec, SpecError> {
        let file = path.display().to_string();
        let read = |reason: String| SpecError::Read {
            file: file.clone(),
            reason,
        };
        let text = yaml::read_file(path, MAX_SPEC_BYTES).map_err(read)?;
        SandboxSpec::from_yaml(&file, &text)
    }

    /// Loads a spec from YAML text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<SandboxSpec, SpecError> {
        tracing::debug!(target: "cordon::load", spec = file, "parsing a spec");
        let raw: RawSpec = yaml::load(text).map_err(|f| {
            let file = file.to_string();
            if f.syntax {
                SpecError::Syntax {
                    file,
                    line: f.line,
                    column: f.column,
                    message: f.message,
                }
            } else {
                SpecError::Structure {
                    file,
                    line: f.line,
                    column: f.column,
                    message: f.message,
                }
            }
        })?;
        raw.validate(file)
    }
}

fn check_limits(l: &TransferLimits) -> Result<(), String> {
    for (field, v) in [
        ("max_bytes_per_file", l.max_bytes_per_file),
        ("max_total_bytes", l.max_total_bytes),
        ("max_files", l.max_files),
    ] {
        if v == 0 {
            return Err(format!(
                "`{field}` is 0, which lets nothing out; drop the outputs, or give a positive cap"
            ));
        }
    }
    Ok(())
}

/// Two outputs at one path, or two landing names that are one file.
fn check_outputs(outputs: &[DeclaredOutput]) -> Result<(), String> {
    for (i, a) in outputs.iter().enumerate() {
        for b in &outputs[..i] {
            if a.path() == b.path() {
                return Err(format!(
                    "`{}` is declared twice; declare each output once",
                    a.path()
                ));
            }
            if a.disposition() == Disposition::Land && b.disposition() == Disposition::Land {
                if let Some(how) = names_collide(b.name(), a.name()) {
                    return Err(format!(
                        "landing names {} and {} {how}, so they are one file at the destination; give one a distinct `name`",
                        shown_name(b.name()),
                        shown_name(a.name())
                    ));
                }
            }
        }
    }
    Ok(())
}

fn value_error(file: &str, at: (usize, usize), field: &'static str, reason: String) -> SpecError {
    SpecError::Value {
        file: file.to_string(),
        line: at.0,
        column: at.1,
        field,
        reason,
    }
}

// What the loader reads is this shape; the JSON Schema of it
// (`spec_json_schema`) is generated from these types, so an editor checks
// against what cordon reads.
/// A cordon sandbox spec: what one sandbox is for, what it may reach, what
/// it asks for and what comes back (docs/spec.md).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "cordon sandbox spec")]
struct RawSpec {
    /// What the sandbox is for (`run`, `chart`, `codeact`): 1-256 bytes of
    /// `A-Z a-z 0-9 - _ . : / @ +`.
    #[schemars(with = "String")]
    kind: Spanned<String>,
    /// The root filesystem: `host`, or an image of cordon's store.
    #[schemars(with = "String")]
    image: Spanned<String>,
    /// Where the work dir appears inside the sandbox: an absolute canonical
    /// path, not `/` (default `/workspace`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    work_dir: Option<Spanned<String>>,
    /// A host directory the work dir is made from, copy-on-write: the
    /// sandbox sees its files, its changes stay on the sandbox's volume
    /// until the host applies them. An absolute, canonical host path.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    workspace: Option<Spanned<String>>,
    /// Hosts the workload may reach through the egress proxy: `host[:port]`
    /// or `*.domain[:port]` (port 443 by default); no IP addresses.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    egress_allow: Vec<Spanned<String>>,
    /// Capabilities the backend must offer.
    #[serde(default)]
    #[schemars(schema_with = "capability_names")]
    requires: Vec<Spanned<String>>,
    /// The weakest rung accepted; raises the host's floor, never lowers it.
    #[serde(default)]
    #[schemars(schema_with = "rung_name")]
    min_isolation: Option<Spanned<String>>,
    /// Resources asked for; an unstated one gets the policy's bound, one
    /// above it is refused.
    #[serde(default)]
    resources: Option<RawResources>,
    /// Secrets asked for by name (a relative path, `team/db-password`),
    /// or `{name, as: placeholder, to: [host, ...]}`.
    #[serde(default)]
    #[schemars(with = "Vec<RawSecret>")]
    secrets: Vec<Spanned<RawSecret>>,
    /// The files `collect` brings back.
    #[serde(default)]
    declared_outputs: Vec<RawOutput>,
    /// Caps on what comes back; required with outputs.
    #[serde(default)]
    files_out: Option<RawLimits>,
    /// The kind names its outputs per call instead of in the spec.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    outputs_named_at_call_time: Option<Spanned<bool>>,
}

// The names a field takes, for the schema, from the types that read them
// (never a second list that could drift).
fn names_schema(names: Vec<&'static str>, list: bool) -> schemars::Schema {
    let one = serde_json::json!({"type": "string", "enum": names});
    let v = if list {
        serde_json::json!({"type": "array", "items": one})
    } else {
        one
    };
    schemars::Schema::try_from(v).unwrap_or_default()
}

fn capability_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    names_schema(Capability::ALL.iter().map(|c| c.as_str()).collect(), true)
}

fn rung_name(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    names_schema(Isolation::ALL.iter().map(|i| i.as_str()).collect(), false)
}

fn disposition_name(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    names_schema(
        [Disposition::Land, Disposition::Consume]
            .iter()
            .map(|d| d.as_str())
            .collect(),
        false,
    )
}

/// A size: binary units (`512MiB`, `4KiB`, `1GiB`) or plain bytes.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "a schema-only type")]
enum Size {
    Text(String),
    Bytes(u64),
}

/// A whole number above 0 (YAML may write it bare or quoted).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "a schema-only type")]
enum Count {
    Number(u64),
    Text(String),
}

/// One declared output.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    /// Where the workload writes it, relative to the work dir; literal.
    #[schemars(with = "String")]
    path: Spanned<String>,
    /// What the host is told it is (`image/png`); never sniffed.
    #[schemars(with = "String")]
    media_type: Spanned<String>,
    /// Whether a missing file fails the collection (default true).
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    required: Option<Spanned<bool>>,
    /// The name it lands under (default: the path).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    name: Option<Spanned<String>>,
    /// `land` (to the host's sink, default) or `consume`.
    #[serde(default)]
    #[schemars(schema_with = "disposition_name")]
    disposition: Option<Spanned<String>>,
}

/// Caps on what comes back.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    /// The largest file.
    #[schemars(with = "Size")]
    max_bytes_per_file: Spanned<String>,
    /// All files together.
    #[schemars(with = "Size")]
    max_total_bytes: Spanned<String>,
    /// How many files.
    #[schemars(with = "Count")]
    max_files: Spanned<String>,
}

/// Resources asked for.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawResources {
    /// Memory bound (a size).
    #[serde(default)]
    #[schemars(with = "Option<Size>")]
    memory: Option<Spanned<String>>,
    /// Processes and threads at once.
    #[serde(default)]
    #[schemars(with = "Option<Count>")]
    processes: Option<Spanned<String>>,
    /// CPU seconds before the workload is killed.
    #[serde(default)]
    #[schemars(with = "Option<Count>")]
    cpu_seconds: Option<Spanned<String>>,
    /// Wall-clock seconds before it is killed.
    #[serde(default)]
    #[schemars(with = "Option<Count>")]
    wall_seconds: Option<Spanned<String>>,
    /// Bytes it may write to each writable filesystem (a size).
    #[serde(default)]
    #[schemars(with = "Option<Size>")]
    disk: Option<Spanned<String>>,
}

/// The JSON Schema (draft 2020-12) of a spec file, generated from the
/// types the loader reads: `cordon spec schema` prints it.
pub fn spec_json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawSpec)).unwrap_or_default()
}

impl RawSpec {
    fn validate(self, file: &str) -> Result<SandboxSpec, SpecError> {
        let at = |field, s: &Spanned<String>, reason| value_error(file, pos(s), field, reason);
        let kind = check_name("diagram", &self.kind).map_err(|r| at("kind", &self.kind, r))?;
        let image = check_image(&self.image).map_err(|r| at("image", &self.image, r))?;
        let work_dir = match &self.work_dir {
            Some(w) => check_work_dir(w).map_err(|r| at("work_dir", w, r))?,
            None => DEFAULT_WORK_DIR.to_string(),
        };
        let workspace = match &self.workspace {
            Some(w) => Some(check_workspace(w).map_err(|r| at("workspace", w, r))?),
            None => None,
        };
        let mut egress_allow: Vec<EgressEntry> = Vec::new();
        for e in &self.egress_allow {
            let entry =
                EgressEntry::parse(e).map_err(|err| at("egress_allow", e, err.to_string()))?;
            if egress_allow.contains(&entry) {
                return Err(at(
                    "egress_allow",
                    e,
                    format!("`{entry}` is listed twice; list each entry once"),
                ));
            }
            egress_allow.push(entry);
        }
        let mut requires = CapabilitySet::empty();
        for c in &self.requires {
            let cap: Capability =
                c.parse()
                    .map_err(|err: crate::capability::CapabilityError| {
                        at("requires", c, err.to_string())
                    })?;
            requires.insert(cap);
        }
        let min_isolation = match &self.min_isolation {
            Some(m) => Some(
                m.parse::<Isolation>()
                    .map_err(|err| at("min_isolation", m, err.to_string()))?,
            ),
            None => None,
        };
        let resources = resources_of(self.resources.as_ref(), &at)?;
        let (secrets, placeholders) = secrets_of(&self.secrets, &egress_allow, &at)?;
        let declared_outputs = outputs_of(&self.declared_outputs, &at)?;
        let files_out = files_out_of(self.files_out.as_ref(), &at)?;
        let outputs_named_at_call_time = self
            .outputs_named_at_call_time
            .as_ref()
            .is_some_and(|b| **b);
        if (!declared_outputs.is_empty() || outputs_named_at_call_time) && files_out.is_none() {
            let reason = "outputs are declared (or named at call time) but `files_out` is not; add `files_out: {max_bytes_per_file: 8MiB, max_total_bytes: 16MiB, max_files: 4}` with caps that fit them".to_string();
            return Err(
                match (
                    self.declared_outputs.first(),
                    &self.outputs_named_at_call_time,
                ) {
                    (Some(o), _) => at("files_out", &o.path, reason),
                    (None, Some(b)) => value_error(file, pos(b), "files_out", reason),
                    (None, None) => value_error(file, (1, 1), "files_out", reason),
                },
            );
        }
        if files_out.is_some() {
            requires.insert(Capability::FilesOut);
        }
        if workspace.is_some() {
            requires.insert(Capability::Workspace);
        }
        Ok(SandboxSpec {
            kind,
            image,
            egress_allow,
            work_dir,
            workspace,
            requires,
            min_isolation,
            resources,
            secrets,
            placeholders,
            declared_outputs,
            files_out,
            outputs_named_at_call_time,
        })
    }
}

/// The type of the spec's position-taking error maker.
type At<'a> = dyn Fn(&'static str, &Spanned<String>, String) -> SpecError + 'a;

/// `resources`: each ask a size or a whole number, as the policy writes them.
fn resources_of(raw: Option<&RawResources>, at: &At<'_>) -> Result<ResourceAsk, SpecError> {
    let mut resources = ResourceAsk::default();
    if let Some(r) = raw {
        if let Some(v) = &r.memory {
            resources.memory = Some(check_memory(v).map_err(|e| at("resources.memory", v, e))?);
        }
        if let Some(v) = &r.processes {
            resources.processes =
                Some(check_count(v).map_err(|e| at("resources.processes", v, e))?);
        }
        if let Some(v) = &r.cpu_seconds {
            resources.cpu_seconds =
                Some(check_count(v).map_err(|e| at("resources.cpu_seconds", v, e))?);
        }
        if let Some(v) = &r.wall_seconds {
            resources.wall_seconds =
                Some(check_count(v).map_err(|e| at("resources.wall_seconds", v, e))?);
        }
        if let Some(v) = &r.disk {
            resources.disk = Some(check_memory(v).map_err(|e| at("resources.disk", v, e))?);
        }
    }
    Ok(resources)
}

/// `declared_outputs`: each a literal path with a media type, landing
/// names that do not collide.
fn outputs_of(raw: &[RawOutput], at: &At<'_>) -> Result<Vec<DeclaredOutput>, SpecError> {
    let mut declared_outputs: Vec<DeclaredOutput> = Vec::new();
    for o in raw {
        let out = |s: &Spanned<String>, e: OutputError| at("declared_outputs", s, e.to_string());
        let mut d = DeclaredOutput::new(&o.path, &o.media_type).map_err(|e| match e {
            OutputError::MediaType { .. } => out(&o.media_type, e),
            e => out(&o.path, e),
        })?;
        if let Some(r) = &o.required {
            if !**r {
                d = d.optional();
            }
        }
        if let Some(n) = &o.name {
            d = d.with_name(n).map_err(|e| out(n, e))?;
        }
        if let Some(raw) = &o.disposition {
            d = d.with_disposition(match raw.as_str() {
                "land" => Disposition::Land,
                "consume" => Disposition::Consume,
                other => {
                    return Err(out(
                        raw,
                        OutputError::Disposition {
                            raw: other.to_string(),
                        },
                    ))
                }
            });
        }
        declared_outputs.push(d);
        check_outputs(&declared_outputs).map_err(|r| at("declared_outputs", &o.path, r))?;
    }
    Ok(declared_outputs)
}

/// `files_out`: three caps, each positive.
fn files_out_of(raw: Option<&RawLimits>, at: &At<'_>) -> Result<Option<TransferLimits>, SpecError> {
    let files_out = match raw {
        Some(l) => {
            let size = |field, v: &Spanned<String>| {
                canon::size(v).map_err(|e| at(field, v, e.to_string()))
            };
            let limits = TransferLimits {
                max_bytes_per_file: size("files_out.max_bytes_per_file", &l.max_bytes_per_file)?,
                max_total_bytes: size("files_out.max_total_bytes", &l.max_total_bytes)?,
                max_files: l.max_files.parse::<u64>().map_err(|_| {
                    at(
                        "files_out.max_files",
                        &l.max_files,
                        format!(
                            "`{}` is not a whole number; write it like `4`",
                            &*l.max_files
                        ),
                    )
                })?,
            };
            for (field, v, raw) in [
                (
                    "files_out.max_bytes_per_file",
                    limits.max_bytes_per_file,
                    &l.max_bytes_per_file,
                ),
                (
                    "files_out.max_total_bytes",
                    limits.max_total_bytes,
                    &l.max_total_bytes,
                ),
                ("files_out.max_files", limits.max_files, &l.max_files),
            ] {
                if v == 0 {
                    return Err(at(
                        field,
                        raw,
                        "0 lets nothing out; drop the outputs, or give a positive cap".into(),
                    ));
                }
            }
            Some(limits)
        }
        None => None,
    };
    Ok(files_out)
}
