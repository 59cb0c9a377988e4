//! The discovery loop: one broadcast discovery at start, then one every `interval`
//! and one on every trigger (a reconnection to the broker, the election making us
//! leader, a change of the active-active set, a resume); skipped while paused.
//!
//! Real Choria servers reconnect on their own schedule, seconds to a minute after
//! a broker comes back (go-choria's reconnect back-off with jitter), and the startup
//! events of nodes that booted meanwhile are lost: a discovery made the moment we
//! are back may find nobody. So the start and every trigger are followed by
//! discoveries `FOLLOW_UPS` later (2, 5, 10, 15, 20, 24 and 30 s), until the
//! regular `interval` comes, or two in a row found nothing new after one that did,
//! the start or trigger's own discovery included (the fleet came back and has been
//! swept) (`FollowUps`).
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

/// When the discoveries that follow the start or a trigger come, after it.
pub(crate) const FOLLOW_UPS: [Duration; 7] = [
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(15),
    Duration::from_secs(20),
    Duration::from_secs(24),
    Duration::from_secs(30),
];

/// The follow-up discoveries of the last start or trigger.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    /// When the start or trigger was, while follow-ups are due.
    since: Option<Instant>,
    /// The next follow-up's index in [`FOLLOW_UPS`].
    next: usize,
    /// A follow-up of this series queued a new node.
    found: bool,
    /// Follow-ups in a row that queued nothing since one did.
    quiet: u8,
    /// What set them off (for the log).
    why: &'static str,
}

impl FollowUps {
    /// A series from `now`, set off by `why`.
    pub(crate) fn begin(&mut self, now: Instant, why: &'static str) {
        *self = FollowUps {
            since: Some(now),
            why,
            ..FollowUps::default()
        };
    }

    /// The discovery of the start or the trigger itself queued `added` new nodes:
    /// when it did, the fleet is there, and two quiet follow-ups end the series.
    pub(crate) fn set_off(&mut self, added: usize) {
        self.found |= added > 0;
    }

    /// No more follow-ups (the regular interval came).
    pub(crate) fn end(&mut self) {
        self.since = None;
    }

    /// When the next follow-up is due, if one is.
    pub(crate) fn due(&self) -> Option<Instant> {
        let since = self.since?;
        FOLLOW_UPS.get(self.next).map(|after| since + *after)
    }

    /// A follow-up queued `added` new nodes; true if the series goes on.
    pub(crate) fn done(&mut self, added: usize) -> bool {
        self.next += 1;
        if added > 0 {
            (self.found, self.quiet) = (true, 0);
        } else if self.found {
            self.quiet += 1;
        }
        if self.quiet >= 2 || self.next >= FOLLOW_UPS.len() {
            self.since = None;
        }
        self.since.is_some()
    }
}

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
/// `trigger`, [`FOLLOW_UPS`] after the start and each trigger, and early as
/// `rediscovery` allows after a discovery that overflowed.
pub(crate) fn run_with(
    fleet: &Fleet,
    discoverer: &dyn Discover,
    interval: Duration,
    trigger: &Receiver<()>,
    rediscovery: Rediscovery,
) {
    let ticker = tick(interval);
    let stopped = fleet.stopped();
    let mut follow_ups = FollowUps::default();
    follow_ups.begin(Instant::now(), "the start");
    let first = cycle(fleet, discoverer);
    follow_ups.set_off(first.added);
    let mut left_out = first.left_out;
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
        let follow_up = follow_ups
            .due()
            .map_or_else(crossbeam_channel::never, crossbeam_channel::at);
        let (mut following, mut triggered) = (false, false);
        loop {
            select! {
                recv(ticker) -> _ => {
                    follow_ups.end();
                    break;
                }
                recv(trigger) -> msg => if msg.is_err() { return } else {
                    follow_ups.begin(Instant::now(), "a reconnection, a change of leader or of the active-active set, or a resume");
                    triggered = true;
                    break;
                },
                recv(follow_up) -> _ => {
                    following = true;
                    log::info!(
                        "Discovering again {:?} after {} (follow-up {} of {}): nodes come back on their own schedule",
                        FOLLOW_UPS[follow_ups.next], follow_ups.why, follow_ups.next + 1, FOLLOW_UPS.len()
                    );
                    break;
                }
                recv(stopped) -> _ => return,
                recv(poll) -> _ => {
                    if ended.elapsed() >= rediscovery.min_gap && early_discovery_due(fleet, left_out) {
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
        let result = cycle(fleet, discoverer);
        left_out = result.left_out;
        if triggered {
            follow_ups.set_off(result.added);
        }
        if following && !follow_ups.done(result.added) {
            log::info!("Follow-up discoveries over: the next comes with the interval");
        }
        ended = Instant::now();
    }
}

/// Whether a discovery should come before the interval (said in the log): the
/// queue has room again for the `left_out` nodes the last one could not queue, or
/// more names known only from startup events wait than their lane lets begin (the
/// real ones among them answer a discovery and go ahead).
fn early_discovery_due(fleet: &Fleet, left_out: usize) -> bool {
    if left_out > 0 && fleet.queued() <= fleet.capacity() / 2 {
        log::info!(
            "Discovering again before the interval: the queue has room for the {left_out} nodes (or dropped replies) the last discovery could not queue"
        );
        return true;
    }
    if fleet.announced_waiting() > fleet.announced_in_flight_max() {
        log::info!(
            "Discovering again before the interval: {} nodes known only from startup events wait to be confirmed",
            fleet.announced_waiting()
        );
        return true;
    }
    false
}

/// What one discovery cycle did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cycle {
    /// New nodes queued.
    pub added: usize,
    /// Found nodes that did not fit, plus replies dropped unread (their nodes may
    /// not have been heard): either makes the next discovery come early.
    pub left_out: usize,
}

/// One discovery cycle: counts it, queues every identity found, and reports a full
/// queue once for the whole cycle.
pub(crate) fn cycle(fleet: &Fleet, discoverer: &dyn Discover) -> Cycle {
    if fleet.pause().paused() {
        log::warn!("Skipping discovery while paused");
        return Cycle::default();
    }
    if !fleet.owns_any() {
        log::debug!("Skipping discovery: this active-active instance owns no nodes now");
        return Cycle::default();
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
            return Cycle {
                added,
                left_out: full,
            };
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
    Cycle {
        added,
        left_out: full.saturating_add(usize::try_from(heard.dropped).unwrap_or(usize::MAX)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_ups_run_their_schedule_and_end_when_the_fleet_has_been_swept() {
        let t0 = Instant::now();
        let mut f = FollowUps::default();
        assert_eq!(f.due(), None);
        f.begin(t0, "test");
        assert_eq!(f.due(), Some(t0 + FOLLOW_UPS[0]));
        // Nobody back yet: the schedule goes on.
        assert!(f.done(0) && f.done(0));
        assert_eq!(f.due(), Some(t0 + FOLLOW_UPS[2]));
        // The fleet comes back, then two quiet ones end it.
        assert!(f.done(40));
        assert!(f.done(0));
        assert!(!f.done(0));
        assert_eq!(f.due(), None);
        // A start that found the fleet: two quiet follow-ups end it.
        f.begin(t0, "test");
        f.set_off(10_000);
        assert!(f.done(0));
        assert!(!f.done(0));
        // Never more than the schedule.
        f.begin(t0, "test");
        let runs = (0..100).take_while(|_| f.done(0)).count();
        assert_eq!(runs + 1, FOLLOW_UPS.len());
        f.begin(t0, "test");
        f.end();
        assert_eq!(f.due(), None);
    }
}
