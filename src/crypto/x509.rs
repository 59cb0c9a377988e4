//! X.509 certificates as the site's CA vouches for them: a bundle of trusted CA
//! certificates read once, and a certificate someone presents checked against it
//! (its chain, its dates, its use for client authentication: rustls-webpki, the
//! verifier the broker connection already uses) before its name and RSA key are
//! believed. Signed peer messages use it with the `file` and `puppet` providers.

use der::oid::ObjectIdentifier;
use der::Decode;
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use x509_cert::Certificate;

use super::pem;

/// The largest certificate read (DER): far above any real one.
pub(crate) const MAX_CERTIFICATE: usize = 16 * 1024;

/// The most CA certificates read from one bundle.
const MAX_ANCHORS: usize = 256;

const OID_COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// Why a certificate or a CA bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum X509Error {
    /// The CA bundle holds no certificate that could be used as a trust anchor.
    #[error("the CA bundle holds no usable certificate")]
    NoAnchors,
    /// Larger than `MAX_CERTIFICATE` (16 KiB).
    #[error("a certificate of {0} bytes (at most {max})", max = MAX_CERTIFICATE)]
    TooLarge(usize),
    /// Not a DER X.509 certificate.
    #[error("not an X.509 certificate")]
    Malformed,
    /// The chain to a trusted CA, the dates or the key usage do not verify.
    #[error("not vouched for by the site's CA: {0}")]
    Untrusted(String),
    /// No common name, or more than one.
    #[error("a certificate without exactly one common name")]
    CommonName,
    /// Its key is not an RSA key.
    #[error("a certificate whose key is not RSA")]
    NotRsa,
}

/// The CA certificates a site trusts.
#[derive(Debug, Clone)]
pub(crate) struct Anchors(Vec<TrustAnchor<'static>>);

impl Anchors {
    /// Every certificate of the PEM bundle `text` that can be a trust anchor.
    pub(crate) fn from_pem(text: &str) -> Result<Anchors, X509Error> {
        let anchors: Vec<TrustAnchor<'static>> = pem_certificates(text)
            .into_iter()
            .take(MAX_ANCHORS)
            .filter_map(|der| {
                let der = CertificateDer::from(der);
                webpki::anchor_from_trusted_cert(&der)
                    .ok()
                    .map(|a| a.to_owned())
            })
            .collect();
        if anchors.is_empty() {
            return Err(X509Error::NoAnchors);
        }
        Ok(Anchors(anchors))
    }
}

/// The DER of every `CERTIFICATE` block of `text`, in order.
pub(crate) fn pem_certificates(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let Some(block) = pem::decode(&rest[start..]) else {
            break;
        };
        let end_marker = format!("-----END {}-----", block.label);
        let Some(end) = rest[start..].find(&end_marker) else {
            break;
        };
        if block.label == "CERTIFICATE" {
            out.push(block.der);
        }
        rest = &rest[start + end + end_marker.len()..];
    }
    out
}

/// A certificate the site's CA vouched for: its common name, its RSA key (the
/// PKCS#1 `RSAPublicKey`, as ring verifies with it) and until when it is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vouched {
    /// The subject's common name.
    pub common_name: String,
    /// The RSA public key.
    pub rsa_public_key: Vec<u8>,
    /// `notAfter`, in Unix seconds.
    pub not_after: i64,
}

/// Checks the DER certificate `der` against `anchors` at Unix time `now`: a chain
/// to one of them, within its dates, fit for client authentication (if it says
/// what it is for), with one common name and an RSA key.
pub(crate) fn vouch(der: &[u8], anchors: &Anchors, now: u64) -> Result<Vouched, X509Error> {
    if der.len() > MAX_CERTIFICATE {
        return Err(X509Error::TooLarge(der.len()));
    }
    let cert_der = CertificateDer::from(der);
    let end_entity =
        webpki::EndEntityCert::try_from(&cert_der).map_err(|_| X509Error::Malformed)?;
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors.0,
            &[],
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(now)),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| X509Error::Untrusted(format!("{e:?}")))?;
    let cert = Certificate::from_der(der).map_err(|_| X509Error::Malformed)?;
    let tbs = &cert.tbs_certificate;
    let mut names = Vec::new();
    for rdn in tbs.subject.0.iter() {
        for atv in rdn.0.iter() {
            if atv.oid == OID_COMMON_NAME {
                names.push(
                    super::csr::directory_string(&atv.value).map_err(|_| X509Error::CommonName)?,
                );
            }
        }
    }
    if names.len() != 1 {
        return Err(X509Error::CommonName);
    }
    let spki = &tbs.subject_public_key_info;
    if spki.algorithm.oid != OID_RSA_ENCRYPTION {
        return Err(X509Error::NotRsa);
    }
    let rsa_public_key = spki
        .subject_public_key
        .as_bytes()
        .ok_or(X509Error::Malformed)?
        .to_vec();
    let not_after = tbs.validity.not_after.to_unix_duration().as_secs() as i64;
    Ok(Vouched {
        common_name: names.pop().unwrap_or_default(),
        rsa_public_key,
        not_after,
    })
}
