//! What every attempt of one provisioner shares: the configuration, the key material
//! loaded once at start, the helper, the metrics, the upgrade slots and the warnings
//! given once. One attempt's steps are `attempt::Attempt`, a state machine
//! that does no I/O; the driver ([`super::driver`]) sends what it asks and wakes it.
//! Nothing survives between attempts, as in Go: a node queued again is asked
//! everything again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::helper::Helper;
use super::key_material::{KeyLoadError, KeyMaterial};
use super::loop_check::{HelperStamp, LoopWarnings};
use super::outcome::Outcome;
use super::progress::Progress;
use super::upgrade_slots::{UpgradeSlots, SLOT_TIMEOUT};
use crate::budget::ByteBudget;
use crate::choria::identity::Identity;
use crate::config::{Config, Pause};
use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// Per-try timeouts: `discovery_timeout` + the agent's DDL timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// `choria_provision` actions (22 s by default).
    pub provision: Duration,
    /// `rpcutil` actions (4 s by default).
    pub rpcutil: Duration,
}

/// What every attempt shares.
pub(crate) struct NodeSequence {
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    pause: Arc<Pause>,
    helper: Helper,
    timeouts: Timeouts,
    keys: KeyMaterial,
    /// Warns (once a minute) about active-active nodes older than go-choria v0.29.
    lockless: Throttle,
    /// SECURITY lines about contested replies, once a minute with a count of those
    /// held back: a forger can make one per request.
    contests: Throttle,
    slots: Arc<UpgradeSlots>,
    loops: LoopWarnings,
    /// `max_held_bytes`: unread replies and kept inventories.
    budget: Arc<ByteBudget>,
    /// The operator's approval (`approval: required`), set once before any attempt.
    gate: std::sync::OnceLock<Arc<dyn super::approval::Gate>>,
}

/// The first go-choria release whose provisioning agent has the provisioning lock.
pub(crate) const LOCK_SINCE: &str = "0.29.0";

impl NodeSequence {
    /// The sequence for `config`, loading and checking every key it will need.
    pub(crate) fn new(
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        pause: Arc<Pause>,
        timeouts: Timeouts,
    ) -> Result<NodeSequence, KeyLoadError> {
        let keys = KeyMaterial::load(&config)?;
        metrics
            .signing_token_expiry
            .set(keys.signing_token_expiry().unwrap_or(0));
        Ok(NodeSequence {
            helper: Helper::new(&config.helper, config.helper_timeout),
            slots: Arc::new(UpgradeSlots::with_gauge(
                config.upgrades_max_in_flight,
                SLOT_TIMEOUT,
                metrics.upgrade_slots.clone(),
            )),
            loops: LoopWarnings::default(),
            budget: ByteBudget::new(config.max_held_bytes, metrics.held_bytes.clone()),
            config,
            metrics,
            pause,
            timeouts,
            keys,
            lockless: Throttle::default(),
            contests: Throttle::default(),
            gate: std::sync::OnceLock::new(),
        })
    }

    /// The byte budget of what nodes sent and attempts hold (`max_held_bytes`).
    pub(crate) fn budget(&self) -> &Arc<ByteBudget> {
        &self.budget
    }

    /// Holds every node at `gate` before its helper runs (set once, before the
    /// first attempt; a second call is ignored).
    pub(crate) fn set_gate(&self, gate: Arc<dyn super::approval::Gate>) {
        let _ = self.gate.set(gate);
    }

