//! Every metric the provisioner exports, on a registry of its own.
//!
//! The names, types, help texts and labels of the `choria_provisioner_*` families are
//! the Go provisioner's, so existing Grafana dashboards and alerts keep working. One
//! [`Metrics`] value per provisioner (never the default registry), so two
//! provisioners can run in one process. This module imports nothing else of the crate.

mod process;
mod server;
mod summary;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

pub use process::{ProcessCollector, ProcessStats};
pub use server::{
    Health, HealthSource, LateNodes, MetricsServer, NodeLookup, NodeSource, NodeStatus, NodesQuery,
    Readiness, Role, ServeError, NODES_PAGE, NODES_PAGE_MAX, NODE_LISTS,
};
pub(crate) use summary::SumCountVec;

/// The metric families of one provisioner, all labelled `site`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Nodes accepted from discovery replies.
    pub discovered: IntCounter,
    /// Nodes accepted from startup events.
    pub event_discovered: IntCounter,
    /// Discovery runs (not counted while paused).
    pub discover_cycles: IntCounter,
    /// Broadcast discoveries that failed.
    pub discovery_errors: IntCounter,
    /// Provisioning attempts that ended in an error.
    pub provision_errors: IntCounter,
    /// Attempts that configured and restarted, shut down or upgraded a node.
    pub provisioned: IntCounter,
    /// Workers currently provisioning a node.
    pub busy_workers: IntGauge,
    /// Entries in the work queue.
    pub work_queue_entries: IntGauge,
    /// Identities known to the scheduler (queued, in progress or cooling down).
    pub waiting_nodes: IntGauge,
    /// 1 while paused.
    pub paused: IntGauge,
    /// Duration of every RPC try, by `rpc` (`agent#action`): from the request being
    /// sent until its reply was read (for a request sent ahead of others, that
    /// includes reading theirs first).
    pub rpc_time: SumCountVec,
    /// RPCs whose tries were exhausted, by `rpc`.
    pub rpc_errors: IntCounterVec,
    /// Duration of every helper run.
    pub helper_time: SumCountVec,
    /// Helper runs that failed.
    pub helper_errors: IntCounter,
    /// Helper-requested shutdowns the node accepted.
    pub helper_shutdown_requests: IntCounter,
    /// Election campaigns, by `election`, `identity` and `state`.
    pub election_campaigns: IntCounterVec,
    /// 1 when this instance leads `election`.
    pub election_leader: IntGaugeVec,
    /// Seconds between campaigns.
    pub election_interval_seconds: prometheus::GaugeVec,
    /// Initial broker connection attempts, by `identity`.
    pub connector_initial_attempts: IntCounterVec,
    /// Reconnections after a lost broker connection, by `identity`.
    pub connector_reconnections: IntCounterVec,
    /// Broker connections closed for good, by `identity`.
    pub connector_closed: IntCounterVec,
    /// Errors reported by the NATS client, by `identity`.
    pub connector_errors: IntCounterVec,
    /// Time taken by the initial connection, by `identity`.
    pub connector_initial_connect_time: SumCountVec,
    /// Identities refused as invalid, by `source` (`discovery`, `event`) and `reason`.
    pub refused_identities: IntCounterVec,
    /// RPC replies refused, by `reason` (`undecodable`, `wrong_request`,
    /// `wrong_sender`, `overflow`, `forged_no_responders`).
    pub rejected_replies: IntCounterVec,
    /// Requests nobody could answer: no server subscribes to the node's subject.
    pub unreachable_nodes: IntCounter,
    /// Requests answered twice with different replies in one node's name, by `rpc`:
    /// someone else answers for that node (a security event).
    pub contested_replies: IntCounterVec,
    /// Lifecycle events dropped before use, by `reason`.
    pub dropped_events: IntCounterVec,
    /// Discovery replies dropped: beyond the per-discovery cap of distinct senders,
    /// too large, or beyond the backlog waiting to be decoded.
    pub discovery_overflow: IntCounter,
    /// Finished attempts by `outcome` (one of `OUTCOMES`); see
    /// `Metrics::observe_outcome`.
    pub outcomes: IntCounterVec,
    /// Duration of every finished attempt, whatever its outcome.
    pub node_duration: Histogram,
    /// Always 1; its `version` label says which build runs.
    pub build_info: IntGaugeVec,
    /// 1 while connected to the broker; set by the monitoring listener at each
    /// scrape from the same state `/readyz` reads.
    pub connected: IntGauge,
    /// 1 while `/readyz` would answer 200 (connected and provisioning: alone, leader
    /// or active); set at each scrape like `connected`.
    pub ready: IntGauge,
    /// Helper runs stopped because they took longer than `helper_timeout` (also
    /// counted in `helper_errors`).
    pub helper_timeouts: IntCounter,
    /// Live active-active instances of this site, this one included (0 when
    /// active-active is off).
    pub peers: IntGauge,
    /// The fraction of the fleet this instance owns (`1/peers` while a member of the
    /// active-active set; 0 when active-active is off, joining or leaving).
    pub share: prometheus::Gauge,
    /// Messages from other provisioners refused, by `reason` (one of
    /// `PEER_REFUSALS`).
    pub peer_messages_refused: IntCounterVec,
    /// Valid messages from other provisioners dropped because their inbox was full,
    /// by `kind` (`heartbeat`, `handoff`): each kind has its own bounded inbox.
    pub peer_messages_dropped: IntCounterVec,
    /// Connections to the monitor port or the control socket closed or refused
    /// early, by `door` (`monitor`, `control`) and `reason` (the monitor's:
    /// [`tiny_http::Refusal::as_str`]; the control socket's: `CONTROL_REFUSALS`).
    pub connections_refused: IntCounterVec,
    /// Bytes of the network's held now against `max_held_bytes`: replies routed to
    /// attempts and not read yet, and inventories kept until their helper runs.
    pub held_bytes: IntGauge,
    /// Audit trail lines that could not be written (`audit_file`).
    pub audit_write_errors: IntCounter,
    /// Helper configurations that would bring the node back into provisioning or
    /// leave it without a broker, by the `key` at fault.
    pub looping_configurations: IntCounterVec,
    /// Nodes holding an upgrade slot (`upgrades_max_in_flight`).
    pub upgrades_in_flight: IntGauge,
    /// Attempts under way: parked until a reply, a timeout or a grace, or with a
    /// worker (at most `max_waiting_attempts`).
    pub waiting_attempts: IntGauge,
    /// The most attempts under way at once since start.
    pub waiting_attempts_max: IntGauge,
    /// When `jwt_signing_token` expires (Unix seconds; 0 without one): no server JWT
    /// is signed past it.
    pub signing_token_expiry: IntGauge,
    /// Key reloads on SIGHUP that failed (the old material is kept).
    pub key_reload_failures: IntCounter,
    /// Attempts waiting on a node that has not answered and let a try time out (at
    /// most a quarter of `max_waiting_attempts`).
    pub silent_attempts: IntGauge,
    /// Silent attempts given up at once because the silent ones were at their bound.
    pub silent_given_up: IntCounter,
    /// Refusals because another caller holds a node's provisioning lock.
    pub lock_refusals: IntCounter,
    /// Contested replies found after `configure` was sent: what it carried
    /// (certificate, server JWT, key) may be in another's hands and should be revoked.
    pub contested_after_configure: IntCounter,
    /// How many nodes this instance may have upgrading at once: its part of
    /// `upgrades_max_in_flight` (the whole cap unless active-active splits it among
    /// the live instances; 0 when unlimited, or while out of the active-active set).
    pub upgrade_slots: IntGauge,
    /// Identities waiting for an operator's approval (`approval: required`).
    pub pending_approval: IntGauge,
    /// How long the identity pending longest has waited, in seconds (0: none).
    pub pending_approval_oldest_seconds: IntGauge,
    /// Decisions taken on this instance, by `decision` (`approved`, `denied`,
    /// `forgotten`) and `by` (`operator`, `policy`, `expiry`).
    pub approval_decisions: IntCounterVec,
    /// Runs of the approval policy program, by `result` (`approved`, `denied`,
    /// `undecided`, `failed`, `skipped`: not run, its queue full or run for the
    /// identity within `interval`).
    pub approval_policy_runs: IntCounterVec,
    /// How long the approval policy program's runs took.
    pub approval_policy_time: SumCountVec,
    /// Pending identities forgotten because more than `approval_max_pending`
    /// waited.
    pub pending_evicted: IntCounter,
}

