//! Every way loading keys, verifying, building or signing a token can fail.

use super::*;
use std::fmt;

/// Every way loading keys, verifying, building or signing a token can fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// `jwt_verify_cert` is empty.
    NoVerifyCert,
    /// A key or token file could not be read (path and OS reason).
    ReadFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A PEM verification file that does not hold a usable RSA public key.
    VerifyCertParse(String),
    /// Hex ed25519 public key data that is not hex.
    Ed25519PublicData,
    /// Hex ed25519 public key data that is not 32 bytes.
    Ed25519PublicKeySize(usize),
    /// An RSA key smaller than ring accepts (2048 bits).
    RsaKeyTooSmall(usize),
    /// The node sent no JWT.
    NoJwt,
    /// Token longer than `MAX_TOKEN_LEN`.
    TooLarge(usize),
    /// Not three base64url segments, bad JSON header or claims.
    Malformed(String),
    /// `alg` is not RS256, RS384, RS512 or EdDSA (this covers `none` and HS256).
    UnsupportedAlgorithm(String),
    /// An RS* token against an ed25519 key.
    RsaKeyRequired,
    /// An EdDSA token against an RSA key.
    Ed25519KeyRequired,
    /// The signature does not verify.
    BadSignature,
    /// `exp` has passed.
    Expired,
    /// `nbf` is in the future.
    NotValidYet,
    /// Neither `purpose` nor `sub` is `choria_provisioning`.
    NotProvisioningToken,
    /// A token with `tcs` whose chain issuer data is missing or expired (Go: `token is expired`).
    IssuerExpired,
    /// `jwt_signing_key` file is neither an RSA PEM nor a 64-hex-character seed.
    UnsupportedSigningKey(String),
    /// `jwt_signing_key` RSA PEM that does not parse as PKCS#1 or PKCS#8 RSA.
    SigningKeyParse(String),
    /// `jwt_signing_key` seed file that is 64 characters but not hex.
    InvalidSeed,
    /// The chain-issuer form needs an ed25519 seed as `jwt_signing_key`.
    ChainNeedsEd25519Key,
    /// Problem with `jwt_signing_token` (the message is Go's where it has one).
    SigningToken(String),
    /// No hex ed25519 public key from `gen25519`, or not 32 bytes.
    NoNodePublicKey,
    /// Server claims without identity.
    NoIdentity,
    /// Server claims without collectives.
    NoCollectives,
    /// Zero default validity.
    NoDefaultValidity,
    /// The signing primitive failed.
    Sign,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const P: &str = "could not parse provisioner token";
        match self {
            TokenError::NoVerifyCert => write!(
                f,
                "no JWT verification certificate configured, cannot validate JWT"
            ),
            TokenError::ReadFile { path, reason } => write!(f, "could not read {path}: {reason}"),
            TokenError::VerifyCertParse(e) => {
                write!(f, "could not parse validation certificate: {e}")
            }
            TokenError::Ed25519PublicData => write!(
                f,
                "could not parse ed25519 public data: invalid hex encoding"
            ),
            TokenError::Ed25519PublicKeySize(n) => {
                write!(f, "invalid ed25519 public key size ({n} bytes, need 32)")
            }
            TokenError::RsaKeyTooSmall(bits) => write!(
                f,
                "RSA key of {bits} bits is too small, at least 2048 bits are required"
            ),
            TokenError::NoJwt => write!(f, "no JWT received"),
            TokenError::TooLarge(n) => {
                write!(f, "{P}: token of {n} bytes exceeds {MAX_TOKEN_LEN}")
            }
            TokenError::Malformed(e) => write!(f, "{P}: token is malformed: {e}"),
            TokenError::UnsupportedAlgorithm(a) => write!(
                f,
                "{P}: token signature is invalid: signing method {a} is invalid"
            ),
            TokenError::RsaKeyRequired => write!(
                f,
                "{P}: token is unverifiable: error while executing keyfunc: rsa public key required"
            ),
            TokenError::Ed25519KeyRequired => write!(
                f,
                "{P}: token is unverifiable: error while executing keyfunc: ed25519 public key required"
            ),
            TokenError::BadSignature => write!(f, "{P}: token signature is invalid"),
            TokenError::Expired => write!(f, "{P}: token has invalid claims: token is expired"),
            TokenError::NotValidYet => {
                write!(f, "{P}: token has invalid claims: token is not valid yet")
            }
            TokenError::NotProvisioningToken => write!(f, "not a provisioning token"),
            TokenError::IssuerExpired => write!(f, "token is expired"),
            TokenError::UnsupportedSigningKey(p) => write!(f, "unsupported key in {p}"),
            TokenError::SigningKeyParse(e) => write!(f, "could not parse signing key: {e}"),
            TokenError::InvalidSeed => write!(f, "invalid ed25519 seed file: not hex"),
            TokenError::ChainNeedsEd25519Key => write!(
                f,
                "jwt_signing_key must be an ed25519 seed when jwt_signing_token is set"
            ),
            TokenError::SigningToken(e) => write!(f, "{e}"),
            TokenError::NoNodePublicKey => write!(f, "no ed25519 public key set"),
            TokenError::NoIdentity => write!(f, "identity is required"),
            TokenError::NoCollectives => write!(f, "at least one collective is required"),
            TokenError::NoDefaultValidity => write!(f, "no default validity configured"),
            TokenError::Sign => write!(f, "could not sign token using key"),
        }
    }
}

impl std::error::Error for TokenError {}

/// Why [`unverified_claims`] could not read a token's claims. No variant quotes the
/// token or any claim's value: the JSON error says what was wrong, what was expected
/// and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimsError {
    /// Not three dot-separated parts.
    NotJwt,
    /// The claims part is not base64url.
    NotBase64,
    /// The claims are not JSON of the expected shape (what was wrong and where, never
    /// the value: `json_text::describe`).
    Parse(String),
}

impl fmt::Display for ClaimsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimsError::NotJwt => {
                f.write_str("the token is not a JWT (three dot-separated parts)")
            }
            ClaimsError::NotBase64 => f.write_str("the token's claims are not base64url"),
            ClaimsError::Parse(e) => write!(f, "the token's claims do not parse: {e}"),
        }
    }
}

impl std::error::Error for ClaimsError {}
