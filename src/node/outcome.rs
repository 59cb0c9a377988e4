//! How one provisioning attempt ended, as the scheduler needs to know it
//! (the Go provisioner, choria-io/provisioner).

use std::fmt;

/// The end of one attempt for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Configured and restarted: keep the identity known for the cool-down (60 s) so
    /// that a late discovery reply does not queue it again.
    Done,
    /// Shut down as the helper asked: kept for the cool-down too.
    ShutDown,
    /// An upgrade was started: forget the identity at once so the upgraded node is
    /// provisioned as soon as it comes back.
    Upgraded,
    /// The helper asked to try again later.
    Deferred(String),
    /// The attempt failed; the message says which step, which node and why.
    Failed(String),
    /// The node waited too long in the queue (Go's stale rule); it is found again.
    Stale(String),
    /// The node's CSR was refused (`pki`).
    RefusedCsr(String),
    /// Another provisioner holds the node's provisioning lock: not an error; its
    /// owner (or anyone, once the lock expires) finishes it.
    Locked(String),
    /// Nobody subscribes to the node's subject: no server is there (a made-up
    /// identity, or a node that left). Forgotten at once; queued again only when seen
    /// again.
    Unreachable(String),
    /// Another node answered in this node's name (two different replies to one
    /// request): nothing secret was sent. Kept for the cool-down so that it is tried
    /// again only later.
    Contested(String),
    /// The helper asked for an upgrade but `upgrades_max_in_flight` nodes are already
    /// upgrading: not an error; the node waits its turn and is queued again when a
    /// slot is given back (or when it is found again).
    UpgradeWaiting(String),
    /// `approval: required` and no operator approved the node yet: held before its
    /// helper ran (nothing was made or sent), kept as pending until an operator
    /// decides. Not an error; forgotten at once.
    PendingApproval(String),
    /// An operator denied the node: nothing was made or sent. Not an error of ours;
    /// forgotten at once, and refused at admission from then on.
    Denied(String),
}

impl Outcome {
    /// True for the outcomes Go counts in `provisioned`.
    pub(crate) fn is_success(&self) -> bool {
        matches!(self, Outcome::Done | Outcome::ShutDown | Outcome::Upgraded)
    }

    /// True for the outcomes Go counts in `provision_errors`.
    pub(crate) fn is_error(&self) -> bool {
        matches!(
            self,
            Outcome::Deferred(_)
                | Outcome::Failed(_)
                | Outcome::Stale(_)
                | Outcome::RefusedCsr(_)
                | Outcome::Contested(_)
        )
    }

    /// The `outcome` label: `provisioned`, `shut_down`, `upgraded`, `deferred`,
    /// `failed`, `stale`, `refused_csr`, `unreachable`, `contested`, `locked`,
    /// `upgrade_waiting`, `pending_approval` or `denied`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::Done => "provisioned",
            Outcome::ShutDown => "shut_down",
            Outcome::Upgraded => "upgraded",
            Outcome::Deferred(_) => "deferred",
            Outcome::Failed(_) => "failed",
            Outcome::Stale(_) => "stale",
            Outcome::RefusedCsr(_) => "refused_csr",
            Outcome::Unreachable(_) => "unreachable",
            Outcome::Contested(_) => "contested",
            Outcome::Locked(_) => "locked",
            Outcome::UpgradeWaiting(_) => "upgrade_waiting",
            Outcome::PendingApproval(_) => "pending_approval",
            Outcome::Denied(_) => "denied",
        }
    }

    /// The outcome with its text (if it has one) passed through `f`.
    pub(crate) fn map_text(self, f: impl FnOnce(&str) -> String) -> Outcome {
        match self {
            Outcome::Done | Outcome::ShutDown | Outcome::Upgraded => self,
            Outcome::Deferred(m) => Outcome::Deferred(f(&m)),
            Outcome::Failed(m) => Outcome::Failed(f(&m)),
            Outcome::Stale(m) => Outcome::Stale(f(&m)),
            Outcome::RefusedCsr(m) => Outcome::RefusedCsr(f(&m)),
            Outcome::Locked(m) => Outcome::Locked(f(&m)),
            Outcome::Unreachable(m) => Outcome::Unreachable(f(&m)),
            Outcome::Contested(m) => Outcome::Contested(f(&m)),
            Outcome::UpgradeWaiting(m) => Outcome::UpgradeWaiting(f(&m)),
            Outcome::PendingApproval(m) => Outcome::PendingApproval(f(&m)),
            Outcome::Denied(m) => Outcome::Denied(f(&m)),
        }
    }

    /// True when the identity should stay known for the cool-down period.
    pub(crate) fn needs_cooldown(&self) -> bool {
        matches!(
            self,
            Outcome::Done | Outcome::ShutDown | Outcome::Contested(_)
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("provisioned"),
            Outcome::ShutDown => f.write_str("shut down"),
            Outcome::Upgraded => f.write_str("upgrade started"),
            Outcome::Deferred(msg) => write!(f, "configuration defered: {msg}"),
            Outcome::Failed(msg)
            | Outcome::Stale(msg)
            | Outcome::RefusedCsr(msg)
            | Outcome::Locked(msg)
            | Outcome::Unreachable(msg)
            | Outcome::Contested(msg)
            | Outcome::UpgradeWaiting(msg)
            | Outcome::PendingApproval(msg)
            | Outcome::Denied(msg) => f.write_str(msg),
        }
    }
}
