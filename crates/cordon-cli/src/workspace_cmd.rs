//! Workspaces on the command line: `--workspace DIR` (a spec's
//! `workspace`), `cordon run --apply`, `cordon sandbox diff` and `apply`.

use std::path::Path;
use std::process::ExitCode;

use cordon_sandbox::{ApplyReport, Change, FileKind, Sandbox, SandboxSpec, WorkspaceChange};
use serde_json::json;

use crate::exit::{fail, refuse, usage};
use crate::json_out;

/// The spec with `--workspace DIR` (resolved here, from the current
/// directory: a spec names it absolutely).
pub fn with_workspace(spec: SandboxSpec, dir: &Path) -> Result<SandboxSpec, ExitCode> {
    let real = dir
        .canonicalize()
        .map_err(|e| usage(format!("`--workspace {}`: {e}", dir.display())))?;
    let shown = real
        .to_str()
        .ok_or_else(|| usage(format!("`--workspace {}`: not a UTF-8 path", dir.display())))?;
    if let Some(theirs) = spec.workspace() {
        if theirs != shown {
            return Err(usage(format!(
                "the spec names the workspace `{theirs}` and `--workspace` names `{shown}`; give one"
            )));
        }
    }
    spec.with_workspace(shown).map_err(fail)
}

fn letter(c: Change) -> char {
    match c {
        Change::Added => 'A',
        Change::Modified => 'M',
        Change::Removed => 'D',
    }
}

fn line(c: &WorkspaceChange) -> String {
    let tail = match (c.kind, c.size) {
        (FileKind::Dir, _) => "/".to_string(),
        (FileKind::Symlink, _) => " (link)".to_string(),
        (FileKind::Other, _) => " (not a file, directory or link)".to_string(),
        (FileKind::File, Some(n)) => format!("  {n} bytes"),
        (FileKind::File, None) => String::new(),
    };
    format!("{} {}{tail}", letter(c.change), c.path)
}

/// `cordon sandbox diff`: what the sandbox changed, one line a path
/// (`A` added, `M` modified, `D` removed), on stdout.
pub fn diff(s: &dyn Sandbox, handle: &str) -> Result<ExitCode, ExitCode> {
    let changes = s.workspace_diff().map_err(fail)?;
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "handle": handle, "changes": changes}));
    } else {
        for c in &changes {
            println!("{}", line(c));
        }
        if changes.is_empty() {
            eprintln!("sandbox `{handle}` changed nothing in its workspace");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Says what an apply did; `Err(125)` when a change was refused.
fn report(r: &ApplyReport, dir: Option<&str>, event: Option<&str>) -> Result<(), ExitCode> {
    if json_out::on() {
        let mut doc =
            json!({"ok": r.refused.is_empty(), "applied": r.applied, "refused": r.refused});
        if let Some(e) = event {
            doc["event"] = e.into();
        }
        json_out::emit(&doc);
    } else {
        for c in &r.applied {
            eprintln!("applied: {}", line(c));
        }
        for c in &r.refused {
            eprintln!("refused: {}: {}", c.path, c.reason);
        }
        let into = dir.map(|d| format!(" to `{d}`")).unwrap_or_default();
        if r.applied.is_empty() && r.refused.is_empty() {
            eprintln!("cordon: nothing to apply: the sandbox changed nothing in its workspace");
            return Ok(());
        }
        eprintln!(
            "cordon: applied {} change{}{into}",
            r.applied.len(),
            if r.applied.len() == 1 { "" } else { "s" }
        );
    }
    if r.refused.is_empty() {
        Ok(())
    } else if json_out::on() {
        // The document above is the answer (`"ok": false`, each refusal
        // with why): no second one.
        Err(ExitCode::from(crate::exit::REFUSED))
    } else {
        Err(refuse(format!(
            "{} change{} not applied (listed above with why)",
            r.refused.len(),
            if r.refused.len() == 1 {
                " was"
            } else {
                "s were"
            }
        )))
    }
}

/// `cordon sandbox apply`: the changes at or beneath `paths` (all when
/// none) written back into the workspace.
pub fn apply(s: &dyn Sandbox, paths: &[String]) -> Result<ExitCode, ExitCode> {
    let r = s.workspace_apply(paths).map_err(fail)?;
    report(&r, s.provenance().spec.workspace(), None)?;
    Ok(ExitCode::SUCCESS)
}

/// `cordon run --apply`, after a command that exited 0.
pub fn apply_after_run(s: &dyn Sandbox) -> Result<(), ExitCode> {
    match s.workspace_apply(&[]) {
        Ok(r) => report(&r, s.provenance().spec.workspace(), Some("apply")),
        Err(e) => Err(fail(e)),
    }
}
