//! What a sandbox whose work dir is a host directory serves the same
//! whatever runs it (docker, gvisor, the local rungs): its files in and
//! out through the confined primitives, the secrets directory and nothing
//! else beside the work dir, and the record a kept sandbox's clients write
//! through; with the trait methods every sandbox writes alike
//! ([`sandbox_basics!`], [`host_files!`], [`host_sandbox!`]).

use std::sync::Mutex;

use cordon_files::host_dir::{HostSecretsDir, HostWorkDir};
use cordon_sandbox::{FileRead, FileStat, HostSecretsRecord, HostWorkDirRecord, SandboxError};

/// Why a write to the secrets directory is refused by a sandbox that has
/// none, unless its backend says otherwise.
pub const NO_SECRETS: &str = "this sandbox's spec names no secrets, so it has no secrets directory; name the secret in the spec's `secrets`";

/// A sandbox's host-side files: its work dir and, when its spec names
/// secrets, its secrets directory.
#[derive(Debug, Clone)]
pub struct HostFiles {
    work: HostWorkDir,
    secrets: Option<HostSecretsDir>,
    /// The uid the sandbox runs as: what cordon writes in belongs to it
    /// (unless the work dir says another owner), the secrets to its group.
    uid: u32,
    /// The sandbox's own `/tmp` on the host, when it has one (recorded
    /// for snapshots).
    tmp: Option<std::path::PathBuf>,
    /// Its `/tmp` as the files API serves it, where the backend reaches
    /// it ([`HostFiles::with_tmp_files`]).
    tmp_files: Option<HostWorkDir>,
    /// The watches open on the work dir, ended before the sandbox's
    /// filesystem goes ([`HostFiles::end_watches`]).
    watches: std::sync::Arc<cordon_files::watch::Watches>,
}

impl HostFiles {
    /// The files of a sandbox running as `uid`.
    pub fn new(work: HostWorkDir, secrets: Option<HostSecretsDir>, uid: u32) -> HostFiles {
        HostFiles {
            work,
            secrets,
            uid,
            tmp: None,
            tmp_files: None,
            watches: Default::default(),
        }
    }

    /// The same, the files API serving the sandbox's `/tmp` from `tmp`
    /// too (its guest path `/tmp`, as the policy names it).
    pub fn with_tmp_files(mut self, tmp: Option<HostWorkDir>) -> HostFiles {
        self.tmp_files = tmp;
        self
    }

    /// Sets what [`HostFiles::with_tmp_files`] sets, once the sandbox
    /// holds its `/tmp` open (the container rung's is in its own mount
    /// namespace, reached once its init runs).
    pub fn set_tmp_files(&mut self, tmp: HostWorkDir) {
        self.tmp_files = Some(tmp);
    }

    fn roots(&self) -> cordon_files::roots::Roots<'_> {
        cordon_files::roots::Roots {
            work: &self.work,
            tmp: self.tmp_files.as_ref(),
        }
    }
    /// The same, its own `/tmp` at `tmp` on the host (`None`: it has none
    /// of its own, or none beside a fresh work dir).
    pub fn with_tmp(mut self, tmp: Option<std::path::PathBuf>) -> HostFiles {
        self.tmp = tmp;
        self
    }

    pub fn work(&self) -> &HostWorkDir {
        &self.work
    }

    pub fn secrets(&self) -> Option<&HostSecretsDir> {
        self.secrets.as_ref()
    }

    /// Every host-side write into the sandbox: the secrets directory (and
    /// nothing else outside the work dir), or the work dir, confined. What
    /// is written in is handed over through the new file's descriptor, so
    /// a link an exec swaps in meanwhile is never chowned.
    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        if HostSecretsDir::names(path) {
            return match &self.secrets {
                Some(s) => s.write_secret(path, contents, mode),
                None => Err(SandboxError::PathRefused {
                    path: path.to_string(),
                    reason: NO_SECRETS.into(),
                }),
            };
        }
        let (dir, abs, _) = self.roots().place(path);
        dir.write_file(&abs, contents, mode)
    }

    pub fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.work.stat_no_follow(path)
    }

    pub fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.work.read_file(path, max_bytes)
    }

    /// The files API on the work dir and the sandbox's `/tmp`
    /// ([`cordon_files::roots::Roots::files`]).
    pub fn files(
        &self,
        op: &cordon_sandbox::FileOp,
    ) -> Result<cordon_sandbox::FileAnswer, SandboxError> {
        self.roots().files(op)
    }

    /// A watch of a directory of the work dir or of `/tmp`.
    pub fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<Box<dyn cordon_sandbox::WatchSource>, SandboxError> {
        self.roots().watch(path, recursive, Some(&self.watches))
    }

    /// Ends every watch open on the work dir (each one's last line says
    /// the sandbox was disposed of) and waits until they have let go of
    /// its descriptors: a dispose calls it before it unmounts, so the
    /// volume and its loop device are gone when the dispose returns, not
    /// when a watch's reader next looks. A reader that does not look
    /// within [`WATCH_END`] is logged and left: its descriptors go with it.
    pub fn end_watches(&self) {
        let left = self
            .watches
            .end_all("the sandbox was disposed of", WATCH_END);
        if left > 0 {
            tracing::warn!(
                left,
                "dispose: watches still open on the work dir; its mount goes when they do"
            );
        }
    }

    /// Where cordon writes files in, as whom: the work dir's owner when it
    /// names one (an operator's directory), else the sandbox's uid; the
    /// secrets directory with the sandbox's group.
    pub fn record(&self) -> HostWorkDirRecord {
        HostWorkDirRecord {
            host: self.work.host().to_path_buf(),
            guest: self.work.guest().to_string(),
            owner: Some(self.work.owner().map_or(self.uid, |o| o.0)),
            secrets: self.secrets.as_ref().map(|s| HostSecretsRecord {
                host: s.host().to_path_buf(),
                gid: self.uid,
            }),
            tmp: self.tmp.clone(),
        }
    }
}

