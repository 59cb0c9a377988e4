//! The finisher: forgets identities whose cool-down has passed. It keeps no record
//! of its own: each cool-down is the state of the node's entry in the fleet's map
//! (`State::CoolingDown`, with what to do when it runs out), and the fleet knows
//! when the earliest runs out, so the finisher sleeps until then and walks the map
//! once for everything due (`Fleet::cooled_down`). A heap of due times, one entry
//! a node, was 4 MB of a 100,000-node run's peak.
//!
//! A finish is not a wake-up: the finisher sleeps until the earliest cool-down, and
//! at most the shorter of the cool-down and the lock window, so a cool-down that
//! begins while it sleeps is never missed; at a thousand nodes a second this saves
//! a thread wake-up per node.
//!
//! Nor is every due time a wake-up: the finisher sleeps at least its [`slack`] (a
//! 64th of that longest sleep, 250 ms at the default 60 s cool-down) and forgets
//! everything due by then in one walk, under one lock. A wake-up every 10 ms was a
//! whole percent of a core for the minute after a 100,000-node run, while those
//! nodes' cool-downs ran out. The lateness is invisible: `Fleet::add` treats a
//! cool-down that has run out as over, whether or not its entry was forgotten yet.
//!
//! A node found locked by another provisioner is offered to the workers again when
//! its lock window has passed (if it is still ours), not left for the next discovery.

use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::Fleet;

/// The shortest sleep, so that a cool-down of zero (tests) does not spin.
const MIN_SLEEP: Duration = Duration::from_millis(10);

/// The longest slack, whatever the cool-down.
const MAX_SLACK: Duration = Duration::from_millis(250);

/// How long the finisher sleeps at least, when its longest sleep is `longest`: a
/// 64th of it, between [`MIN_SLEEP`] and [`MAX_SLACK`].
pub(super) fn slack(longest: Duration) -> Duration {
    (longest / 64).clamp(MIN_SLEEP, MAX_SLACK)
}

/// The finisher's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    let longest = fleet.finisher_sleep();
    let slack = slack(longest);
    let audit = fleet.board().audit().cloned();
    loop {
        // The next cool-down, or the end of the audit trail's minute with quiet
        // attempts held for a summary, whichever comes first.
        let summary = audit.as_ref().and_then(|a| a.summary_due());
        let wait = fleet
            .next_cool_down()
            .into_iter()
            .chain(summary)
            .min()
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .min(longest)
            .max(slack);
        select! {
            recv(fleet.stop_rx) -> _ => return,
            default(wait) => {}
        }
        fleet.cooled_down(Instant::now());
        if let Some(audit) = &audit {
            audit.flush_quiet(false);
        }
    }
}
