//! The operator's approval as an attempt meets it (`approval: required`): the last
//! check before the helper runs. The table of decisions lives in the fleet
//! (`fleet::approvals`), which sets itself as the sequence's [`Gate`]; `node` never
//! imports `fleet`.

use crate::choria::identity::Identity;

/// What the gate says of a node whose inventory survived its reply grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Approved, pre-approved, or no approval needed: the helper runs.
    Go,
    /// Nobody decided yet: the node is now pending (its facts recorded); the attempt
    /// ends before anything is made.
    Held,
    /// An operator denied it: the attempt ends before anything is made.
    Denied,
}

/// Decides whether a node may go on to its helper.
pub(crate) trait Gate: Send + Sync {
    /// The verdict for `identity`, whose inventory reply gave `version` and
    /// `inventory` (the reply's data, a JSON object): a held node is recorded as
    /// pending with the facts an operator needs.
    fn judge(&self, identity: &Identity, version: &str, inventory: &str) -> Verdict;
}
