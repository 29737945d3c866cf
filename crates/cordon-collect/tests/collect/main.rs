//! Collecting declared outputs: the phase order, every typed error, and
//! the landing names' collisions. Negative cases first. (What a spec
//! declares — names, paths, caps — is tested with the protocol, in
//! `cordon-sandbox`.)
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

mod doubles;

use cordon_collect::{
    collect_outputs, collect_outputs_named, CallDir, Cap, CollectError, Collection,
};
use cordon_sandbox::{
    Capability, Collision, DeclaredOutput, OutputSink, SandboxError, SandboxSpec, TransferLimits,
};
use unicode_normalization::UnicodeNormalization;

use doubles::{Entry, FilesSandbox, NoFiles, RecordingSink};

const LIMITS: TransferLimits = TransferLimits {
    max_bytes_per_file: 10,
    max_total_bytes: 16,
    max_files: 3,
};

fn out(path: &str) -> DeclaredOutput {
    DeclaredOutput::new(path, "application/octet-stream").unwrap()
}

fn spec_with(limits: TransferLimits, outputs: Vec<DeclaredOutput>) -> SandboxSpec {
    SandboxSpec::new("k", "i")
        .unwrap()
        .with_outputs(limits, outputs)
        .unwrap()
}

fn file(n: usize) -> Entry {
    Entry::File(vec![b'x'; n])
}

fn sink() -> RecordingSink {
    RecordingSink::default()
}

// ---- phase 1: the declaration alone touches neither sandbox nor sink ----

#[test]
fn a_landing_output_without_a_sink_is_refused_before_the_sandbox() {
    let sb = FilesSandbox::new(&[("a", file(1))]);
    let spec = spec_with(LIMITS, vec![out("a")]);
    let e = collect_outputs(&sb, &spec, None).unwrap_err();
    assert!(
        matches!(e, CollectError::NoSink { ref name } if name == "a"),
        "{e}"
    );
    assert!(sb.log().is_empty(), "{:?}", sb.log());
}

#[test]
fn a_consumed_output_needs_no_sink() {
    let sb = FilesSandbox::new(&[("meta.json", Entry::File(b"{}".to_vec()))]);
    let spec = spec_with(LIMITS, vec![out("meta.json").consumed()]);
    let got = collect_outputs(&sb, &spec, None).unwrap();
    assert!(got.landed.is_empty());
    assert_eq!(got.consumed[0].bytes, b"{}");
}

#[test]
fn call_time_outputs_are_refused_without_the_flag_before_the_sandbox() {
    let sb = FilesSandbox::new(&[("a", file(1))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("a")]);
    let e = collect_outputs_named(&sb, &spec, &[out("a")], Some(&s)).unwrap_err();
    assert!(matches!(e, CollectError::CallTimeRefused { .. }), "{e}");
    assert!(sb.log().is_empty());
    assert!(s.names().is_empty());
}

fn named(path: &str, name: &str) -> DeclaredOutput {
    out(path).with_name(name).unwrap()
}

fn call_time_spec() -> SandboxSpec {
    SandboxSpec::new("k", "i")
        .unwrap()
        .with_outputs_named_at_call_time(LIMITS)
        .unwrap()
}

#[test]
fn colliding_landing_names_are_refused_before_the_sandbox() {
    let nfc: String = "caf\u{e9}.png".nfc().collect();
    let nfd: String = "caf\u{e9}.png".nfd().collect();
    assert_ne!(nfc, nfd, "the fixture must differ in bytes");
    let cases = [
        ("report.png", "report.png", Collision::Identical),
        ("Report.png", "report.png", Collision::Case),
        (nfc.as_str(), nfd.as_str(), Collision::Normalisation),
        ("out", "out/a.png", Collision::Parent),
        ("OUT/a.png", "out", Collision::Parent),
    ];
    for (first, second, how) in cases {
        let sb = FilesSandbox::new(&[("a", file(1)), ("b", file(1))]);
        let s = sink();
        let outputs = [named("a", first), named("b", second)];
        let e = collect_outputs_named(&sb, &call_time_spec(), &outputs, Some(&s)).unwrap_err();
        match &e {
            CollectError::Collision {
                first: f,
                second: g,
                how: h,
            } => {
                assert_eq!((f.as_str(), g.as_str(), *h), (first, second, how), "{e}");
                assert!(e.to_string().contains(first) && e.to_string().contains(second));
                if how == Collision::Normalisation {
                    // The two spellings read the same; the message tells them apart.
                    assert!(e.to_string().contains("cafe\\u{301}.png"), "{e}");
                }
            }
            other => panic!("{first} / {second}: {other}"),
        }
        assert!(sb.log().is_empty(), "{first}: {:?}", sb.log());
        assert!(s.names().is_empty());
    }
}

