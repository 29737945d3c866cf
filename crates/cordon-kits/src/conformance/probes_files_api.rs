//! The `files-api-*` probes: the files API
//! ([`cordon_sandbox::Sandbox::files`]) works, and
//! a link the workload planted is never followed by any of its operations
//! — read, list, write (each way), mkdir, remove, rename — nor does a read
//! run past its length or hang on a FIFO.

use cordon_sandbox::{FileAnswer, FileKind, FileOp, SandboxError, WriteHow};

use super::probe::{plant, ConformanceSubject, SECRET};

fn op(s: &dyn ConformanceSubject, op: FileOp) -> Result<FileAnswer, SandboxError> {
    s.sandbox().files(&op)
}

fn read(path: &str, len: u64) -> FileOp {
    FileOp::Read {
        path: path.into(),
        offset: 0,
        len,
    }
}

fn write(path: &str, how: WriteHow) -> FileOp {
    FileOp::Write {
        path: path.into(),
        data: b"written through the files API\n".to_vec(),
        mode: 0o644,
        how,
    }
}

/// The outside file (or directory) is as it was.
fn unchanged(
    s: &dyn ConformanceSubject,
    watched: &str,
    before: Option<&[u8]>,
    what: &str,
) -> Result<(), String> {
    let after = s
        .read_back(watched)
        .map_err(|e| format!("could not read `{watched}` back: {e}"))?;
    if after.as_deref() != before {
        return Err(format!(
            "{what} reached `{watched}` outside the work dir through a planted link"
        ));
    }
    Ok(())
}

/// A refusal, with nothing of the outside in what came back.
fn refused(got: Result<FileAnswer, SandboxError>, what: &str) -> Result<String, String> {
    match got {
        Err(e) => Ok(e.to_string()),
        Ok(FileAnswer::Read { data, .. }) if data.windows(SECRET.len()).any(|w| w == SECRET) => {
            Err(format!("{what} read the file outside through a link"))
        }
        Ok(a) => Err(format!("{what} was not refused: {a:?}")),
    }
}

/// Where a probe plants: its directory in the work dir, its directory
/// outside, the outside file.
struct Layout {
    name: &'static str,
    dir: String,
    out: String,
    secret: String,
}

/// The outside file, a link to it and a link to its directory, in the
/// probe's directory; the file checked to be there.
fn planted(s: &dyn ConformanceSubject, l: &Layout) -> Result<(), String> {
    let (dir, out, secret) = (&l.dir, &l.out, &l.secret);
    plant("the outside file", s.plant_file(secret, SECRET))?;
    plant("a link to it", s.plant_link(&format!("{dir}/link"), secret))?;
    plant(
        "a link to its directory",
        s.plant_link(&format!("{dir}/sub"), &format!("{out}/dir")),
    )?;
    let seen = s
        .read_back(secret)
        .map_err(|e| format!("could not plant its layout: reading the outside file back: {e}"))?;
    if seen.as_deref() != Some(SECRET) {
        return Err(format!(
            "could not plant its layout: the outside file `{secret}` is not there"
        ));
    }
    Ok(())
}

pub(super) fn files_api_probe(
    name: &'static str,
    s: &dyn ConformanceSubject,
) -> Result<String, String> {
    let dir = format!("{}/cordon-probe-{name}", s.work_dir());
    let out = format!("{}/cordon-probe-{name}", s.outside_dir());
    plant(
        "a clean probe directory",
        s.remove(&dir).and(s.remove(&out)),
    )?;
    let secret = format!("{out}/dir/secret");
    let l = Layout {
        name,
        dir,
        out,
        secret,
    };
    match name {
        "files-api-operations" => operations_probe(s, &l),
        "files-api-read-through-link" => read_through_link(s, &l),
        "files-api-list-through-link" => list_through_link(s, &l),
        "files-api-write-through-link" => write_through_link(s, &l),
        "files-api-remove-through-link" => remove_through_link(s, &l),
        "files-api-rename-through-link" => rename_through_link(s, &l),
        "files-api-read-bounded" => read_bounded(s, &l.dir),
        other => Err(format!("unknown probe `{other}`")),
    }
}

fn operations_probe(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let dir = &l.dir;
    plant("the probe's directory", s.plant_dir(dir))?;
    operations(s, dir)
}

