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

/// A finish in the heap, in 32 bytes (a 100,000-node run holds as many at once;
/// 48 bytes each were 6.3 MB): when it is due, in nanoseconds since the finisher
/// started; the entry's generation, with what to do then in its top bit
/// ([`pack`]); the node.
type Due = (u64, u64, crate::choria::identity::Identity);

/// The top bit of a packed generation: offer the node again when it is due.
/// Generations count from 1 and never come near it.
const OFFER: u64 = 1 << 63;

/// A generation and what to do when it is due, in one word.
fn pack(generation: u64, then: AfterCoolDown) -> u64 {
    match then {
        AfterCoolDown::Forget => generation & !OFFER,
        AfterCoolDown::Offer => generation | OFFER,
    }
}

/// [`pack`] undone.
fn unpack(packed: u64) -> (u64, AfterCoolDown) {
    let then = if packed & OFFER == 0 {
        AfterCoolDown::Forget
    } else {
        AfterCoolDown::Offer
    };
    (packed & !OFFER, then)
}

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
    let start = Instant::now();
    let since_start = |at: Instant| at.saturating_duration_since(start).as_nanos() as u64;
    loop {
        let wait = due
            .peek()
            .map(|Reverse((at, _, _))| {
                (start + Duration::from_nanos(*at)).saturating_duration_since(Instant::now())
            })
            .unwrap_or(Duration::MAX)
            .min(longest)
            .max(slack);
        select! {
            recv(fleet.stop_rx) -> _ => return,
            default(wait) => {}
        }
        for f in fleet.done_rx.try_iter() {
            due.push(Reverse((
                since_start(f.at),
                pack(f.generation, f.then),
                f.identity,
            )));
        }
        let now = since_start(Instant::now());
        while due.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            if let Some(Reverse((_, packed, identity))) = due.pop() {
                let (generation, then) = unpack(packed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_finish_is_32_bytes_and_what_to_do_then_survives_the_packing() {
        assert_eq!(std::mem::size_of::<Reverse<Due>>(), 32);
        for then in [AfterCoolDown::Forget, AfterCoolDown::Offer] {
            for generation in [1, 2, 1 << 40, OFFER - 1] {
                assert_eq!(unpack(pack(generation, then)), (generation, then));
            }
        }
    }
}
