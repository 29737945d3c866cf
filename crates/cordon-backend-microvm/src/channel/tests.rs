use super::*;
use cordon_sandbox::ExitStatus;
use std::sync::atomic::AtomicBool;

/// A host channel over a socket pair; the test plays the guest.
fn pair() -> (
    Arc<Channel>,
    UnixStream,
    Arc<AtomicBool>,
    Arc<Mutex<String>>,
) {
    let (host, guest) = UnixStream::pair().unwrap();
    let mut g = guest.try_clone().unwrap();
    proto::write_frame(
        &mut g,
        &Msg::Ready {
            agent: "test".into(),
            kernel: "6.1-test".into(),
            proto: proto::PROTOCOL,
        },
        &[],
    )
    .unwrap();
    let (reader, agent, kernel) = await_ready(&host, Duration::from_secs(5)).unwrap();
    assert_eq!((agent.as_str(), kernel.as_str()), ("test", "6.1-test"));
    let killed = Arc::new(AtomicBool::new(false));
    let why = Arc::new(Mutex::new(String::new()));
    let (k, w) = (killed.clone(), why.clone());
    let ch = Channel::serve(
        host,
        reader,
        Arc::new(move |reason: &str| {
            *w.lock().unwrap() = reason.to_string();
            k.store(true, Ordering::SeqCst);
        }),
        None,
    );
    (ch, guest, killed, why)
}

/// The id of the next `Exec` the host sends the fake guest.
fn next_exec(guest: &UnixStream) -> u64 {
    let mut r = FrameReader::new(guest.try_clone().unwrap());
    loop {
        if let Some((Msg::Exec { id, .. }, _)) = r.read().unwrap() {
            return id;
        }
    }
}

fn wait_for(flag: &AtomicBool) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !flag.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < until, "the hook was not called");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection the host cannot open (its proxy unreachable) is closed
/// on the guest's side through the channel itself, as the egress relay
/// does, and the channel goes on serving: the opener runs without the
/// routes the reader holds.
#[test]
fn a_connection_the_host_cannot_open_is_closed_and_the_channel_goes_on() {
    let (host, guest) = UnixStream::pair().unwrap();
    let mut g = guest.try_clone().unwrap();
    proto::write_frame(
        &mut g,
        &Msg::Ready {
            agent: "test".into(),
            kernel: "6.1-test".into(),
            proto: proto::PROTOCOL,
        },
        &[],
    )
    .unwrap();
    let (reader, _, _) = await_ready(&host, Duration::from_secs(5)).unwrap();
    let slot: Arc<std::sync::OnceLock<std::sync::Weak<Channel>>> = Arc::default();
    let s = slot.clone();
    let opener: ConnOpener = Arc::new(move |conn| {
        if let Some(ch) = s.get().and_then(std::sync::Weak::upgrade) {
            ch.conn_close(conn);
        }
        None
    });
    let ch = Channel::serve(host, reader, Arc::new(|_: &str| {}), Some(opener));
    let _ = slot.set(Arc::downgrade(&ch));
    guest
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut r = FrameReader::new(guest.try_clone().unwrap());
    proto::write_frame(&mut g, &Msg::ConnOpen { conn: 7 }, &[]).unwrap();
    match r.read() {
        Ok(Some((Msg::ConnClose { conn: 7 }, _))) => {}
        other => panic!("the guest's side was not closed: {other:?}"),
    }
    let stat = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.stat("/work/x"))
    };
    let req = match r.read() {
        Ok(Some((Msg::Stat { req, .. }, _))) => req,
        other => panic!("the channel stopped serving: {other:?}"),
    };
    proto::write_frame(&mut g, &Msg::StatReply { req, stat: None }, &[]).unwrap();
    assert!(matches!(stat.join().unwrap(), Ok(None)));
    assert_eq!(ch.ended(), None);
}

