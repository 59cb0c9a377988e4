//! JWS verification of a node's provisioning JWT (RS256/384/512 and EdDSA only).

use super::*;
use base64::Engine;
use ring::signature::{self};
use serde::Deserialize;

// ------------------------------------------------------------------------- verification

/// The header fields we read.
#[derive(Deserialize)]
pub(super) struct Header {
    #[serde(default)]
    alg: String,
}

/// Splits, decodes and signature-checks a compact JWS against `key`; returns the claims bytes.
pub(crate) fn verify_jws(token: &str, key: &VerifyKey) -> Result<Vec<u8>, TokenError> {
    if token.is_empty() {
        return Err(TokenError::NoJwt);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLarge(token.len()));
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(TokenError::Malformed(
            "token contains an invalid number of segments".into(),
        ));
    }
    let header_bytes = B64URL
        .decode(parts[0])
        .map_err(|_| TokenError::Malformed("could not base64 decode header".into()))?;
    let header: Header = serde_json::from_slice(&header_bytes)
        .map_err(|_| TokenError::Malformed("could not JSON decode header".into()))?;
    let claims = B64URL
        .decode(parts[1])
        .map_err(|_| TokenError::Malformed("could not base64 decode claim".into()))?;
    let alg: &'static dyn signature::VerificationAlgorithm = match header.alg.as_str() {
        "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
        "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
        "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
        "EdDSA" => &signature::ED25519,
        other => {
            let shown: String = other.chars().take(32).collect();
            return Err(TokenError::UnsupportedAlgorithm(shown));
        }
    };
    let public: &[u8] = match (header.alg.as_str(), key) {
        ("EdDSA", VerifyKey::Ed25519(pk)) => pk,
        ("EdDSA", VerifyKey::Rsa(_)) => return Err(TokenError::Ed25519KeyRequired),
        (_, VerifyKey::Rsa(pkcs1)) => pkcs1,
        (_, VerifyKey::Ed25519(_)) => return Err(TokenError::RsaKeyRequired),
    };
    let sig = B64URL
        .decode(parts[2])
        .map_err(|_| TokenError::BadSignature)?;
    let signed = &token[..parts[0].len() + 1 + parts[1].len()];
    signature::UnparsedPublicKey::new(alg, public)
        .verify(signed.as_bytes(), &sig)
        .map_err(|_| TokenError::BadSignature)?;
    Ok(claims)
}

/// golang-jwt v5's time checks: `exp` and `nbf` only when present, no leeway, `iat` ignored.
pub(crate) fn check_times(std: &StandardClaims, now: i64) -> Result<(), TokenError> {
    if let Some(exp) = std.exp {
        if now >= exp {
            return Err(TokenError::Expired);
        }
    }
    if let Some(nbf) = std.nbf {
        if now < nbf {
            return Err(TokenError::NotValidYet);
        }
    }
    Ok(())
}

/// Verifies a node's provisioning JWT at time `now` (Unix seconds), choria-io/tokens:
/// signature (RS256/384/512 with an RSA key, EdDSA with an ed25519 key, nothing else), `exp` and
/// `nbf` when present, `purpose` or `sub` equal to `choria_provisioning`, `ou` defaulted to
/// `choria`, and for a token carrying `tcs` the chain-issuer rule (`iss` starts with `C-`,
/// `issexp` set, and the earlier of `exp`/`issexp` not passed).
pub fn verify_provisioning_token(
    token: &str,
    key: &VerifyKey,
    now: i64,
) -> Result<ProvisioningClaims, TokenError> {
    check_provisioning_claims(signed_provisioning_claims(token, key)?, now)
}

/// The first half of [`verify_provisioning_token`], which depends on nothing but the
/// token's bytes and the key: the signature checked, the claims decoded. A caller
/// may keep its result for the same bytes and key (a fleet often shares one token),
/// but must pass it through [`check_provisioning_claims`] on every use (or, once
/// [`fill_default_org`] was applied to the kept claims, [`check_signed_claims`]).
pub(crate) fn signed_provisioning_claims(
    token: &str,
    key: &VerifyKey,
) -> Result<ProvisioningClaims, TokenError> {
    let claims_json = verify_jws(token, key)?;
    serde_json::from_slice(&claims_json).map_err(|e| {
        TokenError::Malformed(format!(
            "could not JSON decode claim: {}",
            crate::json_text::describe(&e)
        ))
    })
}

/// The second half of [`verify_provisioning_token`]: the checks of decoded, signed
/// claims at time `now` (times, purpose, chain issuer), and `ou` filled in.
pub(crate) fn check_provisioning_claims(
    mut claims: ProvisioningClaims,
    now: i64,
) -> Result<ProvisioningClaims, TokenError> {
    check_signed_claims(&claims, now)?;
    fill_default_org(&mut claims);
    Ok(claims)
}

/// The time-dependent checks of [`check_provisioning_claims`] (times, purpose, chain
/// issuer), which change nothing: claims checked once and kept are checked again
/// with this on every use, without a copy.
pub(crate) fn check_signed_claims(claims: &ProvisioningClaims, now: i64) -> Result<(), TokenError> {
    check_times(&claims.standard, now)?;
    let s = &claims.standard;
    if s.sub != PROVISIONING_PURPOSE && s.purpose != PROVISIONING_PURPOSE {
        return Err(TokenError::NotProvisioningToken);
    }
    if !s.tcs.is_empty() {
        let chained = s.iss.starts_with(CHAIN_ISSUER_PREFIX);
        let expire = match (s.exp, s.issexp) {
            (Some(e), Some(i)) => Some(e.min(i)),
            (None, Some(i)) => Some(i),
            _ => None,
        };
        match expire {
            Some(t) if chained && now < t => {}
            _ => return Err(TokenError::IssuerExpired),
        }
    }
    Ok(())
}

/// What verification fills in: the default organisation when `ou` is empty.
pub(crate) fn fill_default_org(claims: &mut ProvisioningClaims) {
    if claims.ou.is_empty() {
        claims.ou = DEFAULT_ORG.to_string();
    }
}
