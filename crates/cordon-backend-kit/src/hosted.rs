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
    no_secrets: &'static str,
}

impl HostFiles {
    /// The files of a sandbox running as `uid`.
    pub fn new(work: HostWorkDir, secrets: Option<HostSecretsDir>, uid: u32) -> HostFiles {
        HostFiles {
            work,
            secrets,
            uid,
            no_secrets: NO_SECRETS,
        }
    }

    /// A backend that serves no secrets says why (and what to do instead).
    pub fn refusing_secrets(mut self, why: &'static str) -> HostFiles {
        self.no_secrets = why;
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
                    reason: self.no_secrets.into(),
                }),
            };
        }
        self.work.write_file(path, contents, mode)
    }

    pub fn stat_no_follow(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        self.work.stat_no_follow(path)
    }

    pub fn read_file(&self, path: &str, max_bytes: u64) -> Result<FileRead, SandboxError> {
        self.work.read_file(path, max_bytes)
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
        }
    }
}

/// What serves a sandbox's route out (the egress proxy's serving of its
/// listener), held for the sandbox's life and ended once at its dispose.
#[derive(Default)]
pub struct Serving(Mutex<Option<Box<dyn std::any::Any + Send>>>);

impl Serving {
    pub fn new(serving: Option<Box<dyn std::any::Any + Send>>) -> Serving {
        Serving(Mutex::new(serving))
    }

    /// Ends the serving (through a poisoned lock too: it holds only the
    /// handle).
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

/// `Sandbox::write_file`, `stat_no_follow`, `read_file` and
/// `host_work_dir` through the sandbox's [`HostFiles`] (the field named).
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
        let files = HostFiles::new(work.clone(), None, 7).refusing_secrets("none here");
        let e = files
            .write_file("/run/cordon/secrets/k", b"x", 0o400)
            .unwrap_err();
        assert!(
            matches!(&e, SandboxError::PathRefused { reason, .. } if reason == "none here"),
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
