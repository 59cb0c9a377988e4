//! The finisher: forgets identities whose cool-down has passed. One timer structure
//! (a min-heap of due times) serves every node, instead of Go's timer per host.
//!
//! A finish is not a wake-up: the finisher sleeps until the next due time, and at
//! most the shorter of the cool-down and the lock window, then takes every finish
//! sent meanwhile. Every finish is due one of those after it was sent, so none is
//! missed; at a thousand nodes a second this saves a thread wake-up per node.
//!
//! Nor is every due time a wake-up: the finisher sleeps at least its [`slack`] (a
//! 64th of that longest sleep, 250 ms at the default 60 s cool-down) and forgets
//! everything due by then in one batch, under one lock. A wake-up every 10 ms was a
//! whole percent of a core for the minute after a 100,000-node run, while those
//! nodes' cool-downs ran out. The lateness is invisible: `Fleet::add` treats a
//! cool-down that has run out as over, whether or not its entry was forgotten yet.
//!
//! A node found locked by another provisioner is offered to the workers again when
//! its lock window has passed (if it is still ours), not left for the next discovery.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::{AfterCoolDown, Fleet};

/// A finish in the heap: due time, entry generation, node, what to do then.
type Due = (
    Instant,
    u64,
    crate::choria::identity::Identity,
    AfterCoolDown,
);

/// The shortest sleep, so that a cool-down of zero (tests) does not spin.
const MIN_SLEEP: Duration = Duration::from_millis(10);

/// The longest slack, whatever the cool-down.
const MAX_SLACK: Duration = Duration::from_millis(250);

/// Finishes forgotten under one lock: the workers wait for the fleet's map at most
/// this many removals.
const BATCH: usize = 256;

/// How long the finisher sleeps at least, when its longest sleep is `longest`: a
/// 64th of it, between [`MIN_SLEEP`] and [`MAX_SLACK`].
pub(super) fn slack(longest: Duration) -> Duration {
    (longest / 64).clamp(MIN_SLEEP, MAX_SLACK)
}

/// The finisher's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut batch = Vec::with_capacity(BATCH);
    let longest = fleet.finisher_sleep();
    let slack = slack(longest);
    loop {
        let wait = due
            .peek()
            .map(|Reverse((at, _, _, _))| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .min(longest)
            .max(slack);
        select! {
            recv(fleet.stop_rx) -> _ => return,
            default(wait) => {}
        }
        for f in fleet.done_rx.try_iter() {
            due.push(Reverse((f.at, f.generation, f.identity, f.then)));
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse((at, _, _, _))| *at <= now) {
            if let Some(Reverse((_, generation, identity, then))) = due.pop() {
                batch.push((generation, identity, then));
            }
            if batch.len() == BATCH {
                fleet.cooled_down(&mut batch);
            }
        }
        if !batch.is_empty() {
            fleet.cooled_down(&mut batch);
        }
    }
}
