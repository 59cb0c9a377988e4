//! Who we are on the wire and how requests are signed: insecure markers, the file
//! provider's RSA key (v1), or the `choria` provider's client JWT and ed25519 seed
//! (v2). Keys are read once; `Debug` never shows them.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, RsaKeyPair, RSA_PKCS1_SHA256};

use super::{b64, Layer, Protocol, ProtocolError};
use crate::choria::client_config::{ClientConfig, SecurityProvider};

/// How requests are signed.
#[derive(Clone)]
pub enum Credentials {
    /// `signature` and `pubcert` are the literal `insecure` (v1).
    Insecure,
    /// RSA PKCS#1 v1.5 SHA-256 signatures and the certificate PEM (v1, x509).
    Rsa {
        /// The private key.
        key: Arc<RsaKeyPair>,
        /// The certificate PEM text sent as `pubcert`.
        pubcert: String,
    },
    /// ed25519 signatures and the client JWT (v2).
    Ed25519 {
        /// The client JWT sent as `caller`.
        jwt: String,
        /// The key made from the seed file.
        key: Arc<Ed25519KeyPair>,
        /// False to send the `insecure` signature marker instead of signing.
        secure: bool,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Credentials::Insecure => "Credentials::Insecure",
            Credentials::Rsa { .. } => "Credentials::Rsa(***)",
            Credentials::Ed25519 { .. } => "Credentials::Ed25519(***)",
        })
    }
}

fn err(reason: impl fmt::Display) -> ProtocolError {
    ProtocolError::new(Layer::Credentials, reason)
}

impl Credentials {
    /// An ed25519 credential from a 32-byte seed and a client JWT.
    pub(crate) fn ed25519(
        seed: &[u8],
        jwt: &str,
        secure: bool,
    ) -> Result<Credentials, ProtocolError> {
        let key = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|_| err("the ed25519 seed must be 32 bytes"))?;
        Ok(Credentials::Ed25519 {
            jwt: jwt.to_string(),
            key: Arc::new(key),
            secure,
        })
    }

    /// An RSA credential from a private key PEM (PKCS#1 or PKCS#8) and a certificate.
    pub(crate) fn rsa(key_pem: &str, cert_pem: &str) -> Result<Credentials, ProtocolError> {
        let block = crate::crypto::pem::decode(key_pem).ok_or_else(|| err("the key is not PEM"))?;
        let (label, der) = (block.label, block.der);
        let key = match label.as_str() {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
            other => return Err(err(format!("unsupported key type {other}"))),
        }
        .map_err(|e| err(format!("unusable RSA key: {e}")))?;
        Ok(Credentials::Rsa {
            key: Arc::new(key),
            pubcert: cert_pem.to_string(),
        })
    }

    /// v1 `signature` and `pubcert` for the request bytes.
    pub(super) fn sign_v1(
        &self,
        request: &[u8],
    ) -> Result<(Cow<'static, str>, Cow<'_, str>), ProtocolError> {
        match self {
            Credentials::Insecure => Ok(("insecure".into(), "insecure".into())),
            Credentials::Rsa { key, pubcert } => {
                let mut sig = vec![0u8; key.public().modulus_len()];
                key.sign(
                    &RSA_PKCS1_SHA256,
                    &ring::rand::SystemRandom::new(),
                    request,
                    &mut sig,
                )
                .map_err(|_| err("RSA signing failed"))?;
                Ok((b64(&sig).into(), pubcert.as_str().into()))
            }
            Credentials::Ed25519 { .. } => Err(err("ed25519 credentials need protocol v2")),
        }
    }

    /// v2 signature bytes and the caller JWT for the request bytes.
    pub(super) fn sign_v2(&self, request: &[u8]) -> Result<(Vec<u8>, String), ProtocolError> {
        match self {
            Credentials::Ed25519 { jwt, key, secure } => {
                let sig = if *secure {
                    key.sign(request).as_ref().to_vec()
                } else {
                    b"insecure".to_vec()
                };
                Ok((sig, jwt.clone()))
            }
            _ => Err(err("protocol v2 needs a client JWT and an ed25519 seed")),
        }
    }

    /// The hex public key of an ed25519 credential.
    #[cfg(test)]
    pub(crate) fn ed25519_public_hex(&self) -> Option<String> {
        match self {
            Credentials::Ed25519 { key, .. } => {
                use ring::signature::KeyPair as _;
                Some(hex::encode(key.public_key().as_ref()))
            }
            _ => None,
        }
    }
}

