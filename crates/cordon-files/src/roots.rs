//! The files API over the two places a sandbox's workload writes by
//! default: its work dir and its own `/tmp`.
//!
//! [`Roots`] takes a path as the workload names it (relative paths are
//! beneath the work dir), finds which of the two it lies beneath and
//! serves the operation there through [`HostWorkDir`] — each place its own
//! descriptor, nothing followed out of it. What the `/tmp` side answers
//! (a listing's paths, a watch's events) carries absolute paths (`/tmp/x`),
//! so the policy's decision on each one and the caller's reading of it
//! never mistake it for a path in the work dir.

use cordon_sandbox::files::absolute;
use cordon_sandbox::{FileAnswer, FileOp, SandboxError, WatchSource};

use crate::host_dir::HostWorkDir;

/// A sandbox's work dir and, where its backend can reach it, its `/tmp`.
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    pub work: &'a HostWorkDir,
    pub tmp: Option<&'a HostWorkDir>,
}

/// Whether the absolute `path` is `dir` or beneath it.
fn beneath(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl<'a> Roots<'a> {
    /// The place `path` (as the workload names it) lies in, with the path
    /// made absolute; and whether that place is the `/tmp` side.
    pub fn place(&self, path: &str) -> (&'a HostWorkDir, String, bool) {
        let abs = absolute(self.work.guest(), path);
        match self.tmp {
            // The deeper of the two wins, should one hold the other.
            Some(t)
                if beneath(&abs, t.guest())
                    && !(beneath(&abs, self.work.guest())
                        && self.work.guest().len() > t.guest().len()) =>
            {
                (t, abs, true)
            }
            _ => (self.work, abs, false),
        }
    }

    /// One operation of the files API, in the place its path lies in. A
    /// rename from one place to the other is refused (they are two
    /// filesystems; read, write and remove instead).
    pub fn files(&self, op: &FileOp) -> Result<FileAnswer, SandboxError> {
        let first = op.accesses().first().map_or("", |(p, _)| *p).to_string();
        let (dir, _, tmp) = self.place(&first);
        if let FileOp::Rename { from, to } = op {
            let (_, _, to_tmp) = self.place(to);
            if tmp != to_tmp {
                return Err(SandboxError::PathRefused {
                    path: to.clone(),
                    reason: format!(
                        "`{from}` and `{to}` are on two filesystems (the work dir and `/tmp`), so one cannot be renamed to the other; read it, write it at `{to}`, then remove `{from}`"
                    ),
                });
            }
        }
        // Absolute paths throughout, so `dir` resolves none against the
        // other place.
        let op = absolute_op(op, self.work.guest());
        let answer = dir.files(&op).map_err(|e| {
            if tmp {
                absolute_error(e, dir.guest())
            } else {
                e
            }
        })?;
        Ok(if tmp {
            absolute_answer(answer, dir.guest())
        } else {
            answer
        })
    }

    /// A watch of the directory `path` in the place it lies in (tracked by
    /// `watches`, when given, to be ended with the sandbox).
    pub fn watch(
        &self,
        path: &str,
        recursive: bool,
        watches: Option<&crate::watch::Watches>,
    ) -> Result<Box<dyn WatchSource>, SandboxError> {
        let (dir, abs, tmp) = self.place(path);
        let w = match watches {
            Some(ws) => dir.watch_tracked(&abs, recursive, ws)?,
            None => dir.watch(&abs, recursive)?,
        };
        Ok(if tmp {
            Box::new(Prefixed {
                inner: w,
                prefix: dir.guest().to_string(),
            })
        } else {
            w
        })
    }
}

/// `op` with each path made absolute (relative ones beneath `work`).
fn absolute_op(op: &FileOp, work: &str) -> FileOp {
    let abs = |p: &String| absolute(work, p);
    match op {
        FileOp::List { path, depth } => FileOp::List {
            path: abs(path),
            depth: *depth,
        },
        FileOp::Stat { path } => FileOp::Stat { path: abs(path) },
        FileOp::Read { path, offset, len } => FileOp::Read {
            path: abs(path),
            offset: *offset,
            len: *len,
        },
        FileOp::Write {
            path,
            data,
            mode,
            how,
        } => FileOp::Write {
            path: abs(path),
            data: data.clone(),
            mode: *mode,
            how: *how,
        },
        FileOp::Mkdir { path } => FileOp::Mkdir { path: abs(path) },
        FileOp::Remove { path, recursive } => FileOp::Remove {
            path: abs(path),
            recursive: *recursive,
        },
        FileOp::Rename { from, to } => FileOp::Rename {
            from: abs(from),
            to: abs(to),
        },
    }
}

/// `rel`, a path beneath `dir` as [`HostWorkDir`] answers it, absolute.
fn under(dir: &str, rel: &str) -> String {
    if rel.is_empty() || rel == "." {
        dir.to_string()
    } else {
        format!("{dir}/{}", rel.trim_start_matches('/'))
    }
}

/// `e` with a path beneath `dir` it names relative made absolute.
fn absolute_error(e: SandboxError, dir: &str) -> SandboxError {
    let fix = |path: String, reason: String| {
        if path.starts_with('/') {
            (path, reason)
        } else {
            let abs = under(dir, &path);
            let reason = reason.replace(&format!("`{path}`"), &format!("`{abs}`"));
            (abs, reason)
        }
    };
    match e {
        SandboxError::PathRefused { path, reason } => {
            let (path, reason) = fix(path, reason);
            SandboxError::PathRefused { path, reason }
        }
        SandboxError::NotFound { path } => SandboxError::NotFound {
            path: fix(path, String::new()).0,
        },
        SandboxError::NotRegularFile { path, found } => SandboxError::NotRegularFile {
            path: fix(path, String::new()).0,
            found,
        },
        other => other,
    }
}

fn absolute_answer(answer: FileAnswer, dir: &str) -> FileAnswer {
    match answer {
        FileAnswer::Listing { entries, truncated } => FileAnswer::Listing {
            entries: entries
                .into_iter()
                .map(|mut e| {
                    e.path = under(dir, &e.path);
                    e
                })
                .collect(),
            truncated,
        },
        FileAnswer::Stat(Some(mut e)) => {
            e.path = under(dir, &e.path);
            FileAnswer::Stat(Some(e))
        }
        other => other,
    }
}

/// A watch whose events' paths are made absolute beneath `prefix`.
struct Prefixed {
    inner: Box<dyn WatchSource>,
    prefix: String,
}

impl WatchSource for Prefixed {
    fn next(&mut self, wait: std::time::Duration) -> cordon_sandbox::watch::Next {
        use cordon_sandbox::watch::{Next, WatchKind};
        match self.inner.next(wait) {
            Next::Event(mut e) if e.event != WatchKind::Overflow => {
                e.path = under(&self.prefix, &e.path);
                e.to = e.to.map(|t| under(&self.prefix, &t));
                Next::Event(e)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use cordon_sandbox::WriteHow;

    fn two() -> (tempfile::TempDir, HostWorkDir, HostWorkDir) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("work")).unwrap();
        std::fs::create_dir(root.join("tmp")).unwrap();
        let work = HostWorkDir::new(root.join("work"), "/workspace").unwrap();
        let tmp = HostWorkDir::new(root.join("tmp"), "/tmp").unwrap();
        (t, work, tmp)
    }

    fn write(path: &str) -> FileOp {
        FileOp::Write {
            path: path.into(),
            data: b"x".to_vec(),
            mode: 0o644,
            how: WriteHow::Create,
        }
    }

    /// Each path lands in its own place; the `/tmp` side answers absolute
    /// paths; a relative path is the work dir's, whatever its name.
    #[test]
    fn each_path_goes_to_its_place() {
        let (t, work, tmp) = two();
        let r = Roots {
            work: &work,
            tmp: Some(&tmp),
        };
        r.files(&write("/tmp/a")).unwrap();
        r.files(&write("tmp/b")).unwrap();
        r.files(&write("/workspace/c")).unwrap();
        let root = t.path().canonicalize().unwrap();
        assert!(root.join("tmp/a").is_file());
        assert!(
            root.join("work/tmp/b").is_file(),
            "a relative `tmp/` is the work dir's"
        );
        assert!(root.join("work/c").is_file());
        let FileAnswer::Listing { entries, .. } = r
            .files(&FileOp::List {
                path: "/tmp".into(),
                depth: 0,
            })
            .unwrap()
        else {
            panic!()
        };
        let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/tmp/a"]);
        let FileAnswer::Stat(Some(s)) = r
            .files(&FileOp::Stat {
                path: "/tmp/a".into(),
            })
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(s.path, "/tmp/a");
        // A name that only starts like `/tmp` is not beneath it.
        assert!(r.files(&write("/tmpx/d")).is_err());
        assert!(!root.join("tmpx").exists());
    }

    /// A rename across the two is refused, saying what to do; nothing
    /// moves.
    #[test]
    fn a_rename_between_the_places_is_refused() {
        let (t, work, tmp) = two();
        let r = Roots {
            work: &work,
            tmp: Some(&tmp),
        };
        r.files(&write("/tmp/a")).unwrap();
        let e = r
            .files(&FileOp::Rename {
                from: "/tmp/a".into(),
                to: "a".into(),
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("two filesystems") && e.contains("remove"), "{e}");
        assert!(t.path().join("tmp/a").is_file());
        r.files(&FileOp::Rename {
            from: "/tmp/a".into(),
            to: "/tmp/b".into(),
        })
        .unwrap();
        assert!(t.path().join("tmp/b").is_file());
    }

    /// Without a `/tmp` of its own reachable, `/tmp` paths are refused as
    /// outside the work dir (as before).
    #[test]
    fn without_tmp_only_the_work_dir() {
        let (_t, work, _tmp) = two();
        let r = Roots {
            work: &work,
            tmp: None,
        };
        let e = r.files(&write("/tmp/a")).unwrap_err().to_string();
        assert!(e.contains("not beneath the work dir"), "{e}");
    }

    /// A link planted in `/tmp` pointing out is not followed, and a
    /// pinned `/tmp` (a descriptor, no path) serves the same.
    #[test]
    fn a_pinned_tmp_follows_no_link_out() {
        let (t, work, _) = two();
        let root = t.path().canonicalize().unwrap();
        std::fs::write(root.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(root.join("secret"), root.join("tmp/l")).unwrap();
        let fd = std::fs::File::open(root.join("tmp")).unwrap();
        let tmp = HostWorkDir::pinned(std::sync::Arc::new(fd.into()), "/tmp", "/tmp").unwrap();
        let r = Roots {
            work: &work,
            tmp: Some(&tmp),
        };
        let e = r
            .files(&FileOp::Read {
                path: "/tmp/l".into(),
                offset: 0,
                len: 10,
            })
            .unwrap_err();
        assert!(
            matches!(&e, SandboxError::PathRefused { path, .. } if path == "/tmp/l"),
            "{e:?}"
        );
        r.files(&write("/tmp/new")).unwrap();
        assert!(root.join("tmp/new").is_file());
        let watches = crate::watch::Watches::default();
        let mut w = r.watch("/tmp", false, Some(&watches)).unwrap();
        std::fs::write(root.join("tmp/seen"), "x").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no event for /tmp/seen"
            );
            if let cordon_sandbox::watch::Next::Event(e) =
                w.next(std::time::Duration::from_millis(200))
            {
                if e.path == "/tmp/seen" {
                    break;
                }
            }
        }
    }
}
