//! The `choria` security provider's client JWT and ed25519 seed as the broker
//! connection uses them (go-choria `choria/connection.go` with choria-io/tokens'
//! `NatsConnectionHelpers`), and what a Choria broker will make of them
//! (go-choria's `broker/network/choria_auth.go`).
//!
//! The JWT is read without verifying its signature: the broker verifies it, and the
//! client rarely holds the issuer's key. The seed signs each server nonce. Neither the
//! token, the seed nor a signature is ever formatted by `Debug` or an error.

use std::fmt;
use std::io::Read as _;
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde::Deserialize;

use super::client_config::ClientConfig;
use crate::config::Problem;
use crate::crypto::jwt::{unverified_claims, CLIENT_ID_PURPOSE};

/// The broker user whose connections land in the provisioning account.
pub(crate) const PROVISIONER_USER: &str = "provisioner";
/// Client permission a broker with an organisation issuer requires of the
/// `provisioner` user (choria-io/tokens `ServerProvisioner`).
pub(crate) const PROVISIONER_PERMISSION: &str = "provisioner";
/// Client permission for Choria Streams (tokens `StreamsUser`).
pub(crate) const STREAMS_PERMISSION: &str = "streams_user";
/// Client permission for leader elections (tokens `ElectionUser`).
pub(crate) const ELECTION_PERMISSION: &str = "election_user";

/// The settings that name the two files.
pub(crate) const TOKEN_FILE_KEY: &str = "plugin.security.choria.token_file";
/// See [`TOKEN_FILE_KEY`].
pub(crate) const SEED_FILE_KEY: &str = "plugin.security.choria.seed_file";

/// Token and seed files are small; anything larger is not one.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The client JWT or the seed cannot be used: which setting, which file, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {path}: {problem}")]
pub struct CredentialError {
    /// `TOKEN_FILE_KEY` or `SEED_FILE_KEY`.
    pub key: &'static str,
    /// The file named by the setting.
    pub path: String,
    /// What is wrong (never quotes the file's content).
    pub problem: String,
}

impl CredentialError {
    /// The same error as a configuration `Problem` of its setting.
    pub(crate) fn to_problem(&self) -> Problem {
        Problem::with_value(self.key, &self.path, &self.problem)
    }
}

/// The claims of a client JWT that the connection and the start-up checks read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClientClaims {
    /// Choria caller id (`choria=provisioner`).
    #[serde(default)]
    pub callerid: String,
    /// `choria_client_id` for a client JWT.
    #[serde(default)]
    pub purpose: String,
    /// Organisation: the broker picks the issuer to verify with by it.
    #[serde(default)]
    pub ou: String,
    /// Hex ed25519 public key the nonce signature must verify with.
    #[serde(default)]
    pub public_key: String,
    /// Issuer (`I-<hex>` org issuer, `C-<id>.<hex>` chain issuer).
    #[serde(default)]
    pub iss: String,
    /// Expiry, Unix seconds.
    #[serde(default, deserialize_with = "numeric_date")]
    pub exp: Option<i64>,
    /// Not before, Unix seconds.
    #[serde(default, deserialize_with = "numeric_date")]
    pub nbf: Option<i64>,
    /// The `permissions` object (`{"provisioner": true, ...}`), in the token's order.
    pub permissions: Option<serde_json::Map<String, serde_json::Value>>,
}

/// golang-jwt's NumericDate: a JSON number of seconds, possibly with a fraction.
fn numeric_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let n: Option<f64> = Option::deserialize(d)?;
    Ok(n.filter(|n| n.is_finite())
        .map(|n| n.floor().clamp(i64::MIN as f64, i64::MAX as f64) as i64))
}

impl ClientClaims {
    /// The names of the permissions set to `true`, in the token's order.
    pub(crate) fn granted(&self) -> Vec<&str> {
        self.permissions
            .iter()
            .flatten()
            .filter(|(_, v)| v.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// True when `permission` is set to `true`.
    pub fn has(&self, permission: &str) -> bool {
        self.granted().contains(&permission)
    }
}

/// The client JWT of `plugin.security.choria.token_file`.
#[derive(Clone)]
pub(crate) struct ClientJwt {
    path: String,
    token: String,
    claims: ClientClaims,
}

impl fmt::Debug for ClientJwt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientJwt")
            .field("path", &self.path)
            .field("callerid", &self.claims.callerid)
            .field("token", &"***")
            .finish()
    }
}

