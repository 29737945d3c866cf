//! The translation's rules, each on a real tree: the host's own
//! ([`HostFs`]), and an image root with the work dir bound in
//! ([`RootedFs`]), where every path in and out is the workload's.

use std::path::{Path, PathBuf};

use cordon_policy::{Deployment, Identity, Policy};

use super::*;
use crate::view::{FsView, HostFs, LinkIndex, RootedFs};

const MASKS: Mode = Mode::MasksAvailable;
const NO_MASKS: Mode = Mode::NoMasks;

/// The rung each mode stands for in messages.
fn rung_of(mode: Mode) -> &'static str {
    match mode {
        Mode::MasksAvailable => "container",
        Mode::NoMasks => "process",
    }
}

/// A host tree: `root/sys/bin/{ok,bad}`, `root/data/{a.txt,.env,secret/k}`.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in ["sys/bin", "data/secret", "work", "tmp"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "sys/bin/ok",
            "sys/bin/bad",
            "data/a.txt",
            "data/.env",
            "data/secret/k",
        ] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        Tree { dir }
    }
    fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.dir.path().display())
    }
    /// Translates a policy whose `$R` stands for the tree's root.
    fn run(&self, mode: Mode, yaml: &str) -> Result<Confinement, Unholdable> {
        self.run_in(mode, yaml, &HostFs)
    }

    /// [`Tree::run`] looking at the disk through `fs`.
    fn run_in(&self, mode: Mode, yaml: &str, fs: &dyn FsView) -> Result<Confinement, Unholdable> {
        let text = yaml.replace("$R", &self.p("")[..self.p("").len() - 1]);
        let policy = Policy::load_str("t.yaml", &text).unwrap_or_else(|d| panic!("{}", d.render()));
        let work = PathBuf::from(self.p("work"));
        let plan = policy
            .plan(
                &Identity {
                    namespace: "t".into(),
                    ..Identity::default()
                },
                &Deployment::default(),
                0,
                work.to_str().unwrap(),
            )
            .unwrap();
        let tmp = PathBuf::from(self.p("tmp"));
        translate(
            &policy,
            &plan,
            &Target {
                rung: rung_of(mode),
                mode,
                tmp_shared: mode == Mode::NoMasks,
                work_dir: &work,
                tmp_dir: &tmp,
                fs,
            },
        )
    }
}

const BASE: &str = r#"
policy:
  compute:
    allow:
      - name: sys-programs
        when: command.startsWith("$R/sys/")
    DENY_COMPUTE
  storage:
    allow:
      - name: sys
        when: path.startsWith("$R/sys/") && mode in ["read", "execute"]
      - name: data
        when: path.startsWith("$R/data/") && mode == "read"
      - name: missing-file
        when: path == "$R/data/nope" && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write", "execute"]
      - name: tmp
        when: path.startsWith("$R/tmp/") && mode in ["read", "write"]
    DENY_STORAGE
"#;

fn policy(deny_compute: &str, deny_storage: &str) -> String {
    BASE.replace("DENY_COMPUTE", deny_compute)
        .replace("DENY_STORAGE", deny_storage)
}

fn rule<'a>(t: &'a Confinement, path: &str) -> Vec<&'a PathRule> {
    t.fs.iter().filter(|r| r.path == Path::new(path)).collect()
}

#[test]
fn execute_only_where_both_surfaces_allow_and_never_in_the_work_dir() {
    let tree = Tree::new();
    let t = tree.run(MASKS, &policy("", "")).unwrap();
    // data is readable, never executable or writable.
    let data = rule(&t, &tree.p("data"));
    assert!(!data.is_empty() && data.iter().all(|r| r.read && !r.write && !r.execute));
    // A missing exact file grants nothing.
    assert!(rule(&t, &tree.p("data/nope")).is_empty());
    // sys is executable (storage execute and compute allow).
    assert!(rule(&t, &tree.p("sys")).iter().any(|r| r.execute));
    // The work dir is the launcher's (read-write, never execute), even
    // though the policy grants execute there.
    assert!(t
        .fs
        .iter()
        .all(|r| !(r.execute && r.path.starts_with(tree.p("work")))));
    assert!(t.mask_paths.is_empty() && t.mask_executables.is_empty());
}

