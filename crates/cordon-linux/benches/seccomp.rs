//! What the seccomp filter costs a workload per system call: the container
//! rung's filter as its programs installed one by one (as cordon did until
//! issue 33's change) against the one program cordon installs now
//! (`linux::seccomp_merge`), and no filter; each in a child process of its
//! own, the install timed, then `CALLS` (default 2,000,000) of a call the
//! kernel's always-allowed cache skips the filters for (`getppid`) and of
//! one every filter decides (`ioctl`, whose request is compared), `ROUNDS`
//! (default 15) rounds interleaved, the order rotated each round.
//!
//! `cargo bench -p cordon-linux --bench seccomp`. Needs nothing but Linux
//! x86_64 (no root: `no_new_privs` lets any process install a filter).

#![expect(
    clippy::unwrap_used,
    unsafe_code,
    reason = "a bench: a failed step is a failed run; fork and raw seccomp"
)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    use std::io::{Read, Write};
    use std::time::Instant;

    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (calls, rounds) = (env("CALLS", 2_000_000), env("ROUNDS", 15));
    let (parts, one) = cordon_linux::seccomp_container_filter().unwrap();
    let sets: Vec<(&str, Vec<Vec<libc::sock_filter>>)> = vec![
        ("no filter", vec![]),
        ("programs one by one (before)", parts.clone()),
        ("one joined program (now)", vec![one.clone()]),
    ];
    // One measure: a child installs `set` (timed) and times its calls:
    // (µs to install, ns per call).
    let measure = |set: &[Vec<libc::sock_filter>]| -> (f64, f64, f64) {
        let (mut r, mut w) = std::io::pipe().unwrap();
        // SAFETY: this bench is single-threaded; the child only makes
        // system calls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            drop(r);
            let installing = Instant::now();
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for p in set {
                    let prog = libc::sock_fprog {
                        len: u16::try_from(p.len()).unwrap(),
                        filter: p.as_ptr().cast_mut(),
                    };
                    let rc = libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        &prog as *const libc::sock_fprog,
                    );
                    assert_eq!(rc, 0, "seccomp");
                }
            }
            let install_us = installing.elapsed().as_nanos() as f64 / 1000.0;
            // A call every filter decides (an `ioctl`'s request is
            // compared, so the kernel's always-allowed cache cannot skip
            // the filters), and one it caches (`getppid`).
            let t = Instant::now();
            for _ in 0..calls {
                unsafe { libc::getppid() };
            }
            let cached = t.elapsed().as_nanos() as f64 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls {
                unsafe { libc::ioctl(-1, libc::FIONREAD, std::ptr::null_mut::<libc::c_int>()) };
            }
            let decided = t.elapsed().as_nanos() as f64 / calls as f64;
            for v in [install_us, cached, decided] {
                w.write_all(&v.to_le_bytes()).unwrap();
            }
            unsafe { libc::_exit(0) };
        }
        drop(w);
        let mut b = [0u8; 24];
        r.read_exact(&mut b).unwrap();
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let f = |i: usize| f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        (f(0), f(1), f(2))
    };
    let mut got: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); sets.len()];
    for round in 0..rounds as usize {
        for k in 0..sets.len() {
            let i = (round + k) % sets.len();
            got[i].push(measure(&sets[i].1));
        }
    }
    let median = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let col = |i: usize, c: usize| median(got[i].iter().map(|t| [t.0, t.1, t.2][c]).collect());
    println!("\n== the container rung's seccomp filter: install, and a call under it ({calls} calls, {rounds} rounds, medians)");
    println!("| filter | programs | instructions | install µs | `getppid` ns (cached) | `ioctl` ns (decided) | `ioctl` minus no filter |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let base = col(0, 2);
    for (i, (name, set)) in sets.iter().enumerate() {
        let n: usize = set.iter().map(Vec::len).sum();
        println!(
            "| {name} | {} | {n} | {:.1} | {:.1} | {:.1} | {:.1} |",
            set.len(),
            col(i, 0),
            col(i, 1),
            col(i, 2),
            col(i, 2) - base
        );
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!("\n!!!!!!!! SKIPPED seccomp: Linux x86_64 only !!!!!!!!\n");
}
