//! The key that signs server JWTs (`jwt_signing_key`) and the chain issuer's `jwt_signing_token`.

use super::*;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair};
use serde::Serialize;
use std::fmt;
use std::path::Path;

// ------------------------------------------------------------------------- signing keys

/// The key `jwt_signing_key` designates. `Debug` never shows private material.
pub enum SigningKey {
    /// An ed25519 key from a hex seed file; signs EdDSA and chain signatures.
    Ed25519(signature::Ed25519KeyPair),
    /// An RSA private key; signs RS256.
    Rsa(signature::RsaKeyPair),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningKey::Ed25519(k) => write!(
                f,
                "SigningKey::Ed25519(public {}, seed ***)",
                hex::encode(k.public_key().as_ref())
            ),
            SigningKey::Rsa(k) => write!(
                f,
                "SigningKey::Rsa({} bits, private ***)",
                k.public().modulus_len() * 8
            ),
        }
    }
}

impl SigningKey {
    /// Reads and parses `jwt_signing_key` ([`SigningKey::from_file_contents`]).
    pub(crate) fn load(path: impl AsRef<Path>) -> Result<SigningKey, TokenError> {
        let path = path.as_ref();
        let data = read_limited(path)?;
        SigningKey::from_file_contents(&data, &path.display().to_string())
    }

    /// Interprets key file bytes as Go's `SignTokenWithKeyFile` does: content starting with
    /// `-----BEGIN RSA PRIVATE KEY` or `-----BEGIN PRIVATE KEY` is an RSA key (PKCS#1 or
    /// PKCS#8, both tried) signing RS256; otherwise the content must be the 64 hex characters of
    /// an ed25519 seed, signing EdDSA. Unlike Go, white space around the seed (a trailing
    /// newline from an editor or `echo`) is accepted. `name` is used in error messages.
    pub(crate) fn from_file_contents(data: &[u8], name: &str) -> Result<SigningKey, TokenError> {
        if data.starts_with(b"-----BEGIN RSA PRIVATE KEY")
            || data.starts_with(b"-----BEGIN PRIVATE KEY")
        {
            let block = key_file_pem(data, TokenError::SigningKeyParse)?;
            let kp = signature::RsaKeyPair::from_der(&block.der)
                .or_else(|_| signature::RsaKeyPair::from_pkcs8(&block.der))
                .map_err(|e| TokenError::SigningKeyParse(format!("not a usable RSA key: {e}")))?;
            let key = SigningKey::Rsa(kp);
            // ring checks each signature it makes; a key whose parameters disagree
            // loads but never signs, so it is refused here rather than for every node.
            key.sign_bytes(b"choria provisioner key check")
                .map_err(|_| TokenError::SigningKeyParse("the RSA key cannot sign".into()))?;
            return Ok(key);
        }
        let trimmed = data.trim_ascii();
        if trimmed.len() != 64 {
            return Err(TokenError::UnsupportedSigningKey(name.to_string()));
        }
        let mut seed = [0u8; 32];
        hex::decode_to_slice(trimmed, &mut seed).map_err(|_| TokenError::InvalidSeed)?;
        Ok(SigningKey::from_ed25519_seed(&seed))
    }

    /// An ed25519 key from its 32-byte seed (RFC 8032).
    pub fn from_ed25519_seed(seed: &[u8; 32]) -> SigningKey {
        // A 32-byte seed is always valid.
        SigningKey::Ed25519(
            signature::Ed25519KeyPair::from_seed_unchecked(seed)
                .expect("any 32-byte seed is a valid ed25519 key"),
        )
    }

    /// The JWT `alg` this key produces: `EdDSA` or `RS256`.
    pub(crate) fn algorithm(&self) -> &'static str {
        match self {
            SigningKey::Ed25519(_) => "EdDSA",
            SigningKey::Rsa(_) => "RS256",
        }
    }

    /// Hex of the ed25519 public key, `None` for RSA.
    #[cfg(test)]
    pub(crate) fn ed25519_public_hex(&self) -> Option<String> {
        match self {
            SigningKey::Ed25519(k) => Some(hex::encode(k.public_key().as_ref())),
            SigningKey::Rsa(_) => None,
        }
    }

    /// A short SHA-256 fingerprint of the public key (16 hex digits), to tell keys apart
    /// in logs without showing anything private.
    pub(crate) fn public_fingerprint(&self) -> String {
        let public: &[u8] = match self {
            SigningKey::Ed25519(k) => k.public_key().as_ref(),
            SigningKey::Rsa(k) => k.public().as_ref(),
        };
        hex::encode(&ring::digest::digest(&ring::digest::SHA256, public).as_ref()[..8])
    }

    fn sign_bytes(&self, data: &[u8]) -> Result<Vec<u8>, TokenError> {
        match self {
            SigningKey::Ed25519(k) => Ok(k.sign(data).as_ref().to_vec()),
            SigningKey::Rsa(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &SystemRandom::new(),
                    data,
                    &mut sig,
                )
                .map_err(|_| TokenError::Sign)?;
                Ok(sig)
            }
        }
    }

    /// Signs `claims` as a compact JWS: header `{"alg":"<alg>","typ":"JWT"}`, claims as compact
    /// JSON in declaration order with Go's HTML escaping (`<`, `>`, `&`, U+2028, U+2029), so an
    /// EdDSA token is byte-identical to Go's for the same claims.
    pub fn sign_jwt<T: Serialize>(&self, claims: &T) -> Result<String, TokenError> {
        let header = format!(r#"{{"alg":"{}","typ":"JWT"}}"#, self.algorithm());
        let json = serde_json::to_string(claims).map_err(|_| TokenError::Sign)?;
        let json = go_html_escape(&json);
        let mut out = B64URL.encode(header.as_bytes());
        out.push('.');
        out.push_str(&B64URL.encode(json.as_bytes()));
        let sig = self.sign_bytes(out.as_bytes())?;
        out.push('.');
        out.push_str(&B64URL.encode(sig));
        Ok(out)
    }
}

