//! Files out: what a workload declares it will produce, and
//! `cordon_collect::collect_outputs`, which reads exactly that back — in phases that are
//! part of the contract — and hands the landing ones to an [`OutputSink`](crate::OutputSink).
//!
//! Two narrownesses are deliberate. cordon never discovers what a workload
//! produced: a [`DeclaredOutput`] is a literal path relative to `work_dir`
//! (a pattern would mean listing a directory, which `files_list` gates).
//! And cordon never decides where bytes go: the host passes a sink.
//!
//! # The phases
//!
//! 1. **The declaration alone.** A sink exists for anything that lands,
//!    every landing name is valid ([`validate_artifact_name`]), and no two
//!    landing names are one file at the destination: identical, different
//!    only by case, or only by Unicode normalisation form (NFC/NFD), or one
//!    the parent directory of the other. The sandbox is not touched.
//! 2. **Stat and cap.** Every declared output is stat-ed without following
//!    links; a missing required output, a non-regular file, a size the
//!    backend cannot report and every cap of [`TransferLimits`](crate::TransferLimits) are refused
//!    here. `consume` outputs count against every cap.
//! 3. **Read.** Each present output is read through
//!    [`Sandbox::read_file`](crate::Sandbox::read_file), bounded to the per-file cap (or what is left
//!    of the total) plus one byte, and the caps are checked again on what
//!    was read: the stat of phase 2 is never trusted for the bytes.
//! 4. **Deliver.** Only now does anything reach the sink, in declaration
//!    order. Delivery is a push nothing can take back, so no refusal of
//!    cordon's own comes after the first delivery; a sink's own failure
//!    there is reported with the artifacts already delivered.
//!
//! # Warm reuse: a fresh directory per call
//!
//! A warm sandbox serves many rounds, so a file an earlier round left must
//! never come back as this round's. A kind whose sandbox is reused has each
//! round write into a fresh directory (`cordon_collect::CallDir`) and collects from there
//! (`Collection::in_call_dir`): the declared paths are read beneath the
//! call directory, and the landing names drop it. Create the directory
//! with a plain `mkdir` (not `mkdir -p`) at the start of the round, so a
//! directory that already exists fails the round instead of serving stale
//! files (`CallDir::create`).

use std::fmt;

use unicode_normalization::UnicodeNormalization;

/// Where a collected output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// To the host's sink; the question is confidentiality.
    Land,
    /// Parsed by the kind that asked for it; the question is integrity.
    /// Still counted against every cap.
    Consume,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Land => "land",
            Disposition::Consume => "consume",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A declaration that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("output path `{path}` holds `{glob}`: outputs are literal paths; a kind that cannot name its outputs in advance must enumerate a directory, which needs the `files_list` capability, not `files_out`")]
    Glob { path: String, glob: char },
    #[error("output path `{path}` is refused: {source}")]
    Path {
        path: String,
        source: ArtifactNameError,
    },
    #[error("output name `{name}` is refused: {source}")]
    Name {
        name: String,
        source: ArtifactNameError,
    },
    #[error("media type `{raw}` is refused: {reason}; declare it like `image/png` (it is never sniffed from the bytes)")]
    MediaType { raw: String, reason: String },
    #[error("disposition `{raw}` is not one; write `land` or `consume`")]
    Disposition { raw: String },
    #[error("call id `{id}` is refused: {reason}")]
    CallId { id: String, reason: String },
}

/// One artifact a workload will produce, named before it runs.
///
/// Built by [`DeclaredOutput::new`] and the `with_*`/`optional`/`consumed`
/// methods, or loaded with the spec; a value that exists is valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeclaredOutput {
    path: String,
    media_type: String,
    required: bool,
    name: Option<String>,
    disposition: Disposition,
}

/// Characters that would make a path a pattern. They are refused so that a
/// glob cannot be mistaken for a literal name.
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

