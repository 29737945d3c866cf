//! Builds the compatibility shim (`shim/noautomount.c`) a gVisor sandbox
//! preloads; see that file for why. The C compiler is the one Rust already
//! links with (`cc`, or `$CC`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let src = "shim/noautomount.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("noautomount.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`{cc}` could not build `{src}` ({s}); cordon's gvisor backend needs a C compiler to build its shim"),
        Err(e) => panic!("cannot run `{cc}` to build `{src}`: {e}; install a C compiler (`apt-get install gcc`), the one Rust links with"),
    }
}