/// A guest that opens more relayed connections at once than the
/// protocol allows ends its VM: each would cost the host a socket and
/// threads.
#[test]
fn connections_past_the_cap_end_the_vm() {
    let (host, guest) = UnixStream::pair().unwrap();
    let mut g = guest.try_clone().unwrap();
    proto::write_frame(
        &mut g,
        &Msg::Ready {
            agent: "test".into(),
            kernel: "6.1-test".into(),
            proto: proto::PROTOCOL,
        },
        &[],
    )
    .unwrap();
    let (reader, _, _) = await_ready(&host, Duration::from_secs(5)).unwrap();
    let sinks = Arc::new(Mutex::new(Vec::new()));
    let held = sinks.clone();
    let opener: ConnOpener = Arc::new(move |_| {
        let (tx, rx) = mpsc::channel();
        held.lock().unwrap().push(rx);
        Some(tx)
    });
    let killed = Arc::new(AtomicBool::new(false));
    let why = Arc::new(Mutex::new(String::new()));
    let (k, w) = (killed.clone(), why.clone());
    let _ch = Channel::serve(
        host,
        reader,
        Arc::new(move |reason: &str| {
            *w.lock().unwrap() = reason.to_string();
            k.store(true, Ordering::SeqCst);
        }),
        Some(opener),
    );
    for conn in 1..=proto::MAX_CONNS as u64 {
        proto::write_frame(&mut g, &Msg::ConnOpen { conn }, &[]).unwrap();
    }
    // Closing one makes room for another.
    proto::write_frame(&mut g, &Msg::ConnClose { conn: 1 }, &[]).unwrap();
    let next = proto::MAX_CONNS as u64 + 1;
    proto::write_frame(&mut g, &Msg::ConnOpen { conn: next }, &[]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!killed.load(Ordering::SeqCst), "{}", why.lock().unwrap());
    proto::write_frame(&mut g, &Msg::ConnOpen { conn: next + 1 }, &[]).unwrap();
    wait_for(&killed);
    assert!(
        why.lock().unwrap().contains("at once"),
        "{}",
        why.lock().unwrap()
    );
    assert_eq!(sinks.lock().unwrap().len(), proto::MAX_CONNS + 1);
}

#[test]
fn garbage_from_the_guest_ends_its_vm_and_fails_what_waits() {
    let (ch, mut guest, killed, why) = pair();
    let waiting = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.stat("/work/x"))
    };
    std::thread::sleep(Duration::from_millis(50));
    guest.write_all(&[0xff; 64]).unwrap();
    wait_for(&killed);
    assert!(
        why.lock().unwrap().contains("framing"),
        "{}",
        why.lock().unwrap()
    );
    let got = waiting.join().unwrap();
    assert!(
        matches!(got, Err(SandboxError::Unavailable { .. })),
        "{got:?}"
    );
    // Every later call is refused with why, at once.
    let later = ch.stat("/work/y").unwrap_err().to_string();
    assert!(later.contains("the VM is gone"), "{later}");
}

#[test]
fn output_past_its_cap_ends_the_vm() {
    let (ch, mut guest, killed, why) = pair();
    let h = ch
        .exec(
            vec!["/bin/true".into()],
            BTreeMap::new(),
            serde_json::json!({}),
            10,
            None,
            false,
            Duration::from_secs(30),
        )
        .unwrap();
    // Read the guest's side until the Exec arrives, to learn its id.
    let id = next_exec(&guest);
    let chunk = vec![b'x'; proto::MAX_DATA as usize];
    for _ in 0..4 {
        if proto::write_frame(
            &mut guest,
            &Msg::Output {
                id,
                stream: proto::Stream::Stdout,
            },
            &chunk,
        )
        .is_err()
        {
            break;
        }
    }
    wait_for(&killed);
    assert!(
        why.lock().unwrap().contains("cap"),
        "{}",
        why.lock().unwrap()
    );
    let out = h.wait();
    assert!(out.is_err(), "{out:?}");
}

#[test]
fn a_message_only_the_host_sends_ends_the_vm() {
    let (_ch, mut guest, killed, why) = pair();
    proto::write_frame(&mut guest, &Msg::Kill { id: 1 }, &[]).unwrap();
    wait_for(&killed);
    assert!(
        why.lock().unwrap().contains("only the host"),
        "{}",
        why.lock().unwrap()
    );
}

#[test]
fn a_read_larger_than_asked_ends_the_vm() {
    let (ch, guest, killed, _) = pair();
    let reading = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.read("/work/f", 4))
    };
    let mut r = FrameReader::new(guest.try_clone().unwrap());
    let req = loop {
        if let Some((Msg::Read { req, .. }, _)) = r.read().unwrap() {
            break req;
        }
    };
    let mut g = guest;
    proto::write_frame(&mut g, &Msg::ReadData { req }, b"0123456789").unwrap();
    wait_for(&killed);
    assert!(reading.join().unwrap().is_err());
}

