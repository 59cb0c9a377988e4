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

use std::path::Path;
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

/// A client TLS configuration that does not verify the broker's certificate and
/// presents `certificate` with `key` when both are given.
pub(crate) fn unverified(
    certificate: Option<&Path>,
    key: Option<&Path>,
) -> Result<rustls::ClientConfig, String> {
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(algorithms)));
    match (certificate, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("no certificate in {}", cert.display()));
            }
            let private = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("cannot read the private key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| format!("cannot use the certificate {}: {e}", cert.display()))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}
