//! The egress proxy's target parser (see `cordon_egress::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_egress::fuzz::egress_target(data));
