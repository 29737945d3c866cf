//! The container rung shows the work dir at the spec's path (`/workspace`
//! by default) while it lives elsewhere on the host, and with an image from
//! the store its whole root is a directory of the store. The policy is
//! planned in the workload's view (its `work_dir` and any literal path);
//! the translation checks the host's files. [`Rebase`] carries paths across
//! those binds, one way each, so a deny written against `/workspace/...` or
//! `/usr/bin/perl` is checked — and masked — on the file that is really
//! there.

use std::path::{Path, PathBuf};

use cordon_policy::plan::{ConfinementPlan, Grant, PathAtom, PathSet};

/// One bind: a tree as the workload sees it (`guest`) and where it is
/// (`host`). A `guest` of `""` is the root.
#[derive(Debug, Clone)]
struct Bind {
    guest: String,
    host: String,
}

impl Bind {
    /// What of `s` lies beneath this bind's guest side (`""` for itself).
    fn rest<'a>(&self, s: &'a str) -> Option<&'a str> {
        let rest = s.strip_prefix(&self.guest)?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}

/// The binds of one sandbox, most specific first.
#[derive(Debug, Clone)]
pub struct Rebase {
    binds: Vec<Bind>,
}

/// Trees every sandbox gets from the launcher, never from an image:
/// translated as they are.
const OWN_TREES: &[&str] = &["/proc", "/dev", "/sys", "/tmp"];

impl Rebase {
    /// The work dir `guest` bound from `host` (both absolute; `host`
    /// canonical, so the translation's resolved paths start with it), and
    /// with `image`, the whole root served from that canonical host
    /// directory except the work dir and the launcher's own trees (`/proc`,
    /// `/dev`, `/sys`, `/tmp`).
    pub fn with_image(guest: &str, host: &Path, image: Option<&Path>) -> Option<Rebase> {
        let clean = |p: &str| p.trim_end_matches('/').to_string();
        let host = clean(host.to_str()?);
        let guest = clean(guest);
        if !(guest.starts_with('/') && host.starts_with('/')) {
            return None;
        }
        let mut binds = vec![Bind { guest, host }];
        if let Some(image) = image {
            let image = clean(image.to_str()?);
            if !image.starts_with('/') {
                return None;
            }
            for own in OWN_TREES {
                binds.push(Bind {
                    guest: own.to_string(),
                    host: own.to_string(),
                });
            }
            binds.push(Bind {
                guest: String::new(),
                host: image,
            });
        }
        binds.sort_by_key(|b| std::cmp::Reverse(b.guest.len()));
        Some(Rebase { binds })
    }

    /// `s` carried from the workload's view to the host's.
    fn to_host_str(&self, s: &str) -> Option<String> {
        self.binds
            .iter()
            .find_map(|b| b.rest(s).map(|rest| format!("{}{rest}", b.host)))
    }

    fn atom(&self, a: &PathAtom) -> PathAtom {
        match a {
            PathAtom::Prefix(x) => self
                .to_host_str(x)
                .map_or_else(|| a.clone(), PathAtom::Prefix),
            PathAtom::Exact(x) => self
                .to_host_str(x)
                .map_or_else(|| a.clone(), PathAtom::Exact),
            PathAtom::Suffix(_) => a.clone(),
        }
    }

    /// The sets `set` means on the host: the set with its work-dir paths
    /// carried over, and — when one of its prefixes ends inside the work
    /// dir's own path (`startsWith("/work")` covers all of `/workspace`) —
    /// the same set on the whole host work dir too.
    fn sets(&self, set: &PathSet) -> Vec<PathSet> {
        let direct = PathSet {
            all_of: set.all_of.iter().map(|a| self.atom(a)).collect(),
        };
        let mut out = vec![direct];
        // A prefix ending inside a bind's own name (`startsWith("/work")`
        // covers all of `/workspace`) also covers that bind's host side.
        for b in self.binds.iter().filter(|b| !b.guest.is_empty()) {
            let covers_whole = |a: &PathAtom| match a {
                PathAtom::Prefix(x) => b.guest.starts_with(x.as_str()) && x.len() < b.guest.len(),
                _ => false,
            };
            if set.all_of.iter().any(covers_whole) {
                out.push(PathSet {
                    all_of: set
                        .all_of
                        .iter()
                        .map(|a| {
                            if covers_whole(a) {
                                PathAtom::Prefix(format!("{}/", b.host))
                            } else {
                                self.atom(a)
                            }
                        })
                        .collect(),
                });
            }
        }
        out
    }

    fn grants(&self, gs: &[Grant]) -> Vec<Grant> {
        gs.iter()
            .flat_map(|g| {
                self.sets(&g.paths).into_iter().map(|paths| Grant {
                    paths,
                    rights: g.rights,
                    rules: g.rules.clone(),
                })
            })
            .collect()
    }

