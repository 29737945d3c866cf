//! System V IPC objects in the host's namespace, by owner: what a
//! sandbox's uid owns there is removed when the sandbox is disposed of.
//!
//! Both rungs give the workload an IPC namespace of its own, so nothing it
//! makes lands in the host's; this sweeps what an older cordon's process
//! rung (which had none) left, so a later sandbox leased the same uid
//! cannot read it.

use std::io;

/// The three kinds, by their `/proc/sysvipc` file and removal call.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Shm,
    Msg,
    Sem,
}

impl Kind {
    fn file(self) -> &'static str {
        match self {
            Kind::Shm => "/proc/sysvipc/shm",
            Kind::Msg => "/proc/sysvipc/msg",
            Kind::Sem => "/proc/sysvipc/sem",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Shm => "shared memory segment",
            Kind::Msg => "message queue",
            Kind::Sem => "semaphore set",
        }
    }

    /// `IPC_RMID` on `id`.
    #[allow(unsafe_code)]
    fn remove(self, id: i32) -> io::Result<()> {
        // SAFETY: IPC_RMID reads no buffer (a null one is what the manual
        // says to pass); the calls take plain integers otherwise.
        let rc = unsafe {
            match self {
                Kind::Shm => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                Kind::Msg => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                Kind::Sem => libc::semctl(id, 0, libc::IPC_RMID),
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// The ids of `text` (a `/proc/sysvipc` table) whose owner or creator is `uid`.
fn ids_of(text: &str, uid: u32) -> Vec<i32> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let id_col = ["shmid", "msqid", "semid"].iter().find_map(|n| col(n));
    let (Some(id_col), Some(uid_col), Some(cuid_col)) = (id_col, col("uid"), col("cuid")) else {
        return Vec::new();
    };
    let uid = uid.to_string();
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ours =
                f.get(uid_col) == Some(&uid.as_str()) || f.get(cuid_col) == Some(&uid.as_str());
            ours.then(|| f.get(id_col)?.parse().ok()).flatten()
        })
        .collect()
}

/// Removes every System V IPC object of the caller's IPC namespace owned
/// or created by `uid` (never 0). Returns how many went, and what could
/// not be removed.
pub fn remove_owned_by(uid: u32) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failures = Vec::new();
    if uid == 0 {
        return (0, vec!["uid 0's IPC objects are never swept".into()]);
    }
    for kind in [Kind::Shm, Kind::Msg, Kind::Sem] {
        let text = match std::fs::read_to_string(kind.file()) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                failures.push(format!("{}: {e}", kind.file()));
                continue;
            }
        };
        for id in ids_of(&text, uid) {
            match kind.remove(id) {
                Ok(()) => removed += 1,
                // Gone meanwhile.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EIDRM)) => {}
                Err(e) => failures.push(format!("{} {id} of uid {uid}: {e}", kind.name())),
            }
        }
    }
    (removed, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_picked_by_owner_or_creator() {
        let shm = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0          4   600               1048576  4321     0      0  2000000001  2000000001  2000000001  2000000001 0 0 1 0 0
         0          5   600               1048576  4321     0      0  0  0  2000000001  0 0 0 1 0 0
         0          6   600               1048576  4321     0      0  0  0  0  0 0 0 1 0 0";
        assert_eq!(ids_of(shm, 2_000_000_001), vec![4, 5]);
        let sem =
            "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime
         0          0   600          1  7  7  7  7 0 1";
        assert_eq!(ids_of(sem, 7), vec![0]);
        assert!(ids_of("garbage", 7).is_empty());
    }
}
