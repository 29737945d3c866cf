//! A workspace's case, written once for every backend that offers one: a
//! kept sandbox made over a project directory changes it; `diff` names
//! each change while the directory is untouched; `apply` writes them back,
//! refusing a link that points out and a file the host changed meanwhile.

use std::path::Path;

use crate::Cordon;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>"))
}

/// Runs the case with `up` (`sandbox up`'s selection: scope, thread,
/// backend, floor) plus `--workspace`; the sandbox is gone at the end.
pub fn diff_then_apply(c: &Cordon, up: &[&str]) {
    let project = tempfile::tempdir().expect("a project directory");
    let dir = project.path();
    std::fs::write(dir.join("notes.md"), "# notes\n").unwrap();
    std::fs::write(dir.join("script.sh"), "echo hi\n").unwrap();
    std::fs::write(dir.join("theirs.txt"), "host's first\n").unwrap();
    let dir_s = dir.to_str().unwrap();
    let mut args = vec!["sandbox", "up"];
    args.extend_from_slice(up);
    args.extend_from_slice(&["--workspace", dir_s, "-q"]);
    let (code, out, err) = c.run(&args);
    assert_eq!(code, 0, "up --workspace: {err}");
    let h = out.trim().to_string();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(dir.join("theirs.txt"), "host's second\n").unwrap();
    let (code, out, err) = c.run([
        "sandbox",
        "exec",
        &h,
        "--",
        "sh",
        "-c",
        "cat notes.md && echo more >> notes.md && echo mine > theirs.txt && mkdir -p d/e && echo f > d/e/f && rm script.sh && ln -s /etc/shadow out && ln -s notes.md in && id -u",
    ]);
    assert_eq!(code, 0, "the workload's changes: {out}{err}");
    assert!(
        out.starts_with("# notes\n"),
        "the workload reads the project: {out}"
    );
    let (code, out, err) = c.run(["sandbox", "diff", &h, "--format", "json"]);
    assert_eq!(code, 0, "diff: {err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).expect("diff's JSON");
    let changes: Vec<String> = doc["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["change"].as_str().unwrap(),
                c["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            "added d",
            "added d/e",
            "added d/e/f",
            "added in",
            "modified notes.md",
            "added out",
            "removed script.sh",
            "modified theirs.txt",
        ],
        "{doc}"
    );
    assert_eq!(
        read(&dir.join("notes.md")),
        "# notes\n",
        "a change reached the directory before apply"
    );
    assert!(dir.join("script.sh").exists() && !dir.join("d").exists());
    let (code, out, err) = c.run(["sandbox", "apply", &h, "--format", "json"]);
    assert_eq!(code, 125, "a refused change fails the apply: {out}{err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).expect("apply's JSON");
    let refused: Vec<&str> = doc["refused"]
        .as_array()
        .expect("refused")
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(refused, ["out", "theirs.txt"], "{doc}");
    assert_eq!(read(&dir.join("notes.md")), "# notes\nmore\n");
    assert_eq!(read(&dir.join("d/e/f")), "f\n");
    assert!(!dir.join("script.sh").exists());
    assert_eq!(
        read(&dir.join("theirs.txt")),
        "host's second\n",
        "the host's change was overwritten"
    );
    assert!(
        std::fs::symlink_metadata(dir.join("out")).is_err(),
        "a link out was written"
    );
    assert_eq!(
        std::fs::read_link(dir.join("in")).unwrap(),
        Path::new("notes.md")
    );
    let (code, _, err) = c.run(["sandbox", "down", &h]);
    assert_eq!(code, 0, "down: {err}");
    assert_eq!(
        read(&dir.join("notes.md")),
        "# notes\nmore\n",
        "down touched the directory"
    );
}
