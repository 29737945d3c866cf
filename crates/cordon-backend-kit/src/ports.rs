//! Ports (issue 32): a connection to a port the workload listens on,
//! made inside the sandbox's own network namespace — the socket is the
//! namespace's, so it reaches the sandbox's loopback and nothing of the
//! host's, and the workload gains no route out. The policy's ingress
//! decision is the guard's, before this.

use std::os::fd::{AsFd, OwnedFd};

use cordon_sandbox::SandboxError;

/// Connects to `127.0.0.1:port` inside the namespace `netns` (a sandbox's;
/// `None`: it has none of its own, which is refused — a port there would
/// be the host's).
pub fn connect(netns: Option<OwnedFd>, port: u16) -> Result<std::net::TcpStream, SandboxError> {
    let Some(ns) = netns else {
        return Err(SandboxError::Refused {
            reason: "the sandbox has no network namespace of its own here (nothing runs in it yet, or it shares the host's): a port in it cannot be told from the host's, so none is forwarded; start the server first, at a rung with a namespace of its own (container, docker)".into(),
            rules: Vec::new(),
        });
    };
    cordon_linux::netns::connect_loopback_in(ns.as_fd(), port).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => SandboxError::Unavailable {
            reason: format!("nothing listens on port {port} in the sandbox; start the server first (listening on 127.0.0.1 or 0.0.0.0)"),
        },
        _ => SandboxError::Failed {
            operation: "port",
            reason: format!("connecting to port {port} in the sandbox: {e}"),
        },
    })
}