#[test]
fn distinct_names_do_not_collide_and_consumed_names_are_not_landing_names() {
    let sb = FilesSandbox::new(&[("a", file(1)), ("b", file(1))]);
    let s = sink();
    let outputs = [named("a", "out/a.png"), named("b", "out/b.png")];
    let got = collect_outputs_named(&sb, &call_time_spec(), &outputs, Some(&s)).unwrap();
    assert_eq!(got.landed.len(), 2);
    let outputs = [named("a", "x.json").consumed(), named("b", "X.json")];
    collect_outputs_named(&sb, &call_time_spec(), &outputs, Some(&s)).unwrap();
}

// ---- phase 2: stat and cap, before any read ----

#[test]
fn a_missing_required_output_is_refused_before_any_read() {
    let sb = FilesSandbox::new(&[("a", file(1))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("a"), out("b")]);
    let e = collect_outputs(&sb, &spec, Some(&s)).unwrap_err();
    assert!(
        matches!(e, CollectError::Missing { ref path } if path == "/workspace/b"),
        "{e}"
    );
    assert_eq!(sb.log(), ["stat /workspace/a", "stat /workspace/b"]);
    assert!(s.names().is_empty());
}

#[test]
fn a_missing_optional_output_is_normal() {
    let sb = FilesSandbox::new(&[("a", file(1))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("a"), out("b").optional()]);
    let got = collect_outputs(&sb, &spec, Some(&s)).unwrap();
    assert_eq!(got.landed.len(), 1);
    assert_eq!(s.names(), ["a"]);
}

#[test]
fn an_unknown_size_is_refused_not_guessed() {
    let sb = FilesSandbox::new(&[("a", Entry::SizeUnknown(vec![1]))]);
    let s = sink();
    let e = collect_outputs(&sb, &spec_with(LIMITS, vec![out("a")]), Some(&s)).unwrap_err();
    assert!(matches!(e, CollectError::SizeUnknown { .. }), "{e}");
    assert!(!sb.log().iter().any(|l| l.starts_with("read")));
    assert!(s.names().is_empty());
}

#[test]
fn anything_but_a_regular_file_is_refused_even_when_optional() {
    for entry in [Entry::Dir, Entry::Symlink, Entry::Fifo] {
        let sb = FilesSandbox::new(&[("a", entry.clone())]);
        let s = sink();
        let spec = spec_with(LIMITS, vec![out("a").optional()]);
        let e = collect_outputs(&sb, &spec, Some(&s)).unwrap_err();
        assert!(
            matches!(e, CollectError::NotRegular { .. }),
            "{entry:?}: {e}"
        );
        assert!(!sb.log().iter().any(|l| l.starts_with("read")));
        assert!(s.names().is_empty());
    }
}

#[test]
fn every_cap_is_enforced_at_stat_naming_the_cap_and_the_file() {
    let cases = [
        // one file past the per-file cap
        (vec![("a", file(11))], Cap::BytesPerFile, "/workspace/a"),
        // two files past the total: the second breaches
        (
            vec![("a", file(10)), ("b", file(7))],
            Cap::TotalBytes,
            "/workspace/b",
        ),
        // four files past max_files: the fourth breaches
        (
            vec![
                ("a", file(1)),
                ("b", file(1)),
                ("c", file(1)),
                ("d", file(1)),
            ],
            Cap::Files,
            "/workspace/d",
        ),
    ];
    for (entries, cap, file_named) in cases {
        let sb = FilesSandbox::new(&entries);
        let s = sink();
        let outputs = entries.iter().map(|(p, _)| out(p)).collect();
        let e = collect_outputs(&sb, &spec_with(LIMITS, outputs), Some(&s)).unwrap_err();
        match &e {
            CollectError::CapExceeded { cap: c, path, .. } => {
                assert_eq!((*c, path.as_str()), (cap, file_named), "{e}");
                assert!(e.to_string().contains(&cap.to_string()), "{e}");
            }
            other => panic!("{cap}: {other}"),
        }
        assert!(!sb.log().iter().any(|l| l.starts_with("read")), "{cap}");
        assert!(s.names().is_empty());
    }
}

#[test]
fn a_consumed_output_counts_against_every_cap() {
    let sb = FilesSandbox::new(&[("a", file(10)), ("meta", file(7))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("a"), out("meta").consumed()]);
    let e = collect_outputs(&sb, &spec, Some(&s)).unwrap_err();
    assert!(
        matches!(e, CollectError::CapExceeded { cap: Cap::TotalBytes, ref path, .. } if path == "/workspace/meta"),
        "{e}"
    );
    assert!(s.names().is_empty());
}

#[test]
fn a_sandbox_that_does_not_serve_files_out_says_so() {
    let sb = NoFiles(FilesSandbox::new(&[]).provenance);
    let s = sink();
    let e = collect_outputs(&sb, &spec_with(LIMITS, vec![out("a")]), Some(&s)).unwrap_err();
    assert!(
        matches!(
            e,
            CollectError::Sandbox {
                source: SandboxError::Unsupported {
                    capability: Capability::FilesOut
                },
                ..
            }
        ),
        "{e}"
    );
}

// ---- phase 3: reads are bounded and re-checked; nothing delivered yet ----

