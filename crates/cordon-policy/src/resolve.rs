//! Finding the files a policy extends. A policy may name only files beneath
//! the top file's directory (no absolute paths, no `..` or links that lead
//! out), so loading a policy cannot be used to read arbitrary files through
//! its diagnostics; and `cordon:NAME` names a layer built into cordon.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::model::MAX_FILE_BYTES;

/// One file's text, how it is shown, and the key cycles are detected by.
#[derive(Debug, Clone)]
pub struct Unit {
    pub name: Arc<str>,
    pub key: String,
    pub text: String,
}

/// A refusal: what is wrong and what to do.
pub type Refusal = (String, String);

/// Reads the file an `extends` entry names.
pub trait Resolve {
    /// Resolves `spec`, written in `from`, to a unit.
    fn resolve(&self, from: &Unit, spec: &str) -> Result<Unit, Refusal>;
}

/// Resolves nothing but built-in layers (a policy loaded from a string).
pub struct NoFiles;

impl Resolve for NoFiles {
    fn resolve(&self, _from: &Unit, spec: &str) -> Result<Unit, Refusal> {
        Err((
            format!("cannot extend `{spec}`: this policy was not loaded from a file"),
            "load the policy from a file, or extend only `cordon:NAME` layers".into(),
        ))
    }
}

/// In-memory files by name, for tests and embedders. `./` prefixes are
/// ignored; names are otherwise matched exactly.
#[derive(Debug, Clone, Default)]
pub struct MemoryFiles(pub BTreeMap<String, String>);

impl Resolve for MemoryFiles {
    fn resolve(&self, _from: &Unit, spec: &str) -> Result<Unit, Refusal> {
        let name = spec.trim_start_matches("./");
        match self.0.get(name) {
            Some(text) => Ok(Unit {
                name: Arc::from(name),
                key: name.to_string(),
                text: text.clone(),
            }),
            None => Err((
                format!("no policy file `{spec}`"),
                "check the name in `extends`".into(),
            )),
        }
    }
}

/// Files beneath one directory: the top file's.
pub struct FsResolver {
    /// The canonical directory every layer must lie beneath.
    root: PathBuf,
}

impl FsResolver {
    /// The resolver for a top file, and the top file itself.
    pub fn top(path: &Path) -> Result<(FsResolver, Unit), Refusal> {
        let real = path.canonicalize().map_err(|e| {
            (
                format!("cannot read the policy: {e}"),
                "check the path and its permissions".to_string(),
            )
        })?;
        let root = real.parent().map(Path::to_path_buf).unwrap_or_default();
        let text = read_bounded(&real)?;
        Ok((
            FsResolver { root },
            Unit {
                name: Arc::from(path.display().to_string()),
                key: real.display().to_string(),
                text,
            },
        ))
    }
}

impl Resolve for FsResolver {
    fn resolve(&self, from: &Unit, spec: &str) -> Result<Unit, Refusal> {
        let p = Path::new(spec);
        if spec.is_empty() {
            return Err(("an empty `extends` entry".into(), "name a file".into()));
        }
        if p.is_absolute() {
            return Err((
                format!("`{spec}` is an absolute path; layers are named relative to the file that extends them"),
                "write the path relative to this file, beneath the top policy file's directory".into(),
            ));
        }
        let from_real = Path::new(&from.key);
        let dir = from_real.parent().unwrap_or(&self.root);
        let real = dir.join(p).canonicalize().map_err(|e| {
            (
                format!("cannot read `{spec}`: {e}"),
                "check the path; it is relative to the file that names it".to_string(),
            )
        })?;
        if !real.starts_with(&self.root) {
            return Err((
                format!(
                    "`{spec}` leads out of the policy's directory tree ({})",
                    self.root.display()
                ),
                "keep every layer beneath the top policy file's directory; `..` and links may not lead out".into(),
            ));
        }
        let text = read_bounded(&real)?;
        let shown = lexical_join(Path::new(&*from.name).parent().unwrap_or(Path::new("")), p);
        Ok(Unit {
            name: Arc::from(shown.display().to_string()),
            key: real.display().to_string(),
            text,
        })
    }
}

fn read_bounded(real: &Path) -> Result<String, Refusal> {
    // Checked before opening too: opening a FIFO (or a device) for reading
    // can block forever, so only a regular file is ever opened.
    let kind = std::fs::metadata(real).map_err(|e| {
        (
            format!("cannot read `{}`: {e}", real.display()),
            "check the path and its permissions".to_string(),
        )
    })?;
    if !kind.is_file() {
        return Err((
            format!("`{}` is not a regular file", real.display()),
            "name a policy file".into(),
        ));
    }
    let f = std::fs::File::open(real).map_err(|e| {
        (
            format!("cannot read `{}`: {e}", real.display()),
            "check the path and its permissions".to_string(),
        )
    })?;
    let meta = f.metadata().map_err(|e| {
        (
            format!("cannot stat `{}`: {e}", real.display()),
            String::new(),
        )
    })?;
    if !meta.is_file() {
        return Err((
            format!("`{}` is not a regular file", real.display()),
            "name a policy file".into(),
        ));
    }
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| {
            (
                format!("cannot read `{}`: {e}", real.display()),
                "a policy file must be UTF-8".to_string(),
            )
        })?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err((
            format!("`{}` is larger than {MAX_FILE_BYTES} bytes", real.display()),
            "split the policy into layers".into(),
        ));
    }
    Ok(text)
}

