//! Keys that verify provisioning JWTs (`jwt_verify_cert`): RSA PEM or DER, or hex ed25519.

use super::*;
use der::asn1::UintRef;
use der::Decode;
use std::fmt;
use std::path::Path;

// ------------------------------------------------------------------------- verification keys

/// The key `jwt_verify_cert` designates. Loaded once, at configuration time.
#[derive(Clone, PartialEq, Eq)]
pub enum VerifyKey {
    /// An RSA public key, as PKCS#1 `RSAPublicKey` DER (verifies RS256/384/512).
    Rsa(Vec<u8>),
    /// An ed25519 public key (verifies EdDSA).
    Ed25519([u8; 32]),
}

impl fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyKey::Rsa(der) => write!(f, "VerifyKey::Rsa({} bits)", rsa_modulus_bits(der)),
            VerifyKey::Ed25519(k) => write!(f, "VerifyKey::Ed25519({})", hex::encode(k)),
        }
    }
}

#[derive(der::Sequence)]
pub(super) struct RsaPublicKeyAsn1<'a> {
    modulus: UintRef<'a>,
    public_exponent: UintRef<'a>,
}

pub(super) fn rsa_modulus_bits(pkcs1: &[u8]) -> usize {
    match RsaPublicKeyAsn1::from_der(pkcs1) {
        Ok(k) => {
            let b = k.modulus.as_bytes();
            match b.first() {
                Some(first) => (b.len() - 1) * 8 + (8 - first.leading_zeros() as usize),
                None => 0,
            }
        }
        Err(_) => 0,
    }
}

pub(super) fn check_rsa_public(pkcs1: Vec<u8>) -> Result<VerifyKey, TokenError> {
    RsaPublicKeyAsn1::from_der(&pkcs1)
        .map_err(|e| TokenError::VerifyCertParse(format!("not an RSA public key: {e}")))?;
    let bits = rsa_modulus_bits(&pkcs1);
    if bits < 2048 {
        return Err(TokenError::RsaKeyTooSmall(bits));
    }
    Ok(VerifyKey::Rsa(pkcs1))
}

pub(super) fn read_limited(path: &Path) -> Result<Vec<u8>, TokenError> {
    let err = |reason: String| TokenError::ReadFile {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_KEY_FILE_LEN {
        return Err(err(format!("file larger than {MAX_KEY_FILE_LEN} bytes")));
    }
    std::fs::read(path).map_err(|e| err(e.to_string()))
}

impl VerifyKey {
    /// Loads `jwt_verify_cert` as Go interprets it: if a file of that name exists it is read
    /// ([`VerifyKey::from_file_contents`]); if none exists the setting itself is a hex ed25519
    /// public key. Other I/O errors (permissions…) are reported as such.
    pub(crate) fn load(setting: &str) -> Result<VerifyKey, TokenError> {
        if setting.is_empty() {
            return Err(TokenError::NoVerifyCert);
        }
        let path = Path::new(setting);
        match std::fs::metadata(path) {
            Ok(_) => VerifyKey::from_file_contents(&read_limited(path)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => VerifyKey::from_hex(setting),
            Err(e) => Err(TokenError::ReadFile {
                path: setting.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// Interprets a verification file: content starting with `-----BEGIN CERTIFICATE` or
    /// `-----BEGIN PUBLIC KEY` is PEM, whose first block is tried as SubjectPublicKeyInfo, then
    /// an X.509 certificate, then PKCS#1, and must be RSA; anything else is a hex ed25519 public
    /// key (surrounding white space, e.g. a trailing newline, is ignored; Go rejects it).
    pub(crate) fn from_file_contents(data: &[u8]) -> Result<VerifyKey, TokenError> {
        if data.starts_with(b"-----BEGIN CERTIFICATE") || data.starts_with(b"-----BEGIN PUBLIC KEY")
        {
            let block = key_file_pem(data, TokenError::VerifyCertParse)?;
            return VerifyKey::from_der(&block.der);
        }
        let text = std::str::from_utf8(data).map_err(|_| TokenError::Ed25519PublicData)?;
        VerifyKey::from_hex(text)
    }

    /// An RSA public key from SubjectPublicKeyInfo, certificate or PKCS#1 DER.
    pub(crate) fn from_der(der_bytes: &[u8]) -> Result<VerifyKey, TokenError> {
        let spki = if let Ok(spki) = x509_cert::spki::SubjectPublicKeyInfoOwned::from_der(der_bytes)
        {
            Some(spki)
        } else if let Ok(cert) = x509_cert::Certificate::from_der(der_bytes) {
            Some(cert.tbs_certificate.subject_public_key_info)
        } else {
            None
        };
        match spki {
            Some(spki) => {
                if spki.algorithm.oid != OID_RSA_ENCRYPTION {
                    return Err(TokenError::VerifyCertParse(
                        "key is not a valid RSA public key".into(),
                    ));
                }
                let raw = spki.subject_public_key.as_bytes().ok_or_else(|| {
                    TokenError::VerifyCertParse("key is not a valid RSA public key".into())
                })?;
                check_rsa_public(raw.to_vec())
            }
            None => check_rsa_public(der_bytes.to_vec()),
        }
    }

    /// A hex ed25519 public key (either case; surrounding white space ignored), 32 bytes.
    pub(crate) fn from_hex(s: &str) -> Result<VerifyKey, TokenError> {
        let s = s.trim();
        if s.len() % 2 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(TokenError::Ed25519PublicData);
        }
        if s.len() != 64 {
            return Err(TokenError::Ed25519PublicKeySize(s.len() / 2));
        }
        let mut k = [0u8; 32];
        hex::decode_to_slice(s, &mut k).map_err(|_| TokenError::Ed25519PublicData)?;
        Ok(VerifyKey::Ed25519(k))
    }
}
