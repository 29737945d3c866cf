//! Files: host files read, writes outside the work dir, the denied program.

use std::path::Path;
use std::path::PathBuf;

use cordon_sandbox::ExitStatus;

use super::case::{EscapeSubject, BAIT};
use super::host::{nonce, plant, HostDir};
use super::workload::{exec_in, setup, sh, TIMEOUT};

pub(super) fn read_host_files(s: &EscapeSubject) -> Result<String, String> {
    let home = setup("the home-directory bait", HostDir::new(&s.host.home, 0o755))?;
    let open = setup(
        "the open-directory bait",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let (home_bait, open_bait) = (home.join("bait"), open.join("bait"));
    setup("the home-directory bait", plant(&home_bait, BAIT))?;
    setup("the open-directory bait", plant(&open_bait, BAIT))?;
    // What the host's /etc/shadow starts with, if the kit can read it;
    // otherwise its usual first entry.
    let shadow = std::fs::read_to_string("/etc/shadow")
        .ok()
        .and_then(|t| {
            t.lines()
                .next()
                .and_then(|l| l.split(':').next())
                .map(|u| format!("{u}:"))
        })
        .unwrap_or_else(|| "root:".into());
    let run = sh(
        s,
        "cat /etc/shadow; cat \"$1\"; cat \"$2\"; ls -a \"$3\"; cat /etc/gshadow; echo end",
        &[
            &home_bait.display().to_string(),
            &open_bait.display().to_string(),
            &home.0.display().to_string(),
        ],
    );
    run.ran_to_end()?;
    let out = run.all_output();
    if out.contains(BAIT) {
        return Err(format!("the workload read the host's bait {}", run.show()));
    }
    if run.stdout().lines().any(|l| l.starts_with(&shadow)) {
        return Err(format!("the workload read /etc/shadow {}", run.show()));
    }
    if run.stdout().lines().any(|l| l == "bait") {
        return Err(format!(
            "the workload listed the host's home-directory bait {}",
            run.show()
        ));
    }
    Ok("/etc/shadow, the home and the open-directory bait stayed unread".into())
}

pub(super) fn write_outside(s: &EscapeSubject) -> Result<String, String> {
    let open = setup(
        "an open host directory",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let n = nonce();
    let targets = [
        open.join("pwned"),
        PathBuf::from(format!("/etc/cordon-escape-pwned-{n}")),
        PathBuf::from(format!("/cordon-escape-pwned-{n}")),
        s.host.open_parent.join(format!("cordon-escape-pwned-{n}")),
    ];
    let shown: Vec<String> = targets.iter().map(|p| p.display().to_string()).collect();
    // The first argument is the work dir: a write there must work, or a
    // refusal outside proves nothing (a read-only sandbox refuses both).
    let inside = format!("{}/cordon-escape-inside-{n}", s.work_dir);
    let mut args: Vec<&str> = vec![&inside];
    args.extend(shown.iter().map(String::as_str));
    let run = sh(
        s,
        "echo x > \"$1\" && rm -f -- \"$1\" && echo inside=ok; shift; for p in \"$@\"; do echo x > \"$p\"; done; echo end",
        &args,
    );
    let written: Vec<&String> = targets
        .iter()
        .zip(&shown)
        .filter(|(p, _)| p.symlink_metadata().is_ok())
        .map(|(_, s)| s)
        .collect();
    for p in &targets {
        // The host is put back; the case has already failed.
        let _ = std::fs::remove_file(p);
    }
    if !written.is_empty() {
        return Err(format!(
            "the workload created {} on the host {}",
            written
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", "),
            run.show()
        ));
    }
    run.ran_to_end()?;
    if !run.stdout().contains("inside=ok") {
        return Err(format!(
            "could not set up: the workload could not write inside its work dir `{}` either {}",
            s.work_dir,
            run.show()
        ));
    }
    Ok(format!(
        "the work dir is writable, and none of {} exists on the host",
        targets.len()
    ))
}

pub(super) fn ld_so() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/lib/ld-linux-aarch64.so.1"
    } else {
        "/lib64/ld-linux-x86-64.so.2"
    }
}

pub(super) fn exec_denied(s: &EscapeSubject) -> Result<String, String> {
    let d = &s.denied;
    if !Path::new(&d.path).exists() {
        return Err(format!(
            "could not set up: the denied program `{}` does not exist on the host, so refusing it proves nothing",
            d.path
        ));
    }
    // Directly, as the first command.
    let mut argv = vec![d.path.clone()];
    argv.extend(d.args.iter().cloned());
    let direct = exec_in(&*s.sandbox, argv, TIMEOUT);
    if direct.all_output().contains(&d.marker) {
        return Err(format!(
            "`{}` ran as the first command {}",
            d.path,
            direct.show()
        ));
    }
    if direct.status() == Some(ExitStatus::Code(0)) {
        return Err(format!(
            "`{}` as the first command exited 0 {}",
            d.path,
            direct.show()
        ));
    }
    // From a shell, and through the dynamic loader, which needs only read
    // access to the file it loads.
    let script = format!(
        "\"$@\"; echo direct=$?; {} \"$@\"; echo loader=$?; echo end",
        ld_so()
    );
    let mut args = vec![d.path.as_str()];
    args.extend(d.args.iter().map(String::as_str));
    let run = sh(s, &script, &args);
    run.ran_to_end()?;
    if run.stdout().contains(&d.marker) {
        return Err(format!(
            "`{}` ran from a shell or through `{}` {}",
            d.path,
            ld_so(),
            run.show()
        ));
    }
    Ok(format!(
        "`{}` did not run directly, from a shell or through the loader",
        d.path
    ))
}

