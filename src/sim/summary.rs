//! What the simulator reports: the progress line's counters, and the summary of
//! every node and discovery written at the end.

use super::*;

/// Counters for the progress line.
#[derive(Debug, Default, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct FleetProgress {
    /// Nodes that have booted.
    pub booted: u64,
    /// Discovery replies sent.
    pub discovery_replies: u64,
    /// Successful `configure` calls.
    pub configured: u64,
    /// Successful `restart` calls.
    pub restarted: u64,
    /// Nodes provisioned and gone from the provisioning collective.
    pub provisioned: u64,
    /// Requests answered with a non-OK status.
    pub failed: u64,
    /// Requests dropped as a provisioning-mode server would.
    pub dropped: u64,
    /// Nodes shut down on the helper's request.
    pub shut_down: u64,
    /// Nodes whose server JWT the broker refuses after their restart.
    pub rejected: u64,
    /// The most nodes that were ever away upgrading at once (from an accepted
    /// `release_update` until the node is back).
    pub upgrading_peak: u64,
}

impl FleetProgress {
    /// Nodes in a final phase (provisioned, shut down or rejected): a run is over
    /// when every node is.
    pub fn finished(&self) -> u64 {
        self.provisioned + self.shut_down + self.rejected
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) booted: AtomicU64,
    pub(super) discovery_replies: AtomicU64,
    pub(super) configured: AtomicU64,
    pub(super) restarted: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) dropped: AtomicU64,
    /// Nodes away upgrading now (from `release_update` until they are back).
    pub(super) upgrading: AtomicU64,
    /// The most nodes ever away upgrading at once.
    pub(super) upgrading_peak: AtomicU64,
}

/// A node in the summary.
#[derive(Debug, Serialize)]
pub struct NodeSummary {
    /// Identity.
    pub identity: String,
    /// Final phase.
    pub phase: Phase,
    /// Fault the node was given.
    pub fault: Option<Fault>,
    /// Actions received in order.
    pub rpcs: Vec<String>,
    /// Configuration written by the last `configure`.
    pub configuration: Option<std::collections::BTreeMap<String, String>>,
    /// The decrypted private key (PEM), when one was sent.
    pub private_key: Option<String>,
    /// The server JWT written, when one was sent.
    pub server_jwt: Option<String>,
    /// Policy files written.
    pub policies: Vec<String>,
    /// Successful restarts.
    pub restarts: u32,
    /// Versions upgraded to, in order.
    pub upgrades: Vec<String>,
    /// Version now.
    pub version: String,
    /// Milliseconds from the first request to the last restart request.
    pub provisioning_ms: Option<u64>,
    /// The distinct provisioners (sender ids) that sent it a request, in order.
    pub callers: Vec<String>,
    /// The provisioner whose `restart` succeeded last.
    pub restarted_by: Option<String>,
    /// The certificate written, when one was sent.
    pub certificate: Option<String>,
    /// Why the node ended where it is, when that is not plain (e.g. a refused
    /// server JWT, or a configuration that keeps provisioning on).
    pub note: Option<String>,
}

/// One broadcast discovery as the fleet saw it.
#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct DiscoverySummary {
    /// When the request arrived, Unix milliseconds.
    pub at_unix_ms: u64,
    /// Replies sent (one per node in provisioning mode that passed the filter).
    pub replies: u64,
    /// Milliseconds from the request's arrival to the last reply sent.
    pub answered_ms: u64,
}

/// Most discoveries recorded for the summary; later ones are counted only.
pub(super) const MAX_DISCOVERIES_KEPT: usize = 1000;

/// The whole fleet at the end of a run: every node's [`NodeSummary`] in `nodes`
/// (as [`Sim::write_summary`] writes it, the nodes are summarised one at a time).
#[derive(Debug, Serialize)]
pub struct Summary<Nodes = Vec<NodeSummary>> {
    /// Counters.
    pub progress: FleetProgress,
    /// The first request any node received, Unix milliseconds.
    pub first_request_unix_ms: Option<u64>,
    /// The last successful `restart` request any node answered, Unix milliseconds.
    pub last_restart_unix_ms: Option<u64>,
    /// Valid broadcast discoveries in the order they arrived (at most 1,000).
    pub discoveries: Vec<DiscoverySummary>,
    /// Every node.
    pub nodes: Nodes,
}

/// Every node's [`NodeSummary`], made as it is written.
pub(super) struct StreamedNodes<'a>(pub(super) &'a Shared);

impl Serialize for StreamedNodes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.nodes.len()))?;
        for (n, fault) in self.0.nodes.iter().zip(&self.0.faults) {
            // The node is locked only while it is copied, not while it is written.
            let summary = node_summary(&n.lock(), *fault);
            seq.serialize_element(&summary)?;
        }
        seq.end()
    }
}

/// What the summary says of node `n`, which was given `fault`.
pub(super) fn node_summary(n: &Node, fault: Option<Fault>) -> NodeSummary {
    NodeSummary {
        identity: n.identity.clone(),
        phase: n.phase,
        fault,
        rpcs: n.rpcs.clone(),
        configuration: n.configuration.clone(),
        private_key: n.private_key.as_ref().map(|der| {
            crate::crypto::pem::encode(&crate::crypto::pem::Block {
                label: "RSA PRIVATE KEY".into(),
                headers: vec![],
                der: der.clone(),
            })
        }),
        server_jwt: n.server_jwt.clone(),
        policies: n.policies.clone(),
        restarts: n.restarts,
        upgrades: n.upgrades.clone(),
        version: n.version.clone(),
        provisioning_ms: match (n.first_request, n.restarted_at) {
            (Some(a), Some(b)) => Some(b.saturating_duration_since(a).as_millis() as u64),
            _ => None,
        },
        certificate: n.certificate.clone(),
        note: n.note.clone(),
        callers: n.callers.clone(),
        restarted_by: n.restarted_by.clone(),
    }
}
