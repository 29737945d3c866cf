//! The network: special sockets, host loopback (TCP, UDP), a host unix
//! socket, binding a port.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use super::case::{EscapeSubject, BAIT};
use super::host::HostDir;
use super::workload::{breaches, py, setup};

pub(super) fn special_sockets(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        "import socket\nfor name,fam,typ,proto in [('raw',socket.AF_INET,socket.SOCK_RAW,1),('raw6',socket.AF_INET6,socket.SOCK_RAW,58),('packet',socket.AF_PACKET,socket.SOCK_RAW,0),('netlink',socket.AF_NETLINK,socket.SOCK_RAW,0),('netlink_route',socket.AF_NETLINK,socket.SOCK_DGRAM,0)]:\n    try:\n        socket.socket(fam,typ,proto); print(name,'OPENED')\n    except OSError as e: print(name,'refused',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let open = breaches(&run.stdout(), &["OPENED"]);
    if !open.is_empty() {
        return Err(format!("opened: {} {}", open.join("; "), run.show()));
    }
    Ok("raw, packet and netlink sockets were all refused".into())
}

/// Whether anything arrived: `Ok(true)` when it did.
pub(super) fn arrived<T>(r: std::io::Result<T>) -> Result<bool, String> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(format!("could not check the host listener: {e}")),
    }
}

pub(super) fn tcp_connect(s: &EscapeSubject) -> Result<String, String> {
    let l = setup("a TCP listener", TcpListener::bind("127.0.0.1:0"))?;
    setup("a TCP listener", l.set_nonblocking(true))?;
    let port = setup("a TCP listener", l.local_addr())?.port();
    let run = py(
        s,
        &format!(
            "import socket\ntry:\n    c=socket.create_connection(('127.0.0.1',{port}),timeout=2); c.sendall(b'{BAIT}'); print('tcp REACHED')\nexcept OSError as e: print('tcp refused',e.errno)\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(100));
    if arrived(l.accept())? {
        return Err(format!(
            "a connection arrived at the host's listener on 127.0.0.1:{port} {}",
            run.show()
        ));
    }
    run.ran_to_end()?;
    if run.stdout().contains("REACHED") {
        return Err(format!("the workload connected {}", run.show()));
    }
    Ok(format!("nothing reached 127.0.0.1:{port} on the host"))
}

pub(super) fn udp_send(s: &EscapeSubject) -> Result<String, String> {
    let u = setup("a UDP socket", UdpSocket::bind("127.0.0.1:0"))?;
    setup("a UDP socket", u.set_nonblocking(true))?;
    let port = setup("a UDP socket", u.local_addr())?.port();
    let run = py(
        s,
        &format!(
            "import socket\ntry:\n    k=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n    for i in range(3): k.sendto(b'{BAIT}',('127.0.0.1',{port}))\n    print('udp sent')\nexcept OSError as e: print('udp refused',e.errno)\nprint('end')"
        ),
    );
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 64];
    if arrived(u.recv(&mut buf))? {
        return Err(format!(
            "a datagram arrived at the host's socket on 127.0.0.1:{port} {}",
            run.show()
        ));
    }
    run.ran_to_end()?;
    // A send inside the sandbox's own network namespace may "succeed"; what
    // matters is that nothing reached the host.
    Ok(format!("nothing reached 127.0.0.1:{port} on the host"))
}

pub(super) fn unix_listener(dir: &HostDir, name: &str) -> Result<UnixListener, String> {
    let path = dir.join(name);
    let l = setup("a unix listener", UnixListener::bind(&path))?;
    setup("a unix listener", l.set_nonblocking(true))?;
    setup(
        "a unix listener",
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)),
    )?;
    Ok(l)
}

pub(super) const PY_UNIX: &str = "import socket,sys\ndef conn(name,p):\n    try:\n        k=socket.socket(socket.AF_UNIX); k.connect(p); print(name,'REACHED',flush=True)\n    except OSError as e: print(name,'refused',e.errno,flush=True)\n";

pub(super) fn unix_socket(s: &EscapeSubject) -> Result<String, String> {
    let dir = setup(
        "an open host directory",
        HostDir::new(&s.host.open_parent, 0o777),
    )?;
    let l = unix_listener(&dir, "host.sock")?;
    let path = dir.show("host.sock");
    let run = py(s, &format!("{PY_UNIX}conn('unix',{path:?})\nprint('end')"));
    std::thread::sleep(Duration::from_millis(50));
    if arrived(l.accept())? {
        return Err(format!("a connection arrived at `{path}` {}", run.show()));
    }
    run.ran_to_end()?;
    if run.stdout().contains("REACHED") {
        return Err(format!("the workload connected to `{path}` {}", run.show()));
    }
    Ok(format!("nothing reached `{path}`"))
}

pub(super) fn bind_port(s: &EscapeSubject) -> Result<String, String> {
    let run = py(
        s,
        "import socket\nfor name,fam,addr in [('tcp4',socket.AF_INET,('127.0.0.1',0)),('tcp4_any',socket.AF_INET,('0.0.0.0',0)),('tcp6',socket.AF_INET6,('::1',0))]:\n    try:\n        k=socket.socket(fam); k.bind(addr); k.listen(); print(name,'BOUND',k.getsockname()[1])\n    except OSError as e: print(name,'refused',e.errno)\nprint('end')",
    );
    run.ran_to_end()?;
    let bound = breaches(&run.stdout(), &["BOUND"]);
    if !bound.is_empty() {
        return Err(format!("bound: {} {}", bound.join("; "), run.show()));
    }
    Ok("no port could be bound".into())
}
