//! Model-style Python renders an image in a warm sandbox over two rounds;
//! each round's image lands through the confined filesystem sink, and the
//! second round never returns the first round's file. See
//! `examples/codeact-files/`.
//!
//! ```text
//! sudo cargo run -p cordon-backend-local --example codeact_files -- [OUT_DIR]
//! ```
//!
//! Written against the protocol: the router picks the backend (here the
//! local `container` rung, the strongest this version builds, with the floor
//! lowered to it explicitly), the `codeact` kind supplies the spec and the
//! per-call directories, and `FsSink` lands files without following links.
//! The sandbox is acquired once and reused by both rounds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cordon_backend_local::{LocalBackend, LocalConfig, WorkDir};
use cordon_files::FsSink;
use cordon_kinds::{CodeAct, Kind};
use cordon_linux::{InitProgram, Rung};
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{Backend, CallerContext, Isolation, Router};

/// The Python the "model" wrote in round 1: a 64x64 gradient PNG from the
/// standard library alone.
const ROUND_1: &str = include_str!("../../../examples/codeact-files/gradient.py");
/// Round 2's code asks for the same output name but draws nothing: what
/// round 1 left in the work dir must not come back as round 2's.
const ROUND_2: &str = "import os\nprint('round 2 sees', sorted(os.listdir('..')))\n";

/// The built-in default (system directories read-only, the work dir and a
/// private /tmp read-write, no egress) with room for a small Python round.
const POLICY: &str = "policy:
  extends:
    - cordon:default
  compute:
    max_memory: 512MiB
    max_processes: 32
    max_cpu_seconds: 60
    max_wall_seconds: 300
";

const INIT_ARG: &str = "__sandbox-init";

/// Exit codes: 0 both rounds behaved; 1 a round failed or misbehaved;
/// 3 no backend can serve this example on this machine.
const EXIT_ROUND: u8 = 1;
const EXIT_NO_BACKEND: u8 = 3;

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    // This binary is also the sandbox's init.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(INIT_ARG)) {
        cordon_linux::init_main();
    }
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("codeact-out"), PathBuf::from);
    let kind = CodeAct::new("host");
    let spec = match kind.spec() {
        Ok(s) => s,
        Err(e) => return fail(EXIT_ROUND, e),
    };
    let policy = match Policy::load_str("example-policy.yaml", POLICY) {
        Ok(p) => Arc::new(p),
        Err(d) => {
            return fail(
                EXIT_ROUND,
                format!("the policy does not load:\n{}", d.render()),
            )
        }
    };
    let env = Deployment {
        name: "example".into(),
    };
    let init = match std::env::current_exe() {
        Ok(exe) => InitProgram::new(exe).arg(INIT_ARG),
        Err(e) => return fail(EXIT_NO_BACKEND, e),
    };
    let probe = cordon_backend_local::probe(Rung::Container, init.clone());
    if !probe.runnable {
        return fail(
            EXIT_NO_BACKEND,
            format!(
                "the container rung cannot run here ({}); `cordon doctor` shows what is missing (it needs root)",
                probe.found.join("; ")
            ),
        );
    }
    let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(LocalConfig {
        rung: Rung::Container,
        policy: policy.clone(),
        env: env.clone(),
        work_dir: WorkDir::Fresh {
            parent: std::env::temp_dir(),
        },
        init,
        egress: Default::default(),
    }));
    eprintln!(
        "note: the floor is lowered to `container` for this example (a shared-kernel boundary)"
    );
    let router = match Router::builder(policy, env)
        .min_isolation(Isolation::Container)
        .backend(backend)
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(EXIT_NO_BACKEND, e),
    };
    if let Err(e) = router.ensure_can_serve(&spec) {
        return fail(EXIT_NO_BACKEND, e);
    }
    if let Err(e) = std::fs::create_dir_all(&out) {
        return fail(EXIT_ROUND, format!("cannot make `{}`: {e}", out.display()));
    }
    let sink = match FsSink::new(&out) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_ROUND, e),
    };
    let caller = CallerContext::new(
        || "example".to_string(),
        || "thread-1".to_string(),
        || "codeact".to_string(),
        || Identity {
            namespace: "examples".into(),
            name: "codeact".into(),
            attested: true,
            labels: Default::default(),
        },
    );
    let pid = std::process::id();
    let scoped = router.scope("example", "thread-1", || {
        let sandbox = router.acquire(&caller, &spec).map_err(|e| e.to_string())?;
        let wanted = [("gradient.png", "image/png")];
        let one = kind
            .round(&*sandbox, &format!("call-{pid}-1"), ROUND_1, &wanted, &sink)
            .map_err(|e| e.to_string())?;
        // The same sandbox again: warm, not rebuilt.
        let again = router.acquire(&caller, &spec).map_err(|e| e.to_string())?;
        if again.id() != sandbox.id() {
            return Err(format!(
                "round 2 got another sandbox (`{}`, not `{}`)",
                again.id(),
                sandbox.id()
            ));
        }
        let two = kind
            .round(&*again, &format!("call-{pid}-2"), ROUND_2, &wanted, &sink)
            .map_err(|e| e.to_string())?;
        Ok((one, two))
    });
    let (one, two) = match scoped.value {
        Ok(r) => r,
        Err(e) => return fail(EXIT_ROUND, e),
    };
    print!("{}", String::from_utf8_lossy(&one.exec.stdout));
    if one.landed.len() != 1 {
        return fail(
            EXIT_ROUND,
            format!(
                "round 1 drew no image ({}): {}",
                one.exec.status,
                String::from_utf8_lossy(&one.exec.stderr).trim()
            ),
        );
    }
    for landed in &one.landed {
        println!("round 1: model sees: {}", landed.display);
    }
    print!("{}", String::from_utf8_lossy(&two.exec.stdout));
    if two.exec.status != cordon_sandbox::ExitStatus::Code(0) {
        return fail(
            EXIT_ROUND,
            format!(
                "round 2 failed ({}): {}",
                two.exec.status,
                String::from_utf8_lossy(&two.exec.stderr).trim()
            ),
        );
    }
    if !two.landed.is_empty() {
        return fail(
            EXIT_ROUND,
            format!(
                "round 2 returned a file it did not make: {:?}",
                two.landed.iter().map(|l| &l.display).collect::<Vec<_>>()
            ),
        );
    }
    println!("round 2: nothing landed (round 1's file stayed round 1's)");
    println!("landed under `{}`", out.display());
    ExitCode::SUCCESS
}