/// The other names (hard links) of `path` in its own directory on the
/// host: where a package puts them (`perl` and `perl5.36.0`).
fn other_names(path: &str) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let p = Path::new(path);
    let (Ok(meta), Some(dir)) = (std::fs::symlink_metadata(p), p.parent()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path() != p)
                .filter(|e| {
                    std::fs::symlink_metadata(e.path()).is_ok_and(|m| {
                        m.is_file() && (m.dev(), m.ino()) == (meta.dev(), meta.ino())
                    })
                })
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The denied program's other names, or why the case cannot set up.
fn hard_links_of(s: &EscapeSubject) -> Result<Vec<String>, String> {
    let d = &s.denied;
    if !Path::new(&d.path).exists() {
        return Err(format!(
            "could not set up: the denied program `{}` does not exist on the host",
            d.path
        ));
    }
    let names = other_names(&d.path);
    if names.is_empty() {
        return Err(format!(
            "could not set up: `{}` has no other name (hard link) beside it on this host, so refusing one proves nothing",
            d.path
        ));
    }
    Ok(names)
}

/// The denied program under each of its other names (the policy names
/// only one): as the first command and from a shell.
pub(super) fn exec_denied_hard_link(s: &EscapeSubject) -> Result<String, String> {
    let d = &s.denied;
    let names = hard_links_of(s)?;
    for name in &names {
        let mut argv = vec![name.clone()];
        argv.extend(d.args.iter().cloned());
        let direct = exec_in(&*s.sandbox, argv, TIMEOUT);
        if direct.all_output().contains(&d.marker) || direct.status() == Some(ExitStatus::Code(0)) {
            return Err(format!(
                "`{name}`, another name of the denied `{}`, ran as the first command {}",
                d.path,
                direct.show()
            ));
        }
        let mut args = vec![name.as_str()];
        args.extend(d.args.iter().map(String::as_str));
        let run = sh(s, "\"$@\"; echo direct=$?; echo end", &args);
        run.ran_to_end()?;
        if run.stdout().contains(&d.marker) {
            return Err(format!(
                "`{name}`, another name of the denied `{}`, ran from a shell {}",
                d.path,
                run.show()
            ));
        }
    }
    Ok(format!(
        "no other name of `{}` ran ({})",
        d.path,
        names.join(", ")
    ))
}

/// The denied program's other names through the dynamic loader, which
/// needs only read access to the file it loads.
pub(super) fn exec_denied_hard_link_loader(s: &EscapeSubject) -> Result<String, String> {
    let d = &s.denied;
    let names = hard_links_of(s)?;
    for name in &names {
        let script = format!("{} \"$@\"; echo loader=$?; echo end", ld_so());
        let mut args = vec![name.as_str()];
        args.extend(d.args.iter().map(String::as_str));
        let run = sh(s, &script, &args);
        run.ran_to_end()?;
        if run.stdout().contains(&d.marker) {
            return Err(format!(
                "`{name}`, another name of the denied `{}`, ran through `{}` {}",
                d.path,
                ld_so(),
                run.show()
            ));
        }
    }
    Ok(format!(
        "no other name of `{}` ran through the loader ({})",
        d.path,
        names.join(", ")
    ))
}

/// Every program a literal prefix deny names (`command.startsWith(...)`),
/// and their other names: directly, from a shell and through the loader;
/// a program beside them the prefix does not name still runs.
pub(super) fn exec_denied_prefix(s: &EscapeSubject) -> Result<String, String> {
    let p = &s.denied_prefix;
    let cut = p.prefix.rfind('/').map_or(0, |i| i + 1);
    let (dir, stem) = p.prefix.split_at(cut);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(stem)))
                .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()))
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let others: Vec<String> = names.iter().flat_map(|n| other_names(n)).collect();
    names.extend(others);
    names.dedup();
    if names.is_empty() {
        return Err(format!(
            "could not set up: nothing on the host begins with `{}`, so refusing it proves nothing",
            p.prefix
        ));
    }
    // `--version` exits 0 from any program that ran.
    let mut script = format!("{} --version >/dev/null 2>&1; echo control=$?; ", p.control);
    for (i, n) in names.iter().enumerate() {
        script.push_str(&format!(
            "{n} --version >/dev/null 2>&1; echo direct{i}=$?; {} {n} --version >/dev/null 2>&1; echo loader{i}=$?; ",
            ld_so()
        ));
    }
    script.push_str("echo end");
    let run = sh(s, &script, &[]);
    run.ran_to_end()?;
    let out = run.stdout();
    if !out.contains("control=0") {
        return Err(format!(
            "could not set up: `{}`, which the prefix does not name, did not run either {}",
            p.control,
            run.show()
        ));
    }
    for (i, n) in names.iter().enumerate() {
        for how in ["direct", "loader"] {
            if out.contains(&format!("{how}{i}=0\n")) {
                return Err(format!(
                    "`{n}`, which the deny of `{}` names, ran ({how}) {}",
                    p.prefix,
                    run.show()
                ));
            }
        }
        let first = exec_in(&*s.sandbox, vec![n.clone(), "--version".into()], TIMEOUT);
        if first.status() == Some(ExitStatus::Code(0)) {
            return Err(format!(
                "`{n}`, which the deny of `{}` names, ran as the first command {}",
                p.prefix,
                first.show()
            ));
        }
    }
    Ok(format!(
        "none of the {} programs `{}` names ran; `{}` beside them did",
        names.len(),
        p.prefix,
        p.control
    ))
}
