//! The host's floor, from wherever it is configured.
//!
//! A floor may come from the `--min-isolation` flag, the
//! `CORDON_MIN_ISOLATION` environment variable, or `min_isolation:` in a
//! host configuration file, in that precedence; with none, it is `microvm`.
//! Every source that is present is checked, including those a higher one
//! overrides: an unknown rung string is refused wherever it comes from, so a
//! broken setting cannot lie in wait for the day the flag is dropped.

use std::fmt;
use std::path::Path;

use marked_yaml::Spanned;
use serde::Deserialize;

use cordon_sandbox::yaml::{self, pos};
use cordon_sandbox::{Isolation, IsolationError};

/// The environment variable a floor may come from.
pub const FLOOR_ENV: &str = "CORDON_MIN_ISOLATION";

/// The largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A host configuration file: `min_isolation`, and `egress` (how the
/// egress proxy resolves names and where it audits). Unknown keys are
/// refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The file, as named in messages.
    pub file: String,
    pub min_isolation: Option<Isolation>,
    /// `egress: {nameservers: [ADDR:PORT...], hosts_file: PATH, audit: PATH,
    /// audit_bounds: {rotate_bytes, keep, sandbox_bytes_per_sec,
    /// sandbox_burst_bytes}}`;
    /// absent: the system's resolver and the default audit log.
    pub egress: Option<cordon_sandbox::registry::EgressSetup>,
    /// `snapshots: {dir: PATH, quota_per_scope: SIZE}`: where snapshots
    /// are kept (default `$CORDON_SNAPSHOT_DIR`, else
    /// `/var/lib/cordon/snapshots`) and how many bytes of files each
    /// scope's snapshots hold together (default 4GiB).
    pub snapshots: SnapshotConfig,
}

/// Where snapshots are kept, and each scope's quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConfig {
    pub dir: Option<std::path::PathBuf>,
    pub quota_per_scope: u64,
}

impl Default for SnapshotConfig {
    fn default() -> SnapshotConfig {
        SnapshotConfig {
            dir: None,
            quota_per_scope: crate::snapshots::DEFAULT_QUOTA_PER_SCOPE,
        }
    }
}

/// A configuration that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration `{file}`: {reason}; check the path and that it is a file of at most 1 MiB")]
    Read { file: String, reason: String },
    #[error("{file}:{line}:{column}: {message}; fix the YAML syntax (anchors, aliases, tags and duplicate keys are not accepted)")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}:{line}:{column}: {message}")]
    Structure {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}:{line}:{column}: `min_isolation`: {source}")]
    Rung {
        file: String,
        line: usize,
        column: usize,
        source: IsolationError,
    },
    #[error("`--min-isolation`: {source}")]
    Flag { source: IsolationError },
    #[error("environment variable `{FLOOR_ENV}`: {source}; fix or unset it")]
    Env { source: IsolationError },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    min_isolation: Option<Spanned<String>>,
    #[serde(default)]
    egress: Option<RawEgress>,
    #[serde(default)]
    snapshots: Option<RawSnapshots>,
}

/// A `snapshots:` section as a configuration file holds it (the host
/// configuration's, `cordon serve`'s); [`snapshots_of`] checks it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSnapshots {
    #[serde(default)]
    dir: Option<Spanned<String>>,
    #[serde(default)]
    quota_per_scope: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
/// An `egress:` section as a configuration file holds it (the host
/// configuration's, `cordon serve`'s); [`egress_setup`] checks it.
pub struct RawEgress {
    #[serde(default)]
    nameservers: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    hosts_file: Option<Spanned<String>>,
    #[serde(default)]
    audit: Option<Spanned<String>>,
    #[serde(default)]
    audit_bounds: Option<Spanned<cordon_sandbox::registry::AuditBounds>>,
}

impl HostConfig {
    pub fn from_yaml(file: &str, text: &str) -> Result<HostConfig, ConfigError> {
        let raw: RawConfig = yaml::load(text).map_err(|f| {
            let file = file.to_string();
            if f.syntax {
                ConfigError::Syntax {
                    file,
                    line: f.line,
                    column: f.column,
                    message: f.message,
                }
            } else {
                ConfigError::Structure {
                    file,
                    line: f.line,
                    column: f.column,
                    message: f.message,
                }
            }
        })?;
        let min_isolation = match &raw.min_isolation {
            None => None,
            Some(s) => Some(s.parse::<Isolation>().map_err(|source| {
                let (line, column) = pos(s);
                ConfigError::Rung {
                    file: file.to_string(),
                    line,
                    column,
                    source,
                }
            })?),
        };
        let egress = match raw.egress {
            None => None,
            Some(e) => Some(egress_setup(file, e)?),
        };
        let snapshots = match &raw.snapshots {
            Some(r) => snapshots_of(file, r)?,
            None => SnapshotConfig::default(),
        };
        Ok(HostConfig {
            file: file.to_string(),
            min_isolation,
            egress,
            snapshots,
        })
    }

    pub fn from_file(path: &Path) -> Result<HostConfig, ConfigError> {
        let file = path.display().to_string();
        let read = |reason: String| ConfigError::Read {
            file: file.clone(),
            reason,
        };
        let text = yaml::read_file(path, MAX_CONFIG_BYTES).map_err(read)?;
        HostConfig::from_yaml(&file, &text)
    }
}