/// The `outcome` label values of `choria_provisioner_outcomes`, each created at 0 on
/// start so that ratios and alerts work from the first scrape:
///
/// | value | the attempt ended because |
/// |---|---|
/// | `provisioned` | the node was configured and restarted |
/// | `deferred` | the helper said "not yet" (`defer`) |
/// | `shut_down` | the helper asked for a shutdown and the node accepted |
/// | `upgraded` | an upgrade was started |
/// | `failed` | a step failed (RPC, helper, JWT, ...) |
/// | `refused_csr` | the node's CSR was refused (deny list, bad request) |
/// | `stale` | the node's provisioning data was too old (the stale rule) |
/// | `unreachable` | no server subscribes to the node's subject |
/// | `contested` | two different replies came in the node's name |
/// | `locked` | another provisioner holds the node's provisioning lock |
/// | `upgrade_waiting` | an upgrade must wait: `upgrades_max_in_flight` nodes are upgrading |
/// | `pending_approval` | held before its helper until an operator approves it |
/// | `denied` | an operator denied it |
pub(crate) const OUTCOMES: [&str; 13] = [
    "provisioned",
    "deferred",
    "shut_down",
    "upgraded",
    "failed",
    "refused_csr",
    "stale",
    "unreachable",
    "contested",
    "locked",
    "upgrade_waiting",
    "pending_approval",
    "denied",
];

