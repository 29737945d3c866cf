use super::*;
use proptest::prelude::*;

/// Every kind of message, each once (with its data when it carries any).
fn every_kind() -> Vec<(Msg, Vec<u8>)> {
    let mut all = first_kinds();
    all.extend(second_kinds());
    all
}

/// The first half of [`every_kind`]: setup, execs and their events.
fn first_kinds() -> Vec<(Msg, Vec<u8>)> {
    let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
    vec![
        (
            Msg::Ready {
                agent: "0.1.0".into(),
                kernel: "6.1.0-28-cloud-amd64".into(),
                proto: PROTOCOL,
            },
            vec![],
        ),
        (
            Msg::Setup {
                req: 1,
                plan: serde_json::json!({"rung": "container", "argv": []}),
                disk_bytes: 1 << 30,
            },
            vec![],
        ),
        (
            Msg::Trust {
                req: 1,
                dir: "/run/cordon-trust".into(),
                image_root: "/image".into(),
                ca_pem: "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n".into(),
            },
            vec![],
        ),
        (
            Msg::Exec {
                id: 7,
                argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
                env,
                bounds: serde_json::json!({"max_memory": 1u64 << 30}),
                max_output_bytes: u64::MAX,
            },
            vec![],
        ),
        (Msg::Stdin { id: 7 }, b"input\n".to_vec()),
        (Msg::StdinEnd { id: 7 }, vec![]),
        (Msg::Kill { id: 7 }, vec![]),
        (
            Msg::Output {
                id: 7,
                stream: Stream::Stdout,
            },
            b"hi\n".to_vec(),
        ),
        (
            Msg::Output {
                id: 7,
                stream: Stream::Stderr,
            },
            vec![0, 255, 10],
        ),
        (
            Msg::Exited {
                id: 7,
                status: Status::Code { code: -1 },
            },
            vec![],
        ),
        (
            Msg::Exited {
                id: 7,
                status: Status::Signal { signal: 9 },
            },
            vec![],
        ),
        (
            Msg::Exited {
                id: 7,
                status: Status::TimedOut,
            },
            vec![],
        ),
        (
            Msg::Exited {
                id: 7,
                status: Status::Bound {
                    bound: "memory".into(),
                },
            },
            vec![],
        ),
        (
            Msg::ExecFailed {
                id: 8,
                error: "no such file".into(),
            },
            vec![],
        ),
        (
            Msg::WriteStart {
                req: 2,
                path: "/work/a".into(),
                mode: 0o644,
                size: MAX_FILE,
            },
            vec![],
        ),
    ]
}

/// The second half of [`every_kind`]: files, errors, connections, the end.
fn second_kinds() -> Vec<(Msg, Vec<u8>)> {
    vec![
        (Msg::WriteData { req: 2 }, vec![1; 1000]),
        (
            Msg::Stat {
                req: 3,
                path: "/work".into(),
            },
            vec![],
        ),
        (
            Msg::Read {
                req: 4,
                path: "/work/a".into(),
                max: 10,
            },
            vec![],
        ),
        (
            Msg::List {
                req: 5,
                path: "/work".into(),
            },
            vec![],
        ),
        (Msg::Done { req: 2 }, vec![]),
        (
            Msg::StatReply {
                req: 3,
                stat: Some(WireStat {
                    kind: Kind::Dir,
                    size: None,
                    mode: 0o40755,
                }),
            },
            vec![],
        ),
        (Msg::StatReply { req: 3, stat: None }, vec![]),
        (Msg::ReadData { req: 4 }, b"0123456789x".to_vec()),
        (Msg::ReadEnd { req: 4, size: 11 }, vec![]),
        (
            Msg::ListReply {
                req: 5,
                entries: vec![
                    WireEntry {
                        name: "a".into(),
                        kind: Kind::File,
                    },
                    WireEntry {
                        name: "l".into(),
                        kind: Kind::Symlink,
                    },
                    WireEntry {
                        name: "p".into(),
                        kind: Kind::Other,
                    },
                ],
                more: false,
            },
            vec![],
        ),
        (
            Msg::Error {
                req: 4,
                kind: ErrKind::PathRefused,
                path: "/work/l".into(),
                message: "a symlink".into(),
            },
            vec![],
        ),
        (
            Msg::FilesOp {
                req: 6,
                op: serde_json::json!({"list": {"path": "", "depth": 1}}),
                size: 0,
            },
            vec![],
        ),
        (Msg::FilesData { req: 6 }, b"{\"listing\":".to_vec()),
        (Msg::FilesEnd { req: 6 }, vec![]),
        (
            Msg::WatchStart {
                req: 7,
                path: "/work".into(),
                recursive: true,
            },
            vec![],
        ),
        (
            Msg::WatchEvent {
                req: 7,
                event: serde_json::json!({"event": "created", "path": "a"}),
            },
            vec![],
        ),
        (Msg::WatchStop { req: 7 }, vec![]),
        (
            Msg::WatchEnd {
                req: 7,
                reason: "stopped by the host".into(),
            },
            vec![],
        ),
        (Msg::ConnOpen { conn: 1 }, vec![]),
        (
            Msg::PortOpen {
                req: 40,
                conn: HOST_CONN | 1,
                port: 8000,
            },
            vec![],
        ),
        (Msg::ConnData { conn: 1 }, b"GET / HTTP/1.1\r\n".to_vec()),
        (Msg::ConnClose { conn: 1 }, vec![]),
        (Msg::Shutdown {}, vec![]),
        (Msg::Park { req: 41 }, vec![]),
        (Msg::Unpark { restored: true }, vec![]),
    ]
}

