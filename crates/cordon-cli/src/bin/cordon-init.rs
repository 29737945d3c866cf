//! `cordon-init`: the sandbox init, alone. `cordon` starts every sandbox's
//! init (and its stage 2) from this small binary when it is installed
//! beside it — an exec of it costs a fraction of re-executing the whole
//! CLI — and falls back to its own hidden `__sandbox-init` otherwise.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    cordon_linux::init_main()
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!("cordon-init: sandboxes need Linux on x86_64");
    std::process::exit(2);
}
