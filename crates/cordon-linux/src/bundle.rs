//! The sandbox's trust bundle, composed the same wherever it is placed:
//! on the host (the native rungs and the engines, `cordon-backend-kit`)
//! or in a guest (the microvm's agent). The image's own system bundle
//! comes first, then the egress proxy's CA.

use std::path::Path;

use crate::SYSTEM_BUNDLE;

/// The largest system bundle an image may have (Debian's is about
/// 200 KiB); a larger one is refused rather than cut (a cut bundle would
/// end in half a certificate).
pub const MAX_BUNDLE: u64 = 16 << 20;

/// The image's system bundle at `image_root` (resolved inside it: an
/// image's links never reach the host's files), empty when it has none;
/// and whether it is a file at [`SYSTEM_BUNDLE`] itself, reached through
/// no link (what a bind can be made over, at every engine).
pub fn image_bundle(image_root: &Path) -> Result<(Vec<u8>, bool), String> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let rel = SYSTEM_BUNDLE.trim_start_matches('/');
    let root = rustix::fs::open(
        image_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("the image's root `{}`: {e}", image_root.display()))?;
    let open = |flags: ResolveFlags| {
        rustix::fs::openat2(
            &root,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
            flags | ResolveFlags::NO_MAGICLINKS,
        )
    };
    let bytes = match open(ResolveFlags::IN_ROOT) {
        Ok(fd) => {
            let f = std::fs::File::from(fd);
            if !f.metadata().is_ok_and(|m| m.is_file()) {
                return Ok((Vec::new(), false));
            }
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(&f, MAX_BUNDLE + 1), &mut out)
                .map_err(|e| {
                    format!(
                        "cannot read the image's `{SYSTEM_BUNDLE}` (in `{}`): {e}",
                        image_root.display()
                    )
                })?;
            if out.len() as u64 > MAX_BUNDLE {
                return Err(format!(
                    "the image's `{SYSTEM_BUNDLE}` (in `{}`) is larger than {MAX_BUNDLE} bytes; a bundle is not cut",
                    image_root.display()
                ));
            }
            out
        }
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            return Ok((Vec::new(), false))
        }
        Err(e) => {
            return Err(format!(
                "cannot open the image's `{SYSTEM_BUNDLE}` (in `{}`): {e}",
                image_root.display()
            ))
        }
    };
    let direct = open(ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS)
        .ok()
        .map(std::fs::File::from)
        .is_some_and(|f| f.metadata().is_ok_and(|m| m.is_file()));
    Ok((bytes, direct))
}

/// The largest system bundle read (Debian's is about 200 KiB).
/// The sandbox's bundle (`image`, then the CA) and the CA alone, each
/// ending in a newline; refused unless `ca_pem` is a PEM certificate.
pub fn compose(image: &[u8], ca_pem: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err("the egress proxy's CA is not a PEM certificate".into());
    }
    let mut ca = ca_pem.as_bytes().to_vec();
    if !ca.ends_with(b"\n") {
        ca.push(b'\n');
    }
    let mut bundle = image.to_vec();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(&ca);
    Ok((bundle, ca))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_bundle_past_the_cap_is_refused_never_cut() {
        let root = tempfile::tempdir().unwrap();
        let at = root.path().join(SYSTEM_BUNDLE.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        let f = std::fs::File::create(&at).unwrap();
        f.set_len(MAX_BUNDLE).unwrap();
        assert_eq!(
            image_bundle(root.path()).unwrap().0.len() as u64,
            MAX_BUNDLE
        );
        f.set_len(MAX_BUNDLE + 1).unwrap();
        let e = image_bundle(root.path()).unwrap_err();
        assert!(e.contains("larger than") && e.contains("not cut"), "{e}");
    }

    #[test]
    fn the_ca_follows_the_image_s_roots_each_ending_a_line() {
        let ca = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----";
        let (bundle, alone) = compose(b"ROOTS", ca).unwrap();
        assert_eq!(bundle, format!("ROOTS\n{ca}\n").as_bytes());
        assert_eq!(alone, format!("{ca}\n").as_bytes());
        assert_eq!(compose(b"", ca).unwrap().0, alone);
        assert!(compose(b"ROOTS", "not a certificate").is_err());
    }
}
