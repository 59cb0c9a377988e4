//! A token issued in an Organisation Issuer network, verified as a Choria broker
//! verifies it with the issuer's public key (choria-io/tokens `IsSignedByIssuer`):
//! signed by the issuer itself, or by a chain issuer the issuer vouched for. The
//! daemon verifies its peers' client JWTs with it (signed peer messages); the
//! simulator and the tests' broker front end verify server and client JWTs with it.

use ring::signature::{UnparsedPublicKey, ED25519};
use serde::de::DeserializeOwned;

use super::{check_times, unverified_claims, verify_jws, StandardClaims, VerifyKey};
use super::{TokenError, CHAIN_ISSUER_PREFIX};
use crate::crypto::ids;

/// Why an issued token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuedTokenError {
    /// The claims do not parse.
    #[error("its claims do not parse: {0}")]
    Claims(String),
    /// Its `purpose` is not the one expected.
    #[error("purpose {found:?} is not {expected}")]
    Purpose {
        /// The token's purpose (shortened).
        found: String,
        /// The purpose asked for.
        expected: &'static str,
    },
    /// A chain-issued token without a claim the chain needs.
    #[error("a chain-issued token without {0}")]
    ChainClaim(&'static str),
    /// A chain-issued token whose `jti` is not a KSUID made at its `iat`.
    #[error("its jti is not a KSUID made at its iat")]
    ChainJti,
    /// A chain issuer that is not `C-<id>.<key>`, or a `tcs` that is not two parts.
    #[error("its chain issuer data is malformed")]
    ChainForm,
    /// The organisation issuer did not vouch for the chain issuer.
    #[error("the issuer did not vouch for the chain issuer")]
    NotVouched,
    /// The chain issuer did not sign this token.
    #[error("the chain issuer did not sign this token")]
    ChainSignature,
    /// The chain issuer has expired.
    #[error("its chain issuer has expired")]
    ChainExpired,
    /// The token's own signature does not verify, or its times are wrong.
    #[error("{0}")]
    Token(TokenError),
}

fn ed25519_verify(public_hex: &str, message: &str, signature_hex: &str) -> bool {
    match (hex::decode(public_hex), hex::decode(signature_hex)) {
        (Ok(public), Ok(signature)) => UnparsedPublicKey::new(&ED25519, public)
            .verify(message.as_bytes(), &signature)
            .is_ok(),
        _ => false,
    }
}

/// Verifies `token` as a token of `purpose` (`choria_server`, `choria_client_id`)
/// signed, directly or through a chain issuer, by the organisation issuer whose
/// ed25519 public key is `issuer`, at Unix time `now`; returns its claims as `T`.
pub fn verify_issued_token<T: DeserializeOwned>(
    token: &str,
    purpose: &'static str,
    issuer: &[u8; 32],
    now: i64,
) -> Result<T, IssuedTokenError> {
    let std: StandardClaims =
        unverified_claims(token).map_err(|e| IssuedTokenError::Claims(e.to_string()))?;
    if std.purpose != purpose {
        return Err(IssuedTokenError::Purpose {
            found: std.purpose.chars().take(64).collect(),
            expected: purpose,
        });
    }
    let signer = match std.iss.strip_prefix(CHAIN_ISSUER_PREFIX) {
        None => *issuer,
        Some(chain) => chain_signer(&std, chain, issuer, now)?,
    };
    let claims = verify_jws(token, &VerifyKey::Ed25519(signer)).map_err(IssuedTokenError::Token)?;
    check_times(&std, now).map_err(IssuedTokenError::Token)?;
    serde_json::from_slice(&claims).map_err(|e| IssuedTokenError::Claims(e.to_string()))
}

/// The key of the chain issuer `chain` (`<id>.<key>`) of a token, once the
/// organisation issuer `issuer` is shown to have vouched for it and it to have
/// signed the token's `jti`.
fn chain_signer(
    std: &StandardClaims,
    chain: &str,
    issuer: &[u8; 32],
    now: i64,
) -> Result<[u8; 32], IssuedTokenError> {
    if std.public_key.is_empty() {
        return Err(IssuedTokenError::ChainClaim("public_key"));
    }
    let iat = std.iat.ok_or(IssuedTokenError::ChainClaim("iat"))?;
    std.exp.ok_or(IssuedTokenError::ChainClaim("exp"))?;
    let issexp = std.issexp.ok_or(IssuedTokenError::ChainClaim("issexp"))?;
    match ids::ksuid_time(&std.jti) {
        Some(t) if t as i64 == iat => {}
        _ => return Err(IssuedTokenError::ChainJti),
    }
    let (id, public) = match chain.split('.').collect::<Vec<_>>()[..] {
        [id, public] if !id.is_empty() && !public.is_empty() => (id, public),
        _ => return Err(IssuedTokenError::ChainForm),
    };
    let (issuer_tcs, chain_sig) = match std.tcs.split('.').collect::<Vec<_>>()[..] {
        [a, b] if !a.is_empty() && !b.is_empty() => (a, b),
        _ => return Err(IssuedTokenError::ChainForm),
    };
    if !ed25519_verify(&hex::encode(issuer), &format!("{id}.{public}"), issuer_tcs) {
        return Err(IssuedTokenError::NotVouched);
    }
    if !ed25519_verify(public, &format!("{}.{issuer_tcs}", std.jti), chain_sig) {
        return Err(IssuedTokenError::ChainSignature);
    }
    if now >= issexp {
        return Err(IssuedTokenError::ChainExpired);
    }
    <[u8; 32]>::try_from(hex::decode(public).ok().unwrap_or_default())
        .map_err(|_| IssuedTokenError::ChainForm)
}
