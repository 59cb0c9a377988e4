//! The discovery loop: one broadcast discovery at start, then one every `interval`
//! and one whenever the election makes us leader; skipped while paused.
//!
//! A discovery that found more nodes than the work queue took, or dropped replies it
//! could not decode in time, is followed by another as soon as the queue has drained
//! to half its capacity, instead of at the next tick while the workers idle
//! ([`Rediscovery`]).

use std::time::{Duration, Instant};

use crossbeam_channel::{select, tick, Receiver};

use super::{AddResult, Fleet, Source};
use crate::choria::identity::Identity;
use crate::choria::rpc::{Discovered, RpcError};

/// Finds the identities of nodes in provisioning mode (a broadcast discovery).
pub(crate) trait Discover: Send + Sync {
    /// One discovery: hands each valid identity that answered to `found` as it
    /// comes, once, and says how many it handed over and how many replies it had
    /// to drop unread.
    fn discover(&self, found: &mut dyn FnMut(Identity)) -> Result<Discovered, RpcError>;
}

/// When a discovery could not queue every node it found, the next one starts once
/// the queue holds at most half its capacity and `min_gap` has passed since the last
/// one ended. Both bound it: nothing a broker or a node sends can make us discover
/// more than once per `min_gap`, and never while the queue is still half full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rediscovery {
    /// Shortest time from the end of one discovery to the start of an early one
    /// (measured from the end, so that however late the loop's thread runs, no two
    /// discoveries start less than this apart).
    pub min_gap: Duration,
    /// How often the queue is looked at while an early discovery is due.
    pub poll: Duration,
}

/// The production [`Rediscovery`]: at most one early discovery per 10 s; the queue is
/// looked at ten times a second while one is due (and not at all otherwise).
pub(crate) const REDISCOVERY: Rediscovery = Rediscovery {
    min_gap: Duration::from_secs(10),
    poll: Duration::from_millis(100),
};

/// How often the announced lane is looked at when no early discovery is due.
const ANNOUNCED_POLL: Duration = Duration::from_secs(1);

/// Runs discovery cycles until the fleet stops, with the production [`REDISCOVERY`].
#[cfg(test)]
pub(crate) fn run(
    fleet: &Fleet,
    discoverer: &dyn Discover,
    interval: Duration,
    trigger: &Receiver<()>,
) {
    run_with(fleet, discoverer, interval, trigger, REDISCOVERY);
}

/// Runs discovery cycles until the fleet stops: at start, every `interval`, on
/// `trigger`, and early as `rediscovery` allows after a discovery that overflowed.
pub(crate) fn run_with(
    fleet: &Fleet,
    discoverer: &dyn Discover,
    interval: Duration,
    trigger: &Receiver<()>,
    rediscovery: Rediscovery,
) {
    let ticker = tick(interval);
    let stopped = fleet.stopped();
    let mut left_out = cycle(fleet, discoverer);
    let mut ended = Instant::now();
    loop {
        // Polled often while some discovered nodes are still waiting for room; else
        // once a second, for names known only from startup events that pile up
        // waiting for a discovery to confirm the real ones among them.
        let poll = if left_out > 0 {
            tick(rediscovery.poll)
        } else {
            tick(ANNOUNCED_POLL)
        };
        loop {
            select! {
                recv(ticker) -> _ => break,
                recv(trigger) -> msg => if msg.is_err() { return } else { break },
                recv(stopped) -> _ => return,
                recv(poll) -> _ => {
                    if ended.elapsed() < rediscovery.min_gap {
                        continue;
                    }
                    if left_out > 0 && fleet.queued() <= fleet.capacity() / 2 {
                        log::info!(
                            "Discovering again before the interval: the queue has room for the {left_out} nodes (or dropped replies) the last discovery could not queue"
                        );
                        break;
                    }
                    // More announced names wait than their lane lets begin at once:
                    // the real ones among them answer a discovery and go ahead.
                    if fleet.announced_waiting() > fleet.announced_in_flight_max() {
                        log::info!(
                            "Discovering again before the interval: {} nodes known only from startup events wait to be confirmed",
                            fleet.announced_waiting()
                        );
                        break;
                    }
                }
            }
        }
        // Ticks that fired while a discovery ran are coalesced, as Go's ticker does.
        while ticker.try_recv().is_ok() {}
        if fleet.is_stopping() {
            return;
        }
        left_out = cycle(fleet, discoverer);
        ended = Instant::now();
    }
}

/// One discovery cycle: counts it, queues every identity found, and reports a full
/// queue once for the whole cycle. Returns how many found nodes did not fit, plus
/// the replies dropped unread (their nodes may not have been heard): either makes
/// the next discovery come early.
pub(crate) fn cycle(fleet: &Fleet, discoverer: &dyn Discover) -> usize {
    if fleet.pause().paused() {
        log::warn!("Skipping discovery while paused");
        return 0;
    }
    if !fleet.owns_any() {
        log::debug!("Skipping discovery: this active-active instance owns no nodes now");
        return 0;
    }
    let metrics = fleet.metrics();
    metrics.discover_cycles.inc();
    // Each node is queued as it answers: the first of a large fleet start while the
    // rest still answer, and no list of the whole fleet is kept.
    let (mut added, mut full) = (0usize, 0usize);
    let found = discoverer.discover(
        &mut |identity| match fleet.add(&identity, Source::Discovery) {
            AddResult::Added => added += 1,
            AddResult::QueueFull => full += 1,
            AddResult::Known
            | AddResult::Stopping
            | AddResult::NotOurs
            | AddResult::Refused
            | AddResult::Pending => {}
        },
    );
    let heard = match found {
        Ok(heard) => heard,
        Err(e) => {
            metrics.discovery_errors.inc();
            log::error!("Could not discover nodes: {e}");
            return full;
        }
    };
    fleet.take_queue_full();
    if full > 0 {
        log::warn!(
            "The work queue is full: {full} discovered nodes could not be queued this cycle and will be retried by the next one"
        );
    }
    if heard.dropped > 0 {
        log::warn!(
            "Discovery dropped {} replies it could not decode in time; their nodes are found by an early discovery",
            heard.dropped
        );
    }
    log::info!(
        "Discovered {} nodes, {added} new ones queued ({} waiting in the queue)",
        heard.senders,
        fleet.queued()
    );
    full.saturating_add(usize::try_from(heard.dropped).unwrap_or(usize::MAX))
}

/// Broadcast discovery over the wire with the sliding window of §3.2: wait up to
/// `initial` for the first reply, stop `window` after the last one, never after `limit`.
pub(crate) struct BroadcastDiscovery {
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
    fn discover(&self, found: &mut dyn FnMut(Identity)) -> Result<Discovered, RpcError> {
        let heard = self
            .rpc
            .discover(self.initial, self.window, self.limit, found)?;
        if heard.refused > 0 {
            log::warn!(
                "Discovery refused {} of {} replies (invalid or undecodable senders)",
                heard.refused,
                heard.replies
            );
        }
        log::debug!(
            "Discovery heard {} replies from {} nodes in {:.2}s",
            heard.replies,
            heard.senders,
            heard.took.as_secs_f64()
        );
        Ok(heard)
    }
}
