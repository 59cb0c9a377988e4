//! How one provisioning attempt ended, as the scheduler needs to know it
//! (`spec/provisioner.md` §2.6).

use std::fmt;

/// The end of one attempt for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Configured and restarted, or shut down: keep the identity known for the
    /// cool-down (60 s) so that a late discovery reply does not queue it again.
    Done,
    /// An upgrade was started: forget the identity at once so the upgraded node is
    /// provisioned as soon as it comes back.
    Upgraded,
    /// The helper asked to try again later.
    Deferred(String),
    /// The attempt failed; the message says which step, which node and why.
    Failed(String),
    /// Nobody subscribes to the node's subject: no server is there (a made-up
    /// identity, or a node that left). Forgotten at once; queued again only when seen
    /// again.
    Unreachable(String),
    /// Another node answered in this node's name (two different replies to one
    /// request): nothing secret was sent. Kept for the cool-down so that it is tried
    /// again only later.
    Contested(String),
}

impl Outcome {
    /// True for the outcomes Go counts in `provisioned`.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Done | Outcome::Upgraded)
    }

    /// True when the identity should stay known for the cool-down period.
    pub fn needs_cooldown(&self) -> bool {
        matches!(self, Outcome::Done | Outcome::Contested(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("provisioned"),
            Outcome::Upgraded => f.write_str("upgrade started"),
            Outcome::Deferred(msg) => write!(f, "configuration defered: {msg}"),
            Outcome::Failed(msg) | Outcome::Unreachable(msg) | Outcome::Contested(msg) => {
                f.write_str(msg)
            }
        }
    }
}
