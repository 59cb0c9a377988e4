//! Every way loading keys, verifying, building or signing a token can fail.

use super::*;

/// Every way loading keys, verifying, building or signing a token can fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// `jwt_verify_cert` is empty.
    #[error("no JWT verification certificate configured, cannot validate JWT")]
    NoVerifyCert,
    /// A key or token file could not be read (path and OS reason).
    #[error("could not read {path}: {reason}")]
    ReadFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A PEM verification file that does not hold a usable RSA public key.
    #[error("could not parse validation certificate: {0}")]
    VerifyCertParse(String),
    /// Hex ed25519 public key data that is not hex.
    #[error("could not parse ed25519 public data: invalid hex encoding")]
    Ed25519PublicData,
    /// Hex ed25519 public key data that is not 32 bytes.
    #[error("invalid ed25519 public key size ({0} bytes, need 32)")]
    Ed25519PublicKeySize(usize),
    /// An RSA key smaller than ring accepts (2048 bits).
    #[error("RSA key of {0} bits is too small, at least 2048 bits are required")]
    RsaKeyTooSmall(usize),
    /// The node sent no JWT.
    #[error("no JWT received")]
    NoJwt,
    /// Token longer than `MAX_TOKEN_LEN`.
    #[error("could not parse provisioner token: token of {0} bytes exceeds {max}", max = MAX_TOKEN_LEN)]
    TooLarge(usize),
    /// Not three base64url segments, bad JSON header or claims.
    #[error("could not parse provisioner token: token is malformed: {0}")]
    Malformed(String),
    /// `alg` is not RS256, RS384, RS512 or EdDSA (this covers `none` and HS256).
    #[error("could not parse provisioner token: token signature is invalid: signing method {0} is invalid")]
    UnsupportedAlgorithm(String),
    /// An RS* token against an ed25519 key.
    #[error("could not parse provisioner token: token is unverifiable: error while executing keyfunc: rsa public key required")]
    RsaKeyRequired,
    /// An EdDSA token against an RSA key.
    #[error("could not parse provisioner token: token is unverifiable: error while executing keyfunc: ed25519 public key required")]
    Ed25519KeyRequired,
    /// The signature does not verify.
    #[error("could not parse provisioner token: token signature is invalid")]
    BadSignature,
    /// `exp` has passed.
    #[error("could not parse provisioner token: token has invalid claims: token is expired")]
    Expired,
    /// `nbf` is in the future.
    #[error("could not parse provisioner token: token has invalid claims: token is not valid yet")]
    NotValidYet,
    /// Neither `purpose` nor `sub` is `choria_provisioning`.
    #[error("not a provisioning token")]
    NotProvisioningToken,
    /// A token with `tcs` whose chain issuer data is missing or expired (Go: `token is expired`).
    #[error("token is expired")]
    IssuerExpired,
    /// `jwt_signing_key` file is neither an RSA PEM nor a 64-hex-character seed.
    #[error("unsupported key in {0}")]
    UnsupportedSigningKey(String),
    /// `jwt_signing_key` RSA PEM that does not parse as PKCS#1 or PKCS#8 RSA.
    #[error("could not parse signing key: {0}")]
    SigningKeyParse(String),
    /// `jwt_signing_key` seed file that is 64 characters but not hex.
    #[error("invalid ed25519 seed file: not hex")]
    InvalidSeed,
    /// The chain-issuer form needs an ed25519 seed as `jwt_signing_key`.
    #[error("jwt_signing_key must be an ed25519 seed when jwt_signing_token is set")]
    ChainNeedsEd25519Key,
    /// Problem with `jwt_signing_token` (the message is Go's where it has one).
    #[error("{0}")]
    SigningToken(String),
    /// No hex ed25519 public key from `gen25519`, or not 32 bytes.
    #[error("no ed25519 public key set")]
    NoNodePublicKey,
    /// Server claims without identity.
    #[error("identity is required")]
    NoIdentity,
    /// Server claims without collectives.
    #[error("at least one collective is required")]
    NoCollectives,
    /// Zero default validity.
    #[error("no default validity configured")]
    NoDefaultValidity,
    /// The signing primitive failed.
    #[error("could not sign token using key")]
    Sign,
}

/// Why [`unverified_claims`] could not read a token's claims. No variant quotes the
/// token or any claim's value: the JSON error says what was wrong, what was expected
/// and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsError {
    /// Not three dot-separated parts.
    #[error("the token is not a JWT (three dot-separated parts)")]
    NotJwt,
    /// The claims part is not base64url.
    #[error("the token's claims are not base64url")]
    NotBase64,
    /// The claims are not JSON of the expected shape (what was wrong and where, never
    /// the value: `json_text::describe`).
    #[error("the token's claims do not parse: {0}")]
    Parse(String),
}
