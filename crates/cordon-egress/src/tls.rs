//! The proxy's side of TLS toward an inspected host's upstream: always
//! verified, against this machine's roots (read before the proxy confines
//! itself) plus, for an entry that names them, the root layer's own roots
//! for that host alone. There is no switch that skips verification.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;

/// The ALPN names the interceptor speaks.
pub const H2: &[u8] = b"h2";
pub const HTTP11: &[u8] = b"http/1.1";

/// The crypto the interceptor uses on both sides: `ring`'s (deprecated
/// by rustls only for lacking post-quantum key exchange, which `ring`
/// does not offer; the server side uses the same).
#[allow(deprecated)]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config's key: the entry's own roots (PEM), whether h2 is
/// offered.
type ConfigKey = (Option<String>, bool);

/// This machine's trust roots, as read (DER), and the client configs
/// built from them.
pub struct Upstreams {
    system: Vec<CertificateDer<'static>>,
    /// Why none were read, if none were.
    missing: Option<String>,
    store: OnceLock<Arc<RootCertStore>>,
    /// By (the entry's own roots, if any; whether h2 is offered).
    configs: Mutex<HashMap<ConfigKey, Arc<ClientConfig>>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("system_roots", &self.system.len())
            .finish_non_exhaustive()
    }
}

impl Upstreams {
    /// Reads this machine's roots (the platform's bundle; `SSL_CERT_FILE`
    /// or `SSL_CERT_DIR` of the proxy's own environment when set).
    pub fn load() -> Upstreams {
        let found = rustls_native_certs::load_native_certs();
        let missing = if found.certs.is_empty() {
            Some(if found.errors.is_empty() {
                "no trust roots were found on this machine (install `ca-certificates`)".to_string()
            } else {
                format!(
                    "this machine's trust roots could not be read ({}); install `ca-certificates`",
                    found
                        .errors
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })
        } else {
            None
        };
        Upstreams::with_roots(found.certs, missing)
    }

    /// Roots given (for tests, and a host with roots of its own).
    pub fn with_roots(system: Vec<CertificateDer<'static>>, missing: Option<String>) -> Upstreams {
        Upstreams {
            system,
            missing,
            store: OnceLock::new(),
            configs: Mutex::new(HashMap::new()),
        }
    }

    fn system_store(&self) -> Arc<RootCertStore> {
        self.store
            .get_or_init(|| {
                let mut s = RootCertStore::empty();
                let _ = s.add_parsable_certificates(self.system.iter().cloned());
                Arc::new(s)
            })
            .clone()
    }

    /// The verifying client config for an upstream: the machine's roots
    /// and `extra` (PEM, the entry's own), offering h2 only when `h2`.
    pub fn client(&self, extra: Option<&str>, h2: bool) -> Result<Arc<ClientConfig>, String> {
        let key = (extra.map(str::to_string), h2);
        let mut configs = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = configs.get(&key) {
            return Ok(c.clone());
        }
        let mut store = (*self.system_store()).clone();
        if let Some(pem) = extra {
            let mut n = 0;
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let c = c.map_err(|e| format!("the policy's roots for this host: {e}"))?;
                store
                    .add(c)
                    .map_err(|e| format!("the policy's roots for this host: {e}"))?;
                n += 1;
            }
            if n == 0 {
                return Err("the policy's roots for this host hold no certificate".into());
            }
        }
        if store.is_empty() {
            return Err(self
                .missing
                .clone()
                .unwrap_or_else(|| "no trust roots to verify the upstream with".into()));
        }
        let mut c = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS client: {e}"))?
            .with_root_certificates(store)
            .with_no_client_auth();
        c.alpn_protocols = if h2 {
            vec![H2.to_vec(), HTTP11.to_vec()]
        } else {
            vec![HTTP11.to_vec()]
        };
        let c = Arc::new(c);
        configs.insert(key, c.clone());
        Ok(c)
    }
}
