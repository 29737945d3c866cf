//! The checks each spec field's value goes through, shared by the YAML
//! loader and the builders.

use cordon_policy::canon;

/// A `kind` or `image` name; `example` shows a good one.
pub(super) fn check_name(example: &str, raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err("it is empty".into());
    }
    if raw.len() > 256 {
        return Err("it is longer than 256 bytes".into());
    }
    if !raw
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@+".contains(&b))
    {
        return Err(format!(
            "`{raw}` holds a character outside `a-z A-Z 0-9 - _ . : / @ +`; write a name like `{example}`"
        ));
    }
    Ok(raw.to_string())
}

/// An image name: a name, and never a path out of a store (no `.` or
/// `..` segment, no empty one: no leading, trailing or doubled `/`).
pub(super) fn check_image(raw: &str) -> Result<String, String> {
    let name = check_name("diagram-sandbox:1", raw)?;
    if name
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "`{raw}` has an empty, `.` or `..` segment; an image is named, never a path (`host`, `python-3.12`, `docker.io/library/python:3.12`)"
        ));
    }
    Ok(name)
}

pub(super) fn check_work_dir(raw: &str) -> Result<String, String> {
    let canonical = canon::fs_path(raw).map_err(|e| e.to_string())?;
    if canonical != raw {
        return Err(format!(
            "`{raw}` is not in canonical form; write `{canonical}`"
        ));
    }
    if canonical == "/" {
        return Err("`/` is the guest's root; name a directory like `/workspace`".into());
    }
    Ok(canonical)
}

pub(super) fn check_count(raw: &str) -> Result<u64, String> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{raw}` is not a whole number; write it like `30`"));
    }
    match raw.parse::<u64>() {
        Ok(0) => {
            Err("0 leaves nothing to run; leave the ask out to take the policy's bound".into())
        }
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{raw}` is too large")),
    }
}

pub(super) fn check_memory(raw: &str) -> Result<u64, String> {
    match canon::size(raw) {
        Ok(0) => {
            Err("0 leaves nothing to run; leave the ask out to take the policy's bound".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A workspace: an absolute, canonical host path, not `/` (what the
/// directory is, whose it is and how large its filesystem is are checked
/// where it is mounted, on the host that mounts it).
pub(super) fn check_workspace(raw: &str) -> Result<String, String> {
    if !raw.starts_with('/') {
        return Err(format!(
            "`{raw}` is not an absolute path; a spec names its workspace absolutely (the CLI's `--workspace` resolves a relative one)"
        ));
    }
    let canonical = canon::fs_path(raw).map_err(|e| e.to_string())?;
    if canonical != raw {
        return Err(format!(
            "`{raw}` is not in canonical form; write `{canonical}`"
        ));
    }
    if canonical == "/" {
        return Err("`/` is the host's root; name the project's directory".into());
    }
    Ok(canonical)
}
