//! Builds the compatibility shim (`shim/noautomount.c`) a gVisor sandbox
//! preloads; see that file for why. (The warm exec's helper is
//! `cordon-backend-kit`'s.) The C compiler is the one Rust already links
//! with (`cc`, or `$CC`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    // The stat shim, preloaded by every dynamically linked program.
    build(
        &cc,
        "shim/noautomount.c",
        &out_dir.join("noautomount.so"),
        &["-shared", "-fPIC"],
    );
}

fn build(cc: &str, src: &str, out: &std::path::Path, kind: &[&str]) {
    println!("cargo:rerun-if-changed={src}");
    let status = Command::new(cc)
        .args(kind)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`{cc}` could not build `{src}` ({s}); cordon's gvisor backend needs a C compiler and the C library's static archive (`apt-get install gcc libc6-dev`)"),
        Err(e) => panic!("cannot run `{cc}` to build `{src}`: {e}; install a C compiler (`apt-get install gcc libc6-dev`), the one Rust links with"),
    }
}
