//! The sandbox's trust of its egress proxy's CA, placed in the guest
//! (`Trust`): a directory of the guest's own, never the workload's,
//! holding the bundle (the image's system bundle, then the CA) and the CA
//! alone, read-only for all. The plan names it as its `trust_dir`;
//! `cordon_linux` binds it read-only at `/run/cordon/trust` in the sandbox
//! and the bundle over the image's system bundle where the image has a
//! file there, as on a host.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

use cordon_linux::TRUST_BUNDLE;
use cordon_vm_proto::TRUST_CA;

/// Makes `dir` (new) with the bundle and the CA alone for `ca_pem`, the
/// bundle beginning with the system bundle of the image at `image_root`.
/// On an error nothing is left at `dir`.
pub(crate) fn place(dir: &Path, image_root: &Path, ca_pem: &str) -> Result<(), String> {
    if !dir.is_absolute()
        || dir
            .components()
            .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
    {
        return Err(format!(
            "the trust directory `{}` is not a plain absolute path",
            dir.display()
        ));
    }
    let (image, _) = cordon_linux::bundle::image_bundle(image_root)?;
    let (bundle, ca) = cordon_linux::bundle::compose(&image, ca_pem)?;
    let shown = dir.display();
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| format!("cannot make `{}`: {e}", parent.display()))?;
    }
    // New: a directory that is there already is not this sandbox's own.
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .map_err(|e| format!("cannot make the trust directory `{shown}`: {e}"))?;
    let filled = (|| {
        for (name, body) in [(TRUST_BUNDLE, &bundle), (TRUST_CA, &ca)] {
            let path = dir.join(name);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| {
                    f.write_all(body)?;
                    f.set_permissions(std::fs::Permissions::from_mode(0o444))
                })
                .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        }
        // Whatever the umask: the sandbox's init opens it as its own uid.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot open `{shown}` to the sandbox: {e}"))
    })();
    if filled.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    filled
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----";

    fn image(bundle: Option<&[u8]>) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        if let Some(b) = bundle {
            std::fs::create_dir_all(root.path().join("etc/ssl/certs")).unwrap();
            std::fs::write(root.path().join("etc/ssl/certs/ca-certificates.crt"), b).unwrap();
        }
        root
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_bundle_is_the_images_then_the_ca_and_all_is_read_only() {
        let img = image(Some(b"IMAGE ROOTS"));
        let at = tempfile::tempdir().unwrap();
        let dir = at.path().join("run/cordon-trust");
        place(&dir, img.path(), CA).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(TRUST_BUNDLE)).unwrap(),
            format!("IMAGE ROOTS\n{CA}\n")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join(TRUST_CA)).unwrap(),
            format!("{CA}\n")
        );
        assert_eq!(
            (
                mode(&dir),
                mode(&dir.join(TRUST_BUNDLE)),
                mode(&dir.join(TRUST_CA))
            ),
            (0o755, 0o444, 0o444)
        );
        // The image's own file is as it was.
        assert_eq!(
            std::fs::read(img.path().join("etc/ssl/certs/ca-certificates.crt")).unwrap(),
            b"IMAGE ROOTS"
        );
    }

    #[test]
    fn an_image_without_a_bundle_gets_the_ca_alone() {
        let img = image(None);
        let at = tempfile::tempdir().unwrap();
        let dir = at.path().join("trust");
        place(&dir, img.path(), CA).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(TRUST_BUNDLE)).unwrap(),
            format!("{CA}\n")
        );
    }

    #[test]
    fn an_images_link_resolves_inside_it() {
        let img = image(None);
        std::fs::create_dir_all(img.path().join("etc/ssl/certs")).unwrap();
        std::fs::create_dir_all(img.path().join("etc/pki")).unwrap();
        std::fs::write(img.path().join("etc/pki/roots.pem"), b"LINKED\n").unwrap();
        std::os::unix::fs::symlink(
            "/etc/pki/roots.pem",
            img.path().join("etc/ssl/certs/ca-certificates.crt"),
        )
        .unwrap();
        assert_eq!(
            cordon_linux::bundle::image_bundle(img.path()).unwrap().0,
            b"LINKED\n"
        );
        // An absolute link out of the image reaches nothing outside it.
        let out = image(None);
        std::fs::create_dir_all(out.path().join("etc/ssl/certs")).unwrap();
        std::os::unix::fs::symlink(
            "/etc/hostname",
            out.path().join("etc/ssl/certs/ca-certificates.crt"),
        )
        .unwrap();
        assert_eq!(
            cordon_linux::bundle::image_bundle(out.path()).unwrap().0,
            b""
        );
    }

    #[test]
    fn what_cannot_be_placed_is_said_and_leaves_nothing() {
        let img = image(Some(b"R\n"));
        let at = tempfile::tempdir().unwrap();
        let dir = at.path().join("trust");
        let e = place(&dir, img.path(), "not a certificate").unwrap_err();
        assert!(e.contains("PEM"), "{e}");
        assert!(!dir.exists());
        let e = place(Path::new("relative/trust"), img.path(), CA).unwrap_err();
        assert!(e.contains("absolute"), "{e}");
        let e = place(&at.path().join("a/../trust"), img.path(), CA).unwrap_err();
        assert!(e.contains("plain"), "{e}");
        let e = place(&dir, Path::new("/nonexistent/image"), CA).unwrap_err();
        assert!(e.contains("/nonexistent/image"), "{e}");
        assert!(!dir.exists());
        // A directory already there is not made again, nor written in.
        std::fs::create_dir(&dir).unwrap();
        let e = place(&dir, img.path(), CA).unwrap_err();
        assert!(e.contains("trust directory"), "{e}");
    }
}