fn read_small(key: &'static str, path: &str) -> Result<Vec<u8>, CredentialError> {
    let err = |problem: String| CredentialError {
        key,
        path: path.to_string(),
        problem,
    };
    if path.is_empty() {
        return Err(err("is not set".into()));
    }
    let file =
        std::fs::File::open(Path::new(path)).map_err(|e| err(format!("cannot be read: {e}")))?;
    let mut data = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| err(format!("cannot be read: {e}")))?;
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(err(format!("is larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(data)
}

impl ClientJwt {
    /// Reads the JWT in `path` as go-choria's client does: surrounding white space is
    /// dropped, the claims are read unverified, and the token must be a client token
    /// (`purpose` `choria_client_id`) with a caller id.
    pub(crate) fn load(path: &str) -> Result<ClientJwt, CredentialError> {
        let data = read_small(TOKEN_FILE_KEY, path)?;
        ClientJwt::parse(path, &data)
    }

    /// [`ClientJwt::load`] on bytes already read from `path`.
    pub(crate) fn parse(path: &str, data: &[u8]) -> Result<ClientJwt, CredentialError> {
        let err = |problem: String| CredentialError {
            key: TOKEN_FILE_KEY,
            path: path.to_string(),
            problem,
        };
        let text = std::str::from_utf8(data)
            .map_err(|_| err("is not text".into()))?
            .trim();
        if text.is_empty() {
            return Err(err("is empty".into()));
        }
        let claims: ClientClaims = unverified_claims(text).map_err(|e| err(e.to_string()))?;
        if claims.purpose != CLIENT_ID_PURPOSE {
            let shown: String = claims.purpose.chars().take(40).collect();
            return Err(err(format!(
                "holds a {} token, not a client JWT (purpose {CLIENT_ID_PURPOSE})",
                crate::untrusted::quoted(&shown)
            )));
        }
        if claims.callerid.is_empty() {
            return Err(err("the client JWT has no caller id (callerid)".into()));
        }
        Ok(ClientJwt {
            path: path.to_string(),
            token: text.to_string(),
            claims,
        })
    }

    /// The token as sent in CONNECT `auth_token` and `jwt`.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The file it was read from.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The claims read from it.
    pub(crate) fn claims(&self) -> &ClientClaims {
        &self.claims
    }

    /// The caller id (`callerid`).
    pub(crate) fn caller_id(&self) -> &str {
        &self.claims.callerid
    }

    /// True at and after its `exp` (golang-jwt's rule: valid while now < exp).
    pub(crate) fn expired(&self, now: i64) -> bool {
        self.claims.exp.is_some_and(|exp| now >= exp)
    }
}

/// The ed25519 seed of `plugin.security.choria.seed_file`.
pub(crate) struct Seed {
    key: Ed25519KeyPair,
    padded: bool,
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seed")
            .field("public_key", &self.public_hex())
            .finish()
    }
}

impl Seed {
    /// Reads a seed file: 64 hex digits, the 32-byte seed (choria-io/tokens).
    /// go-choria refuses a file with anything else in it, a trailing newline
    /// included; here white space around the digits is accepted and reported by
    /// [`Seed::padded`].
    pub(crate) fn load(path: &str) -> Result<Seed, CredentialError> {
        let data = read_small(SEED_FILE_KEY, path)?;
        Seed::parse(path, &data)
    }

    /// [`Seed::load`] on bytes already read from `path`.
    pub(crate) fn parse(path: &str, data: &[u8]) -> Result<Seed, CredentialError> {
        let err = |problem: &str| CredentialError {
            key: SEED_FILE_KEY,
            path: path.to_string(),
            problem: problem.to_string(),
        };
        let text = std::str::from_utf8(data).map_err(|_| err("is not a hex ed25519 seed"))?;
        let digits = text.trim();
        let seed = hex::decode(digits).map_err(|_| err("is not a hex ed25519 seed"))?;
        if seed.len() != 32 {
            return Err(CredentialError {
                key: SEED_FILE_KEY,
                path: path.to_string(),
                problem: format!(
                    "holds {} bytes of hex; an ed25519 seed is 32 bytes (64 hex digits)",
                    seed.len()
                ),
            });
        }
        let key = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| err("is not a usable ed25519 seed"))?;
        Ok(Seed {
            key,
            padded: digits.len() != text.len(),
        })
    }

    /// The public key as lowercase hex, as JWTs carry it.
    pub(crate) fn public_hex(&self) -> String {
        hex::encode(self.key.public_key().as_ref())
    }

    /// The server's nonce signed, base64url without padding: CONNECT `sig`.
    pub(crate) fn sign_nonce(&self, nonce: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.key.sign(nonce).as_ref())
    }

    /// True when the file had white space around the hex digits.
    pub(crate) fn padded(&self) -> bool {
        self.padded
    }
}

