//! The work dir is never executable, whatever tree the plan puts it in.

use cordon_linux::Rung;

use super::*;

/// A work dir shown inside `/usr` (which the plan lets programs run from):
/// a program copied there does not run, directly or through the loader —
/// its mount is `noexec` even though Landlock's rule on `/usr` covers it.
#[test]
fn a_work_dir_inside_an_executable_tree_is_not_executable() {
    let Some(enforcer) = enforcer_for(Rung::Container, "work dir noexec") else {
        return;
    };
    let mut case = shell(
        Rung::Container,
        "cd /usr/local/bin && cp /bin/true ./mytrue && chmod +x mytrue && \
         { ./mytrue && echo RAN-DIRECT; \
           /lib64/ld-linux-x86-64.so.2 ./mytrue && echo RAN-LOADER; \
           echo tried; }",
    );
    case.spec.work_dir_source = Some(case.work.path().to_path_buf());
    case.spec.work_dir = "/usr/local/bin".into();
    let run = case.run(&enforcer);
    assert!(run.stdout.contains("tried"), "{run:?}");
    assert!(!run.stdout.contains("RAN"), "{run:?}");
}
