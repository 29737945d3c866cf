//! Reading the first bytes of a CONNECT tunnel: is it a TLS ClientHello, and
//! which server name does it send?
//!
//! A bounded, hand-written reader. It never interprets TLS beyond the
//! ClientHello and never answers the client; the proxy peeks at what the
//! client sends first, decides, and then either splices the tunnel or
//! closes it. Every length is checked against what remains before it is
//! used, and everything the reader looks at lies within [`MAX_HELLO`] bytes.
//!
//! Anything that starts like a TLS handshake record (first byte 22) and then
//! deviates is [`Hello::Malformed`], not [`Hello::NotTls`]: a client that
//! means TLS and sends something odd is refused rather than waved through as
//! "some other protocol".

/// The most bytes the proxy reads before deciding: one full-size TLS record
/// (2^14 bytes of payload) and its 5-byte header. Real ClientHellos are far
/// smaller (0.5 to 3 KiB, even with hybrid post-quantum key shares); one
/// that needs more than this, in however many records, is refused.
pub const MAX_HELLO: usize = 16 * 1024 + 5;

/// The largest record payload TLS allows (RFC 8446 §5.1).
const MAX_RECORD: usize = 1 << 14;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST_NAME: u8 = 0;
/// A DNS name is at most 253 characters, 254 with a trailing dot; a little
/// room beyond that costs nothing.
const MAX_HOST_NAME: usize = 255;

/// What the first bytes of a tunnel are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Need more bytes (a prefix of a plausible ClientHello).
    Incomplete,
    /// A complete ClientHello; `sni` is the host_name as sent, if any.
    Tls { sni: Option<String> },
    /// The first bytes are not a TLS handshake record.
    NotTls,
    /// TLS-looking but malformed or oversize: refuse.
    Malformed(&'static str),
}

/// Reads the ClientHello at the start of `buf`: the bytes the client has
/// sent so far. Bytes after the records holding the ClientHello are ignored.
pub fn read_client_hello(buf: &[u8]) -> Hello {
    match reassemble(buf) {
        Ok(Some(msg)) => match parse_client_hello(&msg) {
            Ok(sni) => Hello::Tls { sni },
            Err(why) => Hello::Malformed(why),
        },
        Ok(None) => Hello::Incomplete,
        Err(Stop::NotTls) => Hello::NotTls,
        Err(Stop::Malformed(why)) => Hello::Malformed(why),
    }
}

