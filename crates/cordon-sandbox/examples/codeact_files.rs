//! Runs model-written Python in a sandbox to render an image, and lands it
//! through the confined filesystem sink. See `examples/codeact-files/`.
//!
//! ```text
//! cargo run -p cordon-sandbox --example codeact_files -- [OUT_DIR]
//! ```
//!
//! It is written against the protocol only: the router picks the backend,
//! the `codeact` kind supplies the spec and the per-call directory, and
//! `FsSink` lands the file without following any link. It is not wired to
//! a backend yet (the local backends show the work dir at its host path,
//! not at the spec's `work_dir`, which the kind's guest paths assume; see
//! `examples/codeact-files/README.md`), so it stops with exit code 3 naming
//! what is missing; [`backends`] is the one place a real backend is added.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::kinds::{CodeAct, Kind};
use cordon_sandbox::{Backend, CallerContext, FsSink, Router, RouterError};

/// The Python the "model" wrote: a 64x64 gradient PNG from the standard
/// library alone (no imaging package needed in the image).
const CODE: &str = include_str!("../../../examples/codeact-files/gradient.py");

/// A policy with room for one small Python round and no network.
const POLICY: &str = "policy:
  compute:
    max_memory: 512MiB
    max_processes: 32
    max_cpu_seconds: 60
    max_wall_seconds: 300
";

/// Exit codes: 0 the image landed; 1 the round failed; 3 no backend can
/// serve this example on this machine.
const EXIT_ROUND: u8 = 1;
const EXIT_NO_BACKEND: u8 = 3;

/// The backends this host may use, strongest first. Empty in this version:
/// add the first real backend that serves `exec`, `files_in` and
/// `files_out` here (and its crate as a dev-dependency).
fn backends() -> Vec<Arc<dyn Backend>> {
    Vec::new()
}

fn main() -> ExitCode {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("codeact-out"), PathBuf::from);
    let kind = CodeAct::new("python:3.12-slim");
    let spec = match kind.spec() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_ROUND);
        }
    };
    let policy = match Policy::load_str("example-policy.yaml", POLICY) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("error: the example's policy does not load: {e:?}");
            return ExitCode::from(EXIT_ROUND);
        }
    };
    let mut builder = Router::builder(
        policy,
        Deployment {
            name: "example".into(),
        },
    );
    for b in backends() {
        builder = builder.backend(b);
    }
    let router = match builder.build() {
        Ok(r) => r,
        Err(RouterError::NoBackends) => {
            eprintln!(
                "error: no backend can serve this example: it needs one that runs Python and serves `exec`, `files_in` and `files_out` at the `microvm` floor, and this version of cordon ships none (`cordon doctor` shows what this machine could run); add it in `backends()` once it exists"
            );
            return ExitCode::from(EXIT_NO_BACKEND);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_NO_BACKEND);
        }
    };
    if let Err(e) = router.ensure_can_serve(&spec) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_NO_BACKEND);
    }
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("error: cannot make `{}`: {e}", out.display());
        return ExitCode::from(EXIT_ROUND);
    }
    let sink = match FsSink::new(&out) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_ROUND);
        }
    };
    let caller = CallerContext::new(
        || "example".to_string(),
        || "thread-1".to_string(),
        || "codeact".to_string(),
        || Identity {
            namespace: "examples".into(),
            name: "codeact".into(),
            attested: false,
            labels: Default::default(),
        },
    );
    let call_id = format!("call-{}", std::process::id());
    let scoped = router.scope("example", "thread-1", || {
        let sandbox = router.acquire(&caller, &spec).map_err(|e| e.to_string())?;
        kind.round(
            &*sandbox,
            &call_id,
            CODE,
            &[("gradient.png", "image/png")],
            &sink,
        )
        .map_err(|e| e.to_string())
    });
    match scoped.value {
        Ok(round) => {
            print!("{}", String::from_utf8_lossy(&round.exec.stdout));
            if round.landed.is_empty() {
                eprintln!(
                    "error: the code produced no image ({}): {}",
                    round.exec.status,
                    String::from_utf8_lossy(&round.exec.stderr).trim()
                );
                return ExitCode::from(EXIT_ROUND);
            }
            for landed in &round.landed {
                // What the model would see; the handle stays with the host.
                println!("model sees: {}", landed.display);
            }
            println!("landed under `{}`", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ROUND)
        }
    }
}