/// What the connection will present to a broker, for [`inspect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Presented {
    /// The CONNECT carries user `provisioner` and a password.
    pub provisioner_user: bool,
    /// A TLS client certificate and key are configured.
    pub client_certificate: bool,
    /// Leader election will use Choria Streams through this connection.
    pub leader_election: bool,
}

/// Problems a Choria broker would have with `jwt` and `seed` at Unix time `now`:
/// `(errors, warnings)`. An error is a refusal by every broker (or a connection
/// go-choria's client would not even attempt); a warning is a refusal by some
/// brokers only.
pub(crate) fn inspect(
    jwt: &ClientJwt,
    seed: &Seed,
    presented: Presented,
    now: i64,
) -> (Vec<Problem>, Vec<Problem>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let claims = jwt.claims();
    let key = TOKEN_FILE_KEY;
    let caller = &claims.callerid;
    if let Some(exp) = claims.exp.filter(|_| jwt.expired(now)) {
        errors.push(Problem::new(
            key,
            format!(
                "the client JWT of {caller} expired at {}; go-choria's client refuses to sign \
                 a connection nonce with it and brokers refuse it: issue a new one",
                crate::clock::rfc3339(exp as f64)
            ),
        ));
    }
    if let Some(nbf) = claims.nbf.filter(|nbf| now < *nbf) {
        errors.push(Problem::new(
            key,
            format!(
                "the client JWT of {caller} is not valid before {}: brokers refuse it until then",
                crate::clock::rfc3339(nbf as f64)
            ),
        ));
    }
    if claims.public_key.is_empty() {
        errors.push(Problem::new(
            key,
            format!(
                "the client JWT of {caller} has no public_key: brokers cannot verify the \
                 connection's nonce signature, nor nodes the requests'"
            ),
        ));
    } else if !claims.public_key.eq_ignore_ascii_case(&seed.public_hex()) {
        errors.push(Problem::new(
            SEED_FILE_KEY,
            format!(
                "the seed is not the private half of the client JWT's public_key ({caller}): \
                 brokers refuse its nonce signatures and nodes its request signatures; \
                 use the seed the JWT was issued for"
            ),
        ));
    }
    if presented.provisioner_user {
        // Issuer mode: `auth_token` must be an issuer-signed client JWT with the
        // provisioner permission and an `ou`. Without an issuer the broker takes a
        // verified client certificate instead and ignores the JWT.
        let mut issuer_rules = Vec::new();
        if !claims.has(PROVISIONER_PERMISSION) {
            issuer_rules.push(format!(
                "the client JWT of {caller} lacks the provisioner permission \
                 (\"permissions\": {{\"{PROVISIONER_PERMISSION}\": true}}): a broker with an \
                 organisation issuer refuses user {PROVISIONER_USER} with it"
            ));
        }
        if claims.ou.is_empty() {
            issuer_rules.push(format!(
                "the client JWT of {caller} has no ou claim: a broker with an organisation \
                 issuer cannot tell which issuer to verify it with and refuses it"
            ));
        }
        for rule in issuer_rules {
            if presented.client_certificate {
                warnings.push(Problem::new(
                    key,
                    format!(
                        "{rule} (a broker without an issuer accepts the verified client \
                         certificate instead)"
                    ),
                ));
            } else {
                errors.push(Problem::new(key, rule));
            }
        }
    } else {
        warnings.push(Problem::new(
            key,
            format!(
                "without broker_provisioning_password the broker places {caller} in the choria \
                 account, where servers in provisioning mode cannot be reached"
            ),
        ));
    }
    if presented.leader_election {
        let missing: Vec<&str> = [STREAMS_PERMISSION, ELECTION_PERMISSION]
            .into_iter()
            .filter(|p| !claims.has(p))
            .collect();
        if !missing.is_empty() {
            warnings.push(Problem::new(
                key,
                format!(
                    "leader_election is on but the client JWT of {caller} lacks the {} \
                     permission{}: brokers that apply the client's permissions refuse the \
                     election bucket (the provisioning account does not)",
                    missing.join(" and "),
                    if missing.len() > 1 { "s" } else { "" }
                ),
            ));
        }
    }
    if seed.padded() {
        warnings.push(Problem::new(
            SEED_FILE_KEY,
            "has white space around the hex seed: go-choria's tools refuse such a file \
             (this provisioner accepts it)",
        ));
    }
    (errors, warnings)
}

