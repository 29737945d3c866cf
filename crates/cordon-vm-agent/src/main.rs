//! cordon's guest agent: PID 1 inside a microvm sandbox.
//!
//! One binary, three modes, chosen by how it was started:
//!
//! - **PID 1** (`/init` of the initramfs cordon builds): [`guest`] sets the
//!   VM up (devtmpfs, proc, sysfs, the kernel modules in `/modules/order`,
//!   the image disk at `/image`, cgroup2, `/tmp`), opens the virtio-serial
//!   port named `cordon.ctl` and serves the host on it; at the end it syncs
//!   and powers the VM off.
//! - **`init …`**: the init program of the warm sandbox
//!   (`cordon_linux::init_main`); the agent starts itself this way.
//! - **`serve-unix PATH`**: connects to a unix socket and serves it exactly
//!   as PID 1 serves the port, without the guest setup — how everything but
//!   the boot is tested on an ordinary host (as root).
//!
//! [`serve`] is the protocol (`cordon_vm_proto`): a warm sandbox
//! (`cordon_linux::WarmSandbox`) built from the host's plan, execs in it
//! ([`exec`]), files in its work dir through the same confined code the host
//! uses for a local work dir ([`files`]), and the sandbox's one route out
//! relayed to the host ([`relay`]), and the sandbox's trust of its egress
//! proxy's CA placed in the guest before the sandbox starts (`trust`).

mod console;
mod exec;
mod feed;
mod files;
#[cfg(target_os = "linux")]
mod guest;
mod out;
mod relay;
mod serve;
#[cfg(target_os = "linux")]
mod trust;
mod watch;

use crate::console::say;

fn main() {
    // `init` first: the sandbox's init re-executes this binary as PID 1 of
    // the sandbox's own pid namespace.
    if std::env::args_os().nth(1).is_some_and(|a| a == "init") {
        cordon_linux::init_main();
    }
    #[cfg(target_os = "linux")]
    if std::process::id() == 1 {
        guest::pid1();
    }
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve-unix") if args.len() == 3 => std::process::exit(serve_unix(&args[2])),
        _ => {
            say!(
                "usage: cordon-vm-agent serve-unix PATH (PID 1 in a cordon microvm: no arguments)"
            );
            std::process::exit(2)
        }
    }
}

/// Test mode: serve the host on a unix socket. Exit code 0 when the host
/// ended the session (end of stream or `Shutdown`), 1 otherwise.
fn serve_unix(path: &str) -> i32 {
    let stream = match std::os::unix::net::UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => {
            say!("cannot connect to `{path}`: {e}");
            return 1;
        }
    };
    let reader = match stream.try_clone() {
        Ok(r) => r,
        Err(e) => {
            say!("cannot clone the channel: {e}");
            return 1;
        }
    };
    let init = match std::env::current_exe() {
        Ok(exe) => cordon_linux::InitProgram::new(exe).arg("init"),
        Err(e) => {
            say!("cannot find my own binary: {e}");
            return 1;
        }
    };
    let end = serve::serve(
        reader,
        Box::new(stream),
        serve::Mode::Test {
            init,
            name: format!("cordon-vm-agent-{}", std::process::id()),
        },
    );
    say!("{end}");
    i32::from(!end.clean())
}
