//! How a call to a node gives up. The tries themselves (the pause check before each,
//! go-choria's FiveSec back-off with jitter, `rpc_time{rpc}` per try, `rpc_errors{rpc}`
//! once per failed call) are the attempt's (`attempt.rs`).
//!
//! Beyond Go: a refusal that retrying cannot change (wrong token, node not in
//! provisioning mode, provisioning lock held by another provisioner) fails once its
//! reply survived the reply grace, with the node's own message; the error of an
//! exhausted call names the action, the node, the number of tries and the last real
//! reason (Go said `context canceled`).

/// Status messages of go-choria's provision agent that no retry can change
/// (`providers/agent/mcorpc/golang/provision`).
pub(crate) const FATAL_REFUSALS: [&str; 6] = [
    "Incorrect provision token supplied",
    "Could not obtain provisioning lock",
    "Cannot reconfigure a server that is not in provisioning mode",
    "Cannot update a server that is not in provisioning mode",
    "Cannot restart a server that is not in provisioning mode or with no token set",
    "Cannot shutdown a server that is not in provisioning mode or with no token set",
];

/// go-choria's abort when another caller holds the node's provisioning lock.
pub(crate) const LOCK_REFUSAL: &str = "Could not obtain provisioning lock";

/// True when `statusmsg` is a refusal retrying cannot change.
pub(crate) fn is_fatal_refusal(statusmsg: &str) -> bool {
    FATAL_REFUSALS.iter().any(|m| statusmsg.starts_with(m))
        || statusmsg == "Version updates is not enabled in the configuration"
}

/// Why a call gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// Tries exhausted, a fatal refusal, a pause or a stop: the message says which.
    Failed(String),
    /// No server subscribes to the node's subject (a made-up identity, or a node that
    /// is gone): nobody will ever answer.
    Unreachable(String),
    /// The node's provisioning lock is held by another caller (another provisioner):
    /// not retried here.
    Locked(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Failed(why) | CallError::Unreachable(why) | CallError::Locked(why) => {
                f.write_str(why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_refusals_are_recognised() {
        assert!(is_fatal_refusal("Incorrect provision token supplied"));
        assert!(is_fatal_refusal("Could not obtain provisioning lock"));
        assert!(!is_fatal_refusal("Could not create keypair: entropy"));
        assert!(!is_fatal_refusal("OK"));
    }
}