/// The client JWT of a configuration that uses one, and what a broker would make of it.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The token, when it could be read.
    pub jwt: Option<ClientJwt>,
    /// Problems every broker refuses.
    pub errors: Vec<Problem>,
    /// Problems some brokers refuse.
    pub warnings: Vec<Problem>,
}

/// Reads and inspects the client JWT and seed of `client` at Unix time `now`; `None`
/// when the configuration presents no client JWT (not the `choria` provider, or
/// insecure).
pub(crate) fn check(client: &ClientConfig, leader_election: bool, now: i64) -> Option<Checked> {
    if !client.uses_client_jwt() {
        return None;
    }
    let jwt = ClientJwt::load(client.get(TOKEN_FILE_KEY).unwrap_or_default());
    let seed = Seed::load(client.get(SEED_FILE_KEY).unwrap_or_default());
    let mut checked = Checked {
        jwt: None,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    match (jwt, seed) {
        (Ok(jwt), Ok(seed)) => {
            let tls = client.tls_files().unwrap_or_default();
            let presented = Presented {
                provisioner_user: client.broker_user().as_deref() == Some(PROVISIONER_USER),
                client_certificate: tls.certificate.is_some() && tls.key.is_some(),
                leader_election,
            };
            (checked.errors, checked.warnings) = inspect(&jwt, &seed, presented, now);
            checked.jwt = Some(jwt);
        }
        (jwt, seed) => {
            for e in [jwt.as_ref().err(), seed.as_ref().err()]
                .into_iter()
                .flatten()
            {
                checked.errors.push(e.to_problem());
            }
            checked.jwt = jwt.ok();
        }
    }
    Some(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client JWT with `claims` (unsigned: nothing here verifies signatures).
    fn jwt(claims: serde_json::Value) -> ClientJwt {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims.to_string());
        let token = format!("{header}.{body}.c2ln");
        ClientJwt::parse("t.jwt", format!("{token}\n").as_bytes()).unwrap()
    }

    const SEED_HEX: &str = "782eb891b61af7f024a65ffad7687703b08e7ecf4722a1b616f084b5cdf1c9fb";
    const PUBLIC_HEX: &str = "3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec";

    fn seed() -> Seed {
        Seed::parse("s.seed", SEED_HEX.as_bytes()).unwrap()
    }

    fn good() -> serde_json::Value {
        serde_json::json!({
            "callerid": "choria=provisioner",
            "ou": "choria",
            "permissions": {"provisioner": true, "streams_user": true, "election_user": true},
            "purpose": CLIENT_ID_PURPOSE,
            "public_key": PUBLIC_HEX,
            "exp": 2_000_000_000,
        })
    }

    const PASSWORD_ONLY: Presented = Presented {
        provisioner_user: true,
        client_certificate: false,
        leader_election: true,
    };

    #[test]
    fn the_seed_file_is_64_hex_digits_as_spec_tokens_md_says() {
        let s = seed();
        assert_eq!(s.public_hex(), PUBLIC_HEX, "tokens.md §6 key pair");
        assert!(!s.padded());
        let nl = Seed::parse("s", format!("{SEED_HEX}\n").as_bytes()).unwrap();
        assert!(nl.padded(), "accepted, but reported");
        let e = Seed::parse("s", &SEED_HEX.as_bytes()[..62]).unwrap_err();
        assert!(e.problem.contains("31 bytes"), "{e}");
        let e = Seed::parse(
            "s",
            b"not hex at all, not even close, no no no no no no no no no no",
        )
        .unwrap_err();
        assert_eq!(e.problem, "is not a hex ed25519 seed");
        assert!(!format!("{s:?}").contains(SEED_HEX), "Debug shows no seed");
    }

    #[test]
    fn the_nonce_signature_is_base64url_without_padding_and_verifies() {
        let sig = seed().sign_nonce(b"Xo2qPZ4dE8kT3lw");
        assert!(!sig.contains('=') && !sig.contains('+') && !sig.contains('/'));
        let raw = URL_SAFE_NO_PAD.decode(&sig).unwrap();
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ED25519,
            hex::decode(PUBLIC_HEX).unwrap(),
        )
        .verify(b"Xo2qPZ4dE8kT3lw", &raw)
        .expect("verifies with the JWT's public key");
    }

    #[test]
    fn a_client_jwt_is_read_unverified_and_must_be_a_client_token() {
        let j = jwt(good());
        assert_eq!(j.caller_id(), "choria=provisioner");
        assert_eq!(
            j.claims().granted(),
            ["provisioner", "streams_user", "election_user"]
        );
        assert!(!j.token().ends_with('\n'), "trimmed");
        assert!(
            !format!("{j:?}").contains(j.token()),
            "Debug shows no token"
        );
        let mut server = good();
        server["purpose"] = "choria_server".into();
        let header = URL_SAFE_NO_PAD.encode(b"{}");
        let token = format!("{header}.{}.x", URL_SAFE_NO_PAD.encode(server.to_string()));
        let e = ClientJwt::parse("t", token.as_bytes()).unwrap_err();
        assert!(e.problem.contains("not a client JWT"), "{e}");
        let e = ClientJwt::parse("t", b"a.b").unwrap_err();
        assert!(e.problem.contains("not a JWT"), "{e}");
    }

    #[test]
    fn a_good_token_has_no_findings() {
        let (errors, warnings) = inspect(&jwt(good()), &seed(), PASSWORD_ONLY, 1_800_000_000);
        assert!(
            errors.is_empty() && warnings.is_empty(),
            "{errors:?} {warnings:?}"
        );
    }

    #[test]
    fn each_problem_is_named() {
        let now = 1_800_000_000;
        let mut c = good();
        c["exp"] = (now - 10).into();
        let (e, _) = inspect(&jwt(c), &seed(), PASSWORD_ONLY, now);
        assert!(e[0].message.contains("expired at"), "{e:?}");

        let mut c = good();
        c["permissions"] = serde_json::json!({"server_provisioner": true});
        let (e, w) = inspect(&jwt(c.clone()), &seed(), PASSWORD_ONLY, now);
        assert!(
            e[0].message.contains("lacks the provisioner permission"),
            "{e:?}"
        );
        assert!(
            w[0].message.contains("streams_user and election_user"),
            "{w:?}"
        );
        // With a client certificate a broker without an issuer still lets it in.
        let with_cert = Presented {
            client_certificate: true,
            ..PASSWORD_ONLY
        };
        let (e, w) = inspect(&jwt(c), &seed(), with_cert, now);
        assert!(e.is_empty(), "{e:?}");
        assert!(
            w[0].message.contains("verified client certificate"),
            "{w:?}"
        );

        let mut c = good();
        c["public_key"] = "00".repeat(32).into();
        let (e, _) = inspect(&jwt(c), &seed(), PASSWORD_ONLY, now);
        assert_eq!(e[0].key, SEED_FILE_KEY);
        assert!(e[0].message.contains("not the private half"), "{e:?}");

        let mut c = good();
        c.as_object_mut().unwrap().remove("ou");
        let (e, _) = inspect(&jwt(c), &seed(), PASSWORD_ONLY, now);
        assert!(e[0].message.contains("no ou claim"), "{e:?}");

        let no_password = Presented {
            provisioner_user: false,
            ..PASSWORD_ONLY
        };
        let (e, w) = inspect(&jwt(good()), &seed(), no_password, now);
        assert!(e.is_empty());
        assert!(w[0].message.contains("choria account"), "{w:?}");
    }
}
