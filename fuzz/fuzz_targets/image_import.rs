//! Image import: bytes as a tar archive (root tree, OCI layout, `docker
//! save`) into a store of the fuzzer's own (see
//! `cordon_image::fuzz::fuzz_import`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_image::fuzz::fuzz_import(data));
