//! A host directory as a sandbox's work dir, copy-on-write.
//!
//! The directory (`DIR`) is the read-only lower layer of an overlay whose
//! upper layer is on the sandbox's own volume, so every byte the workload
//! writes — a new file, a copy of a file it changes — is held to
//! `max_disk` by the volume, whatever the size of `DIR`'s filesystem, and
//! nothing reaches `DIR` until the host applies it (`cordon-files`'
//! `workspace`).
//!
//! ```text
//! VOLUME/              the sandbox's volume (ext4 of exactly max_disk)
//!   work               the overlay: what the sandbox is given as its work dir
//!   tmp                the sandbox's /tmp, as ever
//!   layers/            root's, 0700: the workload cannot reach in
//!     lower            DIR, bound read-only and idmapped (DIR's owner shows
//!                      as the workload's uid)
//!     upper            the changes (the workload's uid, 0700)
//!     ovl              overlay's own work directory
//! ```
//!
//! Overlay's optional features that would put something other than plain
//! files, directories, links and whiteouts in the upper layer (or follow a
//! redirect out of it) are off: `redirect_dir=off` (a renamed directory is
//! copied, not recorded as a pointer into the lower layer), `metacopy=off`
//! (a changed file is copied whole), `index=off`, `xino=off`. Then the
//! upper layer alone says what changed.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::volume;

/// Where a mounted workspace's layers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceLayers {
    /// `DIR` as the sandbox sees it underneath: read-only, idmapped.
    pub lower: PathBuf,
    /// The sandbox's changes.
    pub upper: PathBuf,
    /// The merged view: the work dir.
    pub merged: PathBuf,
}

impl WorkspaceLayers {
    /// The layers of a workspace on `volume` (whether mounted or not).
    pub fn on(volume: &Path) -> WorkspaceLayers {
        let layers = volume.join("layers");
        WorkspaceLayers {
            lower: layers.join("lower"),
            upper: layers.join("upper"),
            merged: volume.join("work"),
        }
    }
}

/// Mounts `dir` copy-on-write at `VOLUME/work` (an existing, empty
/// directory of uid `to`): files `dir` holds as `owner` show as `to`, what
/// `to` writes lands in the upper layer on the volume. `dir` is the host's
/// choice (a canonical directory, checked by the caller). Refused with the
/// kernel's reason where `dir`'s filesystem cannot be idmapped or overlay
/// is missing; what was mounted is undone.
pub fn mount_workspace(
    dir: &Path,
    volume: &Path,
    owner: (u32, u32),
    to: u32,
) -> Result<WorkspaceLayers, String> {
    let l = WorkspaceLayers::on(volume);
    let layers = volume.join("layers");
    for p in [&layers, &l.lower, &l.upper, &layers.join("ovl")] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(p)
            .map_err(|e| format!("cannot create `{}`: {e}", p.display()))?;
    }
    std::os::unix::fs::chown(&l.upper, Some(to), Some(to))
        .map_err(|e| format!("cannot hand `{}` to uid {to}: {e}", l.upper.display()))?;
    volume::idmapped_bind_read_only(dir, &l.lower, owner.0, owner.1, to).map_err(|e| {
        format!("{e}\nhelp: put the workspace on a filesystem that supports idmapped mounts (ext4, xfs, btrfs, tmpfs)")
    })?;
    let opts = overlay_options(&l, &layers.join("ovl"));
    let mounted = opts.and_then(|opts| {
        nix::mount::mount(
            Some("overlay"),
            &l.merged,
            Some("overlay"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(opts.as_str()),
        )
        .map_err(|e| {
            format!(
                "cannot mount the workspace `{}` copy-on-write: overlay refused ({e})\nhelp: this kernel needs overlayfs with idmapped lower layers (Linux 5.19 or later)",
                dir.display()
            )
        })
    });
    if let Err(e) = mounted {
        let _ = volume::unmount(&l.lower);
        return Err(e);
    }
    Ok(l)
}

/// The overlay's mount options; a path overlay's option syntax would read
/// otherwise (`,`, `:`, `\`) is refused (cordon names these paths itself).
fn overlay_options(l: &WorkspaceLayers, ovl: &Path) -> Result<String, String> {
    let text = |p: &Path| -> Result<String, String> {
        let s = p
            .to_str()
            .ok_or_else(|| format!("`{}` is not UTF-8", p.display()))?;
        if s.contains([',', ':', '\\']) {
            return Err(format!(
                "`{s}` holds `,`, `:` or `\\`, which overlay's options cannot carry; use a scratch directory without them"
            ));
        }
        Ok(s.to_string())
    };
    Ok(format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off,metacopy=off,index=off,xino=off",
        text(&l.lower)?,
        text(&l.upper)?,
        text(ovl)?
    ))
}

/// Unmounts a workspace's overlay and lower layer (the volume itself is
/// the caller's). `Ok` when nothing was mounted.
pub fn unmount_workspace(volume: &Path) -> Result<(), String> {
    let l = WorkspaceLayers::on(volume);
    for p in [&l.merged, &l.lower] {
        volume::unmount(p).map_err(|e| format!("unmounting `{}`: {e}", p.display()))?;
    }
    Ok(())
}
