//! The claims of provisioning, server and signing tokens, with Go's names and omission rules.

use super::*;
use base64::Engine;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

// ------------------------------------------------------------------------- claim types

pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

/// (De)serializes a JWT NumericDate: whole Unix seconds; fractional input is truncated, as
/// golang-jwt does with its one-second precision.
pub(super) mod numeric_date {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
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

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_option(V)
    }
}

/// (De)serializes `aud`: a string or an array of strings; one value is written as a string.
pub(super) mod audience {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
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

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
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
        let redact = |s: &str| if s.is_empty() { "" } else { "***" };
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
pub(crate) struct RequestedServerClaims {
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
    pub permissions: Option<ServerPermissions>,
}

/// The claims of `token`, read without verifying its signature.
pub fn unverified_claims<T: serde::de::DeserializeOwned>(token: &str) -> Result<T, ClaimsError> {
    let mut parts = token.split('.');
    let claims = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(claims), Some(_), None) => claims,
        _ => return Err(ClaimsError::NotJwt),
    };
    let claims = B64URL.decode(claims).map_err(|_| ClaimsError::NotBase64)?;
    // Described without the value: a claim of the wrong type may be a secret (a
    // token, a password) or bytes meant to forge a log line.
    serde_json::from_slice(&claims).map_err(|e| ClaimsError::Parse(crate::json_text::describe(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Times {
        #[allow(dead_code)]
        exp: u64,
    }

    fn token_with(claims: &str) -> String {
        format!("e30.{}.c2ln", B64URL.encode(claims))
    }

    #[test]
    fn a_claim_of_the_wrong_type_is_named_but_never_quoted() {
        let e = unverified_claims::<Times>(&token_with(r#"{"exp":"s3cret\nforged line"}"#))
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("invalid type: string, expected u64"),
            "{text}"
        );
        assert!(!text.contains("s3cret") && !text.contains('\n'), "{text}");
        assert_eq!(
            unverified_claims::<Times>("a.b").unwrap_err(),
            ClaimsError::NotJwt
        );
        assert_eq!(
            unverified_claims::<Times>("a.!!.c").unwrap_err(),
            ClaimsError::NotBase64
        );
        assert_eq!(
            unverified_claims::<Times>(&token_with(r#"{"exp":5}"#))
                .unwrap()
                .exp,
            5
        );
    }
}
