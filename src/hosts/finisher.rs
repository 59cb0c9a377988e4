//! The finisher: forgets identities whose cool-down has passed. One timer structure
//! (a min-heap of due times) serves every node, instead of Go's timer per host.
//!
//! A finish is not a wake-up: the finisher sleeps until the next due time, and at
//! most one cool-down, then takes every finish sent meanwhile. Every finish is due
//! one cool-down after it was sent, so none is taken late; at a thousand nodes a
//! second this saves a thread wake-up per node.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::Fleet;

/// The shortest sleep, so that a cool-down of zero (tests) does not spin.
const MIN_SLEEP: Duration = Duration::from_millis(10);

/// The finisher's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    let mut due: BinaryHeap<Reverse<(Instant, u64, crate::choria::identity::Identity)>> =
        BinaryHeap::new();
    loop {
        let wait = due
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .min(fleet.options.cooldown)
            .max(MIN_SLEEP);
        select! {
            recv(fleet.stop_rx) -> _ => return,
            default(wait) => {}
        }
        for f in fleet.done_rx.try_iter() {
            due.push(Reverse((f.at, f.generation, f.identity)));
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            if let Some(Reverse((_, generation, identity))) = due.pop() {
                fleet.remove(&identity, generation);
            }
        }
    }
}
