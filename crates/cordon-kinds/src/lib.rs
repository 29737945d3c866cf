//! cordon's kinds: host code that knows one workload. A [`Kind`] supplies its spec,
//! parses its `consume` outputs (the question there is integrity: the
//! bytes were written by the workload), and words the one `display` line a
//! model sees for each artifact it lands.
//!
//! Two ship as examples: [`CodeAct`] runs model-written Python and lands the
//! files the call names; [`Diagram`] renders a diagram and lands it as
//! `image/png`, with render metadata it consumes.
//!
//! # Writing a kind for a warm sandbox
//!
//! A warm sandbox serves many rounds, so a file an earlier round left must
//! never come back as this round's. Give each round a fresh [`CallDir`]
//! named from your own call id, create it with [`CallDir::create`] (a plain
//! `mkdir`, so an existing directory fails the round), have the workload
//! write into it, and collect with [`Collection::in_call_dir`]: declared
//! paths are read beneath it, and landing names drop it. Both kinds here
//! do exactly that.

use serde_json::Value;

use cordon_collect::{CallDir, CollectError, Collected, Collection};
use cordon_sandbox::outputs::{plain_env, DeclaredOutput, OutputError};
use cordon_sandbox::spec::DEFAULT_WORK_DIR;
use cordon_sandbox::{
    Artifact, Capability, ExecOutput, ExecRequest, LandedArtifact, OutputSink, Sandbox,
    SandboxError, SandboxSpec, SinkError, SpecError, TransferLimits,
};

/// A round of a kind that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("kind `{kind}`: {source}")]
    Spec { kind: String, source: SpecError },
    #[error("kind `{kind}`: {source}")]
    Output { kind: String, source: OutputError },
    #[error("kind `{kind}` could not run its round: {source}")]
    Round { kind: String, source: SandboxError },
    #[error("kind `{kind}`: {source}")]
    Collect {
        kind: String,
        source: Box<CollectError>,
    },
    #[error("kind `{kind}` refuses its consumed output `{name}`: {reason}")]
    Consume {
        kind: String,
        name: String,
        reason: String,
    },
}

/// Host code for one workload.
pub trait Kind: Send + Sync {
    /// The spec's `kind`.
    fn name(&self) -> &str;

    /// What the workload asks for, outputs and caps included.
    fn spec(&self) -> Result<SandboxSpec, KindError>;

    /// Parses the `consume` outputs of a round (integrity: treat the bytes
    /// as hostile input). `Value::Null` when the kind consumes nothing.
    fn consume(&self, consumed: &[Artifact]) -> Result<Value, KindError>;

    /// The one line a model may see about an artifact this kind landed.
    fn display(&self, artifact: &Artifact) -> String;
}

/// A sink that lets a kind word the display lines of another sink.
pub struct KindSink<'a> {
    pub kind: &'a dyn Kind,
    pub inner: &'a dyn OutputSink,
}

impl OutputSink for KindSink<'_> {
    fn deliver(&self, artifact: &Artifact) -> Result<LandedArtifact, SinkError> {
        let mut landed = self.inner.deliver(artifact)?;
        landed.display = self.kind.display(artifact);
        Ok(landed)
    }
}

/// What one round produced.
#[derive(Debug, Clone)]
pub struct Round {
    pub exec: ExecOutput,
    pub landed: Vec<LandedArtifact>,
    /// What the kind parsed from its `consume` outputs.
    pub parsed: Value,
}

/// The caps both example kinds use: 8 MiB a file, 16 MiB a round, 8 files.
pub const EXAMPLE_LIMITS: TransferLimits = TransferLimits {
    max_bytes_per_file: 8 << 20,
    max_total_bytes: 16 << 20,
    max_files: 8,
};

fn run_in(
    kind: &str,
    sandbox: &dyn Sandbox,
    dir: &str,
    argv: &[&str],
    wall: u64,
) -> Result<ExecOutput, KindError> {
    let mut full = vec![
        "sh".to_string(),
        "-c".to_string(),
        "cd -- \"$1\" && shift && exec \"$@\"".to_string(),
        "sh".to_string(),
        dir.to_string(),
    ];
    full.extend(argv.iter().map(|a| a.to_string()));
    sandbox
        .exec(&ExecRequest {
            argv: full,
            env: plain_env(),
            stdin: Vec::new(),
            timeout: std::time::Duration::from_secs(wall),
            max_output_bytes: 64 << 10,
        })
        .map_err(|source| KindError::Round {
            kind: kind.to_string(),
            source,
        })
}

