//! The spec loader (see `cordon_sandbox::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_sandbox::fuzz::load_spec(data));