#[test]
fn output_within_the_cap_is_cut_and_marked() {
    let (ch, mut guest, killed, _) = pair();
    let h = ch
        .exec(
            vec!["/bin/echo".into()],
            BTreeMap::new(),
            serde_json::json!({}),
            4,
            None,
            false,
            Duration::from_secs(30),
        )
        .unwrap();
    let id = next_exec(&guest);
    let out = Msg::Output {
        id,
        stream: proto::Stream::Stdout,
    };
    proto::write_frame(&mut guest, &out, b"hello").unwrap();
    proto::write_frame(
        &mut guest,
        &Msg::Exited {
            id,
            status: proto::Status::Code { code: 3 },
        },
        &[],
    )
    .unwrap();
    let got = h.wait().unwrap();
    assert_eq!(got.stdout, b"hell");
    assert!(got.stdout_truncated);
    assert_eq!(got.status, ExitStatus::Code(3));
    assert!(!killed.load(Ordering::SeqCst));
}

/// An agent built from other sources (another protocol, or one from
/// before protocols were numbered) is refused as it says it is ready,
/// saying how to rebuild it.
#[test]
fn an_agent_of_another_protocol_is_refused_at_ready() {
    for (header, proto) in [
        (
            format!(
                r#"{{"t":"ready","agent":"old","kernel":"6.1","proto":{}}}"#,
                proto::PROTOCOL + 1
            ),
            proto::PROTOCOL + 1,
        ),
        (
            r#"{"t":"ready","agent":"old","kernel":"6.1"}"#.to_string(),
            1,
        ),
    ] {
        let (host, mut guest) = UnixStream::pair().unwrap();
        let mut frame = Vec::new();
        frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
        frame.extend_from_slice(&0u32.to_be_bytes());
        frame.extend_from_slice(header.as_bytes());
        std::io::Write::write_all(&mut guest, &frame).unwrap();
        let e = match await_ready(&host, Duration::from_secs(5)) {
            Err(e) => e,
            Ok(_) => panic!("an agent of protocol {proto} was taken"),
        };
        assert!(
            e.contains(&format!("protocol {proto}")) && e.contains("rebuild"),
            "{e}"
        );
    }
}

/// A guest that opens a connection with an id only the host chooses
/// (one of a forwarded port's) breaks the protocol: it could otherwise
/// take over that forward's bytes.
#[test]
fn a_guest_connection_with_a_hosts_id_ends_the_vm() {
    let (_ch, mut guest, killed, why) = pair();
    let conn = proto::HOST_CONN | 3;
    proto::write_frame(&mut guest, &Msg::ConnOpen { conn }, &[]).unwrap();
    wait_for(&killed);
    assert!(
        why.lock().unwrap().contains("only the host chooses"),
        "{}",
        why.lock().unwrap()
    );
}

/// A forwarded port: the host asks (`PortOpen` with a host id), the
/// guest's refusal comes back as its reason and the connection is
/// forgotten; once the guest says `Done`, what it sends on the
/// connection reaches the sink, and its close ends it.
#[test]
fn a_port_open_is_refused_with_the_guests_reason_or_relayed() {
    let (ch, guest, _killed, _) = pair();
    let mut g = guest.try_clone().unwrap();
    let answer = std::thread::spawn(move || {
        let mut r = FrameReader::new(guest);
        let mut seen = Vec::new();
        for n in 0..2 {
            let (req, conn, port) = loop {
                if let Some((Msg::PortOpen { req, conn, port }, _)) = r.read().unwrap() {
                    break (req, conn, port);
                }
            };
            seen.push((conn, port));
            if n == 0 {
                let refusal = Msg::Error {
                    req,
                    kind: proto::ErrKind::Unavailable,
                    path: String::new(),
                    message: "nothing listens on port 8000".into(),
                };
                proto::write_frame(&mut g, &refusal, &[]).unwrap();
            } else {
                proto::write_frame(&mut g, &Msg::ConnData { conn }, b"hello").unwrap();
                proto::write_frame(&mut g, &Msg::Done { req }, &[]).unwrap();
                proto::write_frame(&mut g, &Msg::ConnClose { conn }, &[]).unwrap();
            }
        }
        seen
    });
    let (tx, rx) = mpsc::channel();
    let first = ch.host_conn();
    let e = ch.port_open(first, 8000, tx).unwrap_err();
    assert!(
        e.to_string().contains("nothing listens on port 8000"),
        "{e}"
    );
    assert!(!lock(&ch.routes).conns.contains_key(&first));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)),
        Err(mpsc::RecvTimeoutError::Disconnected)
    );
    let (tx, rx) = mpsc::channel();
    let second = ch.host_conn();
    ch.port_open(second, 9000, tx).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Some(b"hello".to_vec())
    );
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
    let seen = answer.join().unwrap();
    assert_eq!(seen, [(first, 8000), (second, 9000)]);
    assert!(seen.iter().all(|(c, _)| c & proto::HOST_CONN != 0));
}