fn finish(
    kind: &dyn Kind,
    spec: &SandboxSpec,
    sandbox: &dyn Sandbox,
    dir: &CallDir,
    named: Option<&[DeclaredOutput]>,
    exec: ExecOutput,
    sink: &dyn OutputSink,
) -> Result<Round, KindError> {
    let worded = KindSink { kind, inner: sink };
    let mut c = Collection::of(spec).in_call_dir(dir);
    if let Some(named) = named {
        c = c.named_at_call_time(named);
    }
    let Collected { landed, consumed } =
        c.collect(sandbox, Some(&worded))
            .map_err(|source| KindError::Collect {
                kind: kind.name().to_string(),
                source: Box::new(source),
            })?;
    let parsed = kind.consume(&consumed)?;
    Ok(Round {
        exec,
        landed,
        parsed,
    })
}

/// Runs model-written Python and lands the files the call names.
///
/// The files are named at call time (the model says what its code
/// writes), so the spec sets `outputs_named_at_call_time`; they are
/// optional, so code that failed returns its traceback rather than a
/// transfer error on top.
#[derive(Debug, Clone)]
pub struct CodeAct {
    pub image: String,
    /// The guest work dir (default [`DEFAULT_WORK_DIR`]).
    pub work_dir: String,
    /// The interpreter `main.py` is run with (default `python3`).
    pub interpreter: Vec<String>,
}

impl CodeAct {
    pub fn new(image: &str) -> CodeAct {
        CodeAct {
            image: image.to_string(),
            work_dir: DEFAULT_WORK_DIR.to_string(),
            interpreter: vec!["python3".to_string()],
        }
    }

    /// One round: `code` runs as `main.py` in a fresh call directory, and
    /// each `(name, media_type)` the call names is collected from there.
    pub fn round(
        &self,
        sandbox: &dyn Sandbox,
        call_id: &str,
        code: &str,
        outputs: &[(&str, &str)],
        sink: &dyn OutputSink,
    ) -> Result<Round, KindError> {
        let spec = self.spec()?;
        let out_err = |source| KindError::Output {
            kind: "codeact".into(),
            source,
        };
        let named = outputs
            .iter()
            .map(|(n, m)| DeclaredOutput::new(n, m).map(DeclaredOutput::optional))
            .collect::<Result<Vec<_>, _>>()
            .map_err(out_err)?;
        let dir = CallDir::new(call_id).map_err(out_err)?;
        let round = |source| KindError::Round {
            kind: "codeact".into(),
            source,
        };
        dir.create(sandbox, spec.work_dir()).map_err(round)?;
        let guest = dir.guest_path(spec.work_dir());
        sandbox
            .write_file(&format!("{guest}/main.py"), code.as_bytes(), 0o644)
            .map_err(round)?;
        let mut argv: Vec<&str> = self.interpreter.iter().map(String::as_str).collect();
        argv.push("main.py");
        let exec = run_in("codeact", sandbox, &guest, &argv, 120)?;
        finish(self, &spec, sandbox, &dir, Some(&named), exec, sink)
    }
}

impl Kind for CodeAct {
    fn name(&self) -> &str {
        "codeact"
    }

    fn spec(&self) -> Result<SandboxSpec, KindError> {
        let spec_err = |source| KindError::Spec {
            kind: "codeact".into(),
            source,
        };
        SandboxSpec::new("codeact", &self.image)
            .and_then(|s| s.with_work_dir(&self.work_dir))
            .and_then(|s| {
                s.with_requires([Capability::Exec, Capability::FilesIn])
                    .with_outputs_named_at_call_time(EXAMPLE_LIMITS)
            })
            .map_err(spec_err)
    }

    fn consume(&self, _consumed: &[Artifact]) -> Result<Value, KindError> {
        Ok(Value::Null)
    }

    fn display(&self, artifact: &Artifact) -> String {
        format!(
            "your code produced `{}` ({}, {} bytes); it was handed to the user",
            artifact.name,
            artifact.media_type,
            artifact.bytes.len()
        )
    }
}

