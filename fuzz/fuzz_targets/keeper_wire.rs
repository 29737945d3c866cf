//! The keeper's frames (see `cordon_host::keeper::wire::fuzz_frames`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_host::keeper::wire::fuzz_frames(data));