/// How long a dispose waits for the watches on a work dir to end.
pub const WATCH_END: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a sandbox's egress cannot be changed when it has no route out.
pub const NO_ROUTE: &str = "this sandbox has no route out to change: it was made without `egress_allow` (or at a rung whose egress is closed); make a sandbox whose spec names the hosts";

/// The refusal of an egress change on a sandbox with no route out.
pub fn no_route() -> SandboxError {
    SandboxError::Invalid {
        reason: NO_ROUTE.into(),
    }
}

/// Changes a sandbox's egress through `control` (the proxy serving its
/// route), or refuses: no route, or the change the proxy refused.
pub fn change_egress(
    control: Option<&dyn cordon_egress::ChannelControl>,
    change: cordon_sandbox::EgressChange,
    by: &str,
) -> Result<u64, SandboxError> {
    control
        .ok_or_else(no_route)?
        .change(change, by)
        .map_err(|reason| SandboxError::Refused {
            reason,
            rules: Vec::new(),
        })
}

/// What serves a sandbox's route out (the egress proxy's serving of its
/// listener) and what changes it, held for the sandbox's life and ended
/// once at its dispose.
#[derive(Default)]
pub struct Serving(Mutex<Option<Served>>);

/// The serving's handle and its control.
struct Served {
    _handle: Box<dyn std::any::Any + Send>,
    control: std::sync::Arc<dyn cordon_egress::ChannelControl>,
}

impl Serving {
    /// What [`cordon_egress::EgressService::serve`] gave, kept (its CA is
    /// the caller's to place).
    pub fn new(served: Option<cordon_egress::Served>) -> Serving {
        Serving::of(served.map(|s| (s.handle, s.control)))
    }

    /// A serving's handle and control, kept.
    pub fn of(
        served: Option<(
            Box<dyn std::any::Any + Send>,
            std::sync::Arc<dyn cordon_egress::ChannelControl>,
        )>,
    ) -> Serving {
        Serving(Mutex::new(served.map(|(handle, control)| Served {
            _handle: handle,
            control,
        })))
    }

    /// Replaces the route's allowlist or closes it ([`change_egress`]); a
    /// sandbox with no route (or one whose serving ended) is refused.
    pub fn change(
        &self,
        change: cordon_sandbox::EgressChange,
        by: &str,
    ) -> Result<u64, SandboxError> {
        // The control alone, out of the lock: a change takes a while.
        let control = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|s| s.control.clone());
        change_egress(control.as_deref(), change, by)
    }

    /// Ends the serving (through a poisoned lock too: it holds only the
    /// handle and its control).
    pub fn end(&self) {
        drop(
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
    }
}

