//! The init's frames (see `cordon_linux::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_linux::fuzz::init_frames(data));
