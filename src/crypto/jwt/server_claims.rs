//! Building and signing a node's server JWT from the helper's answer.

use super::*;
use std::fmt;
use std::time::Duration;

// ------------------------------------------------------------------------- server claims

/// Everything [`build_server_claims`] needs about one node.
#[derive(Debug, Clone)]
pub(crate) struct ServerClaimsInput<'a> {
    /// The node identity.
    pub identity: &'a str,
    /// The hex ed25519 public key from `gen25519`.
    pub public_key_hex: &'a str,
    /// The helper's `configuration["plugin.security.provider"]`, if set.
    pub security_provider: Option<&'a str>,
    /// The helper's `configuration["collectives"]`, if set.
    pub collectives_setting: Option<&'a str>,
    /// The helper's `server_claims`, if any.
    pub requested: Option<&'a RequestedServerClaims>,
    /// `server_jwt_validity`.
    pub default_validity: Duration,
    /// Issue time (Unix seconds): `iat`, `nbf`, and the base of `exp`.
    pub now: i64,
    /// The token id, a KSUID made from `now` (the caller makes it).
    pub jti: &'a str,
}

/// Server claims plus the warning to log when the requested validity was replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BuiltServerClaims {
    /// The claims, ready for `add_chain_issuer_data` and [`SigningKey::sign_jwt`].
    pub claims: ServerClaims,
    /// `Server validity <v> is too short, setting to default <d>` when that rule fired.
    pub warning: Option<String>,
}

/// Builds the server JWT claims as the Go provisioner does (choria-io/tokens), with two
/// documented fixes:
///
/// * collectives: `["mcollective"]`, replaced by `["choria"]` when the security provider is
///   `choria`, replaced by the `collectives` setting split on `,` — **each part trimmed and empty
///   parts dropped** (Go keeps `" b"`; an all-empty setting leaves the previous value), replaced
///   by non-empty requested `collectives`;
/// * `exp`: Go reads the helper's `server_claims.exp` as an absolute Unix time, while its docs and
///   sample helpers send a duration (`5*365*24*3600`) that Go then silently ignores. Here a
///   non-zero value below `EXP_DURATION_THRESHOLD` (10 years of seconds; no real absolute time
///   is that small, it would be before 1980) is a duration in seconds from `now`; a larger one is
///   an absolute Unix time, validity = `exp - now`.
///
/// Then, as in Go, a validity of one hour or less (including a negative one) is replaced by the
/// default with a warning; `ou` is `choria` unless requested; `permissions` and `pub_subjects`
/// are taken when given; `iss` is `Choria Provisioner`; `iat = nbf = now`; `exp = now + validity`.
pub(crate) fn build_server_claims(
    input: &ServerClaimsInput<'_>,
) -> Result<BuiltServerClaims, TokenError> {
    if input.public_key_hex.is_empty() {
        return Err(TokenError::NoNodePublicKey);
    }
    let default_validity = i64::try_from(input.default_validity.as_secs()).unwrap_or(i64::MAX);
    if default_validity == 0 {
        return Err(TokenError::NoDefaultValidity);
    }
    if input.identity.is_empty() {
        return Err(TokenError::NoIdentity);
    }
    let pk: [u8; 32] = hex::decode(input.public_key_hex)
        .ok()
        .and_then(|k| k.try_into().ok())
        .ok_or(TokenError::NoNodePublicKey)?;

    let mut collectives = vec!["mcollective".to_string()];
    if input.security_provider == Some("choria") {
        collectives = vec!["choria".to_string()];
    }
    if let Some(setting) = input.collectives_setting {
        let parts: Vec<String> = setting
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if !parts.is_empty() {
            collectives = parts;
        }
    }

    let mut ou = DEFAULT_ORG.to_string();
    let mut validity = default_validity;
    let mut permissions = None;
    let mut pub_subjects = Vec::new();
    if let Some(req) = input.requested {
        if !req.ou.is_empty() {
            ou = req.ou.clone();
        }
        if let Some(exp) = req.exp.filter(|e| *e != 0) {
            validity = if exp < EXP_DURATION_THRESHOLD {
                exp
            } else {
                exp.saturating_sub(input.now)
            };
        }
        if !req.collectives.is_empty() {
            collectives = req.collectives.clone();
        }
        if !req.pub_subjects.is_empty() {
            pub_subjects = req.pub_subjects.clone();
        }
        permissions = req.permissions.clone();
    }
    if collectives.is_empty() {
        return Err(TokenError::NoCollectives);
    }
    let mut warning = None;
    if validity <= MIN_SERVER_VALIDITY {
        warning = Some(format!(
            "Server validity {}s is too short, setting to default {}s",
            validity, default_validity
        ));
        validity = default_validity;
    }

    Ok(BuiltServerClaims {
        claims: ServerClaims {
            identity: input.identity.to_string(),
            collectives,
            permissions,
            ou,
            pub_subjects,
            standard: StandardClaims {
                purpose: SERVER_PURPOSE.to_string(),
                public_key: hex::encode(pk),
                iss: SERVER_TOKEN_ISSUER.to_string(),
                exp: Some(input.now.saturating_add(validity)),
                nbf: Some(input.now),
                iat: Some(input.now),
                jti: input.jti.to_string(),
                ..StandardClaims::default()
            },
        },
        warning,
    })
}

/// A signed server JWT and what went into it. `Debug` shows the claims, not the token.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SignedServerToken {
    /// The compact JWS for `configure.server_jwt`.
    pub token: String,
    /// The claims as signed.
    pub claims: ServerClaims,
    /// The "too short" warning, if any.
    pub warning: Option<String>,
}

impl fmt::Debug for SignedServerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignedServerToken")
            .field("token", &"***")
            .field("claims", &self.claims)
            .field("warning", &self.warning)
            .finish()
    }
}

/// Builds, optionally chains (when a `jwt_signing_token` is given) and signs a server JWT.
pub(crate) fn sign_server_token(
    input: &ServerClaimsInput<'_>,
    key: &SigningKey,
    chain: Option<&SigningToken>,
) -> Result<SignedServerToken, TokenError> {
    let BuiltServerClaims {
        mut claims,
        warning,
    } = build_server_claims(input)?;
    if let Some(token) = chain {
        add_chain_issuer_data(&mut claims, token, key)?;
    }
    let token = key.sign_jwt(&claims)?;
    Ok(SignedServerToken {
        token,
        claims,
        warning,
    })
}
