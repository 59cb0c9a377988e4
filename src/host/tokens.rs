//! Choria JWTs in provisioning: verifying a node's provisioning JWT, and signing the server JWT.
//!
//! Why it exists: with the `jwt` feature the provisioner must check the `provisioning.jwt` a node
//! returns (`spec/tokens.md` §2), and with `ed25519` it issues the node's `server.jwt`, optionally
//! as a chain issuer (§3–§5). Both must interoperate with `choria-io/tokens` and golang-jwt v5:
//! same algorithms (RS256/384/512 and EdDSA only), same claim names and omission rules, same
//! claim order (so EdDSA tokens are byte-identical to Go's for the same inputs), same error texts
//! where Go has them.
//!
//! What it must never do: accept `alg: none`, HMAC or any algorithm not listed; panic on a
//! hostile token (size-capped, every decode checked); read the clock where a test needs a fixed
//! time (every check takes `now`); or show tokens, seeds or private keys in `Debug`/`Display`
//! output or errors. Key files are loaded through [`VerifyKey::load`] and [`SigningKey::load`],
//! which the configuration validator calls at start-up so a bad path fails early.
//!
//! Deliberate differences from Go (all tightenings or tolerances of obvious operator mistakes):
//! * RSA keys must be at least 2048 bits (ring's limit), both to verify and to sign;
//! * hex key files (ed25519 public key, seed) may carry surrounding white space such as a
//!   trailing newline; Go rejects them (`could not parse ed25519 public data`, `unsupported key`);
//! * a hex `jwt_verify_cert` string is length-checked (32 bytes) when loaded, not per node;
//! * JSON claim names are matched exactly (Go's decoder is case-insensitive).

use crate::host::pem;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use der::asn1::UintRef;
use der::Decode;
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// golang-jwt's segment encoding: base64url without padding, trailing bits tolerated on decode.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Largest JWT accepted from a node or a file; real ones are 0.5–2 KB.
pub const MAX_TOKEN_LEN: usize = 64 * 1024;

/// Largest key or token file read.
pub const MAX_KEY_FILE_LEN: u64 = 1024 * 1024;

/// The `purpose` (or, for old tokens, `sub`) of a provisioning JWT.
pub const PROVISIONING_PURPOSE: &str = "choria_provisioning";

/// The `purpose` of a server JWT.
pub const SERVER_PURPOSE: &str = "choria_server";

/// The `purpose` a `jwt_signing_token` must have.
pub const CLIENT_ID_PURPOSE: &str = "choria_client_id";

/// The `iss` of server JWTs signed without a chain.
pub const SERVER_TOKEN_ISSUER: &str = "Choria Provisioner";

/// Organisation used when a token or the helper gives none.
pub const DEFAULT_ORG: &str = "choria";

/// Prefix of a chain issuer's `iss`.
pub const CHAIN_ISSUER_PREFIX: &str = "C-";

/// A requested `server_claims.exp` below this many seconds (10 years) is taken as a duration
/// ("seconds from now"); at or above it, as an absolute Unix time. See [`build_server_claims`].
pub const EXP_DURATION_THRESHOLD: i64 = 315_360_000;

/// Server JWT lifetimes at or below this (seconds) are replaced by the configured default.
pub const MIN_SERVER_VALIDITY: i64 = 3600;

const OID_RSA_ENCRYPTION: der::oid::ObjectIdentifier =
    der::oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

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
    /// Token longer than [`MAX_TOKEN_LEN`].
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

// ------------------------------------------------------------------------- claim types

fn is_false(b: &bool) -> bool {
    !*b
}

/// (De)serializes a JWT NumericDate: whole Unix seconds; fractional input is truncated, as
/// golang-jwt does with its one-second precision.
mod numeric_date {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_i64(*n),
            None => s.serialize_none(),
        }
    }

    struct V;

    impl<'de> Visitor<'de> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a numeric date")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(i64::try_from(v).unwrap_or(i64::MAX)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // `as` saturates; JSON has no NaN or infinity.
            Ok(Some(v.trunc() as i64))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_option(V)
    }
}

/// (De)serializes `aud`: a string or an array of strings; one value is written as a string.
mod audience {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        if v.len() == 1 {
            s.serialize_str(&v[0])
        } else {
            v.serialize(s)
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
        None(()),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(match Aud::deserialize(d)? {
            Aud::One(s) => vec![s],
            Aud::Many(v) => v,
            Aud::None(()) => Vec::new(),
        })
    }
}