fn check_media_type(raw: &str) -> Result<String, OutputError> {
    let refuse = |reason: &str| OutputError::MediaType {
        raw: raw.to_string(),
        reason: reason.to_string(),
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.len() <= 127
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let Some((top, sub)) = raw.split_once('/') else {
        return Err(refuse("it has no `/`"));
    };
    if !token(top) || !token(sub) {
        return Err(refuse(
            "its type and subtype must be tokens of letters, digits and `!#$&-^_.+`",
        ));
    }
    Ok(raw.to_ascii_lowercase())
}

impl DeclaredOutput {
    /// A required, landing output whose name is its path.
    pub fn new(path: &str, media_type: &str) -> Result<DeclaredOutput, OutputError> {
        if let Some(glob) = path.chars().find(|c| GLOB_CHARS.contains(c)) {
            return Err(OutputError::Glob {
                path: path.to_string(),
                glob,
            });
        }
        validate_artifact_name(path).map_err(|source| OutputError::Path {
            path: path.to_string(),
            source,
        })?;
        Ok(DeclaredOutput {
            path: path.to_string(),
            media_type: check_media_type(media_type)?,
            required: true,
            name: None,
            disposition: Disposition::Land,
        })
    }

    /// Its absence is normal (a renderer that failed produced nothing, and
    /// the model needs that diagnostic, not a transfer error on top).
    pub fn optional(mut self) -> DeclaredOutput {
        self.required = false;
        self
    }

    /// The spelling it lands under, when that is not the path.
    pub fn with_name(mut self, name: &str) -> Result<DeclaredOutput, OutputError> {
        validate_artifact_name(name).map_err(|source| OutputError::Name {
            name: name.to_string(),
            source,
        })?;
        // A name that is the path is no name of its own: one spelling of
        // one declaration, so equal declarations compare equal.
        self.name = (name != self.path).then(|| name.to_string());
        Ok(self)
    }

    pub fn with_disposition(mut self, disposition: Disposition) -> DeclaredOutput {
        self.disposition = disposition;
        self
    }

    /// Parsed by the kind rather than landed.
    pub fn consumed(self) -> DeclaredOutput {
        self.with_disposition(Disposition::Consume)
    }

    /// Relative to the spec's `work_dir` (or the call directory).
    pub fn path(&self) -> &str {
        &self.path
    }
    /// As declared (lowercased); never sniffed.
    pub fn media_type(&self) -> &str {
        &self.media_type
    }
    pub fn required(&self) -> bool {
        self.required
    }
    /// The landing spelling: the declared name, or the path.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }
    pub fn disposition(&self) -> Disposition {
        self.disposition
    }
}

/// A landing name or output path refused by [`validate_artifact_name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactNameError {
    #[error("it is empty")]
    Empty,
    #[error("it is longer than {max} bytes; use a shorter name")]
    TooLong { max: usize },
    #[error("it is absolute; write it relative to the output directory, like `out/diagram.png`")]
    Absolute,
    #[error("it holds a backslash; separate directories with `/`")]
    Backslash,
    #[error("it holds a `..` segment; a name cannot leave its directory")]
    ParentSegment,
    #[error("it holds a `.` segment; write the name without it")]
    DotSegment,
    #[error("it holds an empty segment (`//` or a trailing `/`); write each directory once")]
    EmptySegment,
    #[error("segment `{segment}` is longer than 255 bytes")]
    SegmentTooLong { segment: String },
    #[error("it holds the control character U+{code:04X}; use printable characters")]
    Control { code: u32 },
}

/// The longest landing name or output path accepted.
pub const MAX_NAME_BYTES: usize = 1024;

/// Checks a landing name (or a declared path) lexically: refuses `..` and
/// `.` segments, absolute paths, backslashes, empty segments, NUL and every
/// other control character.
///
/// Lexical only: a name that cannot traverse says nothing about what
/// already sits where it resolves. A sink still confines its own
/// destination (see `cordon_files::FsSink`).
pub fn validate_artifact_name(name: &str) -> Result<(), ArtifactNameError> {
    if name.is_empty() {
        return Err(ArtifactNameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(ArtifactNameError::TooLong {
            max: MAX_NAME_BYTES,
        });
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(ArtifactNameError::Control { code: u32::from(c) });
    }
    if name.contains('\\') {
        return Err(ArtifactNameError::Backslash);
    }
    if name.starts_with('/') {
        return Err(ArtifactNameError::Absolute);
    }
    for segment in name.split('/') {
        match segment {
            "" => return Err(ArtifactNameError::EmptySegment),
            "." => return Err(ArtifactNameError::DotSegment),
            ".." => return Err(ArtifactNameError::ParentSegment),
            s if s.len() > 255 => {
                return Err(ArtifactNameError::SegmentTooLong {
                    segment: s.to_string(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// How two landing names are one file at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collision {
    Identical,
    /// Differ only by case (one file on a case-insensitive filesystem).
    Case,
    /// Differ only by Unicode form, NFC/NFD or compatibility (one file on a
    /// normalising filesystem).
    Normalisation,
    /// One names a directory the other needs to be a file.
    Parent,
}

impl fmt::Display for Collision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Collision::Identical => "are identical",
            Collision::Case => "differ only by case",
            Collision::Normalisation => "differ only by Unicode normalisation form",
            Collision::Parent => "would be a file and a directory at once",
        })
    }
}

/// The form under which two names are one file on any filesystem cordon
/// may land on: compatibility-normalised, then lowercased, normalised again.
fn fold(name: &str) -> String {
    let decomposed: String = name.nfkd().collect();
    decomposed.to_lowercase().nfkc().collect()
}

/// A name in backticks; a name with non-ASCII characters is followed by
/// its escaped spelling, so two names that differ only by Unicode form do
/// not read the same in an error.
pub fn shown_name(name: &str) -> String {
    if name.is_ascii() {
        return format!("`{name}`");
    }
    let escaped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                format!("\\u{{{:x}}}", u32::from(c))
            }
        })
        .collect();
    format!("`{name}` (`{escaped}`)")
}

/// Whether `a` and `b` are one file at the destination, and how.
pub fn names_collide(a: &str, b: &str) -> Option<Collision> {
    if a == b {
        return Some(Collision::Identical);
    }
    let (fa, fb) = (fold(a), fold(b));
    if fa == fb {
        let (na, nb): (String, String) = (a.nfkc().collect(), b.nfkc().collect());
        return Some(if na == nb {
            Collision::Normalisation
        } else if a.to_lowercase() == b.to_lowercase() {
            Collision::Case
        } else {
            // Both differ; either is reason enough.
            Collision::Normalisation
        });
    }
    let under = |dir: &str, file: &str| file.starts_with(dir) && file[dir.len()..].starts_with('/');
    if under(&fa, &fb) || under(&fb, &fa) {
        return Some(Collision::Parent);
    }
    None
}

/// The environment cordon's own guest commands (`mkdir`, the kits'
/// workloads and planting) run with: a `PATH`, nothing else.
pub fn plain_env() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(
        "PATH".to_string(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
    )])
}
