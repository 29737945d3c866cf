//! The requests inside an inspected tunnel, HTTP/1.1 and HTTP/2 (see
//! `cordon_egress::fuzz::egress_inspected`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cordon_egress::fuzz::egress_inspected(data);
});
