//! Builds the warm exec's helper (`podexec.c`, see there for what it
//! does), linked statically: it runs in whatever root a sandbox has. The
//! C compiler is the one Rust already links with (`cc`, or `$CC`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-changed=podexec.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("podexec");
    let status = Command::new(&cc)
        .args(["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg("podexec.c")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`{cc}` could not build `podexec.c` ({s}); cordon's warm exec helper needs a C compiler and the C library's static archive (`apt-get install gcc libc6-dev`)"),
        Err(e) => panic!("cannot run `{cc}` to build `podexec.c`: {e}; install a C compiler (`apt-get install gcc libc6-dev`), the one Rust links with"),
    }
}
