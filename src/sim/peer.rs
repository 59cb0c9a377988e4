//! Sealed peer messages for tests that play another provisioner, or a forger who
//! holds the broker's provisioning password and some certificate: the daemon's own
//! sealing (`choria::peers`), with whatever credential the test chooses.

use crate::choria::peers::{PeerKey, PeerTrust, Seal};
use crate::choria::protocol::Credentials;
use crate::crypto::x509::{self, Anchors};

/// `body` sealed for `subject` at Unix time `now`, signed with the RSA key
/// `key_pem` and presenting the certificate `certificate_pem`, as an instance of
/// the `file` or `puppet` provider sends it (whoever signed the certificate).
pub fn sealed_with_certificate(
    certificate_pem: &str,
    key_pem: &str,
    subject: &str,
    body: &[u8],
    now: u64,
) -> Result<Vec<u8>, String> {
    let Credentials::Rsa { key, pubcert } =
        Credentials::rsa(key_pem, certificate_pem).map_err(|e| e.to_string())?
    else {
        return Err("not an RSA credential".into());
    };
    let certificate = x509::pem_certificates(&pubcert)
        .into_iter()
        .next()
        .ok_or("no certificate")?;
    // Trust only matters to what this seal would open; it opens nothing.
    let trust = Anchors::from_pem(certificate_pem).map_err(|e| e.to_string())?;
    let seal = Seal::secure(
        PeerKey::Rsa { key, certificate },
        PeerTrust::Ca(trust),
        &[".*".to_string()],
        now,
    )
    .map_err(|e| e.to_string())?;
    seal.seal(subject, body, now).map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
