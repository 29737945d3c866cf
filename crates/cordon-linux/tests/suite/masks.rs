//! Masks at both rungs: a denied file inside a granted tree is an empty,
//! unreadable file to the sandbox — and only to the sandbox.

use crate::both;

use super::*;

fn host_file(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join("secret-tool");
    std::fs::write(&f, "#!/bin/sh\necho SECRET-RAN\n").expect("write");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    f
}

both!(
    a_masked_file_cannot_be_run_or_read_and_the_host_is_unchanged,
    |rung| {
        let Some(enforcer) = enforcer_for(rung, "masks") else {
            return;
        };
        // A world-readable tree the plan grants read and execute on, with one
        // program in it masked.
        let tree = tempfile::tempdir_in("/var/tmp").expect("tree");
        std::fs::set_permissions(
            tree.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let tool = host_file(tree.path());
        let mut case = shell(
            rung,
            &format!(
                "{t}; cat {t} && echo READ; /lib64/ld-linux-x86-64.so.2 {t}; echo done",
                t = tool.display()
            ),
        );
        case.spec.fs.push(cordon_linux::FsRule {
            path: tree.path().to_path_buf(),
            read: true,
            write: false,
            execute: true,
        });
        case.spec.mask_executables = vec![tool.clone()];
        let run = case.run(&enforcer);
        assert!(run.stdout.contains("done"), "{run:?}");
        assert!(!run.stdout.contains("SECRET-RAN"), "{rung}: {run:?}");
        assert!(!run.stdout.contains("READ"), "{rung}: {run:?}");
        // The host still sees its file, and no mount of the sandbox's.
        assert!(std::fs::read_to_string(&tool)
            .expect("host file")
            .contains("SECRET-RAN"));
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(
            !mounts.contains(tree.path().to_str().expect("utf-8")),
            "{mounts}"
        );
    }
);