enum Stop {
    NotTls,
    Malformed(&'static str),
}

/// Gathers the ClientHello handshake message (header and body) from the
/// handshake records at the start of `buf`. `Ok(None)`: a plausible prefix,
/// need more bytes.
fn reassemble(buf: &[u8]) -> Result<Option<Vec<u8>>, Stop> {
    let mut hs: Vec<u8> = Vec::new();
    let mut pos = 0usize;
    loop {
        let first = pos == 0;
        let rest = buf.get(pos..).unwrap_or(&[]);
        // The record header, checked as far as it has arrived.
        match rest.first() {
            None => return Ok(None),
            Some(&CONTENT_HANDSHAKE) => {}
            Some(_) if first => return Err(Stop::NotTls),
            Some(_) => {
                return Err(Stop::Malformed(
                    "ClientHello interrupted by a record that is not a handshake",
                ))
            }
        }
        if let Some(&major) = rest.get(1) {
            if major != 3 {
                return Err(Stop::Malformed("record version is not 3.x"));
            }
        }
        if let Some(&minor) = rest.get(2) {
            if !(1..=4).contains(&minor) {
                return Err(Stop::Malformed("record version outside 3.1 to 3.4"));
            }
        }
        let (Some(&hi), Some(&lo)) = (rest.get(3), rest.get(4)) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if len == 0 {
            return Err(Stop::Malformed("empty handshake record"));
        }
        if len > MAX_RECORD {
            return Err(Stop::Malformed("record longer than 2^14 bytes"));
        }
        let end = pos + 5 + len;
        if end > MAX_HELLO {
            return Err(Stop::Malformed("ClientHello larger than MAX_HELLO"));
        }
        let body = rest.get(5..).unwrap_or(&[]);
        let have = body.len().min(len);
        hs.extend_from_slice(body.get(..have).unwrap_or(&[]));

        // The handshake message header, as far as it has arrived.
        if let Some(&t) = hs.first() {
            if t != HANDSHAKE_CLIENT_HELLO {
                return Err(Stop::Malformed(
                    "first handshake message is not a ClientHello",
                ));
            }
        }
        if let (Some(&a), Some(&b), Some(&c)) = (hs.get(1), hs.get(2), hs.get(3)) {
            let msg_len = (usize::from(a) << 16) | (usize::from(b) << 8) | usize::from(c);
            // At the very least the header of the first record and the
            // message itself must fit.
            if 5 + 4 + msg_len > MAX_HELLO {
                return Err(Stop::Malformed("ClientHello larger than MAX_HELLO"));
            }
            let total = 4 + msg_len;
            if hs.len() >= total {
                if have < len {
                    // Complete before its record has all arrived: the rest
                    // of the record would be more handshake data after the
                    // ClientHello, which a client never sends.
                    return Err(Stop::Malformed("handshake data after the ClientHello"));
                }
                if hs.len() > total {
                    return Err(Stop::Malformed("handshake data after the ClientHello"));
                }
                return Ok(Some(hs));
            }
        }
        if have < len {
            return Ok(None);
        }
        pos = end;
    }
}

/// A cursor over a byte slice that never reads past its end.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], &'static str> {
        let (head, tail) = self.b.split_at_checked(n).ok_or(what)?;
        self.b = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, &'static str> {
        let b = self.take(1, what)?;
        b.first().copied().ok_or(what)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, &'static str> {
        let b = self.take(2, what)?;
        match b {
            [hi, lo] => Ok(u16::from_be_bytes([*hi, *lo])),
            _ => Err(what),
        }
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], &'static str> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], &'static str> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

/// Parses a whole ClientHello handshake message (4-byte header included).
fn parse_client_hello(msg: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader { b: msg };
    let _type_and_length = r.take(4, "truncated handshake header")?;
    let version = r.take(2, "truncated ClientHello version")?;
    if version.first() != Some(&3) {
        return Err("ClientHello version is not 3.x");
    }
    r.take(32, "truncated ClientHello random")?;
    let session_id = r.vec8("truncated session id")?;
    if session_id.len() > 32 {
        return Err("session id longer than 32 bytes");
    }
    let suites = r.vec16("truncated cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("cipher suites empty or of odd length");
    }
    let compression = r.vec8("truncated compression methods")?;
    if compression.is_empty() {
        return Err("no compression methods");
    }
    if r.is_empty() {
        // TLS 1.2 and earlier may omit the extensions block.
        return Ok(None);
    }
    let exts = r.vec16("truncated extensions")?;
    if !r.is_empty() {
        return Err("bytes after the extensions");
    }

    let mut r = Reader { b: exts };
    let mut seen: Vec<u16> = Vec::new();
    let mut sni = None;
    while !r.is_empty() {
        let ty = r.u16("truncated extension type")?;
        let data = r.vec16("truncated extension")?;
        // RFC 8446 §4.2: no extension type may appear twice. Two server_name
        // extensions could be read differently by us and by the server.
        if seen.contains(&ty) {
            return Err("duplicate extension");
        }
        seen.push(ty);
        if ty == EXT_SERVER_NAME {
            sni = Some(parse_server_name(data)?);
        }
    }
    Ok(sni)
}

