//! Bearer tokens, checked against the SHA-256 digests the configuration
//! holds: the request's identity and scope come from the credential that
//! matched, never from anything in the request's body.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Credential;

/// The credential whose token `authorization` (the header's value)
/// presents, if any. Every credential is compared, in constant time each,
/// whether or not an earlier one matched, so the time taken says nothing
/// about which digest came close.
pub fn authenticate<'c>(
    credentials: &'c [Credential],
    authorization: Option<&str>,
) -> Option<&'c Credential> {
    let token = authorization?.strip_prefix("Bearer ")?.trim();
    if token.is_empty() {
        return None;
    }
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut found = None;
    for c in credentials {
        let equal: bool = c.token_sha256.ct_eq(&digest).into();
        if equal && found.is_none() {
            found = Some(c);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(name: &str, token: &str) -> Credential {
        Credential {
            name: name.into(),
            token_sha256: Sha256::digest(token.as_bytes()).into(),
            identity: cordon_policy::Identity {
                namespace: name.into(),
                name: "agent".into(),
                attested: true,
                labels: Default::default(),
            },
            scope: name.into(),
            operator: false,
            client_cert_sha256: None,
        }
    }

    #[test]
    fn a_token_maps_to_its_one_credential_and_nothing_else_does() {
        let creds = [cred("team-a", "token-a"), cred("team-b", "token-b")];
        let who = |h: Option<&str>| authenticate(&creds, h).map(|c| c.name.as_str());
        assert_eq!(who(Some("Bearer token-a")), Some("team-a"));
        assert_eq!(who(Some("Bearer token-b")), Some("team-b"));
        for refused in [
            None,
            Some(""),
            Some("Bearer "),
            Some("Bearer token-c"),
            Some("bearer token-a"),
            Some("Basic token-a"),
            Some("token-a"),
            Some("Bearer token-a-and-more"),
        ] {
            assert_eq!(who(refused), None, "{refused:?}");
        }
    }
}
