//! The finisher: forgets identities whose cool-down has passed. One timer structure
//! (a min-heap of due times) serves every node, instead of Go's timer per host.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::Fleet;

/// The finisher's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    let mut due: BinaryHeap<Reverse<(Instant, u64, crate::choria::identity::Identity)>> =
        BinaryHeap::new();
    loop {
        let wait = due
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        select! {
            recv(fleet.done_rx) -> finish => match finish {
                Ok(f) => due.push(Reverse((f.at, f.generation, f.identity))),
                Err(_) => return,
            },
            recv(fleet.stop_rx) -> _ => return,
            default(wait) => {}
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            if let Some(Reverse((_, generation, identity))) = due.pop() {
                fleet.remove(&identity, generation);
            }
        }
    }
}
