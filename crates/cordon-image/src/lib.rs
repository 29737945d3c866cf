//! cordon's image store: the root trees a sandbox's `image` names.
//!
//! An [`ImageStore`] maps names to content-addressed root trees. `host` is
//! built in ([`Resolved::Host`]: the host's system directories, read-only,
//! which is what the container rung shows without an image); every other
//! name is imported ([`ImageStore::import`]: a directory or a `.tar`,
//! `.tar.gz`/`.tgz`, or a container image — an OCI image layout or a
//! `docker save` archive, flattened layer by layer in `oci`, its run config
//! kept as [`ImageConfig`]) or built ([`ImageStore::build_debootstrap`],
//! [`ImageStore::ensure_default`]) and resolves to a [`Resolved::Stored`]
//! whose `root` a backend binds read-only.
//!
//! # Layout
//!
//! ```text
//! ROOT/                      0711, owned by the store's owner (root)
//!   lock                     flock: commit, rm and gc take it
//!   blobs/sha256-<hex>/      0711; one per distinct tree
//!     rootfs/                0755; the tree
//!     links                  0644; its hard-link index (see [`link_index`])
//!   names/<name>.json        name -> digest, size, created, source, config
//!   tmp/<unique>/            0700; builds and imports in progress
//! ```
//!
//! `ROOT` is [`ImageStore::default_root`] (`$CORDON_IMAGE_STORE`, else
//! `/var/lib/cordon/images`). A sandbox's stage-2 init, an unprivileged
//! mapped uid on the host, opens an image root by path, so `ROOT` and every
//! directory above and below it down to `rootfs/` must be searchable by
//! others; files stay owned by the store's owner and are never writable by
//! group or others. [`ImageStore::open`] refuses a root that is writable by
//! group or others, owned by another user, or not searchable, and says what
//! to run.
//!
//! # Content addressing
//!
//! An image's digest is SHA-256 over a depth-first walk of its tree in byte
//! order of names: each entry's relative path, type, mode bits, and the
//! SHA-256 of its content (regular files) or its target (symlinks). Owners
//! and times are not part of it. Two names with the same content share one
//! blob.
//!
//! Before the digest, a tree is made fit for the store: device nodes, fifos
//! and sockets are removed (skipped with a warning on import; the sandbox
//! gets its own `/dev`, and images are mounted `nodev`), setuid/setgid and
//! group/other write bits are cleared (images are mounted `nosuid` and
//! read-only; a blob must not be writable by anyone but the store's owner,
//! or it could change under its digest), every entry is given the store's
//! owner, and the root gets mode 0755.
//!
//! # A broken or partial build is never used
//!
//! Every build or import happens under `tmp/<unique>/`, whose directory is
//! `flock`ed by its builder for as long as it works. The finished tree is
//! prepared, digested and synced, then renamed into `blobs/` in one step
//! (`RENAME_NOREPLACE`: if the blob exists, the new copy is discarded), and
//! only then is `names/<name>.json` written (temporary file, fsync,
//! rename). [`ImageStore::resolve`] returns only a name whose entry parses
//! and whose blob exists. A `tmp/` entry whose lock can be taken belongs to
//! a builder that died; [`ImageStore::open`] and [`ImageStore::gc`] remove
//! it (unmounting anything a killed debootstrap left mounted beneath it).
//! [`ImageStore::gc`] also removes blobs no name points to (a build killed
//! between the blob's rename and the name's write leaves one).
//!
//! # What is not checked
//!
//! `resolve` does not re-hash the blob (hundreds of megabytes); the store's
//! modes are what keep it unchanged. Removing a name whose blob a running
//! sandbox uses removes the files under it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod build;
mod debootstrap;
mod dirs;
mod error;
#[doc(hidden)]
pub mod fuzz;
mod links;
mod oci;
mod store;
mod tree;

pub use debootstrap::{configured_mirror, DebootstrapOpts, DEFAULT_SUITE, FALLBACK_MIRROR};
pub use error::ImageError;
pub use links::link_index;
pub use oci::{ImageConfig, ImportOpts, DEFAULT_PLATFORM};
pub use store::ImageStore;

/// The built-in image.
pub const HOST: &str = "host";
/// The image [`ImageStore::ensure_default`] builds: minimal Debian with
/// `python3`.
pub const DEFAULT_IMAGE: &str = "default";
/// Where the store lives unless `$CORDON_IMAGE_STORE` says otherwise.
pub const DEFAULT_ROOT: &str = "/var/lib/cordon/images";

/// What an image name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The built-in `host` image: the host's system directories, read-only.
    Host,
    /// A stored image; `root` is the directory holding its root tree.
    Stored {
        name: String,
        digest: String,
        root: PathBuf,
    },
}

/// One stored name, as `ls` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageInfo {
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes of regular files in the tree.
    pub size: u64,
    /// Unix seconds when the name was written.
    pub created: u64,
    /// How it was made (`debootstrap SUITE MIRROR [+pkgs]`, `import PATH`).
    pub source: String,
    /// How the image says to run it (env, user, work dir, entrypoint,
    /// cmd): kept from an imported OCI or `docker save` image's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ImageConfig>,
}

/// What `gc` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Leftovers of builds and imports that did not finish.
    pub tmp_removed: usize,
    /// Blobs no name pointed to.
    pub blobs_removed: usize,
}

/// A test hook's view of a build's progress.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildStep {
    /// The tree is written under `tmp/`, not yet digested.
    Staged,
    /// The blob is in `blobs/`; the name is not written yet.
    BlobStored,
}

/// Whether `name` is a valid image name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

/// `created` as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_time(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_times() {
        assert!(valid_name("default"));
        assert!(valid_name("py3.11-slim_x"));
        for bad in ["", "Host", "../x", "a/b", "-x", ".x", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_251_199), "2024-02-29T23:59:59Z");
    }
}
