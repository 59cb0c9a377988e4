//! The key material an attempt needs, loaded when the provisioner starts (so a
//! missing or malformed key stops the daemon at start, not one node at a time) and
//! again on SIGHUP ([`KeyMaterial::reload`]: the old material is kept when the new
//! does not load), and the checks that use it: provisioning JWT verification (`jwt`),
//! the server JWT (`ed25519`) and CSR validation (`pki`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde_json::Value;

use super::failure::AttemptError;
use super::helper::{Ed25519Info, HelperOutput};
use crate::choria::identity::Identity;
use crate::config::Config;
use crate::crypto::csr::{DenyList, DenyListError};
use crate::crypto::ids;
use crate::crypto::jwt::{
    check_signed_claims, fill_default_org, sign_server_token, signed_provisioning_claims,
    ProvisioningClaims, RequestedServerClaims, ServerClaimsInput, SignedServerToken, SigningKey,
    SigningToken, TokenError, VerifyKey,
};

/// Distinct provisioning JWTs whose signature is remembered: a site gives its whole
/// fleet one token (or a few), so one signature check serves every node; more
/// distinct tokens than this (a forger's) start the memory afresh.
const SIGNED_TOKENS_KEPT: usize = 16;

/// Keys and checks shared by every attempt.
#[derive(Debug)]
pub(crate) struct KeyMaterial {
    deny: DenyList,
    /// Where the keys come from (the settings, kept for reloads).
    sources: KeySources,
    /// The keys loaded last; replaced whole by a reload that succeeds.
    loaded: RwLock<Arc<LoadedKeys>>,
    validity: Duration,
    /// Tokens whose signature `verify` accepted, with their decoded claims (only
    /// those; a refused token is checked again every time). The time-dependent
    /// checks run on every use. Emptied when the verify key changes.
    signed: SignedTokens,
}

/// The settings that name key files, and the features that need them.
#[derive(Debug, Clone)]
struct KeySources {
    jwt: bool,
    ed25519: bool,
    verify_cert: String,
    signing_key: String,
    signing_token: String,
}

/// One loading of the key files.
#[derive(Debug)]
struct LoadedKeys {
    verify: Option<VerifyKey>,
    signing: Option<SigningKey>,
    chain: Option<SigningToken>,
}

impl KeySources {
    fn load(&self) -> Result<LoadedKeys, KeyLoadError> {
        let verify = if self.jwt {
            Some(VerifyKey::load(&self.verify_cert).map_err(KeyLoadError::VerifyCert)?)
        } else {
            None
        };
        let (signing, chain) = if self.ed25519 {
            let key = SigningKey::load(&self.signing_key).map_err(KeyLoadError::SigningKey)?;
            let chain = if self.signing_token.is_empty() {
                None
            } else {
                Some(SigningToken::load(&self.signing_token).map_err(KeyLoadError::SigningToken)?)
            };
            (Some(key), chain)
        } else {
            (None, None)
        };
        Ok(LoadedKeys {
            verify,
            signing,
            chain,
        })
    }
}

/// What a reload changed, one line per key (public facts only: a fingerprint, a
/// token id and expiry, never key material).
fn changes(old: &LoadedKeys, new: &LoadedKeys, sources: &KeySources) -> Vec<String> {
    let mut lines = Vec::new();
    if old.verify != new.verify {
        lines.push(format!(
            "jwt_verify_cert {}: a new verification key",
            sources.verify_cert
        ));
    }
    let fingerprint = |k: &Option<SigningKey>| k.as_ref().map(SigningKey::public_fingerprint);
    if fingerprint(&old.signing) != fingerprint(&new.signing) {
        lines.push(format!(
            "jwt_signing_key {}: public key {} replaced by {}",
            sources.signing_key,
            fingerprint(&old.signing).unwrap_or_default(),
            fingerprint(&new.signing).unwrap_or_default()
        ));
    }
    if old.chain != new.chain {
        let describe = |t: &Option<SigningToken>| match t {
            Some(t) => format!(
                "id {} expiring {}",
                t.jti,
                crate::clock::rfc3339(t.exp as f64)
            ),
            None => "none".to_string(),
        };
        lines.push(format!(
            "jwt_signing_token {}: {} replaced by {}",
            sources.signing_token,
            describe(&old.chain),
            describe(&new.chain)
        ));
    }
    lines
}

/// The remembered tokens; `Debug` shows how many, never a token (it holds `cht`).
#[derive(Default)]
struct SignedTokens(Mutex<HashMap<Box<str>, Arc<ProvisioningClaims>>>);