    /// The plan in the host's view.
    pub fn plan_to_host(&self, plan: &ConfinementPlan) -> ConfinementPlan {
        ConfinementPlan {
            storage_allow: self.grants(&plan.storage_allow),
            storage_deny: self.grants(&plan.storage_deny),
            exec_allow: self.grants(&plan.exec_allow),
            exec_deny: self.grants(&plan.exec_deny),
            bounds: plan.bounds,
            notes: plan.notes.clone(),
        }
    }

    /// A translated path carried back into the workload's view (the most
    /// specific host side that holds it).
    pub fn to_guest(&self, p: &Path) -> PathBuf {
        let Some(s) = p.to_str() else {
            return p.to_path_buf();
        };
        let mut best: Option<(&Bind, &str)> = None;
        for b in &self.binds {
            let Some(rest) = s.strip_prefix(&b.host) else {
                continue;
            };
            if !(rest.is_empty() || rest.starts_with('/')) {
                continue;
            }
            if best.is_none_or(|(bb, _)| b.host.len() > bb.host.len()) {
                best = Some((b, rest));
            }
        }
        match best {
            Some((b, rest)) => {
                let g = format!("{}{rest}", b.guest);
                PathBuf::from(if g.is_empty() { "/".to_string() } else { g })
            }
            None => p.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::plan::Rights;

    fn grant(atoms: Vec<PathAtom>) -> Grant {
        Grant {
            paths: PathSet { all_of: atoms },
            rights: Rights::READ,
            rules: vec![],
        }
    }

    fn r() -> Rebase {
        Rebase::with_image("/workspace", Path::new("/var/tmp/cordon-work-1"), None).unwrap()
    }

    #[test]
    fn paths_under_the_work_dir_cross_and_others_do_not() {
        let r = r();
        let gs = r.grants(&[
            grant(vec![PathAtom::Prefix("/workspace/".into())]),
            grant(vec![PathAtom::Exact("/workspace/.env".into())]),
            grant(vec![PathAtom::Prefix("/workspace2/".into())]),
            grant(vec![PathAtom::Prefix("/usr/".into())]),
        ]);
        let shown: Vec<_> = gs.iter().map(|g| g.paths.all_of.clone()).collect();
        assert_eq!(
            shown,
            vec![
                vec![PathAtom::Prefix("/var/tmp/cordon-work-1/".into())],
                vec![PathAtom::Exact("/var/tmp/cordon-work-1/.env".into())],
                vec![PathAtom::Prefix("/workspace2/".into())],
                vec![PathAtom::Prefix("/usr/".into())],
            ]
        );
        assert_eq!(
            r.to_guest(Path::new("/var/tmp/cordon-work-1/.ssh")),
            PathBuf::from("/workspace/.ssh")
        );
        assert_eq!(
            r.to_guest(Path::new("/var/tmp/cordon-work-1")),
            PathBuf::from("/workspace")
        );
        assert_eq!(
            r.to_guest(Path::new("/var/tmp/cordon-work-10")),
            PathBuf::from("/var/tmp/cordon-work-10")
        );
    }

    #[test]
    fn a_prefix_that_covers_the_whole_work_dir_also_covers_its_host_side() {
        // A deny on everything under `/work` denies all of `/workspace`: on
        // the host it must deny the whole host work dir, not nothing.
        let gs = r().grants(&[grant(vec![
            PathAtom::Prefix("/work".into()),
            PathAtom::Suffix(".env".into()),
        ])]);
        assert_eq!(gs.len(), 2);
        assert_eq!(
            gs[1].paths.all_of,
            vec![
                PathAtom::Prefix("/var/tmp/cordon-work-1/".into()),
                PathAtom::Suffix(".env".into())
            ]
        );
        assert!(gs[1].paths.matches("/var/tmp/cordon-work-1/a/.env"));
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn with_an_image_every_path_but_the_launchers_trees_is_the_images() {
        let r = Rebase::with_image(
            "/workspace",
            Path::new("/var/tmp/w"),
            Some(Path::new("/var/lib/cordon/images/blobs/sha256-ab/rootfs")),
        )
        .unwrap();
        let img = "/var/lib/cordon/images/blobs/sha256-ab/rootfs";
        assert_eq!(
            r.to_host_str("/usr/bin/perl").unwrap(),
            format!("{img}/usr/bin/perl")
        );
        assert_eq!(r.to_host_str("/workspace/a").unwrap(), "/var/tmp/w/a");
        assert_eq!(r.to_host_str("/tmp/x").unwrap(), "/tmp/x");
        assert_eq!(r.to_host_str("/dev/null").unwrap(), "/dev/null");
        assert_eq!(
            r.to_guest(Path::new(&format!("{img}/usr/bin/perl"))),
            PathBuf::from("/usr/bin/perl")
        );
        assert_eq!(r.to_guest(Path::new(img)), PathBuf::from("/"));
        assert_eq!(
            r.to_guest(Path::new("/var/tmp/w/.ssh")),
            PathBuf::from("/workspace/.ssh")
        );
        assert_eq!(r.to_guest(Path::new("/tmp/x")), PathBuf::from("/tmp/x"));
    }
}
