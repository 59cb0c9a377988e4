//! Who took a decision on an identity: an operator, the expiry of a stale request,
//! or the site's policy program; how records, the log, the audit trail and the
//! `by` label of `approval_decisions` name them.

use super::clean;
use crate::choria::peers::{DecidedBy, MAX_BY};
use crate::fleet::control::Operator;

/// Who took a decision.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decider<'a> {
    /// An operator on the control socket, as the kernel names them.
    Operator(&'a Operator),
    /// The expiry of a pending identity not seen for `approval_pending_expiry`, or
    /// of an approval given ahead of time for a node that did not come within
    /// `approval_ahead_expiry`.
    Expiry,
    /// The site's approval policy program (`approval_policy`), named by its
    /// command; it decides only for identities still pending.
    Policy(&'a str),
}

impl Decider<'_> {
    /// `operator` or `expiry`: the `by` label of `approval_decisions`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Decider::Operator(_) => "operator",
            Decider::Expiry => "expiry",
            Decider::Policy(_) => "policy",
        }
    }

    /// Who decided, as records and the log show it.
    pub(super) fn text(&self) -> String {
        match self {
            Decider::Operator(by) => by.to_string(),
            Decider::Expiry => "expiry".into(),
            Decider::Policy(program) => format!("policy {program}"),
        }
    }

    /// The operator's uid, name and pid, when an operator decided.
    pub(super) fn operator(&self) -> Option<DecidedBy> {
        match self {
            Decider::Operator(by) => Some(DecidedBy {
                uid: by.uid,
                user: by.user.as_deref().map(|u| clean(u, MAX_BY)),
                pid: by.pid,
            }),
            Decider::Expiry | Decider::Policy(_) => None,
        }
    }
}
