//! HTTPS for `cordon serve`, and mutual TLS: the server's certificate from
//! PEM files; with a client CA, every connection must present a client
//! certificate chaining to it, and a credential may be bound to one
//! certificate (its DER's SHA-256) so that its token alone is not enough.

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest as _;

use crate::config::Tls;

/// The client certificate a connection presented (the SHA-256 of its DER),
/// put in every request's extensions by the TLS listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCert(pub Option<[u8; 32]>);

fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("`tls.{what}` `{}`: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("`tls.{what}` `{}`: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "`tls.{what}` `{}` holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// The acceptor for `tls`, or why the files do not make one (said at
/// start, never at the first connection).
#[expect(
    deprecated,
    reason = "ring lacks the post-quantum key exchange; aws-lc-rs has it but needs cmake and a C toolchain to build, and the machines cordon targets build from Debian's packages alone"
)]
pub fn acceptor(tls: &Tls) -> Result<tokio_rustls::TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&tls.cert, "cert")?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| format!("`tls.key` `{}`: {e}", tls.key.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca, "client_ca")? {
                roots
                    .add(c)
                    .map_err(|e| format!("`tls.client_ca` `{}`: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("`tls.client_ca` `{}`: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("`tls.cert` and `tls.key` do not make a server identity: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The SHA-256 of a certificate's DER.
pub fn fingerprint(cert: &CertificateDer<'_>) -> [u8; 32] {
    sha2::Sha256::digest(cert.as_ref()).into()
}
