//! Linux enforcement (compiled on Linux only).

pub(crate) mod cgroup;
pub(crate) mod fs_rules;
pub(crate) mod init;
pub(crate) mod launch;
pub(crate) mod probe;
pub(crate) mod proto;
pub(crate) mod proxy;
pub(crate) mod pty;
pub(crate) mod rootfs;
pub(crate) mod seccomp;
pub(crate) mod seccomp_merge;
pub(crate) mod setup;
pub(crate) mod sysv;
pub(crate) mod warm;
pub(crate) mod warm_ahead;
pub(crate) mod warm_init;