/// go-choria's certname: `$MCOLLECTIVE_CERTNAME`, else the identity when running as
/// root, else `<user>.mcollective`.
pub fn certname(identity: &str) -> String {
    if let Ok(name) = std::env::var("MCOLLECTIVE_CERTNAME") {
        if !name.is_empty() {
            return name;
        }
    }
    if crate::proc_self::effective_uid() == Some(0) {
        return identity.to_string();
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "nobody".into());
    format!("{user}.mcollective")
}

/// The `callerid` claim of a JWT, read without verifying it (as go-choria does for
/// its own token).
fn jwt_caller_id(jwt: &str) -> Result<String, ProtocolError> {
    let claims = jwt
        .split('.')
        .nth(1)
        .ok_or_else(|| err("the client JWT is not a JWT"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .map_err(|e| err(format!("the client JWT claims are not base64url: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| err(format!("the client JWT claims: {e}")))?;
    value["callerid"]
        .as_str()
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .ok_or_else(|| err("the client JWT has no callerid claim"))
}

fn read(path: Option<&str>, what: &str) -> Result<String, ProtocolError> {
    let path = path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| err(format!("no {what} configured")))?;
    std::fs::read_to_string(path).map_err(|e| err(format!("cannot read {what} {path}: {e}")))
}

/// The protocol version, credentials and caller id the client configuration selects:
/// insecure → v1 unsigned; `file`/`puppet` → v1 signed with the RSA key; `choria` →
/// v2 with the client JWT and seed.
pub fn client_identity(
    client: &ClientConfig,
) -> Result<(Protocol, Credentials, String), ProtocolError> {
    let v1_caller = format!("choria={}", certname(&client.identity));
    if client.insecure {
        return Ok((Protocol::V1, Credentials::Insecure, v1_caller));
    }
    match client.security_provider {
        SecurityProvider::Choria => {
            let jwt = read(
                client.get("plugin.security.choria.token_file"),
                "client JWT",
            )?;
            let jwt = jwt.trim();
            let seed_hex = read(client.get("plugin.security.choria.seed_file"), "seed file")?;
            let seed = hex::decode(seed_hex.trim()).map_err(|_| err("the seed file is not hex"))?;
            let caller = jwt_caller_id(jwt)?;
            Ok((
                Protocol::V2,
                Credentials::ed25519(&seed, jwt, true)?,
                caller,
            ))
        }
        _ => {
            let files = client.tls_files().unwrap_or_default();
            let key = read(files.key.as_ref().and_then(|p| p.to_str()), "private key")?;
            let cert = read(
                files.certificate.as_ref().and_then(|p| p.to_str()),
                "certificate",
            )?;
            Ok((Protocol::V1, Credentials::rsa(&key, &cert)?, v1_caller))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_whose_end_marker_overlaps_the_begin_line_are_refused() {
        for text in [
            "-----BEGIN -----END -----",
            "-----BEGIN X-----END X-----",
            "-----BEGIN X-----",
            "-----BEGIN ",
            "x-----BEGIN -----",
        ] {
            assert!(crate::crypto::pem::decode(text).is_none(), "{text:?}");
            assert!(Credentials::rsa(text, "").is_err(), "{text:?}");
        }
        assert!(Credentials::rsa("-----BEGIN -----END -----", "").is_err());
    }
}
