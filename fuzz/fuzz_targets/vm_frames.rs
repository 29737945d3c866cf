//! The microvm channel's frames (see `cordon_vm_proto::fuzz_decode`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_vm_proto::fuzz_decode(data));