/// The `reason` label values of `choria_provisioner_peer_messages_refused`, each
/// created at 0 (the same words as `choria::peers::PeerMessageError::reason`).
pub(crate) const PEER_REFUSALS: [&str; 13] = [
    "too_large",
    "undecodable",
    "identity",
    "foreign_site",
    "period",
    "field",
    "clock",
    "unsigned",
    "signature",
    "untrusted",
    "signer",
    "replayed",
    "stale",
];

/// Why the control socket closed or refused a connection early (`door="control"`
/// of `connections_refused`): its whole request was not read within its deadline,
/// it was over the size cap, its peer's uid may not use it, too many connections
/// were open, or `accept` failed.
pub(crate) const CONTROL_REFUSALS: [&str; 5] =
    ["timeout", "too_large", "peer", "busy", "accept_failed"];

/// Upper bounds (seconds) of the per-node duration histogram: 10 ms (a refusal or
/// an unreachable node) to 5 minutes (a slow helper with retries).
pub(crate) const NODE_DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The version in `choria_provisioner_build_info` (this crate's, from `Cargo.toml`).
const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `rpc` label values, one per RPC the provisioner makes. Their series are
/// created at 0 on start (Go creates them on first use) so that `rate()` and alerts
/// work from the first scrape.
pub(crate) const RPC_NAMES: [&str; 8] = [
    "choria_provision#jwt",
    "choria_provision#gen25519",
    "choria_provision#gencsr",
    "choria_provision#release_update",
    "choria_provision#configure",
    "choria_provision#restart",
    "choria_provision#shutdown",
    "rpcutil#inventory",
];

fn site_opts(name: &str, help: &str, site: &str) -> Opts {
    Opts::new(name, help).const_label("site", site)
}

impl Metrics {
    /// Creates and registers every family with `site` as the `site` label. The
    /// `discovered` and `provisioned` counters and the queue gauges start at 0 and are
    /// therefore visible from the first scrape, as in Go.
    pub fn new(site: &str) -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::with_opts(site_opts(name, help, site))?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::with_opts(site_opts(name, help, site))?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let site_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(site_opts(name, help, site), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let rpc_errors = site_vec(
            "choria_provisioner_rpc_errors",
            "How many rpc related errors were encountered",
            &["rpc"],
        )?;
        let election_campaigns = IntCounterVec::new(
            Opts::new(
                "choria_election_campaigns",
                "The number of campaigns a specific candidate voted in",
            ),
            &["election", "identity", "state"],
        )?;
        registry.register(Box::new(election_campaigns.clone()))?;
        let election_leader = IntGaugeVec::new(
            Opts::new(
                "choria_election_leader",
                "If a specific instance is the leader of an election",
            ),
            &["election", "identity"],
        )?;
        registry.register(Box::new(election_leader.clone()))?;
        let election_interval_seconds = prometheus::GaugeVec::new(
            Opts::new(
                "choria_election_interval_seconds",
                "The interval between campaigns of a specific candidate",
            ),
            &["election", "identity"],
        )?;
        registry.register(Box::new(election_interval_seconds.clone()))?;

        let refused_identities = site_vec(
            "choria_provisioner_refused_identities",
            "How many node identities were refused as invalid or by the identity policy",
            &["source", "reason"],
        )?;
        let rejected_replies = site_vec(
            "choria_provisioner_rejected_replies",
            "How many RPC replies were refused",
            &["reason"],
        )?;
        let contested_replies = site_vec(
            "choria_provisioner_contested_replies",
            "How many requests were answered twice with different replies in one node's name",
            &["rpc"],
        )?;
        let dropped_events = site_vec(
            "choria_provisioner_dropped_events",
            "How many lifecycle events were dropped before use",
            &["reason"],
        )?;
        let peer_messages_refused = site_vec(
            "choria_provisioner_peer_messages_refused",
            "How many messages from other provisioners were refused",
            &["reason"],
        )?;
        let peer_messages_dropped = site_vec(
            "choria_provisioner_peer_messages_dropped",
            "How many valid messages from other provisioners were dropped from a full inbox",
            &["kind"],
        )?;
        let connections_refused = site_vec(
            "choria_provisioner_connections_refused",
            "How many connections to the monitor port or the control socket were closed or refused early, by door and reason",
            &["door", "reason"],
        )?;
        let approval_decisions = site_vec(
            "choria_provisioner_approval_decisions",
            "How many decisions on node identities this instance took, by decision and by who took them (an operator, the site's policy program, or expiry)",
            &["decision", "by"],
        )?;
        let share = prometheus::Gauge::with_opts(site_opts(
            "choria_provisioner_share",
            "The fraction of the fleet this active-active instance owns",
            site,
        ))?;
        registry.register(Box::new(share.clone()))?;
        let looping_configurations = site_vec(
            "choria_provisioner_looping_configurations",
            "How many helper configurations would bring the node back into provisioning, by key",
            &["key"],
        )?;
        let outcomes = site_vec(
            "choria_provisioner_outcomes",
            "How many provisioning attempts ended, by outcome",
            &["outcome"],
        )?;
        let node_duration = Histogram::with_opts(
            HistogramOpts::new(
                "choria_provisioner_node_duration_seconds",
                "How long one provisioning attempt of one node took",
            )
            .const_label("site", site)
            .buckets(NODE_DURATION_BUCKETS.to_vec()),
        )?;
        registry.register(Box::new(node_duration.clone()))?;
        let build_info = IntGaugeVec::new(
            site_opts(
                "choria_provisioner_build_info",
                "Always 1: the version label names the running build",
                site,
            ),
            &["version"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        let connector = |name: &str, help: &str| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), &["identity"])?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let metrics = Metrics {
            connector_initial_attempts: connector(
                "choria_connector_initial_connection_attempts",
                "How many times an initial connection to the middleware was attempted",
            )?,
            connector_reconnections: connector(
                "choria_connector_reconnections",
                "How many times the connection to the middleware was re-established",
            )?,
            connector_closed: connector(
                "choria_connector_connection_closed",
                "How many times the connection to the middleware was closed",
            )?,
            connector_errors: connector(
                "choria_connector_errors",
                "How many errors the connection to the middleware encountered",
            )?,
            connector_initial_connect_time: SumCountVec::new(
                "choria_connector_initial_connect_time",
                "How long the initial connection to the middleware took",
                &[],
                &["identity"],
            )?,
            discovered: counter(
                "choria_provisioner_discovered",
                "How many nodes were found through discovery",
            )?,
            event_discovered: counter(
                "choria_provisioner_event_discovered",
                "How many nodes were found through receiving an event about them",
            )?,
            discover_cycles: counter(
                "choria_provisioner_discover_cycles",
                "How many discovery cycles were ran",
            )?,
            discovery_errors: counter(
                "choria_provisioner_discovery_errors",
                "How many discovery related errors were encountered",
            )?,
            provision_errors: counter(
                "choria_provisioner_provision_errors",
                "How many provision related errors were encountered",
            )?,
            provisioned: counter(
                "choria_provisioner_provisioned",
                "How many nodes were successfully provisioned",
            )?,
            busy_workers: gauge(
                "choria_provisioner_busy_workers",
                "How many workers are busy provisioning nodes",
            )?,
            work_queue_entries: gauge(
                "choria_provisioner_work_queue_entries",
                "Number of nodes on the work queue waiting to be provisioned",
            )?,
            waiting_nodes: gauge(
                "choria_provisioner_waiting_nodes",
                "The number of nodes currently waiting to be provisioned",
            )?,
            paused: gauge(
                "choria_provisioner_paused",
                "Indicates if the provisioner is paused",
            )?,
            rpc_time: SumCountVec::new(
                "choria_provisioner_rpc_time",
                "How long it took to perform RPC requests",
                &[("site", site)],
                &["rpc"],
            )?,
            rpc_errors,
            helper_time: SumCountVec::new(
                "choria_provisioner_helper_time",
                "How long it took to run the helper",
                &[("site", site)],
                &[],
            )?,
            helper_errors: counter(
                "choria_provisioner_helper_errors",
                "How many helper related errors were encountered",
            )?,
            helper_shutdown_requests: counter(
                "choria_provisioner_helper_shutdown_requests",
                "Host many times the helper asked for a node to be shutdown and it succeeded",
            )?,
            unreachable_nodes: counter(
                "choria_provisioner_unreachable_nodes",
                "How many requests found no server subscribed to the node's subject",
            )?,
            connected: gauge(
                "choria_provisioner_connected",
                "Indicates if the provisioner is connected to the broker",
            )?,
            ready: gauge(
                "choria_provisioner_ready",
                "Indicates if the provisioner is connected and provisioning (alone, leader or active)",
            )?,
            helper_timeouts: counter(
                "choria_provisioner_helper_timeouts",
                "How many helper runs were stopped for taking longer than helper_timeout",
            )?,
            discovery_overflow: counter(
                "choria_provisioner_discovery_overflow",
                "How many discovery replies were dropped: beyond the cap of distinct senders, too large, or beyond the backlog waiting to be decoded",
            )?,
            peers: gauge(
                "choria_provisioner_peers",
                "How many active-active instances of this site are live, this one included",
            )?,
            share,
            peer_messages_refused,
            peer_messages_dropped,
            connections_refused,
            held_bytes: gauge(
                "choria_provisioner_held_bytes",
                "How many bytes from nodes are held now (unread replies, kept inventories) against max_held_bytes",
            )?,
            audit_write_errors: counter(
                "choria_provisioner_audit_write_errors",
                "How many audit trail lines could not be written",
            )?,
            upgrades_in_flight: gauge(
                "choria_provisioner_upgrades_in_flight",
                "How many nodes hold an upgrade slot (upgrades_max_in_flight)",
            )?,
            waiting_attempts: gauge(
                "choria_provisioner_waiting_attempts",
                "How many attempts are under way, parked on their node or with a worker",
            )?,
            waiting_attempts_max: gauge(
                "choria_provisioner_waiting_attempts_max",
                "The most attempts under way at once since the provisioner started",
            )?,
            signing_token_expiry: gauge(
                "choria_provisioner_signing_token_expiry_timestamp_seconds",
                "When jwt_signing_token expires, in Unix seconds (0 without one)",
            )?,
            key_reload_failures: counter(
                "choria_provisioner_key_reload_failures",
                "How many key reloads on SIGHUP failed; the keys loaded before are kept",
            )?,
            silent_attempts: gauge(
                "choria_provisioner_silent_attempts",
                "How many attempts wait on a node that has not answered a try in time",
            )?,
            silent_given_up: counter(
                "choria_provisioner_silent_given_up",
                "How many silent attempts were given up because too many waited on silent nodes",
            )?,
            lock_refusals: counter(
                "choria_provisioner_lock_refusals",
                "How many requests were refused because another caller holds the node's provisioning lock",
            )?,
            contested_after_configure: counter(
                "choria_provisioner_contested_after_configure",
                "How many contested replies came after configure was sent: revoke what it carried",
            )?,
            upgrade_slots: gauge(
                "choria_provisioner_upgrade_slots",
                "How many nodes this instance may have upgrading at once: its part of upgrades_max_in_flight (0 when unlimited)",
            )?,
            pending_approval: gauge(
                "choria_provisioner_pending_approval",
                "How many node identities wait for an operator's approval",
            )?,
            pending_approval_oldest_seconds: gauge(
                "choria_provisioner_pending_approval_oldest_seconds",
                "How long the node identity pending longest has waited for an operator's approval",
            )?,
            pending_evicted: counter(
                "choria_provisioner_pending_evicted",
                "How many pending identities were forgotten because more than approval_max_pending waited",
            )?,
            approval_decisions,
            approval_policy_runs: site_vec(
                "choria_provisioner_approval_policy_runs",
                "How many times the approval policy program ran or was skipped, by result",
                &["result"],
            )?,
            approval_policy_time: SumCountVec::new(
                "choria_provisioner_approval_policy_time",
                "How long it took to run the approval policy program",
                &[("site", site)],
                &[],
            )?,
            looping_configurations,
            refused_identities,
            rejected_replies,
            contested_replies,
            dropped_events,
            outcomes,
            node_duration,
            build_info,
            election_campaigns,
            election_leader,
            election_interval_seconds,
            registry,
        };
        for rpc in RPC_NAMES {
            metrics.rpc_errors.with_label_values(&[rpc]);
            metrics.rpc_time.touch(&[rpc]);
            // At 0 so that an alert's increase() sees the very first one.
            metrics.contested_replies.with_label_values(&[rpc]);
        }
        metrics.helper_time.touch(&[]);
        metrics.approval_policy_time.touch(&[]);
        for result in ["approved", "denied", "undecided", "failed", "skipped"] {
            metrics.approval_policy_runs.with_label_values(&[result]);
        }
        for reason in PEER_REFUSALS {
            metrics.peer_messages_refused.with_label_values(&[reason]);
        }
        for decision in ["approved", "denied", "forgotten"] {
            for by in ["operator", "policy", "expiry"] {
                metrics
                    .approval_decisions
                    .with_label_values(&[decision, by]);
            }
        }
        for kind in ["heartbeat", "handoff", "approvals"] {
            metrics.peer_messages_dropped.with_label_values(&[kind]);
        }
        for outcome in OUTCOMES {
            metrics.outcomes.with_label_values(&[outcome]);
        }
        for refusal in tiny_http::Refusal::ALL {
            metrics
                .connections_refused
                .with_label_values(&["monitor", refusal.as_str()]);
        }
        for reason in CONTROL_REFUSALS {
            metrics
                .connections_refused
                .with_label_values(&["control", reason]);
        }
        metrics
            .build_info
            .with_label_values(&[BUILD_VERSION])
            .set(1);
        Ok(metrics)
    }

    /// The registry holding every family, for callers that add their own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Records the duration of one RPC try of `agent#action` (its `rpc` label).
    pub(crate) fn observe_rpc(&self, agent: &str, action: &str, seconds: f64) {
        // The label is `agent#action`, compared in its parts: no string is made per
        // call, only for the first of each RPC.
        let joined = |label: &str| {
            label.len() == agent.len() + 1 + action.len()
                && label.starts_with(agent)
                && label.ends_with(action)
                && label.as_bytes()[agent.len()] == b'#'
        };
        self.rpc_time.observe_where(
            |key| matches!(key, [label] if joined(label)),
            || vec![format!("{agent}#{action}")],
            seconds,
        );
    }

    /// Records the duration of one helper run.
    pub(crate) fn observe_helper(&self, seconds: f64) {
        self.helper_time.observe(&[], seconds);
    }

    /// Records one finished attempt: counts it under `outcome` (one of [`OUTCOMES`])
    /// and observes its duration. An `outcome` outside [`OUTCOMES`] is a caller's
    /// mistake: the duration is still observed, but no new series is made (the set of
    /// series stays bounded) and `false` is returned.
    pub(crate) fn observe_outcome(&self, outcome: &str, seconds: f64) -> bool {
        self.node_duration.observe(seconds.max(0.0));
        if !OUTCOMES.contains(&outcome) {
            return false;
        }
        self.outcomes.with_label_values(&[outcome]).inc();
        true
    }

    /// Every family in the Prometheus text exposition format, process metrics last.
    pub fn render(&self) -> String {
        use prometheus::Encoder;
        let mut families = self.registry.gather();
        families.extend(prometheus::core::Collector::collect(&self.rpc_time));
        families.extend(prometheus::core::Collector::collect(&self.helper_time));
        families.extend(prometheus::core::Collector::collect(
            &self.connector_initial_connect_time,
        ));
        families.extend(prometheus::core::Collector::collect(
            &ProcessCollector::new(),
        ));
        // A family without series (an unused vector) would make the encoder fail.
        families.retain(|f| !f.get_metric().is_empty());
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = prometheus::TextEncoder::new().encode(&families, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