/// The server_name extension's body (RFC 6066 §3): exactly one host_name.
fn parse_server_name(data: &[u8]) -> Result<String, &'static str> {
    let mut r = Reader { b: data };
    let list = r.vec16("truncated server name list")?;
    if !r.is_empty() {
        return Err("bytes after the server name list");
    }
    if list.is_empty() {
        return Err("empty server name list");
    }
    let mut r = Reader { b: list };
    let mut host = None;
    while !r.is_empty() {
        let name_type = r.u8("truncated server name type")?;
        let name = r.vec16("truncated server name")?;
        if name_type != NAME_TYPE_HOST_NAME {
            // Only host_name is defined; anything else is refused rather than
            // skipped, so that nothing rides alongside the name we check.
            return Err("server name of unknown type");
        }
        if host.is_some() {
            return Err("more than one host_name");
        }
        if name.is_empty() || name.len() > MAX_HOST_NAME {
            return Err("host_name empty or too long");
        }
        // Printable ASCII without the space: every byte of a DNS name (and
        // of anything the proxy could compare with one) is in this range.
        if !name.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err("host_name has bytes outside printable ASCII");
        }
        host = Some(name.iter().map(|&b| char::from(b)).collect::<String>());
    }
    host.ok_or("no host_name")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn u16b(n: usize) -> [u8; 2] {
        u16::try_from(n).unwrap().to_be_bytes()
    }

    fn ext(ty: u16, data: &[u8]) -> Vec<u8> {
        let mut v = ty.to_be_bytes().to_vec();
        v.extend(u16b(data.len()));
        v.extend(data);
        v
    }

    /// A server_name extension with the given (type, name) entries.
    fn sni_ext(entries: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (t, name) in entries {
            list.push(*t);
            list.extend(u16b(name.len()));
            list.extend(*name);
        }
        let mut data = u16b(list.len()).to_vec();
        data.extend(list);
        ext(EXT_SERVER_NAME, &data)
    }

    /// The extensions a current browser sends, around an optional SNI.
    fn browser_exts(sni: Option<&str>) -> Vec<u8> {
        let mut e = Vec::new();
        if let Some(h) = sni {
            e.extend(sni_ext(&[(0, h.as_bytes())]));
        }
        e.extend(ext(0x0017, &[])); // extended_master_secret
        e.extend(ext(0xff01, &[0])); // renegotiation_info
        e.extend(ext(0x000a, &[0, 6, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18])); // supported_groups
        e.extend(ext(0x000b, &[1, 0])); // ec_point_formats
        e.extend(ext(0x0010, b"\x00\x0c\x02h2\x08http/1.1")); // ALPN
        e.extend(ext(0x000d, &[0, 8, 4, 3, 8, 4, 4, 1, 5, 3])); // signature_algorithms
        let mut ks = vec![0, 36, 0x00, 0x1d, 0, 32];
        ks.extend([0x42; 32]);
        e.extend(ext(0x0033, &ks)); // key_share, x25519
        e.extend(ext(0x002d, &[1, 1])); // psk_key_exchange_modes
        e.extend(ext(0x002b, &[4, 3, 4, 3, 3])); // supported_versions
        e
    }

    /// The ClientHello handshake message: header and body.
    fn hello_msg(exts: Option<&[u8]>) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([0x11; 32]); // random
        b.push(32);
        b.extend([0x22; 32]); // session id
        let suites = [0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2b, 0xc0, 0x2f];
        b.extend(u16b(suites.len()));
        b.extend(suites);
        b.extend([1, 0]); // compression: null
        if let Some(e) = exts {
            b.extend(u16b(e.len()));
            b.extend(e);
        }
        let mut m = vec![HANDSHAKE_CLIENT_HELLO];
        m.extend(&u32::try_from(b.len()).unwrap().to_be_bytes()[1..]);
        m.extend(b);
        m
    }

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut r = vec![CONTENT_HANDSHAKE, 3, 1];
        r.extend(u16b(payload.len()));
        r.extend(payload);
        r
    }

    /// The message split into records at the given offsets.
    fn records(msg: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut start = 0;
        for &c in cuts.iter().chain([msg.len()].iter()) {
            out.extend(record(&msg[start..c]));
            start = c;
        }
        out
    }

    fn with_sni(h: &str) -> Vec<u8> {
        record(&hello_msg(Some(&browser_exts(Some(h)))))
    }

    fn tls(sni: Option<&str>) -> Hello {
        Hello::Tls {
            sni: sni.map(String::from),
        }
    }

    #[test]
    fn reads_the_sni() {
        assert_eq!(
            read_client_hello(&with_sni("example.com")),
            tls(Some("example.com"))
        );
        // As sent: no canonicalisation here.
        assert_eq!(
            read_client_hello(&with_sni("Example.COM.")),
            tls(Some("Example.COM."))
        );
    }

    #[test]
    fn without_sni() {
        let b = record(&hello_msg(Some(&browser_exts(None))));
        assert_eq!(read_client_hello(&b), tls(None));
        // No extensions block at all (TLS 1.2 permits it).
        let b = record(&hello_msg(None));
        assert_eq!(read_client_hello(&b), tls(None));
        // An empty extensions block.
        let b = record(&hello_msg(Some(&[])));
        assert_eq!(read_client_hello(&b), tls(None));
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let b = with_sni("example.com");
        for n in 0..b.len() {
            assert_eq!(read_client_hello(&b[..n]), Hello::Incomplete, "prefix {n}");
        }
        assert_eq!(read_client_hello(&b), tls(Some("example.com")));
    }

    #[test]
    fn bytes_after_the_hello_are_ignored() {
        let mut b = with_sni("example.com");
        b.extend([23, 3, 3, 0, 5, 1, 2, 3, 4, 5]);
        assert_eq!(read_client_hello(&b), tls(Some("example.com")));
    }

    #[test]
    fn split_across_two_records_at_every_boundary() {
        let msg = hello_msg(Some(&browser_exts(Some("split.example"))));
        for cut in 1..msg.len() {
            let b = records(&msg, &[cut]);
            assert_eq!(
                read_client_hello(&b),
                tls(Some("split.example")),
                "cut {cut}"
            );
            for n in 0..b.len() {
                assert_eq!(
                    read_client_hello(&b[..n]),
                    Hello::Incomplete,
                    "cut {cut} prefix {n}"
                );
            }
        }
    }

    #[test]
    fn split_across_many_records() {
        let msg = hello_msg(Some(&browser_exts(Some("many.example"))));
        let cuts: Vec<usize> = (1..msg.len()).collect();
        let b = records(&msg, &cuts);
        assert_eq!(read_client_hello(&b), tls(Some("many.example")));
    }

    #[test]
    fn not_tls() {
        assert_eq!(
            read_client_hello(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            Hello::NotTls
        );
        assert_eq!(read_client_hello(b"G"), Hello::NotTls);
        assert_eq!(read_client_hello(b"SSH-2.0-OpenSSH_9.6\r\n"), Hello::NotTls);
        // SSLv2-style ClientHello: two-byte length with the high bit, type 1.
        assert_eq!(
            read_client_hello(&[0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15]),
            Hello::NotTls
        );
        // An alert or application data record first.
        assert_eq!(read_client_hello(&[21, 3, 3, 0, 2, 2, 40]), Hello::NotTls);
        assert_eq!(read_client_hello(&[23, 3, 3, 0, 1, 0]), Hello::NotTls);
        assert_eq!(read_client_hello(&[]), Hello::Incomplete);
    }

    fn malformed(b: &[u8]) -> &'static str {
        match read_client_hello(b) {
            Hello::Malformed(why) => why,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn record_header_checks() {
        // Oversized record: refused from the header alone.
        let mut b = vec![22, 3, 1];
        b.extend(u16b(MAX_RECORD + 1));
        assert_eq!(malformed(&b), "record longer than 2^14 bytes");
        assert_eq!(
            malformed(&[22, 3, 1, 0xff, 0xff]),
            "record longer than 2^14 bytes"
        );
        assert_eq!(malformed(&[22, 3, 1, 0, 0]), "empty handshake record");
        assert_eq!(malformed(&[22, 2]), "record version is not 3.x");
        assert_eq!(malformed(&[22, 3, 0]), "record version outside 3.1 to 3.4");
        assert_eq!(malformed(&[22, 3, 5]), "record version outside 3.1 to 3.4");
        for minor in 1..=4 {
            let mut b = with_sni("v.example");
            b[2] = minor;
            assert_eq!(read_client_hello(&b), tls(Some("v.example")));
        }
        // Not a ClientHello (ServerHello type 2).
        let mut b = with_sni("x.example");
        b[5] = 2;
        assert_eq!(
            malformed(&b),
            "first handshake message is not a ClientHello"
        );
        assert_eq!(
            malformed(&b[..6]),
            "first handshake message is not a ClientHello"
        );
    }

    #[test]
    fn oversize_hello_across_records() {
        // A message length beyond the bound is refused at its header.
        let b = record(&[1, 0x00, 0x40, 0x00]);
        assert_eq!(malformed(&b), "ClientHello larger than MAX_HELLO");
        let b = record(&[1, 0xff, 0xff, 0xff]);
        assert_eq!(malformed(&b), "ClientHello larger than MAX_HELLO");
        // A message just under the bound, in records whose headers push the
        // total past it: refused when the record that would cross arrives.
        let body = 16 * 1024 - 4 - 5;
        let mut msg = vec![1];
        msg.extend(&u32::try_from(body).unwrap().to_be_bytes()[1..]);
        msg.extend(vec![0u8; body]);
        let b = records(&msg, &[100, 200]);
        assert!(b.len() > MAX_HELLO);
        assert_eq!(malformed(&b), "ClientHello larger than MAX_HELLO");
        // Every prefix is either still Incomplete or already refused.
        for n in (0..b.len()).step_by(61).chain(MAX_HELLO - 20..b.len()) {
            assert!(matches!(
                read_client_hello(&b[..n]),
                Hello::Incomplete | Hello::Malformed(_)
            ));
        }
    }

    #[test]
    fn interrupted_by_another_record_type() {
        let msg = hello_msg(Some(&browser_exts(Some("x.example"))));
        let mut b = record(&msg[..50]);
        b.extend([21, 3, 3, 0, 2, 2, 40]);
        assert_eq!(
            malformed(&b),
            "ClientHello interrupted by a record that is not a handshake"
        );
    }

    #[test]
    fn trailing_handshake_data_in_the_record() {
        let mut msg = hello_msg(Some(&browser_exts(Some("x.example"))));
        msg.extend([20, 0, 0, 0]);
        assert_eq!(
            malformed(&record(&msg)),
            "handshake data after the ClientHello"
        );
    }

    #[test]
    fn server_name_checks() {
        let hello = |e: Vec<u8>| record(&hello_msg(Some(&e)));
        let two = sni_ext(&[(0, b"a.example"), (0, b"b.example")]);
        assert_eq!(malformed(&hello(two)), "more than one host_name");
        let mut dup = sni_ext(&[(0, b"a.example")]);
        dup.extend(sni_ext(&[(0, b"b.example")]));
        assert_eq!(malformed(&hello(dup)), "duplicate extension");
        let mut dup = browser_exts(Some("a.example"));
        dup.extend(ext(0x0017, &[]));
        assert_eq!(malformed(&hello(dup)), "duplicate extension");
        for bad in [
            &b"a\x00.example"[..],
            b"a b.example",
            b"caf\xc3\xa9.example",
            b"a\x7f",
            b"\n",
        ] {
            assert_eq!(
                malformed(&hello(sni_ext(&[(0, bad)]))),
                "host_name has bytes outside printable ASCII"
            );
        }
        assert_eq!(
            malformed(&hello(sni_ext(&[(0, b"")]))),
            "host_name empty or too long"
        );
        let long = vec![b'a'; 256];
        assert_eq!(
            malformed(&hello(sni_ext(&[(0, &long)]))),
            "host_name empty or too long"
        );
        let ok = vec![b'a'; 255];
        assert!(matches!(
            read_client_hello(&hello(sni_ext(&[(0, &ok)]))),
            Hello::Tls { sni: Some(_) }
        ));
        assert_eq!(
            malformed(&hello(sni_ext(&[(1, b"a.example")]))),
            "server name of unknown type"
        );
        assert_eq!(malformed(&hello(sni_ext(&[]))), "empty server name list");
        assert_eq!(malformed(&hello(ext(0, &[]))), "truncated server name list");
        // The list length disagrees with the extension length.
        assert_eq!(
            malformed(&hello(ext(0, &[0, 3, 0, 0, 1, b'a', 0]))),
            "bytes after the server name list"
        );
        assert_eq!(
            malformed(&hello(ext(0, &[0, 9, 0, 0, 1, b'a']))),
            "truncated server name list"
        );
        assert_eq!(
            malformed(&hello(ext(0, &[0, 4, 0, 0, 9, b'a']))),
            "truncated server name"
        );
    }

    /// Replaces the body of the ClientHello (after the 4-byte header) and
    /// fixes the lengths.
    fn with_body(body: &[u8]) -> Vec<u8> {
        let mut m = vec![1];
        m.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
        m.extend(body);
        record(&m)
    }

    #[test]
    fn body_checks() {
        let good = hello_msg(Some(&browser_exts(Some("x.example"))));
        let body = &good[4..];
        // Session id length 33.
        let mut b = body.to_vec();
        b[34] = 33;
        assert_eq!(malformed(&with_body(&b)), "session id longer than 32 bytes");
        // Odd cipher suites length.
        let mut b = body[..67].to_vec();
        b.extend([0, 3, 0x13, 0x01, 0x13, 1, 0]);
        assert_eq!(
            malformed(&with_body(&b)),
            "cipher suites empty or of odd length"
        );
        let mut b = body[..67].to_vec();
        b.extend([0, 0, 1, 0]);
        assert_eq!(
            malformed(&with_body(&b)),
            "cipher suites empty or of odd length"
        );
        // No compression methods.
        let mut b = body[..67].to_vec();
        b.extend([0, 2, 0x13, 0x01, 0]);
        assert_eq!(malformed(&with_body(&b)), "no compression methods");
        // Bytes after the extensions block.
        let mut b = body.to_vec();
        b.push(0);
        assert_eq!(malformed(&with_body(&b)), "bytes after the extensions");
        // Version 2.x.
        let mut b = body.to_vec();
        b[0] = 2;
        assert_eq!(malformed(&with_body(&b)), "ClientHello version is not 3.x");
        // Truncated random.
        assert_eq!(
            malformed(&with_body(&body[..20])),
            "truncated ClientHello random"
        );
        assert_eq!(
            malformed(&with_body(&body[..1])),
            "truncated ClientHello version"
        );
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Every prefix, and random byte flips, of real-looking ClientHellos:
    /// never a panic, and a complete well-formed one is never Incomplete.
    #[test]
    fn fuzzish_never_panics() {
        let one = with_sni("fuzz.example");
        let split = records(
            &hello_msg(Some(&browser_exts(Some("fuzz.example")))),
            &[7, 90, 91],
        );
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut calls = 0u64;
        for base in [&one, &split] {
            for n in 0..=base.len() {
                let _ = read_client_hello(&base[..n]);
                calls += 1;
            }
            for round in 0..3000 {
                let mut b = base.clone();
                let flips = 1 + rng.below(4);
                for _ in 0..flips {
                    let i = rng.below(b.len());
                    b[i] = match rng.below(4) {
                        0 => 0,
                        1 => 0xff,
                        2 => b[i] ^ (1 << rng.below(8)),
                        _ => rng.next() as u8,
                    };
                }
                let _ = read_client_hello(&b);
                calls += 1;
                if round % 10 == 0 {
                    for n in 0..b.len() {
                        let _ = read_client_hello(&b[..n]);
                        calls += 1;
                    }
                }
            }
        }
        // Random garbage that starts like a handshake record.
        for _ in 0..3000 {
            let len = rng.below(400);
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if let Some(f) = b.first_mut() {
                *f = 22;
            }
            if b.len() > 2 {
                b[1] = 3;
                b[2] = 1 + rng.below(4) as u8;
            }
            let _ = read_client_hello(&b);
            calls += 1;
        }
        assert!(calls > 10_000);
    }
}