/// The claims every Choria token embeds, in Go's order (`purpose` always written, the rest
/// omitted when empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandardClaims {
    /// Token kind: `choria_provisioning`, `choria_server`, `choria_client_id`.
    #[serde(default)]
    pub purpose: String,
    /// Trust chain signature.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tcs: String,
    /// Hex ed25519 public key tied to the token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
    /// Chain issuer's expiry (Unix seconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "numeric_date"
    )]
    pub issexp: Option<i64>,
    /// Issuer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iss: String,
    /// Subject.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub: String,
    /// Audience (unused by Choria).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "audience")]
    pub aud: Vec<String>,
    /// Expiry (Unix seconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "numeric_date"
    )]
    pub exp: Option<i64>,
    /// Not before (Unix seconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "numeric_date"
    )]
    pub nbf: Option<i64>,
    /// Issued at (Unix seconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "numeric_date"
    )]
    pub iat: Option<i64>,
    /// Token id (a KSUID for tokens Choria makes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
}

/// A verified provisioning JWT (`tokens.ProvisioningClaims`), serialized exactly as the Go
/// provisioner hands it to the helper under `jwt`: `cht`, `chs`, `chu`, `chsrv`, `chpd`, `chrd`,
/// `chf`, `chusr`, `chpwd`, `extensions` (written as `null` when absent), `ou`, `v2`, `update`,
/// then the standard claims. Unknown claims are dropped. `Debug` redacts `cht` and `chpwd`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisioningClaims {
    /// Provisioning token every `choria_provision` request must carry (secret).
    #[serde(default)]
    pub cht: String,
    /// Provisioning connection uses TLS.
    #[serde(default)]
    pub chs: bool,
    /// Comma-separated provisioning broker URLs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chu: String,
    /// SRV domain for the provisioning broker.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chsrv: String,
    /// Provisioning mode is the default.
    #[serde(default)]
    pub chpd: bool,
    /// Registration data file used while provisioning.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chrd: String,
    /// Facts file used while provisioning.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chf: String,
    /// Broker user for the provisioning connection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chusr: String,
    /// Broker password for the provisioning connection (secret).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chpwd: String,
    /// Free-form extra data; `null` when unset.
    #[serde(default)]
    pub extensions: Option<serde_json::Map<String, serde_json::Value>>,
    /// Organisation; verification fills in `choria` when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ou: String,
    /// Use protocol v2 while provisioning.
    #[serde(default, skip_serializing_if = "is_false")]
    pub v2: bool,
    /// The provisioner may upgrade the server in place.
    #[serde(default, skip_serializing_if = "is_false")]
    pub update: bool,
    /// Standard claims.
    #[serde(flatten)]
    pub standard: StandardClaims,
}

impl fmt::Debug for ProvisioningClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("ProvisioningClaims")
            .field("cht", &redact(&self.cht))
            .field("chs", &self.chs)
            .field("chu", &self.chu)
            .field("chsrv", &self.chsrv)
            .field("chpd", &self.chpd)
            .field("chrd", &self.chrd)
            .field("chf", &self.chf)
            .field("chusr", &self.chusr)
            .field("chpwd", &redact(&self.chpwd))
            .field(
                "extensions",
                &self
                    .extensions
                    .as_ref()
                    .map(|m| m.keys().collect::<Vec<_>>()),
            )
            .field("ou", &self.ou)
            .field("v2", &self.v2)
            .field("update", &self.update)
            .field("standard", &self.standard)
            .finish()
    }
}

/// Extra abilities of a server (`tokens.ServerPermissions`), each written only when true.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPermissions {
    /// May use `<collective>.submission.in.>`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub submission: bool,
    /// May use Choria Streams.
    #[serde(default, skip_serializing_if = "is_false")]
    pub streams: bool,
    /// May use governors (needs `streams`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub governor: bool,
    /// May listen for service requests.
    #[serde(default, skip_serializing_if = "is_false")]
    pub service_host: bool,
}

