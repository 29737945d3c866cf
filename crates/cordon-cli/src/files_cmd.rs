//! The files API on the command line: `cordon sandbox ls H [PATH]`,
//! `cat`, `rm`, `mkdir`, `mv` and `watch` on a kept sandbox's files, each one
//! operation ([`cordon_sandbox::FileOp`]) its keeper's guard decides with
//! the policy's storage surface before the backend runs it, confined and
//! following no link.

use std::io::Write;
use std::process::ExitCode;

use cordon_sandbox::{FileAnswer, FileKind, FileOp, Sandbox};
use serde_json::json;

use crate::exit::fail;
use crate::json_out;

fn run(s: &dyn Sandbox, op: FileOp) -> Result<FileAnswer, ExitCode> {
    s.files(&op).map_err(fail)
}

fn kind_char(k: FileKind) -> char {
    match k {
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::File => '-',
        FileKind::Other => '?',
    }
}

/// `cordon sandbox ls H [PATH] [--depth N]`.
pub fn ls(s: &dyn Sandbox, path: &str, depth: u32) -> Result<ExitCode, ExitCode> {
    let FileAnswer::Listing { entries, truncated } = run(
        s,
        FileOp::List {
            path: path.to_string(),
            depth,
        },
    )?
    else {
        return Err(crate::exit::refuse(
            "the sandbox answered a listing with something else",
        ));
    };
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "entries": entries, "truncated": truncated}));
    } else {
        // One write for the listing, not one a line.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for e in &entries {
            let _ = writeln!(
                out,
                "{}{:04o} {:>12} {}",
                kind_char(e.kind),
                e.mode & 0o7777,
                e.size,
                e.path
            );
        }
        let _ = out.flush();
        if truncated {
            eprintln!(
                "warning: the listing stops at {} entries; name a directory, or a smaller --depth",
                cordon_sandbox::files::MAX_LIST_ENTRIES
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox cat H PATH [--offset N] [--len N]`: the bytes to
/// stdout as they are (JSON: base64).
pub fn cat(
    s: &dyn Sandbox,
    path: &str,
    offset: u64,
    len: Option<u64>,
) -> Result<ExitCode, ExitCode> {
    let answer = run(
        s,
        FileOp::Read {
            path: path.to_string(),
            offset,
            len: len.unwrap_or(u64::MAX),
        },
    )?;
    let FileAnswer::Read { data, size } = answer else {
        return Err(crate::exit::refuse(
            "the sandbox answered a read with something else",
        ));
    };
    if json_out::on() {
        let doc = serde_json::to_value(FileAnswer::Read {
            data: data.clone(),
            size,
        })
        .unwrap_or_default();
        json_out::emit(&json!({"ok": true, "path": path, "offset": offset, "read": doc["read"]}));
    } else {
        let _ = std::io::stdout().write_all(&data);
        let end = offset.saturating_add(data.len() as u64);
        if len.is_none() && end < size {
            eprintln!(
                "warning: `{path}` is {size} bytes; {} from {offset} were read (the cap); read on with --offset {end}",
                data.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rm`, `mkdir` and `mv`: done, or why not.
pub fn change(s: &dyn Sandbox, op: FileOp) -> Result<ExitCode, ExitCode> {
    let what = op.name();
    let done = matches!(run(s, op)?, FileAnswer::Done(true));
    if json_out::on() {
        json_out::emit(&json!({"ok": true, "changed": done}));
    } else if !done {
        eprintln!("{what}: nothing was there");
    }
    Ok(ExitCode::SUCCESS)
}

/// `cordon sandbox watch H [PATH] [-r]`: each event a line as it comes,
/// then `{"event": "ended", "reason"}` when the sandbox goes.
pub fn watch(s: &dyn Sandbox, path: &str, recursive: bool) -> Result<ExitCode, ExitCode> {
    let mut source = s.watch(path, recursive).map_err(fail)?;
    let mut out = std::io::stdout().lock();
    loop {
        let line = match source.next(std::time::Duration::from_secs(1)) {
            cordon_sandbox::Next::Event(e) => serde_json::to_string(&e).unwrap_or_default(),
            cordon_sandbox::Next::Quiet => continue,
            cordon_sandbox::Next::Ended(reason) => {
                let _ = writeln!(out, "{}", json!({"event": "ended", "reason": reason}));
                return Ok(ExitCode::SUCCESS);
            }
        };
        // A reader that went away ends the watch.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
