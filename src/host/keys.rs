//! The key material an attempt needs, loaded once when the provisioner starts (so a
//! missing or malformed key stops the daemon at start, not one node at a time), and
//! the checks that use it: provisioning JWT verification (`jwt`), the server JWT
//! (`ed25519`) and CSR validation (`pki`).

use std::time::Duration;

use serde_json::Value;

use super::csr::DenyList;
use super::helper::{Ed25519Info, HelperOutput};
use super::outcome::Outcome;
use super::tokens::{
    sign_server_token, verify_provisioning_token_now, RequestedServerClaims, ServerClaimsInput,
    SigningKey, SigningToken, VerifyKey,
};
use crate::choria::protocol::ids;
use crate::config::Config;

/// Keys and checks shared by every attempt.
#[derive(Debug)]
pub struct Keys {
    deny: DenyList,
    verify: Option<VerifyKey>,
    signing: Option<SigningKey>,
    signing_token: String,
    validity: Duration,
}

fn failed(msg: String) -> Outcome {
    Outcome::Failed(msg)
}

impl Keys {
    /// Loads everything the enabled features need.
    pub fn load(config: &Config) -> Result<Keys, String> {
        let deny =
            DenyList::new(&config.cert_deny_list).map_err(|e| format!("cert_deny_list: {e}"))?;
        let verify = if config.features.jwt {
            Some(
                VerifyKey::load(&config.jwt_verify_cert)
                    .map_err(|e| format!("jwt_verify_cert: {e}"))?,
            )
        } else {
            None
        };
        let signing = if config.features.ed25519 {
            let key = SigningKey::load(&config.jwt_signing_key)
                .map_err(|e| format!("jwt_signing_key: {e}"))?;
            if !config.jwt_signing_token.is_empty() {
                SigningToken::load(&config.jwt_signing_token)
                    .map_err(|e| format!("jwt_signing_token: {e}"))?;
            }
            Some(key)
        } else {
            None
        };
        Ok(Keys {
            deny,
            verify,
            signing,
            signing_token: config.jwt_signing_token.clone(),
            validity: config.server_jwt_validity,
        })
    }

    /// Verifies the node's provisioning JWT; its claims, for the helper.
    pub fn verify_provisioning_jwt(&self, identity: &str, jwt: &str) -> Result<Value, Outcome> {
        let key = self.verify.as_ref().ok_or_else(|| {
            failed("no JWT verification certificate configured, cannot validate JWT".into())
        })?;
        let claims = verify_provisioning_token_now(jwt, key)
            .map_err(|e| failed(format!("invalid provisioning JWT from {identity}: {e}")))?;
        serde_json::to_value(&claims).map_err(|e| {
            failed(format!(
                "could not encode the JWT claims of {identity}: {e}"
            ))
        })
    }

    /// Signs the server JWT for the node (ed25519 feature), with the chain-issuer data
    /// when `jwt_signing_token` is set (re-read for every node, so rotating it needs no
    /// restart, as in Go).
    pub fn server_jwt(
        &self,
        identity: &str,
        ed25519: Option<&Ed25519Info>,
        answer: &HelperOutput,
    ) -> Result<String, Outcome> {
        let key = self
            .signing
            .as_ref()
            .ok_or_else(|| failed("no jwt_signing_key configured".into()))?;
        let node = ed25519
            .ok_or_else(|| failed(format!("no ed25519 public key received from {identity}")))?;
        let requested: Option<RequestedServerClaims> = match &answer.server_claims {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                failed(format!(
                    "could not invoke configure helper: invalid server_claims for {identity}: {e}"
                ))
            })?),
        };
        let chain = if self.signing_token.is_empty() {
            None
        } else {
            Some(
                SigningToken::load(&self.signing_token)
                    .map_err(|e| failed(format!("jwt_signing_token: {e}")))?,
            )
        };
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
            now: ids::unix_now() as i64,
            jti: &jti,
        };
        let signed = sign_server_token(&input, key, chain.as_ref())
            .map_err(|e| failed(format!("could not sign a server JWT for {identity}: {e}")))?;
        if let Some(warning) = signed.warning {
            log::warn!("{identity}: {warning}");
        }
        Ok(signed.token)
    }

    /// Validates the node's CSR (pki feature): PKCS#10, CN equal to the identity,
    /// CN and every DNS SAN clear of the deny list.
    pub fn check_csr(&self, identity: &str, csr: &str) -> Result<(), Outcome> {
        super::csr::validate_csr(csr, identity, &self.deny)
            .map(|_| ())
            .map_err(|e| failed(format!("invalid CSR from {identity}: {e}")))
    }
}
