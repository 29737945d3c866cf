//! The body of the `load_spec` fuzz target (`fuzz/`), here so the corpus
//! can also be replayed by `cargo test` (`tests/fuzz_corpus.rs`). Not API.
//!
//! Whatever the bytes, a spec either loads or is refused with an error; a
//! spec that loads has a canonical wire form that loads back to the same
//! spec, with the same fingerprint. (The host configuration's loader reads
//! the same bytes in the same target: `cordon_host::config::fuzz_load`.)

use crate::spec::SandboxSpec;

/// Runs one input; panics only on a finding.
pub fn load_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = SandboxSpec::from_yaml("fuzz.yaml", text) else {
        return;
    };
    let wire = spec.to_canonical_json();
    let back = match SandboxSpec::from_wire(&wire) {
        Ok(back) => back,
        Err(e) => panic!("a loaded spec's wire form is refused: {e}\n{wire}"),
    };
    assert_eq!(back, spec, "the wire form does not load back to the spec");
    assert_eq!(back.fingerprint(), spec.fingerprint());
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/load_spec` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_load_spec_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/load_spec");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::load_spec(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
