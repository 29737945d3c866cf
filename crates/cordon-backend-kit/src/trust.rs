//! How a sandbox trusts the certificate authority its egress proxy signs
//! inspected hosts' leaves with (the per-sandbox CA a served channel
//! returns when the policy inspects some host), without the workload
//! doing anything.
//!
//! The sandbox gets a directory of its own, bound read-only at
//! [`TRUST_AT`], holding its bundle ([`BUNDLE_AT`]: the image's own system
//! bundle, then the CA) and the CA alone ([`CA_AT`]). Where the image has
//! a system bundle at [`SYSTEM_BUNDLE`] (a file, reached through no link),
//! the sandbox's bundle is also bound read-only over it, so tools that
//! read only the system path (`curl`, Python's `ssl`, `openssl`) trust the
//! CA too; the image's own file is never written. The variables
//! [`egress_env`] sets name the files under [`TRUST_AT`], which are there
//! whatever the image holds.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use cordon_linux::{SYSTEM_BUNDLE, TRUST_AT};

/// The sandbox's bundle: the image's system bundle, then the CA.
pub const BUNDLE_AT: &str = "/run/cordon/trust/ca-certificates.crt";
/// The sandbox's CA alone.
pub const CA_AT: &str = "/run/cordon/trust/egress-ca.pem";

const BUNDLE: &str = cordon_linux::TRUST_BUNDLE;
const CA: &str = "egress-ca.pem";

/// A sandbox's trust directory on the host (in its own directory, removed
/// with it).
#[derive(Debug, Clone)]
pub struct Trust {
    dir: PathBuf,
    /// The image's system bundle, as the sandbox's bundle begins.
    image_bundle: Vec<u8>,
    /// Whether the image has a file at [`SYSTEM_BUNDLE`] (through no
    /// link) for the bundle to be bound over.
    over_system: bool,
    filled: bool,
}

impl Trust {
    /// Makes the directory `dir` (0755) with an empty bundle and CA file
    /// (0600, cordon's), read from the image at `image_root` (`/` for the
    /// `host` image). For an engine whose binds are fixed before the
    /// sandbox's channel is served (the container rung's warm sandbox):
    /// the files are bound now and [`Trust::fill`]ed in place once the CA
    /// is known. Nothing is readable in the sandbox before then: it runs
    /// nothing until its acquire returns.
    pub fn prepare(dir: &Path, image_root: &Path) -> Result<Trust, String> {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        Trust::prepare_in(dir, image_root)
    }

    /// [`Trust::prepare`] in `dir`, a new empty directory the caller made
    /// for this sandbox (and removes with it), which it leaves
    /// traversable by all (it holds only certificates): an engine's init
    /// opens the files there as the sandbox's own uid.
    pub fn prepare_in(dir: &Path, image_root: &Path) -> Result<Trust, String> {
        let (image_bundle, over_system) = image_bundle(image_root)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot open `{}` to the sandbox: {e}", dir.display()))?;
        for name in [BUNDLE, CA] {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dir.join(name))
                .map_err(|e| format!("cannot create `{}`: {e}", dir.join(name).display()))?;
        }
        Ok(Trust {
            dir: dir.to_path_buf(),
            image_bundle,
            over_system,
            filled: false,
        })
    }

    /// [`Trust::prepare`] and [`Trust::fill`]: the sandbox's trust of
    /// `ca_pem`, ready to bind.
    pub fn make(dir: &Path, image_root: &Path, ca_pem: &str) -> Result<Trust, String> {
        let mut t = Trust::prepare(dir, image_root)?;
        t.fill(ca_pem)?;
        Ok(t)
    }

    /// Writes the bundle (the image's, then `ca_pem`) and the CA alone into
    /// the files made (in place: a bind of them made before shows them),
    /// then makes them read-only for everyone (0444).
    pub fn fill(&mut self, ca_pem: &str) -> Result<(), String> {
        let (bundle, ca) = cordon_linux::bundle::compose(&self.image_bundle, ca_pem)?;
        for (name, body) in [(BUNDLE, &bundle), (CA, &ca)] {
            let path = self.dir.join(name);
            let written = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&path)
                .and_then(|mut f| {
                    f.write_all(body)?;
                    f.sync_all()?;
                    f.set_permissions(std::fs::Permissions::from_mode(0o444))
                });
            written.map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        }
        self.filled = true;
        Ok(())
    }

    /// Whether [`Trust::fill`] wrote the CA in.
    pub fn filled(&self) -> bool {
        self.filled
    }

    /// The directory on the host, bound at [`TRUST_AT`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bundle on the host.
    pub fn bundle(&self) -> PathBuf {
        self.dir.join(BUNDLE)
    }

    /// The CA alone on the host.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(CA)
    }

    /// Whether the bundle is bound over the image's [`SYSTEM_BUNDLE`].
    pub fn over_system(&self) -> bool {
        self.over_system
    }

    /// What the sandbox binds read-only, in order: (host source, path in
    /// the sandbox, whether a directory).
    pub fn binds(&self) -> Vec<(PathBuf, &'static str, bool)> {
        let mut b = vec![(self.dir.clone(), TRUST_AT, true)];
        if self.over_system {
            b.push((self.bundle(), SYSTEM_BUNDLE, false));
        }
        b
    }
}

