//! The discovery loop: one broadcast discovery at start, then one every `interval`
//! and one whenever the election makes us leader; skipped while paused.

use std::time::Duration;

use crossbeam_channel::{select, tick, Receiver};

use super::{AddResult, Fleet, Source};
use crate::choria::identity::Identity;

/// Finds the identities of nodes in provisioning mode (a broadcast discovery).
pub trait Discover: Send + Sync {
    /// One discovery; the valid identities that answered, in any order.
    fn discover(&self) -> Result<Vec<Identity>, String>;
}

/// Runs discovery cycles until the fleet stops.
pub fn run(fleet: &Fleet, discoverer: &dyn Discover, interval: Duration, trigger: &Receiver<()>) {
    let ticker = tick(interval);
    let stopped = fleet.stopped();
    cycle(fleet, discoverer);
    loop {
        select! {
            recv(ticker) -> _ => {}
            recv(trigger) -> msg => if msg.is_err() { return },
            recv(stopped) -> _ => return,
        }
        // Ticks that fired while a discovery ran are coalesced, as Go's ticker does.
        while ticker.try_recv().is_ok() {}
        if fleet.is_stopping() {
            return;
        }
        cycle(fleet, discoverer);
    }
}

/// One discovery cycle: counts it, queues every identity found, and reports a full
/// queue once for the whole cycle.
pub fn cycle(fleet: &Fleet, discoverer: &dyn Discover) {
    if fleet.pause().paused() {
        log::warn!("Skipping discovery while paused");
        return;
    }
    if !fleet.owns_any() {
        log::debug!("Skipping discovery: this active-active instance owns no nodes now");
        return;
    }
    let metrics = fleet.metrics();
    metrics.discover_cycles.inc();
    let identities = match discoverer.discover() {
        Ok(ids) => ids,
        Err(e) => {
            metrics.discovery_errors.inc();
            log::error!("Could not discover nodes: {e}");
            return;
        }
    };
    let (mut added, mut full) = (0usize, 0usize);
    for identity in &identities {
        match fleet.add(identity, Source::Discovery) {
            AddResult::Added => added += 1,
            AddResult::QueueFull => full += 1,
            AddResult::Known | AddResult::Stopping | AddResult::NotOurs => {}
        }
    }
    fleet.take_queue_full();
    if full > 0 {
        log::warn!(
            "The work queue is full: {full} discovered nodes could not be queued this cycle and will be retried by the next one"
        );
    }
    log::info!(
        "Discovered {} nodes, {added} new ones queued ({} waiting in the queue)",
        identities.len(),
        fleet.queued()
    );
}

/// Broadcast discovery over the wire with the sliding window of §3.2: wait up to
/// `initial` for the first reply, stop `window` after the last one, never after `limit`.
pub struct BroadcastDiscovery {
    /// The wire.
    pub rpc: std::sync::Arc<crate::choria::rpc::RpcClient>,
    /// Wait for the first reply (`discovery_timeout`).
    pub initial: Duration,
    /// Stop this long after the last reply (300 ms).
    pub window: Duration,
    /// Hard limit of one discovery.
    pub limit: Duration,
}

impl Discover for BroadcastDiscovery {
    fn discover(&self) -> Result<Vec<Identity>, String> {
        let found = self
            .rpc
            .discover(self.initial, self.window, self.limit)
            .map_err(|e| e.to_string())?;
        if found.refused > 0 {
            log::warn!(
                "Discovery refused {} of {} replies (invalid or undecodable senders)",
                found.refused,
                found.replies
            );
        }
        log::debug!(
            "Discovery heard {} replies from {} nodes in {:.2}s",
            found.replies,
            found.identities.len(),
            found.took.as_secs_f64()
        );
        Ok(found.identities)
    }
}