fn stream_of(frames: &[(Msg, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (m, d) in frames {
        write_frame(&mut out, m, d).unwrap();
    }
    out
}

fn read_all(bytes: &[u8]) -> Result<Vec<(Msg, Vec<u8>)>, FrameError> {
    let mut r = FrameReader::new(bytes);
    let mut out = Vec::new();
    while let Some(f) = r.read()? {
        out.push(f);
    }
    Ok(out)
}

fn raw(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    out
}

#[test]
fn every_kind_round_trips() {
    let frames = every_kind();
    let bytes = stream_of(&frames);
    assert_eq!(read_all(&bytes).unwrap(), frames);
    // Every kind is in the list (a new one must be added above).
    let mut kinds: Vec<_> = frames.iter().map(|(m, _)| m.kind()).collect();
    kinds.dedup();
    assert_eq!(kinds.len(), 35);
}

#[test]
fn the_wire_form_is_as_documented() {
    let f = encode(
        &Msg::Exited {
            id: 3,
            status: Status::Code { code: 0 },
        },
        &[],
    )
    .unwrap();
    let header = br#"{"t":"exited","id":3,"status":{"t":"code","code":0}}"#;
    assert_eq!(f, raw(header, &[]));
    let f = encode(&Msg::Shutdown {}, &[]).unwrap();
    assert_eq!(f, raw(br#"{"t":"shutdown"}"#, &[]));
    let full = vec![7u8; MAX_DATA as usize];
    let f = encode(&Msg::WriteData { req: 1 }, &full).unwrap();
    assert_eq!(
        read_all(&f).unwrap(),
        vec![(Msg::WriteData { req: 1 }, full)]
    );
    let f = encode(&Msg::Stdin { id: 1 }, b"ab").unwrap();
    assert_eq!(&f[..8], &[0, 0, 0, 20, 0, 0, 0, 2]);
}

#[test]
fn a_clean_end_is_none_and_a_cut_frame_is_truncated() {
    let bytes = stream_of(&every_kind());
    // The frame boundaries.
    let mut bounds = vec![0];
    let mut r = FrameReader::new(&bytes[..]);
    let mut at = 0;
    while let Some((m, d)) = r.read().unwrap() {
        at += encode(&m, &d).unwrap().len();
        bounds.push(at);
    }
    assert_eq!(at, bytes.len());
    for cut in 0..=bytes.len() {
        let got = read_all(&bytes[..cut]);
        if bounds.contains(&cut) {
            assert!(got.is_ok(), "cut at boundary {cut}: {got:?}");
        } else {
            assert!(
                matches!(got, Err(FrameError::Truncated)),
                "cut at {cut}: {got:?}"
            );
        }
    }
}

#[test]
fn oversize_lengths_are_refused_before_reading_on() {
    // Lengths announcing gigabytes, and nothing behind them: a reader that
    // allocated first would try to; this one refuses from the lengths alone.
    let mut b = Vec::new();
    b.extend_from_slice(&u32::MAX.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    assert!(matches!(
        read_all(&b),
        Err(FrameError::HeaderTooLarge(u32::MAX))
    ));
    let mut b = Vec::new();
    b.extend_from_slice(&16u32.to_be_bytes());
    b.extend_from_slice(&(MAX_DATA + 1).to_be_bytes());
    assert!(matches!(read_all(&b), Err(FrameError::DataTooLarge(n)) if n == MAX_DATA + 1));
    let mut b = Vec::new();
    b.extend_from_slice(&(MAX_HEADER + 1).to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    assert!(matches!(read_all(&b), Err(FrameError::HeaderTooLarge(_))));
    // Exactly at the bounds is allowed (then truncated here).
    let mut b = Vec::new();
    b.extend_from_slice(&MAX_HEADER.to_be_bytes());
    b.extend_from_slice(&MAX_DATA.to_be_bytes());
    assert!(matches!(read_all(&b), Err(FrameError::Truncated)));
}

#[test]
fn writing_refuses_what_a_reader_would() {
    let mut out = Vec::new();
    let big = vec![0u8; MAX_DATA as usize + 1];
    let e = write_frame(&mut out, &Msg::Stdin { id: 1 }, &big).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = write_frame(&mut out, &Msg::Kill { id: 1 }, b"x").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let huge = Msg::ExecFailed {
        id: 1,
        error: "x".repeat(MAX_HEADER as usize),
    };
    let e = write_frame(&mut out, &huge, &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let file = Msg::WriteStart {
        req: 1,
        path: "/w/f".into(),
        mode: 0o600,
        size: MAX_FILE + 1,
    };
    assert!(write_frame(&mut out, &file, &[]).is_err());
    assert!(out.is_empty(), "nothing was written");
}

#[test]
fn malformed_headers_are_refused() {
    let cases: &[(&[u8], &[u8])] = &[
        (b"", b""),
        (b"not json", b""),
        (br#"{"t":"nope"}"#, b""),
        (br#"{"t":"kill"}"#, b""),
        (br#"{"t":"kill","id":1,"extra":2}"#, b""),
        (br#"{"t":"kill","id":-1}"#, b""),
        (br#"{"t":"kill","id":1} x"#, b""),
        (br#"{"t":"kill","id":1}"#, b"data on a kind without"),
        (br#"{"t":"shutdown","x":1}"#, b""),
        (br#"{"id":1}"#, b""),
        (br#"[1]"#, b""),
        (
            br#"{"t":"exited","id":1,"status":{"t":"code","code":0,"x":1}}"#,
            b"",
        ),
        (br#"{"t":"exited","id":1,"status":{"t":"gone"}}"#, b""),
        (
            br#"{"t":"stat_reply","req":1,"stat":{"kind":"file","size":1,"mode":0,"x":0}}"#,
            b"",
        ),
        (
            br#"{"t":"write_start","req":1,"path":"/a","mode":0,"size":67108865}"#,
            b"",
        ),
    ];
    for (h, d) in cases {
        let got = read_all(&raw(h, d));
        assert!(
            matches!(got, Err(FrameError::Malformed(_))),
            "{}: {got:?}",
            String::from_utf8_lossy(h)
        );
    }
}

#[test]
fn a_reader_stays_failed_after_an_error() {
    let mut b = raw(b"junk", b"");
    b.extend(stream_of(&[(Msg::Shutdown {}, vec![])]));
    let mut r = FrameReader::new(&b[..]);
    assert!(r.read().is_err());
    assert!(r.read().is_err());
}

#[test]
fn a_listing_splits_into_bounded_frames() {
    let entries: Vec<WireEntry> = (0..MAX_LIST)
        .map(|i| WireEntry {
            // Control characters encode sixfold.
            name: format!("{i}{}", "\u{1}".repeat(200)),
            kind: Kind::File,
        })
        .collect();
    let frames = list_replies(9, entries.clone());
    assert!(frames.len() > 1);
    let mut back = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let bytes = encode(f, &[]).unwrap();
        let (m, _) = FrameReader::new(&bytes[..]).read().unwrap().unwrap();
        let Msg::ListReply { req, entries, more } = m else {
            panic!("{m:?}")
        };
        assert_eq!(req, 9);
        assert_eq!(more, i + 1 != frames.len());
        back.extend(entries);
    }
    assert_eq!(back, entries);
    assert_eq!(
        list_replies(1, vec![]),
        vec![Msg::ListReply {
            req: 1,
            entries: vec![],
            more: false
        }]
    );
}

/// Every input kept in `fuzz/corpus/vm_frames` (seeds and the fuzzer's
/// findings) runs through the target's body here too.
#[test]
fn the_vm_frames_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/vm_frames");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        fuzz_decode(&data);
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
}

/// The seeds (`seed-*`) are streams of valid frames, the kinds host and
/// guest exchange; regenerate them with
/// `CORDON_WRITE_SEEDS=1 cargo test -p cordon-vm-proto seeds`.
#[test]
fn the_seeds_are_valid_streams() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/vm_frames");
    let all = every_kind();
    let seeds: Vec<(String, Vec<u8>)> = vec![
        ("seed-all-kinds".into(), stream_of(&all)),
        ("seed-exec".into(), stream_of(&all[3..14])),
        ("seed-files".into(), stream_of(&all[14..33])),
        ("seed-conn".into(), stream_of(&all[33..])),
    ];
    if std::env::var_os("CORDON_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    for (name, bytes) in &seeds {
        let kept = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&kept, bytes, "{name} is stale");
        assert!(read_all(&kept).is_ok());
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z/._-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::File),
        Just(Kind::Dir),
        Just(Kind::Symlink),
        Just(Kind::Other)
    ]
}

fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn status() -> impl Strategy<Value = Status> {
    prop_oneof![
        any::<i32>().prop_map(|code| Status::Code { code }),
        any::<i32>().prop_map(|signal| Status::Signal { signal }),
        Just(Status::TimedOut),
        text().prop_map(|bound| Status::Bound { bound }),
    ]
}

fn err_kind() -> impl Strategy<Value = ErrKind> {
    prop_oneof![
        Just(ErrKind::NotFound),
        Just(ErrKind::PathRefused),
        Just(ErrKind::NotRegularFile),
        Just(ErrKind::Unavailable),
        Just(ErrKind::Failed),
        Just(ErrKind::Refused),
    ]
}

/// Any message, with data when its kind carries data.
fn frame() -> impl Strategy<Value = (Msg, Vec<u8>)> {
    let n = any::<u64>();
    let msg = prop_oneof![
        (text(), text(), any::<u32>()).prop_map(|(agent, kernel, proto)| Msg::Ready {
            agent,
            kernel,
            proto
        }),
        (n, text(), text(), text()).prop_map(|(req, dir, image_root, ca_pem)| Msg::Trust {
            req,
            dir,
            image_root,
            ca_pem
        }),
        (n, json(), n).prop_map(|(req, plan, disk_bytes)| Msg::Setup {
            req,
            plan,
            disk_bytes
        }),
        (
            n,
            prop::collection::vec(text(), 0..4),
            prop::collection::btree_map(text(), text(), 0..4),
            json(),
            n
        )
            .prop_map(|(id, argv, env, bounds, max_output_bytes)| Msg::Exec {
                id,
                argv,
                env,
                bounds,
                max_output_bytes
            }),
        n.prop_map(|id| Msg::Stdin { id }),
        n.prop_map(|id| Msg::StdinEnd { id }),
        n.prop_map(|id| Msg::Kill { id }),
        (n, any::<bool>()).prop_map(|(id, e)| Msg::Output {
            id,
            stream: if e { Stream::Stderr } else { Stream::Stdout }
        }),
        (n, status()).prop_map(|(id, status)| Msg::Exited { id, status }),
        (n, text()).prop_map(|(id, error)| Msg::ExecFailed { id, error }),
        (n, text(), any::<u32>(), 0..=MAX_FILE).prop_map(|(req, path, mode, size)| {
            Msg::WriteStart {
                req,
                path,
                mode,
                size,
            }
        }),
        n.prop_map(|req| Msg::WriteData { req }),
        (n, text()).prop_map(|(req, path)| Msg::Stat { req, path }),
        (n, text(), n).prop_map(|(req, path, max)| Msg::Read { req, path, max }),
        (n, text()).prop_map(|(req, path)| Msg::List { req, path }),
        n.prop_map(|req| Msg::Done { req }),
        (
            n,
            prop::option::of((kind(), prop::option::of(n), any::<u32>()))
        )
            .prop_map(|(req, s)| Msg::StatReply {
                req,
                stat: s.map(|(kind, size, mode)| WireStat { kind, size, mode })
            }),
        n.prop_map(|req| Msg::ReadData { req }),
        (n, n).prop_map(|(req, size)| Msg::ReadEnd { req, size }),
        (
            n,
            prop::collection::vec((text(), kind()), 0..5),
            any::<bool>()
        )
            .prop_map(|(req, e, more)| Msg::ListReply {
                req,
                entries: e
                    .into_iter()
                    .map(|(name, kind)| WireEntry { name, kind })
                    .collect(),
                more
            }),
        (n, err_kind(), text(), text()).prop_map(|(req, kind, path, message)| Msg::Error {
            req,
            kind,
            path,
            message
        }),
        n.prop_map(|conn| Msg::ConnOpen { conn }),
        (n, n, any::<u16>()).prop_map(|(req, conn, port)| Msg::PortOpen { req, conn, port }),
        n.prop_map(|conn| Msg::ConnData { conn }),
        n.prop_map(|conn| Msg::ConnClose { conn }),
        Just(Msg::Shutdown {}),
        n.prop_map(|req| Msg::Park { req }),
        any::<bool>().prop_map(|restored| Msg::Unpark { restored }),
    ];
    (msg, prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(m, d)| {
        let d = if m.carries_data() { d } else { vec![] };
        (m, d)
    })
}

proptest! {
    #[test]
    fn frames_round_trip(frames in prop::collection::vec(frame(), 0..6)) {
        let bytes = stream_of(&frames);
        prop_assert_eq!(read_all(&bytes).unwrap(), frames);
        fuzz_decode(&bytes);
    }

    #[test]
    fn every_cut_is_truncated_or_a_boundary(frames in prop::collection::vec(frame(), 1..4), at in any::<prop::sample::Index>()) {
        let bytes = stream_of(&frames);
        let cut = at.index(bytes.len() + 1);
        let mut boundary = vec![0];
        for (m, d) in &frames {
            boundary.push(boundary[boundary.len() - 1] + encode(m, d).unwrap().len());
        }
        match read_all(&bytes[..cut]) {
            Ok(got) => {
                prop_assert!(boundary.contains(&cut));
                let n = boundary.iter().position(|b| *b == cut).unwrap();
                prop_assert_eq!(&got[..], &frames[..n]);
            }
            Err(FrameError::Truncated) => prop_assert!(!boundary.contains(&cut)),
            Err(e) => prop_assert!(false, "cut at {}: {}", cut, e),
        }
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzz_decode(&bytes);
        let _ = read_all(&bytes);
    }

    #[test]
    fn flipped_bytes_never_panic(frames in prop::collection::vec(frame(), 1..3), at in any::<prop::sample::Index>(), with in any::<u8>()) {
        let mut bytes = stream_of(&frames);
        let i = at.index(bytes.len());
        bytes[i] ^= with;
        fuzz_decode(&bytes);
    }
}

#[test]
fn a_ready_without_a_protocol_is_from_before_protocols_were_numbered() {
    let old = raw(br#"{"t":"ready","agent":"0.1.0","kernel":"6.1"}"#, &[]);
    match read_all(&old).unwrap().as_slice() {
        [(Msg::Ready { proto, .. }, _)] => assert_eq!(*proto, 1),
        other => panic!("{other:?}"),
    }
    const { assert!(PROTOCOL > 1) };
    let now = encode(
        &Msg::Ready {
            agent: "0.2.0".into(),
            kernel: "6.1".into(),
            proto: PROTOCOL,
        },
        &[],
    )
    .unwrap();
    let header = format!(r#"{{"t":"ready","agent":"0.2.0","kernel":"6.1","proto":{PROTOCOL}}}"#);
    assert_eq!(now, raw(header.as_bytes(), &[]));
}

#[test]
fn trust_carries_its_paths_and_the_ca_in_its_header_and_no_data() {
    let t = Msg::Trust {
        req: 9,
        dir: "/run/cordon-trust".into(),
        image_root: "/image".into(),
        ca_pem: "PEM".into(),
    };
    let header =
        br#"{"t":"trust","req":9,"dir":"/run/cordon-trust","image_root":"/image","ca_pem":"PEM"}"#;
    assert_eq!(encode(&t, &[]).unwrap(), raw(header, &[]));
    assert!(encode(&t, b"x").is_err());
    // A field the kind does not have is refused, as for every kind.
    let odd = raw(
        br#"{"t":"trust","req":9,"dir":"/d","image_root":"/","ca_pem":"P","mode":1}"#,
        &[],
    );
    assert!(matches!(read_all(&odd), Err(FrameError::Malformed(_))));
}
