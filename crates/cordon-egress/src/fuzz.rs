//! The bodies of the egress fuzz targets (`fuzz/`), here so the corpora can
//! also be replayed by `cargo test` (`tests/fuzz_corpus.rs`). Not API.

use crate::sni::{read_client_hello, Hello};
use crate::target::{authority, canonical_dotted_quad, Host};

/// `egress_target`: the entry of every request, the target's authority.
/// Whatever the bytes, it is parsed or refused; what is accepted is a fixed
/// point (its text form parses back to itself, a name is already
/// canonical, a dotted quad is spelled as the address prints); a refusal
/// shows at most 200 printable characters of the input.
pub fn egress_target(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(ip) = canonical_dotted_quad(raw) {
        assert_eq!(ip.to_string(), raw, "a dotted quad that is not canonical");
    }
    for default_port in [None, Some(443)] {
        match authority(raw, default_port) {
            Ok(a) => {
                let shown = a.to_string();
                match authority(&shown, None) {
                    Ok(back) => assert_eq!(back, a, "`{raw}` -> `{shown}` parses differently"),
                    Err(e) => panic!("`{raw}` was accepted as `{shown}`, which is refused: {e}"),
                }
                if let Host::Name(n) = &a.host {
                    assert_eq!(
                        cordon_policy::canon::host(n).ok().as_deref(),
                        Some(n.as_str()),
                        "an accepted name is not canonical"
                    );
                    assert!(
                        n.parse::<std::net::IpAddr>().is_err(),
                        "`{raw}` names the address `{n}` as a name"
                    );
                }
                assert_ne!(a.port, 0, "`{raw}` was accepted with port 0");
            }
            Err(e) => {
                assert!(e.raw.chars().count() <= 200, "a refusal shows too much");
                assert!(
                    !e.raw.chars().any(char::is_control),
                    "a refusal shows control characters"
                );
            }
        }
    }
}

/// `egress_sni`: the first bytes of a tunnel. Whatever the bytes, they are
/// read without panicking; a complete ClientHello reads the same whatever
/// follows it, and a server name it yields is at most 255 bytes.
pub fn egress_sni(data: &[u8]) {
    let hello = read_client_hello(data);
    if let Hello::Tls { sni } = &hello {
        if let Some(name) = sni {
            assert!(name.len() <= 255, "a server name of {} bytes", name.len());
        }
        let mut more = data.to_vec();
        more.extend_from_slice(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x00]);
        assert_eq!(
            read_client_hello(&more),
            hello,
            "bytes after the ClientHello changed how it reads"
        );
    }
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/egress_target` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_egress_target_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/egress_target");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::egress_target(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    #[test]
    fn the_egress_sni_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/egress_sni");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::egress_sni(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