    /// The approval gate, when `approval: required`.
    pub(crate) fn gate(&self) -> Option<&dyn super::approval::Gate> {
        self.gate.get().map(|g| &**g)
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The pause flag.
    pub(crate) fn pause(&self) -> &Pause {
        &self.pause
    }

    /// The helper.
    pub(crate) fn helper(&self) -> &Helper {
        &self.helper
    }

    /// The key material.
    pub(crate) fn keys(&self) -> &KeyMaterial {
        &self.keys
    }

    /// Loads the key files again ([`KeyMaterial::reload`]), logging what changed or
    /// why the keys in use were kept; returns whether the new keys are in use.
    pub(crate) fn reload_keys(&self) -> bool {
        match self.keys.reload() {
            Ok(changes) => {
                self.metrics
                    .signing_token_expiry
                    .set(self.keys.signing_token_expiry().unwrap_or(0));
                if changes.is_empty() {
                    log::info!("Reloaded the key files: none changed");
                }
                for change in changes {
                    log::info!("Reloaded the key files: {change}");
                }
                true
            }
            Err(e) => {
                self.metrics.key_reload_failures.inc();
                log::error!("Could not reload the key files, keeping the keys in use: {e}");
                false
            }
        }
    }

    /// The upgrade slots.
    pub(crate) fn slots(&self) -> &UpgradeSlots {
        &self.slots
    }

    /// The per-try timeout of `agent`'s actions.
    pub(crate) fn timeout(&self, agent: &str) -> Duration {
        if agent == crate::choria::rpc::RPCUTIL_AGENT {
            self.timeouts.rpcutil
        } else {
            self.timeouts.provision
        }
    }

    /// The warnings about looping configurations given so far.
    #[cfg(test)]
    pub(crate) fn loops(&self) -> &LoopWarnings {
        &self.loops
    }

    /// The provisioning token.
    pub(crate) fn token(&self) -> &str {
        self.config.token.expose()
    }

    /// Logs a contested reply at error level as a security event, at most once a
    /// minute, saying how many were held back.
    pub(crate) fn security_warning(&self, what: std::fmt::Arguments) {
        if let Some(held) = self.contests.ready() {
            let more = if held > 0 {
                format!(" ({held} similar security events held back)")
            } else {
                String::new()
            };
            log::error!("SECURITY: {what}{more}");
        }
    }

    /// The attempt's outcome as it is reported: whatever a node echoed, the log,
    /// `/nodes` and the audit trail never show our secrets.
    pub(crate) fn conclude(&self, outcome: Outcome, progress: &Progress) -> Outcome {
        let secrets = [
            self.token(),
            self.config.broker_provisioning_password.expose(),
        ];
        let scrub = |text: &str| super::redact::redact(text.as_bytes(), &secrets);
        let outcome = outcome.map_text(scrub);
        progress.record(|f| {
            for text in f.retries.iter_mut().chain(f.helper_msg.as_mut()) {
                *text = scrub(text);
            }
        });
        self.metrics
            .upgrades_in_flight
            .set(self.slots.holders().len() as i64);
        outcome
    }

    /// The nodes away upgrading now (holding an `upgrades_max_in_flight` slot), with
    /// when they were sent.
    pub(crate) fn upgrading(&self) -> Vec<(Identity, Instant)> {
        self.slots.holders()
    }

    /// This instance's upgrade slots, shared with whatever splits the cap among
    /// several instances (the active-active membership sets its part).
    pub(crate) fn upgrade_slots(&self) -> Arc<UpgradeSlots> {
        Arc::clone(&self.slots)
    }

    /// Nodes that waited for an upgrade slot and whose turn has come.
    pub(crate) fn woken(&self) -> Vec<Identity> {
        self.slots.take_woken()
    }

    /// Wakes `n` more waiting nodes in place of woken ones that another instance owns
    /// now ([`UpgradeSlots::pass_on`]).
    pub(crate) fn pass_on_wakes(&self, n: usize) {
        self.slots.pass_on(n);
    }

    /// Active-active relies on ownership first and on the node's provisioning lock
    /// (go-choria v0.29 and later) only while instances join or leave: an older node
    /// is provisioned all the same, with a warning that churn may configure it twice.
    pub(crate) fn warn_if_lockless(&self, identity: &Identity, version: &str) {
        if !self.config.active_active
            || version.is_empty()
            || super::version::compare(version, LOCK_SINCE) != std::cmp::Ordering::Less
        {
            return;
        }
        if let Some(more) = self.lockless.ready_note("such warnings") {
            log::warn!(
                "{identity} runs Choria {}, older than {LOCK_SINCE}: it has no provisioning \
                 lock, so while active-active instances join or leave two of them may \
                 configure it at once{more}",
                crate::untrusted::shown(version)
            );
        }
    }

    /// Warns (once per helper version and key) and counts a configuration that would
    /// bring the node straight back into provisioning; sends it anyway, as Go does.
    pub(crate) fn check_loops(&self, identity: &Identity, answer: &super::helper::HelperOutput) {
        let found = super::loop_check::findings(&answer.configuration, identity);
        if found.is_empty() {
            return;
        }
        let stamp = HelperStamp::of_command(&self.config.helper);
        for finding in found {
            self.metrics
                .looping_configurations
                .with_label_values(&[finding.key])
                .inc();
            if self.loops.first(&stamp, finding.key) {
                log::warn!(
                    "The helper's configuration for {identity} will not keep it out of provisioning: {} {} (warned once per helper version; counted in choria_provisioner_looping_configurations)",
                    finding.key,
                    finding.why
                );
            }
        }
    }
}
