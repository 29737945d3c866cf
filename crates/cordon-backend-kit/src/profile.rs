//! One profile per rung: every question whose answer differs between the
//! `process` and `container` rungs is asked of a [`RungProfile`], chosen
//! once from the rung ([`RungProfile::of`], the one `match` on it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_confine::{FsView, HostFs, LinkIndex, Mode, RootedFs};
use cordon_linux::{Enforcer, InitIds, Missing, Rung};
use cordon_sandbox::{Egress, Isolation, WorkDirView};

use crate::{INIT_ID_OFFSET, INSIDE_ID};

/// What the workload's filesystem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filesystem {
    /// The host's own (no mount namespace): every path is the host's, the
    /// work dir shows at its host path, `/tmp` is the host's shared one
    /// (the workload gets a private temporary directory instead), and only
    /// the `host` image runs.
    Host,
    /// A root of its own (an image's from the store, or the host's system
    /// trees) in a mount namespace: the work dir is bound at the spec's
    /// `work_dir`, `/tmp` is the namespace's own.
    Rooted,
}

/// Everything rung-specific about a local backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RungProfile {
    pub rung: Rung,
    /// The backend's name (`process`, `container`).
    pub name: &'static str,
    pub isolation: Isolation,
    /// One line for the catalogue.
    pub summary: &'static str,
    pub filesystem: Filesystem,
    /// Whether masks exist (a denied path inside a granted tree hidden).
    pub mode: Mode,
    /// The uid/gid the workload has inside a user namespace; `None`: it
    /// runs as its host uid/gid.
    pub inside_id: Option<u32>,
    /// Whether a sandbox is warm (built once at acquire, every exec run in
    /// it) rather than a one-shot launch per exec.
    pub warm: bool,
    /// What the rung holds egress to: `allowlist` where the egress proxy is
    /// the sandbox's one route out (a net namespace with only loopback and
    /// Landlock allowing a connect to the proxy's port alone), `closed`
    /// where there is no route at all.
    pub egress: Egress,
}

/// The `process` rung.
pub const PROCESS: RungProfile = RungProfile {
    rung: Rung::Process,
    name: "process",
    isolation: Isolation::Process,
    summary: "a separate process as a dedicated uid, Landlock, seccomp, cgroups, no network",
    filesystem: Filesystem::Host,
    // Its own mount namespace holds masks over the host's tree.
    mode: Mode::MasksAvailable,
    inside_id: None,
    warm: false,
    // An empty net namespace at this rung, and seccomp refuses every
    // socket(), so there is no channel a proxy could be reached on.
    egress: Egress::Closed,
};

/// The `container` rung.
pub const CONTAINER: RungProfile = RungProfile {
    rung: Rung::Container,
    name: "container",
    isolation: Isolation::Container,
    summary: "cordon's own Linux namespaces, cgroups, Landlock and seccomp",
    filesystem: Filesystem::Rooted,
    mode: Mode::MasksAvailable,
    inside_id: Some(INSIDE_ID),
    warm: true,
    egress: Egress::Allowlist,
};

/// Trees the launcher gives every rooted sandbox itself, never from an
/// image: looked at as they are on the host.
const OWN_TREES: [&str; 4] = ["/proc", "/dev", "/sys", "/tmp"];