#[test]
fn a_work_dir_the_policy_does_not_grant_read_write_is_refused() {
    let tree = Tree::new();
    let text = policy("", "").replace(
        r#"mode in ["read", "write", "execute"]"#,
        r#"mode == "read""#,
    );
    let e = tree.run(MASKS, &text).unwrap_err();
    assert!(e.message.contains("does not grant read and write"), "{e}");
}

/// No rule may reach `denied`: none on it or on a directory above it.
fn reaches(t: &Confinement, denied: &str) -> Vec<PathBuf> {
    t.fs.iter()
        .filter(|r| Path::new(denied).starts_with(&r.path))
        .map(|r| r.path.clone())
        .collect()
}

#[test]
fn a_deny_inside_a_grant_is_masked_at_the_container_rung_and_carved_out_at_the_process_rung() {
    let tree = Tree::new();
    let deny = r#"deny:
      - name: no-secret
        when: path.startsWith("$R/data/secret/")"#;
    let t = tree.run(MASKS, &policy("", deny)).unwrap();
    assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("data/secret"))]);
    // The process rung has no masks: the read-only grant on `data` is
    // replaced by grants on its other entries.
    let t = tree.run(NO_MASKS, &policy("", deny)).unwrap();
    assert!(t.mask_paths.is_empty());
    assert_eq!(
        reaches(&t, &tree.p("data/secret/k")),
        Vec::<PathBuf>::new(),
        "{t:?}"
    );
    assert!(
        !rule(&t, &tree.p("data/a.txt")).is_empty(),
        "siblings stay granted: {t:?}"
    );
    // A link among the siblings is not granted (it would grant its target).
    std::os::unix::fs::symlink("/etc", tree.p("data/link")).unwrap();
    let t = tree.run(NO_MASKS, &policy("", deny)).unwrap();
    assert!(rule(&t, &tree.p("data/link")).is_empty(), "{t:?}");
    // Inside a writable tree it cannot be carved: refused.
    std::fs::create_dir(tree.p("work/.ssh")).unwrap();
    let deny = r#"deny:
      - name: no-keys
        when: path.startsWith(work_dir + "/.ssh/")"#;
    let e = tree.run(NO_MASKS, &policy("", deny)).unwrap_err();
    assert!(
        e.message.contains("no-keys") && e.message.contains("container rung"),
        "{e}"
    );
}

#[test]
fn a_grant_through_a_linked_directory_cannot_reach_a_carved_file() {
    // `lbin` links to `sys/bin` (as `/bin` links to `/usr/bin`); the
    // rule on it is a rule on `sys/bin` to Landlock, so the carve must
    // see it as one. A hard link beside the denied file goes too.
    let tree = Tree::new();
    std::os::unix::fs::symlink(tree.p("sys/bin"), tree.p("lbin")).unwrap();
    std::fs::hard_link(tree.p("sys/bin/bad"), tree.p("sys/bin/bad2")).unwrap();
    let text = policy(
            "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"",
            "",
        )
        .replace(
            "  storage:\n    allow:\n",
            &format!(
                "  storage:\n    allow:\n      - name: linked\n        when: path.startsWith(\"{}/\") && mode != \"write\"\n",
                tree.p("lbin")
            ),
        );
    let t = tree.run(NO_MASKS, &text).unwrap();
    for denied in ["sys/bin/bad", "sys/bin/bad2"] {
        assert_eq!(
            reaches(&t, &tree.p(denied)),
            Vec::<PathBuf>::new(),
            "{denied}: {t:?}"
        );
    }
    assert!(
        t.fs.iter().all(|r| !r.path.starts_with(tree.p("lbin"))),
        "rules are on resolved paths: {t:?}"
    );
}

#[test]
fn a_suffix_deny_is_enumerated_and_each_match_masked() {
    let tree = Tree::new();
    let deny = r#"deny:
      - name: no-env
        when: path.endsWith("/.env") && !path.startsWith(work_dir + "/") && !path.startsWith("$R/tmp/")"#;
    // The negations cannot be held, so the deny holds everywhere —
    // including the writable work dir, where a `.env` could be created.
    let e = tree.run(MASKS, &policy("", deny)).unwrap_err();
    assert!(e.message.contains("could create"), "{e}");
    let deny = r#"deny:
      - name: no-env
        when: path.endsWith("/.env") && path.startsWith("$R/data/")"#;
    let t = tree.run(MASKS, &policy("", deny)).unwrap();
    assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("data/.env"))]);
}

