//! The egress proxy's ClientHello reader (see `cordon_egress::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_egress::fuzz::egress_sni(data));
