//! The example kinds over the host-directory test sandbox: fresh call
//! directories for warm reuse, consumed outputs parsed strictly, display
//! lines worded by the kind.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cordon_collect::CollectError;
use cordon_files::host_dir::HostDirectorySandbox;
use cordon_files::FsSink;
use cordon_kinds::{CodeAct, Diagram, Kind, KindError};
use cordon_policy::Identity;
use cordon_sandbox::{Provenance, Sandbox};

fn team_a() -> Identity {
    Identity {
        namespace: "team-a".into(),
        name: "builder".into(),
        attested: true,
        labels: BTreeMap::new(),
    }
}

fn sandbox(work: &Path, kind: &dyn Kind) -> Arc<dyn Sandbox> {
    let provenance = Provenance {
        spec: kind.spec().unwrap(),
        identity: team_a(),
        policy_digest: String::new(),
        origin: None,
    };
    Arc::new(HostDirectorySandbox::new(work, provenance).unwrap())
}

fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("work");
    let out = t.path().join("out");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&out).unwrap();
    (t, work, out)
}

fn diagram(work: &Path, script: &str) -> Diagram {
    Diagram {
        work_dir: work.to_str().unwrap().to_string(),
        renderer: vec!["sh".into(), "-c".into(), script.into()],
        ..Diagram::new("diagram-sandbox:1")
    }
}

#[test]
fn a_stale_file_from_an_earlier_round_never_comes_back() {
    let (_t, work, out) = dirs();
    let render = "printf PNG > diagram.png && printf '{\"width\": 2, \"height\": 3}' > render.json";
    let d = diagram(&work, render);
    let sb = sandbox(&work, &d);
    let sink = FsSink::new(&out).unwrap();
    let round = d.round(&*sb, "r1", "graph {}", &sink).unwrap();
    assert_eq!(round.landed.len(), 1);
    assert!(round.landed[0]
        .display
        .starts_with("rendered the diagram as `diagram.png`"));
    assert_eq!(round.parsed["height"], 3);
    assert_eq!(std::fs::read(out.join("diagram.png")).unwrap(), b"PNG");

    // The next round's renderer fails and writes nothing: the earlier
    // round's diagram must not be collected as this one's.
    let failing = diagram(&work, "echo 'syntax error' >&2; exit 1");
    let other_sink = FsSink::new(&out).unwrap();
    let round = failing.round(&*sb, "r2", "graph {", &other_sink).unwrap();
    assert!(round.landed.is_empty());
    assert!(String::from_utf8_lossy(&round.exec.stderr).contains("syntax error"));

    // A call id reused is refused: its directory exists.
    let e = d.round(&*sb, "r1", "graph {}", &sink).unwrap_err();
    assert!(matches!(e, KindError::Round { .. }), "{e}");
}

#[test]
fn a_consumed_output_that_is_not_what_the_kind_expects_is_refused() {
    let (_t, work, out) = dirs();
    let d = diagram(
        &work,
        "printf PNG > diagram.png && printf '{\"width\": 2, \"height\": 3, \"x\": 1}' > render.json",
    );
    let sb = sandbox(&work, &d);
    let e = d
        .round(&*sb, "r1", "graph {}", &FsSink::new(&out).unwrap())
        .unwrap_err();
    assert!(matches!(e, KindError::Consume { .. }), "{e}");
}

#[test]
fn a_diagram_that_is_a_link_is_refused() {
    let (_t, work, out) = dirs();
    let d = diagram(&work, "ln -s /etc/passwd diagram.png");
    let sb = sandbox(&work, &d);
    let e = d
        .round(&*sb, "r1", "graph {}", &FsSink::new(&out).unwrap())
        .unwrap_err();
    assert!(
        matches!(&e, KindError::Collect { source, .. } if matches!(**source, CollectError::NotRegular { .. })),
        "{e}"
    );
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
}

#[test]
fn codeact_lands_the_files_the_call_names_and_nothing_else() {
    let (_t, work, out) = dirs();
    let c = CodeAct {
        work_dir: work.to_str().unwrap().to_string(),
        interpreter: vec!["sh".into()],
        ..CodeAct::new("codeact-sandbox:1")
    };
    let sb = sandbox(&work, &c);
    let sink = FsSink::new(&out).unwrap();
    let code = "printf 'a,b\\n' > table.csv; printf secret > unnamed.txt";
    let round = c
        .round(&*sb, "c1", code, &[("table.csv", "text/csv")], &sink)
        .unwrap();
    assert_eq!(round.landed.len(), 1);
    assert!(round.landed[0].display.contains("`table.csv`"));
    assert!(out.join("table.csv").is_file());
    assert!(!out.join("unnamed.txt").exists());
    assert!(!out.join("main.py").exists());
    // A glob is not a name.
    let e = c
        .round(&*sb, "c2", code, &[("*.csv", "text/csv")], &sink)
        .unwrap_err();
    assert!(e.to_string().contains("files_list"), "{e}");
}

/// The codeact-files example's own Python, run by the real interpreter on
/// the host-directory test sandbox (CI's machine has `/usr/bin/python3`):
/// what the example does once a real backend serves it.
#[test]
fn the_codeact_example_renders_and_lands_a_png() {
    let (_t, work, out) = dirs();
    let c = CodeAct {
        work_dir: work.to_str().unwrap().to_string(),
        ..CodeAct::new("python:3.12-slim")
    };
    let sb = sandbox(&work, &c);
    let code = include_str!("../../../examples/codeact-files/gradient.py");
    let round = c
        .round(
            &*sb,
            "example",
            code,
            &[("gradient.png", "image/png")],
            &FsSink::new(&out).unwrap(),
        )
        .unwrap();
    assert_eq!(
        round.landed.len(),
        1,
        "python3 must be on PATH: {}",
        String::from_utf8_lossy(&round.exec.stderr)
    );
    let png = std::fs::read(out.join("gradient.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
}
