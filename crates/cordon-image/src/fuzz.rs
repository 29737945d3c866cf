//! The body of the `image_import` fuzz target (`fuzz/`), here so the corpus
//! is also replayed by `cargo test`. Not API.
//!
//! Whatever the bytes, taken as a tar archive (a root tree, an OCI image
//! layout, a `docker save` archive) and imported into a store of the
//! fuzzer's own: the import ends in an image or an error, never a panic or
//! a hang, and nothing is written outside the store (a sentinel directory
//! beside it stays empty). An imported image is removed again, so the
//! store stays small.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::ImageStore;

struct Place {
    store: ImageStore,
    input: PathBuf,
    sentinel: PathBuf,
}

fn place() -> &'static Place {
    static PLACE: OnceLock<Place> = OnceLock::new();
    PLACE.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("cordon-fuzz-image-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let sentinel = base.join("sentinel");
        std::fs::create_dir_all(&sentinel).unwrap_or_else(|e| panic!("{e}"));
        let store =
            ImageStore::open(&base.join("store")).unwrap_or_else(|e| panic!("the store: {e}"));
        Place {
            store,
            input: base.join("input.tar"),
            sentinel,
        }
    })
}

pub fn fuzz_import(data: &[u8]) {
    let p = place();
    if std::fs::write(&p.input, data).is_err() {
        return;
    }
    if p.store.import("fuzzed", &p.input, &mut |_| {}).is_ok() {
        let _ = p.store.rm("fuzzed");
    }
    let outside = std::fs::read_dir(&p.sentinel).map_or(0, |d| d.count());
    assert_eq!(outside, 0, "an import wrote beside the store");
    // What a failed import left in the store's staging area goes too.
    let _ = p.store.gc();
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/image_import` (seeds: an OCI layout
    /// and a `docker save` archive that import, and hostile variants) runs
    /// through the target's body here too.
    #[test]
    fn the_image_import_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/image_import");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::fuzz_import(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    /// The `seed-ok-*` seeds import (a seed that stopped importing would
    /// keep the fuzzer at the door).
    #[test]
    fn the_good_seeds_import() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/image_import");
        let store_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = crate::ImageStore::open(&store_dir.path().join("store"))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if !path
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("seed-ok-"))
            {
                continue;
            }
            let input = store_dir.path().join("in.tar");
            std::fs::copy(&path, &input).unwrap_or_else(|e| panic!("{e}"));
            store
                .import("seed", &input, &mut |_| {})
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
        assert!(n >= 2, "fewer than two good seeds in {}", dir.display());
    }
}