impl RungProfile {
    /// The profile of `rung`.
    pub fn of(rung: Rung) -> &'static RungProfile {
        match rung {
            Rung::Process => &PROCESS,
            Rung::Container => &CONTAINER,
        }
    }

    /// Where the workload sees its work dir.
    pub fn work_dir_view(&self) -> WorkDirView {
        match self.filesystem {
            Filesystem::Host => WorkDirView::HostPath,
            Filesystem::Rooted => WorkDirView::SpecPath,
        }
    }

    /// Whether a sandbox gets a private temporary directory of its own
    /// (`TMPDIR`) because the `/tmp` it sees is the host's, shared with
    /// other users; else `/tmp` is the namespace's own.
    pub fn private_tmp_dir(&self) -> bool {
        self.filesystem == Filesystem::Host
    }

    /// Whether images from cordon's store can be run (else only `host`).
    pub fn runs_images(&self) -> bool {
        self.filesystem == Filesystem::Rooted
    }

    /// The work dir as the workload sees it: the spec's `spec_dir`, or the
    /// host path `host`.
    pub fn guest_work_dir(&self, spec_dir: &str, host: &str) -> String {
        match self.work_dir_view() {
            WorkDirView::SpecPath | WorkDirView::GuestOnly => spec_dir.to_string(),
            WorkDirView::HostPath => host.to_string(),
        }
    }

    /// The temporary directory as the workload sees it: `tmp` (the private
    /// one) where there is one, else `/tmp`.
    pub fn tmp_seen(&self, tmp: Option<&Path>) -> PathBuf {
        if self.private_tmp_dir() {
            tmp.map_or_else(|| PathBuf::from("/nonexistent"), Path::to_path_buf)
        } else {
            PathBuf::from("/tmp")
        }
    }

    /// The workload's uid/gid as it sees it, for host uid/gid `host_id`.
    pub fn inside_id(&self, host_id: u32) -> u32 {
        self.inside_id.unwrap_or(host_id)
    }

    /// The host ids of a warm sandbox's init, for a workload of `host_id`:
    /// a uid of its own that the workload does not have.
    pub fn init_ids(&self, host_id: u32) -> InitIds {
        let id = host_id.wrapping_add(INIT_ID_OFFSET);
        InitIds {
            host_uid: id,
            host_gid: id,
        }
    }

    /// What `enforcer`'s machine lacks for this backend: the rung's
    /// mechanisms, and a warm sandbox's on top.
    pub fn available(&self, enforcer: &dyn Enforcer) -> Result<(), Missing> {
        if self.warm {
            enforcer.available_warm()
        } else {
            enforcer.available(self.rung)
        }
    }

    /// The filesystem as the workload sees it: the host's own, or a root
    /// (the image's, or the host's `/`) with the work dir bound at its
    /// `guest` path and, over an image, the launcher's own trees as they
    /// are.
    pub fn view(
        &self,
        guest: &str,
        host_work: &Path,
        image: Option<&Path>,
    ) -> Result<Box<dyn FsView + Send + Sync>, String> {
        if self.filesystem == Filesystem::Host {
            return Ok(Box::new(HostFs));
        }
        let host_work = host_work
            .canonicalize()
            .map_err(|e| format!("the work dir `{}`: {e}", host_work.display()))?;
        let view = match image {
            // A stored image's hard-link index, computed once per blob:
            // hints for the names of a denied program (each checked).
            Some(root) => OWN_TREES.into_iter().fold(
                match cordon_image::link_index(root) {
                    Some(groups) => {
                        RootedFs::new(root).with_links(Arc::new(LinkIndex::new(groups)))
                    }
                    None => RootedFs::new(root),
                },
                |v, own| v.bind(own, own),
            ),
            None => RootedFs::new("/"),
        };
        Ok(Box::new(view.bind(guest, host_work)))
    }

    /// Where the work dir comes from when the workload sees it elsewhere
    /// than at `host_work` (a bind), else `None`.
    pub fn work_dir_source(&self, guest: &str, host_work: &Path) -> Option<PathBuf> {
        (self.filesystem == Filesystem::Rooted && Path::new(guest) != host_work)
            .then(|| host_work.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rung_has_its_profile() {
        for rung in [Rung::Process, Rung::Container] {
            let p = RungProfile::of(rung);
            assert_eq!(p.rung, rung);
            assert_eq!(p.name, rung.to_string());
        }
        assert!(PROCESS.private_tmp_dir() && !PROCESS.runs_images() && !PROCESS.warm);
        assert!(!CONTAINER.private_tmp_dir() && CONTAINER.runs_images() && CONTAINER.warm);
        assert_eq!(PROCESS.inside_id(2_000_000_001), 2_000_000_001);
        assert_eq!(CONTAINER.inside_id(2_000_000_001), INSIDE_ID);
    }
}
