//! TLS to a broker whose certificate is not verified: what go-choria's `choria`
//! security provider does when `plugin.security.choria.ca` is not set
//! (`providers/security/choria` `TLSConfig`: "mTLS is optional, so when we do not have
//! a CA we disable mutual verification", `InsecureSkipVerify`). The connection is still
//! encrypted and the handshake signatures are still checked; only the chain to a
//! trusted CA and the host name are not. The client certificate is sent when one is
//! configured.
//!
//! Built on the `rustls` the `nats` crate re-exports, so nothing is added to the tree.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nats::rustls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any server certificate; checks the handshake signatures with it.
#[derive(Debug)]
struct AnyServerCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Why the client certificate for an unverified broker could not be used: which
/// file, and the TLS library's reason. No variant holds the key's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerTlsError {
    /// The certificate file could not be read or is not PEM.
    #[error("cannot read the certificate {}: {reason}", .path.display())]
    ReadCertificate {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The certificate file holds no certificate.
    #[error("no certificate in {}", .path.display())]
    NoCertificate {
        /// The certificate file.
        path: PathBuf,
    },
    /// The private key file could not be read or holds no usable key.
    #[error("cannot read the private key {}: {reason}", .path.display())]
    ReadKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The certificate and key were refused together (they do not match, or the key
    /// type is not supported).
    #[error("cannot use the certificate {}: {reason}", .path.display())]
    UseCertificate {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A client TLS configuration that does not verify the broker's certificate and
/// presents `certificate` with `key` when both are given.
pub(crate) fn unverified(
    certificate: Option<&Path>,
    key: Option<&Path>,
) -> Result<rustls::ClientConfig, BrokerTlsError> {
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(algorithms)));
    match (certificate, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| BrokerTlsError::ReadCertificate {
                    path: cert.to_path_buf(),
                    reason: e.to_string(),
                })?;
            if chain.is_empty() {
                return Err(BrokerTlsError::NoCertificate {
                    path: cert.to_path_buf(),
                });
            }
            let private =
                PrivateKeyDer::from_pem_file(key).map_err(|e| BrokerTlsError::ReadKey {
                    path: key.to_path_buf(),
                    reason: e.to_string(),
                })?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                BrokerTlsError::UseCertificate {
                    path: cert.to_path_buf(),
                    reason: e.to_string(),
                }
            })
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_that_cannot_be_used_names_its_file() {
        let dir =
            std::env::temp_dir().join(format!("choria-prov-brokertls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let e = unverified(Some(&cert), Some(&key)).unwrap_err();
        assert!(
            matches!(&e, BrokerTlsError::ReadCertificate { path, .. } if *path == cert),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read the certificate {}: ", cert.display())),
            "{e}"
        );
        std::fs::write(&cert, "no PEM here\n").unwrap();
        let e = unverified(Some(&cert), Some(&key)).unwrap_err();
        assert_eq!(e, BrokerTlsError::NoCertificate { path: cert.clone() });
        assert_eq!(
            e.to_string(),
            format!("no certificate in {}", cert.display())
        );
        assert!(
            unverified(None, None).is_ok(),
            "no client certificate is fine"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
