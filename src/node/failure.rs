//! Why an attempt failed, typed: which step, which node, and the error underneath.
//! An attempt that ends early without failing (deferred, shut down, upgraded) is not
//! one of these: the sequence returns its [`Outcome`] directly.

use std::fmt;
use std::time::Duration;

use super::helper::HelperError;
use super::outcome::Outcome;
use super::retry::CallError;
use crate::choria::identity::Identity;
use crate::choria::rpc::Contested;
use crate::crypto::csr::CsrError;
use crate::crypto::jwt::TokenError;
use crate::crypto::key_transport::KeyTransportError;

/// The failure of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttemptError {
    /// The node waited longer than twice the discovery interval (Go's stale rule).
    Stale {
        /// How long it waited.
        waited: Duration,
    },
    /// The daemon is stopping.
    Stopping {
        /// The node.
        identity: Identity,
    },
    /// An RPC gave up (tries exhausted, a fatal refusal, no server, a held lock).
    Call(CallError),
    /// The `jwt` reply held no JWT.
    NoJwt {
        /// The node.
        identity: Identity,
    },
    /// The provisioning JWT did not verify.
    Jwt {
        /// The node.
        identity: Identity,
        /// Why.
        error: TokenError,
    },
    /// The CSR was refused.
    Csr {
        /// The node.
        identity: Identity,
        /// Why.
        error: CsrError,
    },
    /// The helper failed.
    Helper(HelperError),
    /// Key material the provisioner holds could not be used (no verifier or signer
    /// configured, a signing token that no longer loads, a server JWT that cannot be
    /// built); the text names the node.
    Keys(String),
    /// The helper handed out a key but the node made no X25519 key (`jwt` off).
    NoKeyExchange {
        /// The node.
        identity: Identity,
    },
    /// The key could not be encrypted for the node.
    KeyTransport {
        /// The node.
        identity: Identity,
        /// Why.
        why: KeyTransportError,
    },
    /// The helper asked for an upgrade that cannot be made (and upgrades are not
    /// optional).
    Upgrade {
        /// The node.
        identity: Identity,
        /// The version asked for.
        target: String,
        /// Why not.
        why: String,
    },
    /// The helper gave no configuration.
    EmptyConfiguration {
        /// The node.
        identity: Identity,
    },
    /// A request body could not be encoded.
    Encode(String),
    /// Someone else answered in the node's name, so the attempt stops. The replies
    /// that decide what is sent are all settled before `configure`, so a contest of
    /// any of them is found before anything secret leaves; a flood of `configure`'s or
    /// `restart`'s own replies only stops the attempt.
    Contested {
        /// The node.
        identity: Identity,
        /// What was contested.
        contested: Contested,
    },
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Stale { waited } => write!(
                f,
                "skipping node that's been waiting {:.0}s",
                waited.as_secs_f64()
            ),
            AttemptError::Stopping { identity } => write!(
                f,
                "stopped provisioning {identity}: the provisioner is shutting down"
            ),
            AttemptError::Call(e) => e.fmt(f),
            AttemptError::NoJwt { identity } => write!(f, "no JWT received from {identity}"),
            AttemptError::Jwt { identity, error } => {
                write!(f, "invalid provisioning JWT from {identity}: {error}")
            }
            AttemptError::Csr { identity, error } => {
                write!(f, "invalid CSR from {identity}: {error}")
            }
            AttemptError::Helper(e) => write!(f, "could not invoke configure helper: {e}"),
            AttemptError::Keys(why) | AttemptError::Encode(why) => f.write_str(why),
            AttemptError::NoKeyExchange { identity } => write!(
                f,
                "private key received from helper but server {identity} did not start Diffie-Hellman exchange"
            ),
            AttemptError::KeyTransport { identity, why } => {
                write!(f, "could not encrypt the private key for {identity}: {why}")
            }
            AttemptError::Upgrade {
                identity,
                target,
                why,
            } => write!(f, "could not upgrade {identity} to {target}: {why}"),
            AttemptError::EmptyConfiguration { identity } => write!(
                f,
                "choria_provision#configure failed for {identity}: empty configuration"
            ),
            AttemptError::Contested {
                identity,
                contested,
            } => write!(f, "stopped provisioning {identity}: {contested}"),
        }
    }
}

impl std::error::Error for AttemptError {}

impl From<CallError> for AttemptError {
    fn from(e: CallError) -> AttemptError {
        AttemptError::Call(e)
    }
}

impl AttemptError {
    /// The outcome the scheduler routes.
    pub(crate) fn into_outcome(self) -> Outcome {
        let text = self.to_string();
        match self {
            AttemptError::Call(CallError::Unreachable(_)) => Outcome::Unreachable(text),
            AttemptError::Call(CallError::Locked(_)) => Outcome::Locked(text),
            AttemptError::Contested { .. } => Outcome::Contested(text),
            AttemptError::Stale { .. } => Outcome::Stale(text),
            AttemptError::Csr { .. } => Outcome::RefusedCsr(text),
            _ => Outcome::Failed(text),
        }
    }
}