impl std::fmt::Debug for SignedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} signed tokens>", self.0.lock().len())
    }
}

/// Why the key material could not be loaded at start: which setting, and the error
/// underneath (which names the file, never its content).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyLoadError {
    /// A `cert_deny_list` pattern does not compile.
    #[error("cert_deny_list: {0}")]
    DenyList(DenyListError),
    /// `jwt_verify_cert` cannot be loaded (`jwt` feature).
    #[error("jwt_verify_cert: {0}")]
    VerifyCert(TokenError),
    /// `jwt_signing_key` cannot be loaded (`ed25519` feature).
    #[error("jwt_signing_key: {0}")]
    SigningKey(TokenError),
    /// `jwt_signing_token` cannot be loaded (`ed25519` feature, when set).
    #[error("jwt_signing_token: {0}")]
    SigningToken(TokenError),
}

fn failed(msg: String) -> AttemptError {
    AttemptError::Keys(msg)
}

impl KeyMaterial {
    /// Loads everything the enabled features need.
    pub(crate) fn load(config: &Config) -> Result<KeyMaterial, KeyLoadError> {
        let deny = DenyList::new(&config.cert_deny_list).map_err(KeyLoadError::DenyList)?;
        let sources = KeySources {
            jwt: config.features.jwt,
            ed25519: config.features.ed25519,
            verify_cert: config.jwt_verify_cert.clone(),
            signing_key: config.jwt_signing_key.clone(),
            signing_token: config.jwt_signing_token.clone(),
        };
        let loaded = sources.load()?;
        Ok(KeyMaterial {
            deny,
            sources,
            loaded: RwLock::new(Arc::new(loaded)),
            validity: config.server_jwt_validity,
            signed: SignedTokens::default(),
        })
    }

    /// Loads every key file again (on SIGHUP). When all load, they replace the old
    /// ones at once and the changes are returned, one line per key that changed;
    /// when one does not, the old material stays in use and the error says which.
    pub(crate) fn reload(&self) -> Result<Vec<String>, KeyLoadError> {
        let new = self.sources.load()?;
        let mut loaded = self.loaded.write();
        let lines = changes(&loaded, &new, &self.sources);
        if loaded.verify != new.verify {
            self.signed.0.lock().clear();
        }
        *loaded = Arc::new(new);
        Ok(lines)
    }

    /// The keys in use now (a reload does not change what a caller holds).
    fn current(&self) -> Arc<LoadedKeys> {
        Arc::clone(&self.loaded.read())
    }

    /// Verifies the node's provisioning JWT; its claims, for the helper (shared with
    /// every node that presents the same token).
    pub(crate) fn verify_provisioning_jwt(
        &self,
        identity: &Identity,
        jwt: &str,
    ) -> Result<Arc<ProvisioningClaims>, AttemptError> {
        let keys = self.current();
        let key = keys.verify.as_ref().ok_or_else(|| {
            failed("no JWT verification certificate configured, cannot validate JWT".into())
        })?;
        self.verify_at(jwt, key, crate::clock::unix_seconds())
            .map_err(|error| AttemptError::Jwt {
                identity: identity.clone(),
                error,
            })
    }

    /// `verify_provisioning_token(jwt, key, now)`, the signature checked once per
    /// distinct token (an ed25519 check is about half a million instructions; every
    /// node of a fleet usually presents the same token) and its claims decoded once.
    fn verify_at(
        &self,
        jwt: &str,
        key: &VerifyKey,
        now: i64,
    ) -> Result<Arc<ProvisioningClaims>, TokenError> {
        let known = self.signed.0.lock().get(jwt).cloned();
        let claims = match known {
            Some(claims) => claims,
            None => {
                let mut claims = signed_provisioning_claims(jwt, key)?;
                fill_default_org(&mut claims);
                let claims = Arc::new(claims);
                let mut signed = self.signed.0.lock();
                if signed.len() >= SIGNED_TOKENS_KEPT {
                    signed.clear();
                }
                signed.insert(jwt.into(), Arc::clone(&claims));
                claims
            }
        };
        check_signed_claims(&claims, now)?;
        Ok(claims)
    }

