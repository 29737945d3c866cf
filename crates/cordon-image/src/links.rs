//! A stored image's hard-link index: the groups of names that are one file,
//! computed once per content-addressed blob and kept beside its tree
//! (`blobs/sha256-<hex>/links`).
//!
//! The digest does not cover hard links (two trees that differ only in
//! them share a blob), so the index is computed from the blob's own tree.
//! It is a hint for finding every name of a denied program: the translator
//! checks each name it suggests and stops only when as many names are
//! found as the file's link count, so a missing, partial or stale index
//! costs a walk, never a name let through.
//!
//! Format: `cordon-links 1\n`, then one line per group, its names (paths
//! as the workload sees them, from `/`) separated by NUL. A name holding a
//! newline is left out (the count then sends the translator walking).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const HEADER: &[u8] = b"cordon-links 1\n";
/// The most entries the index walk visits (a larger tree gets no index).
const MAX_ENTRIES: usize = 2_000_000;

/// Every group of names of one file in `rootfs`, as the workload sees them.
pub(crate) fn build(rootfs: &Path) -> io::Result<Vec<Vec<PathBuf>>> {
    let mut by_id: HashMap<(u64, u64), Vec<PathBuf>> = HashMap::new();
    let mut stack = vec![PathBuf::from("/")];
    let mut seen = 0usize;
    while let Some(guest) = stack.pop() {
        let host = rootfs.join(guest.strip_prefix("/").unwrap_or(&guest));
        for e in fs::read_dir(&host)? {
            let e = e?;
            seen += 1;
            if seen > MAX_ENTRIES {
                return Err(io::Error::other("the tree is too large to index"));
            }
            let ft = e.file_type()?;
            let name = guest.join(e.file_name());
            if ft.is_dir() {
                stack.push(name);
            } else if ft.is_file() {
                let m = e.metadata()?;
                if m.nlink() > 1 {
                    by_id.entry((m.dev(), m.ino())).or_default().push(name);
                }
            }
        }
    }
    let mut groups: Vec<Vec<PathBuf>> = by_id
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    groups.sort();
    Ok(groups)
}

fn render(groups: &[Vec<PathBuf>]) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    for g in groups {
        let names: Vec<&[u8]> = g
            .iter()
            .map(|p| p.as_os_str().as_bytes())
            .filter(|b| !b.contains(&b'\n'))
            .collect();
        if names.len() > 1 {
            out.extend_from_slice(&names.join(&b'\0'));
            out.push(b'\n');
        }
    }
    out
}

fn parse(bytes: &[u8]) -> Option<Vec<Vec<PathBuf>>> {
    let body = bytes.strip_prefix(HEADER)?;
    Some(
        body.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.split(|b| *b == 0)
                    .map(|n| PathBuf::from(OsStr::from_bytes(n)))
                    .collect()
            })
            .collect(),
    )
}

/// Where the index of the tree `rootfs` (a blob's `rootfs/`) is kept.
fn index_path(rootfs: &Path) -> Option<PathBuf> {
    Some(rootfs.parent()?.join("links"))
}

/// Writes the index of `rootfs` beside it (a new file, then renamed).
pub(crate) fn store(rootfs: &Path, groups: &[Vec<PathBuf>]) -> io::Result<()> {
    let at = index_path(rootfs).ok_or_else(|| io::Error::other("the tree has no parent"))?;
    let tmp = at.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    let written = f
        .write_all(&render(groups))
        .and_then(|()| f.sync_all())
        .and_then(|()| fs::rename(&tmp, &at));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The hard-link index of the stored tree `rootfs` (a
/// [`crate::Resolved::Stored`] root): read from beside it, or computed and
/// (where the store can be written) kept for the next start. `None` when
/// it can be neither read nor computed; the caller then walks.
pub fn link_index(rootfs: &Path) -> Option<Vec<Vec<PathBuf>>> {
    let at = index_path(rootfs)?;
    if let Some(groups) = fs::read(&at).ok().and_then(|b| parse(&b)) {
        return Some(groups);
    }
    let groups = build(rootfs).ok()?;
    let _ = store(rootfs, &groups);
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_groups_every_name_of_a_file_and_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let rootfs = d.path().join("rootfs");
        fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
        fs::create_dir_all(rootfs.join("usr/lib/x")).unwrap();
        fs::write(rootfs.join("usr/bin/perl"), "x").unwrap();
        fs::write(rootfs.join("usr/bin/alone"), "x").unwrap();
        fs::hard_link(
            rootfs.join("usr/bin/perl"),
            rootfs.join("usr/bin/perl5.36.0"),
        )
        .unwrap();
        fs::hard_link(rootfs.join("usr/bin/perl"), rootfs.join("usr/lib/x/again")).unwrap();
        std::os::unix::fs::symlink("perl", rootfs.join("usr/bin/link")).unwrap();
        let want = vec![["/usr/bin/perl", "/usr/bin/perl5.36.0", "/usr/lib/x/again"]
            .map(PathBuf::from)
            .to_vec()];
        assert_eq!(build(&rootfs).unwrap(), want);
        // Computed once and kept beside the tree; read back the next time.
        assert_eq!(link_index(&rootfs).unwrap(), want);
        assert!(d.path().join("links").is_file());
        fs::remove_file(rootfs.join("usr/lib/x/again")).unwrap();
        assert_eq!(link_index(&rootfs).unwrap(), want, "kept, not recomputed");
        // A broken index is recomputed.
        fs::write(d.path().join("links"), "junk").unwrap();
        assert_eq!(
            link_index(&rootfs).unwrap(),
            vec![["/usr/bin/perl", "/usr/bin/perl5.36.0"]
                .map(PathBuf::from)
                .to_vec()]
        );
    }
}
