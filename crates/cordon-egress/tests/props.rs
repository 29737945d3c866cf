//! Properties of the parsers that read hostile input, over generated
//! input: they never panic, what the target parser accepts is a fixed
//! point (normalising twice changes nothing), and a name it accepts is
//! never a number in disguise.
#![allow(clippy::unwrap_used)]

use cordon_egress::sni::{read_client_hello, Hello};
use cordon_egress::target::{authority, Host};
use proptest::prelude::*;

/// Authority-ish strings: labels from a small alphabet that includes the
/// characters the parser must refuse or normalise, then an optional port.
fn authority_like() -> impl Strategy<Value = String> {
    let label =
        proptest::string::string_regex("[a-zA-Z0-9xX\\-_.%@\\[\\]:\\\\é１。]{0,12}").unwrap();
    (
        proptest::collection::vec(label, 1..5),
        proptest::option::of(0u32..70000),
    )
        .prop_map(|(labels, port)| {
            let host = labels.join(".");
            match port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_target_parser_never_panics(raw in ".{0,80}") {
        let _ = authority(&raw, None);
        let _ = authority(&raw, Some(80));
    }

    #[test]
    fn the_hello_reader_never_panics_and_never_reads_a_name_it_was_not_sent(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Hello::Tls { sni: Some(name) } = read_client_hello(&bytes) {
            // A name can only come from the bytes themselves.
            let found = bytes
                .windows(name.len().max(1))
                .any(|w| w == name.as_bytes());
            prop_assert!(found);
        }
    }
}

/// Names a person or a resolver might write: mostly well formed, in mixed
/// case, sometimes with a trailing dot, an accented or full-width letter,
/// an all-digit label, or a port.
fn name_like() -> impl Strategy<Value = String> {
    let label =
        proptest::string::string_regex("[a-zA-Z0-9é１][a-zA-Z0-9-]{0,8}[a-zA-Z0-9]").unwrap();
    (
        proptest::collection::vec(label, 1..5),
        any::<bool>(),
        proptest::option::of(1u32..70000),
    )
        .prop_map(|(labels, dot, port)| {
            let mut host = labels.join(".");
            if dot {
                host.push('.');
            }
            match port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            }
        })
}

/// What the target parser accepts is a fixed point: normalising it again
/// changes nothing, and a name it accepts is lowercase ASCII, without a
/// trailing dot, never a number in disguise. Counted, so the property is
/// known to have been exercised on accepted input, not vacuously held.
#[test]
fn accepted_targets_are_fixed_points() {
    use proptest::test_runner::{Config, TestRunner};
    let accepted = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Config::with_cases(4000));
    runner
        .run(&prop_oneof![name_like(), authority_like()], |raw| {
            if let Ok(a) = authority(&raw, Some(443)) {
                accepted.set(accepted.get() + 1);
                let again = authority(&a.to_string(), None).unwrap();
                prop_assert_eq!(&again, &a);
                if let Host::Name(n) = &a.host {
                    prop_assert!(n.parse::<std::net::IpAddr>().is_err());
                    prop_assert!(!n.ends_with('.'));
                    prop_assert!(n.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'-'
                        || b == b'_'
                        || b == b'.'));
                    // The last label is never all digits (a short IPv4 spelling).
                    let last = n.rsplit('.').next().unwrap_or_default();
                    prop_assert!(!last.bytes().all(|b| b.is_ascii_digit()));
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(
        accepted.get() > 500,
        "only {} of 4000 generated targets were accepted: the property was barely exercised",
        accepted.get()
    );
}
