//! The spec loader (see `cordon_sandbox::fuzz`) and the host
//! configuration's (`cordon_host::config::fuzz_load`), on the same bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cordon_host::config::fuzz_load(data);
    cordon_sandbox::fuzz::load_spec(data)
});
