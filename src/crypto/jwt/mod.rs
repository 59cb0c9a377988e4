//! Choria JWTs in provisioning: verifying a node's provisioning JWT, and signing the server JWT.
//!
//! Why it exists: with the `jwt` feature the provisioner must check the `provisioning.jwt` a node
//! returns (choria-io/tokens), and with `ed25519` it issues the node's `server.jwt`, optionally
//! as a chain issuer (§3–§5). Both must interoperate with `choria-io/tokens` and golang-jwt v5:
//! same algorithms (RS256/384/512 and EdDSA only), same claim names and omission rules, same
//! claim order (so EdDSA tokens are byte-identical to Go's for the same inputs), same error texts
//! where Go has them.
//!
//! What it must never do: accept `alg: none`, HMAC or any algorithm not listed; panic on a
//! hostile token (size-capped, every decode checked); read the clock where a test needs a fixed
//! time (every check takes `now`); or show tokens, seeds or private keys in `Debug`/`Display`
//! output or errors. Key files are loaded through `VerifyKey::load` and `SigningKey::load`,
//! which the configuration validator calls at start-up so a bad path fails early.
//!
//! Deliberate differences from Go (all tightenings or tolerances of obvious operator mistakes):
//! * RSA keys must be at least 2048 bits (ring's limit), both to verify and to sign;
//! * hex key files (ed25519 public key, seed) may carry surrounding white space such as a
//!   trailing newline; Go rejects them (`could not parse ed25519 public data`, `unsupported key`);
//! * a hex `jwt_verify_cert` string is length-checked (32 bytes) when loaded, not per node;
//! * JSON claim names are matched exactly (Go's decoder is case-insensitive).

mod claims;
mod errors;
mod issued;
mod server_claims;
mod signing_key;
mod verify;
mod verify_key;

use super::pem;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;

pub use claims::*;
pub(crate) use errors::*;
pub use issued::*;
pub(crate) use server_claims::*;
pub use signing_key::*;
pub use verify::*;
pub use verify_key::*;

/// golang-jwt's segment encoding: base64url without padding, trailing bits tolerated on decode.
pub(crate) const B64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Largest JWT accepted from a node or a file; real ones are 0.5–2 KB.
pub(crate) const MAX_TOKEN_LEN: usize = 64 * 1024;

/// Largest key or token file read.
pub(crate) const MAX_KEY_FILE_LEN: u64 = 1024 * 1024;

/// The `purpose` (or, for old tokens, `sub`) of a provisioning JWT.
pub(crate) const PROVISIONING_PURPOSE: &str = "choria_provisioning";

/// The `purpose` of a server JWT.
pub const SERVER_PURPOSE: &str = "choria_server";

/// The `purpose` a `jwt_signing_token` must have (a client JWT's).
pub const CLIENT_ID_PURPOSE: &str = "choria_client_id";

/// The `iss` of server JWTs signed without a chain.
pub(crate) const SERVER_TOKEN_ISSUER: &str = "Choria Provisioner";

/// Organisation used when a token or the helper gives none.
pub(crate) const DEFAULT_ORG: &str = "choria";

/// Prefix of a chain issuer's `iss`.
pub(crate) const CHAIN_ISSUER_PREFIX: &str = "C-";

/// A requested `server_claims.exp` below this many seconds (10 years) is taken as a duration
/// ("seconds from now"); at or above it, as an absolute Unix time. See [`build_server_claims`].
pub(crate) const EXP_DURATION_THRESHOLD: i64 = 315_360_000;

/// Server JWT lifetimes at or below this (seconds) are replaced by the configured default.
pub(crate) const MIN_SERVER_VALIDITY: i64 = 3600;

/// The first PEM block of a key file, or `error` saying why there is none (Go's
/// message for a file that is not PEM).
pub(super) fn key_file_pem(
    data: &[u8],
    error: fn(String) -> TokenError,
) -> Result<pem::Block, TokenError> {
    let text = std::str::from_utf8(data).map_err(|_| error("not UTF-8".into()))?;
    pem::decode(text)
        .ok_or_else(|| error("invalid key: key must be a PEM encoded PKCS1 or PKCS8 key".into()))
}

pub(super) const OID_RSA_ENCRYPTION: der::oid::ObjectIdentifier =
    der::oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

#[cfg(test)]
mod spec_tests;
#[cfg(test)]
mod tests;