/// The server JWT claims (`tokens.ServerClaims`) in Go's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerClaims {
    /// Node identity.
    #[serde(default)]
    pub identity: String,
    /// Collectives the node may join.
    #[serde(default)]
    pub collectives: Vec<String>,
    /// Extra permissions; omitted when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<ServerPermissions>,
    /// Organisation / broker account.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ou: String,
    /// Extra subjects the node may publish to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pub_subjects: Vec<String>,
    /// Standard claims.
    #[serde(flatten)]
    pub standard: StandardClaims,
}

/// What a helper may put in `server_claims` (other keys are accepted and ignored, as in Go).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RequestedServerClaims {
    /// Organisation; `choria` when empty.
    #[serde(default)]
    pub ou: String,
    /// Requested expiry: see [`build_server_claims`] for how it is read.
    #[serde(default, with = "numeric_date")]
    pub exp: Option<i64>,
    /// Collectives; used when non-empty.
    #[serde(default)]
    pub collectives: Vec<String>,
    /// Extra publish subjects; used when non-empty.
    #[serde(default)]
    pub pub_subjects: Vec<String>,
    /// Permissions; used when present.
    #[serde(default)]
    pub permissions: Option<ServerPermissions>,
}

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
struct RsaPublicKeyAsn1<'a> {
    modulus: UintRef<'a>,
    public_exponent: UintRef<'a>,
}