/// `Sandbox::id`, `provenance` and `resolve_command`, as every sandbox
/// serves them: from its fields `id` and `provenance`, and its program
/// resolved in its filesystem view (the field named, a
/// [`cordon_confine::RootedFs`] or a boxed [`cordon_confine::FsView`]).
/// Used inside `impl Sandbox for …`.
#[macro_export]
macro_rules! sandbox_basics {
    ($view:ident) => {
        fn id(&self) -> &str {
            &self.id
        }

        fn provenance(&self) -> &$crate::__sandbox::Provenance {
            &self.provenance
        }

        fn resolve_command(
            &self,
            program: &str,
        ) -> Result<$crate::__sandbox::ResolvedCommand, $crate::__sandbox::SandboxError> {
            $crate::resolve_in($crate::hosted::AsView::as_view(&self.$view), program)
        }
    };
}

/// `Sandbox::write_file`, `stat_no_follow`, `read_file`, `files` and
/// `host_work_dir` through the sandbox's [`HostFiles`] (the
/// field named).
/// Used inside `impl Sandbox for …`.
#[macro_export]
macro_rules! host_files {
    ($files:ident) => {
        fn write_file(
            &self,
            path: &str,
            contents: &[u8],
            mode: u32,
        ) -> Result<(), $crate::__sandbox::SandboxError> {
            self.$files.write_file(path, contents, mode)
        }

        fn stat_no_follow(
            &self,
            path: &str,
        ) -> Result<Option<$crate::__sandbox::FileStat>, $crate::__sandbox::SandboxError> {
            self.$files.stat_no_follow(path)
        }

        fn read_file(
            &self,
            path: &str,
            max_bytes: u64,
        ) -> Result<$crate::__sandbox::FileRead, $crate::__sandbox::SandboxError> {
            self.$files.read_file(path, max_bytes)
        }

        fn files(
            &self,
            op: &$crate::__sandbox::FileOp,
        ) -> Result<$crate::__sandbox::FileAnswer, $crate::__sandbox::SandboxError> {
            self.$files.files(op)
        }

        fn watch(
            &self,
            path: &str,
            recursive: bool,
        ) -> Result<Box<dyn $crate::__sandbox::WatchSource>, $crate::__sandbox::SandboxError> {
            self.$files.watch(path, recursive)
        }

        fn host_work_dir(&self) -> Option<$crate::__sandbox::HostWorkDirRecord> {
            Some(self.$files.record())
        }
    };
}

/// `Sandbox::start_exec` through the sandbox's own method `start` (taking
/// the request and the attachment), then [`sandbox_basics!`] and
/// [`host_files!`]: every trait method a sandbox over a host work dir
/// serves alike. Used inside `impl Sandbox for …`.
#[macro_export]
macro_rules! host_sandbox {
    ($start:ident, $view:ident, $files:ident) => {
        fn start_exec(
            &self,
            req: &$crate::__sandbox::ExecRequest,
            attach: $crate::__sandbox::Attach,
        ) -> Result<$crate::__sandbox::ExecHandle, $crate::__sandbox::SandboxError> {
            self.$start(req, attach)
        }

        $crate::sandbox_basics!($view);
        $crate::host_files!($files);
    };
}

/// A sandbox's filesystem view, whichever way it holds it.
pub trait AsView {
    fn as_view(&self) -> &dyn cordon_confine::FsView;
}

impl AsView for cordon_confine::RootedFs {
    fn as_view(&self) -> &dyn cordon_confine::FsView {
        self
    }
}

impl AsView for Box<dyn cordon_confine::FsView + Send + Sync> {
    fn as_view(&self) -> &dyn cordon_confine::FsView {
        &**self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_sandbox_without_secrets_refuses_writes_there_and_records_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let work = HostWorkDir::new(dir.path(), "/work").unwrap();
        let files = HostFiles::new(work.clone(), None, 7);
        let e = files
            .write_file("/run/cordon/secrets/k", b"x", 0o400)
            .unwrap_err();
        assert!(
            matches!(&e, SandboxError::PathRefused { reason, .. } if reason == NO_SECRETS),
            "{e:?}"
        );
        assert!(!dir.path().join("k").exists());
        let r = files.record();
        assert_eq!(
            (r.owner, r.guest.as_str(), r.secrets),
            (Some(7), "/work", None)
        );
        // An operator's directory is written as its owner.
        let given = HostFiles::new(work.owned_by(1234, 1234), None, 7);
        assert_eq!(given.record().owner, Some(1234));
        assert!(
            HostFiles::new(HostWorkDir::new(dir.path(), "/w").unwrap(), None, 1)
                .write_file("/run/cordon/secrets", b"", 0o400)
                .is_err_and(|e| e.to_string().contains("names no secrets"))
        );
    }
}
