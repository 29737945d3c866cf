//! A sandbox's own certificate authority, for the hosts the policy has
//! the proxy inspect.
//!
//! One per served channel (one sandbox): its key is made in the proxy's
//! process when the channel is served, lives only in that process's
//! memory, and is gone when the channel stops; no two sandboxes share
//! one. Only its certificate leaves (the sandbox trusts it). It is valid
//! for [`CA_VALIDITY`] from an hour before it was made, and is
//! name-constrained to the inspected hosts, so even its key could not
//! vouch for any other name to a client that honours name constraints.
//!
//! Leaf certificates, one per inspected host a workload opens, are made
//! on first use and kept for the channel's life.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// How long a sandbox's authority (and every leaf it signs) is valid.
/// A kept sandbox living longer gets its channel served again (a new
/// authority) when it is resumed; one that runs past it sees its TLS
/// fail, visibly.
pub const CA_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// Leaves a channel keeps; a workload naming more inspected hosts than
/// this (only possible under a wildcard entry) gets fresh ones made.
const MAX_LEAVES: usize = 256;

/// A sandbox's authority and the leaves it has signed.
pub struct SandboxCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for SandboxCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SandboxCa").finish_non_exhaustive()
    }
}

fn at(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

impl SandboxCa {
    /// A fresh authority for `sandbox` (named in its subject, for whoever
    /// looks at the bundle), constrained to `hosts` (inspection entries:
    /// `name` or `*.suffix`).
    pub fn new(sandbox: &str, hosts: &[String]) -> Result<SandboxCa, String> {
        let key = KeyPair::generate().map_err(|e| format!("making the sandbox's CA key: {e}"))?;
        let now = SystemTime::now();
        let not_before = at(now - Duration::from_secs(3600));
        let not_after = at(now + CA_VALIDITY);
        let mut p = CertificateParams::default();
        p.not_before = not_before;
        p.not_after = not_after;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "cordon");
        let shown: String = sandbox
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || "-_.:".contains(*c))
            .take(40)
            .collect();
        dn.push(
            DnType::CommonName,
            format!("cordon egress CA for sandbox {shown}"),
        );
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()?));
        let permitted: Vec<GeneralSubtree> = hosts
            .iter()
            .map(|h| GeneralSubtree::DnsName(h.trim_start_matches("*.").to_string()))
            .collect();
        if !permitted.is_empty() {
            p.name_constraints = Some(NameConstraints {
                permitted_subtrees: permitted,
                excluded_subtrees: Vec::new(),
            });
        }
        let cert = p
            .self_signed(&key)
            .map_err(|e| format!("making the sandbox's CA certificate: {e}"))?;
        Ok(SandboxCa {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
            not_before,
            not_after,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The authority's certificate, PEM: what the sandbox trusts.
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// The leaf for `host` (a canonical name), made on first use.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = leaves.get(host) {
            return Ok(k.clone());
        }
        let made = Arc::new(self.make_leaf(host)?);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_string(), made.clone());
        Ok(made)
    }

    fn make_leaf(&self, host: &str) -> Result<CertifiedKey, String> {
        let key = KeyPair::generate().map_err(|e| format!("making a leaf key: {e}"))?;
        let mut p = CertificateParams::default();
        p.not_before = self.not_before;
        p.not_after = self.not_after;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        p.distinguished_name = dn;
        p.subject_alt_names =
            vec![SanType::DnsName(host.try_into().map_err(|e| {
                format!("`{host}` cannot be a certificate's name: {e}")
            })?)];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()?));
        let cert = p
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("signing the leaf for `{host}`: {e}"))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| format!("loading the leaf key for `{host}`: {e}"))?;
        Ok(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            signing,
        ))
    }
}

/// A positive 16-byte serial from the system's randomness.
fn random_serial() -> Result<[u8; 16], String> {
    let mut b = [0u8; 16];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(16) => {}
        Ok(n) => {
            return Err(format!(
                "the system gave {n} random bytes of 16 for a serial"
            ))
        }
        Err(e) => return Err(format!("the system's randomness: {e}")),
    }
    b[0] &= 0x7f;
    b[0] |= 0x01;
    Ok(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn two_sandboxes_never_share_an_authority_and_leaves_are_kept() {
        let a = SandboxCa::new("a", &["api.example.com".into()]).unwrap();
        let b = SandboxCa::new("b", &["api.example.com".into()]).unwrap();
        assert_ne!(a.cert_pem(), b.cert_pem());
        assert!(a.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let l1 = a.leaf("api.example.com").unwrap();
        let l2 = a.leaf("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&l1, &l2));
        let l3 = b.leaf("api.example.com").unwrap();
        assert_ne!(l1.cert[0], l3.cert[0]);
        assert!(
            format!("{a:?}").len() < 40,
            "Debug shows nothing of the key"
        );
    }
}
