//! The lifecycle listener: startup events of `lifecycle_component` queue the node at
//! once, without waiting for the next discovery. Dropped while paused (standbys do
//! not buffer, as in Go). Events arrive decoded and validated
//! (`choria::lifecycle::subscribe_startups`): only valid identities get here.

use crossbeam_channel::{select, Receiver};

use super::{AddResult, Fleet, Source};
use crate::choria::identity::Identity;
use crate::throttle::Throttle;

/// Queues the identities from `events` until the fleet stops or `events` closes.
pub(crate) fn run(fleet: &Fleet, events: &Receiver<Identity>) {
    run_with(fleet, events, &|_| {});
}

/// [`run`], handing each node another instance owns to `not_ours` (active-active:
/// the queue group gave this instance an event for a node it does not own).
pub(crate) fn run_with(fleet: &Fleet, events: &Receiver<Identity>, not_ours: &dyn Fn(&Identity)) {
    let stopped = fleet.stopped();
    let warn_paused = Throttle::default();
    let warn_full = Throttle::default();
    loop {
        let identity = select! {
            recv(events) -> msg => match msg { Ok(p) => p, Err(_) => return },
            recv(stopped) -> _ => return,
        };
        if fleet.pause().paused() {
            if warn_paused.ready().is_some() {
                log::warn!("Skipping event processing while paused");
            }
            continue;
        }
        match fleet.add(&identity, Source::Event) {
            AddResult::QueueFull => {
                fleet.take_queue_full();
                if warn_full.ready().is_some() {
                    log::warn!(
                        "The work queue is full: startup events are not queued until it drains"
                    );
                }
            }
            AddResult::Added => log::debug!("Queued {identity} from its startup event"),
            AddResult::NotOurs => not_ours(&identity),
            AddResult::Known | AddResult::Stopping | AddResult::Refused | AddResult::Pending => {}
        }
    }
}
