//! The key material an attempt needs, loaded once when the provisioner starts, and
//! the checks that use it: provisioning JWT verification (`jwt`), the server JWT
//! (`ed25519`), CSR validation (`pki`), the key transport and nonce signatures.

use serde_json::Value;

use super::helper::{Ed25519Info, HelperOutput};
use super::outcome::Outcome;
use crate::config::Config;

/// Keys and checks shared by every attempt.
#[derive(Debug)]
pub struct Keys {
    _private: (),
}

impl Keys {
    /// Loads everything the enabled features need. JWT verification, server JWT
    /// signing and CSR validation are not in this build yet: a configuration that
    /// enables `jwt`, `ed25519` or `pki` is refused at start rather than failing per
    /// node.
    pub fn load(config: &Config) -> Result<Keys, String> {
        let f = config.features;
        for (on, name) in [(f.jwt, "jwt"), (f.ed25519, "ed25519"), (f.pki, "pki")] {
            if on {
                return Err(format!(
                    "features.{name} is not supported by this build of choria-provisioner yet"
                ));
            }
        }
        Ok(Keys { _private: () })
    }

    /// Verifies the node's provisioning JWT; the claims for the helper.
    pub fn verify_provisioning_jwt(&self, identity: &str, _jwt: &str) -> Result<Value, Outcome> {
        Err(Outcome::Failed(format!(
            "cannot verify the provisioning JWT of {identity}: features.jwt is not supported by this build"
        )))
    }

    /// Signs the server JWT for the node (ed25519 feature).
    pub fn server_jwt(
        &self,
        identity: &str,
        _ed25519: Option<&Ed25519Info>,
        _answer: &HelperOutput,
    ) -> Result<String, Outcome> {
        Err(Outcome::Failed(format!(
            "cannot sign a server JWT for {identity}: features.ed25519 is not supported by this build"
        )))
    }

    /// Validates the node's CSR (pki feature).
    pub fn check_csr(&self, identity: &str, _csr: &str) -> Result<(), Outcome> {
        Err(Outcome::Failed(format!(
            "cannot validate the CSR of {identity}: features.pki is not supported by this build"
        )))
    }
}