fn read_through_link(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let dir = &l.dir;
    planted(s, l)?;
    let a = refused(
        op(s, read(&format!("{dir}/link"), 4096)),
        "a read of the link",
    )?;
    let b = refused(
        op(s, read(&format!("{dir}/sub/secret"), 4096)),
        "a read beneath the linked directory",
    )?;
    Ok(format!("refused: {a}; {b}"))
}

fn list_through_link(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let (dir, name) = (&l.dir, l.name);
    planted(s, l)?;
    let listed = op(
        s,
        FileOp::List {
            path: dir.clone(),
            depth: 4,
        },
    )
    .map_err(|e| format!("the probe's own directory could not be listed: {e}"))?;
    let FileAnswer::Listing { entries, .. } = listed else {
        return Err(format!("a listing answered {listed:?}"));
    };
    let rel = format!("cordon-probe-{name}/");
    let names: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.path.strip_prefix(&rel))
        .collect();
    if names.iter().any(|n| n.starts_with("sub/")) {
        return Err(format!(
            "the listing went through the linked directory: {names:?}"
        ));
    }
    let kind_of = |n: &str| {
        entries
            .iter()
            .find(|e| e.path.strip_prefix(&rel) == Some(n))
            .map(|e| e.kind)
    };
    if kind_of("sub") != Some(FileKind::Symlink) || kind_of("link") != Some(FileKind::Symlink) {
        return Err(format!("the links are not listed as links: {entries:?}"));
    }
    let b = refused(
        op(
            s,
            FileOp::List {
                path: format!("{dir}/sub"),
                depth: 0,
            },
        ),
        "a listing of the linked directory",
    )?;
    Ok(format!("the links listed as links, not followed; {b}"))
}

fn write_through_link(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let (dir, out, secret) = (&l.dir, &l.out, &l.secret);
    planted(s, l)?;
    for how in [WriteHow::Truncate, WriteHow::Append, WriteHow::Create] {
        let _ = op(s, write(&format!("{dir}/link"), how));
        unchanged(s, secret, Some(SECRET), &format!("a {how:?} write"))?;
        plant(
            "the link again",
            s.plant_link(&format!("{dir}/link"), secret),
        )?;
        let _ = op(s, write(&format!("{dir}/sub/new-{how:?}"), how));
        unchanged(
            s,
            &format!("{out}/dir/new-{how:?}"),
            None,
            &format!("a {how:?} write beneath the linked directory"),
        )?;
    }
    let _ = op(
        s,
        FileOp::Mkdir {
            path: format!("{dir}/sub/made"),
        },
    );
    unchanged(
        s,
        &format!("{out}/dir/made"),
        None,
        "a mkdir beneath the linked directory",
    )?;
    Ok("nothing outside written or made".into())
}

fn remove_through_link(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let (dir, secret) = (&l.dir, &l.secret);
    planted(s, l)?;
    let _ = op(
        s,
        FileOp::Remove {
            path: format!("{dir}/sub/secret"),
            recursive: false,
        },
    );
    unchanged(
        s,
        secret,
        Some(SECRET),
        "a removal beneath the linked directory",
    )?;
    for path in ["link", "sub"] {
        let got = op(
            s,
            FileOp::Remove {
                path: format!("{dir}/{path}"),
                recursive: true,
            },
        );
        unchanged(
            s,
            secret,
            Some(SECRET),
            &format!("removing the link `{path}`"),
        )?;
        if got != Ok(FileAnswer::Done(true)) {
            return Err(format!("the link `{path}` itself was not removed: {got:?}"));
        }
    }
    Ok("the links removed, what they name left".into())
}

fn rename_through_link(s: &dyn ConformanceSubject, l: &Layout) -> Result<String, String> {
    let (dir, out, secret) = (&l.dir, &l.out, &l.secret);
    planted(s, l)?;
    let _ = op(
        s,
        FileOp::Rename {
            from: format!("{dir}/sub/secret"),
            to: format!("{dir}/stolen"),
        },
    );
    unchanged(
        s,
        secret,
        Some(SECRET),
        "a rename from beneath the linked directory",
    )?;
    if let Ok(Some(b)) = s.read_back(&format!("{dir}/stolen")) {
        if b == SECRET {
            return Err("a rename moved the file outside into the work dir".into());
        }
    }
    plant(
        "a file to move",
        s.plant_file(&format!("{dir}/mine"), b"mine\n"),
    )?;
    let _ = op(
        s,
        FileOp::Rename {
            from: format!("{dir}/mine"),
            to: format!("{dir}/sub/mine"),
        },
    );
    unchanged(
        s,
        &format!("{out}/dir/mine"),
        None,
        "a rename into the linked directory",
    )?;
    Ok("nothing moved across the links".into())
}