#[test]
fn a_missing_deny_target_in_a_writable_tree_is_refused() {
    let tree = Tree::new();
    let deny = r#"deny:
      - name: no-keys
        when: path.startsWith(work_dir + "/.ssh/")"#;
    let e = tree.run(MASKS, &policy("", deny)).unwrap_err();
    assert!(
        e.message.contains("no-keys") && e.message.contains(".ssh"),
        "{e}"
    );
    // It exists: masked.
    std::fs::create_dir(tree.p("work/.ssh")).unwrap();
    let t = tree.run(MASKS, &policy("", deny)).unwrap();
    assert_eq!(t.mask_paths, vec![PathBuf::from(tree.p("work/.ssh"))]);
}

#[test]
fn a_deny_of_every_read_is_refused_and_a_deny_of_a_whole_tree_removes_its_rule() {
    let tree = Tree::new();
    let e = tree
        .run(
            MASKS,
            &policy(
                "",
                "deny:\n      - name: all\n        when: mode == \"read\"",
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("every path"), "{e}");
    let deny = "deny:\n      - name: no-data\n        when: path.startsWith(\"$R/data/\")";
    let t = tree.run(NO_MASKS, &policy("", deny)).unwrap();
    assert!(rule(&t, &tree.p("data")).is_empty(), "{t:?}");
}

#[test]
fn a_denied_executable_is_masked_at_the_container_rung_and_left_unreadable_at_the_process_rung() {
    let tree = Tree::new();
    let deny = "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"";
    let t = tree.run(MASKS, &policy(deny, "")).unwrap();
    assert_eq!(
        t.mask_executables,
        vec![PathBuf::from(tree.p("sys/bin/bad"))]
    );
    // The process rung cannot mask it, and Landlock checks execute only
    // at `execve` (`ld.so FILE` runs a readable file): it is left out of
    // reading as well as executing.
    let t = tree.run(NO_MASKS, &policy(deny, "")).unwrap();
    assert_eq!(
        reaches(&t, &tree.p("sys/bin/bad")),
        Vec::<PathBuf>::new(),
        "{t:?}"
    );
    assert!(!rule(&t, &tree.p("sys/bin/ok")).is_empty(), "{t:?}");
    // A prefix deny is enumerated: every match is masked.
    let deny = "deny:\n      - name: no-b\n        when: command.startsWith(\"$R/sys/bin/b\")";
    let t = tree.run(MASKS, &policy(deny, "")).unwrap();
    assert_eq!(
        t.mask_executables,
        vec![PathBuf::from(tree.p("sys/bin/bad"))]
    );
}

/// An image root (`root/usr/bin/{ok,bad}`, `/bin` → `usr/bin`) with the
/// work dir and `/tmp` bound in from elsewhere: the container rung's view.
struct Rooted {
    dir: tempfile::TempDir,
}

impl Rooted {
    fn new() -> Rooted {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in [
            "root/usr/bin",
            "root/workspace",
            "root/tmp",
            "host-work",
            "host-tmp",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in ["root/usr/bin/ok", "root/usr/bin/bad"] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("usr/bin", r.join("root/bin")).unwrap();
        Rooted { dir }
    }

    fn host(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn run(&self, yaml: &str) -> Result<Confinement, Unholdable> {
        let policy = Policy::load_str("t.yaml", yaml).unwrap_or_else(|d| panic!("{}", d.render()));
        let plan = policy
            .plan(
                &Identity {
                    namespace: "t".into(),
                    ..Identity::default()
                },
                &Deployment::default(),
                0,
                "/workspace",
            )
            .unwrap();
        let view = RootedFs::new(self.host("root"))
            .bind("/tmp", self.host("host-tmp"))
            .bind("/workspace", self.host("host-work"));
        translate(
            &policy,
            &plan,
            &Target {
                rung: "container",
                mode: MASKS,
                tmp_shared: false,
                work_dir: Path::new("/workspace"),
                tmp_dir: Path::new("/tmp"),
                fs: &view,
            },
        )
    }
}

const ROOTED: &str = r#"
policy:
  compute:
    allow:
      - name: bins
        when: command.startsWith("/bin/")
    DENY_COMPUTE
  storage:
    allow:
      - name: bin
        when: path.startsWith("/bin/") && mode in ["read", "execute"]
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
    DENY_STORAGE
"#;

fn rooted(deny_compute: &str, deny_storage: &str) -> String {
    ROOTED
        .replace("DENY_COMPUTE", deny_compute)
        .replace("DENY_STORAGE", deny_storage)
}

#[test]
fn in_a_rooted_view_rules_and_masks_are_the_workloads_paths() {
    let v = Rooted::new();
    // `/bin` resolves inside the image (to its `/usr/bin`), and the denied
    // executable is masked at the path the workload sees.
    let deny = "deny:\n      - name: no-bad\n        when: command == \"/usr/bin/bad\"";
    let t = v.run(&rooted(deny, "")).unwrap();
    assert!(
        t.fs.iter().all(|r| r.path == Path::new("/usr/bin"))
            && t.fs.iter().any(|r| r.read)
            && t.fs.iter().any(|r| r.execute),
        "{t:?}"
    );
    assert_eq!(t.mask_executables, vec![PathBuf::from("/usr/bin/bad")]);
    // A deny in the bound work dir is checked on the host directory bound
    // there: refused while missing, masked at its workload path once there.
    let deny = "deny:\n      - name: no-keys\n        when: path.startsWith(work_dir + \"/.ssh/\")";
    let e = v.run(&rooted("", deny)).unwrap_err();
    assert!(
        e.message.contains("no-keys") && e.message.contains("/workspace/.ssh"),
        "{e}"
    );
    std::fs::create_dir(v.host("host-work/.ssh")).unwrap();
    let t = v.run(&rooted("", deny)).unwrap();
    assert_eq!(t.mask_paths, vec![PathBuf::from("/workspace/.ssh")]);
    // The image's own `/workspace` (hidden under the bind) is not what is
    // looked at.
    std::fs::create_dir(v.host("root/workspace/.env")).unwrap();
    let deny = "deny:\n      - name: no-env\n        when: path == work_dir + \"/.env\"";
    let e = v.run(&rooted("", deny)).unwrap_err();
    assert!(e.message.contains("could create"), "{e}");
}

#[test]
fn a_prefix_that_covers_the_whole_work_dir_reaches_into_it() {
    // A deny on everything under `/work` reaches all of `/workspace`: a
    // `.env` the workload could create there cannot be masked.
    let v = Rooted::new();
    let deny = "deny:\n      - name: no-env\n        when: path.startsWith(\"/work\") && path.endsWith(\".env\")";
    let e = v.run(&rooted("", deny)).unwrap_err();
    assert!(
        e.message.contains("no-env") && e.message.contains("could create"),
        "{e}"
    );
    // And a grant on it covers the work dir the launcher gives read-write.
    let text = rooted("", "").replace(
        "path.startsWith(work_dir + \"/\")",
        "path.startsWith(\"/work\")",
    );
    assert!(v.run(&text).is_ok());
}

/// Hard-links `from` (a name in `tree`) at `to`.
fn hard_link(tree: &Tree, from: &str, to: &str) {
    std::fs::hard_link(tree.p(from), tree.p(to)).unwrap();
}

#[test]
fn a_denied_program_is_denied_under_every_name_of_its_file() {
    let tree = Tree::new();
    // `bad` has a name beside it (like `perl5.36.0`) and one in another
    // granted tree (readable: `ld.so` runs a readable file).
    hard_link(&tree, "sys/bin/bad", "sys/bin/bad5.36");
    hard_link(&tree, "sys/bin/bad", "data/bad-again");
    let deny = "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"";
    let t = tree.run(MASKS, &policy(deny, "")).unwrap();
    assert_eq!(
        t.mask_executables,
        ["data/bad-again", "sys/bin/bad", "sys/bin/bad5.36"].map(|p| PathBuf::from(tree.p(p))),
        "{t:?}"
    );
    assert!(t.notes.iter().any(|n| n.contains("hard link")), "{t:?}");
    // Without masks, no rule reaches any of the names, and the rest stays.
    let t = tree.run(NO_MASKS, &policy(deny, "")).unwrap();
    for name in ["sys/bin/bad", "sys/bin/bad5.36", "data/bad-again"] {
        assert_eq!(
            reaches(&t, &tree.p(name)),
            Vec::<PathBuf>::new(),
            "{name}: {t:?}"
        );
    }
    assert!(!rule(&t, &tree.p("sys/bin/ok")).is_empty(), "{t:?}");
    assert!(!rule(&t, &tree.p("data/a.txt")).is_empty(), "{t:?}");
    // A name in the work dir is masked at the container rung; the process
    // rung cannot leave one file out of a writable tree, so it refuses.
    hard_link(&tree, "sys/bin/bad", "work/bad-in-work");
    let t = tree.run(MASKS, &policy(deny, "")).unwrap();
    assert!(
        t.mask_executables
            .contains(&PathBuf::from(tree.p("work/bad-in-work"))),
        "{t:?}"
    );
    let e = tree.run(NO_MASKS, &policy(deny, "")).unwrap_err();
    assert!(
        e.message.contains("bad-in-work") && e.message.contains("help:"),
        "{e}"
    );
}

#[test]
fn the_search_for_names_stops_when_the_link_count_is_reached() {
    // A readable tree far past the walk's bound: a search that walked it
    // would be refused. A one-name file needs no search, and a file whose
    // names all sit beside it needs no walk.
    let tree = Tree::new();
    let fs = Huge {
        huge: PathBuf::from(tree.p("data")),
        entries: MAX_WALK + 10,
    };
    let deny = "deny:\n      - name: no-bad\n        when: command == \"$R/sys/bin/bad\"";
    let t = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap();
    assert_eq!(
        t.mask_executables,
        vec![PathBuf::from(tree.p("sys/bin/bad"))]
    );
    hard_link(&tree, "sys/bin/bad", "sys/bin/bad5.36");
    let t = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap();
    assert_eq!(
        t.mask_executables,
        ["sys/bin/bad", "sys/bin/bad5.36"].map(|p| PathBuf::from(tree.p(p)))
    );
    // A third name nowhere the workload reaches: every tree is searched,
    // and past the bound the deny is refused, not held by half.
    std::fs::hard_link(tree.p("sys/bin/bad"), tree.dir.path().join("elsewhere")).unwrap();
    let e = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap_err();
    assert!(
        e.message.contains("other names (hard links)") && e.message.contains("help:"),
        "{e}"
    );
    // Within the bound, a name nowhere reached is left as it is.
    let t = tree.run(MASKS, &policy(deny, "")).unwrap();
    assert_eq!(t.mask_executables.len(), 2, "{t:?}");
}

/// The host's tree, with `entries` extra (absent) names in the directory
/// `huge`: a tree no walk can finish.
struct Huge {
    huge: PathBuf,
    entries: usize,
}

impl Huge {
    fn extra(&self, dir: &Path) -> impl Iterator<Item = PathBuf> + '_ {
        let n = if dir == self.huge { self.entries } else { 0 };
        (0..n).map(move |i| self.huge.join(format!("junk-{i}")))
    }
}

impl FsView for Huge {
    fn host_path(&self, guest: &Path) -> Option<PathBuf> {
        HostFs.host_path(guest)
    }
    fn canonical(&self, guest: &Path) -> std::io::Result<PathBuf> {
        HostFs.canonical(guest)
    }
    fn read_dir(&self, guest: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut v = HostFs.read_dir(guest)?;
        v.extend(self.extra(guest));
        Ok(v)
    }
    fn entries(&self, guest: &Path) -> std::io::Result<Vec<crate::view::Entry>> {
        let mut v = HostFs.entries(guest)?;
        v.extend(self.extra(guest).map(|path| crate::view::Entry {
            path,
            ino: 1,
            kind: None,
        }));
        Ok(v)
    }
}

#[test]
fn a_prefix_deny_lists_the_directory_it_ends_in_instead_of_walking() {
    let tree = Tree::new();
    std::fs::create_dir_all(tree.p("sys/lib/bundle")).unwrap();
    std::fs::create_dir_all(tree.p("sys/bin/bad.d")).unwrap();
    std::fs::write(tree.p("sys/bin/bad.d/helper"), "x").unwrap();
    std::fs::write(tree.p("sys/bin/badder"), "x").unwrap();
    hard_link(&tree, "sys/bin/bad", "sys/lib/bundle/renamed");
    // Beside the programs, an executable tree far past the walk's bound.
    let fs = Huge {
        huge: PathBuf::from(tree.p("sys/lib/bundle")),
        entries: MAX_WALK + 10,
    };
    let deny = "deny:\n      - name: no-b\n        when: command.startsWith(\"$R/sys/bin/bad\")";
    let t = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap();
    assert_eq!(
        t.mask_executables,
        [
            "sys/bin/bad",
            "sys/bin/bad.d/helper",
            "sys/bin/badder",
            "sys/lib/bundle/renamed"
        ]
        .map(|p| PathBuf::from(tree.p(p))),
        "{t:?}"
    );
    // A prefix ending in `/` is the tree beneath it.
    let deny =
        "deny:\n      - name: no-bd\n        when: command.startsWith(\"$R/sys/bin/bad.d/\")";
    let t = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap();
    assert_eq!(
        t.mask_executables,
        vec![PathBuf::from(tree.p("sys/bin/bad.d/helper"))]
    );
    // Held without masks too.
    let deny = "deny:\n      - name: no-b\n        when: command.startsWith(\"$R/sys/bin/bad\")";
    // (Carving a name out of a directory lists it whole: not the huge one.)
    let t = tree.run(NO_MASKS, &policy(deny, "")).unwrap();
    for name in [
        "sys/bin/bad",
        "sys/bin/badder",
        "sys/bin/bad.d/helper",
        "sys/lib/bundle/renamed",
    ] {
        assert_eq!(
            reaches(&t, &tree.p(name)),
            Vec::<PathBuf>::new(),
            "{name}: {t:?}"
        );
    }
    // A set with no literal directory is walked, and refused at the
    // bound with what would work.
    let deny = "deny:\n      - name: no-suffix\n        when: command.endsWith(\"/bad\")";
    let e = tree.run_in(MASKS, &policy(deny, ""), &fs).unwrap_err();
    assert!(
        e.message.contains("no-suffix")
            && e.message.contains("startsWith")
            && e.message.contains("help:"),
        "{e}"
    );
}

#[test]
fn an_image_index_is_a_hint_and_a_stale_one_lets_no_name_through() {
    let v = Rooted::new();
    std::fs::create_dir_all(v.host("root/usr/lib/x")).unwrap();
    std::fs::hard_link(
        v.host("root/usr/bin/bad"),
        v.host("root/usr/lib/x/bad-again"),
    )
    .unwrap();
    let deny = "deny:\n      - name: no-bad\n        when: command == \"/usr/bin/bad\"";
    let text = rooted(deny, "").replace(
        "path.startsWith(\"/bin/\")",
        "(path.startsWith(\"/bin/\") || path.startsWith(\"/usr/lib/\"))",
    );
    let translate_with = |index: LinkIndex| {
        let policy = Policy::load_str("t.yaml", &text).unwrap_or_else(|d| panic!("{}", d.render()));
        let plan = policy
            .plan(
                &Identity {
                    namespace: "t".into(),
                    ..Identity::default()
                },
                &Deployment::default(),
                0,
                "/workspace",
            )
            .unwrap();
        let view = RootedFs::new(v.host("root"))
            .bind("/tmp", v.host("host-tmp"))
            .bind("/workspace", v.host("host-work"))
            .with_links(std::sync::Arc::new(index));
        translate(
            &policy,
            &plan,
            &Target {
                rung: "container",
                mode: MASKS,
                tmp_shared: false,
                work_dir: Path::new("/workspace"),
                tmp_dir: Path::new("/tmp"),
                fs: &view,
            },
        )
        .unwrap()
        .mask_executables
    };
    let want = ["/usr/bin/bad", "/usr/lib/x/bad-again"]
        .map(PathBuf::from)
        .to_vec();
    // A true index, a stale one naming what is no longer the file, and
    // none: the same names.
    let true_index = vec![want.clone()];
    let stale = vec![vec![
        PathBuf::from("/usr/bin/bad"),
        PathBuf::from("/usr/bin/ok"),
    ]];
    for index in [true_index, stale, Vec::new()] {
        assert_eq!(translate_with(LinkIndex::new(index)), want);
    }
}
