//! The finisher: forgets identities whose cool-down has passed. One timer structure
//! (a min-heap of due times) serves every node, instead of Go's timer per host.
//!
//! A finish is not a wake-up: the finisher sleeps until the next due time, and at
//! most the shorter of the cool-down and the lock window, then takes every finish
//! sent meanwhile. Every finish is due one of those after it was sent, so none is
//! taken late; at a thousand nodes a second this saves a thread wake-up per node.
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

/// The finisher's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    loop {
        let wait = due
            .peek()
            .map(|Reverse((at, _, _, _))| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .min(fleet.finisher_sleep())
            .max(MIN_SLEEP);
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
                fleet.cooled_down(&identity, generation, then);
            }
        }
    }
}
