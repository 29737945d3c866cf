//! The CI image: minimal Debian with python3 (hence perl and its other
//! name), built with debootstrap once per machine and cached.

use std::path::PathBuf;

use crate::Cordon;

/// The store the CI image is cached in, across runs.
pub const CI_STORE: &str = "/var/cache/cordon-ci-images";
/// The CI image's name in [`CI_STORE`].
pub const CI_IMAGE: &str = "ci-bookworm-python3";

/// The CI image's store and name, built by `cordon` if the store lacks it.
pub fn ci_image(cordon: &Cordon) -> (PathBuf, &'static str) {
    let store = PathBuf::from(CI_STORE);
    if !store
        .join("names")
        .join(format!("{CI_IMAGE}.json"))
        .exists()
    {
        let (code, _, err) = cordon.clone().env("CORDON_IMAGE_STORE", &store).run([
            "image",
            "build",
            CI_IMAGE,
            "--debootstrap",
            "--include",
            "python3",
        ]);
        assert_eq!(code, 0, "building the CI image: {err}");
    }
    (store, CI_IMAGE)
}
