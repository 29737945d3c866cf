//! `cordon sandbox port H PORT [--listen ADDR] [--caller KEY=VALUE]`: a
//! port the workload listens on, forwarded to an address on the host for
//! as long as this runs. Each connection is asked of the sandbox's keeper,
//! whose guard decides it with the policy's ingress surface (the port,
//! where it is reached, who asks) and which connects inside the sandbox's
//! own network namespace: the workload gains no route out. The forward
//! ends when the sandbox (its keeper) does.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use cordon_sandbox::{PortRequest, Sandbox};

use crate::exit::{fail, refuse};

/// How often the forward looks whether its sandbox is still there.
const LIVENESS: Duration = Duration::from_secs(2);

/// Copies both ways until either side ends.
fn splice(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one = std::thread::spawn(move || {
        let (mut from, mut to) = (a, b2);
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
    let (mut from, mut to) = (b, a2);
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
    let _ = one.join();
}

/// Runs the forward: `alive` says whether the sandbox is still there.
pub fn forward(
    s: &(dyn Sandbox + Sync),
    port: u16,
    listen: &str,
    caller: cordon_policy::Identity,
    alive: &(dyn Fn() -> bool + Sync),
) -> Result<ExitCode, ExitCode> {
    let addr: SocketAddr = listen.parse().map_err(|e| {
        refuse(format!(
            "--listen `{listen}`: {e}; write an address and port, e.g. `127.0.0.1:0` (0: any free port)"
        ))
    })?;
    let req = PortRequest {
        port,
        listen: addr.ip().to_string(),
        caller,
    };
    // Decided (and the server reached) once before anything listens: a
    // refused port never gets a host address.
    drop(s.open_port(&req).map_err(fail)?);
    let listener =
        TcpListener::bind(addr).map_err(|e| refuse(format!("listening on {addr}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| refuse(format!("listening on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| refuse(format!("listening on {addr}: {e}")))?;
    if crate::json_out::on() {
        crate::json_out::emit(
            &serde_json::json!({"ok": true, "port": port, "listen": bound.to_string()}),
        );
    } else {
        println!("{bound}");
    }
    eprintln!(
        "cordon: port {port} of the sandbox is at {bound} (http://{bound}/); stop with Ctrl-C"
    );
    let mut checked = std::time::Instant::now();
    std::thread::scope(|scope| loop {
        // Asleep until a connection comes or the liveness check is due.
        let due = LIVENESS.saturating_sub(checked.elapsed());
        let mut fds = [rustix::event::PollFd::new(
            &listener,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec::try_from(due).unwrap_or(rustix::event::Timespec {
            tv_sec: 2,
            tv_nsec: 0,
        });
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        loop {
            match listener.accept() {
                Ok((client, _)) => {
                    let _ = client.set_nonblocking(false);
                    let req = req.clone();
                    scope.spawn(move || match s.open_port(&req) {
                        Ok(inside) => splice(client, inside),
                        Err(e) => {
                            eprintln!("cordon: a connection to port {port} was not forwarded: {e}")
                        }
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("cordon: accepting on {bound}: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
        if checked.elapsed() >= LIVENESS {
            checked = std::time::Instant::now();
            if !alive() {
                eprintln!("cordon: the sandbox is gone; the forward ends");
                return Ok(ExitCode::SUCCESS);
            }
        }
    })
}