#[test]
fn a_cap_breach_after_some_reads_delivers_nothing() {
    // `b` was 2 bytes at stat and is 50 when read.
    let sb = FilesSandbox::new(&[
        ("a", file(3)),
        (
            "b",
            Entry::Changing {
                stat_size: 2,
                bytes: vec![b'y'; 50],
            },
        ),
    ]);
    let s = sink();
    let e =
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("a"), out("b")]), Some(&s)).unwrap_err();
    assert!(
        matches!(e, CollectError::CapExceeded { cap: Cap::BytesPerFile, ref path, .. } if path == "/workspace/b"),
        "{e}"
    );
    let log = sb.log();
    assert!(log.contains(&"read /workspace/a 10".to_string()), "{log:?}");
    assert!(s.names().is_empty(), "delivered before a refusal");
}

#[test]
fn a_read_is_bounded_by_what_is_left_of_the_total() {
    let sb = FilesSandbox::new(&[
        ("a", file(10)),
        (
            "b",
            Entry::Changing {
                stat_size: 6,
                bytes: vec![b'y'; 7],
            },
        ),
    ]);
    let s = sink();
    let e =
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("a"), out("b")]), Some(&s)).unwrap_err();
    assert!(sb.log().contains(&"read /workspace/b 6".to_string()));
    assert!(
        matches!(
            e,
            CollectError::CapExceeded {
                cap: Cap::TotalBytes,
                ..
            }
        ),
        "{e}"
    );
    assert!(s.names().is_empty());
}

// ---- phase 4: delivery, in declaration order, after every read ----

#[test]
fn every_stat_precedes_every_read_and_delivery_keeps_declaration_order() {
    let sb = FilesSandbox::new(&[("z", file(1)), ("a", file(2)), ("m", file(3))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("z"), out("a").consumed(), out("m")]);
    let got = collect_outputs(&sb, &spec, Some(&s)).unwrap();
    assert_eq!(
        sb.log(),
        [
            "stat /workspace/z",
            "stat /workspace/a",
            "stat /workspace/m",
            "read /workspace/z 10",
            "read /workspace/a 10",
            "read /workspace/m 10",
        ]
    );
    assert_eq!(s.names(), ["z", "m"]);
    let shown: Vec<&str> = got.landed.iter().map(|l| l.display.as_str()).collect();
    assert_eq!(shown, ["landed `z`", "landed `m`"]);
    assert_eq!(got.consumed[0].name, "a");
    assert!(
        !format!("{:?}", got.landed).contains("/host/out"),
        "the handle is rendered"
    );
}

#[test]
fn a_sink_failure_mid_delivery_reports_what_was_already_delivered() {
    let sb = FilesSandbox::new(&[("a", file(1)), ("b", file(1))]);
    let s = RecordingSink {
        fail_at: Some(1),
        ..Default::default()
    };
    let e =
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("a"), out("b")]), Some(&s)).unwrap_err();
    match &e {
        CollectError::Delivery {
            name, delivered, ..
        } => {
            assert_eq!(name, "b");
            assert_eq!(delivered.len(), 1);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_call_dir_is_read_beneath_and_dropped_from_landing_names() {
    let sb = FilesSandbox::new(&[(".cordon/calls/r7/diagram.png", file(4))]);
    let s = sink();
    let spec = spec_with(LIMITS, vec![out("diagram.png")]);
    let dir = CallDir::new("r7").unwrap();
    Collection::of(&spec)
        .in_call_dir(&dir)
        .collect(&sb, Some(&s as &dyn OutputSink))
        .unwrap();
    assert_eq!(sb.log()[0], "stat /workspace/.cordon/calls/r7/diagram.png");
    assert_eq!(s.names(), ["diagram.png"]);
    for bad in ["", "../x", "a/b", ".hidden", "x y"] {
        assert!(CallDir::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn collect_error_messages() {
    let sb = FilesSandbox::new(&[
        ("big", file(11)),
        ("u", Entry::SizeUnknown(vec![1])),
        ("d", Entry::Dir),
    ]);
    let s = sink();
    let mut report = String::new();
    let mut show = |what: &str, r: Result<_, CollectError>| {
        let e = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
        report.push_str(&format!("{what}\n  {e}\n"));
    };
    show(
        "no sink",
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("big")]), None),
    );
    show(
        "call time without the flag",
        collect_outputs_named(&sb, &spec_with(LIMITS, vec![]), &[out("a")], Some(&s)),
    );
    show(
        "collision by case",
        collect_outputs_named(
            &sb,
            &call_time_spec(),
            &[named("big", "A.png"), named("u", "a.png")],
            Some(&s),
        ),
    );
    show(
        "missing",
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("gone")]), Some(&s)),
    );
    show(
        "size unknown",
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("u")]), Some(&s)),
    );
    show(
        "not a file",
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("d")]), Some(&s)),
    );
    show(
        "per-file cap",
        collect_outputs(&sb, &spec_with(LIMITS, vec![out("big")]), Some(&s)),
    );
    insta::assert_snapshot!("collect_refusals", report);
}