/// Checks a `snapshots:` section of `file`: an absolute `dir`, a size.
pub fn snapshots_of(file: &str, r: &RawSnapshots) -> Result<SnapshotConfig, ConfigError> {
    let mut snapshots = SnapshotConfig::default();
    let at = |v: &Spanned<String>, message: String| {
        let (line, column) = pos(v);
        ConfigError::Structure {
            file: file.to_string(),
            line,
            column,
            message,
        }
    };
    if let Some(d) = &r.dir {
        if !d.starts_with('/') {
            return Err(at(
                d,
                format!("`snapshots.dir`: `{}` is not an absolute path", &**d),
            ));
        }
        snapshots.dir = Some(std::path::PathBuf::from(&**d));
    }
    if let Some(q) = &r.quota_per_scope {
        snapshots.quota_per_scope = cordon_policy::canon::size(q)
            .map_err(|e| at(q, format!("`snapshots.quota_per_scope`: {e}")))?;
    }
    Ok(snapshots)
}

/// Checks an `egress:` section of `file`: addresses parse, paths are
/// absolute; each refusal positioned.
pub fn egress_setup(
    file: &str,
    e: RawEgress,
) -> Result<cordon_sandbox::registry::EgressSetup, ConfigError> {
    let at = |s: &Spanned<String>, message: String| {
        let (line, column) = pos(s);
        ConfigError::Structure {
            file: file.to_string(),
            line,
            column,
            message,
        }
    };
    let path = |s: &Spanned<String>, what: &str| {
        let p = std::path::PathBuf::from(s.as_str());
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(at(
                s,
                format!(
                    "`egress.{what}` must be an absolute path, got `{}`",
                    s.as_str()
                ),
            ))
        }
    };
    let nameservers = match e.nameservers {
        None => None,
        Some(list) => {
            let mut out = Vec::new();
            for s in &list {
                let a = s.as_str().parse::<std::net::SocketAddr>().map_err(|_| {
                    at(
                        s,
                        format!(
                            "`{}` is not a nameserver address; write `ADDR:PORT`, like `127.0.0.53:53` or `[::1]:53`",
                            s.as_str()
                        ),
                    )
                })?;
                out.push(a);
            }
            Some(out)
        }
    };
    let at_bounds = |s: &Spanned<cordon_sandbox::registry::AuditBounds>, message: String| {
        let (line, column) = pos(s);
        ConfigError::Structure {
            file: file.to_string(),
            line,
            column,
            message,
        }
    };
    let audit_bounds = match &e.audit_bounds {
        None => cordon_sandbox::registry::AuditBounds::default(),
        Some(b) => {
            b.check()
                .map_err(|why| at_bounds(b, format!("`egress.audit_bounds`: {why}")))?;
            **b
        }
    };
    Ok(cordon_sandbox::registry::EgressSetup {
        nameservers,
        hosts_file: e
            .hosts_file
            .as_ref()
            .map(|s| path(s, "hosts_file"))
            .transpose()?,
        audit: e.audit.as_ref().map(|s| path(s, "audit")).transpose()?,
        audit_bounds,
        proxy: None,
        policy_file: None,
    })
}

/// Where a floor came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloorSource {
    Flag,
    Env,
    Config { file: String },
    Default,
}

impl fmt::Display for FloorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FloorSource::Flag => f.write_str("`--min-isolation`"),
            FloorSource::Env => write!(f, "`{FLOOR_ENV}`"),
            FloorSource::Config { file } => write!(f, "`min_isolation` in `{file}`"),
            FloorSource::Default => f.write_str("the default"),
        }
    }
}

/// A resolved floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Floor {
    pub rung: Isolation,
    pub source: FloorSource,
}

/// Resolves the floor: flag, then environment, then configuration file,
/// then `microvm`. Every source given is checked.
pub fn resolve_floor(
    flag: Option<&str>,
    env: Option<&str>,
    config: Option<&HostConfig>,
) -> Result<Floor, ConfigError> {
    let flag = flag
        .map(|s| {
            s.parse::<Isolation>()
                .map_err(|source| ConfigError::Flag { source })
        })
        .transpose()?;
    let env = env
        .map(|s| {
            s.parse::<Isolation>()
                .map_err(|source| ConfigError::Env { source })
        })
        .transpose()?;
    let floor = if let Some(rung) = flag {
        Floor {
            rung,
            source: FloorSource::Flag,
        }
    } else if let Some(rung) = env {
        Floor {
            rung,
            source: FloorSource::Env,
        }
    } else if let Some((rung, file)) =
        config.and_then(|c| c.min_isolation.map(|r| (r, c.file.clone())))
    {
        Floor {
            rung,
            source: FloorSource::Config { file },
        }
    } else {
        Floor {
            rung: Isolation::DEFAULT_FLOOR,
            source: FloorSource::Default,
        }
    };
    Ok(floor)
}

/// The host configuration's part of the `load_spec` fuzz target (`fuzz/`):
/// whatever the bytes, the loader returns. Not API.
#[doc(hidden)]
pub fn fuzz_load(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = HostConfig::from_yaml("fuzz.yaml", text);
    }
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/load_spec` runs through the
    /// configuration loader here too (the spec loader replays it in
    /// `cordon_sandbox::fuzz`).
    #[test]
    fn the_load_spec_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/load_spec");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::fuzz_load(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