fn rsa_modulus_bits(pkcs1: &[u8]) -> usize {
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

fn check_rsa_public(pkcs1: Vec<u8>) -> Result<VerifyKey, TokenError> {
    RsaPublicKeyAsn1::from_der(&pkcs1)
        .map_err(|e| TokenError::VerifyCertParse(format!("not an RSA public key: {e}")))?;
    let bits = rsa_modulus_bits(&pkcs1);
    if bits < 2048 {
        return Err(TokenError::RsaKeyTooSmall(bits));
    }
    Ok(VerifyKey::Rsa(pkcs1))
}

fn read_limited(path: &Path) -> Result<Vec<u8>, TokenError> {
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
    pub fn load(setting: &str) -> Result<VerifyKey, TokenError> {
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
    pub fn from_file_contents(data: &[u8]) -> Result<VerifyKey, TokenError> {
        if data.starts_with(b"-----BEGIN CERTIFICATE") || data.starts_with(b"-----BEGIN PUBLIC KEY")
        {
            let text = std::str::from_utf8(data)
                .map_err(|_| TokenError::VerifyCertParse("not UTF-8".into()))?;
            let block = pem::decode(text).ok_or_else(|| {
                TokenError::VerifyCertParse(
                    "invalid key: key must be a PEM encoded PKCS1 or PKCS8 key".into(),
                )
            })?;
            return VerifyKey::from_der(&block.der);
        }
        let text = std::str::from_utf8(data).map_err(|_| TokenError::Ed25519PublicData)?;
        VerifyKey::from_hex(text)
    }

    /// An RSA public key from SubjectPublicKeyInfo, certificate or PKCS#1 DER.
    pub fn from_der(der_bytes: &[u8]) -> Result<VerifyKey, TokenError> {
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
    pub fn from_hex(s: &str) -> Result<VerifyKey, TokenError> {
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

// ------------------------------------------------------------------------- verification

/// The header fields we read.
#[derive(Deserialize)]
struct Header {
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
    let alg: &'static signature::RsaParameters = match header.alg.as_str() {
        "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
        "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
        "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
        "EdDSA" => {
            let VerifyKey::Ed25519(pk) = key else {
                return Err(TokenError::Ed25519KeyRequired);
            };
            let sig = B64URL
                .decode(parts[2])
                .map_err(|_| TokenError::BadSignature)?;
            let signed = &token[..parts[0].len() + 1 + parts[1].len()];
            signature::UnparsedPublicKey::new(&signature::ED25519, pk)
                .verify(signed.as_bytes(), &sig)
                .map_err(|_| TokenError::BadSignature)?;
            return Ok(claims);
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            return Err(TokenError::UnsupportedAlgorithm(shown));
        }
    };
    let VerifyKey::Rsa(pkcs1) = key else {
        return Err(TokenError::RsaKeyRequired);
    };
    let sig = B64URL
        .decode(parts[2])
        .map_err(|_| TokenError::BadSignature)?;
    let signed = &token[..parts[0].len() + 1 + parts[1].len()];
    signature::UnparsedPublicKey::new(alg, pkcs1)
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

/// Verifies a node's provisioning JWT at time `now` (Unix seconds), `spec/tokens.md` §2.1:
/// signature (RS256/384/512 with an RSA key, EdDSA with an ed25519 key, nothing else), `exp` and
/// `nbf` when present, `purpose` or `sub` equal to `choria_provisioning`, `ou` defaulted to
/// `choria`, and for a token carrying `tcs` the chain-issuer rule (`iss` starts with `C-`,
/// `issexp` set, and the earlier of `exp`/`issexp` not passed).
pub fn verify_provisioning_token(
    token: &str,
    key: &VerifyKey,
    now: i64,
) -> Result<ProvisioningClaims, TokenError> {
    let claims_json = verify_jws(token, key)?;
    let mut claims: ProvisioningClaims = serde_json::from_slice(&claims_json).map_err(|e| {
        TokenError::Malformed(format!(
            "could not JSON decode claim: {}",
            e.classify_text()
        ))
    })?;
    check_times(&claims.standard, now)?;
    let s = &claims.standard;
    if s.sub != PROVISIONING_PURPOSE && s.purpose != PROVISIONING_PURPOSE {
        return Err(TokenError::NotProvisioningToken);
    }
    if claims.ou.is_empty() {
        claims.ou = DEFAULT_ORG.to_string();
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
    Ok(claims)
}

/// [`verify_provisioning_token`] at the current system time.
pub fn verify_provisioning_token_now(
    token: &str,
    key: &VerifyKey,
) -> Result<ProvisioningClaims, TokenError> {
    verify_provisioning_token(token, key, unix_now())
}

/// Describes a serde_json error without quoting the input (its messages can echo claim values,
/// which may be secrets): only the error category and position.
trait ClassifyText {
    fn classify_text(&self) -> String;
}

impl ClassifyText for serde_json::Error {
    fn classify_text(&self) -> String {
        let kind = match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "claim of the wrong type",
            serde_json::error::Category::Eof => "truncated JSON",
        };
        format!("{kind} at column {}", self.column())
    }
}

/// The current Unix time in seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

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
                "SigningKey::Ed25519(public {}, seed <redacted>)",
                hex::encode(k.public_key().as_ref())
            ),
            SigningKey::Rsa(k) => write!(
                f,
                "SigningKey::Rsa({} bits, private <redacted>)",
                k.public().modulus_len() * 8
            ),
        }
    }
}

impl SigningKey {
    /// Reads and parses `jwt_signing_key` ([`SigningKey::from_file_contents`]).
    pub fn load(path: impl AsRef<Path>) -> Result<SigningKey, TokenError> {
        let path = path.as_ref();
        let data = read_limited(path)?;
        SigningKey::from_file_contents(&data, &path.display().to_string())
    }

    /// Interprets key file bytes as Go's `SignTokenWithKeyFile` does: content starting with
    /// `-----BEGIN RSA PRIVATE KEY` or `-----BEGIN PRIVATE KEY` is an RSA key (PKCS#1 or
    /// PKCS#8, both tried) signing RS256; otherwise the content must be the 64 hex characters of
    /// an ed25519 seed, signing EdDSA. Unlike Go, white space around the seed (a trailing
    /// newline from an editor or `echo`) is accepted. `name` is used in error messages.
    pub fn from_file_contents(data: &[u8], name: &str) -> Result<SigningKey, TokenError> {
        if data.starts_with(b"-----BEGIN RSA PRIVATE KEY")
            || data.starts_with(b"-----BEGIN PRIVATE KEY")
        {
            let text = std::str::from_utf8(data)
                .map_err(|_| TokenError::SigningKeyParse("not UTF-8".into()))?;
            let block = pem::decode(text).ok_or_else(|| {
                TokenError::SigningKeyParse(
                    "invalid key: key must be a PEM encoded PKCS1 or PKCS8 key".into(),
                )
            })?;
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
    pub fn algorithm(&self) -> &'static str {
        match self {
            SigningKey::Ed25519(_) => "EdDSA",
            SigningKey::Rsa(_) => "RS256",
        }
    }

    /// Hex of the ed25519 public key, `None` for RSA.
    pub fn ed25519_public_hex(&self) -> Option<String> {
        match self {
            SigningKey::Ed25519(k) => Some(hex::encode(k.public_key().as_ref())),
            SigningKey::Rsa(_) => None,
        }
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
fn go_html_escape(json: &str) -> String {
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
pub struct SigningToken {
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
    pub fn load(path: impl AsRef<Path>) -> Result<SigningToken, TokenError> {
        let data = read_limited(path.as_ref())?;
        let text = std::str::from_utf8(&data).map_err(|_| {
            TokenError::SigningToken("could not parse signing token: not UTF-8".into())
        })?;
        SigningToken::parse(text)
    }

    /// Parses the token text unverified and checks, in Go's order: purpose `choria_client_id`
    /// (`not a client token`), `tcs` (`no Trust Chain Signature claim in JWT Signing Token`),
    /// `jti` (`id not set`), `public_key` (`public key not set`), `exp` (`issuer has no expiry`).
    pub fn parse(text: &str) -> Result<SigningToken, TokenError> {
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

/// Applies `AddChainIssuerData` (`spec/tokens.md` §5) to server claims whose `jti` is set:
/// `iss = C-<token jti>.<token public_key>`, `issexp = token exp`, `exp` lowered to the token's
/// expiry if later (or absent), `tcs = <token tcs>.<hex ed25519 sig over "<jti>.<token tcs>">`.
/// `key` must be the ed25519 seed matching the token's `public_key`.
pub fn add_chain_issuer_data(
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

// ------------------------------------------------------------------------- server claims

/// Everything [`build_server_claims`] needs about one node.
#[derive(Debug, Clone)]
pub struct ServerClaimsInput<'a> {
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
pub struct BuiltServerClaims {
    /// The claims, ready for [`add_chain_issuer_data`] and [`SigningKey::sign_jwt`].
    pub claims: ServerClaims,
    /// `Server validity <v> is too short, setting to default <d>` when that rule fired.
    pub warning: Option<String>,
}

/// Builds the server JWT claims as the Go provisioner does (`spec/tokens.md` §3.1), with two
/// documented fixes:
///
/// * collectives: `["mcollective"]`, replaced by `["choria"]` when the security provider is
///   `choria`, replaced by the `collectives` setting split on `,` — **each part trimmed and empty
///   parts dropped** (Go keeps `" b"`; an all-empty setting leaves the previous value), replaced
///   by non-empty requested `collectives`;
/// * `exp`: Go reads the helper's `server_claims.exp` as an absolute Unix time, while its docs and
///   sample helpers send a duration (`5*365*24*3600`) that Go then silently ignores. Here a
///   non-zero value below [`EXP_DURATION_THRESHOLD`] (10 years of seconds; no real absolute time
///   is that small, it would be before 1980) is a duration in seconds from `now`; a larger one is
///   an absolute Unix time, validity = `exp - now`.
///
/// Then, as in Go, a validity of one hour or less (including a negative one) is replaced by the
/// default with a warning; `ou` is `choria` unless requested; `permissions` and `pub_subjects`
/// are taken when given; `iss` is `Choria Provisioner`; `iat = nbf = now`; `exp = now + validity`.
pub fn build_server_claims(input: &ServerClaimsInput<'_>) -> Result<BuiltServerClaims, TokenError> {
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
    let pk: [u8; 32] = crate::choria::protocol::ids::unhex(input.public_key_hex)
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

/// A signed server JWT and what went into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedServerToken {
    /// The compact JWS for `configure.server_jwt`.
    pub token: String,
    /// The claims as signed.
    pub claims: ServerClaims,
    /// The "too short" warning, if any.
    pub warning: Option<String>,
}

/// Builds, optionally chains (when a `jwt_signing_token` is given) and signs a server JWT.
pub fn sign_server_token(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_html_escape_only_touches_special_chars() {
        assert_eq!(
            go_html_escape(r#"{"a":"x.>&<"}"#),
            r#"{"a":"x.\u003e\u0026\u003c"}"#
        );
    }

    #[test]
    fn provisioning_claims_debug_redacts_secrets() {
        let c = ProvisioningClaims {
            cht: "toomanysecrets".into(),
            chpwd: "hunter2".into(),
            ..Default::default()
        };
        let d = format!("{c:?}");
        assert!(
            !d.contains("toomanysecrets") && !d.contains("hunter2"),
            "{d}"
        );
    }

    #[test]
    fn signing_key_debug_redacts_seed() {
        let k = SigningKey::from_ed25519_seed(&[0x11; 32]);
        let d = format!("{k:?}");
        assert!(!d.contains("1111111111"), "{d}");
    }
}