/// `base/p` with `.` dropped and `..` applied lexically, for display only.
fn lexical_join(base: &Path, p: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Layers built into cordon, by the name after `cordon:`. Each is a policy
/// file under `crates/cordon-policy/builtin/`; `cordon policy show-default`
/// prints `cordon:default`.
pub const BUILTINS: &[(&str, &str)] = &[
    ("default", include_str!("../builtin/default.yaml")),
    ("no-privilege", include_str!("../builtin/no-privilege.yaml")),
];

/// The policy that applies when none is named.
pub const DEFAULT_NAME: &str = "cordon:default";

/// `cordon:spec-egress`: `cordon:default` whole, but for its egress
/// surface, which allows what a sandbox's spec names. A root of its own
/// (a layer that extends `cordon:default` could never widen its egress),
/// made from the default's text so the two never drift apart.
pub const SPEC_EGRESS: &str = "spec-egress";

/// The default's closed egress, as it is written there.
const DEFAULT_EGRESS: &str = "  egress:\n    allow: []\n";

/// What `cordon:spec-egress` says in its place.
const SPEC_EGRESS_RULES: &str =
    "  # cordon:spec-egress: the hosts a sandbox's spec names (`egress_allow`),
  # each reached through cordon's egress proxy, which still refuses every
  # address that is not public (loopback, private, link-local, metadata)
  # unless a root states `allow_ranges`. A later layer narrows it (its own
  # `egress.allow` must also allow).
  egress:
    allow:
      # Every request: the spec's `egress_allow` is the list, and the
      # proxy lets through nothing else.
      - name: hosts-the-spec-names
        when: \"true\"
";

/// `cordon:local-dev`: `cordon:spec-egress`, and the proxy may dial this
/// machine's loopback for the name `localhost` (only): what a workload
/// needs to reach a server the developer runs on the host. For local
/// development only — it opens the host's loopback services to whatever
/// `localhost` port a spec names.
pub const LOCAL_DEV: &str = "local-dev";

/// What `cordon:local-dev` adds to the egress surface.
const LOCAL_DEV_RANGES: &str = "  egress:
    # cordon:local-dev: the host's loopback, for the name `localhost` only
    # (a spec names `localhost:PORT`), through the proxy as any host.
    allow_ranges:
      - {cidr: 127.0.0.0/8, hosts: [localhost]}
      - {cidr: \"::1/128\", hosts: [localhost]}
";

/// The text of the built-in layer `name`.
fn builtin_text(name: &str) -> Option<String> {
    if name == LOCAL_DEV {
        let open = builtin_text(SPEC_EGRESS)?;
        let body = open.find("policy:").map_or(open.as_str(), |i| &open[i..]);
        let header = "# cordon:local-dev — cordon:spec-egress, and the host's loopback for the\n# name `localhost`: a workload reaches a server you run on this machine\n# (its spec names `localhost:PORT`). For development on your own machine.\n";
        return Some(format!(
            "{header}{}",
            body.replacen("  egress:\n", LOCAL_DEV_RANGES, 1)
        ));
    }
    if name == SPEC_EGRESS {
        let default = BUILTINS[0].1;
        let header_end = default.find("policy:").unwrap_or(0);
        let header = "# cordon:spec-egress — cordon:default, with egress to the hosts a\n# sandbox's spec names (`egress_allow`), at public addresses only.\n# Name it as your root (`extends: [\"cordon:spec-egress\"]`) to let a spec\n# reach hosts without copying the default.\n";
        return Some(format!(
            "{header}{}",
            default[header_end..].replacen(DEFAULT_EGRESS, SPEC_EGRESS_RULES, 1)
        ));
    }
    BUILTINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| (*t).to_string())
}

/// A built-in layer.
pub fn builtin(name: &str) -> Result<Unit, Refusal> {
    match builtin_text(name) {
        Some(text) => Ok(Unit {
            name: Arc::from(format!("cordon:{name}")),
            key: format!("cordon:{name}"),
            text,
        }),
        None => Err((
            format!("there is no built-in layer `cordon:{name}`"),
            format!(
                "built-in layers: {}",
                BUILTINS
                    .iter()
                    .map(|(n, _)| *n)
                    .chain([SPEC_EGRESS, LOCAL_DEV])
                    .map(|n| format!("`cordon:{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}