pub use cordon_linux::bundle::image_bundle;

/// The variables a sandbox's execs get for its route out, before the
/// request's own: the proxy's (`HTTP_PROXY`, `HTTPS_PROXY` and their
/// lowercase forms) when it has a route (`proxy_port`), for the
/// workload's convenience only (the boundary is its network namespace,
/// whose one route is the proxy's listener); and, when it trusts an
/// egress CA, the bundle for the tools that read a variable
/// (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`, `PIP_CERT`)
/// and the CA alone for Node (`NODE_EXTRA_CA_CERTS`, added to its own
/// roots).
pub fn egress_env(proxy_port: Option<u16>, trusts_ca: bool) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if let Some(port) = proxy_port {
        let url = format!("http://127.0.0.1:{port}");
        for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.insert(k.to_string(), url.clone());
        }
    }
    if trusts_ca {
        for k in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "PIP_CERT",
        ] {
            env.insert(k.to_string(), BUNDLE_AT.to_string());
        }
        env.insert("NODE_EXTRA_CA_CERTS".to_string(), CA_AT.to_string());
    }
    env
}

/// Why an acquire is refused when its CA cannot be placed: the proxy
/// would inspect, and the workload would fail every inspected host's TLS.
pub fn unplaced(why: impl std::fmt::Display) -> String {
    format!("the policy has the egress proxy inspect TLS, but the sandbox's CA could not be placed for it to trust ({why}); the sandbox is not run without it: fix that, or drop `egress.inspect` from the policy")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nTUlJQ0ZBS0U=\n-----END CERTIFICATE-----\n";

    fn image_with(bundle: Option<&[u8]>) -> tempfile::TempDir {
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
    fn the_bundle_is_the_images_then_the_ca_and_the_images_is_unchanged() {
        let image = image_with(Some(b"IMAGE ROOTS"));
        let sb = tempfile::tempdir().unwrap();
        let t = Trust::make(&sb.path().join("trust"), image.path(), CA_PEM).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.bundle()).unwrap(),
            format!("IMAGE ROOTS\n{CA_PEM}")
        );
        assert_eq!(std::fs::read_to_string(t.ca()).unwrap(), CA_PEM);
        assert_eq!(
            std::fs::read(image.path().join("etc/ssl/certs/ca-certificates.crt")).unwrap(),
            b"IMAGE ROOTS"
        );
        assert_eq!(
            (mode(t.dir()), mode(&t.bundle()), mode(&t.ca())),
            (0o755, 0o444, 0o444)
        );
        assert!(t.over_system() && t.filled());
        let binds = t.binds();
        assert_eq!(binds[0], (t.dir().to_path_buf(), TRUST_AT, true));
        assert_eq!(binds[1], (t.bundle(), SYSTEM_BUNDLE, false));
    }

    #[test]
    fn an_image_without_a_bundle_gets_the_ca_alone_and_no_bind_over_its_system_path() {
        let image = image_with(None);
        let sb = tempfile::tempdir().unwrap();
        let t = Trust::make(&sb.path().join("trust"), image.path(), CA_PEM).unwrap();
        assert_eq!(std::fs::read_to_string(t.bundle()).unwrap(), CA_PEM);
        assert!(!t.over_system());
        assert_eq!(t.binds().len(), 1);
    }

    #[test]
    fn an_images_link_resolves_inside_it_and_is_not_bound_over() {
        let image = image_with(None);
        std::fs::create_dir_all(image.path().join("etc/ssl/certs")).unwrap();
        std::fs::create_dir_all(image.path().join("etc/pki")).unwrap();
        std::fs::write(image.path().join("etc/pki/bundle.crt"), b"LINKED").unwrap();
        std::os::unix::fs::symlink(
            "/etc/pki/bundle.crt",
            image.path().join("etc/ssl/certs/ca-certificates.crt"),
        )
        .unwrap();
        let (bytes, direct) = image_bundle(image.path()).unwrap();
        assert_eq!((bytes.as_slice(), direct), (&b"LINKED"[..], false));
        // An absolute link out of the image reaches nothing of the host's.
        let out = image_with(None);
        std::fs::create_dir_all(out.path().join("etc/ssl/certs")).unwrap();
        std::os::unix::fs::symlink(
            "/etc/hostname",
            out.path().join("etc/ssl/certs/ca-certificates.crt"),
        )
        .unwrap();
        assert_eq!(image_bundle(out.path()).unwrap(), (Vec::new(), false));
    }

    #[test]
    fn the_paths_agree_with_the_container_rungs() {
        assert_eq!(BUNDLE_AT, format!("{TRUST_AT}/{BUNDLE}"));
        assert_eq!(CA_AT, format!("{TRUST_AT}/{CA}"));
    }

    #[test]
    fn prepared_files_are_filled_in_place() {
        use std::os::unix::fs::MetadataExt;
        let image = image_with(Some(b"R\n"));
        let sb = tempfile::tempdir().unwrap();
        let mut t = Trust::prepare(&sb.path().join("trust"), image.path()).unwrap();
        let ino = std::fs::metadata(t.bundle()).unwrap().ino();
        assert_eq!(
            (mode(&t.bundle()), std::fs::read(t.bundle()).unwrap().len()),
            (0o600, 0)
        );
        assert!(t.fill("not a certificate").is_err());
        t.fill(CA_PEM).unwrap();
        assert_eq!(std::fs::metadata(t.bundle()).unwrap().ino(), ino);
        assert_eq!(
            std::fs::read_to_string(t.bundle()).unwrap(),
            format!("R\n{CA_PEM}")
        );
        assert_eq!(mode(&t.bundle()), 0o444);
    }

    #[test]
    fn a_trust_directory_that_cannot_be_made_is_said() {
        let image = image_with(None);
        let e = Trust::make(Path::new("/nonexistent/x/trust"), image.path(), CA_PEM).unwrap_err();
        assert!(e.contains("/nonexistent/x/trust"), "{e}");
        assert!(unplaced(e).contains("egress.inspect"));
    }

    #[test]
    fn the_env_names_the_bundle_and_the_ca_only_with_a_ca() {
        let none = egress_env(Some(3128), false);
        assert_eq!(none["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(none.len(), 4);
        let ca = egress_env(Some(3128), true);
        for k in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "PIP_CERT",
        ] {
            assert_eq!(ca[k], BUNDLE_AT);
        }
        assert_eq!(ca["NODE_EXTRA_CA_CERTS"], CA_AT);
        assert!(egress_env(None, false).is_empty());
    }
}