/// Go's `json.Marshal` escapes `<`, `>`, `&`, U+2028 and U+2029 inside strings; outside strings
/// they cannot occur in JSON, so a plain replacement is exact.
pub(super) fn go_html_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

// ------------------------------------------------------------------------- chain issuer token

/// The parts of `jwt_signing_token` that chain data needs. The token is read **unverified**,
/// as in Go (the broker verifies the chain). `Debug` shows only the id.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SigningToken {
    /// The token's `jti`.
    pub jti: String,
    /// The token's `public_key` (hex of the chain issuer's ed25519 key).
    pub public_key: String,
    /// The org issuer's trust chain signature.
    pub tcs: String,
    /// The token's `exp`.
    pub exp: i64,
}

impl fmt::Debug for SigningToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningToken")
            .field("jti", &self.jti)
            .field("exp", &self.exp)
            .finish_non_exhaustive()
    }
}

impl SigningToken {
    /// Reads `jwt_signing_token` (re-read for every host in Go, so rotation needs no restart).
    pub(crate) fn load(path: impl AsRef<Path>) -> Result<SigningToken, TokenError> {
        let data = read_limited(path.as_ref())?;
        let text = std::str::from_utf8(&data).map_err(|_| {
            TokenError::SigningToken("could not parse signing token: not UTF-8".into())
        })?;
        SigningToken::parse(text)
    }

    /// Parses the token text unverified and checks, in Go's order: purpose `choria_client_id`
    /// (`not a client token`), `tcs` (`no Trust Chain Signature claim in JWT Signing Token`),
    /// `jti` (`id not set`), `public_key` (`public key not set`), `exp` (`issuer has no expiry`).
    pub(crate) fn parse(text: &str) -> Result<SigningToken, TokenError> {
        let bad = |m: &str| TokenError::SigningToken(format!("could not parse signing token: {m}"));
        let text = text.trim();
        if text.len() > MAX_TOKEN_LEN {
            return Err(bad("too large"));
        }
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() != 3 {
            return Err(bad("token contains an invalid number of segments"));
        }
        let claims = B64URL
            .decode(parts[1])
            .map_err(|_| bad("could not base64 decode claim"))?;
        let std: StandardClaims =
            serde_json::from_slice(&claims).map_err(|_| bad("could not JSON decode claim"))?;
        if std.purpose != CLIENT_ID_PURPOSE {
            return Err(TokenError::SigningToken("not a client token".into()));
        }
        if std.tcs.is_empty() {
            return Err(TokenError::SigningToken(
                "no Trust Chain Signature claim in JWT Signing Token".into(),
            ));
        }
        if std.jti.is_empty() {
            return Err(TokenError::SigningToken("id not set".into()));
        }
        if std.public_key.is_empty() {
            return Err(TokenError::SigningToken("public key not set".into()));
        }
        let exp = std
            .exp
            .ok_or_else(|| TokenError::SigningToken("issuer has no expiry".into()))?;
        Ok(SigningToken {
            jti: std.jti,
            public_key: std.public_key,
            tcs: std.tcs,
            exp,
        })
    }
}

/// Applies `AddChainIssuerData` (choria-io/tokens) to server claims whose `jti` is set:
/// `iss = C-<token jti>.<token public_key>`, `issexp = token exp`, `exp` lowered to the token's
/// expiry if later (or absent), `tcs = <token tcs>.<hex ed25519 sig over "<jti>.<token tcs>">`.
/// `key` must be the ed25519 seed matching the token's `public_key`.
pub(crate) fn add_chain_issuer_data(
    claims: &mut ServerClaims,
    token: &SigningToken,
    key: &SigningKey,
) -> Result<(), TokenError> {
    if !matches!(key, SigningKey::Ed25519(_)) {
        return Err(TokenError::ChainNeedsEd25519Key);
    }
    if claims.standard.jti.is_empty() {
        return Err(TokenError::SigningToken("id not set".into()));
    }
    let std = &mut claims.standard;
    std.iss = format!("{CHAIN_ISSUER_PREFIX}{}.{}", token.jti, token.public_key);
    std.issexp = Some(token.exp);
    match std.exp {
        Some(e) if token.exp >= e => {}
        _ => std.exp = Some(token.exp),
    }
    let data = format!("{}.{}", std.jti, token.tcs);
    let sig = key.sign_bytes(data.as_bytes())?;
    std.tcs = format!("{}.{}", token.tcs, hex::encode(sig));
    Ok(())
}