/// Renders a diagram and lands it as `image/png`; consumes `render.json`
/// (`{"width": N, "height": N}`) that the renderer writes beside it.
#[derive(Debug, Clone)]
pub struct Diagram {
    pub image: String,
    /// The guest work dir (default [`DEFAULT_WORK_DIR`]).
    pub work_dir: String,
    /// The renderer, run in the call directory with `source.txt` there; it
    /// writes `diagram.png` and `render.json`.
    pub renderer: Vec<String>,
}

/// The largest `render.json` parsed.
const MAX_RENDER_JSON: usize = 4096;

impl Diagram {
    /// Renders with the image's `render-diagram source.txt`.
    pub fn new(image: &str) -> Diagram {
        Diagram {
            image: image.to_string(),
            work_dir: DEFAULT_WORK_DIR.to_string(),
            renderer: vec!["render-diagram".to_string(), "source.txt".to_string()],
        }
    }

    /// One round: `source` is written to `source.txt` in a fresh call
    /// directory and the renderer runs there.
    pub fn round(
        &self,
        sandbox: &dyn Sandbox,
        call_id: &str,
        source: &str,
        sink: &dyn OutputSink,
    ) -> Result<Round, KindError> {
        let spec = self.spec()?;
        let dir = CallDir::new(call_id).map_err(|source| KindError::Output {
            kind: "diagram".into(),
            source,
        })?;
        let round = |source| KindError::Round {
            kind: "diagram".into(),
            source,
        };
        dir.create(sandbox, spec.work_dir()).map_err(round)?;
        let guest = dir.guest_path(spec.work_dir());
        sandbox
            .write_file(&format!("{guest}/source.txt"), source.as_bytes(), 0o644)
            .map_err(round)?;
        let argv: Vec<&str> = self.renderer.iter().map(String::as_str).collect();
        let exec = run_in("diagram", sandbox, &guest, &argv, 60)?;
        finish(self, &spec, sandbox, &dir, None, exec, sink)
    }
}

impl Kind for Diagram {
    fn name(&self) -> &str {
        "diagram"
    }

    fn spec(&self) -> Result<SandboxSpec, KindError> {
        let out = |source| KindError::Output {
            kind: "diagram".into(),
            source,
        };
        let png = DeclaredOutput::new("diagram.png", "image/png")
            .map_err(out)?
            .optional();
        let meta = DeclaredOutput::new("render.json", "application/json")
            .map_err(out)?
            .optional()
            .consumed();
        SandboxSpec::new("diagram", &self.image)
            .and_then(|s| s.with_work_dir(&self.work_dir))
            .and_then(|s| {
                s.with_requires([Capability::Exec, Capability::FilesIn])
                    .with_outputs(EXAMPLE_LIMITS, [png, meta])
            })
            .map_err(|source| KindError::Spec {
                kind: "diagram".into(),
                source,
            })
    }

    /// Strict: a small JSON object with exactly `width` and `height`, each
    /// a whole number from 1 to 16384.
    fn consume(&self, consumed: &[Artifact]) -> Result<Value, KindError> {
        let Some(meta) = consumed.iter().find(|a| a.name == "render.json") else {
            return Ok(Value::Null);
        };
        let refuse = |reason: &str| KindError::Consume {
            kind: "diagram".into(),
            name: meta.name.clone(),
            reason: reason.to_string(),
        };
        if meta.bytes.len() > MAX_RENDER_JSON {
            return Err(refuse("it is larger than 4 KiB"));
        }
        let v: Value = serde_json::from_slice(&meta.bytes).map_err(|_| refuse("it is not JSON"))?;
        let obj = v.as_object().ok_or_else(|| refuse("it is not an object"))?;
        if obj.len() != 2 {
            return Err(refuse("it must hold exactly `width` and `height`"));
        }
        for key in ["width", "height"] {
            match obj.get(key).and_then(Value::as_u64) {
                Some(n) if (1..=16384).contains(&n) => {}
                _ => {
                    return Err(refuse(
                        "`width` and `height` must be whole numbers 1..=16384",
                    ))
                }
            }
        }
        Ok(v)
    }

    fn display(&self, artifact: &Artifact) -> String {
        format!(
            "rendered the diagram as `{}` ({} bytes); the user can see it",
            artifact.name,
            artifact.bytes.len()
        )
    }
}