    /// Signs the server JWT for the node (ed25519 feature), with the chain-issuer data
    /// when `jwt_signing_token` is set (loaded at start and on SIGHUP; Go reads it for
    /// every node). Returns the token with its claims (for the audit trail).
    pub(crate) fn server_jwt(
        &self,
        identity: &str,
        ed25519: Option<&Ed25519Info>,
        answer: &HelperOutput,
    ) -> Result<SignedServerToken, AttemptError> {
        let keys = self.current();
        let key = keys
            .signing
            .as_ref()
            .ok_or_else(|| failed("no jwt_signing_key configured".into()))?;
        let node = ed25519
            .ok_or_else(|| failed(format!("no ed25519 public key received from {identity}")))?;
        let requested: Option<RequestedServerClaims> = match &answer.server_claims {
            None | Some(Value::Null) => None,
            // The error names what was wrong, never the value (`json_text`).
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                failed(format!(
                    "could not invoke configure helper: invalid server_claims for {identity}: {}",
                    crate::json_text::describe(&e)
                ))
            })?),
        };
        let chain = keys.chain.as_ref();
        let now = crate::clock::unix_seconds();
        if let Some(chain) = chain {
            // A server JWT signed through an expired chain is born expired: go-choria
            // (v0.30) sends such a server back into provisioning at every boot.
            if chain.exp <= now {
                return Err(failed(format!(
                    "jwt_signing_token expired at {}: no server JWT is signed for {identity} \
                     past it; replace the token and send SIGHUP",
                    crate::clock::rfc3339(chain.exp as f64)
                )));
            }
        }
        let jti = ids::ksuid();
        let input = ServerClaimsInput {
            identity,
            public_key_hex: &node.public_key,
            security_provider: answer
                .configuration
                .get("plugin.security.provider")
                .map(String::as_str),
            collectives_setting: answer.configuration.get("collectives").map(String::as_str),
            requested: requested.as_ref(),
            default_validity: self.validity,
            now,
            jti: &jti,
        };
        let signed = sign_server_token(&input, key, chain)
            .map_err(|e| failed(format!("could not sign a server JWT for {identity}: {e}")))?;
        if let Some(warning) = &signed.warning {
            log::warn!("{identity}: {warning}");
        }
        Ok(signed)
    }

    /// The expiry (Unix seconds) of the `jwt_signing_token` in use; `None` without one.
    pub(crate) fn signing_token_expiry(&self) -> Option<i64> {
        self.current().chain.as_ref().map(|t| t.exp)
    }

    /// Validates the node's CSR (pki feature): PKCS#10, CN equal to the identity,
    /// CN and every DNS SAN clear of the deny list.
    pub(crate) fn check_csr(&self, identity: &Identity, csr: &str) -> Result<(), AttemptError> {
        crate::crypto::csr::validate_csr(csr, identity, &self.deny)
            .map(|_| ())
            .map_err(|error| AttemptError::Csr {
                identity: identity.clone(),
                error,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys_with_seed(validity: Duration) -> (KeyMaterial, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "choria-prov-keys-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let seed = dir.join("seed");
        std::fs::write(&seed, "11".repeat(32)).unwrap();
        let mut config = Config::defaults(&dir.join("p.yaml"));
        config.features.ed25519 = true;
        config.jwt_signing_key = seed.display().to_string();
        config.server_jwt_validity = validity;
        (KeyMaterial::load(&config).unwrap(), dir)
    }

    #[test]
    fn a_key_that_does_not_load_names_its_setting_and_the_file() {
        let dir = std::env::temp_dir().join(format!(
            "choria-prov-keyload-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut config = Config::defaults(&dir.join("p.yaml"));
        config.features.ed25519 = true;
        config.jwt_signing_key = dir.join("missing.seed").display().to_string();
        let e = KeyMaterial::load(&config).unwrap_err();
        assert!(
            matches!(&e, KeyLoadError::SigningKey(TokenError::ReadFile { path, .. })
                if *path == config.jwt_signing_key),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "jwt_signing_key: could not read {}: ",
                config.jwt_signing_key
            )),
            "{text}"
        );
        config.features.ed25519 = false;
        config.cert_deny_list = vec!["(".into()];
        let e = KeyMaterial::load(&config).unwrap_err();
        assert!(matches!(e, KeyLoadError::DenyList(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("cert_deny_list: invalid cert_deny_list pattern \"(\": "),
            "{e}"
        );
    }

    /// A signing token file (its signature is not checked when it is loaded) that
    /// expires at `exp`.
    fn signing_token(dir: &std::path::Path, exp: i64) -> std::path::PathBuf {
        use base64::Engine as _;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let token = format!(
            "{}.{}.c2ln",
            b64(json!({"alg": "EdDSA", "typ": "JWT"})),
            b64(
                json!({"purpose": "choria_client_id", "tcs": "t", "jti": "chain1",
                       "public_key": "ab".repeat(32), "exp": exp})
            )
        );
        let path = dir.join(format!("chain-{exp}.jwt"));
        std::fs::write(&path, token).unwrap();
        path
    }

    #[test]
    fn no_server_jwt_is_signed_past_the_signing_token_s_expiry() {
        let (keys, dir) = keys_with_seed(Duration::from_secs(7200));
        let now = crate::clock::unix_seconds();
        let token = dir.join("chain.jwt");
        std::fs::copy(signing_token(&dir, now - 10), &token).unwrap();
        let keys = with_token(keys, &token);
        let answer = HelperOutput::default();
        let Err(AttemptError::Keys(e)) = keys.server_jwt("n1", Some(&node()), &answer) else {
            panic!("a server JWT was signed through an expired chain");
        };
        assert!(
            e.starts_with("jwt_signing_token expired at ")
                && e.contains("no server JWT is signed for n1"),
            "{e}"
        );
        assert_eq!(keys.signing_token_expiry(), Some(now - 10));
        // Rotated to a live token: in use after a reload, no restart.
        std::fs::copy(signing_token(&dir, now + 3600), &token).unwrap();
        let changed = keys.reload().unwrap();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(
            changed[0].starts_with(&format!(
                "jwt_signing_token {}: id chain1 expiring ",
                token.display()
            )) && changed[0].contains(" replaced by id chain1 expiring "),
            "{changed:?}"
        );
        let signed = keys.server_jwt("n1", Some(&node()), &answer).unwrap();
        assert_eq!(signed.claims.standard.issexp, Some(now + 3600));
        assert!(signed.claims.standard.exp.unwrap() <= now + 3600);
        assert_eq!(keys.signing_token_expiry(), Some(now + 3600));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `keys` with `jwt_signing_token` set to `path`, loaded.
    fn with_token(keys: KeyMaterial, path: &std::path::Path) -> KeyMaterial {
        let mut sources = keys.sources.clone();
        sources.signing_token = path.display().to_string();
        let loaded = sources.load().unwrap();
        KeyMaterial {
            sources,
            loaded: RwLock::new(Arc::new(loaded)),
            ..keys
        }
    }

    #[test]
    fn a_reload_that_fails_keeps_the_keys_in_use_and_a_good_one_names_what_changed() {
        let (keys, dir) = keys_with_seed(Duration::from_secs(7200));
        let seed = dir.join("seed");
        let before = keys
            .current()
            .signing
            .as_ref()
            .unwrap()
            .public_fingerprint();
        assert_eq!(
            keys.reload().unwrap(),
            Vec::<String>::new(),
            "nothing changed"
        );
        // A half-written seed: refused, naming the setting; the old key still signs.
        std::fs::write(&seed, "22".repeat(10)).unwrap();
        let e = keys.reload().unwrap_err();
        assert!(matches!(e, KeyLoadError::SigningKey(_)), "{e:?}");
        assert!(e.to_string().starts_with("jwt_signing_key: "), "{e}");
        assert!(!e.to_string().contains(&"22".repeat(10)), "{e}");
        assert_eq!(
            keys.current()
                .signing
                .as_ref()
                .unwrap()
                .public_fingerprint(),
            before
        );
        assert!(keys
            .server_jwt("n1", Some(&node()), &HelperOutput::default())
            .is_ok());
        // The new seed whole: a new public key, named by fingerprints only.
        std::fs::write(&seed, "22".repeat(32)).unwrap();
        let changed = keys.reload().unwrap();
        let after = keys
            .current()
            .signing
            .as_ref()
            .unwrap()
            .public_fingerprint();
        assert_ne!(after, before);
        assert_eq!(
            changed,
            [format!(
                "jwt_signing_key {}: public key {before} replaced by {after}",
                seed.display()
            )]
        );
        assert!(!changed[0].contains(&"22".repeat(32)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_verify_key_forgets_the_tokens_the_old_one_accepted() {
        let issuer = SigningKey::from_ed25519_seed(&[0x44; 32]);
        let (keys, dir) = keys_with_seed(Duration::from_secs(60));
        let mut sources = keys.sources.clone();
        sources.jwt = true;
        sources.verify_cert = issuer.ed25519_public_hex().unwrap();
        let keys = KeyMaterial {
            loaded: RwLock::new(Arc::new(sources.load().unwrap())),
            sources,
            ..keys
        };
        let token = issuer
            .sign_jwt(&json!({"purpose": "choria_provisioning", "cht": "t"}))
            .unwrap();
        let id = Identity::parse("n1.example.net").unwrap();
        assert!(keys.verify_provisioning_jwt(&id, &token).is_ok());
        assert_eq!(keys.signed.0.lock().len(), 1);
        // The verify setting now names a file with another key.
        let other = SigningKey::from_ed25519_seed(&[0x55; 32]);
        let file = dir.join("verify.hex");
        std::fs::write(&file, other.ed25519_public_hex().unwrap()).unwrap();
        let mut sources = keys.sources.clone();
        sources.verify_cert = file.display().to_string();
        let keys = KeyMaterial { sources, ..keys };
        let changed = keys.reload().unwrap();
        assert_eq!(
            changed,
            [format!(
                "jwt_verify_cert {}: a new verification key",
                file.display()
            )]
        );
        assert_eq!(keys.signed.0.lock().len(), 0, "forgotten");
        assert!(matches!(
            keys.verify_provisioning_jwt(&id, &token),
            Err(AttemptError::Jwt { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn node() -> Ed25519Info {
        Ed25519Info {
            public_key: "ab".repeat(32),
            directory: "/etc/choria".into(),
            signature: String::new(),
        }
    }

    #[test]
    fn a_bad_server_claims_value_is_named_but_not_echoed() {
        let (keys, dir) = keys_with_seed(Duration::from_secs(7200));
        let answer = HelperOutput {
            server_claims: Some(json!({"exp": "tok-3f9a", "collectives": ["c"]})),
            ..HelperOutput::default()
        };
        let Err(AttemptError::Keys(e)) = keys.server_jwt("n1", Some(&node()), &answer) else {
            panic!("a string exp must be refused");
        };
        assert!(!e.contains("tok-3f9a"), "{e}");
        assert!(
            e.ends_with(
                "invalid server_claims for n1: invalid type: string, expected a numeric date"
            ),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_token_s_signature_is_checked_once_and_its_times_on_every_use() {
        let issuer = SigningKey::from_ed25519_seed(&[0x44; 32]);
        let mut public = [0u8; 32];
        hex::decode_to_slice(issuer.ed25519_public_hex().unwrap(), &mut public).unwrap();
        let verify = VerifyKey::Ed25519(public);
        let (keys, dir) = keys_with_seed(Duration::from_secs(60));
        let token = issuer
            .sign_jwt(&json!({"purpose": "choria_provisioning", "cht": "t", "exp": 2_000}))
            .unwrap();
        assert_eq!(keys.verify_at(&token, &verify, 1_000).unwrap().cht, "t");
        assert_eq!(keys.signed.0.lock().len(), 1, "remembered once verified");
        assert_eq!(keys.verify_at(&token, &verify, 1_500).unwrap().cht, "t");
        assert_eq!(
            keys.verify_at(&token, &verify, 2_000),
            Err(crate::crypto::jwt::TokenError::Expired),
            "a remembered token still expires"
        );
        // Another signature on the same claims is checked, and refused.
        let (head, _) = token.rsplit_once('.').unwrap();
        let forged = format!("{head}.{}", "A".repeat(86));
        assert_eq!(
            keys.verify_at(&forged, &verify, 1_000),
            Err(crate::crypto::jwt::TokenError::BadSignature)
        );
        assert_eq!(keys.signed.0.lock().len(), 1, "refusals are not remembered");
        let shown = format!("{keys:?}");
        assert!(!shown.contains(&token[..20]), "{shown}");
        assert!(shown.contains("<1 signed tokens>"), "{shown}");
        // Many distinct tokens: the memory stays bounded.
        for n in 0..(SIGNED_TOKENS_KEPT * 2) {
            let t = issuer
                .sign_jwt(&json!({"purpose": "choria_provisioning", "cht": format!("t{n}")}))
                .unwrap();
            assert!(keys.verify_at(&t, &verify, 1_000).is_ok());
            assert!(keys.signed.0.lock().len() <= SIGNED_TOKENS_KEPT);
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn huge_validities_and_expiries_saturate() {
        // server_jwt_validity of about 292 years (the most a duration may be), and
        // helper expiries at both ends of i64 and beyond u64: no overflow, a token.
        let (keys, dir) = keys_with_seed(Duration::from_secs(i64::MAX as u64 / 1_000_000_000));
        for exp in [
            json!(i64::MAX),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e300),
            json!(-1e300),
        ] {
            let answer = HelperOutput {
                server_claims: Some(json!({ "exp": exp })),
                ..HelperOutput::default()
            };
            let token = keys.server_jwt("n1", Some(&node()), &answer);
            assert!(token.is_ok(), "exp {exp}: {token:?}");
        }
        let (keys, dir2) = keys_with_seed(Duration::MAX);
        assert!(keys
            .server_jwt("n1", Some(&node()), &HelperOutput::default())
            .is_ok());
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }
}
