//! The operator's approval as an attempt meets it (`approval: required`): the last
//! check before the helper runs. The table of decisions lives in the fleet
//! (`fleet::approvals`), which sets itself as the sequence's [`Gate`]; `node` never
//! imports `fleet`.

use crate::choria::identity::Identity;
use crate::crypto::jwt::ProvisioningClaims;
use crate::node::helper::CsrInfo;

/// What else an attempt learnt of a node, by feature: what the site's approval
/// policy program may decide on besides the inventory.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Evidence<'a> {
    /// The verified provisioning JWT's claims (`jwt`).
    pub claims: Option<&'a ProvisioningClaims>,
    /// The node's CSR reply (`pki`), checked.
    pub csr: Option<&'a CsrInfo>,
}

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
    /// `inventory` (the reply's data, a JSON object), with what else the attempt
    /// learnt (`evidence`): a held node is recorded as pending with the facts an
    /// operator needs.
    fn judge(
        &self,
        identity: &Identity,
        version: &str,
        inventory: &str,
        evidence: Evidence<'_>,
    ) -> Verdict;
}
