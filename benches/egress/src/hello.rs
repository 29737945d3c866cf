//! A hand-built TLS ClientHello record, and just enough of its parsing for the
//! upstream to learn what the client asked of it.
//!
//! The record is syntactically valid TLS (record type 22, legacy version
//! 0x0301, handshake type 1, client_version 0x0303, 32 random bytes, empty
//! session id, one cipher suite, the null compression, and one extension:
//! server_name with a host_name entry), so a proxy that checks the first bytes
//! of a tunnel to 443 for a ClientHello whose SNI equals the CONNECT host
//! accepts it. No TLS handshake follows: the upstream only reads the record.
//!
//! The 32 "random" bytes carry the request to the upstream: the magic
//! [`MAGIC`] followed by a big-endian u64 byte count means "stream that many
//! bytes"; anything else means "answer with one short record".

/// Marks a ClientHello random as carrying a byte count for the upstream.
pub const MAGIC: &[u8; 8] = b"EGRBULK1";

/// What the upstream should answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// One short record (the tunnel-setup figure).
    Short,
    /// This many bytes (the bulk figure).
    Bulk(u64),
}

/// The full record (5-byte header included) for `sni`, asking `ask`.
pub fn client_hello(sni: &str, ask: Ask) -> Vec<u8> {
    let mut random = [0u8; 32];
    for b in random.iter_mut() {
        *b = fastrand::u8(..);
    }
    if let Ask::Bulk(n) = ask {
        random[..8].copy_from_slice(MAGIC);
        random[8..16].copy_from_slice(&n.to_be_bytes());
    }
    let host = sni.as_bytes();
    let host_len = u16::try_from(host.len()).expect("SNI fits in u16");

    // server_name extension (RFC 6066 section 3).
    let mut sni_ext = Vec::new();
    sni_ext.extend_from_slice(&(host_len + 3).to_be_bytes()); // server_name_list length
    sni_ext.push(0); // name_type host_name
    sni_ext.extend_from_slice(&host_len.to_be_bytes());
    sni_ext.extend_from_slice(host);

    let mut exts = Vec::new();
    exts.extend_from_slice(&0u16.to_be_bytes()); // extension type server_name
    exts.extend_from_slice(&(sni_ext.len() as u16).to_be_bytes());
    exts.extend_from_slice(&sni_ext);

    let mut body = Vec::new();
    body.extend_from_slice(&[0x03, 0x03]); // client_version TLS 1.2
    body.extend_from_slice(&random);
    body.push(0); // session id: empty
    body.extend_from_slice(&2u16.to_be_bytes()); // cipher suites: one
    body.extend_from_slice(&[0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.push(1); // compression methods: one
    body.push(0); // null
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);

    let mut hs = Vec::new();
    hs.push(1); // handshake type client_hello
    let n = body.len() as u32;
    hs.extend_from_slice(&n.to_be_bytes()[1..]); // u24 length
    hs.extend_from_slice(&body);

    let mut rec = Vec::new();
    rec.push(22); // handshake
    rec.extend_from_slice(&[0x03, 0x01]);
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// Reads a handshake record's payload (after the 5-byte header) as a
/// ClientHello and returns what it asks, or why it is not one.
pub fn parse_ask(payload: &[u8]) -> Result<Ask, &'static str> {
    // handshake type (1) + u24 length (3) + client_version (2) + random (32)
    if payload.len() < 38 {
        return Err("short ClientHello");
    }
    if payload[0] != 1 {
        return Err("not a ClientHello");
    }
    let random = &payload[6..38];
    if &random[..8] == MAGIC {
        let mut n = [0u8; 8];
        n.copy_from_slice(&random[8..16]);
        Ok(Ask::Bulk(u64::from_be_bytes(n)))
    } else {
        Ok(Ask::Short)
    }
}

/// The SNI host name in a record produced by [`client_hello`] (for the
/// self-check only: it assumes the layout written above).
#[cfg(test)]
fn sni_of(rec: &[u8]) -> Option<&str> {
    let body = &rec[9..];
    let mut i = 2 + 32;
    i += 1 + body[i] as usize;
    let cs = u16::from_be_bytes([body[i], body[i + 1]]) as usize;
    i += 2 + cs;
    i += 1 + body[i] as usize;
    i += 2; // extensions length
    i += 4; // type + length
    i += 3; // list length + name type
    let l = u16::from_be_bytes([body[i], body[i + 1]]) as usize;
    std::str::from_utf8(&body[i + 2..i + 2 + l]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lengths_agree_and_sni_reads_back() {
        let r = client_hello("bench.test", Ask::Short);
        assert_eq!(r[0], 22);
        assert_eq!(&r[1..3], &[3, 1]);
        let rec_len = u16::from_be_bytes([r[3], r[4]]) as usize;
        assert_eq!(rec_len, r.len() - 5);
        let hs_len = u32::from_be_bytes([0, r[6], r[7], r[8]]) as usize;
        assert_eq!(hs_len, r.len() - 9);
        assert_eq!(sni_of(&r), Some("bench.test"));
        assert_eq!(parse_ask(&r[5..]), Ok(Ask::Short));
        let b = client_hello("127.0.0.1", Ask::Bulk(1 << 28));
        assert_eq!(parse_ask(&b[5..]), Ok(Ask::Bulk(1 << 28)));
    }
}
