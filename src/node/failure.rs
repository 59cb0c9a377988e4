//! Why an attempt failed, typed: which step, which node, and the error underneath.
//! An attempt that ends early without failing (deferred, shut down, upgraded) is not
//! one of these: the sequence returns its [`Outcome`] directly.

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AttemptError {
    /// The node waited longer than twice the discovery interval (Go's stale rule).
    #[error("skipping node that's been waiting {secs:.0}s", secs = .waited.as_secs_f64())]
    Stale {
        /// How long it waited.
        waited: Duration,
    },
    /// The daemon is stopping.
    #[error("stopped provisioning {identity}: the provisioner is shutting down")]
    Stopping {
        /// The node.
        identity: Identity,
    },
    /// An RPC gave up (tries exhausted, a fatal refusal, no server, a held lock).
    #[error("{0}")]
    Call(CallError),
    /// The `jwt` reply held no JWT.
    #[error("no JWT received from {identity}")]
    NoJwt {
        /// The node.
        identity: Identity,
    },
    /// The provisioning JWT did not verify.
    #[error("invalid provisioning JWT from {identity}: {error}")]
    Jwt {
        /// The node.
        identity: Identity,
        /// Why.
        error: TokenError,
    },
    /// The CSR was refused.
    #[error("invalid CSR from {identity}: {error}")]
    Csr {
        /// The node.
        identity: Identity,
        /// Why.
        error: CsrError,
    },
    /// The helper failed.
    #[error("could not invoke configure helper: {0}")]
    Helper(HelperError),
    /// Key material the provisioner holds could not be used (no verifier or signer
    /// configured, a signing token that no longer loads, a server JWT that cannot be
    /// built); the text names the node.
    #[error("{0}")]
    Keys(String),
    /// The helper handed out a key but the node made no X25519 key (`jwt` off).
    #[error("private key received from helper but server {identity} did not start Diffie-Hellman exchange")]
    NoKeyExchange {
        /// The node.
        identity: Identity,
    },
    /// The key could not be encrypted for the node.
    #[error("could not encrypt the private key for {identity}: {why}")]
    KeyTransport {
        /// The node.
        identity: Identity,
        /// Why.
        why: KeyTransportError,
    },
    /// The helper asked for an upgrade that cannot be made (and upgrades are not
    /// optional).
    #[error("could not upgrade {identity} to {target}: {why}")]
    Upgrade {
        /// The node.
        identity: Identity,
        /// The version asked for.
        target: String,
        /// Why not.
        why: String,
    },
    /// The helper gave no configuration.
    #[error("choria_provision#configure failed for {identity}: empty configuration")]
    EmptyConfiguration {
        /// The node.
        identity: Identity,
    },
    /// A request body could not be encoded.
    #[error("{0}")]
    Encode(String),
    /// Someone else answered in the node's name, so the attempt stops. The replies
    /// that decide what is sent are all settled before `configure`, so a contest of
    /// any of them is found before anything secret leaves; a flood of `configure`'s or
    /// `restart`'s own replies only stops the attempt.
    #[error("stopped provisioning {identity}: {contested}")]
    Contested {
        /// The node.
        identity: Identity,
        /// What was contested.
        contested: Contested,
    },
}

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