/// A ranged read returns its length, no more; a FIFO is refused, not
/// opened to hang.
fn read_bounded(s: &dyn ConformanceSubject, dir: &str) -> Result<String, String> {
    plant("a file", s.plant_file(&format!("{dir}/big"), &[b'x'; 4096]))?;
    let got = op(
        s,
        FileOp::Read {
            path: format!("{dir}/big"),
            offset: 100,
            len: 10,
        },
    );
    match got {
        Ok(FileAnswer::Read { data, size: 4096 }) if data.len() == 10 => {}
        other => return Err(format!("a 10-byte read at 100 of 4096 answered {other:?}")),
    }
    plant("a FIFO", s.plant_fifo(&format!("{dir}/fifo")))?;
    let f = refused(op(s, read(&format!("{dir}/fifo"), 10)), "a read of a FIFO")?;
    Ok(format!(
        "bounded to its length; the FIFO refused without hanging: {f}"
    ))
}

/// Every operation does what it says, in a directory of the probe's own.
fn operations(s: &dyn ConformanceSubject, dir: &str) -> Result<String, String> {
    let step = |what: &str, o: FileOp, want: &dyn Fn(&FileAnswer) -> bool| match op(s, o) {
        Ok(a) if want(&a) => Ok(()),
        Ok(a) => Err(format!("{what} answered {a:?}")),
        Err(e) => Err(format!("{what} failed: {e}")),
    };
    let done = |a: &FileAnswer| *a == FileAnswer::Done(true);
    step(
        "mkdir -p",
        FileOp::Mkdir {
            path: format!("{dir}/a/b"),
        },
        &done,
    )?;
    step(
        "a write",
        FileOp::Write {
            path: format!("{dir}/a/b/f.txt"),
            data: b"hello".to_vec(),
            mode: 0o640,
            how: WriteHow::Create,
        },
        &done,
    )?;
    step(
        "an append",
        FileOp::Write {
            path: format!("{dir}/a/b/f.txt"),
            data: b" world".to_vec(),
            mode: 0o640,
            how: WriteHow::Append,
        },
        &done,
    )?;
    let create_again = op(s, write(&format!("{dir}/a/b/f.txt"), WriteHow::Create));
    if create_again.is_ok() {
        return Err("a create over an existing file was not refused".into());
    }
    step("a read", read(&format!("{dir}/a/b/f.txt"), 100), &|a| {
        *a == FileAnswer::Read {
            data: b"hello world".to_vec(),
            size: 11,
        }
    })?;
    step(
        "a stat",
        FileOp::Stat {
            path: format!("{dir}/a/b/f.txt"),
        },
        &|a| matches!(a, FileAnswer::Stat(Some(i)) if i.kind == FileKind::File && i.size == 11 && i.mode & 0o777 == 0o640),
    )?;
    step(
        "a listing",
        FileOp::List {
            path: format!("{dir}/a"),
            depth: 1,
        },
        &|a| matches!(a, FileAnswer::Listing { entries, truncated: false } if entries.iter().any(|e| e.path.ends_with("a/b/f.txt"))),
    )?;
    step(
        "a rename",
        FileOp::Rename {
            from: format!("{dir}/a/b/f.txt"),
            to: format!("{dir}/g.txt"),
        },
        &done,
    )?;
    if s.read_back(&format!("{dir}/g.txt"))
        .ok()
        .flatten()
        .as_deref()
        != Some(b"hello world")
    {
        return Err("the renamed file is not where the rename put it".into());
    }
    if op(
        s,
        FileOp::Remove {
            path: format!("{dir}/a"),
            recursive: false,
        },
    )
    .is_ok()
    {
        return Err("a directory was removed without `recursive`".into());
    }
    step(
        "a removal",
        FileOp::Remove {
            path: format!("{dir}/a"),
            recursive: true,
        },
        &done,
    )?;
    step(
        "a stat of nothing",
        FileOp::Stat {
            path: format!("{dir}/a"),
        },
        &|a| *a == FileAnswer::Stat(None),
    )?;
    step(
        "a removal of nothing",
        FileOp::Remove {
            path: format!("{dir}/a"),
            recursive: false,
        },
        &|a| *a == FileAnswer::Done(false),
    )?;
    Ok("list, stat, read, write (create, append), mkdir, rename, remove".into())
}
