//! A build identity for the init protocol: a hash of this crate's sources,
//! so a launcher never drives an init program built from other sources (an
//! old `cordon-init` left beside a new `cordon`). Both are built from the
//! same tree in one build, so they always agree.

use std::path::Path;

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    walk(Path::new("src"), &mut files);
    files.sort();
    // FNV-1a, 64 bits: stable across toolchains, no dependency.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_default();
        for b in f.to_string_lossy().bytes().chain(bytes) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=CORDON_LINUX_BUILD={h:016x}");
}
