//! The policy loader, with layers (see `cordon_policy::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_policy::fuzz::load_policy(data));
